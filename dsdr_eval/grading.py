"""Answer extraction and math-verify grading in a pool of killable worker processes.

Pipeline (all of it safe against hostile completions: nothing is ever evaluated as code):

1. ``extract_answer`` (``dsdr_eval.extraction``; parent, linear time): the last ``\\boxed{...}`` / ``\\boxed x`` /
   ``\\fbox{...}`` with real brace matching; otherwise the last "Answer: ..." / "final answer
   is ..." line. Answers longer than ``MAX_ANSWER_CHARS`` are recorded truncated and graded
   incorrect without being parsed.
2. Per problem: the gold answer is parsed once (wrapped in ``\\boxed{}`` -- math-verify does not
   extract bare LaTeX); each *distinct* extracted answer is parsed and verified once.
3. Answer classes: correct answers form one class (the gold's); every other distinct answer is
   matched to the class representatives, first by a cheap normalised-string key, then (unless
   both are unequal integers) by ``math_verify.verify(rep, answer)``; no match opens a new class.
4. All math-verify calls run in long-lived worker processes fed over pipes. Every call must
   report back within ``timeout_s``; a worker that does not is SIGKILLed and replaced, the item
   is marked ``timeout`` and the rest of its problem is resubmitted. (math-verify's own
   ``signal.alarm`` timeouts also run -- workers are main threads -- and catch most slow cases
   without a respawn; its ``TimeoutException`` is a BaseException and is caught here.)
"""

from __future__ import annotations

import logging
import math
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Callable, Iterable

from dsdr_eval import answer_norm
from dsdr_eval.answer_norm import GradingOptions
from dsdr_eval.errors import DsdrError
from dsdr_eval.samples import DEFAULT_BENCHMARK
from dsdr_eval.extraction import (  # noqa: F401 -- re-exported: grading is the public entry point
    EXTRACTION_RULES_VERSION, MAX_ANSWER_CHARS, Extraction, answer_key, extract_answer, extract_answer_with_method)

STATUSES = ("correct", "incorrect", "no_answer", "timeout", "error")
WORKER_MEMORY_LIMIT_BYTES = 4 * 1024**3  # RLIMIT_AS per worker: 9^{9^{9^9}} must not eat the machine
WORKER_STARTUP_TIMEOUT_S = 180.0  # importing sympy/math-verify on a busy 2-core machine
GOLD_CLASS = -1

# --- 2. the worker process ------------------------------------------------------------------

def _wrap(answer: str) -> str:
    return "\\boxed{" + answer + "}"


class _PipePair:
    """Two one-way multiprocessing Connections over OS pipes, used like one duplex Connection."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.reader = Connection(read_fd, writable=False)
        self.writer = Connection(write_fd, readable=False)

    def send(self, obj: Any) -> None:
        self.writer.send(obj)

    def recv(self) -> Any:
        return self.reader.recv()

    def poll(self, timeout: float = 0.0) -> bool:
        return self.reader.poll(timeout)

    def close(self) -> None:
        for conn in (self.reader, self.writer):
            try:
                conn.close()
            except OSError:
                pass


def _worker_entry(read_fd: int, write_fd: int, inner_timeout_s: int, memory_limit_bytes: int) -> None:
    _worker_main(_PipePair(read_fd, write_fd), inner_timeout_s, memory_limit_bytes or None)


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the parent dies, even mid-computation (no orphans)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _worker_main(conn: "_PipePair", inner_timeout_s: int, memory_limit_bytes: int | None) -> None:
    """Loop: receive a problem task, stream results back; exit on None or a closed pipe."""
    _serve(conn, _prepare_worker_process(inner_timeout_s, memory_limit_bytes))


def _prepare_worker_process(inner_timeout_s: int, memory_limit_bytes: int | None) -> tuple[Callable, ...]:
    """Signals, limits, math-verify import and warm-up of a worker (or of the zygote that forks
    workers) -> the (parse, verify, clearly_different) functions ``_run_task`` uses."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    _die_with_parent()
    if memory_limit_bytes:
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
        except (ImportError, ValueError, OSError):
            pass
    import math_verify
    import sympy
    from latex2sympy2_extended import NormalizationConfig

    # math-verify's own unit stripping drops variables such as m, h, s, t, c from golds (6m -> 6);
    # units are handled by answer_norm's "units" rule, which only applies to numeric golds.
    parse_config = [math_verify.LatexExtractionConfig(normalization_config=NormalizationConfig(
        basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="all", equations=False)),
        math_verify.ExprExtractionConfig()]

    timeouts = _TimeoutFlag()
    mv_logger = logging.getLogger("math_verify")
    mv_logger.addHandler(timeouts)
    mv_logger.setLevel(logging.WARNING)
    mv_logger.propagate = False  # math-verify logs the whole (possibly huge) input on timeouts
    cache: dict[str, tuple[list, bool]] = {}

    def parse(answer: str) -> tuple[list, bool]:
        """-> (parsed, timed_out); cached per process."""
        if answer in cache:
            return cache[answer]
        timeouts.raised = False
        try:
            parsed = math_verify.parse(_wrap(answer), extraction_config=parse_config,
                                       parsing_timeout=inner_timeout_s)
        except BaseException:  # noqa: BLE001 -- TimeoutException is a BaseException
            parsed = []
            timeouts.raised = True
        result = (parsed, timeouts.raised)
        if len(cache) > 20000:
            cache.clear()
        cache[answer] = result
        return result

    imaginary = sympy.Symbol("i")

    def verify(gold: list, pred: list, rel_tol: float | None = None,
               imaginary_unit: bool = False) -> tuple[bool, bool]:
        """-> (equal, timed_out). Two plain numbers: relative tolerance ``rel_tol`` (rule
        numeric_rel_tol) instead of math-verify's rounding to 6 decimals."""
        timeouts.raised = False
        try:
            if imaginary_unit:  # rule imaginary_unit: every symbol named i is sympy's I
                gold, pred = ([_with_imaginary_unit(x) for x in side] for side in (gold, pred))
            pred = _same_named_symbols(gold, pred)
            if rel_tol is not None:
                numbers = _real_numbers(gold, pred)
                if numbers is not None:
                    a, b = numbers
                    return abs(a - b) <= rel_tol * max(abs(a), abs(b)), False
            equal = bool(math_verify.verify(gold, pred, timeout_seconds=inner_timeout_s))
        except BaseException:  # noqa: BLE001
            return False, True
        return equal, timeouts.raised

    def _same_named_symbols(gold: list, pred: list) -> list:
        # Rule symbol_names: latex2sympy gives a symbol different assumptions depending on the
        # context ("5 i" vs "5i"), and sympy then calls identical expressions unequal.
        by_name = {s.name: s for x in gold if isinstance(x, sympy.Basic) for s in x.free_symbols
                   if isinstance(s, sympy.Symbol)}
        out = []
        for x in pred:
            if isinstance(x, sympy.Basic):
                subs = {s: by_name[s.name] for s in x.free_symbols
                        if isinstance(s, sympy.Symbol) and s.name in by_name and by_name[s.name] != s}
                x = x.xreplace(subs) if subs else x
            out.append(x)
        return out

    def _with_imaginary_unit(expr):
        if not isinstance(expr, sympy.Basic):
            return expr
        subs = {s: sympy.I for s in expr.free_symbols if getattr(s, "name", None) == "i"}
        return expr.xreplace(subs) if subs else expr

    def _real_numbers(gold: list, pred: list) -> tuple[float, float] | None:
        values = []
        for side in (gold, pred):
            expr = side[0] if side else None
            if not isinstance(expr, sympy.Expr) or expr.free_symbols or not expr.is_number:
                return None
            if any(not (p.exp.is_Number and abs(p.exp) <= 400) for p in expr.atoms(sympy.Pow)):
                return None  # 9^{9^{9^9}}: never evaluate outside math-verify's own timeout
            try:
                value = complex(expr.evalf(30))
            except (TypeError, ValueError, OverflowError):
                return None
            if value.imag != 0 or not math.isfinite(value.real):
                return None
            values.append(value.real)
        return values[0], values[1]

    def clearly_different(a: list, b: list) -> bool:
        # Two plain numbers that differ by far more than math-verify's rounding (6 decimals) are
        # never verify-equal (numeric comparison fails, and so does the string comparison of
        # their different spellings), so skip the call: numeric classes are then almost free.
        if not (a and b and isinstance(a[0], sympy.Number) and isinstance(b[0], sympy.Number)):
            return False
        if isinstance(a[0], sympy.Integer) and isinstance(b[0], sympy.Integer):
            return a[0] != b[0]
        try:
            x, y = float(a[0]), float(b[0])
        except (TypeError, ValueError, OverflowError):
            return False
        return abs(x - y) > 1e-4 * max(1.0, abs(x), abs(y))

    # Warm up (lazy ANTLR/latex2sympy imports) so a short deadline never kills a fresh worker.
    verify(parse("\\frac{1}{2}")[0], parse("0.5")[0])
    cache.clear()
    return parse, verify, clearly_different


_FLUSH_INTERVAL_S = 0.05


class _BatchingSender:
    """What ``_run_task`` sends, batched into one pipe write per problem (a one-sample problem
    sends five messages, and every write wakes the parent: on 2 busy cores those wake-ups cost
    more than the grading). Buffered messages also go out whenever ``_FLUSH_INTERVAL_S`` has
    passed, so a long healthy problem keeps resetting the parent's deadline. A worker killed
    while it held buffered results loses them, so the parent reruns such a problem ``eager``
    (every message sent at once) before it charges any item (see ``_WorkerPool._replace``)."""

    def __init__(self, conn: "_PipePair") -> None:
        self.conn = conn
        self.eager = False
        self.buffer: list[tuple] = []
        self.flushed_at = time.monotonic()

    def send(self, message: tuple) -> None:
        self.buffer.append(message)
        now = time.monotonic()
        if self.eager or message[0] == "done" or now - self.flushed_at >= _FLUSH_INTERVAL_S:
            self.conn.send(self.buffer)
            self.buffer, self.flushed_at = [], now


def _serve(conn: "_PipePair", grader: tuple[Callable, ...]) -> None:
    conn.send(("ready", os.getpid()))
    sender = _BatchingSender(conn)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        sender.eager, task = message
        _run_task(task, sender, *grader)


def _zygote_entry(control_fd: int, inner_timeout_s: int, memory_limit_bytes: int) -> None:
    """A warmed-up template worker: imports math-verify once, then forks a ready worker per
    request (a byte on the control socket) and hands the parent the worker's pipe ends and pid
    (SCM_RIGHTS). Forking costs milliseconds, where each fresh interpreter costs ~2 s of CPU
    importing sympy -- the fixed cost that made small files slower than a serial loop (issue 16).
    The zygote is single-threaded and never grades, so forking it is safe."""
    grader = _prepare_worker_process(inner_timeout_s, memory_limit_bytes or None)
    control = socket.socket(fileno=control_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked workers are reaped by the kernel
    control.sendall(b"R")
    while True:
        try:
            request = control.recv(1)
        except OSError:
            return
        if not request:
            return
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: already imported and warm
            try:
                control.close()
                os.close(to_child_w)
                os.close(from_child_r)
                _die_with_parent()  # cleared by fork; the zygote itself dies with the caller
                _serve(_PipePair(to_child_r, from_child_w), grader)
            finally:
                os._exit(0)
        os.close(to_child_r)
        os.close(from_child_w)
        try:
            socket.send_fds(control, [pid.to_bytes(8, "little")], [from_child_r, to_child_w])
        except OSError:
            return
        finally:
            os.close(from_child_r)
            os.close(to_child_w)


class _TimeoutFlag(logging.Handler):
    """Notes math-verify's "Timeout during parsing/comparison" warnings (it returns [] / False)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.raised = False

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Timeout"):
            self.raised = True


def _run_task(task: tuple, conn: _PipePair, parse, verify, clearly_different) -> None:
    """One problem: parse the gold, then verdict + class for answers[start:], streaming results.

    ``gold`` and ``answers`` are answer_norm's wire forms: (text, mode, items, imaginary_unit) and
    (text, items, verdict). Messages: ("gold", tid, ok), ("tick", tid) after each math-verify call,
    ("verdict", tid, i, status), ("class", tid, i, class_ref, is_rep), ("done", tid). class_ref is
    GOLD_CLASS or the index of the answer representing the class."""
    task_id, gold, answers, start, known, gold_failed, rel_tol = task
    gold_text, mode, gold_items, imaginary_unit = gold
    gold_parsed: list = []
    if not gold_failed:
        gold_parsed, _ = parse(gold_text)
        gold_failed = not gold_parsed or any(not parse(item)[0] for item in gold_items)
    conn.send(("gold", task_id, not gold_failed))

    def items_equal(g: str, a: str) -> tuple[bool, bool]:
        """Rule ordered_list inside one item: (a, b) against (a', b') element by element."""
        g_tuple, a_tuple = answer_norm.unwrap_tuple(g), answer_norm.unwrap_tuple(a)
        if g_tuple and a_tuple and g_tuple[0] == a_tuple[0] == "(":
            g_parts, a_parts = (answer_norm.split_top_level(t[1]) for t in (g_tuple, a_tuple))
            if len(g_parts) != len(a_parts):
                return False, False
            timed_out = False
            for g_part, a_part in zip(g_parts, a_parts):
                equal, part_timed_out = items_equal(g_part, a_part)
                timed_out = timed_out or part_timed_out
                if not equal:
                    return False, timed_out
            return True, timed_out
        if g == a:
            return True, False
        g_parsed, g_timed_out = parse(g)
        a_parsed, a_timed_out = parse(a)
        if not (g_parsed and a_parsed):
            return False, g_timed_out or a_timed_out
        equal, timed_out = verify(g_parsed, a_parsed, rel_tol, imaginary_unit)
        conn.send(("tick", task_id))
        return equal, timed_out or a_timed_out

    def matches_gold(text: str, items: tuple) -> tuple[bool, bool]:
        if mode == "ordered":
            results = [items_equal(g, a) for g, a in zip(gold_items, items)]
            return all(r[0] for r in results), any(r[1] for r in results)
        if mode == "unordered" and items:  # a multiset matching, greedy (equality is transitive)
            unmatched, timed_out = list(items), False
            for g in gold_items:
                for k, a in enumerate(unmatched):
                    equal, item_timed_out = items_equal(g, a)
                    timed_out = timed_out or item_timed_out
                    if equal:
                        del unmatched[k]
                        break
                else:
                    return False, timed_out
            return True, timed_out
        return items_equal(gold_text, text)

    reps: list[tuple[int, list]] = []
    key_to_class: dict[str, int] = {}
    for j in range(start):
        status, class_ref, is_rep = known[j]
        if is_rep:
            reps.append((j, parse(answers[j][0])[0]))
        if status != "correct":
            key_to_class.setdefault(answer_key(answers[j][0]), class_ref)
    for i in range(start, len(answers)):
        answer, items, ruled = answers[i]
        pred: list = []
        if gold_failed:
            status = "error"
        else:
            pred, parse_timed_out = parse(answer)
            conn.send(("tick", task_id))
            if ruled is not None:  # an answer_norm rule decided (disowning box, base, list length)
                status = ruled
            else:
                equal, verify_timed_out = matches_gold(answer, items) if pred or items else (False, False)
                status = "correct" if equal else ("timeout" if parse_timed_out or verify_timed_out else "incorrect")
        conn.send(("verdict", task_id, i, status))
        is_rep = False
        if status == "correct":
            class_ref = GOLD_CLASS
        else:
            key = answer_key(answer)
            class_ref = key_to_class.get(key, -2)
            if class_ref == -2 and status == "incorrect" and pred:
                for j, rep in reps:
                    if clearly_different(rep, pred):
                        continue
                    equal, _ = verify(rep, pred)
                    conn.send(("tick", task_id))
                    if equal:
                        class_ref = j
                        break
            if class_ref == -2:
                class_ref = i
                is_rep = status == "incorrect" and bool(pred)
                if is_rep:
                    reps.append((i, pred))
            key_to_class.setdefault(key, class_ref)
        conn.send(("class", task_id, i, class_ref, is_rep))
    conn.send(("done", task_id))


# --- 3. the parent: scheduling, deadlines, kill + respawn -----------------------------------

@dataclass
class _ProblemJob:
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
    eager: bool = False  # rerun after a kill: the worker sends each result at once

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
        known = [(self.status[j], self.class_ref[j], self.is_rep[j]) for j in range(start)]
        return (self.job_id, self.gold, self.forms, start, known, self.gold_failed, self.rel_tol)


class _ForkedProcess:
    """Popen's kill/poll/wait for a worker forked by the zygote. It is not our child, so it is
    watched through a pidfd, which (unlike a pid) can never name a recycled process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except OSError:  # already gone (and reaped)
            self._pidfd = None

    def poll(self) -> int | None:
        if self._pidfd is not None and not select.select([self._pidfd], [], [], 0)[0]:
            return None
        return -signal.SIGKILL  # the exit status belongs to the zygote

    def kill(self) -> None:
        if self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float | None = None) -> int:
        if self._pidfd is not None:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"grading worker {self.pid}", timeout or 0.0)
            os.close(self._pidfd)
            self._pidfd = None
        return -signal.SIGKILL


# Fork warm workers from one zygote where the platform has everything that needs (Linux >= 5.3);
# elsewhere each worker is a fresh interpreter.
_CAN_FORK_WORKERS = (sys.platform.startswith("linux") and hasattr(os, "pidfd_open")
                     and hasattr(signal, "pidfd_send_signal") and hasattr(socket, "send_fds"))


def _python_command(entry: str, *args: int) -> list[str]:
    # A fresh interpreter via subprocess (not multiprocessing's spawn/forkserver): those re-run
    # the caller's __main__, which breaks callers without an `if __name__ == "__main__"` guard.
    # `-c` puts the working directory first on sys.path: pin the worker to the parent's copy of
    # dsdr_eval, so a checkout (or stray folder) in the cwd can never supply the grader's code.
    package_root = str(Path(__file__).resolve().parents[1])
    code = (f"import sys; sys.path.insert(0, {package_root!r}); from dsdr_eval.grading import {entry}; "
            f"{entry}(*(int(a) for a in sys.argv[1:]))")
    return [sys.executable, "-c", code, *(str(a) for a in args)]


class _Zygote:
    """The parent's end of ``_zygote_entry``: started at once (its import overlaps the caller's
    extraction); ``fork`` waits for it to be warm the first time."""

    def __init__(self, inner_timeout_s: int) -> None:
        ours, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            _python_command("_zygote_entry", theirs.fileno(), inner_timeout_s, WORKER_MEMORY_LIMIT_BYTES),
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, close_fds=True)
        theirs.close()
        self.control = ours
        self.ready = False
        self.started = time.monotonic()

    def fork(self) -> tuple[_ForkedProcess, _PipePair]:
        if not self.ready:
            self.control.settimeout(max(0.001, self.started + WORKER_STARTUP_TIMEOUT_S - time.monotonic()))
            try:
                greeting = self.control.recv(1)
            except socket.timeout:
                raise DsdrError("a math-verify worker did not start within "
                                f"{WORKER_STARTUP_TIMEOUT_S:.0f} s (is math-verify installed?)") from None
            if greeting != b"R":
                code = self.proc.wait()
                raise DsdrError(f"a math-verify grading worker exited during start-up (exit code {code}); "
                                "check that math-verify is installed: python -c 'import math_verify'")
            self.ready = True
            self.control.settimeout(WORKER_STARTUP_TIMEOUT_S)
        self.control.sendall(b"F")
        message, fds, _, _ = socket.recv_fds(self.control, 8, 2)
        if len(message) != 8 or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            raise ConnectionError("the grading zygote did not fork a worker")
        return _ForkedProcess(int.from_bytes(message, "little")), _PipePair(fds[0], fds[1])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.control.close()


@dataclass
class _Worker:
    proc: subprocess.Popen | _ForkedProcess
    conn: _PipePair
    deadline: float
    ready: bool = False
    queued: deque = field(default_factory=deque)  # jobs sent, in order; the first is in progress

    @property
    def job(self) -> _ProblemJob | None:
        return self.queued[0] if self.queued else None


# Jobs sent to a worker ahead of time, so it starts the next problem without waiting for the
# parent to read its "done" and answer (a scheduling round trip per problem on a loaded machine,
# as long as grading a one-sample problem). Only the first one is ever in progress.
_JOBS_IN_FLIGHT = 2


class _WorkerPool:
    """Long-lived workers; the parent enforces a deadline per math-verify call.

    Start-up (issue 16): one zygote interpreter imports math-verify while the caller extracts
    answers; the workers are forked from it, warm, when the first ``run`` needs them (or at once
    with ``start_workers``), and every replacement of a killed worker is a fork too. Without
    fork support each worker is its own interpreter, started in ``__init__``."""

    def __init__(self, n_workers: int, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        # math-verify's own alarm (whole seconds) fires a second before the hard deadline, so a
        # merely slow comparison ends as "timeout" without costing a worker respawn.
        self.inner_timeout_s = max(1, int(math.ceil(timeout_s)) - 1)
        self.on_progress: Callable[[int], None] = lambda n: None
        self.n_workers = n_workers
        self.zygote: _Zygote | None = _Zygote(self.inner_timeout_s) if _CAN_FORK_WORKERS else None
        self.workers: list[_Worker] = [] if self.zygote else [self._spawn() for _ in range(n_workers)]
        self.respawns = 0

    def start_workers(self) -> None:
        """Block until all workers exist (they are forked from the zygote once it is warm)."""
        while len(self.workers) < self.n_workers:
            self.workers.append(self._spawn())

    def _spawn(self) -> _Worker:
        if self.zygote is not None:
            try:
                proc, conn = self.zygote.fork()
            except (OSError, EOFError):  # the zygote died (e.g. the OOM killer): start another
                self.zygote.close()
                self.zygote = _Zygote(self.inner_timeout_s)
                proc, conn = self.zygote.fork()
            return _Worker(proc, conn, time.monotonic() + WORKER_STARTUP_TIMEOUT_S)
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        proc = subprocess.Popen(
            _python_command("_worker_entry", to_child_r, from_child_w, self.inner_timeout_s,
                            WORKER_MEMORY_LIMIT_BYTES),
            pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL, close_fds=True)
        os.close(to_child_r)
        os.close(from_child_w)
        conn = _PipePair(from_child_r, to_child_w)
        return _Worker(proc, conn, time.monotonic() + WORKER_STARTUP_TIMEOUT_S)

    def run(self, jobs: list[_ProblemJob]) -> None:
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
                self.workers[index] = self._spawn()
                self.respawns += 1

    def _run(self, jobs: list[_ProblemJob]) -> None:
        pending: deque[_ProblemJob] = deque(sorted(jobs, key=lambda job: -len(job.answers)))
        by_id = {job.job_id: job for job in jobs}
        while pending or any(w.job is not None for w in self.workers):
            for worker in list(self.workers):
                while worker.ready and len(worker.queued) < _JOBS_IN_FLIGHT and pending:
                    job = pending.popleft()
                    if not worker.queued:
                        worker.deadline = time.monotonic() + self.timeout_s
                    worker.queued.append(job)
                    try:
                        worker.conn.send((job.eager, job.task()))
                    except OSError:  # died: this job goes back unharmed, the one in progress is charged
                        worker.queued.pop()
                        pending.appendleft(job)
                        self._replace(worker, pending, reason="error", note="grader worker died")
                        break
            now = time.monotonic()
            watched = [w.deadline for w in self.workers if w.job is not None or not w.ready]
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
                    if not worker.ready:
                        code = worker.proc.wait()
                        raise DsdrError(f"a math-verify grading worker exited during start-up (exit code {code}); "
                                        "check that math-verify is installed: python -c 'import math_verify'") from None
                    self._replace(worker, pending, reason="error",
                                  note="grader worker died (crash or out of memory)")
            now = time.monotonic()
            for worker in list(self.workers):
                if now > worker.deadline and (worker.job is not None or not worker.ready):
                    if not worker.ready:
                        raise DsdrError("a math-verify worker did not start within "
                                        f"{WORKER_STARTUP_TIMEOUT_S:.0f} s (is math-verify installed?)")
                    self._replace(worker, pending, reason="timeout",
                                  note=f"math-verify call exceeded {self.timeout_s:g} s; worker killed")

    def _handle(self, worker: _Worker, message: tuple, by_id: dict[int, _ProblemJob]) -> None:
        kind = message[0]
        worker.deadline = time.monotonic() + self.timeout_s
        if kind == "ready":
            worker.ready = True
            return
        job = worker.job
        if job is None or by_id.get(message[1]) is not job:
            # Every message after "ready" is about the job this worker was sent; anything else is
            # stale (see ``run``) and must not touch this call's results.
            return
        if kind == "gold":
            job.gold_done = True
            if not message[2] and not job.gold_failed:
                job.gold_failed = True
                job.gold_note = "math-verify extracted nothing from the gold answer"
        elif kind == "verdict":
            _, _, i, status = message
            job.status[i] = status
            if status == "error" and job.gold_note:
                job.notes[i] = job.gold_note
            self.on_progress(job.weights[i])
        elif kind == "class":
            _, _, i, class_ref, is_rep = message
            job.class_ref[i], job.is_rep[i] = class_ref, is_rep
        elif kind == "done":
            worker.queued.popleft()

    def _replace(self, worker: _Worker, pending: deque, *, reason: str, note: str) -> None:
        """Kill ``worker``, charge the item it was on, resubmit the rest of its problem (and, unharmed,
        the problems queued behind it)."""
        job = worker.job
        pending.extendleft(reversed(list(worker.queued)[1:]))
        self._kill(worker)
        self.workers[self.workers.index(worker)] = self._spawn()
        self.respawns += 1
        if job is None:
            return
        if not job.eager:
            # The worker may have died holding buffered results (items it had finished): rerun
            # the rest of the problem eagerly, so the next death charges exactly its item.
            job.eager = True
            pending.appendleft(job)
            return
        i = job.next_index()
        if i < len(job.answers):
            if job.status[i] is None:
                if not job.gold_done:
                    # died on the gold itself: grade the problem as failed-gold (status error)
                    # rather than charge an innocent sample
                    job.gold_failed = True
                    job.gold_note = f"gold answer could not be parsed ({note})"
                    pending.appendleft(job)
                    return
                job.status[i] = reason
                job.notes[i] = note
                self.on_progress(job.weights[i])
            else:
                job.notes[i] = f"answer-class comparison failed ({note})"
            job.class_ref[i] = i  # a singleton class, never again compared against
        if job.next_index() < len(job.answers):
            pending.appendleft(job)

    @staticmethod
    def _kill(worker: _Worker) -> None:
        try:
            worker.proc.kill()
            worker.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
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

        with GradingPool(timeout_s=5.0, workers=2) as pool:
            for batch in batches:
                graded = grade_samples(batch, pool=pool)
    """

    def __init__(self, *, timeout_s: float = 5.0, workers: int | None = None) -> None:
        if timeout_s <= 0:
            raise DsdrError(f"grading timeout must be > 0 s (got {timeout_s})")
        self.timeout_s = timeout_s
        self.workers = max(1, workers or default_workers())
        self._pool: _WorkerPool | None = _WorkerPool(self.workers, timeout_s)
        self._pool.start_workers()  # a long-lived pool pays its start-up here, once

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> "GradingPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def grade_samples(rows: list[dict], *, timeout_s: float = 5.0, workers: int | None = None,
                  progress: bool = True, pool: GradingPool | None = None,
                  options: GradingOptions | None = None) -> list[dict]:
    """Grade completions; return copies of ``rows`` with grading fields added.

    Added: ``extracted`` (str | None, truncated to MAX_ANSWER_CHARS), ``extraction`` (method),
    ``status`` (one of STATUSES), ``correct`` (bool), ``answer_class`` (int index of the
    math-equivalence class of the answer within its problem, in order of first appearance;
    None without an answer), ``grade_note`` (why a status is timeout/error/truncated, else None).
    Rows are grouped into problems by (benchmark, problem_id). A row's optional ``answer_meta``
    (the benchmark's answer_type / is_multiple_answer / unit) and ``problem`` text choose the
    comparison mode (answer_norm: grading rules, ``options`` their conventions). With ``pool`` its
    long-lived workers (and its timeout) are used and left running; otherwise workers are started here."""
    options = options or GradingOptions()
    if timeout_s <= 0:
        raise DsdrError(f"grading timeout must be > 0 s (got {timeout_s})")
    graded: list[dict] = []
    problems: dict[tuple[str, str], dict] = {}
    for index, row in enumerate(rows):
        for name in ("problem_id", "gold", "completion"):
            if name not in row or row[name] is None:
                raise DsdrError(f"sample {index}: missing field '{name}'")
        key = (str(row.get("benchmark", DEFAULT_BENCHMARK)), str(row["problem_id"]))
        gold = str(row["gold"])
        problem = problems.setdefault(key, {"gold": gold, "answers": {}, "rows": [], "meta": row.get("answer_meta"),
                                            "problem": row.get("problem")})
        if problem["gold"] != gold:
            raise DsdrError(f"sample {index}: problem {key[1]!r} of benchmark {key[0]!r} has conflicting gold "
                            f"answers {problem['gold']!r} and {gold!r}")
        out = dict(row)
        problem["rows"].append(out)
        graded.append(out)

    if pool is not None and pool._pool is None:
        raise DsdrError("grade_samples: the GradingPool has been closed")
    # Start the pool now: its math-verify import overlaps with extraction below.
    n_workers = max(1, min(workers or default_workers(), len(problems)))
    worker_pool = pool._pool if pool is not None else (_WorkerPool(n_workers, timeout_s) if problems else None)
    try:
        for problem in problems.values():
            for out in problem["rows"]:
                _extract_into(out, problem["answers"])
        jobs = [_problem_job(job_id, p, options) for job_id, p in enumerate(problems.values()) if p["answers"]]
        if jobs and worker_pool is not None:
            with _ProgressBar(progress, sum(sum(job.weights) for job in jobs)) as advance:
                worker_pool.on_progress = advance
                worker_pool.run(jobs)
    finally:
        if worker_pool is not None and pool is None:
            worker_pool.close()
    job_iter = iter(jobs)
    for problem in problems.values():
        job = next(job_iter) if problem["answers"] else None
        _finish_problem(problem["rows"], job)
    return graded


def _problem_job(job_id: int, problem: dict, options: GradingOptions) -> _ProblemJob:
    meta = problem["meta"] if isinstance(problem["meta"], dict) else None
    text = problem["problem"] if isinstance(problem["problem"], str) else None
    gold = answer_norm.prepare_gold(problem["gold"], meta, text)
    answers = list(problem["answers"])
    forms = [answer_norm.wire_answer(answer_norm.prepare_answer(answer, gold)) for answer in answers]
    return _ProblemJob(job_id, answer_norm.wire_gold(gold), answers, list(problem["answers"].values()), forms,
                       options.rel_tol)


def _extract_into(out: dict, answer_counts: dict[str, int]) -> None:
    """Set extracted/extraction/grade_note/status on a row; count answers that need math-verify."""
    completion = out["completion"]
    note = None
    if not isinstance(completion, str):
        extraction, note = Extraction(None, None), f"completion is {type(completion).__name__}, not a string"
    else:
        extraction = extract_answer_with_method(completion)
    out["extracted"], out["extraction"], out["grade_note"] = extraction.answer, extraction.method, note
    out["status"] = "error" if note else ("no_answer" if extraction.answer is None else None)
    if extraction.answer is not None and len(extraction.answer) > MAX_ANSWER_CHARS:
        out["extracted"] = extraction.answer[:MAX_ANSWER_CHARS]
        out["status"] = "incorrect"
        out["grade_note"] = (f"extracted answer has {len(extraction.answer)} characters (> {MAX_ANSWER_CHARS}); "
                             "truncated here and not verified")
    elif out["status"] is None:
        answer_counts[extraction.answer] = answer_counts.get(extraction.answer, 0) + 1


def _finish_problem(rows: list[dict], job: _ProblemJob | None) -> None:
    """Copy verdicts onto rows; renumber classes 0, 1, ... by first appearance in the rows."""
    index = {answer: i for i, answer in enumerate(job.answers)} if job else {}
    class_numbers: dict[Any, int] = {}
    for row in rows:
        answer = row["extracted"]
        if row["status"] is None:  # went through the workers
            i = index[answer]
            row["status"] = job.status[i] or "error"
            row["grade_note"] = row["grade_note"] or job.notes[i]
            if row["status"] == "timeout" and not row["grade_note"]:
                row["grade_note"] = "math-verify's own timeout fired (answer counted as not correct)"
            ref: Any = job.class_ref[i] if job.class_ref[i] is not None else ("solo", i)
        elif answer is not None:  # over-long answer: a class of its own per distinct string
            ref = ("long", answer)
        else:
            ref = None
        row["correct"] = row["status"] == "correct"
        row["answer_class"] = None if ref is None else class_numbers.setdefault(ref, len(class_numbers))


class _ProgressBar:
    """A rich progress bar over samples (stderr), or a no-op."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled, self.total, self.progress, self.task = enabled and total > 0, total, None, None

    def __enter__(self):
        if not self.enabled:
            return lambda n: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=False)
        self.progress.start()
        self.task = self.progress.add_task("grading", total=self.total)
        return lambda n: self.progress.advance(self.task, n)

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()


def status_counts(rows: Iterable[dict]) -> dict[str, int]:
    counts = {status: 0 for status in STATUSES}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return counts


def grader_provenance(timeout_s: float, workers: int | None,
                      options: GradingOptions | None = None) -> dict[str, Any]:
    import importlib.metadata as md

    def version(name: str) -> str | None:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    return {"grader": "math-verify", "math_verify_version": version("math-verify"),
            "latex2sympy2_extended_version": version("latex2sympy2_extended"), "sympy_version": version("sympy"),
            "timeout_s": timeout_s, "workers": workers or default_workers(),
            "extraction": "last \\boxed{}/\\fbox{} (brace-matched), else last 'Answer:'/'final answer is' line",
            "extraction_rules_version": EXTRACTION_RULES_VERSION, "max_answer_chars": MAX_ANSWER_CHARS,
            "gold_wrapping": "\\boxed{gold}", "python": sys.version.split()[0],
            "grading_rules": answer_norm.rules_provenance(options or GradingOptions())}
