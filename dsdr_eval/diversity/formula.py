"""Formula-level diversity D_eq (DSDR, arXiv 2602.19895, "formula" term; ALGORITHMS.md §3.1).

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
* An opener without any closer later in the text is literal text (unbalanced delimiters).

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
EXTRACTION_RULE = (
    "spans \\[..\\], \\(..\\), $$..$$, $..$ (not across a blank line) and "
    "\\begin{ENV}..\\end{ENV} for ENV in " + ",".join(MATH_ENVIRONMENTS) + " (+ starred); "
    "escaped \\$ is literal; unbalanced openers are literal; whitespace removed except between a "
    "control word and a following letter; set of distinct spans per rollout"
)

# The rule sets a run can choose (recorded with it): "extended" = the rule above (default);
# "diver" = DIVER's four delimiters only (\begin{ENV} is then literal text, math inside it is
# found by the delimiters).
FORMULA_RULES = ("extended", "diver")
EXTRACTION_RULES = {
    "extended": EXTRACTION_RULE,
    "diver": EXTRACTION_RULE.split(" and \\begin")[0] + "; \\begin{ENV} is literal text; "
    + EXTRACTION_RULE.split("(+ starred); ")[1],
}

# Openers, scanned left to right. `\\.` consumes any other escape (\\$, \\\\, \\alpha ...) so it is
# never mistaken for an opener and the scan stays in sync.
_OPENER = re.compile(
    r"\\begin\{(" + "|".join(MATH_ENVIRONMENTS) + r")(\*?)\}"
    r"|\\[\[\(]"
    r"|\\."
    r"|\$\$"
    r"|\$",
    re.DOTALL,
)
# Body of an inline $..$ / display $$..$$ span: any run of non-special chars or escapes.
# Disjoint alternatives => linear matching. The match stops at a `$` or the end of the text.
_DOLLAR_BODY = re.compile(r"[^\\$]*(?:\\.[^\\$]*)*", re.DOTALL)
# Body of a \[..\] span: stops right before `\]` (or at the end / a trailing lone backslash).
_BRACKET_BODY = re.compile(r"[^\\]*(?:\\[^\]][^\\]*)*", re.DOTALL)
_PAREN_BODY = re.compile(r"[^\\]*(?:\\[^)][^\\]*)*", re.DOTALL)
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


_OPENER_DIVER = re.compile(r"\\[\[\(]|\\.|\$\$|\$", re.DOTALL)


def extract_formulas(text: str, *, rules: str = "extended") -> list[str]:
    """The normalised math spans of `text`, in order of appearance, duplicates kept.

    See the module docstring for the rule (``rules``: one of :data:`FORMULA_RULES`). Never raises
    on any `str`; linear time."""
    if rules not in FORMULA_RULES:
        raise ValueError(f"unknown formula rules {rules!r}; expected one of {FORMULA_RULES}")
    opener = _OPENER if rules == "extended" else _OPENER_DIVER
    if not text:
        return []
    spans: list[str] = []
    n = len(text)
    pos = 0
    closer_absent: set[str] = set()  # closer kinds known not to occur in the rest of the text
    while pos < n:
        match = opener.search(text, pos)
        if match is None:
            break
        token = match.group(0)
        body_start = match.end()
        if token.startswith("\\begin"):
            closer = "\\end{" + match.group(1) + match.group(2) + "}"
            end = -1 if closer in closer_absent else text.find(closer, body_start)
            if end < 0:
                closer_absent.add(closer)
                pos = body_start
                continue
            spans.append(text[body_start:end])
            pos = end + len(closer)
        elif token in ("\\[", "\\("):
            kind = token
            if kind in closer_absent:
                pos = body_start
                continue
            body = (_BRACKET_BODY if kind == "\\[" else _PAREN_BODY).match(text, body_start)
            end = body.end()
            if end + 1 >= n:  # ran to the end: no closer anywhere after this point
                closer_absent.add(kind)
                pos = body_start
                continue
            spans.append(text[body_start:end])
            pos = end + 2
        elif token.startswith("\\"):
            pos = body_start  # some other escape (\$, \\, \alpha ...): literal
        elif token == "$$":
            if "$$" in closer_absent:
                pos = body_start
                continue
            end = _dollar_display_end(text, body_start)
            if end < 0:
                closer_absent.add("$$")
                pos = body_start
                continue
            spans.append(text[body_start:end])
            pos = end + 2
        else:  # single $
            if "$" in closer_absent:
                pos = body_start
                continue
            end = _DOLLAR_BODY.match(text, body_start).end()
            if end >= n or text[end] != "$":  # the end, or a lone trailing backslash
                closer_absent.add("$")
                pos = body_start
                continue
            if text.find("\n\n", body_start, end) >= 0:
                pos = body_start  # a lone `$` in prose; the candidate closer may open a span
                continue
            spans.append(text[body_start:end])
            pos = end + 1
    normalised = (normalize_formula(span) for span in spans)
    return [span for span in normalised if span]


def formula_set(text: str, *, rules: str = "extended") -> frozenset[str]:
    """S(o): the set of normalised formulas of one rollout."""
    return frozenset(extract_formulas(text, rules=rules))


def formula_uniqueness(formula_sets: Sequence[Iterable[str]]) -> np.ndarray:
    """D_eq for every rollout of one group (ALGORITHMS.md §3.1).

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
