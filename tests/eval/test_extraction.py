"""Extraction is linear on hostile text (1 MB inputs of several families) and unchanged on
normal text (a differential check against the previous regex implementation)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dsdr_eval.grading.extraction import _first_inline_math
from dsdr_eval.grading import extract_answer_with_method

MB = 1_000_000
CPU_BOUND_S = 1.5  # per 1 MB input; linear code needs ~0.1 s, the grading timeout is 5 s

# Each family: a name and a Python expression for a ~1 MB text (evaluated in the child).
FAMILIES = {
    "answer_spaces": "'Answer' + ' ' * MB + 'x'",
    "answer_newlines": "'Answer' + '\\n' * MB + 'x'",
    "answer_tabs_spaces": "'**Answer**' + ' \\t' * (MB // 2) + 'x'",
    "final_answer_spaces": "'final answer' + ' ' * MB + 'x'",
    "final_spaces": "'final' + ' ' * MB + 'x'",
    "the_answer_spaces": "'the answer' + ' ' * MB + 'x'",
    "answer_is_spaces": "'The final answer is' + ' ' * MB",
    "answer_bold_runs": "'Answer' + ' **' * (MB // 3)",
    "many_answer_words": "'answer ' * (MB // 7)",
    "many_answer_spaced_lines": "('Answer' + ' ' * 999 + '\\n') * (MB // 1000)",
    "empty_answer_lines": "('Answer: ' + '*' * 3990 + '\\n') * (MB // 4000)",
    "unicode_spaces": "'Answer' + '\\u3000\\u00a0\\u2009' * (MB // 3) + '：'",
    "unicode_mixed": "('答案 Answer：\\u2003' + '∑é😀' * 50 + '\\n') * (MB // 170)",
    "unclosed_math_parens": "('Answer: ' + '\\\\(' * 1995 + '$ $\\n') * (MB // 4000)",
    "unclosed_math_dollars": "'Answer: ' + '$$' * (MB // 2)",
    "unclosed_math_brackets": "('The answer is ' + '\\\\[' * 1990 + '\\n') * (MB // 4000)",
    "unclosed_boxes": "'\\\\boxed{' * (MB // 7) + 'x'",
    "unclosed_fbox_spaces": "'\\\\fbox  {' * (MB // 8)",
    "nested_braces": "'\\\\boxed{' + '{' * 100_000 + 'x' + '}' * 100_000 + '}' + ' pad' * 200_000",
    "nested_unclosed": "'\\\\boxed{' + '{' * MB",
    "nested_boxes": "'\\\\boxed{' * 125_000 + '}' * 125_000",
    "box_prefixes": "'\\\\boxed' * (MB // 6)",
    "bare_boxes": "'\\\\boxed ' * (MB // 7)",
    "empty_boxes": "'\\\\boxed{ }' * (MB // 9)",
    "box_then_spaces": "'\\\\boxed' + ' ' * MB",
    "backslash_flood": "'\\\\' * MB",
    "backslash_box_flood": "'\\\\boxed{' + '\\\\' * MB",
    "escaped_braces": "'\\\\boxed{' + '\\\\{' * (MB // 2)",
}

_CHILD = """
import json, sys, time
from dsdr_eval.grading import extract_answer
MB = %d
out = {}
for name, expr in json.loads(sys.argv[1]).items():
    text = eval(expr)
    start = time.process_time()
    extract_answer(text)
    out[name] = (round(time.process_time() - start, 3), len(text))
    print(json.dumps(out), flush=True)
"""


def test_extraction_is_linear_on_1mb_adversarial_inputs():
    """CPU time (not wall time: the machine is shared) of extraction on each family. Quadratic
    code needs minutes to hours per family; the child is stopped long before that."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD % MB, json.dumps(FAMILIES)], env=env,
                              capture_output=True, text=True, timeout=180)
        lines = proc.stdout.strip().splitlines()
    except subprocess.TimeoutExpired as stopped:
        lines = (stopped.stdout or b"").decode().strip().splitlines()
    measured = json.loads(lines[-1]) if lines else {}
    missing = [name for name in FAMILIES if name not in measured]
    assert not missing, f"extraction did not finish (quadratic?) from family {missing[0]!r}; done: {measured}"
    for name, (cpu_s, length) in measured.items():
        assert length >= 0.9 * MB, name
        assert cpu_s < CPU_BOUND_S, f"{name}: {cpu_s:.2f} s CPU for {length} characters"


# --- the previous implementation, as an oracle on short inputs (quadratic on long ones) ------

_REF_ANSWER_LINE_RE = re.compile(
    r"(?im)(?:^|[\s*_#(])(?:final\s+answer|answer)\s*(?:\*\*|__)?\s*[:：]\s*(?:\*\*|__)?[ \t]*([^\n]*)")
_REF_ANSWER_IS_RE = re.compile(r"(?i)(?:final\s+answer|the\s+answer)\s+is\s*[:：]?[ \t]*([^\n]*)")
_REF_INLINE_MATH_RE = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]")


def _reference_spanning(text: str, start: int, tail: str):
    """Extraction rules 4 (issue 43): a tail that is empty, or opens a math span it does not close on its
    line, reads the span that starts the text after the phrase across lines; None otherwise."""
    stripped = tail.strip()
    opens_unclosed = (stripped[:1] == "$" or stripped[:2] in ("\\[", "\\(")) and not _REF_INLINE_MATH_RE.search(tail)
    if stripped and not opens_unclosed:
        return None
    window = text[start:start + 4000]
    at = len(window) - len(window.lstrip())
    for opening, closing in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if window[at:at + len(opening)] == opening:
            close = window.find(closing, at + len(opening) + 1)
            answer = window[at + len(opening):close].strip().rstrip(".,;").strip() if close >= 0 else ""
            return answer if answer and "\\boxed" not in answer and "\\fbox" not in answer else None
    return None


def _reference_answer_line(text: str):
    candidates = [(m.start(), "answer_line", m.group(1), m.start(1)) for m in _REF_ANSWER_LINE_RE.finditer(text)]
    candidates += [(m.start(), "answer_is", m.group(1), m.start(1)) for m in _REF_ANSWER_IS_RE.finditer(text)]
    for _, method, tail, tail_start in sorted(candidates, reverse=True):
        tail = tail[:4000]
        spanning = _reference_spanning(text, tail_start, tail)
        if spanning is not None:
            return spanning, method
        span = _REF_INLINE_MATH_RE.search(tail)
        if span:
            answer = next(group for group in span.groups() if group is not None)
        else:
            answer = re.split(r"\.\s|\.$", tail, maxsplit=1)[0]
        answer = answer.strip().strip("*_").strip().rstrip(".").strip()
        if answer:
            return answer, method
    return None, None


_TOKENS = ["Answer", "answer", "ANSWER", "final", "Final answer", "the", "The answer", " is", "is", ":", "：",
           " ", "  ", "\t", "\n", "\n\n", "**", "__", "*", "_", "#", "(", "$", "$$", "\\(", "\\)", "\\[", "\\]",
           ".", ". ", "5", "x^2", "\\frac{1}{2}", "42", "abc", "\u3000", "é", "I hope it is correct"]


@pytest.mark.parametrize("seed", range(4))
def test_answer_line_extraction_matches_previous_regexes_on_short_text(seed):
    rng = random.Random(seed)
    for _ in range(3000):
        text = "".join(rng.choice(_TOKENS) for _ in range(rng.randint(1, 24)))
        result = extract_answer_with_method(text)
        if result.method in ("boxed", "fbox"):
            continue
        assert (result.answer, result.method) == _reference_answer_line(text), repr(text)


@pytest.mark.parametrize("seed", range(2))
def test_inline_math_scanner_matches_the_lazy_regex(seed):
    rng = random.Random(seed)
    pieces = ["$", "$$", "\\(", "\\)", "\\[", "\\]", "\\", "x", " ", "(", ")", "[", "]", "1"]
    for _ in range(20000):
        line = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        span = _REF_INLINE_MATH_RE.search(line)
        expected = next(group for group in span.groups() if group is not None) if span else None
        assert _first_inline_math(line) == expected, repr(line)
