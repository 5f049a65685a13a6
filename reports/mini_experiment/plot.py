"""Curves (curves.png) and the before/after table (results.md, results.json) of the mini-experiment.

    python reports/mini_experiment/plot.py --runs reports/mini_experiment/runs
Reads runs/train_{grpo,dsdr}/metrics.jsonl and runs/eval_{base,grpo,dsdr}/metrics.json (as far
as they exist).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
ALGOS = ("grpo", "dsdr")
CURVES = (("acc/mean", "train accuracy (verifier)"), ("entropy/mean", "policy entropy (nats/token)"),
          ("diversity/semantic", "D_emb within group"), ("response_length/mean", "response length (tokens)"),
          ("loss/total", "loss"), ("time/total_s", "seconds per step"))


def rolling(values: list[float], window: int = 5) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if len(arr) < window:
        return arr
    kernel = np.ones(window) / window
    head = [arr[: i + 1].mean() for i in range(window - 1)]
    return np.concatenate([head, np.convolve(arr, kernel, mode="valid")])


def load_train(runs: Path) -> dict[str, list[dict]]:
    out = {}
    for algo in ALGOS:
        path = runs / f"train_{algo}" / "metrics.jsonl"
        if path.exists():
            out[algo] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def load_evals(runs: Path) -> dict[str, dict]:
    out = {}
    for name in ("base", *ALGOS):
        path = runs / f"eval_{name}" / "metrics.json"
        if path.exists():
            bench = json.loads(path.read_text())["benchmarks"]
            out[name] = next(iter(bench.values()))
    return out


def plot(train: dict[str, list[dict]], target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(14, 7))
    for ax, (key, title) in zip(axes.flat, CURVES):
        for algo, rows in train.items():
            steps = [r["step"] for r in rows if r.get(key) is not None]
            values = [r[key] for r in rows if r.get(key) is not None]
            if not values:
                continue
            line, = ax.plot(steps, values, alpha=0.25)
            ax.plot(steps, rolling(values), color=line.get_color(), label=f"{algo} (5-step mean)")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.legend(fontsize=8)
    fig.suptitle("SmolLM2-135M-Instruct, few-shot addition, CPU: GRPO vs DSDR (G=8, 2 prompts/step)")
    fig.tight_layout()
    fig.savefig(target, dpi=110)


def table(train: dict[str, list[dict]], evals: dict[str, dict]) -> tuple[str, dict]:
    lines = ["| model | steps | pass1 (T=0.1) | avg@8 (T=1.0) | pass@1 | pass@2 | pass@4 | pass@8 |",
             "|---|---|---|---|---|---|---|---|"]
    summary: dict = {"eval": {}, "train": {}}
    for name, m in evals.items():
        pk = m.get("pass@k", {})
        steps = len(train.get(name, [])) if name != "base" else 0
        cells = [m.get("pass1"), m.get("avg@n"), *(pk.get(k) for k in ("1", "2", "4", "8"))]
        fmt = ["-" if v is None else f"{100 * v:.1f}" for v in cells]
        lines.append(f"| {name} | {steps} | " + " | ".join(fmt) + " |")
        summary["eval"][name] = {"pass1": m.get("pass1"), "avg@n": m.get("avg@n"), "pass@k": pk,
                                 "n_problems": m.get("n_problems"), "n_samples_per_problem": m.get("n_samples_per_problem")}
    for algo, rows in train.items():
        acc = [r["acc/mean"] for r in rows]
        k = max(1, len(acc) // 4)
        summary["train"][algo] = {"steps": len(rows), "wall_s": sum(r["time/total_s"] for r in rows),
                                  "acc_first_quarter": float(np.mean(acc[:k])), "acc_last_quarter": float(np.mean(acc[-k:])),
                                  "entropy_first": rows[0]["entropy/mean"], "entropy_last": rows[-1]["entropy/mean"]}
    return "\n".join(lines), summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", default=str(HERE / "runs"))
    p.add_argument("--out", default=str(HERE))
    args = p.parse_args()
    runs, out = Path(args.runs), Path(args.out)
    train, evals = load_train(runs), load_evals(runs)
    if train:
        plot(train, out / "curves.png")
    md, summary = table(train, evals)
    (out / "results.md").write_text(md + "\n")
    (out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(md)
    print(json.dumps(summary["train"], indent=2))


if __name__ == "__main__":
    main()
