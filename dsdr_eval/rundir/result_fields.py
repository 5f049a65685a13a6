"""Field checks of the run-directory JSON files that ``dsdr_eval.rundir.results`` reads (metrics.json,
config.json): each returns the value or raises DsdrError ``FILE: field: message`` (exit code 2 at the
CLI), so every reader validates once and never guesses.

Metrics are fractions in [0, 1] (finite: Python's json reads NaN / Infinity, a table would print them);
CIs are ordered; ``pass@k`` keys are ASCII digits (``"²".isdigit()`` is True in Python)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable

from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.json_values import json_type

K_FAMILIES = ("pass", "maj")  # metrics.json nests these as {"pass@k": {"8": x}}
SCALAR_METRICS = ("pass1", "avg@n", "avg@16", "avg@64")


def number(value: Any, where: str) -> float | None:
    """A finite JSON number, or null (= undefined). NaN / Infinity (which Python's json reads) are
    refused: a table would print them as numbers."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DsdrError(f"{where}: must be a number or null (got {type(value).__name__} {str(value)[:40]!r})")
    try:
        x = float(value)
    except OverflowError:  # an integer beyond float range
        x = math.inf
    if not math.isfinite(x):
        raise DsdrError(f"{where}: must be a finite number or null (got {str(value)[:40]})")
    return x


def fraction(value: Any, where: str) -> float | None:
    """An accuracy metric: a fraction in [0, 1] (metrics.json holds fractions; tables show percent)."""
    x = number(value, where)
    if x is not None and not 0.0 <= x <= 1.0:
        raise DsdrError(f"{where}: must be a fraction in [0, 1] or null (got {value})")
    return x


K_KEY = re.compile(r"[1-9][0-9]{0,8}")  # ASCII digits only ("²".isdigit() is True), at most 9 of them


def count(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DsdrError(f"{where}: must be a non-negative integer or null (got {str(value)[:40]!r})")
    return value


def obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DsdrError(f"{where}: must be an object (got {type(value).__name__})")
    return value


def interval(value: Any, where: str) -> tuple[float, float] | None:
    """A 95% CI of a fraction: [lo, hi] with 0 <= lo <= hi <= 1 (or null, or a null bound: undefined)."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 2:
        raise DsdrError(f"{where}: must be [lo, hi] (got {str(value)[:40]})")
    lo, hi = fraction(value[0], f"{where}[0]"), fraction(value[1], f"{where}[1]")
    if lo is not None and hi is not None and lo > hi:
        raise DsdrError(f"{where}: lower bound {lo} is above upper bound {hi}")
    return None if lo is None or hi is None else (lo, hi)


def flat(entry: dict[str, Any], where: str, read: Callable[[Any, str], Any]) -> dict[str, Any]:
    """metrics.json's nested metric keys, flattened: {"pass@k": {"8": x}} -> {"pass@8": x}."""
    flat: dict[str, Any] = {}
    for key in SCALAR_METRICS:
        if key in entry and (value := read(entry[key], f"{where}.{key}")) is not None:
            flat[key] = value
    for family in K_FAMILIES:
        if f"{family}@k" not in entry:
            continue
        for k, value in obj(entry[f"{family}@k"], f"{where}.{family}@k").items():
            if not K_KEY.fullmatch(str(k)):
                shown = repr(k) if len(str(k)) <= 20 else f"of {len(str(k))} characters"
                raise DsdrError(f"{where}.{family}@k: key {shown} must be a positive integer k "
                                "(ASCII digits, at most 9)")
            if (value := read(value, f"{where}.{family}@k.{k}")) is not None:
                flat[f"{family}@{int(k)}"] = value
    return flat


def typed(value: Any, kinds: tuple[type, ...], what: str, where: str) -> Any:
    """``value`` when it is null or one of ``kinds`` (bool is never a number), else DsdrError ``where``."""
    if value is None or (isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)):
        if isinstance(value, float) and not math.isfinite(value):
            raise DsdrError(f"{where}: must be {what} (got {value})")
        return value
    raise DsdrError(f"{where}: must be {what} or null (got {json_type(value)} {str(value)[:40]!r})")


def check_config(config: dict[str, Any], path: Path) -> None:
    """The fields of an evaluation run's config.json that the readers use, checked once: DsdrError
    ``FILE: field: message`` for a wrong type (docs/run_directory.md "config.json")."""
    for key, kinds, what in (("label", (str,), "a string"), ("model", (dict, str), "an object"),
                             ("template", (dict, str), "an object"), ("backend", (dict, str), "an object"),
                             ("versions", (dict,), "an object"), ("protocol", (dict,), "an object"),
                             ("mixed_settings", (list,), "a list of field names")):
        typed(config.get(key), kinds, what, f"{path}: {key}")
    for key in ("name", "version"):
        if isinstance(config.get("backend"), dict):
            typed(config["backend"].get(key), (str,), "a string", f"{path}: backend.{key}")
    for key in ("name", "text"):
        if isinstance(config.get("template"), dict):
            typed(config["template"].get(key), (str,), "a string", f"{path}: template.{key}")
    if isinstance(config.get("template"), dict):
        typed(config["template"].get("chat"), (bool,), "true or false", f"{path}: template.chat")
    for i, item in enumerate(config.get("mixed_settings") or []):
        typed(item, (str,), "a field name", f"{path}: mixed_settings[{i}]")
    proto = config.get("protocol")
    if isinstance(proto, dict):
        typed(proto.get("phases"), (list,), "a list of phase objects", f"{path}: protocol.phases")
        for key in ("max_tokens", "seed"):
            typed(proto.get(key), (int,), "an integer", f"{path}: protocol.{key}")
        typed(proto.get("stop"), (list,), "a list of stop strings", f"{path}: protocol.stop")
        for i, item in enumerate(proto.get("stop") or []):
            typed(item, (str,), "a string", f"{path}: protocol.stop[{i}]")
        for i, ph in enumerate(proto.get("phases") or []):
            where = f"{path}: protocol.phases[{i}]"
            if not isinstance(ph, dict) or not isinstance(ph.get("phase"), str):
                raise DsdrError(f"{where}: must be an object with a 'phase' name")
            typed(ph.get("n"), (int,), "an integer", f"{where}.n")
            for key in ("temperature", "top_p", "min_p"):
                typed(ph.get(key), (int, float), "a number", f"{where}.{key}")
            typed(ph.get("top_k"), (int,), "an integer", f"{where}.top_k")
