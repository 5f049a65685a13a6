"""Final-answer extraction from a completion, in linear time and bounded memory on any input.

The same code grades evaluation samples (``dsdr-eval score``) and computes RL rewards, in the
parent process where no grading deadline can stop it, so every path is linear in the length of
the completion -- a hostile or degenerate output (1 MB of whitespace after "Answer", 10^5
unclosed ``\\boxed{``) costs milliseconds, never minutes -- and holds O(1) memory beside the
text and the answer it returns (a 20 MB completion must not cost a gigabyte):

* boxes: one regex pass for ``\\boxed``/``\\fbox`` merged with one pass over the braces that keeps
  a depth counter and at most two open boxes (an open box that already holds a ``\\boxed`` can
  never lose to an older one, see ``boxes._last_command_box``), never a table of every brace; ``<boxed>`` tags
  by ``rfind`` steps over disjoint stretches;
* answer lines: regexes in which no quantified run can be re-scanned (``_atomic``), so a failed
  match costs the length of the whitespace after its keyword, once; matches are consumed as they
  come (the best so far is kept), never collected;
* the inline-math span of an answer line: one ``str.find`` per delimiter kind (the equivalent
  lazy regex re-scans the rest of the line from every unclosed opening).

Extraction profiles (``EXTRACTION_PROFILES``, chosen by a protocol, a task or ``--extraction``):
each is an ordered list of extractors (``EXTRACTORS``); the first that finds an answer wins, and
each extractor returns the *last* answer of its kind in the text.

* ``boxed`` (default; the papers' protocol): box, then answer line -- the rules of version 1;
* ``minerva``: the Minerva / lm-eval ``minerva_math`` line "Final Answer: The final answer is X.
  I hope it is correct.", then box, then answer line;
* ``gsm8k``: GSM8K's ``#### N`` line, then the last number (lm-eval gsm8k strict / flexible match);
* ``answer-tag``: the R1 / RLVR ``<answer>...</answer>`` tag (a box or "the answer is" inside the
  tag is unwrapped);
* ``flexible``: answer tag, box, answer line, ``####``, the last inline-math span of the last
  line, then the last number (lm-eval's flexible-extract, Qwen2.5-Math's / ToRA's fallbacks);
* ``tool-output``: tool-integrated completions (ToRA's ``tora`` prompt, Qwen2.5-Math's ``*tir*`` /
  ``tool-integrated``): ``flexible`` with the last program output block read after the box and the
  answer line and before the last number -- where ToRA's ``src/utils/parser.py`` ``extract_answer``
  reads ``extract_program_output`` (after "he answer is", before the last number). Without an
  output block it is ``flexible`` exactly, so a directory of cot and tora files is graded with it;
* ``program-output``: the last program output block only (both tools' ``program_only`` prompt types,
  whose ``run_execute`` reads nothing else).

Extractors (the ``method`` recorded per sample):

* ``boxed`` / ``fbox``: the last ``\\boxed{...}`` / ``\\boxed x`` / ``\\fbox{...}`` with real brace
  matching whose content is not empty;
* ``answer_line`` / ``answer_is``: the last "Answer: ..." / "final answer: ..." line or
  "the/final answer is ..." phrase, cut to its first inline-math span or else its first sentence;
* ``minerva``: the last "final answer is" phrase, up to ". I hope it is correct" on its line
  (else cut like an answer line);
* ``gsm8k``: the last ``####`` mark: the first number after it on its line (thousands commas and
  a currency sign dropped), else its first sentence;
* ``answer_tag``: the last non-empty ``<answer>...</answer>``: its box, else its "answer is"
  phrase, else its whole (stripped) content;
* ``last_math``: the last ``$..$`` / ``$$..$$`` / ``\\(..\\)`` / ``\\[..\\]`` span of the last
  non-empty line (its last ``_LAST_LINE_CHARS`` characters);
* ``program_output``: the first line of the last ```` ```output ```` block (up to its closing
  ```` ``` ````, or the end of the text when unclosed), stripped -- what the interpreter printed;
  an empty block finds nothing (ToRA then falls back to the last number);
* ``last_number``: the last number of the text (``-1,234.5``, ``60%``), thousands commas dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Iterable, Mapping

from dsdr_eval.errors import DsdrError
from dsdr_eval.grading.boxes import MAX_ANSWER_CHARS, has_box, last_box

_NON_SPACE_RE = re.compile(r"\S")
# 2: profiles (boxed = the rules of version 1) and bounded memory; 3: an answer line holding only an
# empty box is an echoed instruction, not an answer; final_only (issue 33); 4: <boxed>..</boxed> tags are boxes,
# a box with nothing in it stops the guess extractors, an answer phrase's display math may span lines (issue 43)
EXTRACTION_RULES_VERSION = "4"
_FALLBACK_TAIL_CHARS = 4 * MAX_ANSWER_CHARS
_LAST_LINES_CHARS = 8192
_LAST_LINE_CHARS = 2 * MAX_ANSWER_CHARS


@dataclass(frozen=True)
class Extraction:
    answer: str | None
    # "boxed" | "fbox" | "boxed_tag" | "answer_line" | "answer_is" | "minerva" | "gsm8k" | "answer_tag" | "last_math"
    # | "program_output" | "last_number" | None
    method: str | None
    # where the statement of the answer ends in the text it was read from (exclusive): the closing
    # brace of the box, the end of the answer line's math span or sentence, ``</answer>``, the number.
    # The solution a rollout wrote ends there; what follows is not part of it (diversity, issue 42).
    end: int | None = field(default=None, compare=False)


Extractor = Callable[[str], "Extraction | None"]


@dataclass(frozen=True)
class ExtractionProfile:
    """A named answer convention: ``extractors`` (names in ``EXTRACTORS``) tried in order."""

    name: str
    extractors: tuple[str, ...]
    description: str

    def provenance(self) -> dict[str, object]:
        return {"profile": self.name, "extractors": list(self.extractors), "description": self.description}


def extract_answer(text: str, profile: "str | ExtractionProfile" = "boxed") -> str | None:
    """The final answer of a completion (see ``extract_answer_with_method``), or None."""
    return extract_answer_with_method(text, profile).answer


# Extractors that guess: they read whatever number or output block comes last, which in a response
# cut off by its token budget is a step of an unfinished derivation, not an answer (issue 33).
GUESS_EXTRACTORS = frozenset({"last_number", "last_math", "program_output"})


def extract_answer_with_method(text: str, profile: "str | ExtractionProfile" = "boxed", *,
                               final_only: bool = False) -> Extraction:
    """The answer of the first extractor of ``profile`` (a name in ``EXTRACTION_PROFILES``) that
    finds one, with that extractor's method; ``Extraction(None, None)`` when none does.
    ``final_only``: skip ``GUESS_EXTRACTORS`` (a response that hit its token limit: only an answer
    the model marked as final -- a box, an answer line or tag, ``####`` -- counts)."""
    chosen = profile if isinstance(profile, ExtractionProfile) else get_profile(profile)
    if not isinstance(text, str) or not text:
        return Extraction(None, None)
    for name in chosen.extractors:
        if final_only and name in GUESS_EXTRACTORS:
            continue
        if name in GUESS_EXTRACTORS and "boxed" in chosen.extractors and has_box(text):
            # only empty (or unclosed) boxes, or the box extractor would have won: the model put its
            # answer in a box and the box holds none -- Qwen2.5-Math's extract_answer returns "" there,
            # never the last number of the derivation before it (issue 43)
            break
        found = EXTRACTORS[name](text)
        # a box's content is the model's answer as written (nested empty boxes included); any other
        # extractor's text holding only empty boxes is an echoed instruction (_is_placeholder)
        if found is not None and found.answer and (found.method in _BOX_METHODS or not _is_placeholder(found.answer)):
            return found
    return Extraction(None, None)


def choose_extraction(override: str | None, protocol_profile: str, task_profiles: Mapping[str, str | None]) -> str:
    """The profile of a run: ``override`` (``--extraction``), else the one every task names (a task
    naming none takes the protocol's), else the protocol's. Tasks of one run that name different
    profiles need ``--extraction`` (or separate runs): one run is graded with one convention."""
    if override is not None:
        return get_profile(override).name
    chosen = {name: profile or protocol_profile for name, profile in task_profiles.items()}
    distinct = sorted(set(chosen.values()))
    if len(distinct) > 1:
        listed = ", ".join(f"{name} ({profile})" for name, profile in chosen.items())
        raise DsdrError(f"--benchmarks: the benchmarks name different extraction profiles: {listed}; "
                        "run them separately or pass --extraction PROFILE")
    return get_profile(distinct[0] if distinct else protocol_profile).name


_BOX_METHODS = frozenset({"boxed", "fbox", "boxed_tag"})
_BLOCK_ONLY_EXTRACTORS = frozenset({"program_output"})  # find nothing without their block (```output)


def extending_profile(names: "Iterable[str]") -> str | None:
    """The profile among ``names`` that reads every other's completions as that one does, if any:
    its extractors are each other's, in order, plus extractors that find nothing in a completion
    without their own block (``program_output``: a ```output block, which a chain-of-thought
    completion does not write). Lets one run grade a directory of cot and tool-integrated files."""
    profiles = [get_profile(name) for name in sorted(set(names))]
    for candidate in profiles:
        kept = tuple(e for e in candidate.extractors if e not in _BLOCK_ONLY_EXTRACTORS)
        if all(other.extractors in (candidate.extractors, kept) for other in profiles):
            return candidate.name
    return None


def get_profile(name: str) -> ExtractionProfile:
    """The profile called ``name``; a DsdrError naming the known ones otherwise."""
    try:
        return EXTRACTION_PROFILES[name]
    except (KeyError, TypeError):
        raise DsdrError(f"unknown extraction profile {name!r} (known: {', '.join(EXTRACTION_PROFILES)})") from None


# --- boxes (dsdr_eval.grading.boxes) ---------------------------------------------------------

def _last_boxed(text: str) -> Extraction | None:
    found = last_box(text)
    return None if found is None else Extraction(found[1], found[2], found[3])


# --- answer lines ---------------------------------------------------------------------------

def _atomic(name: str, run: str) -> str:
    """``run`` matched atomically (what Python >= 3.11 spells ``run+``): a lookahead captures the
    longest run and a back-reference consumes it, so the regex engine never backtracks into it.
    Used only where the next token cannot start with a character of the run, so the matches are
    exactly those of the plain pattern; without it ``answer\\s*(?:\\*\\*)?\\s*:`` re-scans a run
    of n spaces n times (``"Answer" + 10^5 spaces`` took 94 s)."""
    return f"(?=(?P<{name}>{run}))(?P={name})"


_ANSWER_LINE_RE = re.compile(
    r"(?im)(?:^|[\s*_#(])(?:final" + _atomic("w0", r"\s+") + r"answer|answer)" + _atomic("w1", r"\s*")
    + r"(?:\*\*|__)?" + _atomic("w2", r"\s*") + r"[:：]\s*(?:\*\*|__)?[ \t]*(?P<tail>[^\n]*)")
_ANSWER_IS_RE = re.compile(
    r"(?i)(?:final" + _atomic("w0", r"\s+") + r"answer|the" + _atomic("w1", r"\s+") + r"answer)"
    + _atomic("w2", r"\s+") + r"is\s*[:：]?[ \t]*(?P<tail>[^\n]*)")


def _tail(text: str, match: re.Match, group: str = "tail") -> str:
    """The first ``_FALLBACK_TAIL_CHARS`` of a match's tail, without copying the rest of the line."""
    start = match.start(group)
    return text[start:min(match.end(group), start + _FALLBACK_TAIL_CHARS)]


def _last_answer_line(text: str) -> Extraction | None:
    # Both patterns are line-local, so when the last whole lines (~8 KB) hold a usable match it is
    # the last one in the text: scan those first, the whole text only if they hold none. Matches
    # are consumed as they come (at most one per line and pattern; each costs at most its tail).
    cut = text.rfind("\n", 0, max(0, len(text) - _LAST_LINES_CHARS)) + 1
    for region_start in ((cut, 0) if cut > 0 else (0,)):
        best: tuple[tuple[int, str], str, int] | None = None  # ((start, method), answer, end)
        for method, pattern in (("answer_line", _ANSWER_LINE_RE), ("answer_is", _ANSWER_IS_RE)):
            for match in pattern.finditer(text, region_start):
                key = (match.start(), method)
                if best is not None and key < best[0]:
                    continue
                answer, end = _answer_after(text, match)
                if answer:
                    best = (key, answer, end)
        if best is not None:
            return Extraction(best[1], best[0][1], best[2])
    return None


def _answer_after(text: str, match: re.Match, group: str = "tail") -> tuple[str | None, int]:
    """(the answer an answer phrase gives, where its statement ends in ``text``): its tail cut as
    ``_clean_answer_tail_end`` does, except display math the phrase opens but closes on a later line
    ("The answer is: \\[" then the value and "\\]" on the next lines, or the phrase alone on its line
    before it), read whole (issue 43)."""
    tail = _tail(text, match, group)
    spanning = _math_across_lines(text, match.start(group), tail)
    if spanning is not None:
        return spanning
    answer, used = _clean_answer_tail_end(tail)
    return answer, match.start(group) + used


def _math_across_lines(text: str, start: int, tail: str) -> tuple[str | None, int] | None:
    """(the content of the math span that starts the text at ``start`` (after spaces and newlines), the
    end of its closer) when the tail (the rest of the phrase's line) is empty or opens a span it does
    not close; else None.
    At most ``_FALLBACK_TAIL_CHARS`` characters are read: one ``find`` per delimiter kind."""
    stripped = tail.strip()
    if stripped and not (stripped.startswith(("$", "\\[", "\\(")) and _first_inline_math(tail) is None):
        return None
    window = text[start:start + _FALLBACK_TAIL_CHARS]
    first = _NON_SPACE_RE.search(window)
    if first is None:
        return None
    for opening, closing in _MATH_DELIMITERS:
        if window.startswith(opening, first.start()):
            content_start = first.start() + len(opening)
            close = window.find(closing, content_start + 1)
            answer = window[content_start:close].strip().rstrip(".,;").strip() if close >= 0 else ""
            return (answer, start + close + len(closing)) if answer and not _is_placeholder(answer) else None
    return None


def _clean_answer_tail_end(tail: str) -> tuple[str | None, int]:
    """(the answer of an answer line's tail, how many characters of the tail its statement takes:
    up to the end of its first math span, else of its first sentence)."""
    span = _first_inline_math_span(tail)
    if span is not None:
        answer, used = tail[span[0]:span[1]], span[2]
    else:
        sentence_end = _SENTENCE_END_RE.search(tail)
        answer = tail if sentence_end is None else tail[:sentence_end.start()]  # up to the end of the sentence
        used = len(tail) if sentence_end is None else sentence_end.start() + 1
    answer = answer.strip().strip("*_").strip()
    answer = answer.rstrip(".").strip()
    return (None if _is_placeholder(answer) else answer or None), used


def _is_placeholder(answer: str) -> bool:
    """"The answer is within \\boxed{}." -- the prompt's instruction echoed: a box with nothing in it
    marks where an answer would go, so a phrase holding only empty boxes holds no answer."""
    return bool(answer) and has_box(answer) and _last_boxed(answer) is None


_SENTENCE_END_RE = re.compile(r"\.\s|\.$")
# (opening, closing) in the order the alternation ``\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]`` tries them
_MATH_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def _first_inline_math(line: str, start: int = 0) -> str | None:
    """The content of the leftmost ``$$..$$`` / ``$..$`` / ``\\(..\\)`` / ``\\[..\\]`` span of a
    line without newlines (shortest content, at least one character; ``$$`` before ``$`` at the
    same opening), or None -- what ``re.search`` with the lazy alternation above returns, but in
    linear time (that regex re-scans the rest of the line from every unclosed opening).

    Per delimiter only its first opening can be the leftmost match: a later opening of the same
    kind is closed only if the first one is (a closing after the later one is also after the
    first), so the match of a kind exists iff its last closing lies far enough right."""
    span = _first_inline_math_span(line, start)
    return None if span is None else line[span[0]:span[1]]


def _first_inline_math_span(line: str, start: int = 0) -> tuple[int, int, int] | None:
    """(content start, content end, end of the closing delimiter) of the leftmost span from ``start``."""
    best: tuple[int, int, int, int] | None = None  # (opening position, content start, content end, span end)
    for opening, closing in _MATH_DELIMITERS:
        position = line.find(opening, start)
        if position < 0 or (best is not None and position >= best[0]):
            continue
        content_start = position + len(opening)
        close = line.find(closing, content_start + 1)
        if close >= 0:
            best = (position, content_start, close, close + len(closing))
    return None if best is None else best[1:]


# --- other conventions ----------------------------------------------------------------------

_MINERVA_RE = re.compile(r"(?i)final answer is[ \t]*[:：]?[ \t]*(?P<tail>[^\n]*)")
_MINERVA_END_RE = re.compile(r"(?i)\.?\s*I hope it is correct")
_GSM8K_RE = re.compile(r"####[ \t]*(?P<tail>[^\n]*)")
# a number: optional sign (not a binary minus), thousands groups or digits, decimals, a percent sign
_NUMBER_RE = re.compile(r"(?:(?<![\w)}\]])-)?(?:\d{1,3}(?:,\d{3})+(?![\d,])|\d+)(?:\.\d+)?(?:[ \t]?\\?%)?"
                        r"|(?:(?<![\w)}\]])-)?\.\d+(?:[ \t]?\\?%)?")
_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"


def _last_match(pattern: re.Pattern, text: str, start: int = 0, end: int | None = None) -> re.Match | None:
    """The last non-overlapping match, keeping one match object at a time (O(1) memory)."""
    last = None
    for last in pattern.finditer(text, start, len(text) if end is None else end):
        pass
    return last


def _minerva(text: str) -> Extraction | None:
    match = _last_match(_MINERVA_RE, text)
    if match is None:
        return None
    tail = _tail(text, match)
    end = _MINERVA_END_RE.search(tail)
    if end is None:
        answer, stop = _answer_after(text, match)
    else:  # lm-eval's minerva_math: everything between "is" and ". I hope it is correct"
        answer, stop = tail[:end.start()].strip().rstrip(".").strip() or None, match.start("tail") + end.end()
    return Extraction(answer, "minerva", stop) if answer and not _is_placeholder(answer) else None


def _plain_number(token: str) -> str:
    return token.replace(",", "")


def _gsm8k(text: str) -> Extraction | None:
    match = _last_match(_GSM8K_RE, text)
    if match is None:
        return None
    tail = _tail(text, match)
    stripped = tail.lstrip("$\\ \t")
    number = _NUMBER_RE.search(stripped)  # "#### $1,230" is 1230
    if number:
        answer, used = _plain_number(number.group()), len(tail) - len(stripped) + number.end()
    else:
        answer, used = _clean_answer_tail_end(tail)
    return Extraction(answer, "gsm8k", match.start("tail") + used) if answer else None


def _answer_tag(text: str) -> Extraction | None:
    close = len(text)
    while True:  # the last tag with something in it; each step searches a disjoint stretch
        close = text.rfind(_ANSWER_CLOSE, 0, close)
        if close < 0:
            return None
        opening = text.rfind(_ANSWER_OPEN, 0, close)
        if opening < 0:
            return None
        content = text[opening + len(_ANSWER_OPEN):close]
        inner = _last_boxed(content) or _last_answer_line(content)
        answer = inner.answer if inner is not None else content.strip().rstrip(".").strip()
        if answer:
            return Extraction(answer, "answer_tag", close + len(_ANSWER_CLOSE))
        close = opening


def _last_line(text: str) -> tuple[str, int]:
    """The last non-empty line (its last ``_LAST_LINE_CHARS`` characters) and where it starts."""
    end = len(text)
    while end > 0 and text[end - 1].isspace():  # the trailing whitespace, once
        end -= 1
    start = max(text.rfind("\n", 0, end) + 1, end - _LAST_LINE_CHARS)
    return text[start:end], start


def _last_math(text: str) -> Extraction | None:
    (line, line_start), last, position = _last_line(text), None, 0
    while True:  # spans left to right on a line of at most _LAST_LINE_CHARS characters
        span = _first_inline_math_span(line, position)
        if span is None:
            break
        last, position = span, span[2]
    answer = None if last is None else line[last[0]:last[1]].strip().rstrip(".,;").strip()
    return Extraction(answer, "last_math", line_start + last[2]) if answer else None


_OUTPUT_OPEN, _FENCE = "```output", "```"


def _program_output(text: str) -> Extraction | None:
    # One rfind and one find: linear on any input. ToRA's extract_program_output splits on every
    # "```output" and keeps the last piece, then cuts it at the next fence; extract_answer keeps
    # the first line of that (``pred.split("\n")[0]``): a multi-line print is read by its first line.
    opening = text.rfind(_OUTPUT_OPEN)
    if opening < 0:
        return None
    end = text.find(_FENCE, opening + len(_OUTPUT_OPEN))
    end = len(text) if end < 0 else end
    first = _NON_SPACE_RE.search(text, opening + len(_OUTPUT_OPEN), end)  # no copy of a long block
    if first is None:
        return None
    line_end = text.find("\n", first.start(), end)
    line_end = min(end if line_end < 0 else line_end, first.start() + _FALLBACK_TAIL_CHARS)
    answer = text[first.start():line_end].strip().rstrip(".").strip()
    block_end = min(len(text), end + len(_FENCE))  # the block's closing fence (the text's end when unclosed)
    return Extraction(answer, "program_output", block_end) if answer else None


def _last_number(text: str) -> Extraction | None:
    match = _last_match(_NUMBER_RE, text)
    return None if match is None else Extraction(_plain_number(match.group()), "last_number", match.end())


EXTRACTORS: Mapping[str, Extractor] = MappingProxyType({
    "boxed": _last_boxed, "answer_line": _last_answer_line, "minerva": _minerva, "gsm8k": _gsm8k,
    "answer_tag": _answer_tag, "last_math": _last_math, "program_output": _program_output,
    "last_number": _last_number,
})

DEFAULT_EXTRACTION = "boxed"
EXTRACTION_PROFILES: Mapping[str, ExtractionProfile] = MappingProxyType({profile.name: profile for profile in (
    ExtractionProfile("boxed", ("boxed", "answer_line"),
                      "last \\boxed{}/\\fbox{} (brace-matched), else last 'Answer:'/'final answer is' line"),
    ExtractionProfile("minerva", ("minerva", "boxed", "answer_line"),
                      "last 'The final answer is X. I hope it is correct.' (Minerva / lm-eval minerva_math), "
                      "else the boxed profile"),
    ExtractionProfile("gsm8k", ("gsm8k", "last_number"),
                      "last '#### N' (GSM8K), else the last number (lm-eval gsm8k strict-match, flexible-extract)"),
    ExtractionProfile("answer-tag", ("answer_tag",),
                      "last non-empty <answer>...</answer> (R1 / RLVR format); a box inside it is unwrapped"),
    ExtractionProfile("flexible", ("answer_tag", "boxed", "answer_line", "gsm8k", "last_math", "last_number"),
                      "answer tag, box, 'answer is' line, '####', last math span of the last line, else the last "
                      "number (lm-eval flexible-extract, Qwen2.5-Math / ToRA fallbacks)"),
    # flexible plus ToRA's program-output step before the prose's last number: on a completion
    # without a ```output block it is flexible exactly (see extending_profile)
    ExtractionProfile("tool-output", ("answer_tag", "boxed", "answer_line", "gsm8k", "program_output", "last_math",
                                      "last_number"),
                      "flexible with the first line of the last ```output block before the last math span and the "
                      "last number (ToRA / Qwen2.5-Math tool-integrated prompts: tora, pal, *tir*, tool-integrated)"),
    ExtractionProfile("program-output", ("program_output",),
                      "first line of the last ```output block only (ToRA / Qwen2.5-Math program_only prompts)"),
)})


# --- cheap string normalisation (answer classes only) ---------------------------------------

KEY_DROP_RE = re.compile(r"\\left|\\right|\\displaystyle|\\[!,;: ]|\s|\$|\^\{?\\circ\}?")


def answer_key(answer: str) -> str:
    """A cheap normal form: answers with equal keys are in the same class without math-verify.
    Linear: one alternation of literals and single characters, no nested quantifiers."""
    key = KEY_DROP_RE.sub("", answer)
    key = key.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return key.rstrip(".")
