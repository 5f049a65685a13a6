"""One CLI: the OpenAI-endpoint options are spelled the same in `run`, `judge` and `diversity`
(old spellings still parse, hidden), every --help is complete and none imports a heavy library."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from dsdr_eval.cli import SUBCOMMANDS, build_parser

SHARED = ("--max-concurrency", "--max-retries", "--request-timeout", "--retry-backoff")
HEAVY = ("torch", "vllm", "transformers", "sentence_transformers", "openai", "scipy", "pandas", "streamlit")


def _help(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        build_parser(command).parse_args([command, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ["run", "judge", "diversity"])
def test_endpoint_options_are_spelled_once(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(command, capsys)
    for option in SHARED:
        assert option in text, (command, option)
    for old in ("--concurrency ", "--backoff-base"):  # hidden aliases: accepted, not shown
        assert old not in text, (command, old)


@pytest.mark.parametrize("command, prefix, required", [
    ("run", "", ["--model", "m", "--benchmarks", "aime24", "--out", "x"]),
    ("judge", "judge_", ["RUN", "--judge-model", "m"]),
    ("diversity", "judge_", ["RUN"]),
])
def test_old_spellings_map_to_the_same_option(command: str, prefix: str, required: list[str]) -> None:
    parser = build_parser(command)
    new = parser.parse_args([command, *required, "--max-concurrency", "3", "--retry-backoff", "0.25"])
    old = parser.parse_args([command, *required, "--concurrency", "3", "--backoff-base", "0.25"])
    assert (new.max_concurrency, new.backoff_base_s) == (old.max_concurrency, old.backoff_base_s) == (3, 0.25)
    unset = parser.parse_args([command, *required])
    assert unset.max_concurrency is None and getattr(unset, f"{prefix}base_url") is None


def test_endpoint_defaults_per_command() -> None:
    from dsdr_eval.options.endpoint import JUDGE_ENDPOINT, MODEL_ENDPOINT, endpoint_config

    args = argparse.Namespace(base_url=["http://a/v1"], api_key_env=None, max_concurrency=None, max_retries=None,
                              timeout_s=None, backoff_base_s=None)
    config = endpoint_config(args, MODEL_ENDPOINT, model="m")
    assert (config.max_concurrency, config.timeout_s, config.max_retries, config.api_key_env) == \
        (16, 600.0, 5, "OPENAI_API_KEY")
    judge_args = argparse.Namespace(judge_base_url=None, judge_api_key_env="K", max_concurrency=2, max_retries=0,
                                    timeout_s=None, backoff_base_s=1.5)
    config = endpoint_config(judge_args, JUDGE_ENDPOINT, model="j", prefix="judge-")
    assert (config.max_concurrency, config.timeout_s, config.max_retries, config.backoff_base_s,
            config.api_key_env) == (2, 120.0, 0, 1.5, "K")


def test_help_of_every_command_imports_nothing_heavy() -> None:
    code = ("import contextlib, io, sys\n"
            "from dsdr_eval.cli import SUBCOMMANDS, main\n"
            "for argv in [['--help'], *[[name, '--help'] for name in SUBCOMMANDS]]:\n"
            "    out = io.StringIO()\n"
            "    with contextlib.redirect_stdout(out):\n"
            "        try:\n"
            "            main(argv)\n"
            "        except SystemExit as exc:\n"
            "            assert exc.code == 0, (argv, exc.code)\n"
            "    assert 'usage:' in out.getvalue(), argv\n"
            f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert set(SUBCOMMANDS) == {"run", "score", "diversity", "judge", "import", "sweep", "report", "audit", "merge"}
