"""Grading rules applied before math-verify: normalisation of answers *and* golds, comparison modes.

Pure string functions (parent process, linear-time regexes only); the math-verify calls that
follow run in the grading workers (``dsdr_eval.grading``), which receive the prepared forms::

    gold = prepare_gold(r"-3,0", {"answer_type": "Numerical", "is_multiple_answer": True},
                        problem="... determine the values of $b$ and $c$ ...")
    gold.mode == "ordered"; gold.items == ("-3", "0")
    prepare_answer(r"\\boxed-content 0, -3", gold).items == ("0", "-3")   # compared in order

Every rule has a name (``RULES``, in ``dsdr_eval.grading.rules``) and the set is versioned by
``RULES_VERSION`` (recorded in the metrics provenance); docs/evaluate.md "Grading rules" documents
each one. ``GradingOptions`` holds the conventions that are options (recorded too).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from dsdr_eval.grading.answer_values import (MAX_RELATION_TEXT, has_number_subscript, is_plain_number, named_value,
                                             numeral_value, relation_rule, relation_tokens, strip_ordinal)
from dsdr_eval.grading.constants import constant_names
from dsdr_eval.grading.notation import derivative_forms, rename_parameter, unicode_math
from dsdr_eval.grading.rules import RULES, RULES_VERSION

DEFAULT_NUMERIC_REL_TOL = 1e-8  # equal to ~8 significant digits: roundings are not equal
ROUNDED_FRACTION_REL_TOL = 1e-4  # Qwen2.5-Math grader's math_equal (isclose, rel_tol=1e-4)


@dataclass(frozen=True)
class GradingOptions:
    """Conventions that are choices; recorded with every result."""

    numeric_rel_tol: float = DEFAULT_NUMERIC_REL_TOL
    rounded_fraction_tolerance: bool = False  # True: rel. tol 1e-4 (Qwen2.5-Math), accepts 0.3333 for 1/3
    percent_as_fraction: bool = True  # x% also equals x/100 (most graders; Qwen2.5-Math's include_percentage)

    @property
    def rel_tol(self) -> float:
        return max(self.numeric_rel_tol, ROUNDED_FRACTION_REL_TOL if self.rounded_fraction_tolerance else 0.0)

    def provenance(self) -> dict[str, Any]:
        return {**asdict(self), "effective_rel_tol": self.rel_tol}


@dataclass(frozen=True)
class GoldForm:
    """A gold answer ready for comparison.

    mode: "single" (one expression), "ordered" / "unordered" (``items`` compared in order / as a
    multiset), "base" (a numeral in base ``base``)."""

    text: str
    mode: str = "single"
    items: tuple[str, ...] = ()
    numeric: bool = False  # a plain number: the "units" rule applies to answers
    imaginary_unit: bool = False
    base: str | None = None
    exempt_words: frozenset[str] = field(default_factory=frozenset)  # disowning words the gold itself uses
    percent: bool = False  # the gold ended in % (rule percent)
    relations: frozenset[str] = field(default_factory=frozenset)  # relation tokens the gold uses (rule relations)
    derivative_variables: frozenset[str] = field(default_factory=frozenset)  # t of the gold's dx/dt (rule derivatives)
    note: str | None = None  # how the gold was read when that differs from how it is written (extremes)
    names: tuple[str, ...] = ()  # the quantities the question names, in its order ("values of $a$ and $b$")
    # rule arbitrary_constants: (the gold's arbitrary constants, names the question gives), latex2sympy's names
    constants: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())


@dataclass(frozen=True)
class AnswerForm:
    """An answer ready for comparison; ``verdict`` set when a rule already decided it."""

    text: str
    items: tuple[str, ...] = ()
    verdict: str | None = None  # "correct" | "incorrect" | None (math-verify decides)


# --- shared normalisation (answers and golds) ------------------------------------------------

_OUTER_MATH_RE = re.compile(r"^\s*(?:\$\$(.*)\$\$|\$(.*)\$|\\\((.*)\\\)|\\\[(.*)\\\])\s*$", re.S)
_E_NOTATION_RE = re.compile(r"(?<![A-Za-z_\\\d.])(\d+(?:\.\d*)?|\.\d+)[eE]([-+]?\d+)(?![\w.])")
_EXP_TEN_RE = re.compile(r"(?<![\d.])10\s*\^\s*([-+]?\s*\d+)")
_DIGIT_GROUP_RE = re.compile(r"(?<![\d.])\d{1,3}(?:(?:\\,|\\!|\{,\}|,\\!|\\thinspace|\u2009|\u202f|\u00a0)\s*\d{3})+"
                             r"(?![\d])")
_GROUP_SEP_RE = re.compile(r"\\,|\\!|\{,\}|,|\\thinspace|\u2009|\u202f|\u00a0|\s")
_PLAIN_GROUPED_RE = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_DEGREE_RE = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|°|\\degree|\\text\{\s*°\s*\}"
                        r"|\\(?:text|mbox|mathrm)\{\s*degrees?\s*\}|(?<![A-Za-z])degrees?(?![A-Za-z])")
_PERCENT_RE = re.compile(r"\s*\\?%\s*$")
# "\text {red}" is "\text{red}"; "\gamma ^{2}" is "\gamma^{2}" (latex2sympy reads neither with the space)
_COMMAND_SPACE_RE = re.compile(r"(\\[A-Za-z]+)\s+(?=[{^_])")
_DISPLAY_RE = re.compile(r"\\displaystyle|\\textstyle|\\left(?![A-Za-z])|\\right(?![A-Za-z])")
_SUBSCRIPTED_CONSTANT_RE = re.compile(r"(?<![A-Za-z\\])([EeI])\s*_")
# \text{I} (a Roman numeral, a label) is matched whole and kept
_CAPITAL_I_RE = re.compile(r"\\(?:text|mathrm|mbox|textrm|operatorname|mathcal)\s*\{[^{}]*\}|(?<![A-Za-z\\])I(?![A-Za-z])")
_ASTRO_RE = re.compile(r"_\s*(?:\{\s*\\(?:odot|oplus|sun)\s*\}|\\(?:odot|oplus|sun)(?![A-Za-z]))")
_SPACING_COMMAND_RE = re.compile(r"\\\\|\\[,;:! ]|\\thinspace(?![A-Za-z])")  # \\ (a matrix row) is kept whole
_TRAILING_PUNCT_RE = re.compile(r"(?<!\.)(?<!\\)[.,;]\s*$|\\[.,;]\s*$")


def normalise(text: str, *, keep_percent: bool = False) -> str:
    """The rules every answer and gold goes through (wrapper ... percent), in a fixed order;
    ``keep_percent``: all but the last (``split_percent`` then takes the % off)."""
    text = text.strip()
    for _ in range(3):  # $\boxed$ content may be wrapped twice: "$$ $x$ $$"
        match = _OUTER_MATH_RE.match(text)
        if not match:
            break
        text = next(g for g in match.groups() if g is not None).strip()
    text = unicode_math(text)
    text = _DISPLAY_RE.sub("", text).strip()
    text = _COMMAND_SPACE_RE.sub(r"\1", text)
    text = _strip_trailing_punct(text)
    text = _SUBSCRIPTED_CONSTANT_RE.sub(r"\\mathcal{\1}_", text)
    if "I" in text:  # rule subscripted_constants: a bare I (I\dot{\omega} + 2B\omega = T, I(0)) is a variable
        text = _CAPITAL_I_RE.sub(lambda m: m.group() if len(m.group()) > 1 else "\\mathcal{I}", text)
    text = _ASTRO_RE.sub(lambda m: "_{" + ("earth" if "oplus" in m.group() else "sun") + "}", text)
    text = re.sub(r"×\s*", r"\\times ", text)
    text = re.sub(r"·\s*", r"\\cdot ", text).replace("−", "-")
    text = _E_NOTATION_RE.sub(lambda m: f"{m.group(1).rstrip('.') or '0'}\\times10^{{{m.group(2)}}}", text)
    text = _EXP_TEN_RE.sub(lambda m: "10^{" + m.group(1).replace(" ", "") + "}", text)
    text = _DIGIT_GROUP_RE.sub(lambda m: _GROUP_SEP_RE.sub("", m.group()), text)
    # rule spacing: the comma of "a = 1.68, \, b = 0.45" separates nothing
    if "\\" in text:
        text = _SPACING_COMMAND_RE.sub(lambda m: m.group() if m.group() == "\\\\" else " ", text)
    text = derivative_forms(text)[0]
    text = _DEGREE_RE.sub("", text)
    if not keep_percent:
        text = _PERCENT_RE.sub("", text)
    return _strip_trailing_punct(text.strip())


def split_percent(text: str) -> tuple[str, bool]:
    """(``text`` without a trailing % / \\%, whether it had one)."""
    stripped = _PERCENT_RE.sub("", text)
    return (_strip_trailing_punct(stripped.strip()), True) if stripped != text else (text, False)


def _strip_trailing_punct(text: str) -> str:
    while True:
        stripped = _TRAILING_PUNCT_RE.sub("", text).rstrip()
        if stripped == text or not stripped:
            return text
        text = stripped


# --- units (numeric golds only) ----------------------------------------------------------------

_PREFIX = "[yzafpnuµμmcdkMGTPE]?"
_MARKUP_UNIT = r"\\(?:text|mathrm|mbox|textrm|rm|operatorname|mathit)\s*\{(?:[^{}]|\{[^{}]*\})*\}"
_UNIT_ATOM = (rf"(?:{_MARKUP_UNIT}"
              r"|\\mu\s*[A-Za-z]+(?![A-Za-z])|\\AA|Å|\\Omega|\\%"
              r"|[MLR]_\{(?:sun|earth)\}"
              rf"|{_PREFIX}(?:eV|Hz|Pa|Jy|mol|erg|pc|yr|rad|sr|Wb|bar|[mgsNJWCVKALTF])(?![A-Za-z])"
              r"|(?:AU|au|ly|atm|torr|mag|arcsec|arcmin|deg|amu|Da|ohm|sec|hr|hrs|min)(?![A-Za-z])"
              r"|[A-Za-z]{3,}(?![A-Za-z]))")  # every atom ends at a word end: one way to split, linear
_UNIT_POWER = r"(?:\s*\^\s*(?:\{\s*-?\s*\d+\s*\}|-?\d))?"
_UNIT_SEP = r"(?:\s|~|\\,|\\;|\\:|\\!|\\ |/|\\cdot|\.|\*)*"
_TRAILING_UNITS_RE = re.compile(rf"(?<=[\d}}).\s]){_UNIT_SEP}(?:{_UNIT_ATOM}{_UNIT_POWER}{_UNIT_SEP})+$")
_TRAILING_MARKUP_UNITS_RE = re.compile(rf"(?<=[\d}}).\s]){_UNIT_SEP}(?:{_MARKUP_UNIT}{_UNIT_POWER}{_UNIT_SEP})+$")
_LEADING_UNITS_RE = re.compile(r"^(?:\\\$|\$|£|€)\s*")  # \$32 (currency before the number)


def strip_units(text: str, *, bare: bool = True) -> str:
    """Drop a currency sign before and units after a number; ``bare=False``: only units written
    as \\text{..} / \\mathrm{..} (a gold's bare letters are variables: 6m)."""
    if len(text) > 200:  # a number with its unit is short; keeps the scan cheap on hostile text
        return text
    stripped = _LEADING_UNITS_RE.sub("", text)
    stripped = (_TRAILING_UNITS_RE if bare else _TRAILING_MARKUP_UNITS_RE).sub("", stripped).strip()
    return stripped or text




# --- lists ----------------------------------------------------------------------------------------

_OPEN, _CLOSE = "([{", ")]}"


def split_top_level(text: str, separators: str = ",") -> list[str]:
    """Split on separators outside (), [], {} -- linear scan; ``\\{`` / ``\\}`` count as braces."""
    items, depth, start, i = [], 0, 0, 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
            depth += 1 if text[i + 1] == "{" else -1
            i += 2
            continue
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth = max(0, depth - 1)
        elif char in separators and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
        i += 1
    items.append(text[start:].strip())
    return items


def unwrap_tuple(text: str) -> tuple[str, str] | None:
    """'(a, b)' -> ('(', 'a, b') when the outer brackets enclose the whole text and it has a comma."""
    text = text.strip()
    pairs = {"(": ")", "[": "]", "\\{": "\\}"}
    for opener, closer in pairs.items():
        if text.startswith(opener) and text.endswith(closer):
            inner = text[len(opener):len(text) - len(closer)]
            if _balanced(inner) and len(split_top_level(inner)) > 1:
                return opener, inner
    return None


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += 1 if char in _OPEN else -1 if char in _CLOSE else 0
        if depth < 0:
            return False
    return depth == 0


# rule and_lists: "1 \\text{, and } 2", "1 \\& 2", "both 1 and 2", rows "1 \\\\ 2" list items as commas do
_TEXT_CMD = r"\\(?:text|mbox|mathrm|textrm)\s*\{"
_ITEM_WORDS_RE = re.compile(_TEXT_CMD + r"\s*(?:,\s*(?:or|and)?|or|and)\s*,?\s*\}|\\quad|\\qquad|\\&"
                            r"|(?<![A-Za-z\\])(?:or|and)(?![A-Za-z])|;")
_BOTH_RE = re.compile(r"^\s*(?:" + _TEXT_CMD + r"\s*both\s*\}|both(?![A-Za-z]))\s*")


def _answer_items(text: str, ordered: bool) -> list[str]:
    text = _ITEM_WORDS_RE.sub(",", _BOTH_RE.sub("", text))
    if "\\\\" in text and "\\begin" not in text:  # rows of a list, not of a matrix
        text = text.replace("\\\\", ",")
    wrapped = unwrap_tuple(text)
    if wrapped and (ordered or wrapped[0] == "\\{"):
        text = wrapped[1]
    return [item for item in split_top_level(text) if item]


# --- ordered or not: the benchmark's metadata and the question --------------------------------

_NAMED_QUANTITIES_RE = re.compile(
    r"(?i)(?:values?\s+of|determine|compute|find|calculate|what\s+are)\s+(?:[a-z]+\s+){0,3}"
    r"\$[^$]{1,60}\$(?:\s*,\s*\$[^$]{1,60}\$)*\s*,?\s*and\s+\$[^$]{1,60}\$"
    r"|(?i:values?\s+of|determine|compute|find|calculate|what\s+are)\s+(?:[a-z]+\s+){0,3}"
    r"\$[^$]{1,40},[^$]{1,40}\$\s*,?\s*and\s+\$[^$]{1,60}\$")


# "Find the smallest and largest possible value of N": two extremes asked for in an order
_EXTREMES_RE = re.compile(
    r"(?i)\b(?:smallest|least|minimum|minimal|lowest)\b[^.?;$]{0,60}?\band\s+(?:the\s+)?"
    r"(?:largest|greatest|maximum|maximal|highest)\b"
    r"|\b(?:largest|greatest|maximum|maximal|highest)\b[^.?;$]{0,60}?\band\s+(?:the\s+)?"
    r"(?:smallest|least|minimum|minimal|lowest)\b")
# the question asks for several values: a gold "1,125" is then a list, not one grouped number
_LIST_REQUEST_RE = re.compile(r"(?i)separated\s+by\s+commas|comma[- ]separated|\ball\s+(?:the\s+)?(?:possible\s+)?"
                              r"(?:real\s+|integer\s+|positive\s+)?(?:values|solutions|roots|numbers|integers|pairs)\b")


# "How many of each did she buy?" (after "goats and ... helicopters"): the counts in the order named
_OF_EACH_RE = re.compile(r"(?i)\bhow\s+many\s+(?:\w+\s+)?of\s+each\b")
# "Solve the system of equations" / "all real solutions to the system": one solution, its unknowns in order
_SYSTEM_RE = re.compile(r"(?i)\b(?:solve|solutions?\s+(?:to|of))\s+(?:the\s+|this\s+)?(?:following\s+)?"
                        r"system\b")
_MIN_FIRST_RE = re.compile(r"(?i)\b(?:smallest|least|minimum|minimal|lowest)\b")


def list_mode(gold_items: list[str], meta: Mapping[str, Any] | None, problem: str | None) -> str:
    """'ordered' | 'unordered' | 'single' for a gold with ``gold_items`` top-level items (rule
    ordered_list): a question that names its quantities in an order is answered in that order; only
    a question asking for a set (all values, all solutions) is answered by a set."""
    meta = meta or {}
    answer_type = str(meta.get("answer_type") or "")
    if answer_type == "Interval" or len(gold_items) < 2:
        return "single"
    if answer_type == "Tuple" and not meta.get("is_multiple_answer"):
        return "ordered"
    if not problem or answer_type == "Tuple" or any(unwrap_tuple(item) for item in gold_items):
        return "unordered"  # a set of tuples: each tuple is ordered (task._tuples_equal), the set is not
    if len(gold_items) == 2 and _EXTREMES_RE.search(problem):
        return "ordered"  # "the smallest and largest value": the answer lists them in that order
    named = _NAMED_QUANTITIES_RE.search(problem)
    if named and (meta.get("is_multiple_answer") or len(_named(named.group())) == len(gold_items)):
        return "ordered"
    if _OF_EACH_RE.search(problem) or (answer_type != "Expression" and _SYSTEM_RE.search(problem)):
        return "ordered"
    return "unordered"


def _named(question_part: str) -> list[str]:
    """The quantities a question names in ``question_part`` ('$a, h$ and $k$' -> a, h, k)."""
    return [name for math in re.findall(r"\$([^$]*)\$", question_part) for name in split_top_level(math) if name]


def extremes_in_question_order(items: list[str], problem: str | None) -> tuple[list[str], str | None]:
    """Rule ordered_list, extremes: a two-number gold of a question asking for 'the minimum and maximum'
    follows the question's order; a gold listing them the other way (OlympiadBench 2268: 'minimum and
    maximum', gold 5,1) is read in the question's order -> (items, note saying so, else None)."""
    match = _EXTREMES_RE.search(problem or "") if len(items) == 2 else None
    values = [numeral_value(item) for item in items]
    if match is None or None in values or values[0] == values[1]:
        return items, None
    min_first = bool(_MIN_FIRST_RE.match(match.group()))
    if (values[0] < values[1]) == min_first:
        return items, None
    note = (f"gold {','.join(items)} lists the extremes in the other order than the question "
            f"('{match.group()}'); graded in the question's order: {items[1]},{items[0]}")
    return items[::-1], note


def grouped_number_gold(text: str, meta: Mapping[str, Any] | None, problem: str | None) -> bool:
    """A gold "58,500" is the number 58500 written with digit groups -- not the list {58, 500}, which
    would accept "500, 58" -- unless the metadata or the question asks for several answers."""
    if not _PLAIN_GROUPED_RE.fullmatch(text) or (meta or {}).get("is_multiple_answer"):
        return False
    return not (problem and _LIST_REQUEST_RE.search(problem))


# --- disowning / hedging boxes -------------------------------------------------------------------

_DISOWN_RE = re.compile(r"\\neg(?![A-Za-z])|\\lnot(?![A-Za-z])|(?<![A-Za-z\\])(not|never|no|wrong|incorrect|false|"
                        r"isn't|cannot|impossible|maybe|perhaps|possibly|either|or|"
                        r"unsure|guess)(?![A-Za-z])", re.I)


def _disowning_words(text: str) -> set[str]:
    return {(m.group(1) or m.group()).lower() for m in _DISOWN_RE.finditer(text)}


# --- base-b numerals --------------------------------------------------------------------------------

_BASE_RE = re.compile(r"^([0-9A-Za-z]+)\s*_\s*\{?\s*\(?\s*(\d{1,2})\s*\)?\s*\}?$")
_BASE_WORD_RE = re.compile(r"^([0-9A-Za-z]+)\s*(?:\\text\{\s*\(?base\s*(\d{1,2})\)?\s*\}|\(\s*base\s*(\d{1,2})\s*\))$")

_IMAGINARY_RE = re.compile(r"(?<![A-Za-z\\_{])i(?![A-Za-z])(?!\s*[=<>])")


# --- public API -------------------------------------------------------------------------------------

def prepare_gold(gold: str, meta: Mapping[str, Any] | None = None, problem: str | None = None) -> GoldForm:
    """Normalise a gold answer and choose its comparison mode from the benchmark's metadata."""
    text, percent = split_percent(normalise(str(gold), keep_percent=True))
    variables = derivative_forms(str(gold))[2]
    exempt = frozenset(_disowning_words(text))
    relations = frozenset(name for _, _, name in relation_tokens(text)) if len(text) <= MAX_RELATION_TEXT else frozenset()
    base = _BASE_RE.match(text)
    if base and re.fullmatch(r"[0-9A-Fa-f]+", base.group(1)):  # ASCII: no Unicode case mapping (\ufb00)
        return GoldForm(text, mode="base", items=(base.group(1).upper(),), base=base.group(2), exempt_words=exempt)
    if grouped_number_gold(text, meta, problem):
        text = text.replace(",", "")
    numeric = is_plain_number(strip_units(text, bare=False)) and "," not in text
    if numeric:
        text = strip_units(text, bare=False)
    imaginary = bool(_IMAGINARY_RE.search(text))
    items = split_top_level(text)
    wrapped = unwrap_tuple(text)
    if len(items) == 1 and wrapped and str((meta or {}).get("answer_type")) == "Tuple":
        # one ordered tuple "(2,4)" (also when is_multiple_answer): its elements, in order
        return GoldForm(text, mode="ordered", items=tuple(split_top_level(wrapped[1])), imaginary_unit=imaginary,
                        exempt_words=exempt, percent=percent, relations=relations)
    mode = list_mode(items, meta, problem)
    note, names = None, ()
    if mode == "single":
        items = []
    elif mode == "ordered":
        items, note = extremes_in_question_order(items, problem)
        named = _NAMED_QUANTITIES_RE.search(problem or "")
        names = tuple(_name_key(name) for name in _named(named.group())) if named else ()
    return GoldForm(text, mode=mode, items=tuple(items), numeric=numeric, imaginary_unit=imaginary,
                    base=None, exempt_words=exempt, percent=percent, relations=relations,
                    derivative_variables=variables, note=note,
                    names=names if len(names) == len(items) else (),
                    constants=constant_names(text, problem) if mode == "single" and not numeric else ((), ()))


def prepare_answer(answer: str, gold: GoldForm, options: GradingOptions | None = None) -> AnswerForm:
    """Normalise an extracted answer against ``gold``; some rules decide the verdict outright."""
    options = options or GradingOptions()
    text, percent = split_percent(normalise(str(answer), keep_percent=True))
    words = _disowning_words(text) - gold.exempt_words
    if gold.mode in ("ordered", "unordered"):
        words -= {"or"}  # "1 or 3" lists the values of a multiple answer
    if words:
        return AnswerForm(text, verdict="incorrect")  # rule disowning
    variables = derivative_forms(str(answer))[2] if gold.derivative_variables else frozenset()
    if variables and variables != gold.derivative_variables:
        return AnswerForm(text, verdict="incorrect")  # rule derivatives: dx/ds is not dx/dt
    text = rename_parameter(text, gold.text)
    if not gold.numeric and _TEXT_WORD_RE.search(text):
        text = _TEXT_WORD_RE.sub(lambda m: _gold_word(m, gold.text), text)
    if gold.mode == "base":
        pair = named_value(text)  # rule named_values: "n = 52_8"
        return _compare_base(pair[1] if pair else text, gold)
    if gold.numeric:
        text = strip_units(strip_ordinal(text))
        if _PLAIN_GROUPED_RE.fullmatch(text):
            text = text.replace(",", "")
    text, verdict = relation_rule(text, gold.relations, mode=gold.mode, numeric=gold.numeric)
    if gold.numeric and verdict is None and "=" in text:  # "x = 10,000": the value's digit groups too
        name, _, value = text.rpartition("=")
        if _PLAIN_GROUPED_RE.fullmatch(value.strip()):
            text = f"{name}= {value.strip().replace(',', '')}"
    if verdict is None and gold.numeric and gold.mode == "single" and has_number_subscript(text):
        verdict = "incorrect"  # rule numeric_subscript: 204_{205} is not 204
    if verdict is None and percent != gold.percent and options.percent_as_fraction:
        verdict = _percent_as_fraction(text, percent, gold)
    if verdict is None and gold.mode == "single" and options.rel_tol <= DEFAULT_NUMERIC_REL_TOL:
        verdict = _exact_numerals(text, gold)
    if verdict is not None:
        return AnswerForm(text, verdict=verdict)
    if gold.mode == "single":
        return AnswerForm(text)
    items = _answer_items(text, ordered=gold.mode == "ordered")
    if len(items) != len(gold.items) and "=" in text:  # "(b, c) = (-3, 0)": the right-hand side
        items = _answer_items(text.rsplit("=", 1)[1], ordered=gold.mode == "ordered")
    if len(items) == len(gold.items):
        return AnswerForm(text, _named_items(items, gold))
    if gold.mode == "unordered":  # "x \in \{1, 3\}": math-verify compares the whole answer as a set
        return AnswerForm(text)
    return AnswerForm(text, tuple(items), verdict="incorrect")  # rule ordered_list: wrong number of items


# rule text_names: \text{SRMC} = \text{LRMC} writes the gold's bare SRMC = LRMC as words (a name of
# two or more letters in \text, \mathrm, ...), which latex2sympy reads as one symbol, the gold's as a product
_TEXT_WORD_RE = re.compile(r"\\(?:text|mathrm|textrm|mbox|operatorname)\{\s*([A-Za-z]{2,40})\s*\}")


def _gold_word(match: re.Match, gold: str) -> str:
    """The bare word when the gold writes it bare (not after a backslash, not inside a longer word, not in
    the gold's own \\text{}: \\lambda_{\\text{red}} keeps its text)."""
    word, bare = match.group(1), _TEXT_WORD_RE.sub(" ", gold)
    return word if re.search(rf"(?<![\\A-Za-z]){word}(?![A-Za-z])", bare) else match.group()


def _name_key(name: str) -> str:
    return re.sub(r"\s+|\\[,;:! ]", "", normalise(name))


def _named_items(items: list[str], gold: GoldForm) -> tuple[str, ...]:
    """Rule named_values: items written 'a = 1.68' are their values; in an ordered list whose
    question names the quantities, named items are put in the question's order by their names
    ('c = 0, b = -3' answers 'the values of $b$ and $c$' as -3, 0)."""
    pairs = [named_value(item) for item in items]
    if any(pair is None for pair in pairs) or any("=" in item for item in gold.items):  # the gold names them too
        return tuple(items)
    keys = [_name_key(name) for name, _ in pairs]
    if gold.mode == "ordered" and gold.names and sorted(keys) == sorted(gold.names) and len(set(keys)) == len(keys):
        by_name = dict(zip(keys, (value for _, value in pairs)))
        return tuple(by_name[name] for name in gold.names)
    return tuple(value for _, value in pairs)


def _percent_as_fraction(text: str, answer_percent: bool, gold: GoldForm) -> str | None:
    """Rule percent, option percent_as_fraction: one side ended in % -> "correct" when x% = x/100
    makes the two plain numerals equal; otherwise None (x% = x is then checked as before)."""
    answer_value, gold_value = numeral_value(text), numeral_value(gold.text)
    if answer_value is None or gold_value is None:
        return None
    if answer_percent:
        return "correct" if answer_value / 100 == gold_value else None
    return "correct" if gold_value / 100 == answer_value else None


def _exact_numerals(text: str, gold: GoldForm) -> str | None:
    """Rule numeric_rel_tol for two written numerals: exact, on the text as written (a parser's
    floats keep ~15 digits: 204.0000000000001 would become 204) -> "incorrect" when they differ,
    else None (math-verify confirms)."""
    answer_value, gold_value = numeral_value(text), numeral_value(gold.text)
    if answer_value is None or gold_value is None or answer_value == gold_value:
        return None
    return "incorrect"


def _compare_base(text: str, gold: GoldForm) -> AnswerForm:
    match = _BASE_RE.match(text) or _BASE_WORD_RE.match(text)
    if match:
        digits, base = match.group(1), next(g for g in match.groups()[1:] if g)
    else:
        digits, base = text.strip(), gold.base
    # ASCII digits only: str.upper() maps the ligature \ufb00 to "FF" and \u017f to "S"
    correct = bool(re.fullmatch(r"[0-9A-Za-z]+", digits)) and digits.upper() == gold.items[0] and base == gold.base
    return AnswerForm(text, verdict="correct" if correct else "incorrect")  # rule base_subscript


def wire_gold(gold: GoldForm) -> tuple:
    """The gold as the worker receives it (plain tuples pickle fast)."""
    return (gold.text, gold.mode, gold.items, gold.imaginary_unit, gold.constants)


def wire_answer(answer: AnswerForm) -> tuple:
    return (answer.text, answer.items, answer.verdict)


def rules_provenance(options: GradingOptions) -> dict[str, Any]:
    return {"rules_version": RULES_VERSION, "rules": sorted(RULES), **options.provenance()}
