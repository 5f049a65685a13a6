"""A box is correct only when its value is the gold's (issue 24 item 3) and the equivalence classes of
issue 21 (ordinals and units in the box, x% = x/100, 'x = 10{,}000'): rules relations,
numeric_subscript, numeric_rel_tol (exact rationals), base_subscript (ASCII), ordinals, percent."""

from __future__ import annotations

import itertools
import random

import pytest

from dsdr_eval.grading.answer_norm import GradingOptions, prepare_answer, prepare_gold
from dsdr_eval.grading.answer_values import numeral_value
from dsdr_eval.grading import grade_samples, grader_provenance

RELATIONS = ["\\in", "\\cup", "\\cap", "\\setminus", "\\to", "\\rightarrow", "\\Rightarrow", "\\mapsto", "\\sim",
             "\\simeq", "\\approx", "\\equiv", "\\cong", ":=", "=", "\\ne", "\\neq", "<", ">", "\\le", "\\geq",
             "\\subset", "\\subseteq", "\\ni", "\\notin", "\\mid", "|", "\\vee", "\\land", "\\iff", "\\perp",
             "\\parallel", "\\ll", "\\succ", "\\colon", "\\oplus", "\\circ", "≈", "→", "∈", "∪", "≠", "≤"]


def _hostile_boxes(gold: str, rng: random.Random) -> list[str]:
    """A wrong value beside the gold, joined by a relation or set operator, in either order, with
    LaTeX spacing variations; subscripts and uncertainties on the gold."""
    value = int(gold)
    wrongs = [str(value + 1), str(value - 1), str(value * 10), f"{value}.5", f"\\frac{{{2 * value + 1}}}{{2}}"]
    boxes = []
    for relation in RELATIONS:
        wrong = rng.choice(wrongs)
        space = rng.choice(["", " ", "  ", "\\,"])
        boxes.append(f"{wrong}{space}{relation}{space}{gold}")
        boxes.append(f"{gold} {relation} {wrong}")
    wrong = rng.choice(wrongs)
    boxes += [f"{gold}_{{{wrong}}}", f"{gold}_{wrong}", f"{gold}^{{+1}}_{{-0}}", f"{gold}^{{+0.5}}_{{-0.5}}",
              f"{gold} _{{2}}", f"x = {wrong} = {gold}", f"{wrong} \\approx x = {gold}", f"2x = {gold}",
              # not a plain numeral beside the gold: a product, a root, a name
              f"2 \\cdot {value} \\in {gold}", f"\\sqrt{{{value}}} \\in {gold}", f"x < {gold}", f"x \\cup {gold}",
              f"n \\mid {gold}", f"x \\le {gold}", f"2 \\cdot {value} \\cup {gold}"]
    return boxes


@pytest.mark.parametrize("gold", ["204", "7", "1000", "42"])
def test_a_wrong_value_beside_the_gold_is_never_its_value(gold):
    rng = random.Random(gold)
    form = prepare_gold(gold)
    for box in _hostile_boxes(gold, rng):
        assert prepare_answer(box, form).verdict == "incorrect", box


@pytest.mark.parametrize("box, text", [
    ("x = 204", "x = 204"), ("x \\approx 204", "x = 204"), ("\\approx 204", "204"), ("f(3) := 204", "f(3) = 204"),
    ("n \\to 204", "n = 204"), ("x = 10{,}000", "x = 10000"), ("x = 10,000", "x = 10000"), ("N=10\\,000.", "N = 10000"),
    ("|-204|", "|-204|"), ("204 = 204", "204 = 204"), ("204_{10}", "204_{10}"),
    ("12^{\\text{th}} \\text{ grade}", "12"), ("3^{rd}", "3"), ("21st", "21"), ("2^{\\text{nd}}", "2"),
])
def test_names_and_decorations_keep_the_value(box, text):
    gold = prepare_gold({"x = 10{,}000": "10000", "x = 10,000": "10000", "N=10\\,000.": "10000",
                         "12^{\\text{th}} \\text{ grade}": "12", "3^{rd}": "3", "21st": "21",
                         "2^{\\text{nd}}": "2"}.get(box, "204"))
    form = prepare_answer(box, gold)
    assert (form.text, form.verdict) == (text, None)


def test_relations_the_gold_uses_are_part_of_the_expression():
    assert prepare_answer("x < 3", prepare_gold("x < 3")).verdict is None
    assert prepare_answer("(-\\infty, 1) \\cup (2, \\infty)", prepare_gold("(-\\infty, 1) \\cup (2, \\infty)")).verdict \
        is None
    assert prepare_answer("t \\in (0,4]", prepare_gold("(0, 4]")).text == "(0,4]"
    assert prepare_answer("x \\in \\{3, 1\\}", prepare_gold("1,3", {"is_multiple_answer": True})).verdict is None
    assert prepare_answer("y = 2x + 1", prepare_gold("y = 2x + 1")).verdict is None


def test_numerals_are_exact():
    assert numeral_value("-1.50") == numeral_value("\\frac{-3}{2}") == numeral_value("-3/2")
    assert numeral_value("x") is None and numeral_value("1/0") is None
    gold = prepare_gold("204")
    for box in ("204.000002", "204.00000001", "204.0000000000001", "\\frac{204000001}{1000000}", "203.9999999999"):
        assert prepare_answer(box, gold).verdict == "incorrect", box
    for box in ("204.0", "204.000", "\\frac{408}{2}", "204"):
        assert prepare_answer(box, gold).verdict is None, box
    # the rounded-fraction option is a tolerance: the exact check is off with it
    assert prepare_answer("266.6667", prepare_gold("\\frac{800}{3}"),
                          GradingOptions(rounded_fraction_tolerance=True)).verdict is None


def test_base_digits_are_ascii():
    gold = prepare_gold("FF_{16}")
    assert prepare_answer("\ufb00", gold).verdict == "incorrect"  # the ligature ff upper-cases to FF
    assert prepare_answer("\ufb00_{16}", gold).verdict == "incorrect"
    assert prepare_answer("ff", gold).verdict == "correct" and prepare_answer("FF_{16}", gold).verdict == "correct"
    assert prepare_gold("\ufb00_{16}").mode != "base"


@pytest.mark.parametrize("answer, gold, verdict", [
    ("25\\%", "\\frac{1}{4}", "correct"), ("25%", "0.25", "correct"), ("12.5\\%", "\\frac{1}{8}", "correct"),
    ("0.25", "25\\%", "correct"), ("\\frac{1}{4}", "25\\%", "correct"),
    ("25\\%", "25", None), ("25\\%", "\\frac{1}{3}", "incorrect"), ("26\\%", "\\frac{1}{4}", "incorrect"),
])
def test_percent_as_fraction(answer, gold, verdict):
    assert prepare_answer(answer, prepare_gold(gold)).verdict == verdict
    off = prepare_answer(answer, prepare_gold(gold), GradingOptions(percent_as_fraction=False)).verdict
    assert off != "correct"


def test_through_the_workers():
    """The worker-side rules (an equality of two numbers, unevaluated exact sums) and the
    parent-side ones give the verdicts end to end; the percent option is recorded."""
    cases = [("204", a, s) for a, s in [
        ("\\frac{410}{2} = 204", "incorrect"), ("2 \\cdot 102 = 204", "correct"), ("205 = 204", "incorrect"),
        ("2 \\cdot 103 = 204", "incorrect"), ("205 + 0 = 204", "incorrect"), ("\\sqrt{41616} = 204", "correct"),
        ("204+10^{-8}", "incorrect"), ("204-10^{-9}", "incorrect"), ("204+0", "correct"), ("x = 204", "correct"),
        ("204 \\cup 205", "incorrect"), ("12 \\cdot 17", "correct"), ("204.0", "correct")]]
    cases += [("12", "12^{\\text{th}} \\text{ grade}", "correct"), ("10000", "x = 10{,}000", "correct"),
              ("10000", "x = 10,000", "correct"), ("\\frac{1}{4}", "25\\%", "correct"), ("\\sqrt{2}", "1.414213562373", "correct"),
              ("FF_{16}", "\ufb00", "incorrect"), ("7", "\\sqrt{49}", "correct")]
    rows = [{"problem_id": f"p{i}", "gold": g, "completion": f"so \\boxed{{{a}}}.", "sample_idx": 0}
            for i, (g, a, _) in enumerate(cases)]
    graded = grade_samples(rows, workers=1, progress=False)
    assert [(c[1], r["status"]) for c, r in zip(cases, graded)] == [(c[1], c[2]) for c in cases]
    percent = [row for row in rows if "25\\%" in row["completion"]]
    off = grade_samples(percent, workers=1, progress=False, options=GradingOptions(percent_as_fraction=False))
    assert len(off) == 1 and off[0]["status"] == "incorrect"
    rules = grader_provenance(5.0, 1, GradingOptions(percent_as_fraction=False))["grading_rules"]
    assert rules["percent_as_fraction"] is False and {"relations", "ordinals", "numeric_subscript"} <= set(rules["rules"])


def test_relation_rule_is_linear():
    import time

    gold = prepare_gold("204")
    hostile = ["=" * 400, "x = " * 100, "\\in " * 100, "(" * 200 + "=" + ")" * 199, "1 = " * 100 + "1",
               "{" * 400, "\\to" * 133, "|" * 400]
    start = time.process_time()
    for _ in range(20):
        for text in hostile:
            prepare_answer(text, gold)
    assert time.process_time() - start < 2.0


def test_all_relation_spellings_between_numbers(subtests=None):
    gold = prepare_gold("5")
    for relation, (left, right) in itertools.product(RELATIONS, [("6", "5"), ("5", "6"), ("5.5", "5")]):
        assert prepare_answer(f"{left} {relation} {right}", gold).verdict == "incorrect", (relation, left, right)


def test_order_and_grouping_come_from_the_question():
    """Rules ordered_list (two extremes asked for in an order) and grouped_number_gold: a gold
    "58,500" for a count is one number, so "500, 58" is not its value; a list stays a list when the
    question asks for several values; "the smallest and largest" keeps its order."""
    extremes = "Let N be the number of pairs. Find the smallest and largest possible value of $N$."
    largest_first = "Find the largest and the smallest values of $f$ on the interval."
    roots = "Find all the integer roots of x^3 - 7x + 6. Enter all the roots, separated by commas."
    count = "How many license plates can be formed?"
    cases = [  # (gold, problem, metadata, box, verdict)
        ("2500,7500", extremes, {"is_multiple_answer": True, "answer_type": "Numerical"}, "2500, 7500", "correct"),
        ("2500,7500", extremes, {"is_multiple_answer": True, "answer_type": "Numerical"}, "7500, 2500", "incorrect"),
        ("3,-1", largest_first, None, "3, -1", "correct"), ("3,-1", largest_first, None, "-1, 3", "incorrect"),
        ("58,500", count, None, "58500", "correct"), ("58,500", count, None, "58{,}500", "correct"),
        ("58,500", count, None, "500, 58", "incorrect"), ("58,500", count, None, "58", "incorrect"),
        ("1,125", roots, None, "125, 1", "correct"),  # a list the question asks for: any order
        ("1,125", "Solve for $x$.", {"is_multiple_answer": True}, "125, 1", "correct"),  # metadata: a list
        ("-3,2", roots, None, "2, -3", "correct")]
    rows = [{"problem_id": f"p{i}", "gold": g, "problem": p, "answer_meta": m, "completion": f"so \\boxed{{{a}}}.",
             "sample_idx": 0} for i, (g, p, m, a, _) in enumerate(cases)]
    graded = grade_samples(rows, workers=1, progress=False)
    assert [(c[0], c[3], r["status"]) for c, r in zip(cases, graded)] == [(c[0], c[3], c[4]) for c in cases]
