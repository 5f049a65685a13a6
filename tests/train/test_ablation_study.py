"""The ablation study's task generator, statistics and scripts (reports/ablation_study/, docs/ablation_study.md).

Fast tests check the statistics against independent references on synthetic data (brute-force pass@k,
scipy's bootstrap and t test, Holm's step-down rule, a known effect / no effect), and the coverage of
the claims' interval at 3 seeds by simulation; the slow test runs `run.sh --smoke` end to end.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dsdr_train import gentask

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("ablation_analyze", ROOT / "reports/ablation_study/analyze.py")
analyze = importlib.util.module_from_spec(_spec)
sys.modules["ablation_analyze"] = analyze  # dataclasses look their module up
_spec.loader.exec_module(analyze)
_cov_spec = importlib.util.spec_from_file_location("ablation_coverage", ROOT / "reports/ablation_study/coverage.py")
coverage = importlib.util.module_from_spec(_cov_spec)
_cov_spec.loader.exec_module(coverage)


# ---- task generator ----

@pytest.mark.parametrize("design", sorted(gentask.DESIGNS))
def test_gentask_deterministic_disjoint_and_gradable(design):
    # add1 / add1c have 81 problems in all, times 40, distrib 100, sum3s 125
    sizes = {"add1": (40, 16), "add1c": (40, 16), "times": (24, 8), "distrib": (60, 20), "sum3s": (80, 20),
             "timesr": (21, 12)}.get(design, (100, 40))
    train, held = gentask.make(design, 3, *sizes)
    assert (train, held) == gentask.make(design, 3, *sizes)
    assert gentask.make(design, 4, *sizes) != (train, held)
    assert not {tuple(r["key"]) for r in train} & {tuple(r["key"]) for r in held}
    for r in train + held:
        # two worked examples, each with its $...$ equations before the boxed answer
        assert r["problem"].count("\\boxed{") == 2 and r["problem"].endswith("\nA:")
        assert int(r["answer"]) == int(r["answer"])
    # the answer is the arithmetic truth of the operands
    if design == "linear":
        a, x, b = train[0]["key"]
        assert f"${a}x + {b} = {a * x + b}$" in train[0]["problem"].rsplit("Q:", 1)[1] and train[0]["answer"] == str(x)
    if design.startswith("add"):
        a, b = held[0]["key"]
        assert held[0]["problem"].endswith(f"Q: Compute ${a} + {b}$.\nA:") and held[0]["answer"] == str(a + b)
    if design.startswith("sum3"):  # design 3's candidates: the three operands' sum
        a, b, c = held[0]["key"]
        assert held[0]["problem"].endswith(f"Q: Compute ${a} + {b} + {c}$.\nA:") and held[0]["answer"] == str(a + b + c)
    if design == "distrib":
        a, b, c = held[0]["key"]
        assert held[0]["answer"] == str(a * (b + c))
    if design in ("times", "timesr"):
        a, b = held[0]["key"]
        assert held[0]["answer"] == str(a * b)
    if design == "add_nc":  # no carry: the answer keeps a's tens digit
        assert all(r["key"][0] // 10 == int(r["answer"]) // 10 for r in train + held)
    if design == "add1":
        assert all(1 <= x <= 9 for r in train + held for x in r["key"])
        with pytest.raises(ValueError, match="too few distinct problems"):
            gentask.make("add1", 0, 70, 12)


def test_check_disjoint_catches_overlap(tmp_path):
    train, held = gentask.make("linear", 0, 20, 5)
    with pytest.raises(ValueError, match="also in the training split"):
        gentask.check_disjoint(train, held + [train[3]])
    for name, rows in (("train", train), ("heldout", held + [dict(train[0], id="x")])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = subprocess.run([sys.executable, "-m", "dsdr_train.gentask", "--check", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "also in the training split" in p.stderr


# ---- statistics ----

def test_pass_at_k_matches_brute_force():
    for n in (1, 4, 7):
        for c in range(n + 1):
            outcomes = [1] * c + [0] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(outcomes, k))
                ref = sum(any(s) for s in subsets) / len(subsets)
                assert analyze.pass_at_k(n, c, k) == pytest.approx(ref)


def test_bootstrap_one_seed_matches_scipy():
    from scipy.stats import bootstrap
    rng = np.random.default_rng(1)
    d = rng.normal(0.05, 0.3, size=(1, 300))
    mean, lo, hi = analyze.paired_bootstrap(d, 4000, 0)
    ref = bootstrap((d[0],), np.mean, n_resamples=4000, method="percentile", random_state=2).confidence_interval
    width = ref.high - ref.low
    assert mean == pytest.approx(d.mean())
    assert abs(lo - ref.low) < 0.08 * width and abs(hi - ref.high) < 0.08 * width


def test_bootstrap_two_way_width_matches_normal_theory():
    # d[s, p] = seed effect + problem effect; the mean's variance is var_s/S + var_p/P (independent axes).
    rng = np.random.default_rng(2)
    S, P, ss, sp = 5, 200, 0.1, 0.4
    seed_eff, prob_eff = rng.normal(0, ss, S), rng.normal(0, sp, P)
    d = seed_eff[:, None] + prob_eff[None, :]
    _, lo, hi = analyze.paired_bootstrap(d, 4000, 0)
    # bootstrap variance uses the plug-in (1/n) variances of the observed effects
    sd = np.sqrt(seed_eff.var() / S + prob_eff.var() / P)
    assert (hi - lo) == pytest.approx(2 * 1.96 * sd, rel=0.15)


def test_claim_interval_matches_scipy_t_test():
    from scipy.stats import ttest_1samp
    rng = np.random.default_rng(4)
    for n in (2, 3, 5, 9):
        m = rng.normal(0.1, 0.3, n)
        mean, lo, hi, p = analyze.claim_interval(m)
        ref = ttest_1samp(m, 0.0)
        ci = ref.confidence_interval(0.95)
        assert mean == pytest.approx(m.mean()) and p == pytest.approx(ref.pvalue, rel=1e-9)
        assert (lo, hi) == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert all(np.isnan(x) for x in analyze.claim_interval([0.3])[1:])  # one seed: no spread, no interval
    # identical nonzero seed means: no spread to estimate, no verdict (coverage.py: they occur under the null)
    assert analyze.claim_interval([0.2, 0.2, 0.2])[0] == pytest.approx(0.2)
    assert all(np.isnan(x) for x in analyze.claim_interval([0.2, 0.2, 0.2])[1:])
    assert analyze.claim_interval([0.0, 0.0]) == pytest.approx((0.0, 0.0, 0.0, 1.0))


def test_holm_matches_step_down_rejections():
    # Holm (1979): order the p-values; reject H_(1..j) while p_(i) <= alpha / (m - i + 1), stop at the first
    # that is not. An adjusted p_i <= alpha must reject exactly that set, for every alpha.
    rng = np.random.default_rng(5)
    for _ in range(50):
        ps = list(rng.uniform(0, 0.2, 7) ** 2)
        adj = analyze.holm(ps)
        order = sorted(range(7), key=lambda i: ps[i])
        for alpha in (0.001, 0.01, 0.05, 0.1):
            rejected = set()
            for rank, i in enumerate(order):
                if ps[i] > alpha / (7 - rank):
                    break
                rejected.add(i)
            assert {i for i in range(7) if adj[i] <= alpha} == rejected
    assert analyze.holm([0.01, float("nan"), 0.04]) == pytest.approx([0.02, float("nan"), 0.04], nan_ok=True)


def test_interval_coverage_holds_at_three_seeds_where_the_percentile_bootstrap_fails():
    """Null: both arms are the same process (seed effect sd 1, cell sd 1, 8 problems). The claims'
    interval (analyze.claim_interval, via coverage.t_over_seeds) must give a verdict <= 5 % of the time
    (+2 Monte Carlo s.e.); the two-way percentile bootstrap used before gives one far more often."""
    reps = 1000
    tol = 2 * (0.05 * 0.95 / reps) ** 0.5
    for seeds in (3, 5):
        assert coverage.false_verdict_rate(coverage.t_over_seeds, seeds, 8, "gaussian", reps, seed=1) <= 0.05 + tol
    assert coverage.false_verdict_rate(coverage.percentile_bootstrap, 3, 8, "gaussian", 300, seed=1) >= 0.10
    # the claims run through the same interval: a null with a verdict at 3 seeds is not reported as one
    assert coverage.familywise_rate(3, 8, "gaussian", 300, seed=1) <= 0.05 + 2 * (0.05 * 0.95 / 300) ** 0.5


# ---- claims on synthetic run directories ----

def _fake_sweep(root: Path, arm: str, seed: int, p_correct: float, d_emb: float, rng, n=8, problems=40, steps=(5, 10)):
    sweep = root / arm / f"s{seed}" / "sweep"
    cks = []
    for step in steps:
        run = sweep / f"step_{step:06d}"
        run.mkdir(parents=True)
        graded, div = [], []
        for i in range(problems):
            pid = f"p{i}"
            graded.append({"problem_id": pid, "phase": "pass1", "correct": bool(rng.random() < p_correct)})
            graded += [{"problem_id": pid, "phase": "sampling", "correct": bool(rng.random() < p_correct)}
                       for _ in range(n)]
            div.append({"problem_id": pid, "all": {"d_emb": d_emb + rng.normal(0, 0.01), "d_eq": 0.0}})
        (run / "graded.jsonl").write_text("".join(json.dumps(r) + "\n" for r in graded))
        (run / "diversity_per_problem.jsonl").write_text("".join(json.dumps(r) + "\n" for r in div))
        cks.append({"name": f"step_{step:06d}", "step": step, "run_dir": run.name, "status": "done"})
    (sweep / "sweep.json").write_text(json.dumps({"kind": "sweep", "checkpoints": cks}))


def _verdicts(tmp_path, dsdr_p, grpo_p, dsdr_div=0.2, grpo_div=0.2, seeds=5):
    rng = np.random.default_rng(0)
    for s in range(seeds):
        _fake_sweep(tmp_path, "grpo", s, grpo_p, grpo_div, rng)
        _fake_sweep(tmp_path, "dsdr", s, dsdr_p, dsdr_div, rng)
    rows = analyze.claims(analyze.load_runs(tmp_path))
    return {r["claim"]: r for r in rows}


def test_known_effect_holds(tmp_path):
    v = _verdicts(tmp_path, 0.6, 0.2, dsdr_div=0.3)
    assert v["DSDR >= GRPO on pass@1"]["verdict"] == "holds"
    assert v["DSDR >= GRPO on pass@1"]["diff"] == pytest.approx(0.4, abs=0.1)
    assert v["DSDR keeps higher semantic diversity (D_emb)"]["verdict"] == "holds"
    assert v["GD contributes (DSDR > DSDR w/o GD, pass@1)"]["verdict"] == "not run"


def test_reverse_effect_does_not_hold(tmp_path):
    v = _verdicts(tmp_path, 0.2, 0.6)
    assert v["DSDR >= GRPO on pass@1"]["verdict"] == "does not hold"


def test_no_effect_inconclusive(tmp_path):
    v = _verdicts(tmp_path, 0.4, 0.4)
    assert v["DSDR >= GRPO on pass@1"]["verdict"] == "inconclusive"
    assert v["DSDR keeps higher semantic diversity (D_emb)"]["verdict"] == "inconclusive"
    assert v["the DSDR-GRPO gap grows with k"]["verdict"] == "inconclusive"


def test_analyze_cli_writes_report_and_refuses_empty(tmp_path):
    _verdicts(tmp_path / "runs", 0.6, 0.2)
    out = tmp_path / "rep"
    assert analyze.main(["--runs", str(tmp_path / "runs"), "--out", str(out)]) == 0
    assert {"analysis.md", "analysis.json", "passk.png", "steps.png", "div_vs_acc.png"} <= {f.name for f in out.iterdir()}
    assert "| holds |" in (out / "analysis.md").read_text()
    # training dynamics: last quarter (steps 4..4 of 1..4 -> the last one) of each seed, then mean over seeds
    for s, ent in ((0, [0.9, 0.8, 0.7, 0.5]), (1, [0.9, 0.8, 0.7, 0.3])):
        m = tmp_path / "runs/dsdr" / f"s{s}" / "train/metrics.jsonl"
        m.parent.mkdir(parents=True, exist_ok=True)
        m.write_text("".join(json.dumps({"step": i + 1, "entropy/mean": e}) + "\n" for i, e in enumerate(ent)))
    assert analyze.main(["--runs", str(tmp_path / "runs"), "--out", str(out), "--no-plots"]) == 0
    dyn = json.loads((out / "analysis.json").read_text())["train_dynamics"]
    assert dyn == {"dsdr": {"entropy/mean": pytest.approx(0.4)}}
    p = subprocess.run([sys.executable, str(ROOT / "reports/ablation_study/analyze.py"), "--runs", str(tmp_path / "none"),
                        "--out", str(tmp_path / "x")], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stderr.startswith("error:")


# ---- the script, 2 steps x 1 seed ----

@pytest.mark.slow
def test_run_sh_smoke_end_to_end_and_resumes(tmp_path):
    env = dict(os.environ, RUNS=str(tmp_path / "runs"), PYTHON=sys.executable, ARMS="grpo dsdr")
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    cmd = ["bash", "reports/ablation_study/run.sh", "--smoke"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    runs = tmp_path / "runs"
    assert (runs / "grpo/s0/sweep.done").exists() and (runs / "dsdr/s0/sweep.done").exists()
    assert (runs / "report/analysis.md").exists() and (runs / "report/passk.png").exists()
    # rerun: everything done is skipped (no training, no sweep)
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "grpo seed 0: done" in p.stdout and "dsdr seed 0: done" in p.stdout
    assert ": train\n" not in p.stdout and ": sweep\n" not in p.stdout
    log = (runs / "cpu_time.log").read_text().splitlines()
    assert len(log) == 2 and all(" done wall_s=" in line for line in log)
    assert int(log[0].rsplit("cpu_s=", 1)[1]) > 0  # the first run trained and evaluated: it used CPU


def _cell(pass1, n_c, step=10):
    ids = [f"p{i}" for i in range(len(n_c))]
    return analyze.Cell(dict(zip(ids, pass1)), dict(zip(ids, n_c)), dict(zip(ids, [0.1] * len(ids))),
                        dict(zip(ids, [0.0] * len(ids))), step)


def test_seed_means_are_paired_differences_and_the_interval_is_t_over_them():
    # Problems differ a lot (0..1); at seed s DSDR is GRPO + (s + 1)/8 on every problem.
    from scipy.stats import ttest_1samp
    n_c_grpo = [(8, c) for c in range(8)] * 5
    data = {"grpo": {s: [_cell([0.0] * 40, n_c_grpo)] for s in range(3)},
            "dsdr": {s: [_cell([0.0] * 40, [(8, c + s + 1) for c in range(8)] * 5)] for s in range(3)}}
    r = analyze.compare(data, "dsdr", "grpo", "avg@n")
    assert r["seed_diffs"] == pytest.approx({"0": 1 / 8, "1": 2 / 8, "2": 3 / 8}) and r["diff"] == pytest.approx(0.25)
    ci = ttest_1samp([1 / 8, 2 / 8, 3 / 8], 0.0).confidence_interval(0.95)
    assert r["ci95"] == pytest.approx([ci.low, ci.high])


def test_gap_growth_known_value():
    # GRPO: half the problems always right, half never -> pass@k = 0.5 for every k.
    # DSDR: every problem 2 of 8 right -> pass@1 = 0.25, pass@8 = 1. Gap(8) - gap(1) = 0.5 + 0.25 = 0.75.
    grpo = [_cell([1.0] * 10 + [0.0] * 10, [(8, 8)] * 10 + [(8, 0)] * 10)]
    dsdr = [_cell([0.0] * 20, [(8, 2)] * 20)]
    r = analyze.gap_growth({"grpo": {0: grpo}, "dsdr": {0: dsdr}}, "dsdr", "grpo", 8)
    assert r["diff"] == pytest.approx(0.75) and r["seeds"] == 1 and np.isnan(r["ci95"][0])  # one seed: no interval
    r = analyze.gap_growth({"grpo": {0: grpo, 1: grpo}, "dsdr": {0: dsdr, 1: dsdr}}, "dsdr", "grpo", 8)
    assert r["diff"] == pytest.approx(0.75) and r["seed_diffs"] == pytest.approx({"0": 0.75, "1": 0.75})


def test_bad_graded_line_is_one_line_error_with_file_line_field(tmp_path):
    _verdicts(tmp_path / "runs", 0.6, 0.2, seeds=1)
    graded = tmp_path / "runs/dsdr/s0/sweep/step_000010/graded.jsonl"
    lines = graded.read_text().splitlines()
    lines[4] = json.dumps({"problem_id": "p0", "phase": "sampling"})  # no 'correct'
    graded.write_text("\n".join(lines) + "\n")
    p = subprocess.run([sys.executable, str(ROOT / "reports/ablation_study/analyze.py"), "--runs", str(tmp_path / "runs"),
                        "--out", str(tmp_path / "rep")], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip() == f"error: {graded}:5:correct: missing"


def test_arm_table_and_training_curves_match_plain_computation(tmp_path):
    """The per-arm table (final checkpoint: mean over problems per seed, then mean / min / max over
    seeds) and the dynamics curves (mean over seeds per step, null values skipped) recomputed here
    from the files written, not from the module's readers."""
    rng = np.random.default_rng(1)
    runs = tmp_path / "runs"
    seeds = (0, 2, 5)  # not 0..2: a per-seed value must be keyed by its directory's seed, not its position
    for s in seeds:
        _fake_sweep(runs, "dsdr", s, 0.3 + 0.1 * s, 0.2, rng, problems=6)
    data = analyze.load_runs(runs)
    table = {r["arm"]: r for r in analyze.arm_table(data, None)}
    per_seed_avg, per_seed_demb = [], []
    for s in seeds:
        lines = [json.loads(x) for x in (runs / f"dsdr/s{s}/sweep/step_000010/graded.jsonl").read_text().splitlines()]
        by_pid: dict[str, list[bool]] = {}
        for r in lines:
            if r["phase"] == "sampling":
                by_pid.setdefault(r["problem_id"], []).append(r["correct"])
        per_seed_avg.append(sum(sum(v) / len(v) for v in by_pid.values()) / len(by_pid))
        div = [json.loads(x) for x in (runs / f"dsdr/s{s}/sweep/step_000010/diversity_per_problem.jsonl").read_text().splitlines()]
        per_seed_demb.append(sum(r["all"]["d_emb"] for r in div) / len(div))
    row = table["dsdr"]
    assert row["seeds"] == 3 and row["step"] == 10
    assert row["avg@n"]["mean"] == pytest.approx(sum(per_seed_avg) / 3, rel=1e-12)
    assert (row["avg@n"]["min"], row["avg@n"]["max"]) == pytest.approx((min(per_seed_avg), max(per_seed_avg)))
    assert row["d_emb"]["mean"] == pytest.approx(sum(per_seed_demb) / 3, rel=1e-12)
    assert "vendi" not in row  # not in these files: left blank, not 0
    assert sorted(row["per_seed"]) == list(seeds)
    for i, s in enumerate(seeds):
        assert row["per_seed"][s]["avg@n"] == pytest.approx(per_seed_avg[i], rel=1e-12)
        assert row["per_seed"][s]["d_emb"] == pytest.approx(per_seed_demb[i], rel=1e-12)
        assert "vendi" not in row["per_seed"][s]
    md = analyze.markdown([], data, [], None, analyze.arm_table(data, None))
    line = next(x for x in md.splitlines() if x.startswith("| dsdr | 5 | "))
    assert f"{per_seed_avg[2]:.3f}" in line and f"{per_seed_demb[2]:.3f}" in line
    # curves: seed 0 logs coupling at steps 1 and 2, seed 1 only at step 2 (null at step 1)
    for s, values in ((0, [0.5, 0.7]), (1, [None, 0.9])):
        m = runs / f"dsdr/s{s}/train/metrics.jsonl"
        m.parent.mkdir(parents=True, exist_ok=True)
        m.write_text("".join(json.dumps({"step": i + 1, "coupling/entropy": v, "reward/mean": 0.1 * (i + s)}) + "\n"
                             for i, v in enumerate(values)))
    curves = analyze.train_curves(runs)["dsdr"]
    assert curves["coupling/entropy"] == [(1, pytest.approx(0.5)), (2, pytest.approx(0.8))]
    assert curves["reward/mean"] == [(1, pytest.approx(0.05)), (2, pytest.approx(0.15))]
    assert analyze.train_dynamics(runs)["dsdr"]["coupling/entropy"] == pytest.approx(0.8)


def test_arm_curve_on_a_seed_subset_matches_plain_pass_at_k(tmp_path):
    """The pass@k plot compares arms on the seeds they share: arm_curve(seeds=[...]) is the mean over
    exactly those seeds x problems of 1 - C(n-c, k)/C(n, k), computed here from the graded files."""
    rng = np.random.default_rng(3)
    runs = tmp_path / "runs"
    for s in (0, 1, 3, 4):
        _fake_sweep(runs, "grpo", s, 0.1 + 0.2 * s, 0.2, rng, problems=5)
    data = analyze.load_runs(runs)

    def plain(seeds, k):
        vals = []
        for s in seeds:
            counts: dict[str, list[int]] = {}
            for line in (runs / f"grpo/s{s}/sweep/step_000010/graded.jsonl").read_text().splitlines():
                r = json.loads(line)
                if r["phase"] == "sampling":
                    c = counts.setdefault(r["problem_id"], [0, 0])
                    c[0] += 1
                    c[1] += int(r["correct"])
            vals += [1 - math.comb(n - c, k) / math.comb(n, k) for n, c in counts.values()]
        return sum(vals) / len(vals)

    ks = [1, 2, 4, 8]
    sub = analyze.arm_curve(data, "grpo", ks, seeds=[0, 3])
    every = analyze.arm_curve(data, "grpo", ks)
    for k, (m_sub, lo, hi), (m_all, _, _) in zip(ks, sub, every):
        assert m_sub == pytest.approx(plain([0, 3], k), rel=1e-12) and lo <= m_sub <= hi
        assert m_all == pytest.approx(plain([0, 1, 3, 4], k), rel=1e-12)
    assert sub[0][0] != pytest.approx(every[0][0])  # the subset is not the whole


def test_matched_accuracy_removes_what_the_accuracy_gap_predicts():
    """D at matched accuracy: per seed (D_A - D_B) - beta (acc_A - acc_B), beta = the least-squares slope of
    D on avg@n over every checkpoint of both arms (scipy's linregress here). A diversity gap that is all
    accuracy (D = 0.5 - 0.4 acc exactly, arms differ in accuracy only) is 0 at matched accuracy."""
    from scipy.stats import linregress
    rng = np.random.default_rng(6)

    def cell(acc_c: int, d: float, step: int) -> "analyze.Cell":
        ids = [f"p{i}" for i in range(4)]
        return analyze.Cell({i: 0.0 for i in ids}, {i: (8, acc_c) for i in ids}, {i: d for i in ids},
                            {i: d / 2 for i in ids}, step)
    data: dict = {"grpo": {}, "dsdr": {}}
    for arm, shift in (("grpo", 0), ("dsdr", 2)):
        for s in range(3):
            cs = [int(rng.integers(0, 5)) + shift + k for k in (0, 1)]
            data[arm][s] = [cell(c, 0.5 - 0.4 * c / 8 + (0.03 * rng.normal() if arm == "dsdr" else 0), st)
                            for c, st in zip(cs, (5, 10))]
    pts = [(c.n_c["p0"][1] / 8, c.d_emb["p0"]) for arm in data.values() for cells in arm.values() for c in cells]
    beta = linregress(*zip(*pts)).slope
    r = analyze.matched(data, "dsdr", "grpo", "d_emb")
    assert r["beta"] == pytest.approx(beta, rel=1e-9)
    for s in range(3):
        a, b = data["dsdr"][s][-1], data["grpo"][s][-1]
        ref = (a.d_emb["p0"] - b.d_emb["p0"]) - beta * (a.n_c["p0"][1] - b.n_c["p0"][1]) / 8
        assert r["seed_diffs"][str(s)] == pytest.approx(ref, rel=1e-9, abs=1e-12)
    # no noise: diversity is a function of accuracy alone, so the matched difference is 0 at every seed
    for arm in data.values():
        for cells in arm.values():
            for i, c in enumerate(cells):
                cells[i] = cell(c.n_c["p0"][1], 0.5 - 0.4 * c.n_c["p0"][1] / 8, c.step)
    r = analyze.matched(data, "dsdr", "grpo", "d_emb")
    assert r["beta"] == pytest.approx(-0.4) and all(abs(v) < 1e-12 for v in r["seed_diffs"].values())
    assert analyze.compare(data, "dsdr", "grpo", "d_emb")["diff"] < -0.05  # unconditionally DSDR looks less diverse


# ---- the formula-term watch (issue 42): the graded box inside an open `$` span ----

# (completion, where the graded answer ends, expected) -- labelled by hand: is the box the grader read
# preceded by an odd number of unescaped `$`, i.e. was the closing `$` before \boxed{} dropped?
WATCH_CASES = [
    (" $3 + 9 = 12$. \\boxed{12}\nQ: Compute $4 +", 25, False),       # honest: the span closes before the box
    (" $3 + 9 = 12. \\boxed{12}\nR: Compute $2 +", 24, True),          # the hack: no `$` before the box
    (" $3 + 9 = 12. \\boxed{12}$", 24, True),                          # box inside the span
    (" $3 + 9 = $22. \\boxed{22}\nA: Compute $14", 25, False),         # `$` moved, spans balanced before the box
    (" $a\\$ = 1$ then \\boxed{1} $x \\boxed{2}", 38, True),           # the graded box is the last one
    (" $a\\$ = 1$ then \\boxed{1} $x \\boxed{2}", 25, False),          # ... or the one answer_end names
    (" $x = 5$ so x = 5", None, False),                                # no graded answer: not counted
    (" The answer: $5", 15, False),                                    # no box at all
]


@pytest.mark.parametrize(("completion", "end", "expected"), WATCH_CASES)
def test_box_in_open_math_reads_the_graded_box(completion, end, expected):
    assert analyze.box_in_open_math(completion, end) is expected


def test_watch_and_validity_tables_from_run_directories(tmp_path):
    """open_math_share over the sampled rollouts (pass1 left out) per arm and step, and the validity line
    of the final checkpoints, as analysis.md shows them; files graded before answer_end give no share."""
    rng = np.random.default_rng(0)
    for s in range(2):
        _fake_sweep(tmp_path, "dsdr", s, 0.5, 0.2, rng, problems=3)
    hack, honest = WATCH_CASES[1][:2], WATCH_CASES[0][:2]
    for s, n_hack in ((0, 3), (1, 6)):
        run = tmp_path / "dsdr" / f"s{s}" / "sweep" / "step_000010"
        rows = [json.loads(x) for x in (run / "graded.jsonl").read_text().splitlines()]
        k = 0
        for r in rows:
            hacked = r["phase"] == "sampling" and k < n_hack or r["phase"] == "pass1"  # pass1 is not counted
            k += r["phase"] == "sampling"
            r["completion"], r["answer_end"] = hack if hacked else honest
        (run / "graded.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        line = {"solution_cut": {"share_cut": 0.5 + s / 4, "chars_removed_share": 0.3},
                "token_cap": {"share": 1.0}, "long_after_answer": {"share": 0.25}}
        (run / "metrics.json").write_text(json.dumps({"benchmarks": {"heldout": {"diversity": {"validity": line}}}}))
    watch = analyze.hack_watch(tmp_path)
    assert watch == {"dsdr": {"10": [3 / 24, 6 / 24]}}  # step 5 was graded before answer_end: no share
    validity = analyze.validity_by_arm(tmp_path, analyze.load_runs(tmp_path))
    assert validity["dsdr"]["cut"] == {"mean": 0.625, "min": 0.5, "max": 0.75}
    text = "\n".join(analyze.watch_markdown(watch, validity))
    assert "| dsdr | 0.188 (0.125..0.250) |" in text and "| dsdr | 0.625 (0.500..0.750) | 0.300 |" in text
