"""The time budget of one answer inside a grading worker: every math-verify call under one timer.

math-verify's own timeouts are whole seconds of ``signal.alarm`` per call, and an answer makes
many calls (its parse, its comparison with the gold, one comparison per earlier answer class):
8 distinct slow answers of one problem cost 124 s at a 5 s timeout (issue 24), each call a
fresh alarm. Here a worker starts a budget per answer (``start``); each call runs under a
sub-second ``ITIMER_REAL`` set to what is left of it (math-verify's alarm is switched off, as
alarm(0) would cancel this timer), and a spent budget times a call out before it starts. The
parent's hard deadline (``dsdr_eval.grading.pool``) stays behind this one for calls stuck in C
code, where no signal handler runs. Imported by workers only (math-verify's exception class).
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

from math_verify.errors import TimeoutException


def _expired(signum: int, frame: object) -> None:
    raise TimeoutException("grading budget spent")


class CallBudget:
    """``limit()`` around each math-verify call; ``start(seconds)`` at each answer. Outside an
    answer (warm-up) a call gets ``call_limit_s``. Needs the main thread (signals)."""

    def __init__(self, call_limit_s: float) -> None:
        self.call_limit_s = call_limit_s
        self.deadline = math.inf

    def start(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def stop(self) -> None:
        self.deadline = math.inf

    def remaining(self) -> float:
        return min(self.call_limit_s, self.deadline - time.monotonic())

    def spent(self) -> bool:
        return self.remaining() <= 0

    @contextmanager
    def limit(self) -> Iterator[None]:
        """Raise math-verify's ``TimeoutException`` in the body once the budget is spent."""
        remaining = self.remaining()
        if remaining <= 0:
            raise TimeoutException("grading budget spent")
        previous = signal.signal(signal.SIGALRM, _expired)
        signal.setitimer(signal.ITIMER_REAL, remaining)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
