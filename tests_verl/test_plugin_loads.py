"""The entry point registers every estimator and the trainer mode on a plain `import verl`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, sys
import verl
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
out = {"estimators": sorted(ADV_ESTIMATOR_REGISTRY), "plugin": "dsdr_train.integrations.verl.plugin" in sys.modules,
       "trainer_module": "dsdr_train.integrations.verl.trainer" in sys.modules}
if out["plugin"]:
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
    out["trainers"] = sorted(TRAINER_REGISTRY)
print(json.dumps(out))
"""
NAMES = ["darling", "dsdr", "dsdr_wo_gc", "dsdr_wo_gd", "grpo_pop_std"]


def _probe(policy: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_USE_EXTERNAL_PLUGINS", "VERL_USE_EXTERNAL_MODULES")}
    if policy is not None:
        env["VERL_USE_EXTERNAL_PLUGINS"] = policy
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def loaded() -> dict:
    return _probe(None)


def test_import_verl_registers_the_plugin(loaded):
    assert loaded["plugin"]
    assert set(NAMES) <= set(loaded["estimators"])
    assert "dsdr_sync" in loaded["trainers"]


def test_the_names_come_from_the_entry_point_not_from_elsewhere():
    # verl's own switch: with entry points off nothing of the plugin is registered
    off = _probe("none")
    assert not off["plugin"]
    assert not set(NAMES) & set(off["estimators"])
    assert not off["trainer_module"]  # so trainer mode dsdr_sync is not registered either
