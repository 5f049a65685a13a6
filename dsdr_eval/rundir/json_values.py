"""JSON values as dsdr reads and writes them: numbers that keep their literal text, type names for
messages, and the conversion of results (numpy, NaN, sets) into strict JSON.

``dsdr_eval.rundir.jsonl`` decodes with these types (a gold answer keeps ``0.00001``, not ``1e-05``; an
integer over Python's conversion limit is an ``OversizeInt``, refused wherever a number is needed).
"""

from __future__ import annotations

import math
from typing import Any

NON_FINITE_CONSTANTS = ("NaN", "Infinity", "-Infinity")


class ExactFloat(float):
    """A JSON float (or NaN/Infinity) that remembers its literal text: ``ExactFloat("1e400")`` is
    ``inf`` as a number and ``"1e400"`` as ``number_text``."""

    __slots__ = ("text",)

    def __new__(cls, text: str) -> "ExactFloat":
        value = super().__new__(cls, text)
        value.text = text
        return value

    def __reduce__(self):
        return (ExactFloat, (self.text,))


class OversizeInt:
    """An integer literal too long for ``int()``: kept as text, refused wherever a number is needed."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"<integer of {len(self.text.lstrip('-'))} digits>"


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (for messages)."""
    return ("boolean" if isinstance(value, bool) else "null" if value is None else
            "string" if isinstance(value, str) else "array" if isinstance(value, list) else
            "object" if isinstance(value, dict) else "number")


def number_text(value: Any) -> str | None:
    """The exact JSON literal of a decoded number (``None`` for anything else, bools included)."""
    if isinstance(value, (ExactFloat, OversizeInt)):
        return value.text
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float):  # built in code, not read from JSON
        return repr(value)
    return None


def is_non_finite_constant(value: Any) -> bool:
    """True for JSON's non-standard ``NaN`` / ``Infinity`` / ``-Infinity`` (not for ``1e400``)."""
    return isinstance(value, ExactFloat) and value.text in NON_FINITE_CONSTANTS


def to_json_safe(value: Any) -> Any:
    """A value JSON can hold, for settings and results: numpy scalars/arrays -> python, NaN / inf ->
    None (strict JSON; null means "undefined"), sets sorted, tuples as lists, anything else as repr()."""
    if isinstance(value, dict):
        return {str(k): to_json_safe(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        try:
            value = sorted(value)
        except TypeError:  # mixed types
            value = sorted(value, key=repr)
    if isinstance(value, (list, tuple)):
        return [to_json_safe(v) for v in value]
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy array or scalar (numpy not imported here)
        return to_json_safe(value.tolist())
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    return repr(value)


def is_finite_number(value: Any) -> bool:
    """A JSON number (not a bool) with a finite value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)
