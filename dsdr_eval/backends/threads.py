"""How many threads torch computes with, chosen from the cores actually free.

torch starts one thread per core whatever else runs there. On a machine other work keeps busy, those
threads wait on each other at every operator (OpenMP spin-waits): ``run`` on SmolLM2-135M generated in
147 s of a 172 s run with 2 threads on 2 busy cores, in 15 s of 27 s with ``OMP_NUM_THREADS=1``, the
completions identical (issue 46). So every command that computes with torch (``run``, ``sweep``,
``diversity``, ``dsdr-train``) chooses the count first (``choose_threads``), says what it chose in one
line and records it (config.json ``backend.threads``, metrics.json's diversity provenance, the
trainer's config.json):

* an explicit setting wins: ``--threads N`` (``threads:`` in a training config), else ``$OMP_NUM_THREADS``;
* else the usable cores (``os.sched_getaffinity``) minus the cores other work keeps busy, rounded, at
  least 1. "Busy" is the larger of (a) the cores of this process's affinity set that were not idle over
  ``WINDOW_S`` while this process slept (``/proc/stat``: what runs *now*), and (b) the 1-minute load
  average, as a share of the affinity set when the machine has more cores than it, less this process's own
  recent CPU use (what ran *lately*: a neighbour that pauses for a moment still counts).

The count changes only speed, never a result (torch's CPU kernels give the same completions: measured
above), so it is recorded as provenance, not as part of a run's identity.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable

THREADS_ENV = "OMP_NUM_THREADS"
WINDOW_S = 0.3  # how long the idle time of the usable cores is measured
_LOAD_WINDOW_S = 60.0  # the load average's time constant (the 1-minute one)


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    source: str  # "--threads", "$OMP_NUM_THREADS" or "free cores"
    cores: int  # usable cores (the affinity set)
    busy: float | None = None  # cores busy with other work (free cores only)

    def line(self) -> str:
        """One line saying what was chosen and why."""
        if self.source != "free cores":
            return f"torch threads: {self.threads} ({self.source}; {self.cores} usable cores)"
        return (f"torch threads: {self.threads} of {self.cores} usable cores ({self.busy:.1f} busy with other work; "
                f"--threads N or ${THREADS_ENV} to choose)")

    def to_record(self) -> dict[str, Any]:
        return {"torch": self.threads, "source": self.source, "cores": self.cores,
                **({"busy": round(self.busy, 2)} if self.busy is not None else {})}


def usable_cpus() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))


def _cpu_times(cpus: set[int]) -> dict[int, tuple[int, int]] | None:
    """{cpu: (total, idle)} jiffies from /proc/stat (idle includes iowait; guest time is inside user)."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    times = {}
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
            times[int(name[3:])] = (sum(values), values[3] + values[4])
    return times or None


def busy_now(cpus: set[int], window_s: float = WINDOW_S) -> float | None:
    """Cores of ``cpus`` not idle over ``window_s`` while this thread sleeps (None: no /proc/stat)."""
    before = _cpu_times(cpus)
    if before is None:
        return None
    time.sleep(window_s)
    after = _cpu_times(cpus) or {}
    busy = 0.0
    for cpu, (total, idle) in after.items():
        d_total = total - before.get(cpu, (total, idle))[0]
        d_idle = idle - before.get(cpu, (total, idle))[1]
        busy += 1 - d_idle / d_total if d_total > 0 else 0.0
    return busy


def _own_recent_cpu() -> float:
    """This process's (and its finished children's) CPU use, in cores, averaged over its life or the load
    average's minute, whichever is longer: its own share of the load average."""
    used = sum(os.times()[:4])
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            start_ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as handle:
            age = float(handle.read().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        age = 0.0
    return used / max(age, _LOAD_WINDOW_S)


def busy_lately(cpus: set[int]) -> float:
    """The 1-minute load average as a share of ``cpus``, less this process's own recent use (>= 0)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return 0.0
    share = load * min(1.0, len(cpus) / (os.cpu_count() or len(cpus)))
    return max(0.0, share - _own_recent_cpu())


def choose_threads(explicit: int | None = None, *, cpus: set[int] | None = None,
                   measure: Callable[[set[int]], float | None] | None = None) -> ThreadChoice:
    """The torch thread count: ``explicit`` (--threads), else $OMP_NUM_THREADS, else the free cores."""
    cpus = usable_cpus() if cpus is None else cpus
    if explicit is not None:
        return ThreadChoice(int(explicit), "--threads", len(cpus))
    env = os.environ.get(THREADS_ENV, "").strip()
    if env.isdigit() and int(env) > 0:
        return ThreadChoice(int(env), f"${THREADS_ENV}", len(cpus))
    if measure is None:
        now = busy_now(cpus)
        busy = max(now if now is not None else 0.0, busy_lately(cpus))
    else:
        busy = measure(cpus) or 0.0
    busy = min(float(len(cpus)), busy)
    return ThreadChoice(max(1, round(len(cpus) - busy)), "free cores", len(cpus), busy)


def set_torch_threads(explicit: int | None = None, *, log: Callable[[str], None] | None = print) -> ThreadChoice:
    """Choose (``choose_threads``) and apply the count to torch's intra-op pool; say it in one line."""
    import torch

    choice = choose_threads(explicit)
    if torch.get_num_threads() != choice.threads:
        torch.set_num_threads(choice.threads)
    if log is not None:
        log(choice.line())
    return choice
