"""The cheap pieces of `make demo` (examples/demo.py); the demo itself is not a test (it generates)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.demo_script import load_demo

REPO = Path(__file__).resolve().parents[2]
demo = load_demo()
EXAMPLES = REPO / "reports" / "ablation_study" / "runs"  # the study's committed runs (docs/ablation_study.md)


def test_degenerate_means_no_correct_sample_anywhere():
    zero = {"avg@n": 0.0, "pass@k": {"1": 0.0, "2": 0.0, "4": 0.0}}
    assert demo.is_degenerate({"benchmarks": {"math500": zero}})
    assert not demo.is_degenerate({"benchmarks": {"math500": zero,
                                                  "aime24": {"avg@n": 0.05, "pass@k": {"1": 0.05}}}})
    # a metrics block whose avg@n is missing or 0 still counts as non-degenerate if any Pass@k is positive
    assert not demo.is_degenerate({"benchmarks": {"math500": {"avg@n": 0.0, "pass@k": {"4": 0.25}}}})


def test_the_example_runs_are_the_studys_base_and_each_arms_final_checkpoint():
    """What the demo falls back to: the study's base model and every arm's seed-0 last checkpoint, real
    evaluation runs with the config that made them; the base model and at least one arm answer some
    problems correctly (not degenerate: the point of the fallback)."""
    runs = demo.study_eval_runs(EXAMPLES)
    assert list(runs) == ["base", *(f"{arm}_s0" for arm in demo.ARMS)]
    last_steps = set()
    for name, (run, label) in runs.items():
        config = json.loads((run / "config.json").read_text())
        assert config["kind"] == "eval" and config["protocol"]["phases"]
        if name != "base":
            sweep = json.loads((run.parent / "sweep.json").read_text())
            last_steps.add(max(c["step"] for c in sweep["checkpoints"]))
            assert run.name == f"step_{max(c['step'] for c in sweep['checkpoints']):06d}" and label.endswith(
                f"step {int(run.name[5:])}")
    assert len(last_steps) == 1  # equal steps for every arm
    flags = [demo.is_degenerate(json.loads((run / "metrics.json").read_text())) for run, _ in runs.values()]
    assert not flags[0] and not all(flags[1:])


def test_copy_example_runs_takes_only_samples_and_config(tmp_path):
    copies = demo.copy_example_runs(EXAMPLES, tmp_path)
    sources = demo.study_eval_runs(EXAMPLES)
    assert [c.name for c in copies] == list(sources)
    for copy in copies:
        assert sorted(p.name for p in copy.iterdir()) == ["config.json", "samples.jsonl"]
        assert (copy / "samples.jsonl").read_bytes() == (sources[copy.name][0] / "samples.jsonl").read_bytes()


def test_one_torch_thread_only_on_busy_cores_and_never_over_an_explicit_setting(monkeypatch):
    monkeypatch.setattr(demo.os, "cpu_count", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(demo.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    demo.use_one_thread_when_busy()
    assert "OMP_NUM_THREADS" not in demo.os.environ
    monkeypatch.setattr(demo.os, "getloadavg", lambda: (4.0, 4.0, 4.0))
    demo.use_one_thread_when_busy()
    assert demo.os.environ["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    demo.use_one_thread_when_busy()
    assert demo.os.environ["OMP_NUM_THREADS"] == "2"


def test_the_demo_ships_every_training_log_of_the_study_and_its_claims(tmp_path):
    """The dashboard's training page of the demo shows these (issue 23: it was empty; issue 25: the
    study's runs replace the one-seed mini experiment): every arm and seed, one line per step."""
    copies = demo.copy_training_logs(EXAMPLES, tmp_path)
    seeds = {arm: len(list((EXAMPLES / arm).glob("s*/train/metrics.jsonl"))) for arm in demo.ARMS}
    assert seeds["grpo"] >= 1 and seeds["dsdr"] >= 1 and len(copies) == sum(seeds.values())
    steps = set()
    for copy in copies:
        config = json.loads((copy / "config.json").read_text())
        assert config["kind"] == "train" and copy.name.startswith(config["algo"] + "_s")
        lines = (copy / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(x)["step"] for x in lines] == list(range(1, len(lines) + 1))  # one line per step
        steps.add(len(lines))
    assert steps == {json.loads((copies[0] / "config.json").read_text())["config"]["total_steps"]}
    claims = demo.study_claims(EXAMPLES)
    verdicts = json.loads((EXAMPLES / "report" / "analysis.json").read_text())["claims"]
    assert len(claims) == len(verdicts) and all(line.rstrip().endswith(")") or "not run" in line for line in claims)
    assert all(v["verdict"] in line for v, line in zip(verdicts, claims))


def test_study_claims_print_each_claim_and_say_when_there_is_no_interval(tmp_path):
    """Both designs' claims are printed; a claim with one seed (or identical seed means) has no interval:
    analyze.py writes null, the demo says so instead of failing."""
    (tmp_path / "report").mkdir()
    claims = [{"claim": "A", "verdict": "inconclusive", "diff": 0.1, "ci95": [-0.2, 0.4], "seeds": 5},
              {"claim": "B", "verdict": "inconclusive (1 seed: no interval)", "diff": 0.25, "ci95": [None, None],
               "seeds": 1},
              {"claim": "C", "verdict": "not run"}]
    (tmp_path / "report" / "analysis.json").write_text(json.dumps({"claims": claims}))
    assert demo.study_claims(tmp_path) == [
        "  A: inconclusive (+0.100, 95% CI [-0.200, +0.400], 5 seeds)",
        "  B: inconclusive (1 seed: no interval) (+0.250, no interval, 1 seeds)",
        "  C: not run"]
    assert demo.study_claims(EXAMPLES)  # design 1's committed analysis reads
