"""The ``verl.plugins`` entry point: importing this module registers the plugin with verl.

verl imports it at the end of ``import verl`` and swallows any exception at DEBUG level, so a
broken plugin would silently train verl's built-ins: ``tests_verl/test_plugin_loads.py`` checks
that every name below is registered after a plain ``import verl``.
"""

from __future__ import annotations

from dsdr_train.integrations.verl import estimators, trainer

ESTIMATORS = tuple(estimators.ESTIMATOR_ALGOS)
TRAINER_MODES = (trainer.TRAINER_MODE,)
