"""D_eq (DSDR §3.1): formula extraction rule, uniqueness against the other rollouts, hostile text."""

from __future__ import annotations

import time

import numpy as np
import pytest

from dsdr_eval.diversity_metrics.formula import (
    extract_formulas,
    formula_set,
    formula_uniqueness,
    normalize_formula,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \[ x + 1 = 2 \] holds", ["x+1=2"]),
        (r"inline \( a^2 \) here", ["a^2"]),
        ("display $$ \\frac{1}{2} $$ end", ["\\frac{1}{2}"]),
        ("inline $y = 3$ end", ["y=3"]),
        ("\\begin{equation} E = mc^2 \\end{equation}", ["E=mc^2"]),
        ("\\begin{align*} a &= b \\\\ c &= d \\end{align*}", ["a&=b\\\\c&=d"]),
        ("$\\alpha   x$ and $\\alpha\n\tx$", ["\\alpha x", "\\alpha x"]),  # control word keeps one space
        ("$\\alpha + x$", ["\\alpha+x"]),
        ("price \\$5 and \\$6", []),                      # escaped dollars are prose
        ("$a \\$ b$", ["a\\$b"]),                         # escaped dollar inside a span
        ("costs $5\n\nand $10 later", []),                # $ does not span a blank line
        ("$ $ and $$  $$", []),                           # empty spans are dropped
        ("\\[ unclosed and $z$", ["z"]),                  # unbalanced opener is literal
        ("$x$ then $ unclosed", ["x"]),
        ("\\[ a $b$ c \\]", ["a$b$c"]),                   # first opener wins; span is verbatim
        ("\\\\[2pt] text $q$", ["q"]),                    # \\ is an escape, not \[
        ("", []),
        ("no math at all", []),
        ("trailing backslash $x\\", []),
    ],
)
def test_extraction_rule(text: str, expected: list[str]) -> None:
    assert extract_formulas(text) == expected


def test_normalize_formula_whitespace() -> None:
    assert normalize_formula(" x +\n 1 ") == "x+1"
    assert normalize_formula("\\sin   \\theta") == "\\sin\\theta"
    assert normalize_formula("\\sin  x") == "\\sin x"


def test_formula_set_deduplicates() -> None:
    assert formula_set("$a$ $a$ $ a $ $b$") == frozenset({"a", "b"})


def test_uniqueness_hand_computed() -> None:
    texts = ["$a$ and $b$", "$a$", "$c$ twice $c$", ""]
    d_eq = formula_uniqueness([formula_set(t) for t in texts])
    # t0: {a, b}, a is in t1 -> 1/2; t1: {a} all shared -> 0; t2: {c} unique -> 1; t3: none -> 0
    np.testing.assert_allclose(d_eq, [0.5, 0.0, 1.0, 0.0])


def test_uniqueness_degenerate_groups() -> None:
    assert formula_uniqueness([]).shape == (0,)
    np.testing.assert_array_equal(formula_uniqueness([frozenset({"x"})]), [0.0])  # G = 1
    same = [frozenset({"x", "y"})] * 3
    np.testing.assert_array_equal(formula_uniqueness(same), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(formula_uniqueness([frozenset(), frozenset()]), [0.0, 0.0])


@pytest.mark.parametrize(
    "hostile",
    [
        "\\[" * 400_000,                                 # unbalanced openers
        "$" + "a" * 2_000_000,                           # one opener, no closer
        ("$" + "a" * 10 + "\n\n") * 100_000,             # every $ rejected by the blank-line rule
        "\\" * 2_000_001 + "$",                          # escapes everywhere
        "\\begin{align}" * 100_000 + "$$" * 3,           # unclosed environments and $$
        "$" + "\\alpha " * 200_000 + "$",                # one huge formula
        "\\(" + "\\)" * 0 + "\\\\" * 500_000,            # \( with only escaped backslashes after it
        "$\x00$ \ud800 $\U0010ffff$",                    # NUL, lone surrogate, astral char
    ],
)
def test_hostile_text_is_linear_and_never_raises(hostile: str) -> None:
    # Quadratic scanning of these inputs would take hours; linear takes about a second.
    start = time.perf_counter()
    result = extract_formulas(hostile)
    assert isinstance(result, list)
    assert time.perf_counter() - start < 30
