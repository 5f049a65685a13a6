"""Budget forcing (s1-style; issue 45 item 4): ``run --thinking-budget N``.

Each rollout is generated in two parts by the run's own backend (``BudgetForcing`` wraps it):

1. The reasoning, with at most N tokens and the end-of-reasoning marker (default ``</think>``) as an extra
   stop string. It ends either *naturally* -- the model wrote the marker (or ended, EOS / a stop string of the
   protocol, without one: then there is nothing to add and the rollout is complete) -- or is *forced*: it
   spent its N tokens.
2. The answer. A natural end continues after the marker; a forced one after the marker and the answer cue
   (default ``"\\n\\nFinal Answer: "``, s1's). The answer has its own budget (``--answer-budget``), its own
   seed (derived from the rollout's) and the protocol's stop strings; its prompt is the rollout's prompt,
   the reasoning text, the marker (and the cue): a text continuation, so it needs a backend that takes a
   prompt text -- ``hf``, ``vllm`` and ``openai --api completions`` (a chat API would need a continued
   assistant turn, which the OpenAI API does not offer: refused).

The sample's completion is reasoning + marker (+ cue) + answer, graded as any completion (the marker splits
reasoning from answer). Its token counts are the generated ones (the marker and cue are not generated):
``n_completion_tokens`` = reasoning + answer tokens, ``n_reasoning_tokens`` = the reasoning's, and
``finish_reason`` the answer's. Every sample keeps both ends in ``budget_forcing``: ``forced`` (true: the
reasoning was cut at N and the marker and cue inserted), ``reasoning_finish`` (the reasoning's own finish:
``length`` when forced, ``stop`` at its natural end), ``reasoning_tokens``, ``answer_tokens``, ``inserted``
(the text inserted). config.json records the settings (``budget_forcing``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from dsdr_eval.backends.base import Backend, Completion, GenerationRequest, OnResults, RequestResult
from dsdr_eval.errors import DsdrError
from dsdr_eval.prompts import PromptTemplate
from dsdr_eval.protocols import derive_seed

DEFAULT_END_MARKER = "</think>"
DEFAULT_ANSWER_CUE = "\n\nFinal Answer: "  # s1 (Muennighoff et al. 2025) appends "Final Answer:" after the marker
DEFAULT_ANSWER_BUDGET = 512


@dataclasses.dataclass(frozen=True)
class ForcingSettings:
    thinking_budget: int
    answer_budget: int = DEFAULT_ANSWER_BUDGET
    end_marker: str = DEFAULT_END_MARKER
    answer_cue: str = DEFAULT_ANSWER_CUE

    def to_config(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class BudgetForcing(Backend):
    """The run's backend with each rollout generated as reasoning (<= N tokens) then answer (module docstring)."""

    def __init__(self, inner: Backend, settings: ForcingSettings) -> None:
        if inner.name == "openai" and getattr(inner, "api", None) == "chat":
            raise DsdrError("--thinking-budget needs a backend that continues a prompt text: hf, vllm or --backend "
                            "openai --api completions (a chat API cannot continue the assistant's turn)")
        self.inner, self.settings = inner, settings
        self.name = inner.name

    # the plan and batching are the inner backend's
    def render(self, template: PromptTemplate, problem: str) -> tuple[str, str]:
        return self.inner.render(template, problem)

    def batch_capacity(self) -> int:
        return self.inner.batch_capacity()

    def max_prompts_per_batch(self) -> int:
        return self.inner.max_prompts_per_batch()

    def max_n_per_request(self) -> int:
        return self.inner.max_n_per_request()

    @property
    def chat(self) -> bool:
        return self.inner.chat

    def config(self) -> dict[str, Any]:
        return {**self.inner.config(), "budget_forcing": self.settings.to_config()}

    def effective_sampling(self, request: GenerationRequest) -> dict[str, Any] | None:
        return self.inner.effective_sampling(self._reasoning_request(request))

    def close(self) -> None:
        self.inner.close()

    def _reasoning_request(self, request: GenerationRequest) -> GenerationRequest:
        stop = request.stop if self.settings.end_marker in request.stop else (*request.stop, self.settings.end_marker)
        return dataclasses.replace(request, max_tokens=self.settings.thinking_budget, stop=stop)

    def generate(self, requests: Sequence[GenerationRequest], batches: Sequence[Sequence[int]],
                 on_results: OnResults) -> None:
        reasoning_requests = [self._reasoning_request(r) for r in requests]
        for batch in batches:
            first: dict[int, RequestResult] = {}
            self.inner.generate(reasoning_requests, [batch], lambda results: first.update(results))
            on_results(self._answers(requests, batch, first))

    def _answers(self, requests: Sequence[GenerationRequest], batch: Sequence[int],
                 first: dict[int, RequestResult]) -> list[tuple[int, RequestResult]]:
        """Each rollout of ``batch`` whose reasoning ended at the marker or was cut gets its answer generated."""
        follow: list[tuple[int, int, str]] = []  # (request index, rollout j, inserted text)
        continuations: list[GenerationRequest] = []
        for i in batch:
            result = first.get(i)
            for j, part in enumerate(result.completions or () if result is not None else ()):
                inserted = self._inserted(part, requests[i])
                if inserted is None:
                    continue
                follow.append((i, j, inserted))
                continuations.append(GenerationRequest(
                    requests[i].prompt + part.text + inserted, requests[i].user_message, 1, requests[i].temperature,
                    requests[i].top_p, self.settings.answer_budget, derive_seed(requests[i].seed, "answer", j),
                    top_k=requests[i].top_k, min_p=requests[i].min_p, stop=requests[i].stop))
        answers: dict[int, RequestResult] = {}
        if continuations:
            size = max(1, min(self.inner.batch_capacity(), self.inner.max_prompts_per_batch()))
            pieces = [list(range(s, min(s + size, len(continuations)))) for s in range(0, len(continuations), size)]
            self.inner.generate(continuations, pieces, lambda results: answers.update(results))
        return [(i, self._combine(i, first.get(i), follow, answers)) for i in batch]

    def _inserted(self, part: Completion, request: GenerationRequest) -> str | None:
        """What goes between the reasoning and the answer: the marker (natural end), marker + cue (cut at N);
        None when the rollout is complete (it ended, EOS or a protocol stop string, without the marker)."""
        if part.finish_reason == "length":
            return self.settings.end_marker + self.settings.answer_cue
        ended_at_marker = part.stopped_by == self.settings.end_marker and self.settings.end_marker not in request.stop
        return self.settings.end_marker if ended_at_marker else None

    def _combine(self, i: int, result: RequestResult | None, follow: list[tuple[int, int, str]],
                 answers: dict[int, RequestResult]) -> RequestResult:
        if result is None or not result.ok:
            return result or RequestResult(None, "no result for the reasoning part")
        completions = []
        for j, part in enumerate(result.completions or ()):
            position = next((k for k, (ii, jj, _) in enumerate(follow) if (ii, jj) == (i, j)), None)
            record = {"forced": part.finish_reason == "length", "reasoning_finish": part.finish_reason,
                      "reasoning_tokens": part.n_completion_tokens, "answer_tokens": 0, "inserted": ""}
            if position is None:
                completions.append(dataclasses.replace(part, forcing=record))
                continue
            answer = answers.get(position)
            if answer is None or not answer.ok:
                return RequestResult(None, f"answer part: {answer.error if answer is not None else 'no result'}")
            tail = (answer.completions or ())[0]
            inserted = follow[position][2]
            record.update(answer_tokens=tail.n_completion_tokens, inserted=inserted)
            total = None if part.n_completion_tokens is None or tail.n_completion_tokens is None \
                else part.n_completion_tokens + tail.n_completion_tokens
            completions.append(Completion(part.text + inserted + tail.text, tail.finish_reason, part.n_prompt_tokens,
                                          total, part.seed, n_reasoning_tokens=part.n_completion_tokens,
                                          forcing=record))
        return RequestResult(tuple(completions), None, result.attempts, result.where)

