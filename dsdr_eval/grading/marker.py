"""Where a grading worker is: one record in memory shared by the worker and the parent.

The worker writes ``(task, index, phase, verdict, started, cpu_started)`` as it begins the gold of a problem,
each answer, and that answer's class comparisons -- plain stores into a shared page, no system
call, no wake-up of the parent (the reason workers batch their pipe messages). The parent reads it

* for the hard deadline: ``cpu_started`` + the unit's limit in the worker's CPU time (a wall-clock
  deadline was spent by other processes on a loaded machine, issue 43), with ``started`` + a
  generous multiple of it as the wall-clock backstop; no message the worker sends can move either
  (issue 24: every message used to reset it, so 8 slow answers of one problem ran 124 s under a
  5 s timeout);
* after a kill or a crash: the answer that was in progress is charged, once, where the batched
  results lost with the worker used to force an eager rerun that ran the hanging answer again
  (``\\boxed{9!!!!!!!}``: two kills, 11.6 s at a 5 s timeout).

A seqlock (odd while written) keeps the parent from reading half a record. ``started`` is
``time.monotonic()``, a clock shared by all processes of the machine (CLOCK_MONOTONIC);
``cpu_started`` is the worker's ``time.process_time()``, which the parent reads as the worker's CPU
clock (``pool.worker_cpu_time``).
"""

from __future__ import annotations

import mmap
import os
import struct
import tempfile
import time
from dataclasses import dataclass

IDLE, GOLD, VERDICT, CLASS = 0, 1, 2, 3  # phases
GOLD_INDEX = -1
VERDICTS = ("correct", "incorrect", "no_answer", "timeout", "error")
_RECORD = struct.Struct("<qqqqqdd")  # seq, task, index, phase, verdict code, started, cpu_started
SIZE = mmap.PAGESIZE


@dataclass(frozen=True)
class Marker:
    task_id: int
    index: int
    phase: int
    verdict: str | None
    started: float
    cpu_started: float


def now() -> tuple[float, float]:
    """(wall, CPU) clock readings in this process: ``time.monotonic()``, ``time.process_time()``."""
    return time.monotonic(), time.process_time()


def new_marker_fd() -> int:
    """A file descriptor of a zeroed shared page (memfd on Linux, else an unlinked temp file)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("dsdr-grading-marker", getattr(os, "MFD_CLOEXEC", 0))
    else:
        handle = tempfile.TemporaryFile()
        fd = os.dup(handle.fileno())
        handle.close()
    os.ftruncate(fd, SIZE)
    return fd


class MarkerBoard:
    """One worker's record: ``mark`` in the worker, ``read`` in the parent."""

    def __init__(self, fd: int) -> None:
        self._map = mmap.mmap(fd, SIZE)
        self._seq = 0

    def mark(self, task_id: int, index: int, phase: int, verdict: str | None = None,
             started: tuple[float, float] | None = None) -> None:
        """``started``: (wall, CPU) clock readings of the unit's start (``now()``), default now."""
        code = VERDICTS.index(verdict) if verdict in VERDICTS else -1
        when, cpu_when = now() if started is None else started
        self._seq += 1  # odd: being written
        _RECORD.pack_into(self._map, 0, self._seq, task_id, index, phase, code, when, cpu_when)
        self._seq += 1
        struct.pack_into("<q", self._map, 0, self._seq)

    def idle(self) -> None:
        self.mark(-1, GOLD_INDEX, IDLE)

    def read(self) -> Marker | None:
        """The last complete record (None before the first one)."""
        for _ in range(100):
            seq, task_id, index, phase, code, started, cpu_started = _RECORD.unpack_from(self._map, 0)
            if seq % 2 == 0 and struct.unpack_from("<q", self._map, 0)[0] == seq:
                if seq == 0:
                    return None
                return Marker(task_id, index, phase, VERDICTS[code] if code >= 0 else None, started, cpu_started)
        return None  # written without pause: treat as no news

    def close(self) -> None:
        self._map.close()
