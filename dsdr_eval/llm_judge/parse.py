"""Strict parsing of judge replies into diversity scores (docs/ALGORITHMS.md §5).

Accepted: one JSON object, bare or inside a ```json fence, possibly surrounded by prose. Rejected
(each with a reason that is counted per benchmark, never turned into a score): no JSON object,
missing key, non-numeric value (strings, booleans, null, NaN/inf), a value outside 0-10.
``overall`` is recomputed as the mean of the three axes; a reported value that differs by more
than ``OVERALL_TOLERANCE`` is kept and flagged as a mismatch, the recomputed mean is used.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

AXES = ("logic", "formula", "semantic")
REQUIRED_KEYS = AXES + ("overall",)
SCORE_MIN, SCORE_MAX = 0.0, 10.0
# A judge that rounds the mean to one decimal (7.67 -> 7.7) is not a mismatch.
OVERALL_TOLERANCE = 0.051
# Hostile outputs: cap the text scanned and the number of '{' tried (keeps parsing linear-ish).
MAX_SCAN_CHARS = 200_000
MAX_OBJECT_STARTS = 200

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)

# Reasons (stable strings, counted in metrics.json)
NO_JSON = "no_json_object"
MISSING_KEY = "missing_key"
NON_NUMERIC = "non_numeric"
OUT_OF_RANGE = "out_of_range"
EMPTY = "empty_response"


class JudgeParseError(ValueError):
    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class JudgeScores:
    logic: float
    formula: float
    semantic: float
    overall: float                 # recomputed mean of the three axes
    overall_reported: float
    overall_mismatch: bool

    def to_dict(self) -> dict[str, Any]:
        return {"logic": self.logic, "formula": self.formula, "semantic": self.semantic, "overall": self.overall,
                "overall_reported": self.overall_reported, "overall_mismatch": self.overall_mismatch}


def _json_objects(text: str) -> list[dict]:
    """JSON objects found in ``text``: fenced blocks first, then any '{' that starts a valid object."""
    text = text[:MAX_SCAN_CHARS]
    found: list[dict] = []
    decoder = json.JSONDecoder()
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for chunk in candidates:
        starts = 0
        position = chunk.find("{")
        while position != -1 and starts < MAX_OBJECT_STARTS:
            starts += 1
            try:
                obj, end = decoder.raw_decode(chunk, position)
            except (json.JSONDecodeError, RecursionError):
                position = chunk.find("{", position + 1)
                continue
            if isinstance(obj, dict):
                found.append(obj)
            position = chunk.find("{", end)
        if found:
            return found
    return found


def _number(obj: dict, key: str) -> float:
    if key not in obj:
        raise JudgeParseError(MISSING_KEY, f"key {key!r} missing (keys: {sorted(map(str, obj))[:8]})")
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise JudgeParseError(NON_NUMERIC, f"{key}={value!r:.40} is not a number")
    value = float(value)
    if not math.isfinite(value):
        raise JudgeParseError(NON_NUMERIC, f"{key}={value} is not finite")
    if not SCORE_MIN <= value <= SCORE_MAX:
        raise JudgeParseError(OUT_OF_RANGE, f"{key}={value} outside [{SCORE_MIN:g}, {SCORE_MAX:g}]")
    return value


def parse_judge_response(text: str | None) -> JudgeScores:
    """Scores from a judge reply, or ``JudgeParseError`` with a counted reason."""
    if not isinstance(text, str) or not text.strip():
        raise JudgeParseError(EMPTY, "the judge returned no text")
    objects = _json_objects(text)
    if not objects:
        raise JudgeParseError(NO_JSON, "no JSON object in the reply")
    # The scores object is the first one naming any score key (a reply may quote other JSON first).
    chosen = next((o for o in objects if any(k in o for k in REQUIRED_KEYS)), objects[0])
    logic, formula, semantic = (_number(chosen, axis) for axis in AXES)
    reported = _number(chosen, "overall")
    mean = (logic + formula + semantic) / 3.0
    return JudgeScores(logic=logic, formula=formula, semantic=semantic, overall=mean, overall_reported=reported,
                       overall_mismatch=abs(reported - mean) > OVERALL_TOLERANCE)


def parse_equivalence(text: str | None) -> bool | None:
    """``{"equivalent": true|false}`` -> bool; anything else -> None (undecided, never a guess). A reply
    with both decisions (a judge quoting a hostile solution's ``{"equivalent": true}`` before its own
    ``false``) is undecided too: which one is the judge's is not ours to guess."""
    if not isinstance(text, str) or not text.strip():
        return None
    decisions = {obj["equivalent"] for obj in _json_objects(text) if isinstance(obj.get("equivalent"), bool)}
    return decisions.pop() if len(decisions) == 1 else None
