"""The Streamlit dashboard: every page via streamlit.testing AppTest on fixture runs scored by the
real code; path containment; malformed runs; read-only."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboards import data, launch
from helpers.fixtures_runs import build_fixture_runs, tree_snapshot

APP = Path(__file__).resolve().parents[2] / "dashboards" / "app.py"


@pytest.fixture(scope="session")
def fixture_runs(tmp_path_factory, data_dir) -> Path:
    return build_fixture_runs(tmp_path_factory.getbasetemp() / "dsdr_fixture_runs", data_dir)


def open_page(runs_dir: Path, page: str, monkeypatch, **query: str | list[str]) -> AppTest:
    monkeypatch.setenv("DSDR_RUNS_DIR", str(runs_dir))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["page"] = page
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(at: AppTest, kind: str) -> list[str]:
    return [str(e.value) for e in at.get(kind)]


def all_text(at: AppTest) -> str:
    parts = []
    for kind in ("markdown", "caption", "info", "warning", "error", "title", "subheader", "code"):
        parts += texts(at, kind)
    return "\n".join(parts)


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_discovery_classifies_runs_and_skips_checkpoints(fixture_runs):
    runs = {r.name: r for r in data.discover_runs(fixture_runs)}
    assert {n: r.kind for n, r in runs.items()} == {
        "eval/broken": "eval", "eval/dsdr": "eval", "eval/grpo": "eval", "eval/hot": "eval", "eval/unscored": "eval",
        "train/corrupt": "train", "train/dapo": "train", "train/dsdr": "train", "train/grpo": "train"}
    assert runs["eval/dsdr"].label == "dsdr" and runs["train/dsdr"].label == "dsdr-fixture"


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_path_containment(tmp_path, fixture_runs):
    root = data.runs_root(fixture_runs)
    assert data.resolve_inside(root, "eval/grpo") == (fixture_runs / "eval" / "grpo").resolve()
    for bad in ("../", "../../etc", "eval/../../..", "/etc", str(fixture_runs / "eval" / "grpo"), "", "a\x00b"):
        with pytest.raises(data.UnsafePath):
            data.resolve_inside(root, bad)
    # A symlink inside the runs dir that points outside is neither resolvable nor discovered.
    outside = tmp_path / "outside_run"
    outside.mkdir()
    (outside / "metrics.json").write_text('{"benchmarks": {}}')
    box = tmp_path / "box"
    (box / "inner").mkdir(parents=True)
    (box / "inner" / "metrics.json").write_text('{"benchmarks": {}}')
    os.symlink(outside, box / "escape")
    with pytest.raises(data.UnsafePath):
        data.resolve_inside(data.runs_root(box), "escape")
    assert [r.name for r in data.discover_runs(box)] == ["inner"]


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_training_page_overlays_runs_and_survives_a_half_written_line(fixture_runs, monkeypatch):
    at = open_page(fixture_runs, "training", monkeypatch, run=["train/grpo", "train/dapo", "train/dsdr"])
    assert at.title[0].value == "Training dynamics"
    assert set(at.multiselect(key="train_runs").value) == {"train/dapo", "train/dsdr", "train/grpo"}
    charts = at.get("plotly_chart")
    assert len(charts) >= 8  # reward/acc, entropy, similarity, length, clip, loss, advantages, groups, ...
    summary = at.dataframe[0].value
    assert set(summary["run"]) == {"grpo-fixture", "dapo-fixture", "dsdr-fixture"}
    assert (summary["steps logged"] == 12).all()  # the partial 13th line of dsdr is skipped, with a note
    assert any("incomplete" in c for c in texts(at, "caption"))
    # smoothing + one run only
    at.multiselect(key="train_runs").set_value(["train/dsdr"])
    at.slider(key="train_smoothing").set_value(0.8)
    at.run()
    assert not at.exception
    assert list(at.dataframe[0].value["run"]) == ["dsdr-fixture"]


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_evaluation_page_table_passk_diversity_judge(fixture_runs, monkeypatch):
    import json

    at = open_page(fixture_runs, "evaluation", monkeypatch, run=["eval/grpo", "eval/dsdr"])
    assert at.title[0].value == "Evaluation"
    assert at.multiselect(key="eval_runs").value == ["eval/grpo", "eval/dsdr"]
    table = at.dataframe[1].value  # [0] is the protocol table
    metrics = json.loads((fixture_runs / "eval" / "dsdr" / "metrics.json").read_text())
    row = table[table["run"] == "dsdr"].iloc[0]
    assert row["MATH500 Pass@1"] == f"{100 * metrics['benchmarks']['math500']['pass1']:.1f}"
    assert row["AIME24 Avg@16"] == f"{100 * metrics['benchmarks']['aime24']['avg@16']:.1f}"
    charts = at.get("plotly_chart")
    assert len(charts) >= 3 + 2 + 2  # Pass@k (2 benchmarks + average), diversity measures, judge + Pass@k bars
    # same protocol: no protocol warning (the diversity validity line may warn: its fixture rollouts hit the cap)
    assert not [w for w in texts(at, "warning") if "protocol" in w]
    # published rows beside the runs
    at.selectbox(key="eval_reference").set_value("paper:qwen3-4b")
    at.run()
    table = at.dataframe[1].value
    assert "Qwen3-4B DSDR (published)" in set(table["run"])
    # a different protocol is shown, with a warning, not refused
    at.multiselect(key="eval_runs").set_value(["eval/grpo", "eval/hot"])
    at.run()
    assert any("different protocols" in w for w in texts(at, "warning"))


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_malformed_run_shows_a_message_and_the_rest_works(fixture_runs, monkeypatch):
    at = open_page(fixture_runs, "evaluation", monkeypatch, run=["eval/broken", "eval/unscored", "eval/grpo"])
    errors = texts(at, "error")
    assert any("eval/broken" in e and "invalid JSON" in e for e in errors)
    assert any("eval/unscored" in e and "not scored yet" in e for e in errors)
    assert "grpo" in set(at.dataframe[1].value["run"])


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_damaged_training_log_is_reported_and_the_others_still_plot(fixture_runs, monkeypatch):
    at = open_page(fixture_runs, "training", monkeypatch, run=["train/corrupt", "train/grpo"])
    errors = texts(at, "error")
    assert any("corrupt/metrics.jsonl:2" in e and "invalid JSON" in e for e in errors)
    assert list(at.dataframe[0].value["run"]) == ["grpo-fixture"]
    assert len(at.get("plotly_chart")) >= 8


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_query_parameter_traversal_is_refused(fixture_runs, monkeypatch):
    # Rooted at runs/eval, "../train/grpo" is a real run, but outside the directory the app was given.
    at = open_page(fixture_runs / "eval", "evaluation", monkeypatch,
                   run=["../train/grpo", "grpo/../../train/dapo", "/etc", "grpo"])
    errors = texts(at, "error")
    assert sum("outside the runs directory" in e for e in errors) == 2
    assert sum("absolute paths are not accepted" in e for e in errors) == 1
    assert at.multiselect(key="eval_runs").value == ["grpo"]
    at = open_page(fixture_runs / "eval", "training", monkeypatch, run="../train/grpo")
    assert "grpo-fixture" not in all_text(at)
    assert any("No training runs" in i for i in texts(at, "info"))


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_samples_page_filters_and_formulas(fixture_runs, monkeypatch):
    at = open_page(fixture_runs, "samples", monkeypatch, run="eval/dsdr")
    assert at.selectbox(key="samples_run").value == "eval/dsdr"
    labels = [e.label for e in at.expander]
    assert len(labels) == 17  # 1 pass1 + 16 sampling rollouts of the first problem
    assert any("correct" in lab for lab in labels)
    assert any("d_emb" in lab or "semantic" in lab or "=" in lab for lab in labels)  # per-rollout diversity
    assert any("Formulas" in m for m in texts(at, "markdown"))
    at.multiselect(key="samples_status").set_value(["correct"])
    at.run()
    labels = [e.label for e in at.expander]
    assert labels and all(" correct " in lab and "incorrect" not in lab for lab in labels)
    at.selectbox(key="samples_benchmark").set_value("math500")
    at.run()
    assert not at.exception
    assert "Gold answer" in all_text(at)


def test_empty_and_missing_runs_dir(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    at = open_page(empty, "training", monkeypatch)
    assert any("No run directories found" in i for i in texts(at, "info"))
    assert "dsdr-eval run" in all_text(at)
    at = open_page(tmp_path / "nope", "evaluation", monkeypatch)
    assert any("does not exist" in e for e in texts(at, "error"))


@pytest.mark.slow  # fixture_runs scores its runs' diversity with MiniLM (26 s, once per session)
def test_dashboard_never_writes_into_runs(fixture_runs, monkeypatch):
    before = tree_snapshot(fixture_runs)
    for page in ("training", "evaluation", "samples"):
        open_page(fixture_runs, page, monkeypatch, run=["eval/grpo", "eval/dsdr", "train/dsdr"])
    assert tree_snapshot(fixture_runs) == before


def test_launcher_binds_loopback_and_passes_runs_dir(tmp_path):
    args = launch.parse_args(["--runs", str(tmp_path), "--port", "8600"])
    command = launch.build_command(args)
    assert command[command.index("--server.address") + 1] == "127.0.0.1"
    assert command[command.index("--server.headless") + 1] == "true"
    assert command[-3:] == ["--", "--runs", str(tmp_path.resolve())]
    assert command[1:4] == ["-m", "streamlit", "run"] and command[4].endswith("dashboards/app.py")


def test_training_page_picks_up_new_steps_while_a_run_writes(tmp_path, monkeypatch):
    import json

    from helpers.fixtures_runs import write_train_run

    live = write_train_run(tmp_path / "runs" / "live", algo="dsdr", steps=3, label="live")
    at = open_page(tmp_path / "runs", "training", monkeypatch)
    assert at.dataframe[0].value["steps logged"].tolist() == [3]
    row = json.loads((live / "metrics.jsonl").read_text().splitlines()[-1])
    with (live / "metrics.jsonl").open("a") as fh:  # the trainer appends step 4
        fh.write(json.dumps({**row, "step": 4}) + "\n")
    at.run()  # what the live fragment's timer does
    assert at.dataframe[0].value["steps logged"].tolist() == [4]


def _graded_rows(problem: str, extracted: str, marker: str = "") -> list[dict]:
    return [{"benchmark": "math500", "problem_id": "p0", "sample_idx": i, "phase": "sampling", "problem": problem,
             "gold": "1", "completion": f"{marker} so the answer is 1", "correct": i == 0,
             "status": "correct" if i == 0 else "incorrect", "extracted": extracted} for i in range(2)]


def _write_graded(run: Path, rows: list[dict]) -> None:
    import json

    run.mkdir(parents=True, exist_ok=True)
    (run / "graded.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_file_symlinks_out_of_the_runs_dir_are_never_read(tmp_path, monkeypatch):
    import json

    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.jsonl"
    secret.write_text("".join(json.dumps(r) + "\n" for r in _graded_rows("SECRET-PROBLEM", "1", "SECRET-TEXT")))
    (outside / "metrics.json").write_text('{"benchmarks": {"SECRETBENCH": {"avg@n": 0.5}}}')
    runs = tmp_path / "runs"
    (runs / "x").mkdir(parents=True)
    os.symlink(secret, runs / "x" / "graded.jsonl")
    (runs / "y").mkdir()
    os.symlink(outside / "metrics.json", runs / "y" / "metrics.json")
    (runs / "y" / "config.json").write_text('{"kind": "eval"}')
    _write_graded(runs / "z", _graded_rows("Inside problem", "1"))
    os.symlink(runs / "z" / "graded.jsonl", runs / "z" / "samples.jsonl")  # a link inside the root is fine

    found = {r.name: r for r in data.discover_runs(runs)}
    assert found["x"].refused == {"graded.jsonl"} and not found["x"].has("graded.jsonl")
    assert found["y"].refused == {"metrics.json"} and not found["z"].refused and found["z"].has("samples.jsonl")
    for page, query in (("samples", "x"), ("samples", "y"), ("evaluation", "y"), ("evaluation", "x"),
                        ("samples", "../outside"), ("training", "x")):
        at = open_page(runs, page, monkeypatch, run=query)
        shown = all_text(at) + "".join(e.label for e in at.expander) + str([d.value for d in at.dataframe])
        assert "SECRET" not in shown, (page, query)
    assert any("x: not read" in w and "graded.jsonl" in w for w in texts(at, "warning"))
    # a file swapped for a link after discovery is refused when it is read
    z = found["z"]
    (runs / "z" / "graded.jsonl").unlink()
    os.symlink(secret, runs / "z" / "graded.jsonl")
    loaded = data.load_jsonl(z, "graded.jsonl")
    assert not loaded.ok and "outside the runs directory" in loaded.error and loaded.value is None
    assert not data.load_jsonl(z, "samples.jsonl").ok  # the in-root link now leads out too


def test_refused_run_request_never_falls_back_to_another_run(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    _write_graded(runs / "a", _graded_rows("FALLBACK-PROBLEM", "1", "FALLBACK-TEXT"))
    (runs / "a" / "metrics.json").write_text('{"benchmarks": {"math500": {"avg@n": 0.5, "n_problems": 1}}}')
    from helpers.fixtures_runs import write_train_run

    write_train_run(runs / "t", algo="grpo", steps=3, label="FALLBACK-TRAIN")
    for page in ("samples", "evaluation", "training"):
        for bad in ("../../etc", "nosuch"):
            at = open_page(runs, page, monkeypatch, run=bad)
            shown = all_text(at) + "".join(e.label for e in at.expander) + str([d.value for d in at.dataframe])
            assert "FALLBACK" not in shown, (page, bad)
            assert texts(at, "error") or texts(at, "warning")
    at = open_page(runs, "samples", monkeypatch, run="../../etc")
    assert at.selectbox(key="samples_run").value is None
    at.selectbox(key="samples_run").set_value("a")  # the user can still pick it
    at.run()
    assert "FALLBACK-PROBLEM" in all_text(at)
    at = open_page(runs, "samples", monkeypatch)  # no request: the first run, as before
    assert at.selectbox(key="samples_run").value == "a"


def test_problem_and_answer_markdown_images_are_not_rendered(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    problem = ("Find $x$. ![pixel](http://tracker.invalid/p.png) and ![ref][r] "
               "<img src='http://tracker.invalid/h.png'>\n\n[r]: http://tracker.invalid/r.png")
    _write_graded(runs / "a", _graded_rows(problem, "![e](http://tracker.invalid/e.png)"))
    at = open_page(runs, "samples", monkeypatch)
    markdown = texts(at, "markdown") + [e.label for e in at.expander]
    assert any("tracker.invalid/p.png" in m for m in markdown)  # still shown, as text
    assert not [m for m in markdown if "![" in m]  # no Markdown image left to fetch
    assert any("tracker.invalid/e.png" in label for label in (e.label for e in at.expander))


def test_samples_page_shows_the_schema_error_of_an_invalid_graded_line(tmp_path, monkeypatch):
    """graded.jsonl is read by the one sample schema: an invalid field is its FILE:LINE:FIELD
    message in the page (not raised, not shown as a rollout)."""
    runs = tmp_path / "runs"
    rows = _graded_rows("Q", "1")
    rows[1]["correct"] = "yes"
    _write_graded(runs / "a", rows)
    at = open_page(runs, "samples", monkeypatch)
    assert any("graded.jsonl:2:correct: must be true or false" in e for e in texts(at, "error"))
    assert not at.expander
    rows[1]["correct"] = False
    rows.append({**rows[1], "sample_idx": 1, "completion": "another"})  # a duplicate key
    _write_graded(runs / "a", rows)
    at = open_page(runs, "samples", monkeypatch)
    assert any("graded.jsonl:3:sample_idx: duplicate sample" in e for e in texts(at, "error"))


def test_samples_page_keys_rows_by_the_schema_defaults(tmp_path, monkeypatch):
    """Rows without benchmark / phase / sample_idx land under the schema's defaults ("default",
    "sampling", order of appearance), which is how diversity_per_sample.jsonl keys them too; a
    partial last line of a run still being written is skipped with a note; load_jsonl's limit."""
    import json

    runs = tmp_path / "runs"
    rows = [{k: v for k, v in r.items() if k not in ("benchmark", "phase", "sample_idx")}
            for r in _graded_rows("Q", "1")]
    _write_graded(runs / "a", rows)
    with (runs / "a" / "graded.jsonl").open("a") as fh:
        fh.write('{"problem_id": "p0", "gold": "1", "compl')
    (runs / "a" / "diversity_per_sample.jsonl").write_text("".join(
        json.dumps({"benchmark": "default", "problem_id": "p0", "sample_idx": i, "correct": i == 0,
                    "d": 0.25 + i / 2, "d_emb": 0.5}) + "\n" for i in range(2)))
    at = open_page(runs, "samples", monkeypatch)
    assert at.selectbox(key="samples_benchmark").value == "default"
    labels = [e.label for e in at.expander]
    assert len(labels) == 2 and "#0 [sampling] correct" in labels[0] and "#1 [sampling] incorrect" in labels[1]
    assert "d=0.250" in labels[0] and "d=0.750" in labels[1]
    assert any("incomplete" in c for c in texts(at, "caption"))
    entry = next(r for r in data.discover_runs(runs) if r.name == "a")
    loaded = data.load_jsonl(entry, "graded.jsonl", limit=1)
    assert [r.key for r in loaded.value] == [("default", "sampling", "p0", 0)]
    assert loaded.warnings == ["showing the first 1 lines of graded.jsonl"]
    (runs / "a" / "diversity_per_sample.jsonl").write_text('{"problem_id": "p0", "sample_idx": "0", "d": 1}\n')
    at = open_page(runs, "samples", monkeypatch)
    assert any("per-rollout diversity not shown" in c and "diversity_per_sample.jsonl:1:sample_idx" in c
               for c in texts(at, "caption"))
    assert len(at.expander) == 2


def test_the_landing_page_is_the_first_page_with_runs_to_show(tmp_path, monkeypatch):
    """`dsdr-dashboard --runs DIR` without ?page= opens on a page with content (issue 23: the demo's
    runs opened on an empty "Training dynamics" page)."""
    from helpers.demo_script import load_demo

    demo = load_demo()

    study = Path(__file__).resolve().parents[2] / "reports" / "ablation_study" / "runs"
    runs = tmp_path / "demo"
    shutil.copytree(demo.study_eval_runs(study)["grpo_s0"][0], runs / "ablation_study" / "grpo_s0")
    monkeypatch.setenv("DSDR_RUNS_DIR", str(runs))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.value for t in at.main.title] == ["Evaluation"] and at.sidebar.radio[0].value == "evaluation"
    assert not any("No evaluation runs" in i for i in texts(at, "info")) and len(at.dataframe) >= 1

    demo.copy_training_logs(study, runs / "ablation_study")
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert [t.value for t in at.main.title] == ["Training dynamics"] and at.sidebar.radio[0].value == "training"
    assert not any("No training runs" in i for i in texts(at, "info"))
    assert data.landing_page([]) == "training"  # nothing anywhere: the page that says how to start a run


def _write_sweep(sweep_dir: Path, train_run: Path, algo: str) -> None:
    import json

    checkpoints = []
    for step in (6, 12):
        run = sweep_dir / f"step_{step:06d}"
        run.mkdir(parents=True)
        (run / "config.json").write_text(json.dumps({"kind": "eval", "label": f"{algo} step {step}"}))
        (run / "metrics.json").write_text('{"benchmarks": {"math500": {"avg@n": 0.5, "n_problems": 1}}}')
        checkpoints.append({"name": run.name, "step": step, "model": str(train_run / "checkpoints" / run.name),
                            "run_dir": run.name, "status": "done"})
    (sweep_dir / "sweep.json").write_text(json.dumps(
        {"kind": "sweep", "label": f"{algo} sweep", "eval": {}, "every": 1, "include_final": False,
         "train_run": {"path": str(train_run), "label": "train", "algo": algo},
         "checkpoints": checkpoints}))


def _ablation_tree(runs: Path) -> None:
    # an ablation study's layout: arm/seed/{train,sweep}; the arms' names sort dapo, darling, dsdr, grpo
    from helpers.fixtures_runs import write_train_run

    for arm in ("dapo", "darling", "dsdr", "dsdr_wo_gd", "grpo"):
        for seed in (0, 1):
            train = write_train_run(runs / arm / f"s{seed}" / "train", algo=arm, steps=3, label=f"{arm} s{seed}")
            _write_sweep(runs / arm / f"s{seed}" / "sweep", train, arm)


def test_default_selection_is_the_papers_comparison_not_the_first_names(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    _ablation_tree(runs)
    at = open_page(runs, "training", monkeypatch)
    assert at.multiselect(key="train_runs").value == ["dsdr/s0/train", "grpo/s0/train", "dsdr/s1/train",
                                                      "grpo/s1/train"]
    assert at.multiselect(key="sweep_runs").value == ["dsdr/s0/sweep", "grpo/s0/sweep", "dsdr/s1/sweep",
                                                      "grpo/s1/sweep"]
    at = open_page(runs, "evaluation", monkeypatch)  # a sweep's runs inherit its training run's algorithm
    assert at.multiselect(key="eval_runs").value == ["dsdr/s0/sweep/step_000006", "grpo/s0/sweep/step_000006",
                                                     "dsdr/s0/sweep/step_000012", "grpo/s0/sweep/step_000012"]
    # the method and its baseline in turns, whatever else sorts first; one of each when one is alone
    algos = {"a": "grpo", "b": "dapo", "c": "dsdr", "d": "grpo", "e": "grpo"}
    assert data.default_selection(list(algos), algos) == ["c", "a", "d", "e"]
    assert data.default_selection(list(algos), algos, count=2) == ["c", "a"]
    # without algorithms recorded, the first runs by name, as before; without both, one run per algorithm
    assert data.default_selection(["a", "b", "c", "d", "e"], {}) == ["a", "b", "c", "d"]
    assert data.default_selection(["a", "b", "c"], {"a": "dapo", "b": "dapo", "c": "darling"}) == ["a", "c"]


def test_a_sweep_is_requested_by_its_directory(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    _ablation_tree(runs)
    at = open_page(runs, "training", monkeypatch, run="darling/s1/sweep")
    assert not texts(at, "warning"), texts(at, "warning")
    assert at.multiselect(key="sweep_runs").value == ["darling/s1/sweep"]
    assert at.multiselect(key="train_runs").value == ["darling/s1/train"]  # the run the sweep evaluates
    at = open_page(runs, "evaluation", monkeypatch, run="darling/s1/sweep")
    assert at.multiselect(key="eval_runs").value == ["darling/s1/sweep/step_000006", "darling/s1/sweep/step_000012"]
    # one checkpoint's run selects its sweep on the training page
    at = open_page(runs, "training", monkeypatch, run="dapo/s1/sweep/step_000012")
    assert at.multiselect(key="sweep_runs").value == ["dapo/s1/sweep"]


def test_samples_page_shows_a_thinking_model_s_reasoning_apart_and_its_truncated_status(tmp_path, monkeypatch):
    """Issue 33: the graded answer part and the reasoning in separate blocks; status truncated has its
    own label (not 'ungraded')."""
    from dsdr_eval.grading import grade_samples

    runs = tmp_path / "runs"
    rows = [{"benchmark": "math500", "problem_id": "p0", "sample_idx": i, "phase": "sampling", "problem": "Q",
             "gold": "1", "completion": text} for i, text in enumerate(
                 ["<think>REASONING-TEXT</think>ANSWER-TEXT \\boxed{1}", "<think>cut REASONING-ONLY"])]
    _write_graded(runs / "a", grade_samples(rows, workers=1, progress=False))
    at = open_page(runs, "samples", monkeypatch)
    labels = [e.label for e in at.expander]
    assert "#0 [sampling] correct" in labels[0] and "#1 [sampling] truncated" in labels[1]
    assert "reasoning unclosed" in labels[1]
    code = [c.value for c in at.code]
    assert "ANSWER-TEXT \\boxed{1}" in code and "<think>REASONING-TEXT</think>" in code


def test_samples_page_filters_by_audit_flag(tmp_path, monkeypatch):
    """Issue 43: the Samples page lists only the problems and rollouts raising the chosen audit flag."""
    from dsdr_eval.grading import grade_samples

    runs = tmp_path / "runs"
    rows = [{"benchmark": "math500", "problem_id": pid, "sample_idx": i, "phase": "sampling", "problem": "Q",
             "gold": "12", "completion": text} for pid, texts in (
                 ("p0", ["So the answer is \\boxed{12}.", "It is \\boxed{11} or maybe \\boxed{12}."]),
                 ("p1", ["So the answer is \\boxed{12}."])) for i, text in enumerate(texts)]
    _write_graded(runs / "a", grade_samples(rows, workers=1, progress=False))
    at = open_page(runs, "samples", monkeypatch)
    assert len(at.expander) == 2 and at.selectbox(key="samples_audit").options == ["(every sample)",
                                                                                   "several_answers (1)"]
    at.selectbox(key="samples_audit").set_value("several_answers")
    at.run()
    assert not at.exception
    assert at.selectbox(key="samples_problem").options == ["p0 — 2/2 correct"]
    labels = [e.label for e in at.expander]
    assert len(labels) == 1 and "#1 [sampling]" in labels[0] and "audit: several_answers" in labels[0]


@pytest.mark.slow
def test_stopping_the_launcher_by_its_pid_stops_the_server(tmp_path):
    """`dsdr-dashboard` started, then SIGTERM to the PID it was started as: the port closes (the server
    itself got the signal). Mutant 'subprocess.call instead of exec': the launcher dies, streamlit keeps
    serving, re-parented to init."""
    import socket
    import subprocess
    import sys
    import time

    from helpers.net_helpers import free_port, stop_process, wait_until_healthy

    port, log = free_port(), tmp_path / "dashboard.log"
    with log.open("w") as fh:
        launcher = subprocess.Popen([sys.executable, "-m", "dashboards.launch", "--runs", str(tmp_path),
                                     "--port", str(port)], stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_healthy(launcher, f"http://127.0.0.1:{port}/_stcore/health", log, timeout_s=90,
                           what="dsdr-dashboard", poll_s=0.5)
        launcher.terminate()
        launcher.wait(timeout=30)
        deadline, serving = time.time() + 30, True
        while serving and time.time() < deadline:
            with socket.socket() as sock:
                serving = sock.connect_ex(("127.0.0.1", port)) == 0
            time.sleep(0.2)
        assert not serving, f"port {port} still serving 30 s after the launcher got SIGTERM"
    finally:
        stop_process(launcher, timeout_s=10)  # and SIGKILL to its whole group: nothing left behind


def test_default_selection_reads_the_algorithm_from_names_when_runs_record_none():
    """Evaluation runs of checkpoints made elsewhere record no algorithm: the names say it, so GRPO is
    preselected beside DSDR, not cut by the first four names (issue 46). Mutant 'no named_algo': the
    first four names, without GRPO."""
    names = ["dapo/s0/final_eval", "darling/s0/final_eval", "dsdr/s0/final_eval", "dsdr_wo_gd/s0/final_eval",
             "grpo/s0/final_eval", "grpo/s1/final_eval"]
    chosen = data.default_selection(names, dict.fromkeys(names))
    assert chosen == ["dsdr/s0/final_eval", "grpo/s0/final_eval", "grpo/s1/final_eval"]
    assert data.named_algo("runs/dsdr_wo_gd_s3") == "dsdr_wo_gd" and data.named_algo("grpo-s1 final") == "grpo"
    assert data.named_algo("progress/x") is None and data.named_algo("dsdrx") is None
