"""The names the run-directory schema gives to phases and benchmarks, in a leaf module (it imports
nothing of the project), so that every layer can use them without importing the layer that owns the
files: grading (which keys its rows by benchmark), protocols (whose phases are these) and the
run-directory schema itself (dsdr_eval.rundir.samples) all read them from here. Importing them from
``rundir`` closed a package cycle grading -> rundir -> protocols -> grading (issue 46).
"""

from __future__ import annotations

PASS1 = "pass1"  # the single low-temperature rollout of the paper's Pass@1
SAMPLING = "sampling"  # the n rollouts behind Avg@n, pass@k, maj@k and diversity
PHASES = (PASS1, SAMPLING)
DEFAULT_BENCHMARK = "default"  # a line without a benchmark
