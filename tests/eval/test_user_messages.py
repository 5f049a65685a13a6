"""The texts a new user reads (issue 46 item 6): a bad keyword names the function and the right keyword, a
bad option points to the subcommand's help, `score`'s status header is not cut, `report` says what was
truncated, quotes commands as code and records its working directory relative to the repository."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import dsdr_eval
from dsdr_eval.cli import main
from dsdr_eval.reporting.tables import md_prose

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "math_samples.jsonl"


def test_a_bad_api_keyword_names_the_function_and_the_right_one():
    """Mutant '_bind without its did-you-mean': the bare TypeError of inspect."""
    with pytest.raises(TypeError, match=r"dsdr_eval\.evaluate\(\) got an unexpected keyword argument "
                                        r"'max_new_tokens'; did you mean max_tokens=\?"):
        dsdr_eval.evaluate("m", benchmarks=["math500"], out="o", max_new_tokens=8)
    with pytest.raises(TypeError, match=r"dsdr_eval\.score\(\) got an unexpected keyword argument 'zzz' \(every"):
        dsdr_eval.score("x", zzz=1)


def test_a_bad_cli_option_points_to_the_subcommands_help(capsys):
    """Mutant 'build_parser leaves help_prog unset': '(see dsdr-eval --help)'."""
    assert main(["run", "--model", "m", "--benchmarks", "math500", "--out", "o", "--max-new-tokens", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("did you mean --max-tokens? (see dsdr-eval run --help)"), err


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    out = tmp_path_factory.mktemp("scored")
    # with CIs: the widest table, where the old header was cut
    assert main(["score", str(EXAMPLE), "--out", str(out), "--workers", "1", "--bootstrap", "200", "--no-progress"]) == 0
    return out


def test_the_score_status_header_is_whole_and_spelled_out(scored, capsys):
    """Mutant 'the old header correct/incorrect/none/truncated/timeout/error': cut with an ellipsis."""
    from dsdr_eval.cli.score import print_summary

    print_summary(json.loads((scored / "metrics.json").read_text()))
    out = capsys.readouterr().out
    assert "…" not in out.split("┡")[0], out
    assert "statuses: correct/incorrect/no_answer/truncated/timeout/error samples" in out
    assert "hit max tokens" in out and "length-truncated" not in out


def test_report_prints_truncation_quotes_commands_as_code_and_records_a_relative_cwd(scored, tmp_path, capsys,
                                                                                    monkeypatch):
    """In a git repository (a .git entry) the cwd is recorded relative to its root. Mutants 'cwd=os.getcwd()'
    (an absolute path), 'md_prose escapes backticks' (\\`), 'no truncation lines'."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    shutil.copytree(scored, repo / "runs" / "ex")
    monkeypatch.chdir(repo / "runs")
    assert main(["report", "ex", "--out", "../reports/ex", "--bootstrap", "100"]) == 0
    out = capsys.readouterr().out
    assert "truncation (% of samples that hit max tokens / whose reasoning never closed):" in out
    assert "  ex, math500: 4.4% / 0.0%" in out
    readme = (repo / "reports" / "ex" / "README.md").read_text()
    assert "(from `runs`, relative to the repository root)" in readme and str(tmp_path) not in readme
    assert "\\`" not in readme and "(run `dsdr-eval diversity RUN_DIR` first)" in readme
    assert json.loads((repo / "reports" / "ex" / "report.json").read_text())["cwd"] == "runs"
    from dsdr_eval.grading.extraction import EXTRACTION_RULES_VERSION
    from dsdr_eval.grading.rules import RULES_VERSION

    assert f"extraction rules v{EXTRACTION_RULES_VERSION}, grading rules v{RULES_VERSION}" in readme


def test_md_prose_keeps_code_spans_and_escapes_the_rest():
    assert md_prose("run `a_b [x]` on <b>_c_</b>") == "run `a_b [x]` on &lt;b&gt;\\_c\\_&lt;/b&gt;"


def test_no_progress_silences_the_libraries_bars_too(tmp_path, data_dir, monkeypatch):
    """`run --no-progress`: transformers' weight-loading bars are off for the process. Mutant 'run does not
    call quiet_library_bars': still enabled."""
    from helpers.fake_engine import BoxedOne
    from transformers.utils import logging as transformers_logging

    from dsdr_eval.run import evaluation

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.setattr(evaluation, "make_backend", lambda plan, options: BoxedOne(plan.backend_name))
    transformers_logging.enable_progress_bar()
    try:
        assert main(["run", "--model", str(model), "--benchmarks", "math500", "--limit", "1", "--backend", "hf",
                     "--protocol", "greedy", "--data-dir", str(data_dir), "--out", str(tmp_path / "r"),
                     "--grading-workers", "1", "--no-progress"]) == 0
        assert not transformers_logging.is_progress_bar_enabled()
    finally:
        transformers_logging.enable_progress_bar()


def test_an_empty_completion_is_said_to_be_empty():
    """Mutant 'ends {clip(...)}' for every completion: "ends ''"."""
    from dsdr_eval.rundir.samples import GradedSample, Sample
    from dsdr_eval.scoring.checks import NoAnswerTally

    tally = NoAnswerTally("boxed")
    for i in range(12):
        sample = Sample("b", "p1", i, "sampling", None, "1", None, None, "" if i else "   ", None, None, None, None,
                        None, None, None)
        tally.add(GradedSample(sample, "no_answer", False, None))
    (message,) = tally.messages()
    assert "sample 0 is empty (whitespace only)" in message or "is empty (no text)" in message, message
    assert "ends ''" not in message


def test_each_rules_version_the_docs_name_is_the_codes():
    """docs/evaluate.md names RULES_VERSION (grading rules) and EXTRACTION_RULES_VERSION (extraction), each
    with the value the code records. Mutant 'docs say RULES_VERSION "4"' (as before): fails."""
    import re

    from dsdr_eval.grading.extraction import EXTRACTION_RULES_VERSION
    from dsdr_eval.grading.rules import RULES_VERSION

    docs = (REPO / "docs" / "evaluate.md").read_text(encoding="utf-8")
    named = dict(re.findall(r"`((?:EXTRACTION_)?RULES_VERSION)` \"(\w+)\"", docs))
    assert named == {"RULES_VERSION": RULES_VERSION, "EXTRACTION_RULES_VERSION": EXTRACTION_RULES_VERSION}


def test_python_api_page_has_one_errors_paragraph():
    assert (REPO / "docs" / "python_api.md").read_text(encoding="utf-8").count("**Errors.**") == 1
