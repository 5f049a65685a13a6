"""An LLM judge's second opinion on answers: is this extracted answer equivalent to the gold?

``dsdr-eval score --judge-grading rejected|all`` (``dsdr_eval.scoring.judge_grading``) asks it beside the
symbolic grader, for forms no symbolic rule should try to settle (an ODE's general solution with
its constants renamed, a set described in words). Each distinct (problem, gold, answer) is asked
once per run; replies go through the same machinery as the other judge requests
(``StructuredAsker``: the reply's JSON schema as ``response_format`` with the json_object / text
fallback, bounded concurrency, retries, the content-hash ``JudgeCache``) and the same strict parse
as a pair decision (``parse_equivalence``: ``{"equivalent": true|false}``, one decision only).

The answer is quoted as a JSON string in the prompt (``dsdr_eval.llm_judge.prompt.build_answer_messages``)
so a hostile answer cannot pose as the prompt's text; a reply that is not exactly one decision is
*unsure* (``None``), a failed call *unavailable* (``None``): neither is ever correct.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from dsdr_eval.errors import DsdrError
from dsdr_eval.llm_judge.cache import JudgeCache
from dsdr_eval.llm_judge.parse import parse_equivalence
from dsdr_eval.llm_judge.prompt import answer_prompt_record, build_answer_messages
from dsdr_eval.llm_judge.structured import AUTO, OutputSchema, StructuredAsker, check_response_format
from dsdr_eval.openai_api.client import OpenAICompatClient

# judge_note values of an asked sample (graded.jsonl); "unsure: ..." / "unavailable: ..." carry a reason
EQUIVALENT, NOT_EQUIVALENT, UNSURE, UNAVAILABLE = "equivalent", "not equivalent", "unsure", "unavailable"

ANSWER_SCHEMA = OutputSchema("answer_verdict", {
    "type": "object",
    "properties": {"equivalent": {"type": "boolean",
                                  "description": "true iff the candidate answer equals the reference answer"}},
    "required": ["equivalent"],
    "additionalProperties": False,
})


@dataclass(frozen=True)
class AnswerQuestion:
    """One thing to ask: the problem, its gold answer and a candidate (an extracted answer)."""

    problem: str | None
    gold: str
    answer: str

    def content_key(self) -> str:
        """The question's content hash: equal questions are asked once per run."""
        text = json.dumps([self.problem, self.gold, self.answer], ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class AnswerVerdict:
    """The judge's verdict (None: unsure or unavailable) and a note saying which and why."""

    verdict: bool | None
    note: str


@dataclass(frozen=True)
class AnswerJudgeSettings:
    max_tokens: int = 32          # the reply is one short JSON object
    max_answer_chars: int = 2000  # per answer and gold; longer ones keep head + tail
    temperature: float = 0.0
    response_format: str = AUTO

    def __post_init__(self) -> None:
        check_response_format(self.response_format)
        if self.max_tokens < 1 or self.max_answer_chars < 100:
            raise DsdrError("judge grading: max_tokens must be >= 1 and max_answer_chars >= 100")

    def request_params(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "max_tokens": self.max_tokens}


def endpoint_hosts(base_urls: Sequence[str]) -> list[str]:
    """scheme://host[:port] of each base URL: no user, password, path or query (where keys hide)."""
    hosts = []
    for url in base_urls:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        hosts.append(f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}")
    return hosts


class AnswerJudge:
    """Asks an OpenAI-compatible judge whether answers equal their gold (see the module docstring)."""

    def __init__(self, client: OpenAICompatClient, settings: AnswerJudgeSettings | None = None, *,
                 cache: JudgeCache | None = None, progress: bool | None = False):
        self.client = client
        self.settings = settings or AnswerJudgeSettings()
        self.cache = cache
        self.progress = progress
        self.asker = StructuredAsker(client, ANSWER_SCHEMA, self.settings.request_params(),
                                     response_format=self.settings.response_format, cache=cache)
        self.counts = {"asked": 0, "cache_hits": 0, "first_error": None}

    def messages(self, question: AnswerQuestion) -> list[dict[str, str]]:
        from dsdr_eval.rundir.samples import clean_text

        # clean_text: a lone surrogate cannot be UTF-8 encoded into the HTTP body
        return build_answer_messages(clean_text(question.problem or ""), clean_text(question.gold),
                                     clean_text(question.answer), max_chars=self.settings.max_answer_chars)

    def judge(self, questions: Sequence[AnswerQuestion]) -> list[AnswerVerdict]:
        """A verdict per question, in order; each distinct question is asked once."""
        distinct: dict[str, AnswerQuestion] = {}
        for question in questions:
            distinct.setdefault(question.content_key(), question)
        keys = list(distinct)
        replies = self.asker.ask_many([self.messages(distinct[k]) for k in keys], progress=self.progress,
                                      description="judge answers")
        by_key: dict[str, AnswerVerdict] = {}
        for key, reply in zip(keys, replies):
            self.counts["asked"] += 1
            self.counts["cache_hits"] += reply.cache_hit
            if not reply.ok:
                by_key[key] = AnswerVerdict(None, f"{UNAVAILABLE}: {reply.error_kind}")
                error = reply.error  # already redacted by the client
            else:
                decision = parse_equivalence(reply.text)
                note = UNSURE + ": no single true/false 'equivalent' in the reply" if decision is None else (
                    EQUIVALENT if decision else NOT_EQUIVALENT)
                by_key[key] = AnswerVerdict(decision, note)
                error = None if decision is not None else f"reply {reply.text!r:.200}"
            if error is not None and self.counts["first_error"] is None:
                self.counts["first_error"] = error[:400]
        return [by_key[question.content_key()] for question in questions]

    def provenance(self, mode: str) -> dict[str, Any]:
        """The judge's settings for metrics.json (hosts only: never a key, a user or a query)."""
        config = self.client.config
        return {"mode": mode, "model": config.model, "endpoint_hosts": endpoint_hosts(config.base_urls),
                "api_key_env": config.api_key_env, "prompt": answer_prompt_record(),
                "request": self.settings.request_params(), "max_answer_chars": self.settings.max_answer_chars,
                "structured_output": self.asker.settings(), "calls": dict(self.counts),
                "cache": self.cache.path.name if self.cache is not None else None,
                "endpoint_policy": {k: getattr(config, k) for k in ("max_concurrency", "max_retries", "timeout_s")}}

    def close(self) -> None:
        self.client.close()


__all__ = ["ANSWER_SCHEMA", "AnswerJudge", "AnswerJudgeSettings", "AnswerQuestion", "AnswerVerdict", "endpoint_hosts"]
