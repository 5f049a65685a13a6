"""The audit of a graded sample (issue 43): every suspicion a person should look at, named.

A verdict can be right by the rules and still doubtful: the gold is written in the response but the
verdict says incorrect, the answer was a guess of the last number of a response that may have been
cut, the response loops. ``audit_flags`` names each such suspicion of one graded row; graded.jsonl
keeps them (``audit``), metrics.json counts them per benchmark (``audit_counts``), ``dsdr-eval score``
prints the counts and ``dsdr-eval audit RUN`` lists the flagged samples. The flags never change a
verdict. Every check is linear in the text's length and reads at most a bounded window of it where
it can (``str.find`` / ``rfind`` and slice comparisons, no regular expression that can backtrack),
so the audit costs ``score`` little beside grading.

``FLAGS`` (name -> what it means and what to do) is versioned by ``AUDIT_VERSION`` and recorded in
metrics.json -> provenance.grading.audit; docs/evaluate.md "Audit flags" documents each one.
"""

from __future__ import annotations

from typing import Any, Mapping

from dsdr_eval.grading.boxes import last_boxes
from dsdr_eval.grading.extraction import KEY_DROP_RE, ExtractionProfile, answer_key, extract_answer_with_method

AUDIT_VERSION = "1"

GOLD_IN_ANSWER = "gold_in_answer"
UNEXTRACTED_ANSWER = "unextracted_answer"
ANSWER_IN_REASONING = "answer_in_reasoning"
GUESS_UNFINISHED = "guess_unfinished"
FINISH_LENGTH = "finish_length"
SEVERAL_ANSWERS = "several_answers"
REPETITION_LOOP = "repetition_loop"
GRADING_TIMEOUT = "grading_timeout"
GRADING_ERROR = "grading_error"
JUDGE_DISAGREEMENT = "judge_disagreement"

# name -> (what it means, what to do about it); the order is the order of the listing and the counts
FLAGS: dict[str, tuple[str, str]] = {
    GOLD_IN_ANSWER: ("the gold answer is written near the end of the answer part (after the extracted answer, "
                     "when there is one), yet the verdict is incorrect or no answer",
                     "read the end of the answer part: a convention the extraction profile does not read (another "
                     "--extraction), an equivalent form the rules miss (report it), or a right intermediate value "
                     "before a wrong final answer (nothing to do)"),
    UNEXTRACTED_ANSWER: ("the answer part has text but no extraction step of the profile found an answer in it",
                         "look for the answer's markup; if the model marks its answer another way, score again with "
                         "the --extraction profile that reads it"),
    ANSWER_IN_REASONING: ("no answer in the answer part, but the reasoning holds an answer marked as final (a box, "
                          "an answer line or tag)", "the model answered inside its reasoning, or the reasoning "
                          "markers are not the model's: check --reasoning-format"),
    GUESS_UNFINISHED: ("the answer is a guess (the last number or math span) of a response with no answer "
                       "statement and no recorded finish reason: it may be a step of a cut-off derivation",
                       "check the response ends; import the finish reason (--finish-reason-field) so that cut "
                       "responses are graded truncated, or use a profile without guesses"),
    FINISH_LENGTH: ("the response hit its token limit (finish_reason 'length')",
                    "raise the generation budget if many samples carry it; an answer marked as final before the "
                    "cut is graded, anything else is truncated"),
    SEVERAL_ANSWERS: ("the answer part boxes several different final answers; the last one was graded",
                      "read the boxes: a hedge (right if any is) or a multi-part question boxed in parts"),
    REPETITION_LOOP: ("the response ends in a repetition loop (the same text, 3 or more times, over at least "
                      "256 characters)", "a degenerate generation: count it as such; many of them point at the "
                      "sampling settings (temperature, repetition penalty) or the chat template"),
    GRADING_TIMEOUT: ("the answer's grading budget was spent (status timeout: not counted correct)",
                      "score again with a larger --timeout; a timeout on a short answer is worth a report"),
    GRADING_ERROR: ("grading failed (status error: the gold did not parse, or the completion was not text)",
                    "read grade_note; a gold no parser reads belongs in dsdr_eval/data/gold_fixes.jsonl"),
    JUDGE_DISAGREEMENT: ("the LLM judge's verdict differs from the symbolic one (score --judge-grading)",
                         "read both: judge_disagreements.jsonl lists them whole"),
}

GOLD_WINDOW_CHARS = 600  # the end of the answer part searched for the gold: where a final answer is written
LOOP_WINDOW_CHARS = 16384  # the end of a completion searched for a repetition loop
LOOP_MIN_CHARS, LOOP_MIN_REPEATS = 256, 3
_LOOP_NEEDLE_CHARS, _LOOP_CANDIDATES = 32, 8
SEVERAL_BOXES_READ = 8  # the last boxes compared (a response boxing more is read by its last ones)
_GUESSES = frozenset({"last_number", "last_math"})
_NO_ANSWER = frozenset({"incorrect", "no_answer"})


def audit_flags(row: Mapping[str, Any], profile: ExtractionProfile) -> list[str]:
    """The flags (names of ``FLAGS``) of one row ``grade_samples`` graded (its completion, gold, status,
    extracted answer and method, answer span, finish reason and reasoning field), in ``FLAGS`` order."""
    completion = row.get("completion")
    status = row.get("status")
    if not isinstance(completion, str):
        return [GRADING_ERROR] if status == "error" else []
    span = row.get("answer_span") or (0, len(completion))
    answer_part = completion[span[0]:span[1]]
    finish = row.get("finish_reason")
    extracted = row.get("extracted")
    flags = []
    if status in _NO_ANSWER and gold_in_text(str(row.get("gold", "")), _after_answer(answer_part, extracted)):
        flags.append(GOLD_IN_ANSWER)
    if status == "no_answer" and answer_part.strip():
        flags.append(UNEXTRACTED_ANSWER)
    if extracted is None and finish != "length" and status in ("no_answer", "truncated"):
        reasoning = _reasoning_text(row, completion, span)
        if reasoning.strip() and extract_answer_with_method(reasoning, profile, final_only=True).answer is not None:
            flags.append(ANSWER_IN_REASONING)
    if row.get("extraction") in _GUESSES and finish is None:
        flags.append(GUESS_UNFINISHED)
    if finish == "length":
        flags.append(FINISH_LENGTH)
    if several_answers(answer_part):
        flags.append(SEVERAL_ANSWERS)
    if repetition_loop(completion):
        flags.append(REPETITION_LOOP)
    if status == "timeout":
        flags.append(GRADING_TIMEOUT)
    if status == "error":
        flags.append(GRADING_ERROR)
    return flags


def with_judge_flag(flags: "tuple[str, ...] | list[str] | None", verdict: bool | None,
                    correct: bool) -> tuple[str, ...] | None:
    """``flags`` with ``judge_disagreement`` added when the judge's clear verdict differs from ``correct``."""
    if verdict is None or verdict == correct:
        return None if flags is None else tuple(flags)
    return tuple(flag for flag in (flags or ()) if flag != JUDGE_DISAGREEMENT) + (JUDGE_DISAGREEMENT,)


def _after_answer(answer_part: str, extracted: Any) -> str:
    """Where a missed gold would be written: the last ``GOLD_WINDOW_CHARS`` of the answer part, and of
    those only what follows the last occurrence of the extracted answer -- a gold written before the
    answer the model settled on is a step of its derivation (gold 4 in ``2 \\cdot 3 \\cdot 4``), one
    written after it is an answer the extraction did not read (``\\[`` taken for ``\\[\\frac{207}{64}\\]``)."""
    start = max(0, len(answer_part) - GOLD_WINDOW_CHARS)
    if isinstance(extracted, str) and extracted:
        found = answer_part.rfind(extracted, start)
        if found >= 0:
            start = found + len(extracted)
    return answer_part[start:]


def _reasoning_text(row: Mapping[str, Any], completion: str, span: "tuple[int, int] | list[int]") -> str:
    """The reasoning: the sample's own reasoning field, else the completion outside its answer part."""
    reasoning = row.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        return reasoning
    return completion[:span[0]] + "\n" + completion[span[1]:]


# --- the gold in the text -------------------------------------------------------------------------

def gold_in_text(gold: str, text: str) -> bool:
    """Whether ``gold`` is written in ``text`` as a whole token: compared in ``answer_key`` form (no
    spaces, ``$``, ``\\left`` ...), not inside a longer number or name (gold 12 is not in 112, -12,
    12.5 or x12; it is in "is 12" although the key drops the space)."""
    key = answer_key(gold)
    if not key or not text:
        return False
    haystack, origin = keyed(text)
    start = haystack.find(key)
    while start >= 0:
        end = start + len(key)
        glued = start > 0 and origin[start - 1] == origin[start] - 1  # no space or markup dropped between
        if not (_continues(haystack, start - 1, key[0], -1, glued) or _continues(haystack, end, key[-1], 1, True)):
            return True
        start = haystack.find(key, start + 1)
    return False


def keyed(text: str) -> tuple[str, list[int]]:
    """``answer_key(text)`` without its final strip, with the position in ``text`` of each character kept
    (one pass of the key's drop pattern; ``\\dfrac`` / ``\\tfrac`` read as ``\\frac``)."""
    pieces: list[str] = []
    origin: list[int] = []
    position = 0
    for match in KEY_DROP_RE.finditer(text):
        if match.start() > position:
            _keep(text, position, match.start(), pieces, origin)
        position = match.end()
    _keep(text, position, len(text), pieces, origin)
    return "".join(pieces), origin


def _keep(text: str, start: int, end: int, pieces: list[str], origin: list[int]) -> None:
    segment = text[start:end].replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    pieces.append(segment)
    origin.extend(range(start, start + len(segment)))  # after a \dfrac an offset is one off: adjacency only


def _continues(text: str, i: int, edge: str, step: int, glued: bool) -> bool:
    """The character at ``i`` (before the token: ``step`` -1, after it: 1) extends the token whose
    character at that edge is ``edge``: a digit, a decimal point or digit group before a digit, a sign
    before a number, a letter written right before a number (x12, a name; not 12cm after it); a letter
    next to a letter. ``glued``: nothing was dropped between them (a space makes "is 12" two tokens)."""
    if i < 0 or i >= len(text):
        return False
    char = text[i]
    if edge.isdigit():
        if char.isdigit() or (step < 0 and (char == "-" or (char.isalpha() and glued))):
            return True
        beyond = i + step
        return char in ".," and 0 <= beyond < len(text) and text[beyond].isdigit()
    return edge.isalpha() and char.isalpha() and glued


# --- several final answers ------------------------------------------------------------------------

def several_answers(answer_part: str) -> bool:
    """The last ``SEVERAL_BOXES_READ`` boxes of the answer part hold two or more different values
    (compared in ``answer_key`` form, a leading ``name =`` dropped: ``x = 5`` and ``5`` agree)."""
    values = {_box_value(box) for box in last_boxes(answer_part, SEVERAL_BOXES_READ)}
    values.discard("")
    return len(values) > 1


def _box_value(box: str) -> str:
    key = answer_key(box)
    name, equals, value = key.rpartition("=")
    return value if equals and value and name and not any(c.isdigit() for c in name[:1]) else key


# --- repetition loops -----------------------------------------------------------------------------

def repetition_loop(text: str) -> bool:
    """The text ends in the same stretch repeated at least ``LOOP_MIN_REPEATS`` times over at least
    ``LOOP_MIN_CHARS`` characters (the last copy may be cut). Candidate periods are the distances back
    to earlier occurrences of the last ``_LOOP_NEEDLE_CHARS`` characters (in a periodic tail the last
    characters recur one period back); each is checked with one slice comparison: a tail of length L
    has period d iff ``tail[:-d] == tail[d:]``. At most ``_LOOP_CANDIDATES`` rfinds and comparisons
    over the last ``LOOP_WINDOW_CHARS`` characters: linear, never quadratic."""
    end = len(text)
    while end > 0 and text[end - 1].isspace():
        end -= 1
    tail = text[max(0, end - LOOP_WINDOW_CHARS):end]
    n = len(tail)
    if n < LOOP_MIN_CHARS:
        return False
    needle = tail[-_LOOP_NEEDLE_CHARS:]
    position = n - len(needle)
    for _ in range(_LOOP_CANDIDATES):
        position = tail.rfind(needle, 0, position + len(needle) - 1)
        if position < 0:
            return False
        period = n - len(needle) - position
        span = max(LOOP_MIN_CHARS, LOOP_MIN_REPEATS * period)
        if span > n:
            return False  # longer periods need more text than the window holds
        stretch = tail[n - span:]
        if stretch[:-period] == stretch[period:]:
            return True
    return False
