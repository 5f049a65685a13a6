"""Arguments shared by the command-line tools (dsdr-eval, dsdr-train, dsdr-dashboard): value checks, and
the OpenAI-endpoint options that `run`, `judge` and `diversity` spell the same way.

Every value is checked when argparse reads it, so a bad one is refused in one line with exit
code 2 before anything is loaded (a model start can take minutes). NaN and infinity are never a
valid number of seconds, a temperature or a probability.
"""

from __future__ import annotations

import argparse
import math
import shlex
from pathlib import Path
from typing import Any, Callable, NamedTuple, NoReturn

from dsdr_eval.errors import DsdrError


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (``PROG: error: MESSAGE (see PROG --help)``)
    instead of the usage block and the error. Subparsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {text} (see {self.prog} --help)\n")

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        # "--batch-size 0: must be ..." names the option and the value as they were typed.
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError as exc:
            if not action.option_strings:
                raise
            raise argparse.ArgumentError(None, f"{action.option_strings[-1]} {shlex.quote(arg_string)}: "
                                               f"{exc.message}") from None


def integer(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], object]:
    """An int in [minimum, maximum] (either bound optional)."""
    bounds = _describe_bounds(minimum, maximum, False, False)

    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer{bounds}") from None
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be an integer{bounds}")
        return value

    return check


def number(minimum: float | None = None, maximum: float | None = None, *, min_open: bool = False,
           max_open: bool = False) -> Callable[[str], object]:
    """A finite float in the interval (``min_open``/``max_open``: bound excluded)."""
    bounds = _describe_bounds(minimum, maximum, min_open, max_open)

    def check(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number{bounds}") from None
        ok = math.isfinite(value)
        if ok and minimum is not None:
            ok = value > minimum if min_open else value >= minimum
        if ok and maximum is not None:
            ok = value < maximum if max_open else value <= maximum
        if not ok:
            raise argparse.ArgumentTypeError(f"must be a finite number{bounds}")
        return value

    return check


def _describe_bounds(minimum: float | None, maximum: float | None, min_open: bool, max_open: bool) -> str:
    if minimum is not None and maximum is not None:
        return f" in {'(' if min_open else '['}{minimum:g}, {maximum:g}{')' if max_open else ']'}"
    if minimum is not None:
        return f" {'>' if min_open else '>='} {minimum:g}"
    if maximum is not None:
        return f" {'<' if max_open else '<='} {maximum:g}"
    return ""


def output_dir(text: str) -> str:
    """A directory to write into: absent (created later) or an existing directory; never an
    existing file, nor a path below a file."""
    if not text:
        raise argparse.ArgumentTypeError("expected a directory path, got ''")
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError("exists and is not a directory")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise argparse.ArgumentTypeError(f"{parent} is a file, not a directory")
            break
    return text


def add_extraction_argument(parser: argparse.ArgumentParser | Any, default_help: str) -> None:
    """``--extraction PROFILE``: the answer convention (dsdr_eval.grading.extraction profiles); default None,
    resolved by the command (``default_help`` says how)."""
    from dsdr_eval.grading.extraction import EXTRACTION_PROFILES

    listed = "; ".join(f"{p.name}: {p.description}" for p in EXTRACTION_PROFILES.values())
    parser.add_argument("--extraction", choices=list(EXTRACTION_PROFILES), default=None, metavar="PROFILE",
                        help=f"how the final answer is read from a completion ({default_help}). "
                             f"Profiles: {listed}".replace("%", "%%"))


def reasoning_format(text: str) -> str:
    """A ``--reasoning-format`` value (dsdr_eval.grading.reasoning), checked when parsed; its spec."""
    from dsdr_eval.grading.reasoning import parse_reasoning_format

    try:
        return parse_reasoning_format(text).spec
    except DsdrError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_reasoning_format_argument(parser: argparse.ArgumentParser | Any, default_help: str) -> None:
    """``--reasoning-format SPEC``: how completions mark a thinking model's reasoning; default None,
    resolved by the command (``default_help`` says how)."""
    parser.add_argument("--reasoning-format", type=reasoning_format, default=None, metavar="SPEC",
                        help="how completions mark their reasoning, which is never graded: auto (SkyThought markers, "
                             "<think>...</think>, a server's reasoning_content), none (grade the whole completion), "
                             f"think, skythought, or end:MARKER ({default_help})")


def nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def port(text: str) -> int:
    """A TCP port to listen on: 1-65535."""
    return integer(1, 65535)(text)  # type: ignore[return-value]


# ----------------------------------------------------------------------------- OpenAI endpoint options

class EndpointDefaults(NamedTuple):
    """A command's defaults for the shared OpenAI-endpoint options (shown in --help). Immutable;
    a NamedTuple rather than a dataclass so that `--help` does not import dataclasses/inspect."""

    max_concurrency: int
    timeout_s: float
    max_retries: int = 5
    backoff_base_s: float = 0.5
    api_key_env: str = "OPENAI_API_KEY"


MODEL_ENDPOINT = EndpointDefaults(max_concurrency=16, timeout_s=600.0)   # `run --backend openai`
JUDGE_ENDPOINT = EndpointDefaults(max_concurrency=8, timeout_s=120.0)    # `judge`, `diversity --partition judge`

# dest -> hidden old spelling (argparse.SUPPRESS help), kept so existing scripts still run.
_OLD_SPELLINGS = {"max_concurrency": "--concurrency", "backoff_base_s": "--backoff-base"}


def add_openai_arguments(parser: argparse.ArgumentParser, defaults: EndpointDefaults, *, prefix: str = "",
                         title: str = "OpenAI-compatible endpoint") -> None:
    """The options of one OpenAI-compatible endpoint, spelled the same in every command.

    ``prefix`` names whose endpoint it is (``""`` for `run`'s model server, ``"judge-"`` for a
    judge): ``--{prefix}base-url``, ``--{prefix}api-key-env``. The request policy is unprefixed:
    ``--max-concurrency``, ``--max-retries``, ``--request-timeout``, ``--retry-backoff``. Every
    value defaults to None here and ``endpoint_options`` fills in ``defaults``, so a command can
    tell an option that was given from one that was not."""
    group = parser.add_argument_group(title)
    group.add_argument(f"--{prefix}base-url", dest=f"{prefix.replace('-', '_')}base_url", action="append",
                       default=None, metavar="URL",
                       help="base URL ending in /v1; repeat it or give a comma list to spread requests over several "
                            "servers (a fleet of `vllm serve` nodes); a failed attempt moves on to the next URL"
                            + ("" if not prefix else ". Default: $OPENAI_BASE_URL, else https://api.openai.com/v1"))
    group.add_argument(f"--{prefix}api-key-env", dest=f"{prefix.replace('-', '_')}api_key_env", default=None,
                       metavar="VAR", help=f"environment variable holding the API key (default {defaults.api_key_env}; "
                                           "'EMPTY' is sent when it is unset, which local servers accept). The key is "
                                           "never written or logged.")
    group.add_argument("--max-concurrency", dest="max_concurrency", type=integer(1), default=None, metavar="N",
                       help=f"requests in flight at once (default {defaults.max_concurrency})")
    group.add_argument("--max-retries", dest="max_retries", type=integer(0), default=None, metavar="N",
                       help="retries per request on 408/409/429/5xx, timeouts, connection errors and malformed 200 "
                            f"replies (default {defaults.max_retries})")
    group.add_argument("--request-timeout", dest="timeout_s", type=number(0, min_open=True), default=None,
                       metavar="S", help=f"seconds per attempt (default {defaults.timeout_s:g})")
    group.add_argument("--retry-backoff", dest="backoff_base_s", type=number(0), default=None, metavar="S",
                       help="first retry delay in seconds; doubles each retry, jittered, capped at 30 s; a server's "
                            f"Retry-After is honoured (default {defaults.backoff_base_s:g})")
    for dest, old in _OLD_SPELLINGS.items():
        kind = integer(1) if dest == "max_concurrency" else number(0)
        group.add_argument(old, dest=dest, type=kind, default=argparse.SUPPRESS, help=argparse.SUPPRESS)


ENDPOINT_POLICY_DESTS = ("max_concurrency", "max_retries", "timeout_s", "backoff_base_s")


def endpoint_options(args: argparse.Namespace, defaults: EndpointDefaults, *, prefix: str = "") -> dict[str, Any]:
    """``EndpointConfig`` fields (all but the model) from the options of ``add_openai_arguments``;
    ``base_urls`` as given (a list of URL / comma-list strings, or None)."""
    key = prefix.replace("-", "_")
    options: dict[str, Any] = {"base_urls": getattr(args, f"{key}base_url"),
                               "api_key_env": getattr(args, f"{key}api_key_env") or defaults.api_key_env}
    for dest in ENDPOINT_POLICY_DESTS:
        value = getattr(args, dest, None)
        options[dest] = getattr(defaults, dest) if value is None else value
    return options


def given_endpoint_options(args: argparse.Namespace, *, prefix: str = "") -> list[str]:
    """The endpoint options given on the command line (their flag), for "only applies to" checks."""
    key = prefix.replace("-", "_")
    flags = {f"{key}base_url": f"--{prefix}base-url", f"{key}api_key_env": f"--{prefix}api-key-env",
             "max_concurrency": "--max-concurrency", "max_retries": "--max-retries",
             "timeout_s": "--request-timeout", "backoff_base_s": "--retry-backoff"}
    return [flag for dest, flag in flags.items() if getattr(args, dest, None) is not None]


def endpoint_config(args: argparse.Namespace, defaults: EndpointDefaults, *, model: str, prefix: str = "") -> Any:
    """The ``EndpointConfig`` of the options (base URLs default to $OPENAI_BASE_URL, else OpenAI's API)."""
    from dsdr_eval.openai_api.client import EndpointConfig, resolve_base_urls

    options = endpoint_options(args, defaults, prefix=prefix)
    return EndpointConfig(base_urls=resolve_base_urls(options.pop("base_urls")), model=model, **options)
