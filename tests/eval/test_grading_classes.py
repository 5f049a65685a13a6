"""Class-by-class grading suite over the real golds of the six benchmarks, plus the rules' units.

The generator (tests/helpers/grading_classes.py) writes equivalent forms and near-misses a model would
box; a deterministic sample of every class is graded in ONE batched call through the real worker
pool. Equivalent classes must be accepted >= 99.5 %, near-misses <= 0.3 % (with 25 answers a class:
every equivalent form accepted, every near-miss rejected)."""

from __future__ import annotations

import json

import pytest

from dsdr_eval.grading import answer_norm
from dsdr_eval.grading.answer_norm import GradingOptions, prepare_answer, prepare_gold
from dsdr_eval.tasks import gold_fixes, load_benchmark, load_jsonl_benchmark
from dsdr_eval.grading import grade_samples, grader_provenance

from helpers import grading_classes as gc

PER_CLASS = 25
DATA = gc.DATA_DIR
pytestmark = pytest.mark.skipif(not (DATA / "minerva.jsonl").is_file(), reason="benchmark data not present")


@pytest.fixture(scope="module")
def golds():
    return gc.load_golds(DATA)


@pytest.fixture(scope="module")
def class_results(golds):
    cases = gc.generate(golds, per_class=PER_CLASS)
    graded = grade_samples(gc.to_rows(cases), grading_timeout_s=10.0, workers=2, progress=False)
    return cases, gc.class_table(cases, graded)


def test_every_class_is_generated(class_results):
    _, table = class_results
    assert set(table) == set(gc.EQUIVALENT) | set(gc.NEAR_MISS)


@pytest.mark.parametrize("klass", list(gc.EQUIVALENT))
def test_equivalent_class_accepted(class_results, klass):
    entry = class_results[1][klass]
    assert entry["accepted"] / entry["n"] >= 0.995, (klass, entry["failures"][:5])


@pytest.mark.parametrize("klass", list(gc.NEAR_MISS))
def test_near_miss_class_rejected(class_results, klass):
    entry = class_results[1][klass]
    assert entry["accepted"] / entry["n"] <= 0.003, (klass, entry["failures"][:5])


def test_rounded_fraction_option_accepts_what_the_default_rejects(golds):
    cases = [c for c in gc.generate(golds, per_class=None) if c.klass == "rounded_fraction_default"][:20]
    rows = gc.to_rows(cases)
    strict = grade_samples(rows, workers=1, progress=False)
    lenient = grade_samples(rows, workers=1, progress=False, options=GradingOptions(rounded_fraction_tolerance=True))
    assert not any(r["correct"] for r in strict)
    # Qwen2.5-Math's math_equal: isclose(rel_tol=1e-4); 0.0536 for 3/56 is off by 5e-4 there too
    expected = [abs(gc._value(c.gold.answer) - float(c.answer)) <= 1e-4 * abs(gc._value(c.gold.answer)) for c in cases]
    assert sum(expected) >= 5 and [r["correct"] for r in lenient] == expected


# --- rules, pure (no workers) -------------------------------------------------------------------

@pytest.mark.parametrize("raw, expected", [
    ("4.5e33", "4.5\\times10^{33}"), ("1e-5", "1\\times10^{-5}"), ("4.6 × 10^-24", "4.6 \\times 10^{-24}"),
    ("$204.$", "204"), ("10\\,080", "10080"), ("x = 1{,}000", "x = 1000"), ("10,\\!080", "10080"),
    ("90°", "90"), ("62.5\\%", "62.5"), ("\\left( 3, \\frac{\\pi}{2} \\right)", "( 3, \\frac{\\pi}{2} )"),
    ("1 - 3e^{-2t}", "1 - 3e^{-2t}"),  # Euler's e in an expression stays
])
def test_normalise(raw, expected):
    assert answer_norm.normalise(raw) == expected


def test_units_are_dropped_only_for_numeric_golds():
    numeric = prepare_gold("1.3")
    assert prepare_answer("1.3 eV", numeric).text == "1.3"
    assert prepare_answer("2.1 \\times 10^{5}~\\mathrm{g\\,cm^{-3}}", numeric).text == "2.1 \\times 10^{5}"
    assert prepare_answer("2x", numeric).text == "2x"  # a variable is not a unit
    symbolic = prepare_gold("6m")
    assert symbolic.text == "6m" and not symbolic.numeric and prepare_answer("6", symbolic).text == "6"


def test_disowning_and_hedging_boxes_are_ruled_incorrect():
    gold = prepare_gold("7")
    for answer in ("\\neg 7", "\\text{not } 7", "7 \\text{ is wrong}", "\\sqrt{49} \\text{ (incorrect)}",
                   "7 \\text{ or } 8", "maybe 7"):
        assert prepare_answer(answer, gold).verdict == "incorrect", answer
    assert prepare_answer("7", gold).verdict is None
    assert prepare_answer("\\text{neither}", prepare_gold("\\text{neither}")).verdict is None
    listed = prepare_gold("1,3", {"is_multiple_answer": True})
    assert prepare_answer("1 \\text{ or } 3", listed).items == ("1", "3")  # "or" lists the values


def test_base_subscripts():
    gold = prepare_gold("52_8")
    assert prepare_answer("52_{8}", gold).verdict == "correct"
    assert prepare_answer("52", gold).verdict == "correct"
    assert prepare_answer("52_{9}", gold).verdict == "incorrect"
    assert prepare_answer("42", gold).verdict == "incorrect"


def test_ordered_or_unordered_from_metadata_and_question():
    meta = {"answer_type": "Numerical", "is_multiple_answer": True}
    assert prepare_gold("-3,0", meta, "Determine the values of $b$ and $c$ so that ...").mode == "ordered"
    assert prepare_gold("-1,0,1", meta, "Determine all integer values of $x$ such that ...").mode == "unordered"
    assert prepare_gold("1,3,9,11", meta, "Determine all values of $k$ for which the points $A(1,2), B(11,2)$ "
                        "and $C(k, 6)$ form a right-angled triangle.").mode == "unordered"
    tuple_gold = prepare_gold("(2,4)", {"answer_type": "Tuple", "is_multiple_answer": False})
    assert tuple_gold.mode == "ordered" and tuple_gold.items == ("2", "4")
    assert prepare_gold("3, 5, 7").mode == "unordered"  # no metadata: a comma list is a set


def test_reversed_pair_without_metadata_is_rejected():
    # math-verify reads (3,2) and (5,1) as empty open intervals, which it calls equal.
    rows = [{"problem_id": "p", "gold": "(3,2)", "completion": f"\\boxed{{{a}}}", "sample_idx": i}
            for i, a in enumerate(("(5,1)", "(2,3)", "(3,2)", "\\left(3, 2\\right)"))]
    assert [r["status"] for r in grade_samples(rows, workers=1, progress=False)] == \
        ["incorrect", "incorrect", "correct", "correct"]


def test_list_answers_in_other_shapes():
    meta = {"answer_type": "Numerical", "is_multiple_answer": True}
    ordered = "Determine the values of $b$ and $c$ so that it holds."
    rows = [{"problem_id": pid, "gold": gold, "problem": problem, "answer_meta": meta, "sample_idx": i,
             "completion": f"\\boxed{{{answer}}}"}
            for i, (pid, gold, problem, answer) in enumerate([
                ("o", "-3,0", ordered, "(b, c) = (-3, 0)"), ("o", "-3,0", ordered, "b=-3, c=0"),
                ("o", "-3,0", ordered, "(0, -3)"), ("o", "-3,0", ordered, "-3"),
                ("u", "1,3", "Determine all values of $x$.", "x \\in \\{3, 1\\}"),
                ("u", "1,3", "Determine all values of $x$.", "x = 3 \\text{ or } x = 1"),
                ("u", "1,3", "Determine all values of $x$.", "1, 3, 5")])]
    assert [r["status"] for r in grade_samples(rows, workers=1, progress=False)] == \
        ["correct", "correct", "incorrect", "incorrect", "correct", "correct", "incorrect"]


def test_subscripted_e_and_i_are_variables():
    # latex2sympy read "\frac{1}{3} E_{1}+\frac{2}{3} E_{2}" as 2/3 and I_{0} as the imaginary unit.
    gold = "\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}"
    rows = [{"problem_id": pid, "gold": g, "completion": f"\\boxed{{{a}}}", "sample_idx": i}
            for i, (pid, g, a) in enumerate([("e", gold, "\\frac{E_1 + 2E_2}{3}"), ("e", gold, "\\frac{2}{3}"),
                                             ("e", gold, "\\frac{1}{3}"), ("i", "I_{0} e^{-t}", "i e^{-t}"),
                                             ("i", "I_{0} e^{-t}", "I_0 e^{-t}")])]
    assert [r["status"] for r in grade_samples(rows, workers=1, progress=False)] == \
        ["correct", "incorrect", "incorrect", "incorrect", "correct"]


def test_relative_tolerance_for_tiny_numbers():
    rows = [{"problem_id": "p", "gold": "2.88e-19", "completion": f"\\boxed{{{a}}}", "sample_idx": i}
            for i, a in enumerate(("5\\times10^{-19}", "2.88\\times 10^{-19}", "0", "-2.2817"))]
    assert [r["status"] for r in grade_samples(rows, workers=1, progress=False)] == \
        ["incorrect", "correct", "incorrect", "incorrect"]


# --- gold fixes at load time ------------------------------------------------------------------

def test_gold_fixes_table_is_well_formed_and_applied():
    fixes = gold_fixes()
    assert fixes
    for (benchmark, problem_id), fix in fixes.items():
        assert set(fix) == {"benchmark", "id", "original", "normalised", "why"} and fix["why"]
    minerva = {p.id: p for p in load_benchmark("minerva", data_dir=DATA)}
    assert minerva["38"].answer == "-\\frac{1}{3}" and minerva["38"].extra["answer_original"] == "-1./3"
    assert minerva["0"].answer == "1.6" and "answer_original" not in minerva["0"].extra


def test_gold_fix_not_applied_when_the_data_changed(tmp_path):
    path = tmp_path / "minerva.jsonl"
    path.write_text(json.dumps({"id": "38", "problem": "p", "answer": "-0.25"}) + "\n")
    assert load_jsonl_benchmark(path, benchmark="minerva")[0].answer == "-0.25"


def test_answer_metadata_is_carried_and_rules_recorded():
    olympiad = load_benchmark("olympiadbench", data_dir=DATA)
    assert olympiad[0].answer_meta["answer_type"] == "Numerical"
    assert load_benchmark("aime24", data_dir=DATA)[0].answer_meta is None
    provenance = grader_provenance(5.0, 1, GradingOptions(rounded_fraction_tolerance=True))
    rules = provenance["grading_rules"]
    assert rules["rules_version"] == answer_norm.RULES_VERSION and rules["effective_rel_tol"] == 1e-4
    assert set(rules["rules"]) == set(answer_norm.RULES)


def test_score_records_the_rounded_fraction_option(tmp_path):
    from dsdr_eval.scoring.score import score_samples

    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"problem_id": "p", "gold": "\\frac{800}{3}", "completion": "\\boxed{266.6667}"}) + "\n")
    strict = score_samples(samples, tmp_path / "a", progress=False, bootstrap=0, workers=1)
    lenient = score_samples(samples, tmp_path / "b", progress=False, bootstrap=0, workers=1,
                            options=GradingOptions(rounded_fraction_tolerance=True))
    rules = [m["provenance"]["grading"]["grading_rules"] for m in (strict, lenient)]
    assert [r["rounded_fraction_tolerance"] for r in rules] == [False, True]
    graded = [json.loads((tmp_path / d / "graded.jsonl").read_text()) for d in ("a", "b")]
    assert [g["correct"] for g in graded] == [False, True]


def test_rules_are_cheap_on_hostile_answers():
    import time

    numeric, listed = prepare_gold("1.3"), prepare_gold("1,3", {"is_multiple_answer": True})
    hostile = ["1 " + "a" * 990 + "!", "1" + " m" * 490 + "!", "1" + " km/s" * 190 + "!", "1" + "{,}000" * 160 + "x",
               "(" * 500 + ")" * 500, "1e" + "1" * 990, "10^" * 300, "\\text{" * 300, "1" + " eV^{2}" * 120 + "?",
               "1 " + "aaaa" * 10 + "!"]
    start = time.process_time()
    for text in hostile:
        prepare_answer(text, numeric)
        prepare_answer(text, listed)
    assert time.process_time() - start < 2.0  # exponential backtracking took 4 s on 43 characters


def test_sample_rows_carry_the_answer_metadata():
    from dsdr_eval.run.generate import PlannedRequest, new_sample
    from dsdr_eval.backends.base import Completion, GenerationRequest
    from dsdr_eval.protocols import Phase

    problem = next(p for p in load_benchmark("olympiadbench", data_dir=DATA) if p.id == "2317")
    planned = PlannedRequest("olympiadbench", problem, Phase("sampling", 1, 0.7, 0.9), 0,
                                    GenerationRequest("prompt", "q", 1, 0.7, 0.9, 8, 5))
    row = new_sample(planned, 0, Completion("\\boxed{0, -3}", "stop", 3, 4, None)).to_json()
    assert row["answer_meta"] == {"answer_type": "Numerical", "is_multiple_answer": True}
    assert grade_samples([row], workers=1, progress=False)[0]["status"] == "incorrect"  # (b, c) reversed
