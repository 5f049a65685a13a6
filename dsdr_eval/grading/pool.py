"""The parent's side of grading: a pool of killable worker processes with a deadline per unit of work.

Workers are forked warm from one zygote interpreter (pidfds watch them; Linux >= 5.3), or, where
the platform lacks that, each is a fresh interpreter. Each unit of work -- each distinct answer with
its class comparisons -- must end within ``grading_timeout_s`` of the worker's own CPU time from its start, as
the worker's marker records it (``dsdr_eval.grading.marker``); a problem's gold gets its own bound
(``task.gold_budget_s``). The parent reads the worker's CPU clock (``worker_cpu_time``), so other
processes on the machine never spend a budget (issue 43: verdicts changed with the load); a unit
that runs ``WALL_BACKSTOP_FACTOR`` times its limit in wall time (a call stuck without running) is
killed too. No message can reset either deadline, so a problem costs at most its distinct answers x
``grading_timeout_s`` of CPU (issue 24). A worker past one is SIGKILLed and replaced, the answer in progress
is marked ``timeout`` (once: it is never rerun) and the rest of its problem is resubmitted. Each
worker holds ``_JOBS_IN_FLIGHT`` problems and sends its results batched (``dsdr_eval.grading.worker``).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Callable

from dsdr_eval.errors import DsdrError
from dsdr_eval.grading.marker import CLASS, GOLD, IDLE, VERDICT, MarkerBoard, new_marker_fd
from dsdr_eval.grading.spawn import (CAN_FORK_WORKERS, WORKER_MEMORY_LIMIT_BYTES, WORKER_STARTUP_TIMEOUT_S,
                                     ForkedProcess, Zygote, python_command, startup_exit, startup_timeout)
from dsdr_eval.grading.task import GOLD_EMPTY, GOLD_TIMEOUT, gold_budget_s
from dsdr_eval.grading.worker import PipePair

# A worker that has not begun the problem sent to it is starved, not hung (nothing slow runs outside
# a unit of work); at load ~19 on 2 cores, killing such forks at the timeout made problems "error".
WORKER_PICKUP_TIMEOUT_S = 60.0
# The wall-clock backstop of a unit's CPU limit: a call stuck without running (its CPU clock does not
# move) is killed after this multiple of the limit, never sooner than WALL_BACKSTOP_MIN_S. Generous:
# on 2 cores shared by 20 runnable processes a unit gets ~1/10 of a core, and a kill decided by the
# wall clock would make the verdict depend on the load again.
WALL_BACKSTOP_FACTOR = 20.0
WALL_BACKSTOP_MIN_S = 60.0
GOLD_KILL_MARGIN_S = 1.0  # the parent kills a gold's parse this long after the worker's own budget


def wall_backstop_s(limit_s: float) -> float:
    return max(WALL_BACKSTOP_MIN_S, WALL_BACKSTOP_FACTOR * limit_s)


def worker_cpu_time(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used: its POSIX CPU clock, the clock its own
    ``time.process_time()`` reads. None where the platform has no such clock or the process is gone."""
    try:
        return time.clock_gettime(((~pid) << 3) | 2)  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED), Linux
    except (AttributeError, OSError, OverflowError):
        return None


@dataclass
class ProblemJob:
    job_id: int
    gold: tuple  # answer_norm.wire_gold(...)
    answers: list[str]  # distinct extracted answers (<= MAX_ANSWER_CHARS), first-appearance order
    weights: list[int]  # how many samples carry each answer (for progress)
    forms: list[tuple]  # answer_norm.wire_answer(...) of each answer
    rel_tol: float
    status: list[str | None] = field(default_factory=list)
    class_ref: list[int | None] = field(default_factory=list)
    is_rep: list[bool] = field(default_factory=list)
    notes: list[str | None] = field(default_factory=list)
    gold_failed: bool = False
    gold_done: bool = False  # the worker reported on the gold parse
    gold_note: str | None = None
    blind_kills: int = 0  # kills that the worker's marker could not place within this problem
    gold_kills: int = 0

    def __post_init__(self) -> None:
        n = len(self.answers)
        self.status, self.class_ref, self.is_rep, self.notes = [None] * n, [None] * n, [False] * n, [None] * n

    def next_index(self) -> int:
        for i, ref in enumerate(self.class_ref):
            if ref is None:
                return i
        return len(self.answers)

    def task(self) -> tuple:
        start = self.next_index()
        known = [(j, self.status[j], self.class_ref[j], self.is_rep[j]) for j in range(len(self.answers))
                 if self.class_ref[j] is not None]
        return (self.job_id, self.gold, self.forms, start, known, self.gold_failed, self.rel_tol)


@dataclass
class _Worker:
    proc: subprocess.Popen | ForkedProcess
    conn: PipePair
    marker: MarkerBoard
    deadline: float  # of its start-up
    ready: bool = False
    queued: deque = field(default_factory=deque)  # jobs sent, in order; the first is in progress
    sent_at: float = 0.0  # when it was last sent a job while idle: work starts no earlier

    @property
    def job(self) -> ProblemJob | None:
        return self.queued[0] if self.queued else None


# Jobs sent to a worker ahead of time, so it starts the next problem without waiting for the
# parent to read its "done" and answer (a scheduling round trip per problem on a loaded machine,
# as long as grading a one-sample problem). Only the first one is ever in progress.
_JOBS_IN_FLIGHT = 2
_MAX_STARTUP_DEATHS = 3


class WorkerPool:
    """Long-lived workers; the parent enforces a deadline per math-verify call.

    Start-up (issue 16): one zygote interpreter imports math-verify while the caller extracts
    answers; the workers are forked from it, warm, when the first ``run`` needs them (or at once
    with ``start_workers``), and every replacement of a killed worker is a fork too. Without
    fork support each worker is its own interpreter, started in ``__init__``."""

    def __init__(self, n_workers: int, grading_timeout_s: float) -> None:
        self.grading_timeout_s = grading_timeout_s
        # The worker's own budget per unit (grading.budget) ends a second (at most a fifth) before
        # the hard deadline, so a merely slow answer ends as "timeout" without a worker respawn.
        self.inner_timeout_ms = max(1, int(1000 * (grading_timeout_s - min(1.0, 0.2 * grading_timeout_s))))
        self.on_progress: Callable[[int], None] = lambda n: None
        self.n_workers = n_workers
        self.zygote: Zygote | None = Zygote(self.inner_timeout_ms) if CAN_FORK_WORKERS else None
        self.workers: list[_Worker] = [] if self.zygote else [self._spawn() for _ in range(n_workers)]
        self.respawns = 0
        self.startup_deaths = 0  # forked workers dead before "ready", in a row

    def start_workers(self) -> None:
        """Block until all workers exist (they are forked from the zygote once it is warm)."""
        while len(self.workers) < self.n_workers:
            self.workers.append(self._spawn())

    def _spawn(self) -> _Worker:
        marker_fd = new_marker_fd()
        try:
            marker = MarkerBoard(marker_fd)
            proc, conn = self._start_worker(marker_fd)
        finally:
            os.close(marker_fd)  # the worker has its copy, the parent its mapping
        return _Worker(proc, conn, marker, time.monotonic() + WORKER_STARTUP_TIMEOUT_S)

    def _start_worker(self, marker_fd: int) -> tuple[subprocess.Popen | ForkedProcess, PipePair]:
        if self.zygote is not None:
            try:
                return self.zygote.fork(marker_fd)
            except (OSError, EOFError):  # the zygote died (e.g. the OOM killer): start another
                self.zygote.close()
                self.zygote = Zygote(self.inner_timeout_ms)
                return self.zygote.fork(marker_fd)
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        proc = subprocess.Popen(
            python_command("_worker_entry", to_child_r, from_child_w, marker_fd, self.inner_timeout_ms,
                            WORKER_MEMORY_LIMIT_BYTES, os.getpid()),
            pass_fds=(to_child_r, from_child_w, marker_fd), stdin=subprocess.DEVNULL, close_fds=True)
        os.close(to_child_r)
        os.close(from_child_w)
        return proc, PipePair(from_child_r, to_child_w)

    def run(self, jobs: list[ProblemJob]) -> None:
        try:
            self.start_workers()
            self._run(jobs)
        except BaseException:
            # A call interrupted mid-run (Ctrl-C, a signal handler's exception, a start-up
            # DsdrError of another worker) leaves busy workers whose remaining messages name this
            # call's job ids. With a GradingPool the next call numbers its jobs from 0 again, so
            # those stale messages were applied to the wrong problems (measured: the next call's
            # "\boxed{7}" with gold 7 came back "timeout" and "Answer: 3" "correct") or raised
            # KeyError / IndexError. Kill and replace every busy worker so the pool stays usable.
            self._abandon_busy_workers()
            raise

    def _abandon_busy_workers(self) -> None:
        for index, worker in enumerate(self.workers):
            if worker.job is not None:
                self._kill(worker)
                worker.marker.close()
                self.workers[index] = self._spawn()
                self.respawns += 1

    def _run(self, jobs: list[ProblemJob]) -> None:
        pending: deque[ProblemJob] = deque(sorted(jobs, key=lambda job: -len(job.answers)))
        by_id = {job.job_id: job for job in jobs}
        while pending or any(w.job is not None for w in self.workers):
            for worker in list(self.workers):
                while worker.ready and len(worker.queued) < _JOBS_IN_FLIGHT and pending:
                    job = pending.popleft()
                    if not worker.queued:
                        worker.sent_at = time.monotonic()
                    worker.queued.append(job)
                    try:
                        worker.conn.send(job.task())
                    except OSError:  # died: this job goes back unharmed, the one in progress is charged
                        worker.queued.pop()
                        pending.appendleft(job)
                        self._replace(worker, pending, reason="error", note="grader worker died")
                        break
            now = time.monotonic()
            watched = [self._wake_at(w, now) for w in self.workers if w.job is not None or not w.ready]
            wait_s = max(0.0, min(watched) - now) if watched else None
            readable = wait([w.conn.reader for w in self.workers], timeout=wait_s)
            for reader in readable:
                worker = next(w for w in self.workers if w.conn.reader is reader)
                conn = worker.conn.reader
                try:
                    while True:  # drain everything already sent
                        message = conn.recv()
                        for item in message if isinstance(message, list) else (message,):
                            self._handle(worker, item, by_id)
                        if not conn.poll():
                            break
                except (EOFError, OSError):
                    if not worker.ready and not self._may_refork(worker):
                        raise startup_exit(worker.proc.wait()) from None
                    self._replace(worker, pending, reason="error",
                                  note="grader worker died (crash or out of memory)")
            now = time.monotonic()
            for worker in list(self.workers):
                if worker.job is None and worker.ready:
                    continue
                if not worker.ready:
                    if now > worker.deadline:
                        raise startup_timeout()
                    continue
                overdue = self._overdue(worker, now)
                if overdue is not None:
                    self._replace(worker, pending, reason="timeout", note=overdue)

    def _may_refork(self, worker: _Worker) -> bool:
        """A forked worker that dies before it is ready was killed with its zygote (it exits at
        once when the zygote died before it armed PDEATHSIG, ``worker._die_with_parent``): fork
        another from a new zygote. It imported nothing itself, so this is no broken install;
        a few such deaths in a row are, though."""
        self.startup_deaths += 1
        return isinstance(worker.proc, ForkedProcess) and self.startup_deaths <= _MAX_STARTUP_DEATHS

    def _unit_limit_s(self, phase: int) -> float:
        """CPU seconds the unit in progress may use: a gold's own bound, else an answer's timeout."""
        return gold_budget_s(self.grading_timeout_s) + GOLD_KILL_MARGIN_S if phase == GOLD else self.grading_timeout_s

    def _overdue(self, worker: _Worker, now: float) -> str | None:
        """Why the busy ``worker`` must be killed now, or None. At work: the unit in progress (the
        marker of one of its problems) has used its limit of the worker's CPU time since its start,
        or ``wall_backstop_s`` of wall time, whatever it sends; before it begins a problem sent to
        it, ``WORKER_PICKUP_TIMEOUT_S`` from the sending."""
        marker = worker.marker.read()
        if self._marked_job(worker, marker) is None:
            if now > worker.sent_at + max(self.grading_timeout_s, WORKER_PICKUP_TIMEOUT_S):
                return f"a grading worker did not begin its problem within {WORKER_PICKUP_TIMEOUT_S:g} s; worker killed"
            return None
        what = "the gold's parse" if marker.phase == GOLD else "an answer's grading call"
        limit = self._unit_limit_s(marker.phase)
        cpu = worker_cpu_time(worker.proc.pid)
        if cpu is not None and cpu - marker.cpu_started > limit:
            return f"{what} used more than {limit:g} s of CPU time; worker killed"
        if now > marker.started + wall_backstop_s(limit):
            return (f"{what} did not finish within {wall_backstop_s(limit):g} s of wall time (the backstop of its "
                    f"{limit:g} s CPU limit); worker killed")
        return None

    def _wake_at(self, worker: _Worker, now: float) -> float:
        """When ``worker`` could next be overdue (a hanging unit sends nothing to wake us): its
        start-up deadline; soon while it has not begun its problem (a 0.5 s timeout waited 60 s);
        at work, when its unit would use up its CPU limit (a CPU clock runs no faster than the wall
        clock in a single-threaded worker) or reach its wall backstop."""
        if not worker.ready:
            return worker.deadline
        marker = worker.marker.read()
        if self._marked_job(worker, marker) is None:
            pickup = worker.sent_at + max(self.grading_timeout_s, WORKER_PICKUP_TIMEOUT_S)
            return min(pickup, now + min(0.1, self.grading_timeout_s / 5))
        limit = self._unit_limit_s(marker.phase)
        backstop = marker.started + wall_backstop_s(limit)
        cpu = worker_cpu_time(worker.proc.pid)
        if cpu is None:
            return backstop
        return min(backstop, now + max(0.005, limit - (cpu - marker.cpu_started)))

    @staticmethod
    def _marked_job(worker: _Worker, marker) -> ProblemJob | None:
        """The problem sent to ``worker`` whose unit its marker shows in progress, if any."""
        if marker is None or marker.phase == IDLE:
            return None
        return next((job for job in worker.queued if job.job_id == marker.task_id), None)

    def _handle(self, worker: _Worker, message: tuple, by_id: dict[int, ProblemJob]) -> None:
        kind = message[0]
        if kind == "ready":
            worker.ready = True
            self.startup_deaths = 0
            return
        job = worker.job
        if job is None or by_id.get(message[1]) is not job:
            # Every message after "ready" is about the job this worker was sent; anything else is
            # stale (see ``run``) and must not touch this call's results.
            return
        if kind == "gold":
            job.gold_done = True
            if message[2] is not None and not job.gold_failed:
                job.gold_failed = True
                job.gold_note = self._gold_note(message[2])
        elif kind == "verdict":
            _, _, i, status = message
            job.status[i] = status
            if status == "error" and job.gold_note:
                job.notes[i] = job.gold_note
            self.on_progress(job.weights[i])
        elif kind == "class":
            _, _, i, class_ref, is_rep, note = message
            job.class_ref[i], job.is_rep[i] = class_ref, is_rep
            if note and not job.notes[i]:
                job.notes[i] = note
        elif kind == "done":
            worker.queued.popleft()

    def _gold_note(self, failure: str) -> str:
        """Why a gold cannot be graded against (``task``'s failure): a timeout is said to be one."""
        if failure == GOLD_TIMEOUT:
            return (f"the gold answer could not be parsed: its parse timed out (its own budget of "
                    f"{gold_budget_s(self.grading_timeout_s):g} s of CPU time ran out)")
        if failure == GOLD_EMPTY:
            return "the gold answer could not be parsed: math-verify extracted nothing from it"
        return f"the gold answer could not be parsed ({failure})"

    def _replace(self, worker: _Worker, pending: deque, *, reason: str, note: str) -> None:
        """Kill ``worker``, charge the unit it was on (its marker says which), resubmit the rest
        of its problem (and, unharmed, the problems queued behind it)."""
        self._kill(worker, drain=True)  # what it sent before it died still counts
        marker = worker.marker.read()  # final: the worker is dead
        worker.marker.close()
        self.workers[self.workers.index(worker)] = self._spawn()
        self.respawns += 1
        job = self._marked_job(worker, marker) or worker.job
        pending.extendleft(reversed([other for other in worker.queued if other is not job]))  # unharmed
        if job is None:
            return
        index, phase, verdict = self._culprit(job, marker)
        if phase == GOLD:
            # died on the gold itself: grade the problem as failed-gold (status error) rather
            # than charge an innocent sample -- at the second kill: a load spike is no bad gold
            job.gold_kills += 1
            if job.gold_kills >= 2:
                job.gold_failed = True
                job.gold_note = f"gold answer could not be parsed ({note})"
        elif phase in (VERDICT, CLASS):
            # Results the worker had batched but not sent are lost; they are rerun. The unit in
            # progress is charged here and never rerun: a second run would cost a second timeout.
            if job.status[index] is None:
                if phase == CLASS and verdict is not None:
                    job.status[index] = verdict
                    job.notes[index] = f"answer-class comparison failed ({note})"
                else:
                    job.status[index] = reason
                    job.notes[index] = note
                self.on_progress(job.weights[index])
            else:
                job.notes[index] = f"answer-class comparison failed ({note})"
            job.class_ref[index] = index  # a singleton class, never again compared against
            job.is_rep[index] = False
        if job.next_index() < len(job.answers):
            pending.appendleft(job)

    @staticmethod
    def _culprit(job: ProblemJob, marker) -> tuple[int, int, str | None]:
        """-> (answer index, phase, verdict) the dead worker was on within ``job``. A marker of
        another problem (or none) places nothing: the problem is rerun, and a second such kill
        charges its first unfinished answer (a worker that dies before it marks anything must
        not loop forever)."""
        if marker is not None and marker.task_id == job.job_id and marker.phase != IDLE:
            if marker.phase == GOLD and not job.gold_done:  # done: re-parsing representatives
                return -1, GOLD, None
            if marker.phase != GOLD and job.class_ref[marker.index] is None:
                return marker.index, marker.phase, marker.verdict
        job.blind_kills += 1
        if job.blind_kills < 2:
            return -1, IDLE, None
        if not job.gold_done:
            return -1, GOLD, None
        i = job.next_index()
        return (i, VERDICT, None) if i < len(job.answers) else (-1, IDLE, None)

    def _kill(self, worker: _Worker, drain: bool = False) -> None:
        try:
            worker.proc.kill()
            worker.proc.wait(timeout=10)
            if drain:  # messages still in the pipe (a dead writer's data stays readable)
                by_id = {job.job_id: job for job in worker.queued}
                while worker.conn.poll():
                    message = worker.conn.recv()
                    for item in message if isinstance(message, list) else (message,):
                        self._handle(worker, item, by_id)
        except (subprocess.TimeoutExpired, EOFError, OSError):
            pass
        finally:
            worker.conn.close()

    def close(self) -> None:
        # Workers hold nothing worth flushing; SIGKILL is instant, where a polite exit spends
        # ~0.5 s per worker tearing down sympy.
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.proc.kill()
        for worker in self.workers:
            worker.proc.wait()
            worker.conn.close()
            worker.marker.close()
        if self.zygote is not None:
            self.zygote.close()


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class GradingPool:
    """Grading workers kept alive across ``grade_samples`` calls (e.g. one call per RL step), so
    the ~1-2 s interpreter start-up is paid once::

        with GradingPool(grading_timeout_s=5.0, workers=2) as pool:
            for batch in batches:
                graded = grade_samples(batch, pool=pool)
    """

    def __init__(self, *, grading_timeout_s: float = 5.0, workers: int | None = None) -> None:
        if grading_timeout_s <= 0:
            raise DsdrError(f"grading timeout must be > 0 s (got {grading_timeout_s})")
        self.grading_timeout_s = grading_timeout_s
        self.workers = max(1, workers or default_workers())
        self.worker_pool: WorkerPool | None = WorkerPool(self.workers, grading_timeout_s)
        self.worker_pool.start_workers()  # a long-lived pool pays its start-up here, once

    def close(self) -> None:
        if self.worker_pool is not None:
            self.worker_pool.close()
            self.worker_pool = None

    def __enter__(self) -> "GradingPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
