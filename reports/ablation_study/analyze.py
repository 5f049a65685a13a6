"""Ablation-study analysis: the paper's claims tested with t intervals over seeds, Holm-corrected.

Reads RUNS/<arm>/s<seed>/sweep/ (one `dsdr-eval sweep` directory per arm and seed, each checkpoint a run
directory with graded.jsonl and diversity_per_problem.jsonl) and RUNS/<arm>/s<seed>/train/metrics.jsonl.
Writes OUT/analysis.json, OUT/analysis.md (claims, verdicts, tables) and OUT/*.png (pass@k curves with
95 % CI bands per arm, metric vs step, diversity vs accuracy).

Statistics (docs/ablation_study.md "Analysis"):
  * per (seed, problem) cell: pass@1 = correct at T=0.1 (pass1 phase); pass@k = the unbiased estimator
    1 - C(n-c, k)/C(n, k) over the n T=1.0 rollouts (docs/ALGORITHMS.md §5, Eq. 18); D_emb / D_eq =
    the problem's diversity over all its rollouts (§3.1, Eqs. 7-8, mean over rollouts).
  * a claim compares arm A with arm B on the final checkpoint: d[s, p] = A[s, p] - B[s, p], paired by
    seed (same seed = same prompt stream) and by problem, over the problems on which the metric is
    defined for both arms at that seed (a "among correct rollouts" metric needs >= 2 correct ones).
    The unit of replication is the seed (a training run): each seed gives one mean difference
    m_s = mean_p d[s, p], and the 95 % CI is Student's t interval over the S seed means,
    mean(m) +- t_{S-1, 0.975} sd(m) / sqrt(S), with the two-sided p of "mean 0" from the same t. It
    needs no resampling, so no verdict depends on an RNG seed, and its coverage holds at 3-5 seeds,
    where the two-way percentile bootstrap used before (``paired_bootstrap``, kept for the coverage
    simulation in coverage.py) gives a verdict under the null far more often than 5 %
    (docs/ablation_study.md "Analysis"). Problems are fixed (the same held-out set for every seed):
    the interval is about training runs on these problems.
  * "at matched accuracy": diversity minus what the accuracy difference predicts, m_s = (D_A - D_B) -
    beta (acc_A - acc_B), beta the least-squares slope of D on avg@n over every evaluated checkpoint of
    the two arms (both steps, every seed); then the same t interval over seeds.
  * verdict: the p-values of all claims are Holm-corrected (family-wise 5 %); "holds" when the
    corrected p < 0.05 and A - B > 0, "does not hold" when < 0.05 and A - B < 0, else "inconclusive"
    (at this scale); one seed gives no interval ("inconclusive"); a claim whose arms are missing is
    "not run".

  * claim sets (--claims): "paper" = the 15 claims of designs 1-2; "design3" = design 3's six registered
    claims (DESIGN3_CLAIMS, reports/ablation_study/design3/study.yaml), Holm over those six.
  * design 3 only: its solution routes among correct rollouts (design3/routes.py, exploratory; analysis.json
    "routes", a table in analysis.md).
  * the hack watch (hackwatch.py): per arm and evaluated step, the share of T=1.0 rollouts with an
    unbalanced `$` in the solution, with text after the answer, at the token cap (analysis.json
    "hack_watch", a table in analysis.md).

    python reports/ablation_study/analyze.py --runs reports/ablation_study/runs --out reports/ablation_study/report
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import stats

# Eq. 18 (docs/ALGORITHMS.md §5), the same estimator `dsdr-eval score` reports
from dsdr_eval.scoring.metrics import pass_at_k

# the hack watch (design 3, issue 47 item 4) lives beside this script; importable however it is loaded
sys.path.insert(0, str(Path(__file__).resolve().parent))
import hackwatch  # noqa: E402

ARMS = ("grpo", "dapo", "dsdr", "dsdr_wo_gd", "dsdr_wo_gc", "darling")
# per problem from diversity_per_problem.jsonl; *_correct = among the correct rollouts (>= 2 of them)
EXTRA = ("answer_classes", "vendi", "d_emb_correct", "d_eq_correct", "classes_correct")
ALPHA = 0.05


def paired_bootstrap(d: np.ndarray, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of d[seed, problem] and its 95 % two-way paired-bootstrap CI (seeds and problems resampled).

    The interval before issue 35; too narrow at 3-5 seeds (coverage.py measures it). Not used for a
    verdict: kept so that the coverage simulation shows what the t interval replaced."""
    d = np.asarray(d, dtype=float)
    if d.ndim != 2 or d.size == 0:
        raise ValueError("d must be a non-empty seeds x problems matrix")
    rng = np.random.default_rng(seed)
    s, p = d.shape
    si = rng.integers(0, s, size=(n_boot, s))
    pi = rng.integers(0, p, size=(n_boot, p))
    # mean over the resampled grid d[si][:, pi] = (row weights) x d x (column weights) / (s p)
    ws = np.stack([np.bincount(r, minlength=s) for r in si]).astype(float)
    wp = np.stack([np.bincount(r, minlength=p) for r in pi]).astype(float)
    means = np.einsum("bs,sp,bp->b", ws, d, wp) / (s * p)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(d.mean()), float(lo), float(hi)


def claim_interval(seed_means) -> tuple[float, float, float, float]:
    """(mean, lo, hi, p) of the seed means m_s of a paired difference: the 95 % Student t interval
    mean +- t_{S-1, 0.975} sd(m)/sqrt(S) and the two-sided p of the t test of mean 0. NaN interval and p
    for one seed and for identical seed means (no spread to estimate: with 0/1 outcomes on few problems,
    equal nonzero seed means happen under the null, and a p of 0 would make them verdicts; coverage.py);
    all-zero seed means (inert arms) give [0, 0] and p = 1."""
    m = np.asarray(seed_means, dtype=float)
    if m.ndim != 1 or m.size == 0:
        raise ValueError("seed_means must be a non-empty vector")
    mean, n = float(m.mean()), m.size
    if n < 2:
        return mean, math.nan, math.nan, math.nan
    se = float(m.std(ddof=1)) / math.sqrt(n)
    if se <= 1e-12 * max(1.0, abs(mean)):  # identical seed means (deterministic or inert arms)
        return (0.0, 0.0, 0.0, 1.0) if abs(mean) <= 1e-12 else (mean, math.nan, math.nan, math.nan)
    q = float(stats.t.ppf(1 - ALPHA / 2, n - 1))
    p = float(2 * stats.t.sf(abs(mean) / se, n - 1))
    return mean, mean - q * se, mean + q * se, p


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error <= alpha when rejecting adjusted p < alpha);
    NaN entries are not tests: they stay NaN and do not count in the family."""
    idx = sorted((i for i, p in enumerate(ps) if not math.isnan(p)), key=lambda i: ps[i])
    m, out, running = len(idx), [math.nan] * len(ps), 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def verdict(diff: float, p_adjusted: float) -> str:
    if math.isnan(p_adjusted) or p_adjusted >= ALPHA:
        return "inconclusive"
    return "holds" if diff > 0 else "does not hold"


@dataclass(frozen=True)
class Cell:
    """One arm's final-checkpoint measurements on one seed: per-problem arrays keyed by problem id."""
    pass1: dict[str, float]
    n_c: dict[str, tuple[int, int]]  # T=1.0 rollouts and correct ones
    d_emb: dict[str, float]
    d_eq: dict[str, float]
    step: int
    # per problem, from diversity_per_problem.jsonl: answer_classes, vendi (embedding Vendi, q = 1) over
    # all rollouts; d_emb_correct (D_emb among the correct rollouts, only where >= 2 are correct)
    extra: dict[str, dict[str, float]] = field(default_factory=dict)
    # the hack watch of the T = 1.0 rollouts (hackwatch.watch: n and the share of each hackwatch.WATCH flag)
    watch: dict[str, float] = field(default_factory=dict)


def _jsonl(path: Path, fields: tuple[str, ...]) -> list[dict]:
    """Records of a JSONL file; a bad line is a one-line error naming FILE:LINE:FIELD."""
    rows = []
    with path.open() as fh:
        for i, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{i}: not JSON ({exc.msg})") from None
            for f in fields:
                if not isinstance(r, dict) or f not in r:
                    raise ValueError(f"{path}:{i}:{f}: missing")
            rows.append(r)
    return rows


def read_eval(run_dir: Path, step: int) -> Cell:
    pass1: dict[str, float] = {}
    n_c: dict[str, list[int]] = {}
    for r in _jsonl(run_dir / "graded.jsonl", ("problem_id", "phase", "correct")):
        pid = r["problem_id"]
        if r["phase"] == "pass1":
            pass1[pid] = float(bool(r["correct"]))
        else:
            nc = n_c.setdefault(pid, [0, 0])
            nc[0] += 1
            nc[1] += int(bool(r["correct"]))
    d_emb: dict[str, float] = {}
    d_eq: dict[str, float] = {}
    extra: dict[str, dict[str, float]] = {name: {} for name in EXTRA}
    div = run_dir / "diversity_per_problem.jsonl"
    if div.exists():
        for r in _jsonl(div, ("problem_id", "all")):
            pid, every, correct = r["problem_id"], r["all"], r.get("correct") or {}
            d_emb[pid] = float(every["d_emb"])
            d_eq[pid] = float(every["d_eq"])
            values = {"answer_classes": every.get("answer_classes"),
                      "vendi": (every.get("vendi_embedding") or {}).get("1"), "d_emb_correct": correct.get("d_emb"),
                      "d_eq_correct": correct.get("d_eq"),
                      # classes of correct solutions (docs/ALGORITHMS.md §3.1): their answers are all one class
                      "classes_correct": correct.get("n_classes") if (correct.get("n") or 0) >= 2 else None}
            for name, value in values.items():
                if value is not None:
                    extra[name][pid] = float(value)
    return Cell(pass1, {k: (v[0], v[1]) for k, v in n_c.items()}, d_emb, d_eq, step, extra,
                hackwatch.watch(run_dir))


def read_sweep(sweep_dir: Path) -> list[Cell]:
    """Every done checkpoint of a sweep, by step (the last is the final model)."""
    meta = json.loads((sweep_dir / "sweep.json").read_text())
    cells = []
    for ck in meta["checkpoints"]:
        run_dir = Path(ck["run_dir"])
        if not run_dir.is_absolute():  # sweep.json names each run relative to the sweep directory
            run_dir = sweep_dir / run_dir
        if ck.get("status") == "done" and (run_dir / "graded.jsonl").exists():
            cells.append(read_eval(run_dir, int(ck["step"])))
    return sorted(cells, key=lambda c: c.step)


def load_runs(runs: Path) -> dict[str, dict[int, list[Cell]]]:
    out: dict[str, dict[int, list[Cell]]] = {}
    for arm in ARMS:
        for seed_dir in sorted((runs / arm).glob("s*")):
            sweep = seed_dir / "sweep"
            if (sweep / "sweep.json").exists():
                cells = read_sweep(sweep)
                if cells:
                    out.setdefault(arm, {})[int(seed_dir.name[1:])] = cells
    return out


def metric(cell: Cell, name: str, ids: list[str]) -> np.ndarray:
    if name == "pass1":
        return np.array([cell.pass1[i] for i in ids])
    if name.startswith("pass@"):
        k = int(name[5:])
        return np.array([pass_at_k(*cell.n_c[i], k) for i in ids])
    if name == "avg@n":
        return np.array([cell.n_c[i][1] / cell.n_c[i][0] for i in ids])
    if name in ("d_emb", "d_eq"):
        return np.array([getattr(cell, name)[i] for i in ids])
    if name in EXTRA:
        return np.array([cell.extra[name][i] for i in ids])
    raise ValueError(f"unknown metric {name!r}")


def problem_mean(cell: Cell, name: str) -> float:
    """``name`` of one checkpoint averaged over the problems on which it is defined."""
    return float(metric(cell, name, sorted(_ids(cell, name))).mean())


def grid(data: dict[int, list[Cell]], seeds: list[int], ids: list[str], name: str) -> np.ndarray:
    return np.stack([metric(data[s][-1], name, ids) for s in seeds])


def _ids(cell: Cell, name: str) -> list[str]:
    """The problems on which ``name`` is defined for ``cell``."""
    if name == "pass1":
        return list(cell.pass1)
    if name.startswith("pass@") or name == "avg@n":
        return list(cell.n_c)
    return list(cell.extra.get(name, {}) if name in EXTRA else getattr(cell, name))


def seed_means(data, a: str, b: str, name: str, k_gap: int | None = None) -> tuple[list[int], list[float], list[int]]:
    """Per shared seed, the mean over problems of A - B on the final checkpoint (only the problems on which
    ``name`` is defined for both arms at that seed; a seed with none is left out), and the problem counts.
    With ``k_gap``: (A - B at pass@k_gap) - (A - B at pass@1) of the same rollouts (does the gap grow with k)."""
    seeds, means, counts = [], [], []
    for s in sorted(set(data[a]) & set(data[b])):
        ca, cb = data[a][s][-1], data[b][s][-1]
        ids = sorted(set(_ids(ca, name)) & set(_ids(cb, name)))
        if not ids:
            continue
        d = metric(ca, name, ids) - metric(cb, name, ids)
        if k_gap is not None:
            d = (metric(ca, f"pass@{k_gap}", ids) - metric(cb, f"pass@{k_gap}", ids)) - d
        seeds.append(s); means.append(float(d.mean())); counts.append(len(ids))
    return seeds, means, counts


def matched_means(data, a: str, b: str, name: str, acc: str = "avg@n") -> tuple[list[int], list[float], list[int], float]:
    """Per shared seed, (D_A - D_B) - beta (acc_A - acc_B) on the final checkpoint: the diversity difference
    at matched accuracy, beta the least-squares slope of ``name`` on ``acc`` (problem means) over every
    evaluated checkpoint of both arms. Returns seeds, adjusted differences, problem counts, beta."""
    pts = [(problem_mean(c, acc), problem_mean(c, name)) for arm in (a, b) for cells in data[arm].values()
           for c in cells if _ids(c, name) and _ids(c, acc)]
    x, y = np.array(pts, dtype=float).T if pts else (np.zeros(0), np.zeros(0))
    if x.size < 3 or np.ptp(x) == 0:
        return [], [], [], math.nan
    beta = float(np.polyfit(x, y, 1)[0])
    seeds, means, counts = [], [], []
    for s in sorted(set(data[a]) & set(data[b])):
        ca, cb = data[a][s][-1], data[b][s][-1]
        if not (_ids(ca, name) and _ids(cb, name)):
            continue
        diff = problem_mean(ca, name) - problem_mean(cb, name)
        seeds.append(s); means.append(diff - beta * (problem_mean(ca, acc) - problem_mean(cb, acc)))
        counts.append(min(len(_ids(ca, name)), len(_ids(cb, name))))
    return seeds, means, counts, beta


def _row(a: str, b: str, name: str, seeds: list[int], means: list[float], counts: list[int]) -> dict:
    if not seeds:
        return {"a": a, "b": b, "metric": name, "verdict": "not run"}
    mean, lo, hi, p = claim_interval(means)
    return {"a": a, "b": b, "metric": name, "seeds": len(seeds), "problems": [min(counts), max(counts)],
            "diff": mean, "ci95": [lo, hi], "p": p, "seed_diffs": dict(zip(map(str, seeds), means))}


def compare(data, a: str, b: str, name: str) -> dict:
    if a not in data or b not in data:
        return {"a": a, "b": b, "metric": name, "verdict": "not run"}
    return _row(a, b, name, *seed_means(data, a, b, name))


def gap_growth(data, a: str, b: str, k: int) -> dict:
    """(A - B) at pass@k minus (A - B) at pass@1 of the same rollouts: > 0 = the gap grows with k."""
    name = f"gap(pass@{k}) - gap(pass@1)"
    if a not in data or b not in data:
        return {"a": a, "b": b, "metric": name, "verdict": "not run"}
    return _row(a, b, name, *seed_means(data, a, b, "pass@1", k_gap=k))


def matched(data, a: str, b: str, name: str) -> dict:
    label = f"{name} at matched avg@n"
    if a not in data or b not in data:
        return {"a": a, "b": b, "metric": label, "verdict": "not run"}
    seeds, means, counts, beta = matched_means(data, a, b, name)
    return {**_row(a, b, label, seeds, means, counts), "beta": beta}


def max_k(data) -> int:
    n = min(c[-1].n_c[i][0] for arm in data.values() for c in arm.values() for i in c[-1].n_c)
    return 1 << int(math.log2(n))


# Design 3's registered claims (reports/ablation_study/design3/study.yaml `claims`; docs/ablation_study.md
# "Design 3"): the primary endpoints only, Holm over these six. D_emb / D_eq among the correct rollouts are
# diversity_per_problem.jsonl's `correct` subset, computed on each rollout's text cut at its graded answer
# (the diversity default, rule answer-end); avg@n is avg@32 at n = 32.
DESIGN3_CLAIMS = (
    ("DSDR > GRPO: D_eq among correct rollouts", "dsdr", "grpo", "d_eq_correct"),
    ("DSDR > GRPO: D_emb among correct rollouts", "dsdr", "grpo", "d_emb_correct"),
    ("DSDR > GRPO: avg@32", "dsdr", "grpo", "avg@n"),
    ("DSDR > DSDR w/o GD: D_eq among correct rollouts", "dsdr", "dsdr_wo_gd", "d_eq_correct"),
    ("DSDR > DSDR w/o GD: D_emb among correct rollouts", "dsdr", "dsdr_wo_gd", "d_emb_correct"),
    ("DSDR > DSDR w/o GD: avg@32", "dsdr", "dsdr_wo_gd", "avg@n"),
)
CLAIM_SETS = ("paper", "design3")


def claims(data, claim_set: str = "paper") -> list[dict]:
    """Every claim's row of ``claim_set`` ("paper": the 15 claims of designs 1 and 2; "design3": the six
    registered ones); verdicts from the Holm-corrected p over the claims of the set that have an interval."""
    if claim_set == "design3":
        return _verdicts([{"claim": c, **compare(data, a, b, m)} for c, a, b, m in DESIGN3_CLAIMS])
    if claim_set != "paper":
        raise ValueError(f"unknown claim set {claim_set!r} (known: {', '.join(CLAIM_SETS)})")
    k = max_k(data) if data else 1
    rows = [("DSDR >= GRPO on pass@1", compare(data, "dsdr", "grpo", "pass1")),
            (f"DSDR >= GRPO on pass@{k}", compare(data, "dsdr", "grpo", f"pass@{k}")),
            ("the DSDR-GRPO gap grows with k", gap_growth(data, "dsdr", "grpo", k)),
            ("DSDR keeps higher semantic diversity (D_emb)", compare(data, "dsdr", "grpo", "d_emb")),
            ("DSDR keeps higher formula diversity (D_eq)", compare(data, "dsdr", "grpo", "d_eq")),
            ("DSDR keeps a higher Vendi score (embedding, q=1)", compare(data, "dsdr", "grpo", "vendi")),
            ("DSDR: higher D_emb among correct rollouts", compare(data, "dsdr", "grpo", "d_emb_correct")),
            ("DSDR: higher D_eq among correct rollouts", compare(data, "dsdr", "grpo", "d_eq_correct")),
            ("DSDR: more solution classes among correct rollouts", compare(data, "dsdr", "grpo", "classes_correct")),
            ("DSDR: higher D_emb at matched accuracy", matched(data, "dsdr", "grpo", "d_emb")),
            ("DSDR: higher D_eq at matched accuracy", matched(data, "dsdr", "grpo", "d_eq")),
            ("GD contributes (DSDR > DSDR w/o GD, pass@1)", compare(data, "dsdr", "dsdr_wo_gd", "pass1")),
            ("GC contributes (DSDR > DSDR w/o GC, pass@1)", compare(data, "dsdr", "dsdr_wo_gc", "pass1")),
            ("DSDR > DARLING on pass@1", compare(data, "dsdr", "darling", "pass1")),
            (f"DSDR > DARLING on pass@{k}", compare(data, "dsdr", "darling", f"pass@{k}"))]
    return _verdicts([{"claim": c, **r} for c, r in rows])


def _verdicts(rows: list[dict]) -> list[dict]:
    """Holm over the rows that were run; each gets p_holm and its verdict."""
    tested = [r for r in rows if r.get("verdict") != "not run"]
    for r, p_adj in zip(tested, holm([r["p"] for r in tested])):
        r["p_holm"] = p_adj
        r["verdict"] = verdict(r["diff"], p_adj)
        if r["seeds"] < 2:
            r["verdict"] += " (1 seed: no interval)"
        elif math.isnan(r["p"]):
            r["verdict"] += " (identical seed means: no interval)"
    return rows


def arm_curve(data, arm: str, ks: list[int], seeds: list[int] | None = None) -> list[tuple[float, float, float]]:
    """pass@k of one arm's final checkpoints for each k: mean and 95 % t interval over ``seeds`` (default
    all; the seed means of the problems every one of those seeds has)."""
    seeds = sorted(data[arm]) if seeds is None else seeds
    ids = sorted(set.intersection(*(set(data[arm][s][-1].n_c) for s in seeds)))
    return [claim_interval(grid(data[arm], seeds, ids, f"pass@{k}").mean(axis=1))[:3] for k in ks]


MARKERS = ("o", "s", "^", "D", "v", "P")  # one per arm in ARMS order


def _seed_span(seeds: list[int]) -> str:
    return f"s{seeds[0]}-s{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 1 else \
        ", ".join(f"s{s}" for s in seeds)


def plots(data, out: Path, base: Cell | None = None,
          curves: dict[str, dict[str, list[tuple[int, float]]]] | None = None) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    files = []
    k = max_k(data)
    ks = [2 ** i for i in range(int(math.log2(k)) + 1)]
    # Arms run with different seed counts (5 for GRPO/DSDR, 3 for the rest) are compared on the seeds
    # they share (seed s = the same prompt stream in every arm); a second panel shows each arm on all
    # of its seeds. Averaging 5 seeds of one arm against 3 of another mixes arm and seed effects.
    common = sorted(set.intersection(*(set(s) for s in data.values())))
    panels = [(common, f"seeds common to all arms ({_seed_span(common)})")] if common else []
    if any(sorted(s) != common for s in data.values()):
        panels.append((None, "each arm on all its seeds"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, (seeds, title) in zip(axes[0], panels):
        for arm in data:
            c = np.array(arm_curve(data, arm, ks, seeds))
            ax.plot(ks, c[:, 0], marker=MARKERS[ARMS.index(arm)], label=f"{arm} ({len(seeds or data[arm])} seeds)",
                    color=f"C{ARMS.index(arm)}")
            ax.fill_between(ks, c[:, 1], c[:, 2], alpha=0.15, color=f"C{ARMS.index(arm)}")
        if base is not None:
            ax.plot(ks, [problem_mean(base, f"pass@{kk}") for kk in ks], "k--", label="base (step 0)")
        ax.set_xscale("log", base=2); ax.set_xlabel("k"); ax.set_ylabel("pass@k (T=1.0)")
        ax.set_title(f"pass@k, final checkpoint, {title}\n(95% t interval over seeds)", fontsize=9); ax.legend(fontsize=7)
    fig.tight_layout(); fig.savefig(out / "passk.png", dpi=110); plt.close(fig); files.append("passk.png")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, name in zip(axes, ("pass1", "avg@n", "d_emb")):
        for arm, seeds in data.items():
            steps = sorted({c.step for cells in seeds.values() for c in cells})
            ys = []
            for st in steps:
                vals = [problem_mean(c, name) for cells in seeds.values() for c in cells if c.step == st]
                ys.append((np.mean(vals), np.min(vals), np.max(vals)))
            if base is not None:  # the untrained model is every arm's step 0
                b = problem_mean(base, name)
                steps, ys = [0, *steps], [(b, b, b), *ys]
            y = np.array(ys)
            ax.plot(steps, y[:, 0], marker=".", label=f"{arm} ({len(seeds)} seeds)", color=f"C{ARMS.index(arm)}")
            ax.fill_between(steps, y[:, 1], y[:, 2], alpha=0.15, color=f"C{ARMS.index(arm)}")
        ax.set_xlabel("training step"); ax.set_title(f"{name} (mean, band = seed min..max)")
    axes[0].legend(fontsize=7)
    fig.tight_layout(); fig.savefig(out / "steps.png", dpi=110); plt.close(fig); files.append("steps.png")
    fig, ax = plt.subplots(figsize=(5, 4))
    for arm, seeds in data.items():
        xs = [problem_mean(c[-1], "avg@n") for c in seeds.values()]
        ys = [np.mean(list(c[-1].d_emb.values())) if c[-1].d_emb else np.nan for c in seeds.values()]
        # hollow, one shape per arm: arms whose runs coincide (an inert ablation) overlap visibly
        ax.scatter(xs, ys, label=arm, marker=MARKERS[ARMS.index(arm)], facecolors="none",
                   edgecolors=f"C{ARMS.index(arm)}", s=70 - 8 * ARMS.index(arm), linewidths=1.5)
    ax.set_xlabel("avg@n (T=1.0), final"); ax.set_ylabel("D_emb, final"); ax.set_title("diversity vs accuracy (one dot per seed)")
    ax.legend(fontsize=7)
    fig.tight_layout(); fig.savefig(out / "div_vs_acc.png", dpi=110); plt.close(fig); files.append("div_vs_acc.png")
    if curves:
        fig, axes = plt.subplots(1, len(DYNAMICS_PLOT), figsize=(4 * len(DYNAMICS_PLOT), 3.6))
        for ax, key in zip(axes, DYNAMICS_PLOT):
            for arm, c in curves.items():
                if key in c:  # one colour per arm on every panel (an arm without the key leaves a gap)
                    ax.plot(*zip(*c[key]), marker=".", label=arm, color=f"C{ARMS.index(arm)}")
            ax.set_xlabel("training step"); ax.set_title(f"{key} (mean over seeds)", fontsize=9)
        axes[0].legend(fontsize=7)
        fig.tight_layout(); fig.savefig(out / "dynamics.png", dpi=110); plt.close(fig); files.append("dynamics.png")
    return files


TRAIN_KEYS = ("reward/mean", "entropy/mean", "bonus/mean", "loss/local", "coupling/max", "coupling/entropy",
              "groups/all_correct_frac", "diversity/semantic", "diversity/formula", "time/total_s")
# all-correct groups are where the global term acts (design 2 exists for them)
DYNAMICS_PLOT = ("reward/mean", "entropy/mean", "bonus/mean", "coupling/entropy", "groups/all_correct_frac")
TABLE_METRICS = ("pass1", "avg@n", "pass@K", "d_emb", "d_eq", "d_emb_correct", "d_eq_correct", "classes_correct",
                 "answer_classes", "vendi")


def arm_table(data, base: Cell | None) -> list[dict]:
    """Per arm (and the base model): each metric on the final checkpoint, the mean over problems per
    seed ("per_seed": {seed: {metric: value}}), then the mean and min..max over seeds. pass@K is at the
    largest power of 2 <= n."""
    k = max_k(data)
    rows = []
    entries = ([("base", {0: [base]})] if base is not None else []) + list(data.items())
    for arm, seeds in entries:
        row: dict = {"arm": arm, "seeds": len(seeds), "step": next(iter(seeds.values()))[-1].step, "per_seed": {}}
        for name in TABLE_METRICS:
            metric_name = f"pass@{k}" if name == "pass@K" else name
            per_seed = {s: problem_mean(c[-1], metric_name) for s, c in seeds.items() if _ids(c[-1], metric_name)}
            for s, v in per_seed.items():
                row["per_seed"].setdefault(s, {})[name] = v
            if per_seed:
                vals = list(per_seed.values())
                row[name] = {"mean": float(np.mean(vals)), "min": min(vals), "max": max(vals)}
        rows.append(row)
    return rows


def hack_table(data, base: Cell | None) -> list[dict]:
    """The hack watch (hackwatch.py, design 3): per arm and evaluated step (the base model is step 0),
    each flag's share of the T = 1.0 rollouts, mean and min..max over the seeds evaluated at that step,
    with the per-seed shares."""
    rows = []
    entries = ([("base", {0: [base]})] if base is not None else []) + list(data.items())
    for arm, seeds in entries:
        for step in sorted({c.step for cells in seeds.values() for c in cells}):
            per_seed = {s: c.watch for s, cells in seeds.items() for c in cells if c.step == step and c.watch.get("n")}
            if not per_seed:
                continue
            row: dict = {"arm": arm, "step": step, "seeds": len(per_seed),
                         "per_seed": {s: {k: w[k] for k in hackwatch.WATCH} for s, w in per_seed.items()}}
            for k in hackwatch.WATCH:
                vals = [w[k] for w in per_seed.values()]
                row[k] = {"mean": float(np.mean(vals)), "min": min(vals), "max": max(vals)}
            rows.append(row)
    return rows


def hack_markdown(rows: list[dict]) -> list[str]:
    lines = ["Hack watch (hackwatch.py): share of the T = 1.0 rollouts with an unbalanced `$` in the solution (the "
             "text up to the graded answer's end), with text after the answer, and ending at the token cap; mean "
             "(min..max) over seeds per arm and checkpoint step, base = the untrained model.", "",
             "| arm | step | seeds | " + " | ".join(hackwatch.WATCH) + " |", "|---|---|---|" + "---|" * len(hackwatch.WATCH)]
    lines += [f"| {r['arm']} | {r['step']} | {r['seeds']} | " + " | ".join(_spread(r[k]) for k in hackwatch.WATCH) + " |"
              for r in rows]
    return lines + [""]


def train_curves(runs: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Per arm and DYNAMICS_PLOT key: (step, mean over seeds of the logged value) where any seed logged one."""
    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for arm in ARMS:
        by_step: dict[str, dict[int, list[float]]] = {k: {} for k in DYNAMICS_PLOT}
        for m in sorted((runs / arm).glob("s*/train/metrics.jsonl")):
            for r in _jsonl(m, ("step",)):
                for k in DYNAMICS_PLOT:
                    if r.get(k) is not None:
                        by_step[k].setdefault(int(r["step"]), []).append(float(r[k]))
        curves = {k: [(st, float(np.mean(v))) for st, v in sorted(pts.items())] for k, pts in by_step.items() if pts}
        if curves:
            out[arm] = curves
    return out


def train_dynamics(runs: Path) -> dict[str, dict[str, float]]:
    """Per arm: the mean over seeds of each key's mean over the last quarter of training steps
    (train/metrics.jsonl; the local term loss/local carries the coupling weights, §3.3-3.4)."""
    out: dict[str, dict[str, float]] = {}
    for arm in ARMS:
        per_seed = []
        for m in sorted((runs / arm).glob("s*/train/metrics.jsonl")):
            rows = _jsonl(m, ("step",))
            tail = rows[len(rows) - max(1, len(rows) // 4):]
            # coupling/* is null in a step without a group of >= 2 correct rollouts: skipped, not 0
            per_seed.append({k: float(np.mean([r[k] for r in tail if r.get(k) is not None])) for k in TRAIN_KEYS
                             if any(r.get(k) is not None for r in tail)})
        if per_seed:
            out[arm] = {k: float(np.mean([d[k] for d in per_seed if k in d])) for k in TRAIN_KEYS
                        if any(k in d for d in per_seed)}
    return out


# The formula-term watch (issue 42): a box the grader read that sits inside a `$..$` span still open
# (an odd number of unescaped `$` before it: the closing `$` before \boxed{} dropped). Before the solution
# cut, such a span ran from the derivation through the box into the text after the answer, unique per
# rollout, and bought D_eq -- in evaluation and in the trainer's bonus, which used the same extractor.
_DOLLAR = re.compile(r"(?<!\\)\$")
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")


def box_in_open_math(completion: str, answer_end: int | None) -> bool:
    """The graded answer's box (the last box before ``answer_end``) follows an odd number of unescaped `$`."""
    if answer_end is None:
        return False
    boxes = list(_BOX.finditer(completion, 0, answer_end))
    return bool(boxes) and len(_DOLLAR.findall(completion, 0, boxes[-1].start())) % 2 == 1


def open_math_share(run_dir: Path) -> float | None:
    """Share of a run's sampled rollouts whose graded box sits in an open `$` span (None: graded before
    ``answer_end`` was recorded: run `dsdr-eval score` again)."""
    rows = [r for r in _jsonl(run_dir / "graded.jsonl", ("phase",)) if r["phase"] != "pass1"]
    if not rows or any("answer_end" not in r or "completion" not in r for r in rows):
        return None
    return sum(box_in_open_math(r["completion"], r["answer_end"]) for r in rows) / len(rows)


def hack_watch(runs: Path) -> dict[str, dict[str, list[float]]]:
    """Per arm (base = step 0) and step: the open-`$` share of each seed's evaluation rollouts."""
    out: dict[str, dict[str, list[float]]] = {}
    if (share := open_math_share(runs / "base") if (runs / "base" / "graded.jsonl").exists() else None) is not None:
        out["base"] = {"0": [share]}
    for arm in ARMS:
        for meta in sorted((runs / arm).glob("s*/sweep/sweep.json")):
            for ck in json.loads(meta.read_text())["checkpoints"]:
                run_dir = meta.parent / ck["run_dir"] if not Path(ck["run_dir"]).is_absolute() else Path(ck["run_dir"])
                if ck.get("status") == "done" and (share := open_math_share(run_dir)) is not None:
                    out.setdefault(arm, {}).setdefault(str(int(ck["step"])), []).append(share)
    return out


def validity_by_arm(runs: Path, data) -> dict[str, dict[str, dict]]:
    """Per arm, from each final checkpoint's metrics.json validity line (docs/diversity.md): mean and
    min..max over seeds of the shares of rollouts cut, at the token cap and with long text after the answer."""
    dirs = {"base": [runs / "base"]} if (runs / "base" / "metrics.json").exists() else {}
    for arm, seeds in data.items():
        dirs[arm] = [runs / arm / f"s{s}" / "sweep" / f"step_{c[-1].step:06d}" for s, c in sorted(seeds.items())]
    out: dict[str, dict[str, dict]] = {}
    for arm, paths in dirs.items():
        lines = [(json.loads((d / "metrics.json").read_text())["benchmarks"].get("heldout") or {}).get("diversity", {})
                 .get("validity") for d in paths if (d / "metrics.json").exists()]
        lines = [v for v in lines if v]
        if lines:
            vals = {"cut": [v["solution_cut"]["share_cut"] for v in lines],
                    "chars_removed": [v["solution_cut"]["chars_removed_share"] for v in lines],
                    "token_cap": [v["token_cap"]["share"] for v in lines],
                    "long_after_answer": [v["long_after_answer"]["share"] for v in lines]}
            out[arm] = {k: {"mean": float(np.mean(x)), "min": min(x), "max": max(x)} for k, x in vals.items()}
    return out


def watch_markdown(watch: dict, validity: dict) -> list[str]:
    lines = []
    if watch:
        steps = sorted({int(st) for v in watch.values() for st in v})
        lines += ["Formula-term watch (issue 42): share of the T = 1.0 evaluation rollouts whose graded `\\boxed{}` sits "
                  "inside an open `$` span (the closing `$` before the box dropped), mean (min..max) over seeds.", "",
                  "| arm | " + " | ".join(f"step {st}" for st in steps) + " |", "|---|" + "---|" * len(steps)]
        for arm, by_step in watch.items():
            cells = [_spread({"mean": float(np.mean(v)), "min": min(v), "max": max(v)}) if (v := by_step.get(str(st)))
                     else "" for st in steps]
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
        lines.append("")
    if validity:
        keys = ("cut", "chars_removed", "token_cap", "long_after_answer")
        lines += ["Validity line of the final checkpoint's diversity (metrics.json, docs/diversity.md): shares of "
                  "rollouts cut at their answer, of characters removed, at the token cap, with long text after the "
                  "answer; mean (min..max) over seeds.", "",
                  "| arm | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
        lines += [f"| {arm} | " + " | ".join(_spread(v.get(k)) for k in keys) + " |" for arm, v in validity.items()]
        lines.append("")
    return lines


def _spread(v: dict | None) -> str:
    if v is None:
        return ""
    return f"{v['mean']:.3f}" if v["min"] == v["max"] else f"{v['mean']:.3f} ({v['min']:.3f}..{v['max']:.3f})"


def markdown(rows: list[dict], data, figs: list[str], dyn: dict[str, dict[str, float]] | None = None,
             table: list[dict] | None = None, hacks: list[dict] | None = None,
             watch: list[str] | None = None) -> str:
    lines = ["# Ablation study: the paper's claims at this scale", "",
             "Paired differences (A - B) on the final checkpoint: the mean over seeds of each seed's mean over "
             "problems, its 95 % Student t interval over the seed means (the seed, a training run, is the unit "
             "that varies most), the t test's p and its Holm correction over all the claims below; verdict "
             "holds / does not hold when the Holm-corrected p < 0.05, else inconclusive (analyze.py docstring; "
             "coverage at 3-5 seeds: reports/ablation_study/coverage/coverage.md). No resampling: no verdict depends on an RNG seed. "
             "'problems' = min-max per seed (metrics among correct rollouts need >= 2 correct ones in both arms).", "",
             "| claim | A - B | metric | seeds | problems | diff | 95 % CI | p | p (Holm) | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["verdict"] == "not run":
            lines.append(f"| {r['claim']} | {r['a']} - {r['b']} | {r['metric']} | | | | | | | not run |")
        else:
            lo, hi = r["ci95"]
            ci = "" if math.isnan(lo) else f"[{lo:+.3f}, {hi:+.3f}]"
            pn = "" if math.isnan(r["p"]) else f"{r['p']:.3f}"
            ph = "" if math.isnan(r["p_holm"]) else f"{r['p_holm']:.3f}"
            lo_p, hi_p = r["problems"]
            lines.append(f"| {r['claim']} | {r['a']} - {r['b']} | {r['metric']} | {r['seeds']} | "
                         f"{lo_p if lo_p == hi_p else f'{lo_p}-{hi_p}'} | {r['diff']:+.3f} | {ci} | {pn} | {ph} | "
                         f"{r['verdict']} |")
    lines += ["", "Runs: " + ", ".join(f"{a} ({len(s)} seeds, steps {[c.step for c in next(iter(s.values()))]})"
                                      for a, s in data.items()), ""]
    if table:
        lines += [f"Final checkpoint per arm: mean over seeds (min..max over seeds) of the per-problem mean; pass@K = "
                  f"pass@{max_k(data)}; base = the untrained model.", "",
                  "| arm | seeds | step | " + " | ".join(TABLE_METRICS) + " |", "|---|---|---|" + "---|" * len(TABLE_METRICS)]
        for r in table:
            cells = [_spread(r.get(m)) for m in TABLE_METRICS]
            lines.append(f"| {r['arm']} | {r['seeds']} | {r['step']} | " + " | ".join(cells) + " |")
        # Seeds are the unit a claim pairs on: one seed that did not learn moves an arm's mean, and
        # diversity falls as accuracy rises (sharpening), so a diversity gap is read beside accuracy.
        lines += ["", "Per seed (final checkpoint, mean over problems; seed s of every arm drew the same prompts):", "",
                  "| arm | seed | " + " | ".join(TABLE_METRICS) + " |", "|---|---|" + "---|" * len(TABLE_METRICS)]
        for r in table:
            for s, v in sorted(r["per_seed"].items()):
                lines.append(f"| {r['arm']} | {s} | " + " | ".join(f"{v[m]:.3f}" if m in v else "" for m in TABLE_METRICS) + " |")
        lines.append("")
    if hacks:
        lines += hack_markdown(hacks)
    if dyn:
        lines += ["Training dynamics (train/metrics.jsonl): mean over seeds of the last-quarter mean per step.", "",
                  "| arm | " + " | ".join(TRAIN_KEYS) + " |", "|---|" + "---|" * len(TRAIN_KEYS)]
        lines += [f"| {arm} | " + " | ".join(f"{v[k]:.4g}" if k in v else "" for k in TRAIN_KEYS) + " |"
                  for arm, v in dyn.items()]
        lines.append("")
    lines += watch or []
    lines += [f"![{f}]({f})" for f in figs]
    return "\n".join(lines) + "\n"


@functools.cache  # loaded once: the table and its markdown both come from it
def _design3_routes_module():
    """design3/routes.py (its solution-route rule, exploratory), loaded beside this script."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("design3_routes", Path(__file__).resolve().parent / "design3" / "routes.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def design3_routes(runs: Path, data) -> list[dict]:
    """Design 3's exploratory route table (design3/routes.py) over each arm's final checkpoints."""
    final = {arm: {s: runs / arm / f"s{s}" / "sweep" / f"step_{c[-1].step:06d}" for s, c in sorted(seeds.items())}
             for arm, seeds in data.items()}
    return _design3_routes_module().routes_table(runs, final)


def design3_routes_markdown(rows: list[dict]) -> list[str]:
    return _design3_routes_module().routes_markdown(rows)


def _json_safe(x):
    """NaN (no interval at one seed) as null: JSON has no NaN."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    return x


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", required=True, help="RUNS/<arm>/s<seed>/{train,sweep}")
    p.add_argument("--out", required=True)
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--claims", choices=CLAIM_SETS, default="paper",
                   help="the claim set: 'paper' (designs 1-2, 15 claims) or 'design3' (its 6 registered claims)")
    args = p.parse_args(argv)
    try:
        data = load_runs(Path(args.runs))
        if not data:
            raise ValueError(f"{args.runs}: no <arm>/s<seed>/sweep/sweep.json with a done checkpoint")
        rows = claims(data, args.claims)
        dyn = train_dynamics(Path(args.runs))
        curves = train_curves(Path(args.runs))
        base_dir = Path(args.runs) / "base"
        base = read_eval(base_dir, 0) if (base_dir / "graded.jsonl").exists() else None
        table = arm_table(data, base)
        hacks = hack_table(data, base)
        watch, validity = hack_watch(Path(args.runs)), validity_by_arm(Path(args.runs), data)
        routes = design3_routes(Path(args.runs), data) if args.claims == "design3" else None
    except (ValueError, KeyError, OSError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    figs = [] if args.no_plots else plots(data, out, base, curves)
    (out / "analysis.json").write_text(json.dumps({"claims": _json_safe(rows), "arms": table, "hack_watch": hacks,
                                                   "open_math_share": watch, "validity": validity,
                                                   **({"routes": _json_safe(routes)} if routes is not None else {}),
                                                   "train_dynamics": dyn,
                                                   "interval": "t over seed means, Holm-corrected"}, indent=1) + "\n")
    extra = watch_markdown(watch, validity) + (design3_routes_markdown(routes) if routes is not None else [])
    (out / "analysis.md").write_text(markdown(rows, data, figs, dyn, table, hacks, extra))
    for r in rows:
        print(f"{r['claim']}: {r['verdict']}" + (f" ({r['diff']:+.3f} [{r['ci95'][0]:+.3f}, {r['ci95'][1]:+.3f}])"
                                                   if "diff" in r else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
