"""Structured judge replies: send the reply's JSON schema, fall back where a server refuses it.

Every judge request (the diversity verdict, a ``--partition judge`` pair decision) carries a
``response_format``. In mode ``auto`` the ladder is

    json_schema  ->  json_object  ->  text
    {"type": "json_schema", "json_schema": {"name", "schema", "strict": true}}   (OpenAI; vLLM:
    structured outputs, the same request shape)  ->  {"type": "json_object"}  ->  no response_format

The first request an endpoint gets is sent alone (a probe): a 400/422 whose error names the
response format (``response_format``, ``json_schema``, ``json_object``, ``structured output``,
``guided``) moves one rung down and asks again; any other outcome fixes the mode for the rest of
the run (detected once per endpoint, i.e. per ``StructuredAsker``). Which mode was used, how it
was found and every refusal (its error text) are in ``settings()``, recorded in config.json and
metrics.json. An explicit mode (``--response-format json_object``) is used alone, never changed.

The reply is still parsed and validated as before (``dsdr_eval.llm_judge.parse``): a constrained
decoder does not make a score in range or a field present by itself, and a server may ignore the
schema; such replies stay failures with a reason.

Cache (``dsdr_eval.llm_judge.cache``): key = model + messages + params, the ``response_format``
included, so a reply is reused only for the mode it was asked in; a format refusal is cached too
(it is the server's deterministic answer to that request), so a rerun finds the mode without
sending anything.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.llm_judge.cache import JudgeCache, request_key
from dsdr_eval.openai_api.client import OpenAICompatClient, Result, response_finish_reason, response_text, response_usage

JSON_SCHEMA, JSON_OBJECT, TEXT = "json_schema", "json_object", "text"
MODES = (JSON_SCHEMA, JSON_OBJECT, TEXT)
AUTO = "auto"
RESPONSE_FORMAT_CHOICES = (AUTO, *MODES)

# A 400/422 naming the response format is a refusal of the format, not of the request.
FORMAT_REFUSAL_STATUS = (400, 422)
_FORMAT_WORDS = re.compile(r"response_format|json[_ ]schema|json_object|structured[_ ]outputs?|guided", re.I)


@dataclass(frozen=True)
class OutputSchema:
    """A reply's JSON schema, as sent in ``response_format`` (``strict``: OpenAI's strict mode;
    the schema must then list every property in ``required`` with ``additionalProperties`` false)."""

    name: str
    schema: dict[str, Any]
    strict: bool = True

    def response_format(self, mode: str) -> dict[str, Any] | None:
        if mode == JSON_SCHEMA:
            return {"type": JSON_SCHEMA, "json_schema": {"name": self.name, "schema": self.schema,
                                                         "strict": self.strict}}
        if mode == JSON_OBJECT:
            return {"type": JSON_OBJECT}
        return None

    def to_config(self) -> dict[str, Any]:
        return {"name": self.name, "schema": self.schema, "strict": self.strict}


def _score(description: str) -> dict[str, Any]:
    return {"type": "number", "minimum": 0, "maximum": 10, "description": description}


# The verdict of dsdr_eval.llm_judge.prompt.USER_TEMPLATE (docs/ALGORITHMS.md §5).
VERDICT_SCHEMA = OutputSchema("diversity_verdict", {
    "type": "object",
    "properties": {"logic": _score("diversity of reasoning strategies, 0-10"),
                   "formula": _score("diversity of equations and tools, 0-10"),
                   "semantic": _score("diversity of wording and structure, 0-10"),
                   "overall": _score("mean of logic, formula and semantic")},
    "required": ["logic", "formula", "semantic", "overall"],
    "additionalProperties": False,
})

# The pair decision of dsdr_eval.llm_judge.prompt.EQUIVALENCE_TEMPLATE (docs/ALGORITHMS.md §4).
PAIR_SCHEMA = OutputSchema("pair_decision", {
    "type": "object",
    "properties": {"equivalent": {"type": "boolean", "description": "true iff the same approach"}},
    "required": ["equivalent"],
    "additionalProperties": False,
})


def check_response_format(value: str) -> str:
    if value not in RESPONSE_FORMAT_CHOICES:
        raise DsdrError(f"judge: response format must be one of {', '.join(RESPONSE_FORMAT_CHOICES)}, got {value!r}")
    return value


def is_format_refusal(result: Result) -> bool:
    """A 400/422 whose error names the response format (OpenAI: "Invalid parameter: 'response_format'
    ..."; vLLM: "... json_schema ..."): the server refuses the format, not the request."""
    return (not result.ok and result.status_code in FORMAT_REFUSAL_STATUS
            and bool(_FORMAT_WORDS.search(result.error or "")))


@dataclass
class Reply:
    """One request's outcome, from the server or the cache. ``error_kind`` as ``Result.error_kind``."""

    key: str
    mode: str
    ok: bool
    text: str | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    cache_hit: bool = False
    attempts: int = 0
    error_kind: str | None = None
    error: str | None = None


class StructuredAsker:
    """Chat requests for one ``OutputSchema`` to one endpoint: cache first, the best response format
    the endpoint accepts (found once, see the module docstring), results in request order."""

    def __init__(self, client: OpenAICompatClient, schema: OutputSchema, params: dict[str, Any], *,
                 response_format: str = AUTO, cache: JudgeCache | None = None):
        self.client = client
        self.schema = schema
        self.params = dict(params)
        self.requested = check_response_format(response_format)
        self.modes = MODES if response_format == AUTO else (response_format,)
        self.cache = cache
        self._rung = 0
        self.detected_by: str | None = None      # "probe request" | "cached reply" | "reply"
        self.refusals: list[dict[str, Any]] = []
        self.replies_by_mode: Counter[str] = Counter()

    @property
    def mode(self) -> str:
        return self.modes[self._rung]

    def request(self, messages: list[dict], mode: str) -> dict[str, Any]:
        """chat.completions.create kwargs (minus model); the cache key hashes all but the messages."""
        response_format = self.schema.response_format(mode)
        return {"messages": messages, **self.params,
                **({"response_format": response_format} if response_format else {})}

    def key(self, messages: list[dict], mode: str) -> str:
        request = self.request(messages, mode)
        request.pop("messages")
        return request_key(self.client.config.model, messages, request)

    def settings(self) -> dict[str, Any]:
        """Which response format was used and why (config.json / metrics.json)."""
        return {
            "requested": self.requested,
            "ladder": list(self.modes),
            "mode": self.mode if self.detected_by else None,
            "detected_by": self.detected_by,
            "refused": list(self.refusals),
            "replies_by_mode": dict(self.replies_by_mode),
            "schema": self.schema.to_config(),
            "rule": "the first request is sent alone; a 400/422 naming the response format moves one rung "
                    "down the ladder (detected once per endpoint); replies are validated whatever the mode",
        }

    def ask_many(self, messages: Sequence[list[dict]], *, progress: bool | None = None,
                 description: str = "judge calls", on_reply: Callable[[int, Reply], None] | None = None,
                 reask: Callable[[str | None], bool] | None = None) -> list[Reply]:
        """A ``Reply`` per message list, in order. ``reask(cached_text)`` True: ask again instead of
        using that cached reply (the new reply replaces it). ``on_reply(index, reply)`` as each arrives."""
        replies: list[Reply | None] = [None] * len(messages)

        def emit(index: int, reply: Reply) -> None:
            replies[index] = reply
            self.replies_by_mode[reply.mode] += 1
            if on_reply is not None:
                on_reply(index, reply)

        pending = list(range(len(messages)))
        if pending and self.detected_by is None:
            pending = self._probe(messages, pending, emit, reask)
        to_send: list[int] = []
        for index in pending:
            hit = self._cached(messages[index], self.mode, reask)
            if hit is not None:
                emit(index, hit)
            else:
                to_send.append(index)
        if to_send:
            mode = self.mode

            def on_result(position: int, result: Result) -> None:
                index = to_send[position]
                emit(index, self._store(messages[index], mode, result, replace=reask is not None))

            self.client.chat_many([self.request(messages[i], mode) for i in to_send], progress=progress,
                                  on_result=on_result, description=description)
            if self.detected_by is None and any(replies[i] is not None and replies[i].ok for i in to_send):
                self.detected_by = "reply"
        return [r for r in replies if r is not None]

    # ------------------------------------------------------------------ internals
    def _probe(self, messages: Sequence[list[dict]], pending: list[int], emit: Callable[[int, Reply], None],
               reask: Callable[[str | None], bool] | None) -> list[int]:
        """Find the mode with the first pending request (cache first); returns the requests left."""
        index = pending[0]
        while True:
            mode, last_rung = self.mode, self._rung == len(self.modes) - 1
            entry = self.cache.get(self.key(messages[index], mode)) if self.cache is not None else None
            if entry is not None and entry.get("refusal") and not last_rung:
                self._refused(mode, entry["refusal"], cached=True)
                continue
            hit = self._cached(messages[index], mode, reask)
            if hit is not None:
                self.detected_by = "cached reply"
                emit(index, hit)
                return pending[1:]
            result = self.client.chat(self.request(messages[index], mode))
            if is_format_refusal(result) and not last_rung:
                if self.cache is not None:
                    self.cache.put(self.key(messages[index], mode), model=self.client.config.model, text=None,
                                   finish_reason=None, usage=None, refusal=result.error, replace=True)
                self._refused(mode, result.error, cached=False)
                continue
            reply = self._store(messages[index], mode, result, replace=reask is not None)
            if reply.ok:
                self.detected_by = "probe request"
            emit(index, reply)
            return pending[1:]

    def _refused(self, mode: str, error: str | None, *, cached: bool) -> None:
        self.refusals.append({"mode": mode, "error": (error or "")[:300], "from_cache": cached})
        self._rung += 1

    def _cached(self, messages: list[dict], mode: str, reask: Callable[[str | None], bool] | None) -> Reply | None:
        if self.cache is None:
            return None
        key = self.key(messages, mode)
        entry = self.cache.get(key)
        if entry is None or entry.get("refusal") or (reask is not None and reask(entry.get("text"))):
            return None
        return Reply(key=key, mode=mode, ok=True, text=entry.get("text"), finish_reason=entry.get("finish_reason"),
                     usage=entry.get("usage") or {}, cache_hit=True)

    def _store(self, messages: list[dict], mode: str, result: Result, *, replace: bool) -> Reply:
        """A Reply from a server result; HTTP-successful replies go into the cache (failures never do)."""
        key = self.key(messages, mode)
        if not result.ok:
            return Reply(key=key, mode=mode, ok=False, attempts=result.attempts, error_kind=result.error_kind,
                         error=result.error)
        text, finish = response_text(result.response), response_finish_reason(result.response)
        usage = response_usage(result.response)
        if self.cache is not None:
            self.cache.put(key, model=self.client.config.model, text=text, finish_reason=finish, usage=usage,
                           replace=replace)
        return Reply(key=key, mode=mode, ok=True, text=text, finish_reason=finish, usage=usage,
                     attempts=result.attempts)


__all__ = ["AUTO", "MODES", "PAIR_SCHEMA", "RESPONSE_FORMAT_CHOICES", "VERDICT_SCHEMA", "OutputSchema", "Reply",
           "StructuredAsker", "check_response_format", "is_format_refusal"]
