"""Boxes in a completion (``dsdr_eval.grading.extraction`` reads answers from them; the audit compares them):
``\\boxed{..}`` / ``\\boxed x`` / ``\\fbox{..}`` with real brace matching, and ``<boxed>..</boxed>`` tags.
Linear time and O(1) memory beside the text on any input (see ``_last_command_box``)."""

from __future__ import annotations

import re

MAX_ANSWER_CHARS = 1000  # longest gold answer in the six benchmarks is 210 characters

# --- boxes ----------------------------------------------------------------------------------

BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BRACE_TOKEN_RE = re.compile(r"\\[\\{}]|[{}]")  # escaped braces/backslashes are skipped as a unit
_BARE_BOX_TOKEN_RE = re.compile(r"[^\s$]{1,%d}" % (MAX_ANSWER_CHARS + 1))
_NON_SPACE_RE = re.compile(r"\S")


_TAG_OPEN, _TAG_CLOSE = "<boxed>", "</boxed>"


def has_box(text: str) -> bool:
    """Whether ``text`` writes a box at all (``\\boxed`` / ``\\fbox`` / a ``<boxed>`` tag), empty or not."""
    return _TAG_OPEN in text or BOX_RE.search(text) is not None


def last_box(text: str) -> tuple[int, str, str, int] | None:
    """(start, content, method, end: where the box closes) of the last box whose content is not empty: a ``\\boxed{..}`` / ``\\fbox{..}`` (``_last_command_box``)
    or a ``<boxed>..</boxed>`` tag -- what an RL model trained on an R1 template writes after
    ``</think>`` (issue 43: 76 right answers read as none) -- whichever starts later."""
    command = _last_command_box(text)
    tag = _last_tag_box(text) if _TAG_OPEN in text else None
    return command if tag is None or (command is not None and command[0] > tag[0]) else tag


def _last_tag_box(text: str) -> tuple[int, str, str, int] | None:
    """(start, content, method, end) of the last non-empty ``<boxed>..</boxed>``; each step searches a disjoint stretch."""
    close = len(text)
    while True:
        close = text.rfind(_TAG_CLOSE, 0, close)
        if close < 0:
            return None
        opening = text.rfind(_TAG_OPEN, 0, close)
        if opening < 0:
            return None
        answer = text[opening + len(_TAG_OPEN):close].strip()
        if answer:
            return opening, answer, "boxed_tag", close + len(_TAG_CLOSE)
        close = opening


def _last_command_box(text: str) -> tuple[int, str, str, int] | None:
    """(start, content, method, end) of the ``\\boxed`` / ``\\fbox`` with the largest start whose content is not
    empty (brace-matched), or None.

    One pass over the braces after the first box, in step with the box matches. Memory is O(1):
    a depth counter and at most two open boxes. An open box whose opening brace is followed by
    a newer box is closed, if ever, with that box inside it -- never empty -- and every older open
    box encloses it, so closes later, with a smaller start: it can no longer win and is dropped.
    (The previous implementation kept a position for every brace: 36-51 bytes per input byte.)"""
    boxes = BOX_RE.finditer(text)
    box = next(boxes, None)
    if box is None:
        return None
    best: tuple[int, str, str, int] | None = None  # (start of the winning box, its content, method, end)
    open_boxes: list[tuple[int, int, int, str]] = []  # (depth outside it, box start, content start, method)
    pending: tuple[int, int, str] | None = None  # (brace position, box start, method) of the last box seen
    depth = 0

    def take_boxes_before(position: int) -> None:
        nonlocal box, best, pending
        while box is not None and box.start() < position:
            method = "fbox" if box.group().endswith("fbox") else "boxed"
            pos = box.end()
            while pos < len(text) and text[pos] in " \t":  # runs after distinct boxes are disjoint
                pos += 1
            if pos < len(text) and text[pos] == "{":
                pending = (pos, box.start(), method)
            elif pos > box.end():  # "\boxed 5": the token after the space, up to whitespace or $
                token = _BARE_BOX_TOKEN_RE.match(text, pos)
                if token and (best is None or box.start() > best[0]):
                    best = (box.start(), token.group(), method, token.end())
            box = next(boxes, None)

    for token in _BRACE_TOKEN_RE.finditer(text, box.end()):
        take_boxes_before(token.start())
        char = token.group()
        if char == "{":
            if pending is not None and pending[0] == token.start():
                del open_boxes[:-1]  # older open boxes can no longer win (see the docstring)
                open_boxes.append((depth, pending[1], token.end(), pending[2]))
                pending = None
            depth += 1
        elif char == "}" and depth:
            depth -= 1
            if open_boxes and open_boxes[-1][0] == depth:
                _, start, content_start, method = open_boxes.pop()
                if (best is None or start > best[0]) and _NON_SPACE_RE.search(text, content_start, token.start()):
                    best = (start, text[content_start:token.start()].strip(), method, token.end())
    take_boxes_before(len(text) + 1)
    return best


def last_boxes(text: str, limit: int) -> list[str]:
    """The non-empty contents of the last ``limit`` ``\\boxed{..}`` / ``\\fbox{..}`` (brace-matched, at
    most ``MAX_ANSWER_CHARS`` characters each) and ``<boxed>`` tags, in text order; a box holding a
    box is read by the inner one. One regex pass keeps the last ``limit`` starts; each is then
    matched over at most ``MAX_ANSWER_CHARS`` characters: linear in the text."""
    starts: list[int] = []
    for match in BOX_RE.finditer(text):
        starts.append(match.end())
        if len(starts) > limit:
            del starts[0]
    found = [(start, content) for start in starts for content in (_braced(text, start),) if content]
    if _TAG_OPEN in text:
        close = len(text)
        while len(found) < 2 * limit:
            close = text.rfind(_TAG_CLOSE, 0, close)
            opening = text.rfind(_TAG_OPEN, 0, close) if close >= 0 else -1
            if opening < 0:
                break
            content = text[opening + len(_TAG_OPEN):close].strip()
            if content and len(content) <= MAX_ANSWER_CHARS:
                found.append((opening, content))
            close = opening
    found.sort()
    return [content for _, content in found[-limit:] if not BOX_RE.search(content) and _TAG_OPEN not in content]


def _braced(text: str, position: int) -> str | None:
    """The stripped content of the brace group opening at ``position`` (after spaces), or None."""
    while position < len(text) and text[position] in " \t":
        position += 1
    if position >= len(text) or text[position] != "{":
        return None
    depth, start = 0, position + 1
    for token in _BRACE_TOKEN_RE.finditer(text, position, min(len(text), start + MAX_ANSWER_CHARS + 1)):
        if token.group() == "{":
            depth += 1
        elif token.group() == "}":
            depth -= 1
            if depth == 0:
                return text[start:token.start()].strip() or None
    return None
