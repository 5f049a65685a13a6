"""The Python API (dsdr_eval.evaluate & co.): every CLI option is a keyword of the same name and default,
the API and the CLI write the same files, bad values are one-line DsdrErrors, and the API names stay
functions whatever submodules are imported."""

from __future__ import annotations

import csv
import dataclasses
import inspect
import json
import re
from pathlib import Path

import pytest
from helpers.fake_engine import BoxedOne
from helpers.fault_server import FaultServer
from helpers.fixtures_runs import make_scored_run

import dsdr_eval
from dsdr_eval.options.commands import (COMMANDS, AuditOptions, DiversityOptions, ImportOptions, JudgeOptions,
                                        MergeOptions,
                                        ReportOptions, RunOptions, ScoreOptions)
from dsdr_eval.api.sweeping import eval_settings
from dsdr_eval.cli import build_parser, main
from dsdr_eval.errors import DsdrError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "math_samples.jsonl"

# subcommand -> (API function, its options dataclass, CLI options that are not keywords and why)
API = {
    "run": (dsdr_eval.evaluate, RunOptions, set()),
    "score": (dsdr_eval.score, ScoreOptions, set()),
    "import": (dsdr_eval.import_results, ImportOptions, set()),
    "diversity": (dsdr_eval.diversity, DiversityOptions, set()),
    "judge": (dsdr_eval.judge, JudgeOptions, set()),
    "report": (dsdr_eval.report, ReportOptions, set()),
    "sweep": (dsdr_eval.sweep, None, {"model"}),  # the sweep refuses --model: each checkpoint is the model
    "audit": (dsdr_eval.audit, AuditOptions, set()),
    "merge": (dsdr_eval.merge, MergeOptions, set()),
}


def _cli_options(command: str) -> list:
    """The declared options of ``command`` (what its parser is built from), but the API's exceptions."""
    return [option for option in COMMANDS[command][0] if option.name not in API[command][2]]


@pytest.mark.parametrize("command", list(API))
def test_every_cli_option_is_a_keyword_with_the_same_default(command):
    function, options_class, not_keywords = API[command]
    parameters = inspect.signature(function).parameters
    actions = _cli_options(command)
    assert actions
    for action in actions:
        assert action.name in parameters, f"{command}: {action.flag or action.name} has no keyword"
        parameter = parameters[action.name]
        if action.required or action.flag is None:  # a positional or a required option: no default
            assert parameter.default is inspect.Parameter.empty, f"{command}: {action.name} must be required"
        else:
            assert parameter.default == action.default and type(parameter.default) is type(action.default), \
                f"{command}: {action.name} defaults to {parameter.default!r}, the CLI to {action.default!r}"
    if options_class is not None:  # the library's options are the CLI's options, no more, no fewer
        assert {f.name for f in dataclasses.fields(options_class)} == {a.name for a in actions}
        for field in dataclasses.fields(options_class):
            if field.default is not dataclasses.MISSING:
                assert field.default == parameters[field.name].default, f"{options_class.__name__}.{field.name}"


# the required options and positionals of each subcommand, so its parser reads the defaults of the rest
MINIMAL = {"run": ["--model", "m", "--benchmarks", "math500", "--out", "o"], "score": ["p"],
           "import": ["p", "--out", "o"], "diversity": ["r"], "judge": ["r", "--judge-model", "j"],
           "sweep": ["t", "--out", "o", "--benchmarks", "math500"], "report": ["--out", "o"],
           "audit": ["r"], "merge": ["s0", "s1", "--out", "o"]}


@pytest.mark.parametrize("command", list(API))
def test_the_cli_parser_has_exactly_the_declared_options_and_defaults(command):
    """The declarations are the CLI's options: the parser built from them yields one value per declared
    option (no more), and an option not given gets the declared default, the API keyword's default."""
    assert set(COMMANDS) == set(API)
    parsed = vars(build_parser(command).parse_args([command, *MINIMAL[command]]))
    options = COMMANDS[command][0]
    assert set(parsed) - {"command"} == {option.name for option in options}
    for option in options:
        if option.flag is not None and not option.required:
            assert parsed[option.name] == option.default and type(parsed[option.name]) is type(option.default), \
                (command, option.name, parsed[option.name])


def test_sweep_settings_are_the_run_options_as_before():
    """sweep.json's ``eval`` (checked on every resume) holds the run options but the per-checkpoint ones,
    as it did when it was ``vars(args)`` of the parsed command line: an existing SWEEP_DIR resumes."""
    dests = {a.name for a in _cli_options("run")}
    settings = eval_settings(RunOptions(model=None, benchmarks=["math500"], out="x"))
    assert set(settings) == dests - {"model", "out", "label", "no_progress"}
    assert list(settings) == sorted(settings)


def test_api_names_stay_functions_after_the_submodules_load():
    """A submodule import sets the package attribute of its name: no API function may share one."""
    import dsdr_eval.api.public  # noqa: F401
    import dsdr_eval.diversity_metrics.run  # noqa: F401
    import dsdr_eval.diversity_metrics.semantic  # noqa: F401
    import dsdr_eval.llm_judge.run  # noqa: F401
    import dsdr_eval.reporting.build  # noqa: F401
    import dsdr_eval.rundir.sweepdir  # noqa: F401

    for name in dsdr_eval.__all__:
        if name != "__version__":
            assert inspect.isfunction(getattr(dsdr_eval, name)), name
    assert {"diversity", "judge", "report"} <= set(dsdr_eval.__all__)


@pytest.mark.parametrize("keywords, message", [
    ({"top_p": 1.5}, r"evaluate\(top_p=1\.5\): must be a finite number in \(0, 1\]"),
    ({"n": 0}, r"evaluate\(n=0\): must be an integer >= 1"),
    ({"n": 2.5}, r"evaluate\(n=2\.5\): expected an integer"),
    ({"backend": "tpu"}, r"evaluate\(backend='tpu'\): must be one of auto, vllm, hf, openai"),
    ({"no_diversity": "yes"}, r"evaluate\(no_diversity='yes'\): expected True or False"),
])
def test_a_bad_value_is_a_one_line_error_before_anything_runs(tmp_path, keywords, message):
    out = tmp_path / "run"
    with pytest.raises(DsdrError, match=message):
        dsdr_eval.evaluate("smollm2-135m", benchmarks=["math500"], out=out, **keywords)
    assert not out.exists()


def test_a_bad_sweep_value_is_a_one_line_error(tmp_path):
    with pytest.raises(DsdrError, match=r"sweep\(every=0\): must be an integer >= 1"):
        dsdr_eval.sweep(tmp_path / "train", out=tmp_path / "sweep", benchmarks=["math500"], every=0)


def _normalized(path: Path, run_dir: Path) -> str:
    """A run file with what differs between two identical runs blanked: timestamps, durations, the run
    directory's own path."""
    text = path.read_text(encoding="utf-8").replace(str(run_dir), "RUN_DIR")
    return re.sub(r'"(created|updated|wall_s)": [^,}\]]+', r'"\1": T', text)


def _reply(body: dict) -> str:
    """Right on the first math500 problem for about half of the seeds, wrong otherwise: the metrics are not
    all zero. The seed is the request's, so both runs get the same replies."""
    right = "(0,3)" in json.dumps(body["messages"]) and body["seed"] % 2 == 0
    return "so \\boxed{" + ("\\left( 3, \\frac{\\pi}{2} \\right)" if right else "7") + "}"


def test_the_cli_and_the_api_write_the_same_run(tmp_path, data_dir):
    """`dsdr-eval run` and `dsdr_eval.evaluate` on the same served model (a fixed reply per request):
    samples.jsonl, graded.jsonl and metrics.json are the same apart from timestamps. The API gets
    ``temperature=1`` (an int): converted as the CLI converts "1", so the records match."""
    cli_dir, api_dir = tmp_path / "cli", tmp_path / "api"
    with FaultServer(reply=_reply) as server:
        argv = ["run", "--model", server.model, "--backend", "openai", "--base-url", server.base_url,
                "--benchmarks", "math500", "--limit", "2", "--protocol", "quick", "--n", "3", "--temperature", "1",
                "--max-tokens", "16", "--data-dir", str(data_dir), "--out", str(cli_dir), "--no-diversity",
                "--no-progress", "--grading-workers", "1", "--max-concurrency", "1"]  # one order of lines
        assert main(argv) == 0
        result = dsdr_eval.evaluate(server.model, backend="openai", base_url=server.base_url, benchmarks="math500",
                                    limit=2, protocol="quick", n=3, temperature=1, max_tokens=16,
                                    data_dir=data_dir, out=api_dir, no_diversity=True, no_progress=True,
                                    grading_workers=1, max_concurrency=1)
    for name in ("samples.jsonl", "graded.jsonl", "metrics.json"):
        assert _normalized(api_dir / name, api_dir) == _normalized(cli_dir / name, cli_dir), name
    assert result.path == api_dir and set(result.benchmarks) == {"math500"}
    assert 0 < result.benchmarks["math500"].scores.at_k()[1] < 1
    assert result.benchmarks["math500"].scores.at_k() == dsdr_eval.load_run(cli_dir).benchmarks["math500"].scores.at_k()
    assert json.loads((api_dir / "config.json").read_text())["command"][0] == "dsdr_eval.evaluate"


def test_score_through_the_cli_and_the_api_writes_the_same_files(tmp_path):
    cli_dir, api_dir = tmp_path / "cli", tmp_path / "api"
    assert main(["score", str(EXAMPLE), "--out", str(cli_dir), "--workers", "1", "--bootstrap", "50",
                 "--no-progress"]) == 0
    result = dsdr_eval.score(EXAMPLE, out=api_dir, workers=1, bootstrap=50, no_progress=True)
    for name in ("graded.jsonl", "metrics.json"):
        assert _normalized(api_dir / name, api_dir) == _normalized(cli_dir / name, cli_dir), name
    assert result.benchmarks and all(bench.scores.at_k() for bench in result.benchmarks.values())


def test_import_results_then_score(tmp_path):
    """import_results writes the run directory `dsdr-eval import` writes; score grades it in place."""
    source = tmp_path / "source.jsonl"
    source.write_text("".join(json.dumps({"id": f"p{i}", "answer": str(i), "completion": [f"\\boxed{{{i}}}", "\\boxed{0}"]})
                              + "\n" for i in range(1, 4)))
    done = dsdr_eval.import_results(source, out=tmp_path / "run", tool="jsonl", benchmark="toy")
    assert done.n_samples == 6 and done.n_problems == 3
    assert json.loads((tmp_path / "run" / "config.json").read_text())["command"][0] == "dsdr_eval.import_results"
    result = dsdr_eval.score(tmp_path / "run", workers=1, bootstrap=0, no_progress=True)
    assert result.benchmarks["toy"].scores.at_k() == {1: 0.5, 2: 1.0}


def test_sweep_evaluates_each_checkpoint_and_resumes(tmp_path, data_dir):
    train = tmp_path / "train"
    for step in (1, 2, 3):
        (train / "checkpoints" / f"step_{step:06d}").mkdir(parents=True)
        (train / "checkpoints" / f"step_{step:06d}" / "config.json").write_text("{}")
    (train / "config.json").write_text(json.dumps({"kind": "train", "label": "toy"}))
    seen: list[str] = []

    def engine(name, model):
        seen.append(Path(model.path).name)
        return BoxedOne(name)

    keywords = dict(out=tmp_path / "sweep", benchmarks=["math500"], every=2, protocol="quick", limit=2, n=2,
                    max_tokens=8, backend="hf", data_dir=data_dir, no_diversity=True, no_progress=True,
                    grading_workers=1, engine=engine)
    runs = dsdr_eval.sweep(train, **keywords)
    assert seen == ["step_000001", "step_000003"] and list(runs) == ["step_000001", "step_000003"]
    for name, run in runs.items():
        assert run.label == f"toy {name}" and run.benchmarks["math500"].n_samples_per_problem == 2
        assert run.config["backend"]["name"] == "hf" and run.config["command"][0] == "dsdr_eval.sweep"
    record = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert [c["status"] for c in record["checkpoints"]] == ["done", "done"] and record["eval"]["n"] == 2
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "sweep").glob("*/metrics.json")}
    assert dsdr_eval.sweep(train, **keywords).keys() == runs.keys() and len(seen) == 2  # resumed: nothing ran,
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps and len(stamps) == 2    # nothing re-scored


def _judge_reply(body: dict) -> str:
    """A verdict that depends on the prompt (its length), so each problem gets its own scores and the means
    are not one constant; the same prompt always gets the same verdict."""
    size = len(body["messages"][1]["content"])
    logic, formula, semantic = size % 7 + 2, size % 5 + 1, size % 3 + 4
    return json.dumps({"logic": logic, "formula": formula, "semantic": semantic,
                       "overall": round((logic + formula + semantic) / 3)})


def _scored_copy(tmp_path: Path, name: str) -> Path:
    """A scored run directory of examples/math_samples.jsonl (math500: 5 problems, 8 rollouts each)."""
    dsdr_eval.score(EXAMPLE, out=tmp_path / name, workers=1, bootstrap=0, no_progress=True)
    return tmp_path / name


def test_judge_through_the_cli_and_the_api_writes_the_same_files(tmp_path, monkeypatch):
    """`dsdr-eval judge` and `dsdr_eval.judge` against the same loopback server: judge.jsonl, the judge
    cache and metrics.json are the same, and the API returns the judge means load_run reads."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cli_dir, api_dir = _scored_copy(tmp_path, "cli"), _scored_copy(tmp_path, "api")
    with FaultServer(reply=_judge_reply) as server:
        assert main(["judge", str(cli_dir), "--judge-model", server.model, "--judge-base-url", server.base_url,
                     "--max-rollouts", "3", "--max-concurrency", "1", "--no-progress"]) == 0
        n_cli = len(server.completion_requests())
        result = dsdr_eval.judge(api_dir, judge_model=server.model, judge_base_url=server.base_url, max_rollouts=3,
                                 max_concurrency=1, no_progress=True)
        assert len(server.completion_requests()) == 2 * n_cli > 0  # the API asked as many questions
    for name in ("judge.jsonl", "judge_cache.jsonl", "metrics.json"):
        assert _normalized(api_dir / name, api_dir) == _normalized(cli_dir / name, cli_dir), name
    judged = result.benchmarks["math500"].judge
    block = json.loads((api_dir / "metrics.json").read_text())["benchmarks"]["math500"]["judge"]
    assert judged is not None and judged.n_ok == block["n_ok"] == n_cli and judged.judge_model == server.model
    assert judged.axes["overall"] == block["overall"] and 0 < judged.axes["overall"] < 10


def test_judge_failures_raise_unless_allowed_and_some_were_judged(tmp_path, monkeypatch):
    """Where `dsdr-eval judge` exits 1 the API raises (after writing the files); with allow_failures and
    some problems judged it warns and returns."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    run = _scored_copy(tmp_path, "run")
    keywords = dict(judge_model="m", max_rollouts=3, max_concurrency=1, max_retries=0, no_progress=True)
    with FaultServer(default="400") as server:
        with pytest.raises(DsdrError, match=r"every judge call failed \(http_error:http_400=\d+\)"):
            dsdr_eval.judge(run, judge_base_url=server.base_url, allow_failures=True, **keywords)
    assert json.loads((run / "metrics.json").read_text())["benchmarks"]["math500"]["judge"]["n_ok"] == 0
    with FaultServer(script=["503"], default="ok", reply=_judge_reply) as server:  # the first problem fails
        with pytest.raises(DsdrError, match=r"1 of \d+ problems failed .*allow_failures=True"):
            dsdr_eval.judge(run, judge_base_url=server.base_url, **keywords)
    with FaultServer(script=["503"], default="ok", reply=_judge_reply) as server:
        with pytest.warns(UserWarning, match=r"1 of \d+ problems failed"):
            result = dsdr_eval.judge(run, judge_base_url=server.base_url, allow_failures=True, no_cache=True,
                                     **keywords)
    assert result.benchmarks["math500"].judge.n_ok > 0


def test_report_through_the_cli_and_the_api_writes_the_same_files(tmp_path, data_dir):
    """`dsdr-eval report` and `dsdr_eval.report` on the same two runs write the same tables and record;
    only the command differs (report.json and the README say how each report was made)."""
    quick = {"name": "quick", "phases": [{"phase": "pass1", "n": 1, "temperature": 0.1, "top_p": 0.9},
                                         {"phase": "sampling", "n": 4, "temperature": 0.7, "top_p": 0.9}],
             "max_tokens": 256, "seed": 0}
    runs = [make_scored_run(tmp_path / name, data_dir, label=name, accuracy=accuracy, protocol=quick,
                            benchmarks={"math500": 6}) for name, accuracy in (("grpo", 0.3), ("dsdr", 0.6))]
    cli_out, api_out = tmp_path / "reports" / "cli", tmp_path / "reports" / "api"
    assert main(["report", *map(str, runs), "--out", str(cli_out), "--label", "A", "--label", "B", "--ci",
                 "--bootstrap", "200", "--seed", "3", "--title", "t"]) == 0
    record = dsdr_eval.report(runs, out=api_out, label=["A", "B"], ci=True, bootstrap=200, seed=3, title="t")
    names = sorted(str(p.relative_to(cli_out)) for p in cli_out.rglob("*") if p.is_file())
    assert names == sorted(str(p.relative_to(api_out)) for p in api_out.rglob("*") if p.is_file())
    for name in ("table1.md", "table1.tex", "table1.csv", "passk.csv", "comparison.csv"):
        assert (api_out / name).read_text() == (cli_out / name).read_text(), name
    cli_record = json.loads((cli_out / "report.json").read_text())
    assert record == json.loads((api_out / "report.json").read_text())
    assert record["command"][0] == "dsdr_eval.report" and cli_record["command"][:2] == ["dsdr-eval", "report"]
    assert {k: v for k, v in record.items() if k not in ("command", "created")} == \
        {k: v for k, v in cli_record.items() if k not in ("command", "created")}

    def readme(out: Path) -> str:  # the command line and the time stamp blanked
        text = re.sub(r"^(dsdr-eval report|dsdr_eval\.report) .*$", "COMMAND", (out / "README.md").read_text(),
                      flags=re.M)
        return re.sub(r"\d{4}-\d\d-\d\dT[\d:]+\+00:00", "T", text)

    assert readme(api_out) == readme(cli_out) and readme(api_out).count("COMMAND") == 1
    assert [row["label"] for row in csv.DictReader((api_out / "passk.csv").open())][:1] == ["A"]


@pytest.mark.parametrize("keywords, message", [
    ({"digits": 7}, r"report\(digits=7\): must be an integer in \[0, 6\]"),
    ({"avg_metric": "avg@0"}, r"report\(avg_metric='avg@0'\): expected auto, avg@16"),
    ({"label": [1]}, r"report\(label=\[1\]\): expected a string or path"),
])
def test_a_bad_report_value_is_a_one_line_error(tmp_path, keywords, message):
    with pytest.raises(DsdrError, match=message):
        dsdr_eval.report([tmp_path], out=tmp_path / "report", **keywords)
    assert not (tmp_path / "report").exists()


# ----------------------------------------------------------------- the API speaks the caller's language (issue 36)


def test_api_errors_name_keywords_and_results_refuse_unknown_names(tmp_path):
    squares = Path(__file__).resolve().parents[2] / "examples" / "squares.jsonl"
    with pytest.raises(DsdrError) as caught:
        dsdr_eval.import_results(str(squares), out=str(tmp_path / "auto"))  # tool="auto": not a known tool's file
    message = str(caught.value)
    assert "--from" not in message and "tool='jsonl'" in message
    dsdr_eval.import_results(str(squares), out=str(tmp_path / "run"), tool="jsonl", benchmark="squares")
    res = dsdr_eval.score(str(tmp_path / "run"), bootstrap=0, no_progress=True)
    scores = res.benchmarks["squares"].scores
    assert scores.at_k() == {1: 0.5, 2: 1.0} and set(scores.at_k("maj")) == {1, 2}
    with pytest.raises(DsdrError, match=r"at_k\('bogus'\): unknown metric family; one of pass, maj, avg"):
        scores.at_k("bogus")
    with pytest.raises(KeyError, match=r"no benchmark 'aime24' in .*metrics.json \(it has: squares\)"):
        res.benchmarks["aime24"]
    assert "aime24" not in res.benchmarks and res.benchmarks.get("aime24") is None  # membership stays a plain test


def test_keyword_spelling_rewrites_flags_only_with_their_values():
    from dsdr_eval.options.schema import Option, keyword_spelling

    options = (Option("tool", "--from", choices=("auto", "jsonl")), Option("out", "--out"),
               Option("max_tokens", "--max-tokens"), Option("max", "--max"))
    assert keyword_spelling("use --from jsonl (or --from auto)", options) == "use tool='jsonl' (or tool='auto')"
    assert keyword_spelling("say which with --from", options) == "say which with tool="
    assert keyword_spelling("give --from and its field names", options) == "give tool= and its field names"
    assert keyword_spelling("--max-tokens 8 beats --max", options) == "max_tokens= 8 beats max="
    assert keyword_spelling("a run--from x and --output", options) == "a run--from x and --output"
