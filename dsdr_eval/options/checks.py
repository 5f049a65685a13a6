"""Value checks of the options (``dsdr_eval.options.commands``): each turns the typed text into a value or
raises ``argparse.ArgumentTypeError`` with the reason, which the command line prints as
``--OPTION VALUE: reason`` and the API as ``caller(KEY=VALUE): reason``.

Every value is checked when it is read, so a bad one is refused in one line (exit code 2) before
anything is loaded (a model start can take minutes). NaN and infinity are never a valid number of
seconds, a temperature or a probability.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import Callable

from dsdr_eval.errors import DsdrError
from dsdr_eval.grading.reasoning import parse_reasoning_format


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


def nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def stop_string(text: str) -> str:
    """A stop string: any non-empty text, whitespace included ("\n\n" is a common one)."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def port(text: str) -> int:
    """A TCP port to listen on: 1-65535."""
    return integer(1, 65535)(text)  # type: ignore[return-value]


def names(value: str) -> list[str]:
    """A comma-separated list of names (at least one)."""
    listed = [part.strip() for part in value.split(",") if part.strip()]
    if not listed:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of names, got {value!r}")
    return listed


def top_k(text: str) -> int:
    """A top-k cut: an integer >= 0, 0 = off; -1 (vLLM's and SGLang's "off") is taken as 0, so a value copied
    from a vLLM command means the same here (the protocol records 0)."""
    value = integer(-1)(text)
    return 0 if value == -1 else value  # type: ignore[return-value]


def shard(text: str) -> str:
    """``I/N``: shard I of N (0 <= I < N, 0-based like Slurm's ``--array=0-{N-1}``), as ``"I/N"``."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError("expected I/N, e.g. 0/8 (shard I of N, from 0)")
    index, count = int(match[1]), int(match[2])
    if count < 1 or index >= count:
        raise argparse.ArgumentTypeError(f"expected 0 <= I < N (shards are numbered from 0: the last of {count} "
                                         f"is {max(count, 1) - 1}/{max(count, 1)})")
    return f"{index}/{count}"


def avg_metric(text: str) -> str:
    """auto, avg@n or avg@K (the second number of a Table 1 cell)."""
    if not re.fullmatch(r"auto|avg@n|avg@[1-9][0-9]*", text):
        raise argparse.ArgumentTypeError(f"expected auto, avg@16, avg@n or avg@K, got {text!r}")
    return text


def reasoning_format(text: str) -> str:
    """A reasoning format (dsdr_eval.grading.reasoning: auto, none, think, skythought, end:MARKER); its spec."""
    try:
        return parse_reasoning_format(text).spec
    except DsdrError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
