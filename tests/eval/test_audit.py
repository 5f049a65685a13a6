"""Issue 43: the audit of every graded sample (one test per flag, each with a clean twin that must not
raise it), the counts in metrics.json, `score`'s table, `dsdr-eval audit`, and the grader misses fixed
(<boxed> tags, an empty box never falling through, an answer phrase's display math across lines,
renamed arbitrary constants, "x and y" lists). Expected values are written here by hand."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from dsdr_eval import cli
from dsdr_eval.grading import grade_samples
from dsdr_eval.grading.audit import FLAGS, gold_in_text, repetition_loop, several_answers, with_judge_flag
from dsdr_eval.grading.extraction import Extraction, extract_answer_with_method
from dsdr_eval.scoring.judge_grading import judge_graded
from dsdr_eval.rundir.jsonl import read_json, read_jsonl, write_jsonl
from dsdr_eval.rundir.samples import GradedSample, parse_sample

def row(pid, completion, gold="12", **extra):
    return {"benchmark": "tiny", "problem_id": pid, "gold": gold, "completion": completion, **extra}


UNIT = ("We try the next case: the total stays the same, so we check the sum of the parts once more, "
        "and then we add the last two terms again to be sure. ")  # 145 characters

# (flag, a row that raises it, its clean twin that must not): each twin sits just across the flag's rule
CASES = [
    ("gold_in_answer", row("g1", "So the answer is \\boxed{13}. Wait: recounting, there are **12** apples."),
     row("g2", "We get 12 apples in one basket, so the answer is \\boxed{13}.")),  # the gold before the answer
    ("unextracted_answer", row("u1", "Therefore there are twelve of them, which is our result."),
     row("u2", "<think>I cannot decide on twelve.</think>   ")),  # an empty answer part
    ("answer_in_reasoning", row("r1", "<think>So the answer is \\boxed{12}.</think>\n\nI hope this helps."),
     row("r2", "<think>So the answer is \\boxed{12}. Let me verify", finish_reason="length")),  # cut inside it
    ("guess_unfinished", row("f1", "First, 7 + 5 = 12", extraction="flexible"),
     row("f2", "First, 7 + 5 = 12", finish_reason="stop", extraction="flexible")),
    ("finish_length", row("l1", "So far the answer is \\boxed{12}", finish_reason="length"),
     row("l2", "So the answer is \\boxed{12}", finish_reason="stop")),
    ("several_answers", row("s1", "It is \\boxed{11} or maybe \\boxed{12}."),
     row("s2", "We have \\boxed{x = 12}, so the answer is \\boxed{12}.")),
    ("repetition_loop", row("p1", "Start. \\boxed{12} " + UNIT * 3 + UNIT[:40]),
     row("p2", "Start. \\boxed{12} " + UNIT * 2 + UNIT[:40])),  # two copies are not a loop
    ("grading_error", row("e1", "The answer is \\boxed{12}.", gold="}{"),
     row("e2", "The answer is \\boxed{12}.")),
]


def _grade(rows):
    profiles = {}
    for r in rows:  # one grading call per profile (rows name theirs in a private key)
        profiles.setdefault(r.pop("extraction", "boxed"), []).append(r)
    out = {}
    for profile, members in profiles.items():
        for graded in grade_samples(members, workers=1, progress=False, extraction=profile):
            out[graded["problem_id"]] = graded
    return out


@pytest.fixture(scope="module")
def audited():
    return _grade([dict(r) for _, flagged, clean in CASES for r in (flagged, clean)])


@pytest.mark.parametrize("flag,flagged,clean", CASES, ids=[c[0] for c in CASES])
def test_each_flag_is_raised_and_its_clean_twin_is_not(audited, flag, flagged, clean):
    assert flag in audited[flagged["problem_id"]]["audit"], audited[flagged["problem_id"]]
    assert flag not in audited[clean["problem_id"]]["audit"], audited[clean["problem_id"]]


def test_every_flag_is_documented_with_what_to_do():
    docs = (cli.__file__.rsplit("/dsdr_eval/", 1)[0] + "/docs/evaluate.md")
    text = open(docs, encoding="utf-8").read()
    for flag, (meaning, action) in FLAGS.items():
        assert f"`{flag}`" in text, flag
        assert meaning and action


def test_timeout_flag_and_judge_disagreement():
    # whether a given answer times out depends on the machine: the rule is checked on a graded row
    from dsdr_eval.grading.audit import audit_flags
    from dsdr_eval.grading.extraction import get_profile
    timed_out = {"completion": "\\boxed{x}", "gold": "1", "status": "timeout", "extracted": "x",
                 "extraction": "boxed", "answer_span": [0, 9]}
    assert audit_flags(timed_out, get_profile("boxed")) == ["grading_timeout"]
    assert audit_flags({**timed_out, "status": "correct"}, get_profile("boxed")) == []
    assert with_judge_flag((), True, False) == ("judge_disagreement",)
    assert with_judge_flag(("finish_length",), False, True) == ("finish_length", "judge_disagreement")
    assert with_judge_flag(("finish_length",), True, True) == ("finish_length",)
    assert with_judge_flag(None, None, True) is None


def test_judge_graded_adds_the_disagreement_flag():
    sample, _ = parse_sample({"problem_id": "1", "gold": "5", "completion": "\\boxed{6}"}, "x")
    record = GradedSample(sample, "incorrect", False, 0, extracted="6", extraction="boxed", audit=())
    agree = GradedSample(sample, "correct", True, 0, extracted="5", extraction="boxed", audit=())

    class Judge:
        client = SimpleNamespace(config=SimpleNamespace(model="m"))

        def judge(self, questions):
            return [SimpleNamespace(verdict=True, note="equivalent") for _ in questions]

    out = judge_graded([record, agree], Judge(), "all")
    assert out[0].audit == ("judge_disagreement",) and out[1].audit == ()


def test_gold_in_text_needs_a_whole_token():
    assert gold_in_text("12", "so it is 12.")
    assert gold_in_text("\\frac{207}{64}", "is: \\[ \\frac{207}{64} \\]")
    for text in ("it is 112", "it is 12.5", "it is -12", "x12", "it is 1,2"):
        assert not gold_in_text("12", text), text
    assert not gold_in_text("x", "max") and gold_in_text("x", "so x.")


def test_several_answers_compares_values_not_spellings():
    assert not several_answers("\\boxed{x = 3} so \\boxed{3}")
    assert not several_answers("\\boxed{\\dfrac{1}{2}} and $\\boxed{\\frac{1}{2}}$")
    assert several_answers("<boxed>3</boxed> then \\boxed{4}")


def test_repetition_loop_is_linear_and_exact():
    assert repetition_loop("intro " + "ab c" * 100)
    assert repetition_loop("x" * 300)
    assert not repetition_loop("x" * 200)  # under LOOP_MIN_CHARS
    assert not repetition_loop("".join(f"step {i}: {i * i}\n" for i in range(400)))
    started = time.perf_counter()
    for hostile in ("a" * 2_000_000, ("ab" * 37 + "c") * 30_000, "\\boxed{" * 100_000):
        repetition_loop(hostile)
    assert time.perf_counter() - started < 2.0


# --- the misses fixed ----------------------------------------------------------------------------

@pytest.mark.parametrize("profile,text,answer,method", [
    ("boxed", "</think>\n\nThe answer is <boxed>204_5</boxed>", "204_5", "boxed_tag"),
    ("boxed", "so <boxed>p - q</boxed>.", "p - q", "boxed_tag"),
    ("boxed", "\\boxed{3} first, then <boxed>4</boxed>", "4", "boxed_tag"),
    ("boxed", "<boxed>4</boxed> first, then \\boxed{3}", "3", "boxed"),
    ("flexible", "<boxed></boxed> 2+3=5", None, None),
    ("flexible", "2+3=5. The answer is within \\boxed{}.", None, None),
    ("tool-output", "2+3=5. The answer is within \\boxed{}.\n```output\n5\n```", None, None),
    ("flexible", "2+3=5. The answer is 5.", "5", "answer_is"),
    ("gsm8k", "2+3=5. The answer is within \\boxed{}.", "5", "last_number"),  # lm-eval's convention reads no box
    ("boxed", "Thus the answer is: \\[\n\\frac{207}{64}\n\\]", "\\frac{207}{64}", "answer_is"),
    ("boxed", "Thus the answer is:\n\n$$\n\\frac{207}{64}\n$$\nDone.", "\\frac{207}{64}", "answer_is"),
    ("boxed", "Final answer:\n\\[\n 7\n\\]", "7", "answer_line"),
    ("boxed", "The final answer is:\nWe have five apples.", None, None),
])
def test_extraction_misses_fixed(profile, text, answer, method):
    assert extract_answer_with_method(text, profile) == Extraction(answer, method)


GENERAL = "Find the general solution of $x'' + 4x = \\sin(3t)$."
GOLD_ODE = "-\\sin(3t)/5 + C_1\\sin 2t + C_2\\cos 2t"
# (gold, problem, answer, correct)
CONSTANTS = [
    (GOLD_ODE, GENERAL, "C_1\\cos 2t + C_2\\sin 2t - \\frac15\\sin 3t", True),
    (GOLD_ODE, GENERAL, "A\\cos 2t + B\\sin 2t - \\frac{\\sin 3t}{5}", True),
    (GOLD_ODE, None, "C_2\\cos 2t + C_1\\sin 2t - \\frac15\\sin 3t", True),
    (GOLD_ODE, GENERAL, "C_1\\cos 2t + C_2\\sin 2t + \\frac15\\sin 3t", False),
    (GOLD_ODE, GENERAL, "C_1\\cos 2t + C_1\\sin 2t - \\frac15\\sin 3t", False),
    (GOLD_ODE, GENERAL, "C_1\\cos 2t - \\frac15\\sin 3t", False),
    (GOLD_ODE, GENERAL, "C_1\\cos 3t + C_2\\sin 2t - \\frac15\\sin 3t", False),
    ("x/2 - 1/4 + c e^{-2x}", "Find the general solution of $y'+2y=x$.", "x/2 - 1/4 + K e^{-2x}", True),
    ("x/2 - 1/4 + c e^{-2x}", "Find the general solution of $y'+2y=x$.", "x/2 - 1/4 + K e^{2x}", False),
    # given quantities are never renamed: no general solution asked, the question names them, or no function
    ("C_1 - C_2", "Find the general solution with capacitors $C_1$ and $C_2$.", "C_2 - C_1", False),
    ("C_1 e^{t} - C_2", "Find $V(t)$ for the capacitors.", "C_2 e^{t} - C_1", False),
    ("C_1 - C_2", None, "C_2 - C_1", False),
    ("a e^{t} - b", "Find the general solution; $a$ and $b$ are given.", "b e^{t} - a", False),
]


def test_renamed_arbitrary_constants():
    rows = [{"problem_id": str(i), "gold": g, "problem": p, "completion": f"\\boxed{{{a}}}"}
            for i, (g, p, a, _) in enumerate(CONSTANTS)]
    graded = grade_samples(rows, workers=1, progress=False, grading_timeout_s=20)
    assert [r["correct"] for r in graded] == [c[3] for c in CONSTANTS], [(r["status"], r["completion"]) for r in graded]


LIST_QUESTION = "Find all real solutions of $(x-1)(x+2)=0$."
ORDERED = "Find the values of $b$ and $c$."
LISTS = [  # (gold, problem, answer, correct)
    ("1,-2", LIST_QUESTION, "-2 \\text{, and } 1", True),
    ("1,-2", LIST_QUESTION, "both 1 and -2", True),
    ("1,-2", LIST_QUESTION, "\\text{both } -2 \\text{ and } 1", True),
    ("1,-2", LIST_QUESTION, "1 \\& -2", True),
    ("1,-2", LIST_QUESTION, "1 \\\\ -2", True),
    ("1,-2", LIST_QUESTION, "1 \\text{ and } 3", False),
    ("-3,0", ORDERED, "-3 \\text{, and } 0", True),
    ("-3,0", ORDERED, "0 \\text{, and } -3", False),
    ("-3,0", ORDERED, "both 0 and -3", False),
    ("-3,0", ORDERED, "0 \\& -3", False),
]


def test_and_lists_read_as_lists_and_ordered_never_swapped():
    rows = [{"problem_id": str(i), "gold": g, "problem": p, "completion": f"\\boxed{{{a}}}"}
            for i, (g, p, a, _) in enumerate(LISTS)]
    graded = grade_samples(rows, workers=1, progress=False)
    assert [r["correct"] for r in graded] == [c[3] for c in LISTS], [(r["status"], r["completion"]) for r in graded]


# --- recorded, counted, printed, listed ------------------------------------------------------------

def test_metrics_count_score_prints_and_audit_lists(tmp_path, capsys):
    rows = [dict(r, sample_idx=0) for _, flagged, clean in CASES for r in (flagged, clean)]
    for r in rows:
        r.pop("extraction", None)
    write_jsonl(tmp_path / "samples.jsonl", rows)
    assert cli.main(["score", str(tmp_path / "samples.jsonl"), "--out", str(tmp_path / "run"), "--workers", "1",
                     "--bootstrap", "0", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    graded = read_jsonl(tmp_path / "run" / "graded.jsonl")
    metrics = read_json(tmp_path / "run" / "metrics.json")
    expected = {flag: sum(flag in r["audit"] for r in graded) for flag in FLAGS}
    assert metrics["benchmarks"]["tiny"]["audit_counts"] == expected
    assert metrics["benchmarks"]["tiny"]["audit_flagged"] == sum(bool(r["audit"]) for r in graded)
    # under the default profile f1 / f2 ("7 + 5 = 12", no box) have no answer and end with the gold
    assert {r["problem_id"] for r in graded if "gold_in_answer" in r["audit"]} == {"g1", "f1", "f2"}
    assert expected["repetition_loop"] == 1
    provenance = metrics["provenance"]["grading"]["audit"]
    assert set(provenance["flags"]) == set(FLAGS) and provenance["audit_version"]
    assert "audit: samples a person should look at" in printed and "repetition_loop" in printed

    assert cli.main(["audit", str(tmp_path / "run"), "--flag", "repetition_loop"]) == 0
    listing = capsys.readouterr().out
    assert "[repetition_loop]" in listing and "problem p1 " in listing and "1 samples raising repetition_loop" in listing
    import dsdr_eval
    entries = dsdr_eval.audit(str(tmp_path / "run"), flag="gold_in_answer")
    assert [e["key"][2] for e in entries] == [r["problem_id"] for r in graded if "gold_in_answer" in r["audit"]]
    assert all(e["gold"] == "12" and "answer_end" in e for e in entries)
    assert cli.main(["audit", str(tmp_path / "run"), "--flag", "no_such_flag"]) == 2


def test_a_graded_file_without_audit_still_reads(tmp_path):
    rows = [row("x", "\\boxed{12}")]
    graded = grade_samples(rows, workers=1, progress=False)
    line = {k: v for k, v in graded[0].items() if k != "audit"}
    (tmp_path / "graded.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    from dsdr_eval.rundir.samples import iter_records, parse_graded
    assert next(iter_records(tmp_path / "graded.jsonl", parse_graded)).audit is None


def test_real_excerpts_flag_the_known_misses_and_nothing_on_clean_samples(tmp_path):
    """The committed Qwen2.5-Math math_eval.py excerpts (tests/eval/real_files/PROVENANCE.md): Minerva idx
    224 states "36 milliliters" unboxed and `flexible` takes a math span of its last line (a known miss:
    the gold after the guess), idx 119 only repeats the question (its last math span is a guess); idx 71
    boxes a right answer. Sky-T1's idx 10 and 41 are cut inside their thought: truncated, no final answer
    in the reasoning to point at. The files record no finish reason."""
    real = cli.__file__.rsplit("/dsdr_eval/", 1)[0] + "/tests/eval/real_files"
    expected = {
        "qwen25-math-7b/minerva_math/test_qwen25-math-cot_-1_seed0_t0.0_s0_e-1.jsonl":
            {"71": [], "119": ["guess_unfinished"], "224": ["gold_in_answer", "guess_unfinished"]},
        "sky-t1-27b/amc23/test_Sky-T1_-1_seed0_t0.0_s0_e-1.jsonl": {"1": [], "3": [], "10": [], "27": [], "41": []},
    }
    for i, (name, flags) in enumerate(expected.items()):
        run = tmp_path / f"run{i}"
        assert cli.main(["import", f"{real}/{name}", "--out", str(run)]) == 0
        assert cli.main(["score", str(run), "--workers", "1", "--bootstrap", "0", "--no-progress"]) == 0
        graded = {r["problem_id"]: r["audit"] for r in read_jsonl(run / "graded.jsonl")}
        assert graded == flags, name
