"""Grading rules on the *value* of a box (``answer_norm`` applies them): written numerals read
exactly, ordinal suffixes, subscripts on a number, and relations -- a box that relates two values
(``205 \\in 204``, ``204 \\approx 205``) is not a value. Pure string functions, linear time."""

from __future__ import annotations

import re
from fractions import Fraction

_GOLD_COMMANDS_RE = re.compile(r"\\(?:d?t?frac|sqrt|times|cdot|pi|infty|\$|[,!;: ])")


def is_plain_number(text: str) -> bool:
    """No letters left once the numeric commands (\\frac, \\sqrt, \\pi, \\times ...) are removed."""
    return not re.search(r"[A-Za-z\\]", _GOLD_COMMANDS_RE.sub("", text)) and bool(re.search(r"\d", text))


# --- ordinals, numerals, subscripts (plain-number golds) ------------------------------------------

_ORD_WORD = r"(?:st|nd|rd|th)"
_ORD_MARKUP = rf"(?:\\(?:text|mathrm|textrm|mbox)\s*\{{\s*{_ORD_WORD}\s*\}}|\\rm\s+{_ORD_WORD}|{_ORD_WORD})"
_ORDINAL_RE = re.compile(rf"(?<=\d)\s*(?:\^\s*(?:\{{\s*{_ORD_MARKUP}\s*\}}|{_ORD_MARKUP})|{_ORD_MARKUP})(?![A-Za-z])")
_NUMERAL_RE = re.compile(r"([-+]?)\s*(?:(\d{1,60}(?:\.\d{0,60})?|\.\d{1,60})"
                         r"|\\[dt]?frac\s*\{\s*([-+]?\d{1,60})\s*\}\s*\{\s*([-+]?\d{1,60})\s*\}|(\d{1,60})\s*/\s*(\d{1,60}))")
_NUMBER_SUBSCRIPT_RE = re.compile(r"[\d}]\s*_\s*(?!\{\s*10\s*\}(?![\w{^_])|10(?![\w{^_]))")


def has_number_subscript(text: str) -> bool:
    """Rule numeric_subscript: a subscript on a number (204_{205}, 204^{+1}_{-0}) other than base ten."""
    return bool(_NUMBER_SUBSCRIPT_RE.search(text))


def strip_ordinal(text: str) -> str:
    """Rule ordinals: '12^{\\text{th}}' -> '12' (the caller applies it to plain-number golds only)."""
    return _ORDINAL_RE.sub("", text) if len(text) <= 200 else text


def numeral_value(text: str) -> Fraction | None:
    """The exact value of a plain numeral (-12, 0.25, \\frac{1}{4}, 3/4), else None. No evaluation
    beyond that: the grader never computes with what a completion wrote."""
    match = _NUMERAL_RE.fullmatch(text.strip())
    if not match:
        return None
    sign = -1 if match.group(1) == "-" else 1
    decimal, numerator, denominator = match.group(2), match.group(3) or match.group(5), match.group(4) or match.group(6)
    if decimal is not None:
        return sign * Fraction(decimal)
    if int(denominator) == 0:
        return None
    return sign * Fraction(int(numerator), int(denominator))


# --- relations: a box that relates two values is not a value --------------------------------------

# '=' and its kin give the value on their right ("x = 204"); membership gives the set on its right
_VALUE_RELATIONS = frozenset({"=", ":=", "=:", "approx", "approxeq", "thickapprox", "to", "rightarrow",
                              "longrightarrow", "Rightarrow", "Longrightarrow", "implies", "mapsto", "equiv", "sim",
                              "thicksim", "simeq", "cong", "doteq", "triangleq", "coloneqq", "eqqcolon",
                              "≈", "→", "⇒", "↦", "≡", "∼", "≃", "≅"})
_MEMBERSHIP = frozenset({"in", "∈"})
_OTHER_RELATIONS = frozenset({
    "cup", "cap", "setminus", "sqcup", "sqcap", "uplus", "land", "lor", "wedge", "vee", "oplus", "otimes", "odot",
    "circ", "bullet", "mid", "nmid", "parallel", "perp", "ll", "gg", "prec", "succ", "preceq", "succeq", "vdash",
    "dashv", "models", "colon", "lt", "gt", "le", "ge", "leq", "geq", "leqslant", "geqslant", "ne", "neq",
    "propto", "notin", "ni", "owns", "subset", "subseteq", "supset", "supseteq", "subsetneq", "supsetneq",
    "sqsubset", "sqsupset", "iff", "Leftrightarrow", "leftrightarrow", "gets", "leftarrow", "Leftarrow",
    "longleftarrow", "bowtie", "asymp", "<", ">", "<=", ">=", "!=", ":", "≠", "≤", "≥", "∉", "∪", "∩", "⇔",
    "⊂", "⊆", "⊃", "⊇", "∧", "∨", "∣"})
_BAR = "|"  # absolute value as often as "divides": only between two plain numbers
_RELATION_TOKEN_RE = re.compile(r"\\[{}]|[()\[\]{}]|\\([A-Za-z]+)(?![A-Za-z])|(:=|=:|<=|>=|!=|[=<>:|≈∼≠≤≥∈∉∪∩→⇒⇔↦≡≃≅⊂⊆⊃⊇∧∨∣])")


def relation_tokens(text: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of each relation / set operator outside (), [], {} -- one linear scan."""
    tokens, depth = [], 0
    for match in _RELATION_TOKEN_RE.finditer(text):
        token = match.group()
        if match.group(1) is None and match.group(2) is None:  # a bracket
            depth += 1 if token[-1] in "([{" else -1 if depth > 0 else 0
            continue
        name = match.group(1) or match.group(2)
        if depth == 0 and (name in _VALUE_RELATIONS or name in _MEMBERSHIP or name in _OTHER_RELATIONS or name == _BAR):
            tokens.append((match.start(), match.end(), name))
    return tokens


def _is_name(side: str) -> bool:
    """'x', 'f(3)', 'a+b', '\\angle ABC': names a quantity (letters beyond numeric commands) and does
    not start with a number ('2x' is a value times x, '205' a value)."""
    side = side.strip().lstrip("+-").strip()
    return bool(side) and not side[0].isdigit() and not is_plain_number(side) and bool(re.search(r"[A-Za-z]", side))


def relation_rule(text: str, gold_relations: frozenset[str], *, mode: str, numeric: bool) -> tuple[str, str | None]:
    """Rule relations -> (text, verdict) of an answer against a gold in comparison ``mode``
    ("single" / "ordered" / ...; ``numeric``: a plain number). Relations the gold itself uses
    (``gold_relations``, names from ``relation_tokens``) are part of the expression."""
    if len(text) > MAX_RELATION_TEXT:
        return text, None
    tokens = [token for token in relation_tokens(text) if token[2] not in gold_relations]
    if not tokens:
        return text, None
    bounds = [0] + [end for _, end, _ in tokens]
    sides = [_EDGE_SPACING_RE.sub("", text[start:stop])
             for start, stop in zip(bounds, [start for start, _, _ in tokens] + [len(text)])]
    for i, (_, _, name) in enumerate(tokens):  # between two plain numbers: only an equality of equal numbers
        left, right = numeral_value(sides[i]), numeral_value(sides[i + 1])
        if left is None or right is None or (name in _VALUE_RELATIONS and left == right):
            continue
        if name in _APPROXIMATIONS and len(tokens) == 1 and _rounds_to(left, sides[1]):
            return sides[0], None  # rule companion_approximation: "\frac{5}{12} \approx 0.4167" is 5/12
        return text, "incorrect"
    if mode != "single":
        return text, None  # lists: "b=-3, c=0" is split into items later
    names = {name for _, _, name in tokens}
    if names & _OTHER_RELATIONS:
        return text, ("incorrect" if numeric else None)
    if _BAR in names:
        return text, None
    if any(name in _MEMBERSHIP for name in names):  # "x \in (0, 4]": the set; "205 \in 204": not a value
        if len(tokens) == 1 and _is_name(sides[0]) and sides[1]:
            return sides[1], None
        return text, "incorrect"
    # '=' kin: written as '=' for math-verify, which gives a name's value (x = 204 is 204); the
    # verifier refuses an equality of two numbers that differ (205 = 204, \frac{410}{2} = 204)
    if not sides[0] and len(sides) == 2:  # "\approx 204"
        return sides[1], None
    if any(not side for side in sides):
        return text, None
    if any(side[0].isdigit() and not is_plain_number(side) for side in sides[:-1]):
        return text, "incorrect"  # "2x = 204": a multiple of a name is not its value
    values = [side for side in sides[:-1] if not _is_name(side)]  # "x = 2 \cdot 102 = 204": 2 \cdot 102
    last = numeral_value(sides[-1])
    if last is not None and any(numeral_value(side) not in (None, last) for side in values):
        return text, "incorrect"  # "205 \approx x = 204"
    if not values and mode == "single" and not numeric:  # "x = 6 - 5i": a name's value is the value
        return sides[-1], None
    return " = ".join(values + sides[-1:]) if values else " = ".join(sides), None


_APPROXIMATIONS = frozenset({"approx", "approxeq", "thickapprox", "simeq", "≈", "≃"})
_DECIMAL_RE = re.compile(r"[-+]?\d*\.(\d{1,60})")


def _rounds_to(exact: Fraction, written: str) -> bool:
    """``written`` is a decimal that rounds (0.4167, 0.42) or truncates (0.4166) ``exact`` (5/12) to its
    number of decimals -- not another number (0.5)."""
    match = _DECIMAL_RE.fullmatch(written.strip())
    if not match:
        return False
    value, scale = numeral_value(written), 10 ** len(match.group(1))
    return value is not None and (abs(exact - value) * 2 <= Fraction(1, scale)
                                  or value == Fraction(int(exact * scale), scale))


def named_value(text: str) -> tuple[str, str] | None:
    """Rule named_values: 'b = -3' -> ('b', '-3'): one '=' with a name on its left, else None."""
    if len(text) > MAX_RELATION_TEXT:
        return None
    tokens = relation_tokens(text)
    if len(tokens) != 1 or tokens[0][2] != "=":
        return None
    start, end, _ = tokens[0]
    name, value = _EDGE_SPACING_RE.sub("", text[:start]), _EDGE_SPACING_RE.sub("", text[end:])
    return (name, value) if value and _is_name(name) else None


MAX_RELATION_TEXT = 400  # a boxed value with its name is short; longer text is left to math-verify
_SPACING = r"(?:\s|~|\\[,;:! ]|\\q?quad(?![A-Za-z]))"
_EDGE_SPACING_RE = re.compile(rf"^{_SPACING}+|{_SPACING}+$")  # LaTeX spacing around a relation (\\, \\to \\,)
