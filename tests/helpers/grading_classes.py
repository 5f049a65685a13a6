"""A generator of answers a real model would box -- equivalent forms and near-misses -- over the real
golds of the six benchmarks (../shared/data/benchmarks), and the class-by-class acceptance table.

Each class rewrites a gold the way model outputs do (a trailing period, e-notation written as
``\\times 10^{..}``, a bare unit, a reversed ordered pair ...); equivalent classes must be
accepted, near-miss classes rejected. The forms are written from how completions look, not from
what the grader's rules do. Run the whole table (every gold, every form) with::

    python tests/helpers/grading_classes.py [--sample N]

(the test suite grades a deterministic sample of each class in one batched grading call).
"""

from __future__ import annotations

import argparse
import math
import random
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = REPO.parent / "shared" / "data" / "benchmarks"
BENCHMARKS = ("aime24", "aime25", "amc23", "math500", "minerva", "olympiadbench")


@dataclass(frozen=True)
class Gold:
    benchmark: str
    id: str
    answer: str  # as the project loads it (gold fixes applied where the project has them)
    problem: str
    meta: dict | None


@dataclass(frozen=True)
class Case:
    klass: str
    equivalent: bool  # True: must be accepted; False: must be rejected
    gold: Gold
    answer: str


def load_golds(data_dir: Path = DATA_DIR) -> list[Gold]:
    from dsdr_eval.tasks import load_benchmark

    golds = []
    for name in BENCHMARKS:
        for p in load_benchmark(name, data_dir=data_dir):
            meta = {k: p.extra[k] for k in ("answer_type", "is_multiple_answer", "unit") if p.extra.get(k) is not None}
            golds.append(Gold(name, p.id, p.answer, p.problem, meta or None))
    return golds


# --- helpers on gold text ---------------------------------------------------------------------------

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)"
_E_NUM_RE = re.compile(rf"^({_NUMBER})[eE]([-+]?\d+)$")
_PLAIN_NUM_RE = re.compile(rf"^{_NUMBER}$")
_INT_RE = re.compile(r"^-?\d+$")
_FRAC_RE = re.compile(r"^(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")
_DEGREE_GOLD_RE = re.compile(r"\^\s*\{?\\circ\}?")
_BASE_RE = re.compile(r"^([0-9A-F]+)_\{?(\d+)\}?$")
_UNIT_VAR_RE = re.compile(rf"^({_NUMBER}|\\frac\{{\d+\}}\{{\d+\}})\s*(\\?[A-Za-z]+)$")
_COMPLEX_DEN_RE = re.compile(r"\d\s*i\b|\bi\s*\\")


def _value(answer: str) -> float | None:
    """The value of a plain-number gold (e-notation, decimal, integer, simple fraction), else None."""
    text = answer.strip()
    if _E_NUM_RE.match(text) or _PLAIN_NUM_RE.match(text):
        return float(text)
    frac = _FRAC_RE.match(text)
    if frac:
        return (-1 if frac.group(1) else 1) * int(frac.group(2)) / int(frac.group(3))
    return None


def _sci(answer: str) -> tuple[str, str] | None:
    match = _E_NUM_RE.match(answer.strip())
    return (match.group(1), str(int(match.group(2)))) if match else None


def _ordered(gold: Gold) -> bool:
    from_meta = gold.meta or {}
    return (from_meta.get("answer_type") == "Tuple" or _names_quantities(gold) or _asks_extremes(gold)
            or _asks_each_or_one_solution(gold))


def _asks_each_or_one_solution(gold: Gold) -> bool:
    """'How many of each did she buy?' (goats, then helicopters); 'Solve the system of equations' with
    one solution written as its unknowns' values (10^{3},10 for x, y): the values in the question's order."""
    if not (gold.meta or {}).get("is_multiple_answer") or any(_reverse_tuple(i) for i in _split_top(gold.answer)):
        return False
    if re.search(r"(?i)how many (\w+ )?of each", gold.problem):
        return True
    return (gold.meta or {}).get("answer_type") == "Numerical" and bool(
        re.search(r"(?i)(solve|solutions? (to|of)) (the |this )?(following )?system", gold.problem))


def _question_order(gold: Gold) -> list[str]:
    """The gold's items in the question's order: a gold listing 'the minimum and maximum' as
    max, min (OlympiadBench 2268: 5,1) is put in the order the question asks for."""
    items = _split_top(gold.answer)
    match = re.search(r"(?i)(smallest|least|minimum|largest|greatest|maximum)\b[^.?]{0,60}\band (the )?"
                      r"(largest|greatest|maximum|smallest|least|minimum)", gold.problem)
    values = [_value(item) for item in items]
    if not _asks_extremes(gold) or match is None or None in values:
        return items
    ascending = match.group(1).lower() in ("smallest", "least", "minimum")
    return [item for _, item in sorted(zip(values, items), reverse=not ascending)]


def _asks_extremes(gold: Gold) -> bool:
    """Two values asked for in an order: 'the smallest and largest possible value of N'."""
    return len(_split_top(gold.answer)) == 2 and bool(re.search(
        r"(?i)(smallest|least|minimum)\b[^.?]{0,60}\band (the )?(largest|greatest|maximum)"
        r"|(largest|greatest|maximum)\b[^.?]{0,60}\band (the )?(smallest|least|minimum)", gold.problem))


def _names_quantities(gold: Gold) -> bool:
    """The question asks for named quantities in order: 'values of $b$ and $c$', '$a, h$ and $k$'."""
    if not (gold.meta or {}).get("is_multiple_answer"):
        return False
    return bool(re.search(r"(?:values? of|[Dd]etermine|[Cc]ompute|[Ff]ind|[Cc]alculate|What are)\s+(?:\w+\s+){0,3}"
                          r"\$[^$]+\$(?:\s*,\s*\$[^$]+\$)*\s*,?\s*and\s+\$[^$]+\$", gold.problem))


def _split_top(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    return items


def _fmt(x: float) -> str:
    return f"{x:.6g}"


# --- the classes ---------------------------------------------------------------------------------------
# Each generator yields answers for one gold (none when the class does not apply to it).

def g_identity(g: Gold) -> Iterator[str]:
    yield g.answer


def g_trailing_period(g: Gold) -> Iterator[str]:
    if not g.answer.rstrip().endswith("."):
        yield g.answer + "."


def g_dollar_wrap(g: Gold) -> Iterator[str]:
    yield f"${g.answer}$"


def g_sci_notation(g: Gold) -> Iterator[str]:
    sci = _sci(g.answer)
    if sci:
        m, e = sci
        yield f"{m} \\times 10^{{{e}}}"
        yield f"{m}\\cdot10^{{{e}}}"
        yield f"{m} × 10^{e}"


def g_thin_space(g: Gold) -> Iterator[str]:
    value = _value(g.answer)
    if value is not None and _INT_RE.match(g.answer) and abs(value) >= 1000:
        digits = f"{int(value):,}"
        yield digits.replace(",", "\\,")
        yield "x = " + digits.replace(",", "{,}")


def g_comma_groups(g: Gold) -> Iterator[str]:
    value = _value(g.answer)
    if value is not None and _INT_RE.match(g.answer) and abs(value) >= 1000:
        yield f"{int(value):,}"


UNITS = ("eV", "km", "s", "K", "erg", "cm", "J", "Hz", "pc", "km/s", "m^2", "g cm^{-3}", "M_\\odot", "yr")


def g_bare_unit(g: Gold) -> Iterator[str]:
    if g.benchmark == "minerva" and _value(g.answer) is not None:
        unit = UNITS[int(g.id) % len(UNITS)]
        sci = _sci(g.answer)
        number = f"{sci[0]} \\times 10^{{{sci[1]}}}" if sci else g.answer
        yield f"{number} {unit}"


def g_text_unit(g: Gold) -> Iterator[str]:
    if g.benchmark == "minerva" and _value(g.answer) is not None:
        unit = UNITS[int(g.id) % len(UNITS)]
        sci = _sci(g.answer)
        number = f"{sci[0]} \\times 10^{{{sci[1]}}}" if sci else g.answer
        yield f"{number} \\text{{ {unit}}}"
        yield f"{number}~\\mathrm{{{unit}}}"


def g_degree_sign(g: Gold) -> Iterator[str]:
    unit = (g.meta or {}).get("unit") or ""
    if _DEGREE_GOLD_RE.search(g.answer):
        yield _DEGREE_GOLD_RE.sub("°", g.answer)
    elif "circ" in unit and _value(g.answer) is not None:
        yield g.answer + "°"


def g_imaginary_spacing(g: Gold) -> Iterator[str]:
    if re.search(r"(?<![a-z\\_{])i(?![a-z])", g.answer) and g.benchmark == "minerva":
        squeezed = re.sub(r"(?<=[\d}])\s+i\b", "i", g.answer)
        if squeezed != g.answer:
            yield squeezed
        spaced = re.sub(r"(\d)i\b", r"\1 i", g.answer)
        if spaced != g.answer:
            yield spaced
        front = re.sub(r"(\d+)\s*\\sqrt\{(\d+)\}\s*i\b", r"\1 i \\sqrt{\2}", g.answer)
        if front != g.answer:
            yield front


def g_complex_rationalised(g: Gold) -> Iterator[str]:
    """Complex fractions with the denominator made real, as a model simplifies them."""
    if g.benchmark != "minerva" or not re.search(r"\{\(?\d+\s*[+-]\s*\d+\s*i\)?\}", g.answer):
        return
    import sympy
    from latex2sympy2_extended import latex2sympy

    try:
        expr = latex2sympy(g.answer)
    except Exception:  # noqa: BLE001
        return
    i = next((s for s in expr.free_symbols if s.name == "i"), None)
    if i is None:
        return
    expr = sympy.radsimp(sympy.nsimplify(expr.subs(i, sympy.I)))
    text = sympy.latex(expr, imaginary_unit="i")
    yield text.replace("\\left", "").replace("\\right", "")


def g_percent(g: Gold) -> Iterator[str]:
    text = g.answer.strip()
    if re.search(r"\\?%$", text):
        yield re.sub(r"\s*\\?%$", "", text)
        yield re.sub(r"\s*\\?%$", "\\\\%", text)
    elif _value(text) is not None and not _INT_RE.match(text) and re.search(r"percent|%", g.problem):
        yield text + "\\%"


def g_reordered_set(g: Gold) -> Iterator[str]:
    items = _split_top(g.answer)
    if (g.meta or {}).get("is_multiple_answer") and not _ordered(g) and len(items) > 1 and len(set(items)) > 1:
        yield ", ".join(reversed(items))


def g_spacing_and_frac(g: Gold) -> Iterator[str]:
    """Cosmetic LaTeX differences: \\dfrac for \\frac, no spaces, \\left( \\right)."""
    if "\\frac" in g.answer:
        yield g.answer.replace("\\frac", "\\dfrac")
    squeezed = re.sub(r"(?<![\\a-zA-Z])\s+|\s+(?![a-zA-Z])", "", g.answer)
    if squeezed != g.answer and not re.search(r"\\[a-zA-Z]+$", squeezed):
        yield squeezed


# How a model boxes the intended answer of golds that no parser reads as written (the golds in
# dsdr_eval/data/gold_fixes.jsonl; keyed here so the forms are not taken from the fix itself).
FIXED_GOLD_FORMS: dict[tuple[str, str], tuple[str, ...]] = {
    ("minerva", "5"): ("\\arcsin\\left(\\frac{10}{13}\\right)", "\\sin^{-1}(10/13)", "\\arcsin(10/13)"),
    ("minerva", "38"): ("-\\frac{1}{3}", "-1/3", "\\frac{-1}{3}"),
    ("minerva", "49"): ("-\\frac{3}{2}", "-1.5", "-3/2"),
    ("minerva", "27"): ("\\frac{10^5 L_\\odot M^6}{0.007 c^2 M_\\odot^6}",),
    ("olympiadbench", "1782"): ("n^2-n-1", "n(n-1)-1"),
    ("olympiadbench", "1965"): ("f(x) = ax + b",),
    ("olympiadbench", "2045"): ("(0, 4]", "t \\in (0,4]"),
}


def g_fixed_gold(g: Gold) -> Iterator[str]:
    """Golds no parser reads as written: the intended answer, written as a model writes it."""
    yield from FIXED_GOLD_FORMS.get((g.benchmark, g.id), ())


def g_variable_prefix(g: Gold) -> Iterator[str]:
    """A short 'x = ' in front of a single number, as models often box."""
    if _value(g.answer) is not None:
        yield f"x = {g.answer}"


def g_sci_of_plain(g: Gold) -> Iterator[str]:
    """A plain decimal gold written by the model in scientific or e-notation."""
    value = _value(g.answer)
    if value is None or _sci(g.answer) or value == 0 or not (abs(value) < 0.01 or abs(value) >= 1e5):
        return
    if not _PLAIN_NUM_RE.match(g.answer.strip()):
        return
    exponent = math.floor(math.log10(abs(value)))
    mantissa = f"{value / 10 ** exponent:.10g}"
    yield f"{mantissa} \\times 10^{{{exponent}}}"
    yield f"{mantissa}e{exponent}"


def g_choice_letter(g: Gold) -> Iterator[str]:
    """A multiple-choice gold \\text{(C)} answered with the letter."""
    match = re.fullmatch(r"\\text\{\(([A-E])\)\}", g.answer.strip())
    if match:
        yield f"\\text{{({match.group(1)})}}"
        yield f"({match.group(1)})"
        yield match.group(1)


_SUBSCRIPT_RE = re.compile(r"(?<![A-Za-z\\])([A-Za-z])_\{(\w)\}")


def g_subscript_braces(g: Gold) -> Iterator[str]:
    """Subscripted symbols written without braces (E_{1} -> E_1), as models usually do."""
    if _SUBSCRIPT_RE.search(g.answer):
        yield _SUBSCRIPT_RE.sub(r"\1_\2", g.answer)


def _ordinal_suffix(n: int) -> str:
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def g_ordinal_unit(g: Gold) -> Iterator[str]:
    """A whole-number gold boxed as an ordinal, with a unit word (a real Qwen3 box: 12^{\\text{th}} \\text{ grade})."""
    if _INT_RE.match(g.answer.strip()) and int(g.answer) > 0:
        n = int(g.answer)
        suffix = _ordinal_suffix(n)
        words = ("grade", "place", "day", "term", "floor")
        word = words[n % len(words)]
        yield f"{n}^{{\\text{{{suffix}}}}} \\text{{ {word}}}"
        yield f"{n}^{{\\text{{{suffix}}}}}"
        yield f"{n}^{{{suffix}}}"
        yield f"{n}{suffix}"
        yield f"{n}\\text{{{suffix}}} \\text{{ {word}}}"


def g_percent_of_fraction(g: Gold) -> Iterator[str]:
    """A fraction or decimal gold in (0, 1) written as a percentage (25\\% for \\frac{1}{4})."""
    from fractions import Fraction

    text = g.answer.strip()
    frac = _FRAC_RE.match(text)
    if frac:
        value = Fraction(int(frac.group(2)), int(frac.group(3))) * (-1 if frac.group(1) else 1)
    elif _PLAIN_NUM_RE.match(text) and not _INT_RE.match(text):
        value = Fraction(text)
    else:
        return
    percent = value * 100
    if not 0 < value < 1 or (percent * 10000).denominator != 1:  # a terminating percentage, <= 4 decimals
        return
    digits = f"{float(percent):.4f}".rstrip("0").rstrip(".")
    if Fraction(digits) == percent:
        yield f"{digits}\\%"
        yield f"{digits}%"


def g_variable_grouped(g: Gold) -> Iterator[str]:
    """'x = 10{,}000': a name, then a number with LaTeX digit groups."""
    value = _value(g.answer)
    if value is not None and _INT_RE.match(g.answer) and abs(value) >= 1000:
        digits = f"{int(value):,}"
        yield "x = " + digits.replace(",", "{,}")
        yield "n = " + digits.replace(",", "\\,")
        yield "N=" + digits.replace(",", "{,}") + "."
        yield "x = " + digits


# --- near-misses --------------------------------------------------------------------------------------

def _reverse_tuple(item: str) -> str | None:
    """'(a, b)' -> '(b, a)'; None when ``item`` is not a parenthesised tuple."""
    text = item.strip()
    for opener, closer in (("\\left(", "\\right)"), ("(", ")")):
        if text.startswith(opener) and text.endswith(closer):
            parts = _split_top(text[len(opener):len(text) - len(closer)])
            if len(parts) > 1:
                return opener + ", ".join(reversed(parts)) + closer
    return None


def n_reversed_ordered(g: Gold) -> Iterator[str]:
    """An ordered answer in the wrong order: each tuple reversed (a set of tuples stays a set);
    named quantities ('values of $b$ and $c$') listed in reverse."""
    if not _ordered(g) or "=" in g.answer:
        return
    items = _question_order(g)
    if all(_reverse_tuple(item) for item in items):
        reversed_items = [_reverse_tuple(item) for item in items]
        canon = lambda xs: sorted(re.sub(r"\s|\\left|\\right", "", x) for x in xs)  # noqa: E731
        if canon(reversed_items) != canon(items):
            yield ", ".join(reversed_items)
    elif len(items) > 1 and not any(_reverse_tuple(item) for item in items) and items != items[::-1]:
        yield ", ".join(reversed(items))


def n_grouped_gold_as_list(g: Gold) -> Iterator[str]:
    """A gold written with digit groups (58,500: a count of license plates) read as a list and permuted."""
    if re.fullmatch(r"\d{1,3}(,\d{3})+", g.answer.strip()) and not (g.meta or {}).get("is_multiple_answer") \
            and not re.search(r"(?i)separated by commas|\ball\b", g.problem):
        groups = g.answer.strip().split(",")
        if groups != groups[::-1]:
            yield ", ".join(reversed(groups))


def n_number_times_symbol(g: Gold) -> Iterator[str]:
    """A numeric gold with a stray factor (x, n, \\pi, \\sqrt{2}): units must not absorb it."""
    if _value(g.answer) is not None and _value(g.answer) != 0:
        a = g.answer
        yield from (f"{a}x", f"{a} n", f"{a}\\pi", f"{a}\\sqrt{{2}}")


def n_sign_flip(g: Gold) -> Iterator[str]:
    value = _value(g.answer)
    if value:
        yield g.answer[1:] if g.answer.startswith("-") else f"-{g.answer}"


def n_interval_bracket_swap(g: Gold) -> Iterator[str]:
    """An interval with an open end closed (or the reverse)."""
    text = g.answer.strip()
    if (g.meta or {}).get("answer_type") != "Interval" and not re.search(r"\\infty", text):
        return
    swap = {"(": "[", "[": "(", ")": "]", "]": ")"}
    if text and text[0] in "([" and text[-1] in ")]" and "\\cup" not in text:
        if not text.startswith("(-\\infty"):
            yield swap[text[0]] + text[1:]
        if not text.endswith("\\infty)"):
            yield text[:-1] + swap[text[-1]]


def n_wrong_subscript(g: Gold) -> Iterator[str]:
    """A subscripted symbol with another index (E_{1} -> E_{9}): subscripts are not decoration."""
    match = next((m for m in _SUBSCRIPT_RE.finditer(g.answer) if m.group(1) not in "Cc"), None)  # C_1: arbitrary
    if match and match.group(2) != "9":
        yield g.answer[:match.start()] + f"{match.group(1)}_{{9}}" + g.answer[match.end():]


def n_dropped_unit_variable(g: Gold) -> Iterator[str]:
    match = _UNIT_VAR_RE.match(g.answer.strip())
    if match and match.group(2) not in ("\\pi", "\\circ", "\\%", "\\sqrt"):
        yield match.group(1)


def n_wrong_base(g: Gold) -> Iterator[str]:
    match = _BASE_RE.match(g.answer.strip())
    if match:
        yield f"{match.group(1)}_{{{int(match.group(2)) + 1}}}"


def n_negated(g: Gold) -> Iterator[str]:
    a = g.answer
    yield f"\\text{{not }} {a}"
    yield f"\\text{{never }} {a}"
    yield f"\\neg {a}"
    yield f"\\neg({a})"
    yield f"{a} \\text{{ is wrong}}"
    yield f"{a} \\text{{ (incorrect)}}"


def n_hedged(g: Gold) -> Iterator[str]:
    value = _value(g.answer)
    if value is not None and len(_split_top(g.answer)) == 1:
        other = _fmt(value + 1) if _INT_RE.match(g.answer) else _fmt(value * 2)
        yield f"{g.answer} \\text{{ or }} {other}"
        yield f"{other} \\text{{ or }} {g.answer}"
        yield f"{g.answer} or {other}"


def n_wrong_mantissa(g: Gold) -> Iterator[str]:
    """Tiny/huge numbers with another mantissa: rounding to 6 decimals would call them equal."""
    sci = _sci(g.answer)
    if sci:
        m, e = sci
        yield f"{_fmt(float(m) * 1.7)} \\times 10^{{{e}}}"
        yield f"{m} \\times 10^{{{int(e) + 1}}}"


def n_euler_reading(g: Gold) -> Iterator[str]:
    """What math-verify made of e-notation (m*e*x, or m*e - x): that number must not be correct."""
    sci = _sci(g.answer)
    if sci:
        m, e = float(sci[0]), int(sci[1])
        yield _fmt(m * math.e * e if e > 0 else m * math.e + e)


def n_close_number(g: Gold) -> Iterator[str]:
    value = _value(g.answer)
    if value is not None and value != 0 and not _INT_RE.match(g.answer):
        yield _fmt(value * 1.003)


def n_relation_to_gold(g: Gold) -> Iterator[str]:
    """A wrong value related to the gold by a relation or set operator (205 \\in 204, 204 \\approx 205):
    the box mentions the gold but its value is not the gold's."""
    value = _value(g.answer)
    if value is None or not _INT_RE.match(g.answer.strip()):
        return
    wrong = str(int(value) + 1)
    a = g.answer.strip()
    for op in ("\\in", "\\cup", "\\to", "\\sim", ":=", "=", "\\approx", "\\cap", "\\setminus", "\\mapsto",
               "\\Rightarrow", "\\equiv", "\\subset", "\\ne", "<", "\\le", "\\mid"):
        yield f"{wrong} {op} {a}"
    yield f"{a} \\approx {wrong}"
    yield f"{a}_{{{wrong}}}"
    yield f"{a}^{{+1}}_{{-0}}"


def n_exact_rational_off(g: Gold) -> Iterator[str]:
    """An exact number within 1e-8 (relative) of an integer gold: not the same number."""
    if not _INT_RE.match(g.answer.strip()) or int(g.answer) == 0:
        return
    n = int(g.answer)
    yield f"{n}.000000001"
    yield f"\\frac{{{n * 1000000000 + 1}}}{{1000000000}}"
    yield f"{n}+10^{{-9}}"
    yield f"{n}-10^{{-10}}"


def n_rounded_fraction(g: Gold) -> Iterator[str]:
    """A fraction gold rounded to 4 decimals: rejected by default (math-verify), accepted by the
    Qwen2.5-Math convention (rel. tol 1e-4, an option)."""
    frac = _FRAC_RE.match(g.answer.strip())
    if frac:
        value = _value(g.answer)
        rounded = f"{value:.4f}"
        if float(rounded) != value:
            yield rounded


# --- notation real models write (issue 34) ----------------------------------------------------------

_SUP = str.maketrans("0123456789-+", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺")
_GREEK_UNICODE = {"\\pi": "π", "\\tau": "τ", "\\Delta": "Δ", "\\theta": "θ", "\\alpha": "α", "\\omega": "ω",
                  "\\lambda": "λ", "\\mu": "μ", "\\sigma": "σ", "\\phi": "φ", "\\beta": "β", "\\gamma": "γ"}
UNICODE_UNITS = ("m/s²", "kg·m/s", "J·s", "m⁻³", "s⁻¹", "W/m²", "kg·m²")


def _to_unicode(text: str) -> str:
    """LaTeX as a chat model types it: ^{-3} -> ⁻³, \\sqrt{3} -> √3 (√(x+1)), \\pi -> π, \\cdot -> ·,
    \\times -> ×, \\ln -> ln."""
    text = re.sub(r"\^(?:\{(-?\d{1,3})\}|(\d)(?!\d))", lambda m: (m.group(1) or m.group(2)).translate(_SUP), text)
    text = re.sub(r"\\sqrt\{(\d+|[a-z])\}", r"√\1", text)
    text = re.sub(r"\\sqrt\{([^{}]+)\}", r"√(\1)", text)
    for command, char in _GREEK_UNICODE.items():
        text = re.sub(re.escape(command) + r"(?![A-Za-z])\s*", char, text)
    text = re.sub(r"\\cdot\s*", "·", text)
    text = re.sub(r"\\times\s*", "× ", text)
    return re.sub(r"\\ln\s*", "ln ", text)


def g_unicode_math(g: Gold) -> Iterator[str]:
    """Unicode math: 6 × 10⁻³ m/s² for 6e-3 (a unit on a numeric Minerva gold), 1 + i√3, -τ ln Δ."""
    sci = _sci(g.answer)
    if sci:
        unit = UNICODE_UNITS[int(g.id) % len(UNICODE_UNITS)] if g.benchmark == "minerva" else ""
        yield f"{sci[0]} × 10{str(int(sci[1])).translate(_SUP)} {unit}".strip()
        yield f"{sci[0]}×10{str(int(sci[1])).translate(_SUP)}"
    elif re.search(r"\\sqrt\{|\\pi|\\tau|\\Delta|\\theta|\\omega|\\lambda|\^\{?-?\d|\\cdot|\\ln", g.answer) \
            and not re.search(r"\\sqrt\[|\\(?:d|t)?frac\{[^{}]*\\sqrt", g.answer):
        unicode = _to_unicode(g.answer)
        if unicode != g.answer:
            yield unicode


def n_unicode_math_off(g: Gold) -> Iterator[str]:
    """Unicode math that is another number: the exponent one off, the root of another number, π dropped."""
    sci = _sci(g.answer)
    if sci:
        yield f"{sci[0]} × 10{str(int(sci[1]) + 1).translate(_SUP)}"
        yield f"{sci[0]} × 10{str(-int(sci[1])).translate(_SUP)}" if int(sci[1]) else f"{sci[0]} × 10¹"
    match = re.search(r"\\sqrt\{(\d+)\}", g.answer)
    if match and not re.search(r"\\sqrt\[|\\(?:d|t)?frac\{[^{}]*\\sqrt", g.answer):
        yield _to_unicode(g.answer.replace(match.group(), "\\sqrt{" + str(int(match.group(1)) + 1) + "}", 1))


_ODE_GOLD_RE = re.compile(r"\\frac\{d|\\dot|\\ddot|\^\{\\prime\}|'")


def _ode_sides(g: Gold) -> tuple[str, str] | None:
    """(lhs, rhs) of a differential-equation gold (one '=', a derivative written in it)."""
    if g.answer.count("=") != 1 or not _ODE_GOLD_RE.search(g.answer) or "$" in g.answer:
        return None
    lhs, rhs = g.answer.split("=")
    return lhs.strip(), rhs.strip()


def _other_derivative_notation(text: str) -> str:
    """\\frac{d x}{d t} -> x', x^{\\prime} -> \\frac{dx}{dt}, \\dot{x} -> x': the same derivative."""
    text = re.sub(r"\\frac\{d\^\{2\}\s*([a-z](?:_\{\w\})?)\}\{d t\^\{2\}\}", r"\1''", text)
    text = re.sub(r"\\frac\{d\s*(\\?[a-zA-Z]+(?:_\{\w\})?)\}\{d\s*t\}", r"\\dot{\1}", text)
    text = re.sub(r"(?<![\\a-zA-Z])([a-z])\^\{\\prime\}", r"\\frac{d\1}{dt}", text)
    text = re.sub(r"\\ddot\{(\\?[a-zA-Z]+)\}", r"\1''", text)
    return text


def _ode_rewritten(g: Gold) -> tuple[str, str] | None:
    """(the gold ODE's left side in another derivative notation, its right side), or None."""
    sides = _ode_sides(g)
    return (_other_derivative_notation(sides[0]), sides[1]) if sides else None


def g_equation_rearranged(g: Gold) -> Iterator[str]:
    """A differential equation in another derivative notation, with its terms moved to one side,
    or the whole equation scaled by a constant."""
    rewritten = _ode_rewritten(g)
    if rewritten is None:
        return
    other, rhs = rewritten
    yield f"{other} - \\left({rhs}\\right) = 0"
    yield f"{rhs} = {other}"
    yield f"2\\left({other}\\right) = 2\\left({rhs}\\right)"


def n_equation_changed(g: Gold) -> Iterator[str]:
    """Another equation in another derivative notation: a constant added, a sign flipped."""
    rewritten = _ode_rewritten(g)
    if rewritten is None:
        return
    other, rhs = rewritten
    yield f"{other} = {rhs} + 1"
    yield f"{other} + \\left({rhs}\\right) = 0" if rhs.strip() != "0" else f"{other} = 1"
    yield f"{other} = -\\left({rhs}\\right)" if rhs.strip() != "0" else f"2\\left({other}\\right) = 1"


def _names(g: Gold) -> list[str]:
    """The quantities the question names in order ('values of $a, h$ and $k$' -> a, h, k)."""
    match = re.search(r"(?:values? of|[Dd]etermine|[Cc]ompute|[Ff]ind|What are)\s+(?:\w+\s+){0,3}"
                      r"(\$[^$]+\$(?:\s*,\s*\$[^$]+\$)*\s*,?\s*and\s+\$[^$]+\$)", g.problem)
    if not match:
        return []
    return [n.strip() for part in re.findall(r"\$([^$]+)\$", match.group(1)) for n in _split_top(part)]


def g_named_values(g: Gold) -> Iterator[str]:
    """Values boxed with their names: 'a = 1.68, \\, b = 0.45' (also in another order, the names
    saying which is which); a single non-numeric value as 'z = 6 - 5i'."""
    items, names = _question_order(g), _names(g)
    if _ordered(g) and len(names) == len(items) > 1 and not any("=" in i for i in items):
        yield ", \\, ".join(f"{n} = {v}" for n, v in zip(names, items))
        yield ", ".join(f"{n}={v}" for n, v in reversed(list(zip(names, items))))
    elif len(items) == 1 and _value(g.answer) is None and "=" not in g.answer and "\\text" not in g.answer \
            and not g.answer.startswith(("(", "[")) and not re.search(r"(?<![a-z\\])z(?![a-z])", g.answer):
        yield f"z = {g.answer}"


def n_named_values_swapped(g: Gold) -> Iterator[str]:
    """Named values with the names swapped: 'a = 0.45, b = 1.68' for a = 1.68, b = 0.45."""
    items, names = _question_order(g), _names(g)
    if _ordered(g) and len(names) == len(items) > 1 and len(set(items)) == len(items) and not any("=" in i for i in items):
        yield ", ".join(f"{n} = {v}" for n, v in zip(names, reversed(items)))


_FAMILY_RE = re.compile(r"(?<![A-Za-z\\])([kn])(?![A-Za-z])")


def g_renamed_parameter(g: Gold) -> Iterator[str]:
    """A solution family with its integer parameter renamed: '+ n\\pi' for '+ \\pi k'."""
    if re.search(r"(?<![A-Za-z\\])[kn]\s*\\pi|\\pi\s*[kn](?![A-Za-z])", g.answer):
        used = set(_FAMILY_RE.findall(g.answer))
        if len(used) == 1:
            new = "n" if used == {"k"} else "m"
            yield _FAMILY_RE.sub(new, g.answer)


def n_renamed_parameter_shifted(g: Gold) -> Iterator[str]:
    """The family renamed but with another period (2n\\pi for k\\pi): another set of solutions."""
    if re.search(r"(?<![A-Za-z\\])[kn]\s*\\pi|\\pi\s*[kn](?![A-Za-z])", g.answer):
        used = set(_FAMILY_RE.findall(g.answer))
        if len(used) == 1:
            new = "n" if used == {"k"} else "m"
            yield _FAMILY_RE.sub("2" + new, g.answer)


def g_companion_approximation(g: Gold) -> Iterator[str]:
    """An exact fraction with its decimal approximation: \\frac{5}{12} \\approx 0.4167."""
    frac = _FRAC_RE.match(g.answer.strip())
    if frac:
        value = _value(g.answer)
        yield f"{g.answer} \\approx {value:.4f}"
        yield f"{g.answer}\\approx {value:.2f}"


def n_companion_approximation(g: Gold) -> Iterator[str]:
    """A wrong exact part beside the gold's approximation, or the exact gold beside a wrong decimal."""
    frac = _FRAC_RE.match(g.answer.strip())
    if frac:
        value = _value(g.answer)
        sign, p, q = frac.group(1), int(frac.group(2)), int(frac.group(3))
        yield f"{sign}\\frac{{{p}}}{{{q + 1}}} \\approx {value:.4f}"
        yield f"{g.answer} \\approx {value * 1.1 + 0.01:.4f}"


def g_extremes_question_order(g: Gold) -> Iterator[str]:
    """The extremes in the question's order where the gold lists them the other way (2268)."""
    items = _question_order(g)
    if items != _split_top(g.answer):
        yield ", ".join(items)


EQUIVALENT: dict[str, Callable[[Gold], Iterator[str]]] = {
    "identity": g_identity, "trailing_period": g_trailing_period, "dollar_wrap": g_dollar_wrap,
    "sci_notation": g_sci_notation, "thin_space_groups": g_thin_space, "comma_groups": g_comma_groups,
    "bare_unit": g_bare_unit, "text_unit": g_text_unit, "degree_sign": g_degree_sign,
    "imaginary_spacing": g_imaginary_spacing, "complex_rationalised": g_complex_rationalised,
    "percent": g_percent, "reordered_set": g_reordered_set, "latex_cosmetics": g_spacing_and_frac,
    "fixed_gold": g_fixed_gold, "variable_prefix": g_variable_prefix, "sci_of_plain": g_sci_of_plain,
    "choice_letter": g_choice_letter, "subscript_braces": g_subscript_braces,
    "ordinal_unit": g_ordinal_unit, "percent_of_fraction": g_percent_of_fraction,
    "variable_grouped": g_variable_grouped,
    "unicode_math": g_unicode_math, "equation_rearranged": g_equation_rearranged, "named_values": g_named_values,
    "renamed_parameter": g_renamed_parameter, "companion_approximation": g_companion_approximation,
    "extremes_question_order": g_extremes_question_order,
}
NEAR_MISS: dict[str, Callable[[Gold], Iterator[str]]] = {
    "reversed_ordered": n_reversed_ordered, "grouped_gold_as_list": n_grouped_gold_as_list,
    "dropped_unit_variable": n_dropped_unit_variable,
    "wrong_base": n_wrong_base, "negated_or_disowned": n_negated, "hedged": n_hedged,
    "wrong_mantissa_or_exponent": n_wrong_mantissa, "euler_e_reading": n_euler_reading,
    "close_number": n_close_number, "rounded_fraction_default": n_rounded_fraction,
    "number_times_symbol": n_number_times_symbol, "sign_flip": n_sign_flip,
    "interval_bracket_swap": n_interval_bracket_swap, "wrong_subscript": n_wrong_subscript,
    "relation_to_gold": n_relation_to_gold, "exact_rational_off": n_exact_rational_off,
    "unicode_math_off": n_unicode_math_off, "equation_changed": n_equation_changed,
    "named_values_swapped": n_named_values_swapped, "renamed_parameter_shifted": n_renamed_parameter_shifted,
    "companion_approximation_off": n_companion_approximation,
}


def generate(golds: list[Gold], *, per_class: int | None = None, seed: int = 0) -> list[Case]:
    """Every class over every gold; with ``per_class`` a deterministic sample of each class."""
    cases: list[Case] = []
    for table, equivalent in ((EQUIVALENT, True), (NEAR_MISS, False)):
        for name, make in table.items():
            found = [Case(name, equivalent, g, answer) for g in golds for answer in make(g)]
            if per_class is not None and len(found) > per_class:
                found = random.Random(f"{seed}:{name}").sample(found, per_class)
            cases.extend(found)
    return cases


def to_rows(cases: list[Case]) -> list[dict]:
    """Sample rows as `dsdr-eval run` writes them (gold, problem text, answer metadata)."""
    return [{"benchmark": c.gold.benchmark, "problem_id": c.gold.id, "gold": c.gold.answer, "problem": c.gold.problem,
             "answer_meta": c.gold.meta, "sample_idx": i, "completion": f"So the answer is $\\boxed{{{c.answer}}}$."}
            for i, c in enumerate(cases)]


def class_table(cases: list[Case], graded: list[dict]) -> dict[str, dict]:
    table: dict[str, dict] = defaultdict(lambda: {"n": 0, "accepted": 0, "equivalent": None, "failures": []})
    for case, row in zip(cases, graded):
        entry = table[case.klass]
        entry["equivalent"] = case.equivalent
        entry["n"] += 1
        entry["accepted"] += bool(row["correct"])
        if bool(row["correct"]) != case.equivalent:
            entry["failures"].append((case.gold.benchmark, case.gold.id, case.gold.answer, case.answer, row["status"]))
    return dict(table)


def format_table(table: dict[str, dict]) -> str:
    lines = [f"{'class':28} {'kind':10} {'n':>6} {'accepted':>9}"]
    for name, entry in table.items():
        kind = "equivalent" if entry["equivalent"] else "near-miss"
        lines.append(f"{name:28} {kind:10} {entry['n']:6d} {100 * entry['accepted'] / entry['n']:8.1f}%")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=None, help="answers per class (default: all)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--failures", type=int, default=5, help="failures listed per class")
    parser.add_argument("--classes", default=None, help="comma-separated class names (default: all)")
    args = parser.parse_args(argv)
    from dsdr_eval.grading import grade_samples

    cases = generate(load_golds(), per_class=args.sample)
    if args.classes:
        cases = [case for case in cases if case.klass in args.classes.split(",")]
    start = time.perf_counter()
    graded = grade_samples(to_rows(cases), grading_timeout_s=10.0, workers=args.workers, progress=False)
    table = class_table(cases, graded)
    print(format_table(table))
    print(f"{len(cases)} answers graded in {time.perf_counter() - start:.1f} s")
    for name, entry in table.items():
        for failure in entry["failures"][:args.failures]:
            print(f"  {name}: {failure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
