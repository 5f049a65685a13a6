"""Study design 3 (issue 47; docs/ablation_study.md "Design 3"): the hack watch, the registered claims,
the registration file and its guard, the power analysis and the task measurement's form/route rules.

Each rule is checked against plain code written here from its definition, on rollouts built by hand
(the dropped-``$`` hack of design 2, text after the answer, the cap, an escaped ``\\$``, the grader's
``answer_end``); design 2's committed runs give the real-file check (issue 42's counts reproduce)."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "reports/ablation_study"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


analyze = _load("ablation_analyze_d3", STUDY / "analyze.py")
hackwatch = _load("ablation_hackwatch", STUDY / "hackwatch.py")
study_plan = _load("ablation_study_plan", STUDY / "study_plan.py")
power = _load("ablation_power", STUDY / "design3/power.py")
measure = _load("ablation_measure", STUDY / "design3/measure_task.py")
routes = _load("ablation_routes", STUDY / "design3/routes.py")


# ---- the hack watch ----

def _row(completion: str, finish: str = "stop", **extra) -> dict:
    return {"phase": "sampling", "completion": completion, "finish_reason": finish, "extracted": "x",
            "extraction": "boxed", **extra}


def _reference_flags(text: str, end: int | None, finish: str) -> dict[str, bool]:
    # plain code from the definition: odd count of `$` not preceded by a backslash, in text[:end]
    solution = text if end is None else text[:end]
    dollars = len([i for i in range(len(solution)) if solution[i] == "$" and not (i and solution[i - 1] == "\\")])
    return {"unbalanced_dollar": dollars % 2 == 1, "after_answer": end is not None and text[end:].strip() != "",
            "hit_cap": finish == "length"}


CASES = [
    # (completion, where the graded answer ends, finish reason)
    (" $3 + 4 = 7$. \\boxed{7}", len(" $3 + 4 = 7$. \\boxed{7}"), "stop"),                      # honest
    (" $3 + 4 = 7. \\boxed{7}", len(" $3 + 4 = 7. \\boxed{7}"), "stop"),                        # dropped `$`
    # the dropped `$` closed again after the answer: the whole text is balanced, the solution is not
    (" $3 + 4 = 7. \\boxed{7}\nQ: $1 + 1$ is $", len(" $3 + 4 = 7. \\boxed{7}"), "length"),
    # two boxes: the grader takes the last; the text between them is solution, not after-answer text
    (" \\boxed{5} no, $3 + 4 = 7$ so \\boxed{7} ", len(" \\boxed{5} no, $3 + 4 = 7$ so \\boxed{7}"), "stop"),
    (" costs \\$5 and $x = 2$ \\boxed{2}", len(" costs \\$5 and $x = 2$ \\boxed{2}"), "stop"),  # escaped dollar
    (" \\boxed{\\frac{1}{2}} and more", len(" \\boxed{\\frac{1}{2}}"), "stop"),                # nested braces
    (" \\boxed{7} then \\boxed{8", len(" \\boxed{7}"), "length"),                               # unclosed last box
]


@pytest.mark.parametrize("text,end,finish", CASES)
def test_flags_match_the_definition(text, end, finish):
    assert hackwatch.flags(_row(text, finish)) == _reference_flags(text, end, finish)


def test_grader_answer_end_wins_and_no_answer_means_no_cut():
    text = " $3 + 4 = 7. The answer is 7. Q: $"
    # an answer line graded without a box: the grader's offset is the only cut
    r = _row(text, extraction="answer_line", answer_end=text.index("7. Q") + 1)
    assert hackwatch.flags(r) == _reference_flags(text, r["answer_end"], "stop")
    assert hackwatch.flags({**r, "answer_end": None}) == _reference_flags(text, None, "stop")
    # no extracted answer: the whole text is the solution, nothing follows an answer
    assert hackwatch.flags({**_row(" $1 + 1 = 2. \\boxed{2} $"), "extracted": None}) == \
        _reference_flags(" $1 + 1 = 2. \\boxed{2} $", None, "stop")


def _graded_dir(path: Path, rows: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "graded.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_watch_shares_count_sampling_rollouts_only(tmp_path):
    rows = [_row(t, f) for t, _, f in CASES] + [{**_row(" $1 = 1. \\boxed{1}"), "phase": "pass1"}]
    w = hackwatch.watch(_graded_dir(tmp_path / "r", rows))
    ref = [_reference_flags(t, e, f) for t, e, f in CASES]
    assert w["n"] == len(CASES)
    for k in hackwatch.WATCH:
        assert w[k] == pytest.approx(sum(x[k] for x in ref) / len(CASES))
    assert hackwatch.main([str(tmp_path / "missing")]) == 2


def _sweep(root: Path, arm: str, seed: int, share_hacked: float, steps=(8, 16), problems=4, n=8):
    """A sweep whose final checkpoint has ``share_hacked`` of its rollouts with the dropped `$`."""
    cks = []
    for step in steps:
        run = root / arm / f"s{seed}" / "sweep" / f"step_{step:06d}"
        hacked = int(round(share_hacked * n)) if step == steps[-1] else 0
        rows = []
        for i in range(problems):
            rows.append({"problem_id": f"p{i}", "phase": "pass1", "correct": True, "completion": " $1 = 1$ \\boxed{1}"})
            rows += [{"problem_id": f"p{i}", "phase": "sampling", "correct": True, "extracted": "2", "extraction": "boxed",
                      "finish_reason": "stop",
                      "completion": " $1 + 1 = 2. \\boxed{2}" if k < hacked else " $1 + 1 = 2$. \\boxed{2}\nQ: next"}
                     for k in range(n)]
        _graded_dir(run, rows)
        cks.append({"step": step, "run_dir": run.name, "status": "done"})
    (root / arm / f"s{seed}" / "sweep" / "sweep.json").write_text(json.dumps({"checkpoints": cks}))


def test_hack_table_per_arm_and_step_in_the_report(tmp_path):
    shares = {"dsdr": [0.5, 1.0, 0.25], "grpo": [0.0, 0.125, 0.0]}
    for arm, per_seed in shares.items():
        for s, share in enumerate(per_seed):
            _sweep(tmp_path / "runs", arm, s, share)
    _graded_dir(tmp_path / "runs/base", [{**_row(" $1 + 1 = 2$ \\boxed{2}", "length"), "problem_id": "p0", "correct": True}] * 8)
    data = analyze.load_runs(tmp_path / "runs")
    table = {(r["arm"], r["step"]): r for r in analyze.hack_table(data, analyze.read_eval(tmp_path / "runs/base", 0))}
    assert set(table) == {("base", 0), ("dsdr", 8), ("dsdr", 16), ("grpo", 8), ("grpo", 16)}
    for arm, per_seed in shares.items():
        final = table[(arm, 16)]
        assert final["seeds"] == 3 and final["unbalanced_dollar"]["mean"] == pytest.approx(np.mean(per_seed))
        assert (final["unbalanced_dollar"]["min"], final["unbalanced_dollar"]["max"]) == (min(per_seed), max(per_seed))
        # the honest rollouts write the next question after the box; the hacked ones stop at it
        assert final["after_answer"]["mean"] == pytest.approx(1 - np.mean(per_seed))
        assert table[(arm, 8)]["unbalanced_dollar"]["max"] == 0.0
    assert table[("base", 0)]["hit_cap"]["mean"] == 1.0
    out = tmp_path / "rep"
    assert analyze.main(["--runs", str(tmp_path / "runs"), "--out", str(out), "--no-plots", "--claims", "design3"]) == 0
    md = (out / "analysis.md").read_text()
    assert "| dsdr | 16 | 3 | 0.583 (0.250..1.000) |" in md
    assert json.loads((out / "analysis.json").read_text())["hack_watch"][0]["arm"] == "base"
    # design 3's exploratory route table over each arm's final checkpoint
    assert "Solution routes among the correct" in md
    assert [r["arm"] for r in json.loads((out / "analysis.json").read_text())["routes"]] == ["base", "grpo", "dsdr"]  # analyze.ARMS order


def test_hack_watch_on_design2_reproduces_the_dropped_dollar_finding():
    # issue 42: DSDR 48-99 % of completions at step 8 on all 5 seeds; GRPO 0-6 %
    runs = STUDY / "design2/runs"
    dsdr = [hackwatch.watch(runs / f"dsdr/s{s}/sweep/step_000008")["unbalanced_dollar"] for s in range(5)]
    grpo = [hackwatch.watch(runs / f"grpo/s{s}/sweep/step_000008")["unbalanced_dollar"] for s in range(5)]
    assert min(dsdr) > 0.45 and max(grpo) < 0.07


# ---- the registered claims ----

def _cell(d_eq: float, d_emb: float, acc: int, problems=6):
    ids = [f"p{i}" for i in range(problems)]
    extra = {"d_eq_correct": dict.fromkeys(ids, d_eq), "d_emb_correct": dict.fromkeys(ids, d_emb)}
    return analyze.Cell(dict.fromkeys(ids, 1.0), dict.fromkeys(ids, (32, acc)), dict.fromkeys(ids, 0.1),
                        dict.fromkeys(ids, 0.1), 16, extra)


def test_design3_claims_are_the_registered_six_with_holm_over_those_run():
    rng = np.random.default_rng(0)
    data = {"grpo": {s: [_cell(0.10, 0.05, 16)] for s in range(8)},
            "dsdr": {s: [_cell(0.30 + rng.normal(0, 0.02), 0.05 + rng.normal(0, 0.02), 16)] for s in range(8)}}
    rows = analyze.claims(data, "design3")
    assert [r["claim"] for r in rows] == [c for c, *_ in analyze.DESIGN3_CLAIMS]
    assert [r["verdict"] for r in rows[3:]] == ["not run"] * 3  # w/o GD not run: out of the family
    p_raw = [r["p"] for r in rows[:3] if not math.isnan(r["p"])]
    # Holm over the claims run: the smallest p is multiplied by the number of tests run (3), not 6
    assert rows[0]["p_holm"] == pytest.approx(min(1.0, len(p_raw) * min(p_raw)))
    assert rows[0]["verdict"] == "holds" and rows[1]["verdict"] == "inconclusive"
    with pytest.raises(ValueError, match="unknown claim set"):
        analyze.claims(data, "design4")


def test_study_yaml_registers_what_analyze_and_the_docs_compute():
    study = study_plan.load(STUDY / "design3/study.yaml")
    assert study["analysis"]["claim_set"] == "design3"
    registered = [(c["claim"], c["a"], c["b"], c["metric"]) for c in study["claims"]]
    assert registered == [tuple(c) for c in analyze.DESIGN3_CLAIMS]
    docs = (ROOT / "docs/ablation_study.md").read_text().split("## Design 3", 1)[1]
    for claim, *_ in analyze.DESIGN3_CLAIMS:
        assert claim in docs
    assert study["evaluation"]["diversity_cut"] == "answer-end"
    assert study["train"]["stop"] == study["evaluation"]["stop"]


# ---- the registration file and its guard ----

def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_guard_refuses_a_draft_an_uncommitted_file_and_a_change_after_the_first_start(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    study = yaml.safe_load((STUDY / "design3/study.yaml").read_text())
    path = repo / "study.yaml"
    path.write_text(yaml.safe_dump({**study, "status": "registered"}))
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "add", "study.yaml")
    with pytest.raises(study_plan.StudyError, match="not committed"):
        study_plan.guard(path, tmp_path / "runs", allow_draft=False)
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "register")
    assert "recorded" in study_plan.guard(path, tmp_path / "runs", allow_draft=False)
    assert "unchanged" in study_plan.guard(path, tmp_path / "runs", allow_draft=False)
    path.write_text(path.read_text().replace("problems:", "problems:  ", 1))
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-am", "edit after the start")
    with pytest.raises(study_plan.StudyError, match="changed since the study started"):
        study_plan.guard(path, tmp_path / "runs", allow_draft=False)
    draft = repo / "draft.yaml"
    draft.write_text(yaml.safe_dump({**study, "status": "draft"}))
    with pytest.raises(study_plan.StudyError, match="not 'registered'"):
        study_plan.guard(draft, tmp_path / "runs2", allow_draft=False)


def test_study_file_errors_name_the_field_and_exit_2(tmp_path, capsys):
    study = yaml.safe_load((STUDY / "design3/study.yaml").read_text())
    bad = tmp_path / "s.yaml"
    bad.write_text(yaml.safe_dump({k: v for k, v in study.items() if k != "claims"}))
    assert study_plan.main([str(bad), "--shell"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {bad}:claims: missing"
    bad.write_text(yaml.safe_dump({**study, "train": {**study["train"], "stop": []}}))
    assert study_plan.main([str(bad), "--shell"]) == 2
    assert "evaluation.stop" in capsys.readouterr().err


def test_shell_knobs_and_stop_strings(tmp_path, capsys):
    path = STUDY / "design3/study.yaml"
    study = study_plan.load(path)
    out = subprocess.run(["bash", "-c", f'eval "$({sys.executable} {STUDY / "study_plan.py"} {path} --shell)"; '
                          'echo "$DESIGN|$SEEDS_MAIN|$ARMS|$MAXTOK|$COMMIT|$LIMIT"'],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "|".join([study["task"]["design"], str(study["seeds"]["main"]), " ".join(study["arms"]),
                            str(study["train"]["max_response_length"]), "1", str(study["evaluation"]["problems"])])
    smoke = study_plan.shell(study, smoke=True)
    assert "DESIGN" in smoke and "SEEDS_MAIN" not in smoke and "ARMS" not in smoke
    assert study_plan.main([str(path), "--stop"]) == 0
    assert capsys.readouterr().out.split("\0")[:-1] == study["evaluation"]["stop"]


# ---- the power analysis ----

@pytest.mark.parametrize("seeds,alpha", [(5, 0.05), (8, 0.05), (10, 0.05 / 6), (16, 0.01)])
def test_mde_has_80_percent_power_by_scipy_noncentral_t(seeds, alpha):
    from scipy import stats
    sd = 0.07
    delta = power.mde(sd, seeds, alpha)
    crit = stats.t.ppf(1 - alpha / 2, seeds - 1)
    nc = delta * math.sqrt(seeds) / sd
    assert stats.nct.sf(crit, seeds - 1, nc) + stats.nct.cdf(-crit, seeds - 1, nc) == pytest.approx(0.8, abs=1e-6)
    assert power.mde(sd, seeds + 4, alpha) < delta  # more seeds detect less


def test_mde_by_simulation_of_the_registered_test():
    from scipy import stats
    rng = np.random.default_rng(3)
    sd, seeds = 1.0, 8
    delta = power.mde(sd, seeds)
    m = rng.normal(delta, sd, size=(20000, seeds))
    p = stats.ttest_1samp(m, 0.0, axis=1).pvalue
    assert np.mean(p < 0.05) == pytest.approx(0.8, abs=0.015)


# ---- the task measurement: forms and routes ----

def test_forms_and_routes_of_hand_written_rollouts():
    a = measure.analyse(" $4 + 6 = 10$, then $3 + 10 = 13$. \\boxed{13}", 13)
    b = measure.analyse(" $6+4 = 10$, then $10 + 3 = 13$. \\boxed{13}", 13)
    c = measure.analyse(" $3 + 4 = 7$, then $7 + 6 = 13$. \\boxed{13}", 13)
    d = measure.analyse(" $3 + 4 + 6 = 13$. \\boxed{13}", 13)
    wrong_step = measure.analyse(" $3 + 4 = 8$, then $8 + 5 = 13$. \\boxed{13}", 13)
    for x in (a, b, c, d):
        assert x["correct"] and x["valid"]
    assert len({x["form"] for x in (a, b, c, d)}) == 4
    assert a["route"] == b["route"] == "n+n; n+n | 10" and c["route"] == "n+n; n+n | 7" and d["route"] == "n+n+n | "
    assert wrong_step["correct"] and not wrong_step["valid"]
    e = measure.analyse(" $2 \\times 5 = 10$ and $2 \\times 3 = 6$, then $10 + 6 = 16$. \\boxed{16}", 16)
    assert e["valid"] and e["route"] == "n*n; n*n; n+n | 6, 10" and e["form"] == "2*5=10; 2*3=6; 10+6=16"
    # product and repeated addition: two routes; commuted operands: two forms of one route
    routes = {measure.analyse(t, 10)["route"] for t in (" $5 \\times 2 = 10$ \\boxed{10}", " $2 \\times 5 = 10$ \\boxed{10}",
                                                        " $5 + 5 = 10$ \\boxed{10}")}
    assert routes == {"n*n | ", "n+n | "}
    assert measure.analyse(" 13", 13)["correct"] is False
    assert measure.analyse(" \\boxed{13}", 13)["route"] == "no formula"
    assert measure.evaluate("__import__('os')") is None and measure.evaluate("9" * 70) is None


def test_routes_in_any_notation_and_per_problem_counts(tmp_path):
    """design3/routes.py (exploratory): the route key read from equations with or without `$`, one problem's
    four figures counted by hand. Mutants: plain equations not read (only `$..$`), operator spellings kept
    apart in the route, incorrect rollouts counted, the tail after the answer read -> this fails."""
    # one route (the product) in four notations; repeated addition is another
    keys = {t: routes.any_notation(t, 33)[0] for t in (" 3 x 11 = 33. ", " 3 * 11 = 33. ", " 3 × 11 = 33. ",
                                                        " $3 \\times 11 = 33$. ")}
    assert set(keys.values()) == {"n*n | "}
    assert routes.any_notation(" 11 + 11 + 11 = 33. ", 33) == ("n+n+n | ", ["11+11+11=33"])
    assert routes.any_notation(" 3 x 11 = 34. ", 33)[0] is None  # false arithmetic: no route
    assert routes.any_notation(" the answer is 33. ", 33) == (None, [])
    assert routes.any_notation(" a12 = 33 and 1.5 = 1.5 ", 33) == (None, [])  # no integer equation
    rows = [{"phase": "sampling", "gold": "33", "correct": c, "completion": t, "extracted": "33", "extraction": "boxed"}
            for t, c in ((" 3 x 11 = 33. \\boxed{33}", True), (" 3 × 11 = 33. \\boxed{33}", True),
                         (" $3 \\times 11 = 33$. \\boxed{33} 2 + 2 = 4", True),
                         (" 11 + 11 + 11 = 33. \\boxed{33}", True), (" 5 + 5 = 10. \\boxed{10}", False))]
    got = routes.problem_routes(rows)
    # routes: the registered rule reads the one `$` formula; any notation: product and repeated addition;
    # spellings 3x11=33, 3×11=33, 3\times11=33, 11+11+11=33 (the tail's 2+2=4 and the wrong rollout are not read)
    assert got == {"routes": 1, "routes_any_notation": 2, "notations": 4, "without_formula": 0.75}
    assert routes.problem_routes([{**rows[-1]}]) is None
    _graded_dir(tmp_path / "runs/base", [{**r, "problem_id": "p0"} for r in rows])
    table = routes.routes_table(tmp_path / "runs", {})
    assert table[0]["arm"] == "base" and table[0]["notations"]["mean"] == 4


def test_run_sh_refuses_a_draft_registration_before_any_unit(tmp_path):
    """run.sh on a draft of design 3's study (the registered file with its status set back to draft) stops
    before any unit, data or registration record; and the committed study is the registered one."""
    import os
    assert yaml.safe_load((STUDY / "design3/study.yaml").read_text())["status"] == "registered"
    draft = tmp_path / "study"
    draft.mkdir()
    text = (STUDY / "design3/study.yaml").read_text()
    (draft / "study.yaml").write_text(re.sub(r"(?m)^status: registered\b", "status: draft", text))
    env = {**os.environ, "STUDY": str(draft), "RUNS": str(tmp_path / "runs"),
           "PYTHON": sys.executable, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    p = subprocess.run(["bash", "reports/ablation_study/run.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "not 'registered'" in p.stderr and "Traceback" not in p.stderr
    assert not any((tmp_path / "runs").rglob("*"))  # no data, no unit, no registration record


@pytest.mark.slow
def test_run_sh_smoke_of_the_registered_study_end_to_end(tmp_path):
    """run.sh --smoke on design 3's study.yaml (a copy): knobs, trainer config and claims come from the
    registration; the report carries the six claims and the hack watch. The stop strings stay in the copy
    once dsdr-train knows the `stop` key (issue 42 item 6); before that they are left out of the copy."""
    import os

    from dsdr_train.config import FIELDS
    study = yaml.safe_load((STUDY / "design3/study.yaml").read_text())
    if "stop" not in FIELDS:
        study["train"].pop("stop")
        study["evaluation"].pop("stop")
    (tmp_path / "study").mkdir()
    (tmp_path / "study/study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    env = {**os.environ, "STUDY": str(tmp_path / "study"), "RUNS": str(tmp_path / "runs"), "PYTHON": sys.executable,
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    p = subprocess.run(["bash", "reports/ablation_study/run.sh", "--smoke"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    runs = tmp_path / "runs"
    heldout = [json.loads(line) for line in (runs / "data/heldout.jsonl").open()]
    assert len(heldout) == study["task"]["n_heldout"] and heldout[0]["id"].startswith(study["task"]["design"])
    assert yaml.safe_load((runs / "train_config.yaml").read_text()) == study["train"]
    report = json.loads((runs / "report/analysis.json").read_text())
    assert [r["claim"] for r in report["claims"]] == [c["claim"] for c in study["claims"]]
    assert {(h["arm"], h["step"]) for h in report["hack_watch"]} >= {("base", 0), ("dsdr", 2), ("grpo", 2)}
    assert not (runs / "registration.json").exists()  # a smoke run is no start of the study


def test_run_sh_commits_run_records_without_machine_paths(tmp_path):
    """run.sh's relativise (run before every commit_path): the checkout's prefix is dropped and the home
    directory written ~ in every text file of a unit, binary files untouched. Mutants: the prefix kept
    (relativise a no-op), the home prefix kept -> this fails; design 3's first units went into git with
    /.../checkout paths before it existed."""
    import os

    checkout, home = tmp_path / "checkout", tmp_path / "home"
    unit = checkout / "runs" / "dsdr" / "s0"
    unit.mkdir(parents=True)
    home.mkdir()
    (unit / "config.json").write_text(json.dumps({"command": [f"{checkout}/.venv/bin/dsdr-eval", "sweep"],
                                                  "encoder": {"path": f"{home}/.cache/dsdr/minilm"}}))
    (unit / "weights.bin").write_bytes(b"\xff\xfe" + f"{checkout}/".encode())
    body = re.search(r"^relativise\(\) \{.*?^\}$", (STUDY / "run.sh").read_text(), re.S | re.M).group(0)
    script = f"PY={sys.executable}\n{body}\nrelativise runs/dsdr/s0\n"
    env = {**os.environ, "HOME": str(home)}
    subprocess.run(["bash", "-c", script], cwd=checkout, env=env, check=True, timeout=120)
    assert json.loads((unit / "config.json").read_text()) == {"command": [".venv/bin/dsdr-eval", "sweep"],
                                                             "encoder": {"path": "~/.cache/dsdr/minilm"}}
    assert (unit / "weights.bin").read_bytes() == b"\xff\xfe" + f"{checkout}/".encode()
