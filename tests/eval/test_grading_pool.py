"""Worker start-up (issue 16): workers are forked warm from one zygote interpreter, the hard
per-call deadline still holds, and the pool survives the zygote's death."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from dsdr_eval.grading import spawn
from dsdr_eval.grading import GradingPool, grade_samples

pytestmark = pytest.mark.skipif(not spawn.CAN_FORK_WORKERS, reason="needs Linux pidfds and SCM_RIGHTS")


def _parent_pid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _rows(problem_id: str, gold: str, completions: list[str]) -> list[dict]:
    return [{"problem_id": problem_id, "gold": gold, "completion": c} for c in completions]


def test_workers_are_forked_from_one_zygote_and_a_killed_worker_is_replaced_by_a_fork():
    with GradingPool(grading_timeout_s=0.5, workers=2) as pool:
        zygote = pool.worker_pool.zygote
        assert zygote is not None and zygote.ready
        pids = [w.proc.pid for w in pool.worker_pool.workers]
        assert len(set(pids)) == 2 and all(_parent_pid(pid) == zygote.proc.pid for pid in pids)
        # 9!!!!!!! is stuck in C code (the worker's own timer cannot stop it): the parent's
        # deadline kills the worker, and the replacement is forked from the same zygote.
        graded = grade_samples(_rows("p", "5", [r"\boxed{9!!!!!!!}", r"\boxed{5}"]), pool=pool, progress=False)
        assert [r["status"] for r in graded] == ["timeout", "correct"] and "killed" in graded[0]["grade_note"]
        assert pool.worker_pool.respawns >= 1 and pool.worker_pool.zygote is zygote
        new_pids = [w.proc.pid for w in pool.worker_pool.workers]
        assert set(new_pids) != set(pids) and all(_parent_pid(pid) == zygote.proc.pid for pid in new_pids)
        for pid in set(pids) - set(new_pids):
            assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_pool_survives_the_death_of_its_zygote():
    with GradingPool(grading_timeout_s=5.0, workers=1) as pool:
        old = pool.worker_pool.zygote
        os.kill(old.proc.pid, signal.SIGKILL)  # its forked workers die with it (PDEATHSIG)
        old.proc.wait()
        deadline = time.monotonic() + 30
        while any(w.proc.poll() is None for w in pool.worker_pool.workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        graded = grade_samples(_rows("p", "7", [r"\boxed{7}", "Answer: 3"]), pool=pool, progress=False)
        # the worker died between calls (a broken pipe when sent the job): no item is charged
        assert [r["status"] for r in graded] == ["correct", "incorrect"]
        assert pool.worker_pool.zygote is not old
        graded = grade_samples(_rows("q", "2", [r"\boxed{2}", r"\boxed{3}"]), pool=pool, progress=False)
        assert [r["status"] for r in graded] == ["correct", "incorrect"]


def test_closing_the_pool_ends_zygote_and_workers():
    pool = GradingPool(grading_timeout_s=5.0, workers=2)
    procs = [pool.worker_pool.zygote.proc] + [w.proc for w in pool.worker_pool.workers]
    pool.close()
    assert all(proc.poll() is not None for proc in procs)


def test_a_hang_after_buffered_results_charges_exactly_the_hanging_item():
    """Workers batch their results (one pipe write per problem, or per 50 ms); a worker killed
    mid-problem loses what it had buffered, so the rest of the problem is rerun sending each
    result at once: the finished items keep their verdicts and only the hanging one is charged."""
    quick = [rf"\boxed{{{n}}}" for n in range(1, 13)]  # 12 fast answers, 5 among them
    rows = _rows("p", "5", quick + [r"\boxed{9!!!!!!!}", r"\boxed{\frac{10}{2}}"])
    rows += _rows("q", "7", [r"\boxed{7}"])
    with GradingPool(grading_timeout_s=0.5, workers=1) as pool:
        graded = grade_samples(rows, pool=pool, progress=False)
    expected = ["correct" if n == 5 else "incorrect" for n in range(1, 13)] + ["timeout", "correct", "correct"]
    assert [r["status"] for r in graded] == expected
    assert "killed" in graded[12]["grade_note"] and not any(r["grade_note"] for r in graded[:12])
    assert graded[4]["answer_class"] == graded[13]["answer_class"]


def test_workers_run_the_parents_grader_whatever_the_working_directory(tmp_path, monkeypatch):
    """`python -c` puts the cwd first on sys.path; a stray `dsdr_eval/` there must not be imported."""
    fake = tmp_path / "dsdr_eval"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('the stray copy in the working directory')\n")
    monkeypatch.chdir(tmp_path)
    graded = grade_samples(_rows("p", "5", [r"\boxed{5}", r"\boxed{6}"]), grading_timeout_s=5, workers=1, progress=False)
    assert [r["status"] for r in graded] == ["correct", "incorrect"]


def test_a_worker_whose_parent_died_before_it_armed_pdeathsig_exits():
    """The race behind the zygote-death failure under load: a freshly forked worker runs late,
    its zygote is killed first, and PR_SET_PDEATHSIG armed afterwards never fires -- the orphan
    served on. ``_die_with_parent`` must notice the parent is gone and exit."""
    from dsdr_eval.grading.worker import _die_with_parent

    reader, writer = os.pipe()
    middle = os.fork()
    if middle == 0:  # the "zygote": forks the "worker" and dies at once
        try:
            zygote = os.getpid()
            if os.fork() == 0:
                try:
                    os.close(reader)
                    deadline = time.monotonic() + 10
                    while os.getppid() == zygote and time.monotonic() < deadline:
                        time.sleep(0.01)  # until the parent is gone: the late-scheduled fork
                    _die_with_parent(zygote)
                    os.write(writer, b"survived")
                finally:
                    os._exit(0)
        finally:
            os._exit(0)
    os.close(writer)
    os.waitpid(middle, 0)
    with os.fdopen(reader, "rb") as pipe:
        assert pipe.read() == b""  # EOF: the orphan exited without serving


def test_a_forked_worker_dead_before_it_was_ready_is_forked_again():
    """What the zygote-death race leaves once orphans exit (above): a worker that dies before the
    parent read its "ready". It imported nothing itself (the zygote did), so it is no broken
    install: the pool forks another instead of failing the call."""
    with GradingPool(grading_timeout_s=5.0, workers=1) as pool:
        worker = pool.worker_pool.workers[0]
        worker.proc.kill()
        worker.proc.wait(timeout=30)
        try:
            while True:  # whatever it sent before dying, its "ready" included, is lost
                worker.conn.recv()
        except EOFError:
            pass
        assert not worker.ready
        graded = grade_samples(_rows("p", "7", [r"\boxed{7}", "Answer: 3"]), pool=pool, progress=False)
        assert [r["status"] for r in graded] == ["correct", "incorrect"] and pool.worker_pool.respawns == 1
