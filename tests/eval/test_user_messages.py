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


def test_md_prose_keeps_code_spans_and_escapes_the_rest():
    assert md_prose("run `a_b [x]` on <b>_c_</b>") == "run `a_b [x]` on &lt;b&gt;\\_c\\_&lt;/b&gt;"
