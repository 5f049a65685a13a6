"""The options of the library calls: frozen dataclasses whose fields are the CLI options (same names,
same defaults), and the check that gives a Python caller the CLI's value checks.

A value passed to ``dsdr_eval.evaluate`` & co. is checked by the same argparse ``type``/``choices``
the CLI applies to the typed string, so the API and the CLI accept and convert the same values
(``temperature=1`` becomes ``1.0`` either way) and a bad one is a one-line ``DsdrError``.
"""

from __future__ import annotations

import argparse
import importlib
import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunOptions:
    """Every ``dsdr-eval run`` option (``dsdr-eval run --help`` says what each does)."""

    model: Any  # a local dir, hub id or alias; or a dsdr_eval.models.ResolvedModel; None for a sweep
    benchmarks: list[str]
    out: str
    revision: str | None = None
    data_dir: str | None = None
    limit: int | None = None
    subset_seed: int | None = None
    label: str | None = None
    protocol: str = "dsdr-paper"
    n: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    pass1_temperature: float | None = None
    pass1_top_p: float | None = None
    phases: list[str] | None = None
    max_tokens: int | None = None
    seed: int | None = None
    extraction: str | None = None
    reasoning_format: str | None = None
    template: str | None = None
    prompt_mode: str = "auto"
    backend: str = "auto"
    dtype: str = "auto"
    device: str = "auto"
    batch_size: int | None = None
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    chunk_size: int = 256
    enforce_eager: bool = False
    api: str = "chat"
    tokenizer: str | None = None
    extra_body: str | None = None
    chat_template_kwargs: str | None = None
    base_url: list[str] | None = None
    api_key_env: str | None = None
    max_concurrency: int | None = None
    max_retries: int | None = None
    timeout_s: float | None = None
    backoff_base_s: float | None = None
    grading_timeout: float = 5.0
    grading_workers: int | None = None
    no_diversity: bool = False
    force_config: bool = False
    allow_mixed_models: bool = False
    no_progress: bool = False


def parser_options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options and positionals of a parser (not --help, not the hidden old spellings, whose
    default is SUPPRESS: their dest is the new spelling's)."""
    return [action for action in parser._actions  # argparse has no public list of its actions
            if not isinstance(action, argparse._HelpAction) and action.default != argparse.SUPPRESS]


def subcommand_parser(command: str) -> argparse.ArgumentParser:
    """The parser of one ``dsdr-eval`` subcommand (its module's ``add_arguments``)."""
    from dsdr_eval.cli import SUBCOMMANDS
    from dsdr_eval.cli.args import OneLineParser

    parser = OneLineParser(prog=f"dsdr-eval {command}")
    importlib.import_module(SUBCOMMANDS[command][0]).add_arguments(parser)
    return parser


def checked(command: str, caller: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (keyword -> value) checked and converted as ``dsdr-eval COMMAND`` checks its options;
    a value equal to the option's default is kept as it is. Raises DsdrError ``CALLER(KEY=VALUE): why``."""
    from dsdr_eval.errors import DsdrError

    actions = {action.dest: action for action in parser_options(subcommand_parser(command))}
    result = dict(values)
    for key, value in values.items():
        action = actions.get(key)
        if action is None or value is None or (value == action.default and type(value) is type(action.default)):
            continue
        try:
            result[key] = _convert(action, value)
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise DsdrError(f"{caller}({key}={value!r}): {exc}") from None
    return result


def _convert(action: argparse.Action, value: Any) -> Any:
    if action.const is True and action.nargs == 0:  # store_true
        if not isinstance(value, bool):
            raise TypeError("expected True or False")
        return value
    if isinstance(action, argparse._AppendAction):  # --base-url: one URL (or comma list) or several
        values = [value] if isinstance(value, str) else list(value)
        if not all(isinstance(v, str) and v for v in values):
            raise TypeError("expected a URL string or a list of them")
        return values
    if isinstance(value, (list, tuple)):  # a comma-list option given as a Python list
        if not all(isinstance(v, str) for v in value):
            raise TypeError("expected a list of strings")
        value = ",".join(value)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) and not hasattr(value, "__fspath__"):
        raise TypeError(f"expected a {'number' if action.type else 'string'}, got {type(value).__name__}")
    text = str(value)
    converted = action.type(text) if action.type is not None else text
    if action.choices is not None and converted not in action.choices:
        raise ValueError(f"must be one of {', '.join(map(str, action.choices))}")
    return converted


def from_namespace(cls: type, args: argparse.Namespace) -> Any:
    """The options dataclass ``cls`` of a parsed command line (its dests are the field names)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{key: value for key, value in vars(args).items() if key in names})
