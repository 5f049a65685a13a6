"""The time budget of one answer inside a grading worker: every math-verify call under one CPU timer.

math-verify's own timeouts are whole seconds of ``signal.alarm`` per call, and an answer makes
many calls (its parse, its comparison with the gold, one comparison per earlier answer class):
8 distinct slow answers of one problem cost 124 s at a 5 s timeout (issue 24), each call a
fresh alarm. Here a worker starts a budget per answer (``start``); each call runs under an
``ITIMER_PROF`` timer set to what is left of it (math-verify's alarm is switched off), and a spent
budget times a call out before it starts.

The budget is the worker's own CPU time (``time.process_time``, which ``ITIMER_PROF`` counts too),
never wall time: with other processes on the machine a wall-clock budget was spent by them, and the
same answer timed out under load and not idle (issue 43: 156 of 1,547 verdicts changed at a 0.5 s
limit beside six CPU-bound processes). The parent's kill (``dsdr_eval.grading.pool``) reads the same
CPU clock, with a wall-clock backstop for calls stuck without running. Imported by workers only
(math-verify's exception class).
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

from math_verify.errors import TimeoutException

# the clock of every budget: this process's CPU time (user + system), the time ITIMER_PROF counts
cpu_clock = time.process_time


class CallBudget:
    """``limit()`` around each math-verify call; ``start(seconds)`` at each unit of work (seconds of
    this process's CPU time). Outside a unit (warm-up) a call gets ``call_limit_s``. Needs the main
    thread (signals)."""

    def __init__(self, call_limit_s: float) -> None:
        self.call_limit_s = call_limit_s
        self.deadline = math.inf
        self.limit_s = call_limit_s  # of the unit in progress

    def _expired(self, signum: int, frame: object) -> None:
        # ITIMER_PROF's clock (user + system ticks) can run a little ahead of process_time's: once
        # the timer fired, the unit's budget is spent whatever process_time says (outside a unit each
        # call has its own limit)
        if self.deadline != math.inf:
            self.deadline = -math.inf
        raise TimeoutException("grading budget spent")

    def start(self, seconds: float) -> None:
        self.limit_s = seconds
        self.deadline = cpu_clock() + seconds

    def stop(self) -> None:
        self.deadline = math.inf
        self.limit_s = self.call_limit_s

    def remaining(self) -> float:
        return min(self.limit_s, self.deadline - cpu_clock())

    def spent(self) -> bool:
        return self.remaining() <= 0

    @contextmanager
    def limit(self) -> Iterator[None]:
        """Raise math-verify's ``TimeoutException`` in the body once the budget is spent."""
        remaining = self.remaining()
        if remaining <= 0:
            raise TimeoutException("grading budget spent")
        previous = signal.signal(signal.SIGPROF, self._expired)
        signal.setitimer(signal.ITIMER_PROF, remaining)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.signal(signal.SIGPROF, previous)
