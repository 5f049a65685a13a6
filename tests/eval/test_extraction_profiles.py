"""Extraction profiles (issue 21): each answer convention read by its profile, the default `boxed`
unchanged, every profile linear on hostile text, extraction memory bounded (issue 24), and the
profile chosen, recorded and warned about by `run` / `score`."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from dsdr_eval.errors import DsdrError
from dsdr_eval.grading.extraction import (DEFAULT_EXTRACTION, EXTRACTION_PROFILES, EXTRACTORS, Extraction, choose_extraction,
                                  extending_profile, extract_answer, extract_answer_with_method, get_profile)

REPO = Path(__file__).resolve().parents[2]

# A GSM8K completion in the dataset's own answer format (the 8-shot prompt of lm-eval's gsm8k task
# asks for it): calculator annotations, then "#### N".
GSM8K_COMPLETION = ("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
                    "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer's market.\n#### 18")
R1_COMPLETION = "<think>\nLet me add: 1 + 2 = 3. Maybe the answer is 4? No.\n</think>\n<answer>3</answer>"
MINERVA_COMPLETION = ("We have $x = \\frac{1}{2}$ and so $\\boxed{2x}$ is the double.\n"
                      "Final Answer: The final answer is $\\frac{1}{4}$. I hope it is correct.")
# ToRA-70B's GSM8K completion idx 98 (tests/eval/real_files), its end: the prose's last number is not the output
TORA_COMPLETION = ("rough_first_half = cars_through_jam()\nprint(cars_through_first_half)\n```\n```output\n5\n```\n"
                   "5 cars drove through the traffic jam in the first 15 minutes.")


@pytest.mark.parametrize("profile, text, answer, method", [
    # boxed (default): the papers' rules, unchanged
    ("boxed", "so \\boxed{5} and then \\boxed 7", "7", "boxed"),
    ("boxed", "The answer is $\\frac{1}{2}$. Done", "\\frac{1}{2}", "answer_is"),
    ("boxed", GSM8K_COMPLETION, None, None),
    ("boxed", R1_COMPLETION, "4? No", "answer_is"),  # the boxed profile does not read tags
    # gsm8k: '#### N', then the last number (thousands commas and a currency sign dropped)
    ("gsm8k", GSM8K_COMPLETION, "18", "gsm8k"),
    ("gsm8k", "so she pays $1,230.50 in total.\n#### $1,230.50", "1230.50", "gsm8k"),
    ("gsm8k", "She has 5 apples and eats 2, so 3 are left.", "3", "last_number"),
    ("gsm8k", "The loss is -12 dollars", "-12", "last_number"),
    ("gsm8k", "no digits here", None, None),
    # answer-tag: the last non-empty <answer> tag; a box or 'answer is' inside it is unwrapped
    ("answer-tag", R1_COMPLETION, "3", "answer_tag"),
    ("answer-tag", "<answer>1</answer> then <answer> \\boxed{7} </answer>", "7", "answer_tag"),
    ("answer-tag", "<answer>2</answer><answer>  </answer>", "2", "answer_tag"),
    ("answer-tag", "<answer>The answer is 12.</answer>", "12", "answer_tag"),
    ("answer-tag", "\\boxed{5} <answer>unclosed", None, None),
    # minerva: 'Final Answer: The final answer is X. I hope it is correct.' before any box
    ("minerva", MINERVA_COMPLETION, "$\\frac{1}{4}$", "minerva"),
    ("minerva", "The final answer is 3.5. I hope it is correct.", "3.5", "minerva"),
    ("minerva", "so \\boxed{9}", "9", "boxed"),
    # flexible: tag, box, answer line, ####, last math of the last line, last number
    ("flexible", R1_COMPLETION, "3", "answer_tag"),
    ("flexible", GSM8K_COMPLETION, "18", "gsm8k"),
    ("flexible", "So the probability is $\\frac{1}{4}$.", "\\frac{1}{4}", "last_math"),
    ("flexible", "Thus 60% of the students.", "60%", "last_number"),
    ("flexible", "We get $x=2$ and $y = 3$.\n\n", "y = 3", "last_math"),
    ("flexible", "nothing at all", None, None),
    # tool-output (ToRA's extract_answer): box, 'answer is', first line of the last ```output block, last number
    ("tool-output", TORA_COMPLETION, "5", "program_output"),
    ("tool-output", TORA_COMPLETION + "\nSo \\boxed{6}.", "6", "boxed"),
    ("tool-output", TORA_COMPLETION + "\nThe answer is 7.", "7", "answer_is"),
    ("tool-output", "```output\n1\n```\nthen\n```output\n 2.0\n3\n```\nSo 9 cars.", "2.0", "program_output"),
    ("tool-output", "print(x)\n```\n```output\n4", "4", "program_output"),  # unclosed: to the end
    ("tool-output", "```output\n  \n```\nSo 9 cars.", "9", "last_number"),  # empty output: the last number
    ("tool-output", "There are 9 cars.", "9", "last_number"),
    ("tool-output", "So the probability is $\\frac{1}{4}$.", "\\frac{1}{4}", "last_math"),  # flexible's steps
    ("program-output", TORA_COMPLETION, "5", "program_output"),
    ("program-output", "\\boxed{5} and 7", None, None),
    ("flexible", TORA_COMPLETION, "15", "last_number"),  # what the flexible profile read (ToRA-70B idx 98)
])
def test_each_convention_is_read_by_its_profile(profile, text, answer, method):
    assert extract_answer_with_method(text, profile) == Extraction(answer, method)


def test_profiles_are_documented_and_use_known_extractors():
    assert DEFAULT_EXTRACTION == "boxed" and set(EXTRACTION_PROFILES) == {"boxed", "minerva", "gsm8k", "answer-tag",
                                                                          "flexible", "tool-output",
                                                                          "program-output"}
    for name, profile in EXTRACTION_PROFILES.items():
        assert profile.name == name and profile.description and profile.extractors
        assert set(profile.extractors) <= set(EXTRACTORS)
    assert extract_answer("\\boxed{2}") == "2" and extract_answer("#### 2", "gsm8k") == "2"
    with pytest.raises(DsdrError, match="unknown extraction profile 'nope'.*known: boxed"):
        get_profile("nope")


def test_extending_profile_reads_each_profile_alike_only_with_block_only_steps():
    assert extending_profile(["flexible", "tool-output"]) == "tool-output"
    assert extending_profile(["program-output", "tool-output"]) is None  # program-output finds no box
    assert extending_profile(["boxed", "tool-output"]) is None and extending_profile(["gsm8k", "flexible"]) is None
    assert extending_profile(["boxed"]) == "boxed"
    # without a ```output block tool-output reads what flexible reads (sample of every flexible case above)
    for text in (R1_COMPLETION, GSM8K_COMPLETION, MINERVA_COMPLETION, "Thus 60% of the students.", "We get $x=2$."):
        assert extract_answer(text, "tool-output") == extract_answer(text, "flexible")


def test_choose_extraction_override_tasks_then_protocol():
    assert choose_extraction(None, "boxed", {"a": None, "b": None}) == "boxed"
    assert choose_extraction(None, "boxed", {"a": "gsm8k"}) == "gsm8k"
    assert choose_extraction("flexible", "boxed", {"a": "gsm8k", "b": None}) == "flexible"
    with pytest.raises(DsdrError, match=r"a \(gsm8k\), b \(boxed\).*--extraction"):
        choose_extraction(None, "boxed", {"a": "gsm8k", "b": None})


# --- the box pass: the same answers as the previous implementation, in O(1) memory ---------------

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BRACE_TOKEN_RE = re.compile(r"\\[\\{}]|[{}]")


def _reference_last_boxed(text):
    """The previous implementation (a partner table of every brace), as an oracle."""
    starts = list(_BOX_RE.finditer(text))
    if not starts:
        return None
    partner, stack = {}, []
    for token in _BRACE_TOKEN_RE.finditer(text, starts[0].end()):
        if token.group() == "{":
            stack.append(token.start())
        elif token.group() == "}" and stack:
            partner[stack.pop()] = token.start()
    for match in reversed(starts):
        method = "fbox" if match.group().endswith("fbox") else "boxed"
        pos = match.end()
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos < len(text) and text[pos] == "{":
            close = partner.get(pos)
            if close is not None and text[pos + 1:close].strip():
                return Extraction(text[pos + 1:close].strip(), method)
        elif pos > match.end():
            token = re.compile(r"[^\s$]{1,1001}").match(text, pos)
            if token:
                return Extraction(token.group(), method)
    return None


_BOX_TOKENS = ["\\boxed", "\\fbox", "\\boxed ", "{", "}", "{ }", "\\{", "\\}", "\\\\", " ", "\t", "\n", "x", "12",
               "$", "\\frac", "a b", "\\boxedx"]


@pytest.mark.parametrize("seed", range(4))
def test_box_pass_matches_the_previous_implementation(seed):
    rng = random.Random(seed)
    for _ in range(4000):
        text = "".join(rng.choice(_BOX_TOKENS) for _ in range(rng.randint(1, 20)))
        assert EXTRACTORS["boxed"](text) == _reference_last_boxed(text), repr(text)


@pytest.mark.parametrize("text, answer", [
    ("\\boxed{a\\boxed{ }}", "a\\boxed{ }"),  # the inner box is empty: the outer one wins
    ("\\boxed{\\boxed{1}\\boxed{2}}", "2"),
    ("\\boxed{1} \\boxed{\\boxed{2}", "2"),  # the unclosed outer box never wins
    ("\\boxed{ \\boxed{ } } \\boxed{", "\\boxed{ }"),
])
def test_nested_boxes(text, answer):
    assert extract_answer(text) == answer == _reference_last_boxed(text).answer


# Hostile inputs whose answer is short or absent: what extraction holds is then its own state.
MEMORY_FAMILIES = {
    "nested_unclosed": lambda n: "\\boxed{" + "{" * n,
    "unclosed_boxes": lambda n: "\\boxed{" * (n // 7),
    "box_prefixes": lambda n: "\\boxed" * (n // 6),
    "brace_pairs_after_a_box": lambda n: "\\boxed{x}" + "{}" * (n // 2),
    "empty_answer_lines": lambda n: "Answer: *\n" * (n // 10),
    "empty_answer_is_lines": lambda n: "the answer is *\n" * (n // 16),
    "number_runs": lambda n: "1, " * (n // 3),
    "answer_tags": lambda n: "<answer></answer>" * (n // 17),
    "output_blocks": lambda n: "```output\n```" * (n // 13),
    "long_output_block": lambda n: "print(x)\n```output\n" + " " * n + "x" * n,
}


@pytest.mark.parametrize("family", list(MEMORY_FAMILIES))
def test_extraction_memory_is_bounded(family):
    """Issue 24: extraction held 21-51 bytes per input byte (a 20 MB completion: ~1 GB). Peak
    allocation, every profile, on 100 kB of hostile text: under 0.5 bytes per input byte."""
    text = MEMORY_FAMILIES[family](100_000)
    for profile in EXTRACTION_PROFILES:
        tracemalloc.start()
        try:
            extract_answer_with_method(text, profile)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 0.5 * len(text), f"{family}/{profile}: {peak / len(text):.2f} bytes per input byte"


_CHILD = """
import json, sys, time
from dsdr_eval.grading.extraction import extract_answer, EXTRACTION_PROFILES
MB = %d
out = {}
for name, expr in json.loads(sys.argv[1]).items():
    text = eval(expr)
    for profile in EXTRACTION_PROFILES:
        start = time.process_time()
        extract_answer(text, profile)
        out[name + '/' + profile] = round(time.process_time() - start, 3)
    print(json.dumps(out), flush=True)
"""

# The new extractors' keywords and delimiters, repeated (the box / answer-line families are in
# test_extraction.py; here every profile runs them too).
HOSTILE = {
    "hashes": "'#' * MB", "hash_marks": "'#### ' * (MB // 5)", "hash_then_spaces": "'####' + ' ' * MB",
    "open_tags": "'<answer>' * (MB // 8)", "close_tags": "'</answer>' * (MB // 9)",
    "tag_pairs_empty": "'<answer> </answer>' * (MB // 18)", "digits": "'1' * MB", "digit_groups": "'1,' * (MB // 2)",
    "minus_dots": "'-.' * (MB // 2)", "dollars_last_line": "'$' * MB", "parens_last_line": "'\\\\(' * (MB // 2)",
    "final_answer_is": "'final answer is ' * (MB // 16)", "hope_lines": "'The final answer is ' + ' ' * MB",
    "unclosed_boxes": "'\\\\boxed{' * (MB // 7)", "answer_spaces": "'Answer' + ' ' * MB + 'x'",
    "trailing_spaces": "'x' + ' ' * MB",
    "output_fences": "'```output' * (MB // 9)", "output_spaces": "'```output' + ' ' * MB + 'x'",
    "output_blocks": "'```output\\n```' * (MB // 13)",
}


def test_every_profile_is_linear_on_hostile_text():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD % 1_000_000, json.dumps(HOSTILE)], env=env,
                              capture_output=True, text=True, timeout=300)
        lines = proc.stdout.strip().splitlines()
    except subprocess.TimeoutExpired as stopped:
        lines = (stopped.stdout or b"").decode().strip().splitlines()
    measured = json.loads(lines[-1]) if lines else {}
    expected = [f"{name}/{profile}" for name in HOSTILE for profile in EXTRACTION_PROFILES]
    missing = [key for key in expected if key not in measured]
    assert not missing, f"extraction did not finish (quadratic?) from {missing[0]!r}; done: {measured}"
    slow = {key: seconds for key, seconds in measured.items() if seconds >= 1.5}
    assert not slow, slow
