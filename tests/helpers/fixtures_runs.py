"""Helpers that build fixture run directories in the documented formats (docs/run_directory.md).

Evaluation fixtures are made the way a real run is: `write_eval_samples` writes config.json and
samples.jsonl (real benchmark problems and gold answers; completions whose correctness follows a
per-run accuracy), then the real scoring code (`dsdr_eval.scoring.score.score_run_dir`) grades them and
computes metrics.json, and optionally the real diversity code adds the "diversity" key. Nothing
in metrics.json is hand-written.

Training fixtures (`write_train_run`) write metrics.jsonl lines with the trainer's documented
keys; the values follow smooth deterministic curves (a real training run takes minutes).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

PAPER_PROTOCOL = {"name": "fixture", "phases": [{"phase": "pass1", "n": 1, "temperature": 0.1, "top_p": 0.9},
                                                {"phase": "sampling", "n": 16, "temperature": 0.7, "top_p": 0.9}],
                  "max_tokens": 512, "seed": 0}
TEMPLATE = {"name": "qwen-boxed", "chat": True,
            "text": "{problem}\nPlease reason step by step, and put your final answer within \\boxed{}."}


def _unit(*parts: Any) -> float:
    """A deterministic pseudo-random number in [0, 1) from the parts (stable across runs/platforms)."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()
    return int(digest[:12], 16) / 16**12


def load_problems(data_dir: Path, benchmark: str, limit: int) -> list[dict[str, Any]]:
    rows = []
    with (Path(data_dir) / f"{benchmark}.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) >= limit:
                break
    return rows


_OPENINGS = ["Let us set up the equation", "First, note that", "We start by writing", "Consider the expression",
             "A quick way is to observe", "Rewrite the condition as", "Substituting gives", "By symmetry,"]


def completion_text(gold: str, kind: str, salt: str) -> str:
    """A plausible rollout: prose, a few formulas (some shared, some unique), and a final answer.

    kind: "correct" (boxes the gold answer), "incorrect" (boxes a different number), "no_answer"."""
    i = int(_unit(salt, "opening") * len(_OPENINGS))
    a = int(_unit(salt, "a") * 9) + 1
    b = int(_unit(salt, "b") * 9) + 1
    body = (f"{_OPENINGS[i]} $x^2 + {a}x = {b}$. Then \\[ x = \\frac{{-{a} \\pm \\sqrt{{{a * a + 4 * b}}}}}{{2}} \\]. "
            f"We check the case $n = {a + b}$ and simplify $2x + 1$.\n\n")
    if kind == "correct":
        return body + f"Therefore the answer is $\\boxed{{{gold}}}$."
    if kind == "incorrect":
        return body + f"Therefore the answer is $\\boxed{{{7919 + a * 13 + b}}}$."
    return body + "I am not sure how to finish this."


def write_eval_samples(run_dir: Path, data_dir: Path, *, label: str, accuracy: float,
                       benchmarks: dict[str, int] | None = None, protocol: dict[str, Any] | None = None,
                       backend: dict[str, Any] | None = None, no_answer_rate: float = 0.05,
                       model_spec: str = "fixture-model") -> Path:
    """config.json + samples.jsonl for `label`; per-rollout correctness ~ Bernoulli(accuracy) (seeded by label).

    benchmarks: name -> number of problems (the first N of the shipped benchmark file)."""
    benchmarks = benchmarks or {"aime24": 4, "math500": 4}
    protocol = protocol or PAPER_PROTOCOL
    backend = backend or {"name": "hf", "version": "5.19.0"}
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    config = {"kind": "eval", "label": label, "command": ["dsdr-eval", "run", "--fixture", label],
              "model": {"spec": model_spec, "path": model_spec, "is_local": False, "fingerprint": None, "revision": None},
              "backend": backend, "protocol": protocol, "template": TEMPLATE,
              "benchmarks": [{"name": name, "source": str(data_dir / f"{name}.jsonl"), "n_problems": n}
                             for name, n in benchmarks.items()],
              "grading": {}, "diversity": {}, "versions": {"python": "3.11", "dsdr": "0.1.0", "torch": "2.13.0",
                                                           "transformers": "5.19", "math-verify": "0.9.0"},
              "created": "2026-11-30T05:00:00+00:00"}
    (run_dir / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    lines = []
    for name, n_problems in benchmarks.items():
        for problem in load_problems(data_dir, name, n_problems):
            # Problem difficulty shifts every run's accuracy the same way (so paired tests see pairing).
            difficulty = _unit(name, problem["id"], "difficulty") - 0.5
            p_correct = min(1.0, max(0.0, accuracy + 0.6 * difficulty))
            for phase in protocol["phases"]:
                for idx in range(phase["n"]):
                    salt = (label, name, problem["id"], phase["phase"], idx)
                    u = _unit(*salt, "outcome")
                    kind = ("no_answer" if _unit(*salt, "no_answer") < no_answer_rate
                            else "correct" if u < p_correct else "incorrect")
                    text = completion_text(str(problem["answer"]), kind, "|".join(map(str, salt)))
                    lines.append({
                        "benchmark": name, "problem_id": str(problem["id"]), "sample_idx": idx,
                        "phase": phase["phase"], "problem": problem["problem"], "gold": str(problem["answer"]),
                        "prompt": TEMPLATE["text"].replace("{problem}", problem["problem"]), "completion": text,
                        "finish_reason": "stop" if kind != "no_answer" else "length",
                        "n_prompt_tokens": 50, "n_completion_tokens": len(text.split()),
                        "temperature": phase["temperature"], "top_p": phase["top_p"],
                        "max_tokens": protocol["max_tokens"], "seed": protocol["seed"],
                    })
    with (run_dir / "samples.jsonl").open("w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
    return run_dir


def make_scored_run(run_dir: Path, data_dir: Path, *, diversity: bool = False, encoder: Any = None,
                    **kwargs: Any) -> Path:
    """write_eval_samples + the real `score_run_dir` (+ the real `compute_run_diversity`)."""
    from dsdr_eval.scoring.score import score_run_dir

    write_eval_samples(run_dir, data_dir, **kwargs)
    score_run_dir(run_dir, progress=False, workers=1)
    if diversity:
        from dsdr_eval.diversity_metrics.run import compute_run_diversity

        compute_run_diversity(run_dir, encoder=encoder, progress=False)
    return run_dir


def write_train_run(run_dir: Path, *, algo: str, steps: int = 12, label: str | None = None,
                    partial_last_line: bool = False) -> Path:
    """A training run dir: config.json (kind=train) + metrics.jsonl with the documented flat keys."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    config = {"kind": "train", "algo": algo, "label": label or f"{algo}-fixture",
              "config": {"algo": algo, "model": "tiny", "group_size": 8, "lr": 1e-6},
              "versions": {"python": "3.11", "torch": "2.13.0"}, "created": "2026-11-30T05:00:00+00:00"}
    (run_dir / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    boost = {"grpo": 0.0, "dapo": 0.03, "dsdr": 0.06}.get(algo, 0.0)
    rows = []
    for step in range(1, steps + 1):
        progress = 1 - math.exp(-step / 6)
        noise = _unit(algo, step) - 0.5
        acc = 0.2 + (0.25 + boost) * progress + 0.05 * noise
        sem_div = 0.30 - 0.10 * progress + (0.08 if algo == "dsdr" else 0.0) + 0.02 * noise
        formula_div = 0.40 - 0.15 * progress + (0.10 if algo == "dsdr" else 0.0)
        row = {
            "step": step, "time/total_s": 18.0, "time/generate_s": 12.0, "time/reward_s": 1.0,
            "time/update_s": 5.0, "reward/mean": acc, "reward/std": 0.4, "acc/mean": acc,
            "shaped_reward/mean": acc + 0.0005, "shaped_reward/std": 0.4, "bonus/mean": 0.0005 if algo == "dsdr" else 0.0,
            "entropy/mean": 0.9 - 0.3 * progress + (0.1 if algo == "dsdr" else 0.0),
            "diversity/semantic": sem_div, "diversity/formula": formula_div,
            "similarity/semantic": 1 - sem_div, "similarity/formula": 1 - formula_div,
            "response_length/mean": 150 + 40 * progress, "response_length/max": 256,
            "response_length/clip_ratio": 0.1 * (1 - progress), "loss/pg": 0.01 * noise, "loss/local": -0.001,
            "loss/kl": 0.0, "loss/total": 0.01 * noise, "clip/frac": 0.02, "clip/frac_low": 0.01,
            "clip/frac_high": 0.01, "kl/approx": 0.001 * step, "adv/mean": 0.0, "adv/std": 0.9,
            "adv/min": -1.5, "adv/max": 1.5, "groups/all_correct_frac": 0.1 * progress,
            "groups/all_wrong_frac": 0.5 - 0.3 * progress, "dapo/num_gen_batches": 1 if algo != "dapo" else 2,
            "lr": 1e-6,
        }
        if step % 4 == 0:
            row["val/acc"] = acc - 0.02
            row["val/avg@4"] = acc - 0.03
        rows.append(row)
    with (run_dir / "metrics.jsonl").open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
        if partial_last_line:
            fh.write('{"step": ' + str(steps + 1) + ', "reward/me')  # a line being written right now
    return run_dir


def judge_reply_for(body: dict) -> str:
    """A judge's JSON answer whose scores depend on the rollouts it was shown (deterministic)."""
    text = json.dumps(body.get("messages", ""), sort_keys=True)
    logic = round(3 + 5 * _unit(text, "logic"), 1)
    formula = round(3 + 5 * _unit(text, "formula"), 1)
    semantic = round(3 + 5 * _unit(text, "semantic"), 1)
    overall = round((logic + formula + semantic) / 3, 2)
    return json.dumps({"logic": logic, "formula": formula, "semantic": semantic, "overall": overall})


def add_judge_scores(run_dir: Path, cache_dir: Path) -> None:
    """The real `run_judge` against a loopback OpenAI-compatible test server (tests/helpers/fault_server.py)."""
    from helpers.fault_server import FaultServer

    from dsdr_eval.llm_judge.run import JudgeSettings, run_judge
    from dsdr_eval.openai_api.client import EndpointConfig, OpenAICompatClient

    with FaultServer(default="ok", reply=judge_reply_for) as server:
        client = OpenAICompatClient(EndpointConfig(base_urls=(server.base_url,), model=server.model,
                                                   max_concurrency=4, timeout_s=10.0, backoff_base_s=0.01))
        run_judge(run_dir, client, JudgeSettings(), cache_dir=cache_dir, progress=False)


FIXTURE_ACCURACY = {"grpo": 0.30, "dsdr": 0.55}


def build_fixture_runs(base: Path, data_dir: Path, *, diversity: bool = True, judge: bool = True) -> Path:
    """A runs directory as a user would have it (built once per session; see `fixture_runs_dir`).

    runs/eval/grpo, runs/eval/dsdr   scored by the real code (+ diversity, + judge), same protocol
    runs/eval/hot                    same problems, sampling temperature 1.0 (a different protocol)
    runs/eval/unscored               samples.jsonl only
    runs/eval/broken                 metrics.json that is not JSON
    runs/train/{grpo,dapo,dsdr}      trainer metrics.jsonl (dsdr's last line half-written)
    runs/train/corrupt               metrics.jsonl with a damaged line in the middle
    """
    runs = Path(base) / "runs"
    marker = runs / ".complete"
    if marker.exists():
        return runs
    encoder = None
    if diversity:
        from dsdr_eval.diversity_metrics import load_encoder

        encoder = load_encoder()
    for label, accuracy in FIXTURE_ACCURACY.items():
        run_dir = make_scored_run(runs / "eval" / label, data_dir, label=label, accuracy=accuracy,
                                  diversity=diversity, encoder=encoder)
        if judge:
            add_judge_scores(run_dir, Path(base) / "judge-cache")
    hot = json.loads(json.dumps(PAPER_PROTOCOL))
    hot["phases"][1]["temperature"] = 1.0
    make_scored_run(runs / "eval" / "hot", data_dir, label="hot", accuracy=0.4, protocol=hot)
    write_eval_samples(runs / "eval" / "unscored", data_dir, label="unscored", accuracy=0.5,
                       benchmarks={"math500": 2})
    broken = runs / "eval" / "broken"
    write_eval_samples(broken, data_dir, label="broken", accuracy=0.5, benchmarks={"math500": 2})
    (broken / "metrics.json").write_text('{"benchmarks": {"math500": {"n_problems": 2,', encoding="utf-8")
    for algo in ("grpo", "dapo", "dsdr"):
        write_train_run(runs / "train" / algo, algo=algo, partial_last_line=(algo == "dsdr"))
    corrupt = write_train_run(runs / "train" / "corrupt", algo="grpo", steps=3, label="corrupt")
    lines = (corrupt / "metrics.jsonl").read_text().splitlines()
    lines[1] = lines[1][: len(lines[1]) // 2]  # a damaged line in the middle: an error, not a partial tail
    (corrupt / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    marker.write_text("ok\n")
    return runs


def tree_snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """path -> (mtime_ns, size) of every file under root (to prove a reader wrote nothing)."""
    out = {}
    for path in sorted(Path(root).rglob("*")):
        if path.is_file() or path.is_dir():
            st = path.stat()
            out[str(path.relative_to(root))] = (st.st_mtime_ns, st.st_size if path.is_file() else -1)
    return out
