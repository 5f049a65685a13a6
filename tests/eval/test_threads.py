"""The torch thread count (dsdr_eval.backends.threads, issue 46 item 1): chosen from the cores other work
leaves free, an explicit --threads / $OMP_NUM_THREADS wins, said in one line and recorded. The neighbour
test starts real CPU-bound processes, one per usable core, and checks the choice falls to 1 thread: no
timing is asserted, only what the kernel's idle counters say while they spin."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dsdr_eval.backends import threads as T
from dsdr_eval.cli import main


def test_an_explicit_setting_wins(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    chosen = T.choose_threads(cpus={0, 1, 2, 3}, measure=lambda cpus: 4.0)
    assert (chosen.threads, chosen.source) == (5, "$OMP_NUM_THREADS")
    assert T.choose_threads(3, cpus={0, 1}, measure=lambda cpus: 2.0).threads == 3  # --threads beats the env
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert T.choose_threads(cpus={0, 1, 2, 3}, measure=lambda cpus: 4.0).source == "free cores"


@pytest.mark.parametrize(("busy", "threads"), [(0.0, 8), (0.4, 8), (3.2, 5), (7.6, 1), (40.0, 1)])
def test_the_free_cores_are_the_usable_ones_less_the_busy_ones(monkeypatch, busy, threads):
    """Mutant 'free cores ignore the measured busy ones' (len(cpus)): the busy rows fail."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    chosen = T.choose_threads(cpus=set(range(8)), measure=lambda cpus: busy)
    assert chosen.threads == threads and chosen.cores == 8
    assert f"torch threads: {threads} of 8 usable cores" in chosen.line()
    assert chosen.to_record()["busy"] == round(min(busy, 8.0), 2)


def _spinners(n: int) -> list[subprocess.Popen]:
    """``n`` CPU-bound processes, returned once each has started spinning."""
    procs = [subprocess.Popen([sys.executable, "-c", "print('on', flush=True)\nwhile True: pass"],
                              stdout=subprocess.PIPE, text=True) for _ in range(n)]
    for proc in procs:
        assert proc.stdout.readline().strip() == "on"
    return procs


def test_the_choice_falls_to_one_thread_under_cpu_bound_neighbours(monkeypatch):
    """One spinning neighbour per usable core: the usable cores are busy, whatever else runs on the
    machine, so the choice is 1 thread (no more than without them). Mutants 'busy_now reads the idle
    column as busy' and 'choose_threads ignores the measurement': 2+ threads on a 2-core machine."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cpus = T.usable_cpus()
    if len(cpus) < 2 or T.busy_now(cpus, 0.05) is None:
        pytest.skip("needs 2+ usable cores and /proc/stat")
    before = T.choose_threads()
    procs = _spinners(len(cpus))
    try:
        busy = T.busy_now(cpus)
        during = T.choose_threads()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert busy is not None and busy >= len(cpus) - 0.5, busy
    assert during.threads == 1 and during.threads <= before.threads, (before, during)
    assert during.busy >= len(cpus) - 0.5


def test_run_says_and_records_its_choice(tmp_path, data_dir, capsys, monkeypatch):
    """`run --threads 1`: the line, and config.json's backend.threads (the fake engine of test_run_main_job).
    Mutant 'generate drops backend.threads when it writes the backend record': KeyError."""
    from helpers.fake_engine import BoxedOne

    from dsdr_eval.run import evaluation

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.setattr(evaluation, "make_backend", lambda plan, options: BoxedOne(plan.backend_name))
    assert main(["run", "--model", str(model), "--benchmarks", "math500", "--limit", "1", "--backend", "hf",
                 "--protocol", "greedy", "--data-dir", str(data_dir), "--out", str(tmp_path / "r"), "--threads", "1",
                 "--grading-workers", "1", "--no-progress"]) == 0
    assert "torch threads: 1 (--threads;" in capsys.readouterr().out
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert config["backend"]["threads"]["torch"] == 1 and config["backend"]["threads"]["source"] == "--threads"
