"""The one interface every generation backend (transformers, vLLM, OpenAI endpoint) implements.

The runner owns the plan (which samples exist, which are done, what is written); a backend only
turns ``GenerationRequest``s into completions. Requests come in *batches* that the runner forms
from the whole run's plan (not from what is still missing), so a batch is the same on a resumed
run as on an uninterrupted one and seeded engines regenerate the same text.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

from dsdr_eval.backends.sampling import SamplingSpec
from dsdr_eval.grading.reasoning import DEFAULT_REASONING_FORMAT, NO_REASONING, split_completion
from dsdr_eval.prompts import PromptTemplate, render_prompt


@dataclass(frozen=True)
class GenerationRequest:
    """``n`` rollouts of one rendered prompt with one set of sampling settings.

    ``prompt`` is the text the model continues (chat template applied when ``chat``);
    ``user_message`` is the un-templated user turn (what a chat API receives)."""

    prompt: str
    user_message: str
    n: int
    temperature: float
    top_p: float
    max_tokens: int
    seed: int
    top_k: int = 0  # 0 = off
    min_p: float = 0.0  # 0 = off
    stop: tuple[str, ...] = ()  # stop strings (the protocol's `stop`): the completion ends before the first

    def sampling_spec(self, eos_token_ids: tuple[int, ...]) -> SamplingSpec:
        """The sampling settings every backend builds its engine object from (backends.sampling)."""
        return SamplingSpec(self.temperature, self.top_p, self.max_tokens, eos_token_ids,
                            top_k=self.top_k, min_p=self.min_p, stop=self.stop)


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str | None  # "stop" (EOS / stop string) or "length" (hit max_tokens)
    n_prompt_tokens: int | None
    n_completion_tokens: int | None
    seed: int | None = None  # the seed the engine actually used for this rollout
    reasoning: str | None = None  # a server's separate reasoning (reasoning_content); None: inline or none
    n_reasoning_tokens: int | None = None
    stopped_by: str | None = None  # the stop string that ended it (None: an EOS, the budget, or not known)
    forcing: dict[str, Any] | None = None  # budget forcing's record of the rollout (dsdr_eval.run.forcing)


@dataclass(frozen=True)
class RequestResult:
    """Either ``n`` completions or an error after every retry."""

    completions: tuple[Completion, ...] | None
    error: str | None = None
    attempts: int = 1
    where: str | None = None  # e.g. the base URL that answered last

    @property
    def ok(self) -> bool:
        return self.completions is not None


# Called by a backend with (index into the request list, result) pairs as results become final;
# the runner appends them to samples.jsonl right away.
OnResults = Callable[[list[tuple[int, RequestResult]]], None]


class Backend(ABC):
    name: str = "base"
    # What one seed covers: "batch" (one seed per batch, whose composition moves the outputs) or
    # "request" (each request's own seed). `run --shard` keeps whole ones together (dsdr_eval.run.shard),
    # so a shard's samples are the whole run's; "batch" is the safe default.
    seed_scope: str = "batch"

    @abstractmethod
    def render(self, template: PromptTemplate, problem: str) -> tuple[str, str]:
        """(prompt text stored per sample, user message) for one problem."""

    @abstractmethod
    def batch_capacity(self) -> int:
        """How many rollouts (prompts x n) one batch should hold; the runner packs batches to it."""

    def max_prompts_per_batch(self) -> int:
        """How many requests one batch may hold (default: bounded by rollouts only)."""
        return self.batch_capacity()

    def max_n_per_request(self) -> int:
        """Largest ``n`` of one request; the runner splits a phase's ``n`` into pieces no larger."""
        return self.batch_capacity()

    @abstractmethod
    def generate(self, requests: Sequence[GenerationRequest], batches: Sequence[Sequence[int]],
                 on_results: OnResults) -> None:
        """Generate the listed batches (lists of indices into ``requests``), calling ``on_results``
        as soon as results are final. Per-request failures are reported as ``RequestResult.error``;
        only unrecoverable engine errors raise."""

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """name, version and every option that can change an output (recorded in config.json)."""

    def effective_sampling(self, request: GenerationRequest) -> dict[str, Any] | None:
        """The sampling settings ``generate`` uses for ``request``, read back from the engine object
        it builds for it (GenerationConfig, SamplingParams, request body); None if it cannot say."""
        return None

    @property
    def chat(self) -> bool:
        """Whether prompts go through a chat template (recorded with the template)."""
        return False

    def close(self) -> None:
        """Release engines/threads (best effort)."""


class LocalTokenizerBackend(Backend):
    """A backend that renders prompts with its own tokenizer's chat template (hf, vllm).

    Subclasses set ``self.tokenizer`` and ``self._chat`` (from ``resolve_chat_mode``)."""

    tokenizer: Any
    _chat: bool
    chat_template_kwargs: Mapping[str, Any] = MappingProxyType({})  # set by subclasses that take them
    reasoning_format: str = DEFAULT_REASONING_FORMAT  # the run's --reasoning-format: which tokens reasoned

    @property
    def chat(self) -> bool:
        return self._chat

    def render(self, template: PromptTemplate, problem: str) -> tuple[str, str]:
        return (render_prompt(template, problem, tokenizer=self.tokenizer, chat=self._chat,
                              template_kwargs=self.chat_template_kwargs), template.user_message(problem))

    def reasoning_tokens(self, text: str, token_ids: Sequence[int], prompt: str) -> int | None:
        """How many of the generated ``token_ids`` (decoded: ``text``) are inline reasoning; None without one."""
        return reasoning_token_count(text, token_ids, self._decode, self.reasoning_format, prompt)

    def _decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)


def reasoning_token_count(text: str, token_ids: Sequence[int], decode: Callable[[Sequence[int]], str],
                          reasoning_format: str, prompt: str | None) -> int | None:
    """The generated tokens that are not the graded answer, for a completion whose reasoning is inline
    (``<think>...</think>``, SkyThought markers, ``end:MARKER``: ``split_completion`` with the run's
    format and prompt, so a template that opened ``<think>`` counts from the first token); None when the
    completion has no reasoning. A local engine has no separate reasoning count (a server's reasoning
    parser returns one), and without this the run's mean reasoning tokens would be unknown.

    Counted on the generated ids, not a re-tokenization: the answer is the longest run of trailing ids
    whose decoding fits in the text after the answer's start (so a token that holds the end of the close
    tag is the reasoning's; an EOS after the answer, decoding to "", is the answer's), found by an
    exponential then binary search from the end, so the decodes are as long as the answer, not the trace
    (a 54k-token trace: 15 decodes of the whole took 3 s, this 0.08 s). Everything else -- the reasoning,
    its tags, any text before it -- is reasoning; an unclosed reasoning (no answer): every token."""
    split = split_completion(text, reasoning_format, prompt=prompt)
    if split.state == NO_REASONING:
        return None
    ids = list(token_ids)

    def tokens_within(position: int) -> int:
        """The most trailing ids whose decoding is no longer than ``text[position:]``."""
        room = len(text) - position
        fits = lambda count: len(decode(ids[len(ids) - count:])) <= room  # noqa: E731
        low, high = 0, 1  # low fits (no id always does)
        while high <= len(ids) and fits(high):
            low, high = high, high * 2
        high = min(high, len(ids) + 1)  # high does not fit, or is past every id
        while low + 1 < high:
            middle = (low + high) // 2
            low, high = (middle, high) if fits(middle) else (low, middle)
        return low

    start, end = split.answer_span
    if end <= start:
        return len(ids)
    answer = tokens_within(start) - (tokens_within(end) if end < len(text) else 0)
    return len(ids) - answer
