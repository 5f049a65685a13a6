"""TRL-engine DSDR vs plain TRL GRPO vs the compact trainer's DSDR: same model, prompts, G,
lengths, seed, side by side in one run; prints step times, peak memory and their ratios.

    python benchmarks/bench_trl_engine.py [--model smollm2-135m] [--prompts 2] [--group-size 4]
        [--max-tokens 16] [--steps 3] [--train-data ../shared/data/train/gsm8k_train.jsonl]

* ``trl-dsdr``: ``dsdr-train --engine trl --algo dsdr`` (DsdrGRPOTrainer: grading, D_emb encoder,
  formula sets, whole-batch gather, core_algos loss with J_local);
* ``trl-grpo``: TRL's own GRPOTrainer on the same GRPOConfig (its loss and advantages), with the
  reward a TRL user would write: a ``\\boxed{gold}`` string match (no verifier, no encoder);
* ``compact-dsdr``: ``dsdr-train --engine compact --algo dsdr``.

Each variant runs in its own process (peak RSS = that process's ``ru_maxrss``; grading workers not
included). Step time = median over the steps after the first (warm-up); min and every step are printed too
(on a shared machine the min is the least disturbed estimate). The DSDR additions are
``time/reward_s`` of trl-dsdr (grading + diversity + shaping) plus its loss-time difference to
trl-grpo; the target is <= 10 % of the step time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
VARIANTS = ("trl-dsdr", "trl-grpo", "compact-dsdr")


def _config(args: argparse.Namespace, out: Path, engine: str):
    from dsdr_eval.models import resolve_model
    from dsdr_train.config import resolve_config

    model = resolve_model(args.model).path
    cfg = resolve_config(dict(algo="dsdr", engine=engine, model=model, train_data=args.train_data, out=str(out),
                              seed=0, group_size=args.group_size, prompts_per_step=args.prompts,
                              mini_batch_prompts=args.prompts, micro_batch_size=args.prompts * args.group_size,
                              generation_batch_size=args.prompts * args.group_size,
                              max_response_length=args.max_tokens, max_prompt_length=512, total_steps=args.steps,
                              max_train_examples=64,
                              save_every=0, save_final=False, progress=False, device="cpu", dtype="float32"))
    return cfg, model


def _dsdr_metrics(out: Path) -> tuple[list[float], dict[str, list[float]]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    phases = {k: [r[f"time/{k}_s"] for r in rows] for k in ("generate", "reward", "update")}
    return [r["time/total_s"] for r in rows], phases


def _plain_trl(cfg, model_path: str, out: Path) -> list[float]:
    """TRL's GRPOTrainer as a TRL user runs it, on the compact trainer's prompts and geometry."""
    import re

    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from dsdr_train.integrations.trl.mapping import geometry, grpo_config_kwargs
    from dsdr_train.modeling import load_policy

    from dsdr_train.setup import load_prompt_pool, prompt_format

    tok = AutoTokenizer.from_pretrained(model_path)
    tok.padding_side = "left"
    pool = load_prompt_pool(cfg, prompt_format(cfg, tok), main=True)  # the prompts (template, chat mode) of dsdr-train
    texts = [tok.decode(ids, skip_special_tokens=False) for ids in pool.prompt_ids]
    data = Dataset.from_dict({"prompt": texts, "answer": [p.answer for p in pool.problems]})

    def boxed_match(completions, answer, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [float(bool(re.search(r"\\boxed\{" + re.escape(a) + r"\}", t))) for t, a in zip(texts, answer)]

    geo = geometry(cfg, 1)
    kwargs = grpo_config_kwargs(cfg, geo, out, device_type="cpu")
    kwargs.update(loss_type="grpo", scale_rewards="group", epsilon_high=cfg.objective.clip_ratio_high)
    times: list[float] = []

    class Timer(TrainerCallback):
        last = time.perf_counter()

        def on_step_end(self, args, state, control, **_):
            now = time.perf_counter()
            times.append(now - Timer.last)
            Timer.last = now

    trainer = GRPOTrainer(model=load_policy(model_path, torch.float32, disable_dropout=True), args=GRPOConfig(**kwargs),
                          reward_funcs=[boxed_match], train_dataset=data, processing_class=tok, callbacks=[Timer()])
    Timer.last = time.perf_counter()
    trainer.train()
    return times


def child(variant: str, args: argparse.Namespace) -> None:
    import torch

    torch.manual_seed(0)
    out = Path(tempfile.mkdtemp(prefix=f"bench-{variant}-"))
    from dsdr_train.cli import main

    phases: dict[str, list[float]] = {}
    if variant == "trl-grpo":
        cfg, model = _config(args, out / "run", "trl")
        times = _plain_trl(cfg, model, out / "run")
    else:
        engine = "trl" if variant == "trl-dsdr" else "compact"
        cfg, model = _config(args, out / "run", engine)
        argv = ["--engine", engine, "--algo", "dsdr", "--model", model, "--train-data", args.train_data, "--out",
                str(out / "run")] + [f"{k}={v}" for k, v in cfg.to_dict().items()
                                     if k in ("group_size", "prompts_per_step", "mini_batch_prompts",
                                              "micro_batch_size", "generation_batch_size", "max_response_length",
                                              "max_prompt_length", "total_steps", "save_every", "save_final",
                                              "progress", "device", "dtype", "seed", "max_train_examples")]
        assert main(argv) == 0
        times, phases = _dsdr_metrics(out / "run")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB (Linux: KiB)
    shutil.rmtree(out, ignore_errors=True)
    print("RESULT " + json.dumps({"variant": variant, "step_s": times, "phases": phases, "peak_mib": peak}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--train-data", default=str(ROOT.parent / "shared" / "data" / "train" / "gsm8k_train.jsonl"))
    p.add_argument("--child", choices=VARIANTS)
    args = p.parse_args()
    if args.child:
        return child(args.child, args)
    results = {}
    for variant in VARIANTS:
        cmd = [sys.executable, __file__, "--child", variant] + sys.argv[1:]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        if proc.returncode or not line:
            sys.exit(f"{variant} failed:\n{proc.stderr[-3000:]}")
        results[variant] = json.loads(line[0][7:])
    load = os.getloadavg()
    print(f"{args.model}: {args.prompts} prompts x G={args.group_size}, {args.max_tokens} new tokens, T=1.0, "
          f"{args.steps} steps (median of steps 2..), fp32 CPU, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    med = {}
    for name, r in results.items():
        steady = r["step_s"][1:] or r["step_s"]
        med[name] = statistics.median(steady)
        extra = "".join(f"  {k} {statistics.median(v[1:] or v):.2f} s" for k, v in r["phases"].items())
        print(f"  {name:<13} step {med[name]:7.2f} s (min {min(steady):.2f}; all: "
              f"{', '.join(f'{t:.1f}' for t in r['step_s'])})   peak RSS {r['peak_mib']:7.0f} MiB{extra}")
    rewards = results["trl-dsdr"]["phases"]["reward"]
    reward = statistics.median(rewards[1:] or rewards)
    print(f"  trl-dsdr / trl-grpo step time      {med['trl-dsdr'] / med['trl-grpo']:.3f}   "
          f"(DSDR additions: {(med['trl-dsdr'] - med['trl-grpo']) / med['trl-dsdr']:+.1%} of the step; "
          f"reward phase {reward / med['trl-dsdr']:.1%})")
    print(f"  trl-dsdr / compact-dsdr step time  {med['trl-dsdr'] / med['compact-dsdr']:.3f}   peak RSS "
          f"{results['trl-dsdr']['peak_mib'] / results['compact-dsdr']['peak_mib']:.3f}")


if __name__ == "__main__":
    main()
