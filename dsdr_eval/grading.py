"""Answer extraction and math-verify grading in a pool of killable worker processes.

Pipeline (all of it safe against hostile completions: nothing is ever evaluated as code):

1. ``extract_answer`` (parent, linear time): the last ``\\boxed{...}`` / ``\\boxed x`` /
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
import re
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Iterable

from dsdr_eval import answer_norm
from dsdr_eval.answer_norm import GradingOptions
from dsdr_eval.errors import DsdrError

STATUSES = ("correct", "incorrect", "no_answer", "timeout", "error")
MAX_ANSWER_CHARS = 1000  # longest gold answer in the six benchmarks is 210 characters
WORKER_MEMORY_LIMIT_BYTES = 4 * 1024**3  # RLIMIT_AS per worker: 9^{9^{9^9}} must not eat the machine
WORKER_STARTUP_TIMEOUT_S = 180.0  # importing sympy/math-verify on a busy 2-core machine
GOLD_CLASS = -1
EXTRACTION_RULES_VERSION = "1"

# --- 1. extraction ------------------------------------------------------------------------

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BRACE_TOKEN_RE = re.compile(r"\\[\\{}]|[{}]")  # escaped braces/backslashes are skipped as a unit
_BARE_BOX_TOKEN_RE = re.compile(r"[^\s$]{1,%d}" % (MAX_ANSWER_CHARS + 1))
_ANSWER_LINE_RE = re.compile(
    r"(?im)(?:^|[\s*_#(])(?:final\s+answer|answer)\s*(?:\*\*|__)?\s*[:：]\s*(?:\*\*|__)?[ \t]*([^\n]*)")
_ANSWER_IS_RE = re.compile(r"(?i)(?:final\s+answer|the\s+answer)\s+is\s*[:：]?[ \t]*([^\n]*)")
_INLINE_MATH_RE = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]")
_FALLBACK_TAIL_CHARS = 4 * MAX_ANSWER_CHARS


@dataclass(frozen=True)
class Extraction:
    answer: str | None
    method: str | None  # "boxed" | "fbox" | "answer_line" | "answer_is" | None


def extract_answer(text: str) -> str | None:
    """The final answer of a completion (see ``extract_answer_with_method``), or None."""
    return extract_answer_with_method(text).answer


def extract_answer_with_method(text: str) -> Extraction:
    if not isinstance(text, str) or not text:
        return Extraction(None, None)
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed
    return _last_answer_line(text)


def _last_boxed(text: str) -> Extraction | None:
    starts = list(_BOX_RE.finditer(text))
    if not starts:
        return None
    # One linear pass of brace matching from the first box; a stack, so 10^5 nested braces are
    # as cheap as flat ones and an unclosed brace (truncated output) simply has no partner.
    partner: dict[int, int] = {}
    stack: list[int] = []
    for token in _BRACE_TOKEN_RE.finditer(text, starts[0].end()):
        char = token.group()
        if char == "{":
            stack.append(token.start())
        elif char == "}" and stack:
            partner[stack.pop()] = token.start()
    for match in reversed(starts):  # the last box that yields something wins
        method = "fbox" if match.group().endswith("fbox") else "boxed"
        pos = match.end()
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos < len(text) and text[pos] == "{":
            close = partner.get(pos)
            if close is None:
                continue
            content = text[pos + 1:close].strip()
            if content:
                return Extraction(content, method)
        elif pos > match.end():  # "\boxed 5": the token after the space, up to whitespace or $
            token = _BARE_BOX_TOKEN_RE.match(text, pos)
            if token:
                return Extraction(token.group(), method)
    return None


def _last_answer_line(text: str) -> Extraction:
    # Both patterns are line-local, so when the last whole lines (~8 KB) hold a usable match it is
    # the last one in the text: scan those first, the whole text only if they hold none.
    cut = text.rfind("\n", 0, max(0, len(text) - 8192)) + 1
    for region in ((text[cut:], text) if cut > 0 else (text,)):
        candidates = [(m.start(), "answer_line", m.group(1)) for m in _ANSWER_LINE_RE.finditer(region)]
        candidates += [(m.start(), "answer_is", m.group(1)) for m in _ANSWER_IS_RE.finditer(region)]
        for _, method, tail in sorted(candidates, reverse=True):
            answer = _clean_answer_tail(tail[:_FALLBACK_TAIL_CHARS])
            if answer:
                return Extraction(answer, method)
    return Extraction(None, None)


def _clean_answer_tail(tail: str) -> str | None:
    math_span = _INLINE_MATH_RE.search(tail)
    if math_span:
        answer = next(group for group in math_span.groups() if group is not None)
    else:
        answer = re.split(r"\.\s|\.$", tail, maxsplit=1)[0]  # up to the end of the sentence
    answer = answer.strip().strip("*_").strip()
    answer = answer.rstrip(".").strip()
    return answer or None


# --- cheap string normalisation (answer classes only) ---------------------------------------

_KEY_DROP_RE = re.compile(r"\\left|\\right|\\displaystyle|\\[!,;: ]|\s|\$|\^\{?\\circ\}?")


def answer_key(answer: str) -> str:
    """A cheap normal form: answers with equal keys are in the same class without math-verify."""
    key = _KEY_DROP_RE.sub("", answer)
    key = key.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return key.rstrip(".")


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
    conn.send(("ready", os.getpid()))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        _run_task(task, conn, parse, verify, clearly_different)


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


@dataclass
class _Worker:
    proc: subprocess.Popen
    conn: _PipePair
    deadline: float
    ready: bool = False
    job: _ProblemJob | None = None


class _WorkerPool:
    """Long-lived spawn-context workers; the parent enforces a deadline per math-verify call."""

    def __init__(self, n_workers: int, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        # math-verify's own alarm (whole seconds) fires a second before the hard deadline, so a
        # merely slow comparison ends as "timeout" without costing a worker respawn.
        self.inner_timeout_s = max(1, int(math.ceil(timeout_s)) - 1)
        self.on_progress: Callable[[int], None] = lambda n: None
        self.workers: list[_Worker] = [self._spawn() for _ in range(n_workers)]
        self.respawns = 0

    def _spawn(self) -> _Worker:
        # A fresh interpreter via subprocess (not multiprocessing's spawn/forkserver): those re-run
        # the caller's __main__, which breaks callers without an `if __name__ == "__main__"` guard.
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        code = ("import sys; from dsdr_eval.grading import _worker_entry; "
                "_worker_entry(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))")
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(to_child_r), str(from_child_w), str(self.inner_timeout_s),
             str(WORKER_MEMORY_LIMIT_BYTES)],
            pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL, close_fds=True)
        os.close(to_child_r)
        os.close(from_child_w)
        conn = _PipePair(from_child_r, to_child_w)
        return _Worker(proc, conn, time.monotonic() + WORKER_STARTUP_TIMEOUT_S)

    def run(self, jobs: list[_ProblemJob]) -> None:
        try:
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
            for worker in self.workers:
                if worker.ready and worker.job is None and pending:
                    job = pending.popleft()
                    worker.job = job
                    worker.deadline = time.monotonic() + self.timeout_s
                    try:
                        worker.conn.send(job.task())
                    except OSError:  # died while idle: the job goes back, unharmed
                        worker.job = None
                        pending.appendleft(job)
                        self._replace(worker, pending, reason="error", note="grader worker died")
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
                        self._handle(worker, message, by_id)
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
            worker.job = None

    def _replace(self, worker: _Worker, pending: deque, *, reason: str, note: str) -> None:
        """Kill ``worker``, charge the item it was on, resubmit the rest of its problem."""
        job = worker.job
        self._kill(worker)
        self.workers[self.workers.index(worker)] = self._spawn()
        self.respawns += 1
        if job is None:
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
        key = (str(row.get("benchmark", "default")), str(row["problem_id"]))
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
    # Start the workers now: their interpreter start-up overlaps with extraction below.
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
