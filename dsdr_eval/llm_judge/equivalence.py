"""An LLM judge as the pairwise equivalence of DARLING partitions (docs/ALGORITHMS.md §4: "the
partition function is pluggable: an embedding cosine threshold, an LLM judge, ...").

``--partition judge`` (built by ``dsdr_eval.diversity_metrics.partition_methods``) asks an OpenAI-compatible judge, for pairs of rollouts of one group, "same
approach?" (prompt: ``dsdr_eval.llm_judge.prompt.build_equivalence_messages``; reply
``{"equivalent": true|false}``, parsed by ``parse_equivalence``). ``darling_partition`` closes
the decisions transitively with union-find and only asks for pairs not already in one class.

Each batch of pairs the union-find driver asks for goes out through ``chat_many`` (bounded
concurrency, retries with backoff), with the reply's JSON schema as ``response_format``
(``dsdr_eval.llm_judge.structured``: json_schema, falling back to json_object / plain text where the
server refuses it, detected once). With a ``JudgeCache`` (``--partition judge`` keeps one in
RUN_DIR/judge_cache.jsonl) every decision is cached like the judge's answers (key = model + prompt
+ response format): a rerun asks nothing it asked before. A pair whose call failed or whose reply is not that JSON is
*undecided*: it is counted (by reason) and treated as "not merged" - never a guess. The counts are
reported in ``settings()["pair_decisions"]``, which run-level code writes into metrics.json /
config.json, so a run says how many of its pair decisions failed. A judge that leaves the first
``abort_if_first_undecided`` decisions all undecided (dead endpoint, wrong model name, a model that
never answers in the format) stops the run with a ``DsdrError`` instead of silently reporting every
rollout as its own class (maximal diversity).

The API key is read by ``OpenAICompatClient`` from the environment variable named by
``--judge-api-key-env``; only that *name* appears in settings, never the key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dsdr_eval.equivalence import Equivalence, GroupView
from dsdr_eval.errors import DsdrError
from dsdr_eval.llm_judge.cache import JudgeCache
from dsdr_eval.llm_judge.parse import parse_equivalence
from dsdr_eval.llm_judge.prompt import EQUIVALENCE_SYSTEM, EQUIVALENCE_TEMPLATE, build_equivalence_messages
from dsdr_eval.llm_judge.structured import AUTO, PAIR_SCHEMA, Reply, StructuredAsker, check_response_format
from dsdr_eval.openai_api.client import OpenAICompatClient

# Stable reason strings (counted in pair_decisions.undecided_by_reason).
UNPARSEABLE = "parse:no_equivalent_bool"   # HTTP-successful reply without {"equivalent": true|false}


@dataclass(frozen=True)
class JudgePairSettings:
    """How each pair is asked. The defaults match ``dsdr_eval.llm_judge.run.judge_equivalent``."""

    max_tokens: int = 32            # the reply is one short JSON object
    max_chars: int = 6000           # per solution; longer ones keep head + tail (truncate_middle)
    temperature: float = 0.0
    abort_if_first_undecided: int = 16  # 0 = never abort; see the module docstring
    response_format: str = AUTO     # auto (json_schema -> json_object -> text) or one mode

    def __post_init__(self) -> None:
        check_response_format(self.response_format)
        if self.max_tokens < 1:
            raise DsdrError(f"judge partition: max_tokens must be >= 1, got {self.max_tokens}")
        if self.max_chars < 100:
            raise DsdrError(f"judge partition: max_chars must be >= 100, got {self.max_chars}")
        if self.abort_if_first_undecided < 0:
            raise DsdrError("judge partition: abort_if_first_undecided must be >= 0")

    def request_params(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "max_tokens": self.max_tokens}


def _prompt_sha256() -> str:
    return hashlib.sha256((EQUIVALENCE_SYSTEM + "\n\n" + EQUIVALENCE_TEMPLATE).encode()).hexdigest()[:16]


class JudgeEquivalence(Equivalence):
    """Pairwise "same approach" decisions by an LLM judge; undecided pairs are not merged."""

    name = "judge"

    def __init__(self, client: OpenAICompatClient, settings: JudgePairSettings | None = None, *,
                 progress: bool | None = False, cache: JudgeCache | None = None):
        self.client = client
        self.pair_settings = settings or JudgePairSettings()
        self.progress = progress
        self.cache = cache
        self.asker = StructuredAsker(client, PAIR_SCHEMA, self.pair_settings.request_params(),
                                     response_format=self.pair_settings.response_format, cache=cache)
        # Mutated in place, and handed out by reference in settings(): code that serialises the
        # settings after the run (dsdr_eval.diversity_metrics.run does) records the final counts.
        self.counts: dict[str, Any] = {
            "asked": 0, "cache_hits": 0, "equivalent": 0, "not_equivalent": 0, "undecided": 0,
            "undecided_by_reason": {}, "first_error": None,
            "scope": "every judge call of this run, all benchmarks and both subsets (compute_run_diversity "
                     "caches decisions per problem: a pair met again in the correct-only subgroup is not re-asked)",
        }

    def settings(self) -> dict[str, Any]:
        return {
            "method": self.name,
            "rule": 'judge reply {"equivalent": true} merges the pair; closed transitively (union-find)',
            "undecided": "failed call or reply without a true/false 'equivalent' -> not merged (counted)",
            "pair_order": "(earlier, later) rollout by sample_idx; only pairs not already joined are asked",
            "prompt": {"sha256": _prompt_sha256(), "system": EQUIVALENCE_SYSTEM,
                       "user_template": EQUIVALENCE_TEMPLATE, "max_chars_per_solution": self.pair_settings.max_chars,
                       "problem_text": "not shown (as DARLING's pair classifier)"},
            "request": self.pair_settings.request_params(),
            "abort_if_first_undecided": self.pair_settings.abort_if_first_undecided,
            "structured_output": self.asker.settings(),
            "cache": str(self.cache.path) if self.cache is not None else None,
            "endpoint": self.client.config.to_config(),  # the key's env var name, never the key
            "pair_decisions": self.counts,
        }

    def messages(self, a: str, b: str) -> list[dict[str, str]]:
        """The chat messages asking whether ``a`` and ``b`` are equivalent."""
        from dsdr_eval.rundir.samples import clean_text

        # clean_text: a lone surrogate cannot be UTF-8 encoded into the HTTP body (it would fail and
        # be retried as an invalid request every time).
        return build_equivalence_messages(clean_text(a), clean_text(b), max_chars=self.pair_settings.max_chars)

    def decide(self, group: GroupView, pairs: Sequence[tuple[int, int]]) -> list[bool]:
        """bool per pair (True = merge). One batch per call (cache first); undecided -> False."""
        texts = group.texts
        replies = self.asker.ask_many([self.messages(texts[i], texts[j]) for i, j in pairs],
                                      progress=self.progress, description="judge pairs")
        decisions = [self._record(reply) for reply in replies]
        self._check_not_hopeless()
        return [bool(d) for d in decisions]

    def ask(self, a: str, b: str) -> bool | None:
        """One pair, one request: True/False, or None when undecided (counted like every decision)."""
        return self._record(self.asker.ask_many([self.messages(a, b)], progress=False)[0])

    def _record(self, reply: Reply) -> bool | None:
        counts = self.counts
        counts["asked"] += 1
        counts["cache_hits"] += reply.cache_hit
        if reply.ok:
            decision = parse_equivalence(reply.text)
            reason, error = UNPARSEABLE, f"reply {reply.text!r:.200}"
        else:
            decision = None
            reason, error = f"http_error:{reply.error_kind}", reply.error  # already redacted by the client
        if decision is None:
            counts["undecided"] += 1
            by_reason = counts["undecided_by_reason"]
            by_reason[reason] = by_reason.get(reason, 0) + 1
            if counts["first_error"] is None:
                counts["first_error"] = f"{reason}: {error}"[:400]
        else:
            counts["equivalent" if decision else "not_equivalent"] += 1
        return decision

    def _check_not_hopeless(self) -> None:
        limit = self.pair_settings.abort_if_first_undecided
        counts = self.counts
        if limit and counts["asked"] >= limit and counts["undecided"] == counts["asked"]:
            reasons = ", ".join(f"{k}={v}" for k, v in counts["undecided_by_reason"].items())
            raise DsdrError(
                f"--partition judge: the first {counts['asked']} pair decisions were all undecided ({reasons}); "
                f"first: {counts['first_error']}. Check --judge-base-url, --judge-model and --judge-api-key-env "
                f"(endpoint {list(self.client.config.base_urls)}, model {self.client.config.model!r}); "
                "nothing was written.")

    def close(self) -> None:
        self.client.close()


__all__ = ["JudgeEquivalence", "JudgePairSettings"]
