"""Argument validation shared by the command-line tools (dsdr-eval, dsdr-train, dsdr-dashboard).

Every value is checked when argparse reads it, so a bad one is refused in one line with exit
code 2 before anything is loaded (a model start can take minutes). NaN and infinity are never a
valid number of seconds, a temperature or a probability.
"""

from __future__ import annotations

import argparse
import math
import shlex
from pathlib import Path
from typing import Any, Callable, NoReturn


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


def nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def port(text: str) -> int:
    """A TCP port to listen on: 1-65535."""
    return integer(1, 65535)(text)  # type: ignore[return-value]
