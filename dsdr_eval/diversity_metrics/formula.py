"""Formula-level diversity D_eq (DSDR, arXiv 2602.19895, "formula" term; docs/ALGORITHMS.md §3.1, Eq. 8).

Extraction rule (the DSDR paper does not say how formulas are extracted; the cited prior work,
DIVER, takes ``\\[..\\]``, ``\\(..\\)``, ``$$..$$``, ``$..$``; we add the equation-like
environments). One left-to-right pass over the text; at each position the first of these
openers wins, and the span runs to the first matching closer:

* ``\\[ .. \\]``, ``\\( .. \\)`` and ``$$ .. $$`` (display / inline math);
* ``\\begin{ENV} .. \\end{ENV}`` for ENV in equation, align, gather, multline, eqnarray,
  flalign, alignat (and their starred forms);
* ``$ .. $`` (inline math), which may not span a blank line (``\\n\\n``): a lone ``$`` in
  prose ("costs $5") then stays prose instead of swallowing the next paragraph.
* ``\\X`` (any backslash escape, e.g. ``\\$`` or ``\\\\``) outside math is a literal, never an
  opener; inside a span an escaped closer (``\\$``) does not close it.
* An opener without any closer later in the text is literal text (unbalanced delimiters) -- except
  in a text that ends at its graded final answer (``ends_at_answer``, issue 42): there the first
  span still open at the end (a ``$`` span only if no blank line lies between) closes where the
  final answer's box begins (else at the end), without the punctuation before it. No span crosses
  the final answer, so a dropped ``$`` measures like the honest solution: ``$3+9=12. \\boxed{12}``
  is the formula ``3+9=12`` of ``$3+9=12$. \\boxed{12}``, and ``$1+2=\\boxed{3}`` (its ``$`` cut away
  with what followed the box, or dropped) is ``1+2=`` either way.

Each extracted span is whitespace-normalised: all whitespace is removed except one space where
it separates a control word from a following letter (``\\alpha x`` keeps its space, so it does
not become ``\\alphax``; ``x + 1`` and ``x+1`` are the same formula). Empty spans are dropped.
``S(o)`` is the *set* of normalised spans.

Robustness: the scan is linear in the text length. The openers are found by one precompiled
regex with a fixed alternation (no nested quantifiers), closers by ``str.find`` or by an
"unrolled-loop" pattern ``[^\\\\$]*(?:\\\\.[^\\\\$]*)*`` whose alternatives are disjoint (so it
cannot backtrack catastrophically), each part of the text is consumed at most a constant number
of times, and once a closer kind is known to be absent from the rest of the text later openers
of that kind are not searched again. Megabytes of hostile text take milliseconds to seconds,
never minutes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

MATH_ENVIRONMENTS: tuple[str, ...] = (
    "equation", "align", "gather", "multline", "eqnarray", "flalign", "alignat",
)

# The rule sets a run can choose (recorded with it): "extended" = DIVER's four delimiters and the
# equation environments (default); "diver" = DIVER's four delimiters only (\begin{ENV} is then
# literal text, math inside it is found by the delimiters). Each set's opener pattern and its
# recorded description are built from the same pieces below.
_DELIMITER_SPANS = "spans \\[..\\], \\(..\\), $$..$$, $..$ (not across a blank line)"
_ENVIRONMENT_SPANS = "\\begin{ENV}..\\end{ENV} for ENV in " + ",".join(MATH_ENVIRONMENTS) + " (+ starred)"
_COMMON_RULES = ("escaped \\$ is literal; unbalanced openers are literal; whitespace removed except between a "
                 "control word and a following letter; set of distinct spans per rollout")
# Openers, scanned left to right. `\\.` consumes any other escape (\\$, \\\\, \\alpha ...) so it is
# never mistaken for an opener and the scan stays in sync.
_DELIMITER_OPENERS = r"\\[\[\(]|\\.|\$\$|\$"
_ENVIRONMENT_OPENER = r"\\begin\{(" + "|".join(MATH_ENVIRONMENTS) + r")(\*?)\}"
_RULE_SETS: dict[str, tuple[re.Pattern[str], str]] = {
    "extended": (re.compile(_ENVIRONMENT_OPENER + "|" + _DELIMITER_OPENERS, re.DOTALL),
                 f"{_DELIMITER_SPANS} and {_ENVIRONMENT_SPANS}; {_COMMON_RULES}"),
    "diver": (re.compile(_DELIMITER_OPENERS, re.DOTALL),
              f"{_DELIMITER_SPANS}; \\begin{{ENV}} is literal text; {_COMMON_RULES}"),
}
FORMULA_RULES = tuple(_RULE_SETS)
EXTRACTION_RULES = {name: description for name, (_, description) in _RULE_SETS.items()}
EXTRACTION_RULE = EXTRACTION_RULES["extended"]
_CLOSERS = {"\\[": "\\]", "\\(": "\\)", "$$": "$$", "$": "$"}

# Body of an inline $..$ / display $$..$$ span: any run of non-special chars or escapes.
# Disjoint alternatives => linear matching. The match stops at a `$` or the end of the text.
_DOLLAR_BODY = re.compile(r"[^\\$]*(?:\\.[^\\$]*)*", re.DOTALL)
# Body of a \[..\] span: stops right before `\]` (or at the end / a trailing lone backslash).
_BRACKET_BODY = re.compile(r"[^\\]*(?:\\[^\]][^\\]*)*", re.DOTALL)
_PAREN_BODY = re.compile(r"[^\\]*(?:\\[^)][^\\]*)*", re.DOTALL)
_ANSWER_BOXES = ("\\boxed", "\\fbox", "<boxed>")  # where a final answer's box statement begins
_CONTROL_WORD_THEN_SPACE = re.compile(r"(\\[A-Za-z]+)\s+(?=[A-Za-z])")
_WHITESPACE = re.compile(r"\s+")


def normalize_formula(span: str) -> str:
    """Remove whitespace, keeping one space between a control word and a following letter."""
    span = span.replace("\x00", "")  # \x00 is used below as the marker of a kept space
    kept = _CONTROL_WORD_THEN_SPACE.sub(lambda m: m.group(1) + "\x00", span)
    return _WHITESPACE.sub("", kept).replace("\x00", " ")


def _dollar_display_end(text: str, start: int) -> int:
    """Index of the `$$` closing a display span whose body starts at `start`, or -1."""
    pos = start
    n = len(text)
    while pos < n:
        pos = _DOLLAR_BODY.match(text, pos).end()
        if pos >= n or text[pos] != "$":  # the end, or a lone trailing backslash
            return -1
        # text[pos] == "$"
        if text.startswith("$$", pos):
            return pos
        pos += 1  # a single `$` inside $$..$$ is content
    return -1


_ABSENT = -1  # the span's closer occurs nowhere in the rest of the text
_NOT_HERE = -2  # a `$` that closes nothing here: the span would cross a blank line (prose "costs $5")


def _closer(match: re.Match[str]) -> str | None:
    """The closer of the span an opener starts; None for an escape that opens nothing."""
    token = match.group(0)
    if token.startswith("\\begin"):
        return "\\end{" + match.group(1) + match.group(2) + "}"
    return _CLOSERS.get(token)  # some other escape (\$, \\, \alpha ...): None, a literal


def _closing_index(text: str, start: int, closer: str) -> int:
    """Index of ``closer`` ending the span whose body starts at ``start``; else _ABSENT / _NOT_HERE."""
    if closer == "$":
        end = _DOLLAR_BODY.match(text, start).end()
        if end >= len(text) or text[end] != "$":  # the end, or a lone trailing backslash
            return _ABSENT
        return _NOT_HERE if text.find("\n\n", start, end) >= 0 else end
    if closer == "$$":
        return _dollar_display_end(text, start)
    if closer in ("\\]", "\\)"):
        end = (_BRACKET_BODY if closer == "\\]" else _PAREN_BODY).match(text, start).end()
        return _ABSENT if end + 1 >= len(text) else end  # ran to the end: no closer after this point
    return text.find(closer, start)  # \end{ENV}


def extract_formulas(text: str, *, rules: str = "extended", ends_at_answer: bool = False) -> list[str]:
    """The normalised math spans of `text`, in order of appearance, duplicates kept.

    See the module docstring for the rule (``rules``: one of :data:`FORMULA_RULES`;
    ``ends_at_answer``: the text ends where its graded final answer ends, so the first span still
    open there closes where its box begins). Never raises on any `str`; linear time."""
    if rules not in _RULE_SETS:
        raise ValueError(f"unknown formula rules {rules!r}; expected one of {FORMULA_RULES}")
    opener = _RULE_SETS[rules][0]
    spans: list[str] = []
    pos = 0
    closer_absent: set[str] = set()  # closers known not to occur in the rest of the text
    while pos < len(text):
        match = opener.search(text, pos)
        if match is None:
            break
        body_start = match.end()
        closer = _closer(match)
        end = _ABSENT if closer is None or closer in closer_absent else _closing_index(text, body_start, closer)
        if end == _ABSENT and closer is not None:
            closer_absent.add(closer)
        if end == _ABSENT and closer is not None and ends_at_answer and not (
                closer == "$" and text.find("\n\n", body_start) >= 0):
            # open at the answer's end: it closes where the answer's box begins (module docstring)
            box = max(text.rfind(marker, body_start) for marker in _ANSWER_BOXES)
            spans.append(text[body_start:box if box >= 0 else len(text)].rstrip().rstrip(".,;:").rstrip())
            break
        if end < 0:  # a literal opener; after a lone `$` in prose its candidate closer may open a span
            pos = body_start
            continue
        spans.append(text[body_start:end])
        pos = end + len(closer)
    normalised = (normalize_formula(span) for span in spans)
    return [span for span in normalised if span]


def unbalanced_dollar(text: str) -> bool:
    """An odd number of ``$`` not written ``\\$``: a math span left open (design 2's DSDR policies
    dropped the closing ``$`` before ``\\boxed{}``, issue 42). Read on a solution cut at its answer."""
    return (text.count("$") - text.count("\\$")) % 2 == 1  # C-speed counts: traces can be megabytes


def formula_set(text: str, *, rules: str = "extended", ends_at_answer: bool = False) -> frozenset[str]:
    """S(o): the set of normalised formulas of one rollout (``extract_formulas``)."""
    return frozenset(extract_formulas(text, rules=rules, ends_at_answer=ends_at_answer))


def formula_uniqueness(formula_sets: Sequence[Iterable[str]]) -> np.ndarray:
    """D_eq for every rollout of one group (docs/ALGORITHMS.md §3.1, Eq. 8).

    ``D_eq(o_i) = |{f in S_i : f not in U_{j != i} S_j}| / |S_i|``, and 0 when S_i is empty.
    A formula of S_i is outside the union of the others iff exactly one set of the group holds
    it, so one Counter pass gives every D_eq (linear in the total number of formulas).
    A group of one rollout gets 0 (no other rollout to differ from; see ``dsdr_diversity``).

    Returns float64 [G]."""
    sets = [frozenset(s) for s in formula_sets]
    group_size = len(sets)
    out = np.zeros(group_size, dtype=np.float64)
    if group_size < 2:
        return out
    holders = Counter(f for s in sets for f in s)
    for i, s in enumerate(sets):
        if s:
            out[i] = sum(1 for f in s if holders[f] == 1) / len(s)
    return out
