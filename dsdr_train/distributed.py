"""Data parallelism: the rank/world of this process and the few collectives the trainer needs.

Every rank draws whole groups. Besides the gradient all-reduce of DDP, a step runs the
collectives its computation depends on (DAPO's resampling decision, the mini-batch divisors of
the loss) and ONE all-reduce of the step's stats (:func:`rank_rows`, used by
:mod:`dsdr_train.stats`); nothing is pickled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_distributed(device: torch.device) -> Dist:
    """torchrun / accelerate launch set WORLD_SIZE/RANK; gloo on CPU, nccl on GPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    import torch.distributed as tdist

    if not tdist.is_initialized():
        tdist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Dist(rank=tdist.get_rank(), world=tdist.get_world_size())


def _all_reduce(t: torch.Tensor, op: str) -> torch.Tensor:
    import torch.distributed as tdist

    if tdist.get_backend() == "nccl":
        t = t.cuda()
    tdist.all_reduce(t, op={"sum": tdist.ReduceOp.SUM, "min": tdist.ReduceOp.MIN, "max": tdist.ReduceOp.MAX}[op])
    return t.cpu()


def all_reduce_values(values: list[float], dist: Dist, op: str = "sum") -> list[float]:
    """Element-wise reduction over ranks, in one collective (float64: exact for token counts)."""
    if dist.world == 1:
        return [float(v) for v in values]
    return [float(v) for v in _all_reduce(torch.tensor(values, dtype=torch.float64), op).tolist()]


def all_reduce_scalar(value: float, dist: Dist, op: str = "sum") -> float:
    if dist.world == 1:
        return value
    return all_reduce_values([value], dist, op)[0]


def rank_rows(values: list[float], dist: Dist) -> list[list[float]]:
    """Every rank's ``values`` (the same length on every rank), in rank order, from ONE float64
    all-reduce: each rank fills its own row of a ``[world, K]`` zero tensor and the sum is the
    table (exact: every entry is one rank's number plus zeros)."""
    if dist.world == 1:
        return [[float(v) for v in values]]
    table = torch.zeros(dist.world, len(values), dtype=torch.float64)
    table[dist.rank] = torch.tensor(values, dtype=torch.float64)
    return _all_reduce(table, "sum").tolist()
