"""A completion's reasoning and its answer, split (issue 33): graders read the answer part only.

A thinking model writes a scratchpad before its answer, delimited by the model family's markers;
a guess in the scratchpad (``\\boxed{70}?``) is not an answer, and a scratchpad that never closed
(the token budget ran out) has no answer at all. ``split_completion`` reads the split from:

* ``think``: ``<think>...</think>`` (R1 distills, QwQ, Qwen3), also when the chat template already
  opened ``<think>`` in the prompt (the completion then holds only ``</think>``);
* ``skythought``: ``<|begin_of_thought|>...<|end_of_thought|>`` then
  ``<|begin_of_solution|>...<|end_of_solution|>`` (Sky-T1 / Bespoke / OpenThoughts traces): the answer
  is the solution block;
* a separate reasoning field (OpenAI-compatible ``reasoning_content`` / ``reasoning``, which vLLM's
  and others' reasoning parsers return; stored as a sample's ``reasoning``): the completion is the answer;
* a custom end marker (``end:MARKER``): everything before its first occurrence is reasoning.

``auto`` (default) takes the SkyThought markers when the text has one, else the think tags when it
has one or the prompt ends with an opened ``<think>``, else no reasoning; ``none`` never splits.
An explicitly named format (``think``, ``skythought``, ``end:MARKER``) says every completion reasons:
a completion without its closing marker is *unclosed*.

Think tags are matched with a depth counter, so a nested ``<think>`` is closed by its own ``</think>``
and a block re-opened after the first one extends the reasoning; the answer starts after the close
that ends the last block. A ``</think>`` at depth 0 after the reasoning is answer text, and a
``<think>`` left open makes the whole completion unclosed (never graded correct: when unsure, not
correct). Every path is a sequence of ``str.find`` calls that only move forward: linear time on any
input (a 2 MB unclosed trace, 10^5 repeated tags), no regular expression.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsdr_eval.errors import DsdrError

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
THOUGHT_OPEN, THOUGHT_CLOSE = "<|begin_of_thought|>", "<|end_of_thought|>"
SOLUTION_OPEN, SOLUTION_CLOSE = "<|begin_of_solution|>", "<|end_of_solution|>"
CUSTOM_PREFIX = "end:"

AUTO, NONE, THINK, SKYTHOUGHT, CUSTOM = "auto", "none", "think", "skythought", "custom"
NAMED_FORMATS = (AUTO, NONE, THINK, SKYTHOUGHT)
DEFAULT_REASONING_FORMAT = AUTO

# a sample's reasoning state (graded.jsonl ``reasoning_state``)
NO_REASONING, CLOSED, UNCLOSED = "none", "closed", "unclosed"
REASONING_STATES = (NO_REASONING, CLOSED, UNCLOSED)
FIELD = "field"  # Split.source of a reasoning read from the sample's own reasoning field


@dataclass(frozen=True)
class ReasoningFormat:
    """How a run's completions mark their reasoning: a name of ``NAMED_FORMATS`` or ``custom``
    with its ``end_marker``. ``spec`` is the text form (``--reasoning-format``, config.json)."""

    name: str = DEFAULT_REASONING_FORMAT
    end_marker: str | None = None

    @property
    def spec(self) -> str:
        return CUSTOM_PREFIX + self.end_marker if self.name == CUSTOM and self.end_marker else self.name

    def provenance(self) -> dict[str, object]:
        return {"reasoning_format": self.spec, "rules": _RULES[self.name]}


_RULES = {
    AUTO: "skythought markers if present, else <think>...</think> (or a prompt ending in an open <think>), "
          "else no reasoning; a sample's separate reasoning field (reasoning_content) is its reasoning",
    NONE: "no split: the whole completion is graded",
    THINK: "<think>...</think>, depth-matched; no closing tag = unclosed reasoning",
    SKYTHOUGHT: "<|begin_of_thought|>...<|end_of_thought|>, answer = <|begin_of_solution|> block; "
                "no end_of_thought = unclosed reasoning",
    CUSTOM: "everything before the first end marker is reasoning; no marker = unclosed reasoning",
}


def parse_reasoning_format(spec: "str | ReasoningFormat") -> ReasoningFormat:
    """``auto`` / ``none`` / ``think`` / ``skythought`` / ``end:MARKER``; DsdrError otherwise."""
    if isinstance(spec, ReasoningFormat):
        return spec
    if isinstance(spec, str) and spec in NAMED_FORMATS:
        return ReasoningFormat(spec)
    if isinstance(spec, str) and spec.startswith(CUSTOM_PREFIX):
        marker = spec[len(CUSTOM_PREFIX):]
        if not marker.strip():
            raise DsdrError(f"reasoning format {spec!r}: the end marker after '{CUSTOM_PREFIX}' is empty")
        return ReasoningFormat(CUSTOM, marker)
    raise DsdrError(f"unknown reasoning format {spec!r} (known: {', '.join(NAMED_FORMATS)}, "
                    f"or {CUSTOM_PREFIX}MARKER for a custom end marker)")


@dataclass(frozen=True)
class Split:
    """A completion split: ``answer_span`` is the slice of the completion that is graded (always set;
    empty when the reasoning never closed), ``reasoning`` the reasoning text ("" without one),
    ``state`` one of ``REASONING_STATES``, ``source`` the format that matched (None: no reasoning)."""

    answer_span: tuple[int, int]
    reasoning: str
    state: str
    source: str | None

    def answer(self, completion: str) -> str:
        return completion[self.answer_span[0]:self.answer_span[1]]


def split_completion(completion: str, fmt: "str | ReasoningFormat" = DEFAULT_REASONING_FORMAT, *,
                     reasoning: str | None = None, prompt: str | None = None) -> Split:
    """Split ``completion`` (see the module docstring). ``reasoning``: the sample's separate reasoning
    field (a server's ``reasoning_content``), which makes the whole completion the answer (unless the
    format is ``none``): the reasoning closed iff an answer followed it. ``prompt``: the rendered
    prompt, read only for an opened ``<think>`` at its end."""
    fmt = parse_reasoning_format(fmt)
    whole = (0, len(completion))
    if fmt.name == NONE:
        return Split(whole, "", NO_REASONING, None)
    if reasoning is not None and (reasoning or fmt.name != AUTO):
        state = CLOSED if completion.strip() else (UNCLOSED if reasoning.strip() or fmt.name != AUTO else NO_REASONING)
        return Split(whole, reasoning, state, FIELD)
    if fmt.name == CUSTOM:
        assert fmt.end_marker is not None
        end = completion.find(fmt.end_marker)
        if end < 0:
            return Split((0, 0), completion, UNCLOSED, CUSTOM)
        return Split((end + len(fmt.end_marker), len(completion)), completion[:end], CLOSED, CUSTOM)
    if fmt.name == SKYTHOUGHT or (fmt.name == AUTO and (THOUGHT_CLOSE in completion or THOUGHT_OPEN in completion)):
        return _split_skythought(completion)
    opened_in_prompt = isinstance(prompt, str) and prompt.rstrip().endswith(THINK_OPEN)
    if fmt.name == THINK or opened_in_prompt or THINK_CLOSE in completion or THINK_OPEN in completion:
        return _split_think(completion, opened_in_prompt or fmt.name == THINK)
    return Split(whole, "", NO_REASONING, None)


def _split_think(text: str, implicit_open: bool) -> Split:
    """Depth-matched think tags. The reasoning opens at the first tag (or at 0 when the prompt opened
    it, or when the first tag is a close: a template that opened it without a recorded prompt);
    the answer starts after the close that ends the last block."""
    next_open, next_close = text.find(THINK_OPEN), text.find(THINK_CLOSE)
    # a completion that writes its own opening tag first opens there, even when one was expected
    writes_open = next_open >= 0 and not text[:next_open].strip()
    starts_open = not writes_open and (implicit_open or (next_close >= 0 and (next_open < 0 or next_close < next_open)))
    depth = 1 if starts_open else 0
    reasoning_start = 0 if starts_open else next_open + len(THINK_OPEN)
    answer_start = None  # after the close that brought the depth to 0 last
    reasoning_end = 0
    while next_open >= 0 or next_close >= 0:  # each find starts after the tag just consumed: linear
        if next_close < 0 or 0 <= next_open < next_close:
            depth += 1
            if depth == 1 and answer_start is not None:
                answer_start = None  # a block re-opened after the answer began: its close decides
            position = next_open + len(THINK_OPEN)
            next_open = text.find(THINK_OPEN, position)
        else:
            position = next_close + len(THINK_CLOSE)
            if depth > 0:
                depth -= 1
                if depth == 0:
                    answer_start, reasoning_end = position, next_close
            next_close = text.find(THINK_CLOSE, position)
    if depth > 0 or answer_start is None:
        first_open = text.find(THINK_OPEN)
        before = 0 if starts_open or first_open < 0 else first_open
        return Split((0, before), text[reasoning_start:], UNCLOSED, THINK)
    return Split((answer_start, len(text)), text[reasoning_start:reasoning_end], CLOSED, THINK)


def _split_skythought(text: str) -> Split:
    close = text.find(THOUGHT_CLOSE)
    opening = text.find(THOUGHT_OPEN)
    start = opening + len(THOUGHT_OPEN) if 0 <= opening and (close < 0 or opening < close) else 0
    if close < 0:
        return Split((0, 0), text[start:], UNCLOSED, SKYTHOUGHT)
    after = close + len(THOUGHT_CLOSE)
    solution = text.find(SOLUTION_OPEN, after)
    if solution < 0:
        return Split((after, len(text)), text[start:close], CLOSED, SKYTHOUGHT)
    begin = solution + len(SOLUTION_OPEN)
    end = text.find(SOLUTION_CLOSE, begin)
    return Split((begin, len(text) if end < 0 else end), text[start:close], CLOSED, SKYTHOUGHT)
