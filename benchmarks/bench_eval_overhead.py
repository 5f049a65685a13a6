"""How much of `dsdr-eval run`'s wall time is not generation (target: <= 5 %).

Runs one fixed small evaluation per backend through the real code path (dsdr_eval.run.evaluation.run_evaluation)
and splits its wall time into: load (model/engine start incl. vLLM's torch.compile, benchmark
loading, config), plan
(prompt rendering), generation (inside the backend, minus the time spent writing samples),
write (building + appending + fsyncing sample lines), scoring (grading + metrics) and
diversity (the sentence encoder loads in the background during generation, so what is left
here is embedding + the metrics). Prints one line per backend and the overhead share with and without the one-off
model/engine load.

    python benchmarks/bench_eval_overhead.py                       # hf, SmolLM2, 8 math500 problems
    python benchmarks/bench_eval_overhead.py --backends hf,vllm    # if vllm is importable
    python benchmarks/bench_eval_overhead.py --backends openai --base-url http://127.0.0.1:8000/v1 --served-model smollm2

The CPU of the development machine is shared: figures there are indicative, ratios more than
absolute seconds.
"""

from __future__ import annotations

import argparse
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


def run_once(backend: str, args: argparse.Namespace, out: Path) -> dict:
    from dsdr_eval.run.evaluation import run_evaluation
    from dsdr_eval.options.commands import RunOptions

    options = RunOptions(model=args.served_model if backend == "openai" else args.model, backend=backend,
                         benchmarks=[args.benchmark], limit=args.limit, protocol="quick", n=args.n,
                         max_tokens=args.max_tokens, data_dir=args.data_dir, out=str(out), no_progress=True,
                         no_diversity=args.no_diversity, enforce_eager=args.enforce_eager and backend == "vllm",
                         base_url=[args.base_url] if backend == "openai" else None)
    result = run_evaluation(options, command=["bench_eval_overhead", backend])  # the outcome carries the timings
    t = dict(result.timings)
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    t["n_samples"] = len(samples)
    t["n_completion_tokens"] = sum(s["n_completion_tokens"] or 0 for s in samples)
    return t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="hf")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--served-model", default="smollm2")
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--benchmark", default="math500")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--n", type=int, default=4, help="sampling rollouts (plus one pass1 rollout)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--data-dir", default=os.environ.get("DSDR_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared/data/benchmarks")))
    parser.add_argument("--no-diversity", action="store_true")
    parser.add_argument("--enforce-eager", action="store_true", help="vllm: no torch.compile / CUDA graphs")
    args = parser.parse_args()
    print(f"fixed run: {args.benchmark} x {args.limit} problems, protocol quick (pass1 T=0.1 + {args.n} x T=0.7, "
          f"top-p 0.9), max_tokens {args.max_tokens}, seed 0, template qwen-boxed (chat), model {args.model}")
    for backend in args.backends.split(","):
        out = Path(tempfile.mkdtemp(prefix=f"bench-overhead-{backend}-"))
        try:
            t = run_once(backend, args, out / "run")
        finally:
            shutil.rmtree(out, ignore_errors=True)
        total = t["total_s"]
        pure_generation = t["generate_s"] - t["write_s"]
        other = total - pure_generation
        other_no_load = other - t["load_s"]
        print(f"[{backend}] total {total:.1f}s | load {t['load_s']:.1f}s | plan {t.get('plan_s', 0):.2f}s | "
              f"generation {pure_generation:.1f}s | write {t['write_s']:.3f}s | score {t['score_s']:.1f}s | "
              f"diversity {t.get('diversity_s', 0):.1f}s | {t['n_samples']} samples, "
              f"{t['n_completion_tokens']} completion tokens")
        print(f"[{backend}] outside generation: {other:.1f}s of {total:.1f}s (load average {os.getloadavg()[0]:.2f}, "
              f"2 cores)")
        print(f"[{backend}] non-generation share: {100 * other / total:.1f}% of wall time "
              f"(excluding the one-off model/engine load: {100 * other_no_load / (total - t['load_s']):.1f}%) "
              f"-- target <= 5%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
