"""OpenAI Batch API output files (``BatchRequestOutput`` per line), with the batch's input file.

Output line: ``custom_id``, ``response`` (``status_code``, ``request_id``, ``body``: a chat completion
with ``choices[].message.content`` or a completion with ``choices[].text``, ``finish_reason``,
``usage``, ``model``) and ``error``. A reasoning model's server also sends ``message.reasoning_content``
(or ``reasoning``) and ``usage.completion_tokens_details.reasoning_tokens``: kept as the samples'
``reasoning`` / ``n_reasoning_tokens``, with each choice's ``finish_reason``.
Input line (``--batch-input``): ``custom_id``, ``method``, ``url``,
``body`` (``messages`` or ``prompt`` and the sampling settings: temperature, top_p, max_tokens /
max_completion_tokens, seed, n). Neither carries a gold answer, so the problems come from a
benchmark (``--benchmark`` registered or a benchmark JSONL): a request is the problem whose text
appears in its prompt (the longest one, when several do). Failed requests have no completion and
are left out (counted in the notes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.importers.source import (ProblemMatcher, SourceRecord, SourceRun, numbered_rows, read_source, require,
                                        setting)
from dsdr_eval.rundir.json_values import json_type

TOOL = "openai-batch"
_SETTINGS = {"temperature": "temperature", "top_p": "top_p", "seed": "seed"}


def read(path: Path, *, batch_input: Path | None = None, problems: ProblemMatcher | None = None,
         **_: Any) -> SourceRun:
    if batch_input is None or problems is None:
        raise DsdrError(f"{path}: an OpenAI batch output has no prompts and no gold answers: give the batch's "
                        "input file (--batch-input FILE) and the benchmark it asked (--benchmark NAME, a registered "
                        "benchmark or a benchmark .jsonl)")
    requests = _inputs(Path(batch_input))
    raw, sha256 = read_source(path)
    matcher = problems
    records, failed, bodies = [], 0, []
    for lineno, row in numbered_rows(raw, path):
        where = f"{path}:{lineno}"
        custom_id = require(row, "custom_id", where, str, "a string")
        if custom_id not in requests:
            raise DsdrError(f"{where}:custom_id: {custom_id!r} is not in the batch input file {batch_input}")
        response = row.get("response")
        if row.get("error") is not None or not isinstance(response, dict) or response.get("status_code") != 200:
            failed += 1
            continue
        prompt, settings = requests[custom_id]
        problem = matcher.within(prompt)
        if problem is None:
            raise DsdrError(f"{where}:custom_id: no problem of the benchmark appears in the prompt of request "
                            f"{custom_id!r} (is --benchmark the data set this batch asked?)")
        body = require(row, "response.body", where, dict, "an object")
        completions, reasoning, finish_reasons = _completions(body, where)
        bodies.append(settings)
        records.append(SourceRecord(lineno, problem.id, problem.answer, problem.problem, prompt, completions,
                                    reasoning=reasoning, finish_reasons=finish_reasons,
                                    n_reasoning_tokens=_reasoning_tokens(body, len(completions)),
                                    n_completion_tokens=_completion_tokens(body, len(completions))))
    if not records:
        raise DsdrError(f"{path}: no successful request to import ({failed} failed)")
    first = bodies[0]
    same = all(body == first for body in bodies)
    notes = [] if same else ["sampling settings differ between requests: none recorded"]
    if failed:
        notes.append(f"{failed} failed requests (error or non-200 status) have no completion: not imported")
    sampling = {ours: setting(first.get(theirs), int if ours == "seed" else float) if same else None
                for theirs, ours in _SETTINGS.items()}
    sampling["max_tokens"] = setting(first.get("max_tokens", first.get("max_completion_tokens")), int) if same else None
    details = {"batch_input": str(batch_input), "model": first.get("model") if same else None}
    return SourceRun(TOOL, None, None, records, sampling, details, notes, sha256,
                     extraction=("boxed", "openai-batch: the prompt's own convention is not recorded; the default"))


def _inputs(path: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """custom_id -> (prompt text, request body without the prompt) of the batch input file."""
    raw, _ = read_source(path)
    requests: dict[str, tuple[str, dict[str, Any]]] = {}
    for lineno, row in numbered_rows(raw, path):
        where = f"{path}:{lineno}"
        custom_id = require(row, "custom_id", where, str, "a string")
        body = require(row, "body", where, dict, "an object")
        if isinstance(body.get("messages"), list):
            users = [m for m in body["messages"] if isinstance(m, dict) and m.get("role") == "user"]
            if not users:
                raise DsdrError(f"{where}:body.messages: no user message")
            prompt = _text(users[-1].get("content"), where)
        else:
            prompt = require(row, "body.prompt", where, str, "a string (or give body.messages)")
        requests[custom_id] = (prompt, {k: v for k, v in body.items() if k not in ("messages", "prompt")})
    return requests


def _text(content: Any, where: str) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    raise DsdrError(f"{where}:body.messages: user content must be a string or a list of parts "
                    f"(got {json_type(content)})")


def _reasoning_tokens(body: dict[str, Any], n: int) -> tuple[int | None, ...]:
    """The usage's reasoning token count, for a body of one choice (usage counts all choices together)."""
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    details = usage.get("completion_tokens_details") if isinstance(usage.get("completion_tokens_details"), dict) else {}
    count = details.get("reasoning_tokens")
    return (count,) if n == 1 and isinstance(count, int) and not isinstance(count, bool) and count >= 0 else ()


def _completion_tokens(body: dict[str, Any], n: int) -> tuple[int | None, ...]:
    """The usage's completion token count, for a body of one choice (the budget curve's counts)."""
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    count = usage.get("completion_tokens")
    return (count,) if n == 1 and isinstance(count, int) and not isinstance(count, bool) and count >= 0 else ()


def _completions(body: dict[str, Any], where: str) -> tuple[tuple[str, ...], tuple[str | None, ...],
                                                            tuple[str | None, ...]]:
    """(texts, reasoning, finish reasons) of the choices, one entry per choice."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise DsdrError(f"{where}:response.body.choices: must be a non-empty list (got {json_type(choices)})")
    texts, reasoning, finish_reasons = [], [], []
    for i, choice in enumerate(choices):
        name = f"response.body.choices.{i}"
        if not isinstance(choice, dict):  # never an empty completion in its place: the file is not a batch output
            raise DsdrError(f"{where}:{name}: must be an object (a choice; got {json_type(choice)})")
        message = choice.get("message")
        if message is not None and not isinstance(message, dict):
            raise DsdrError(f"{where}:{name}.message: must be an object (got {json_type(message)})")
        if message is None and "text" not in choice:
            raise DsdrError(f"{where}:{name}: has neither 'message' (chat completion) nor 'text' (completion)")
        text = message.get("content") if message is not None else choice.get("text")
        if text is not None and not isinstance(text, str):
            raise DsdrError(f"{where}:{name}: content must be a string (got {json_type(text)})")
        texts.append(text or "")  # no content (a refusal, a tool call): an empty completion, graded as no answer
        thought = next((message.get(name) for name in ("reasoning_content", "reasoning")
                        if message is not None and isinstance(message.get(name), str)), None)
        reasoning.append(thought)
        finish = choice.get("finish_reason")
        finish_reasons.append(finish if isinstance(finish, str) else None)
    return tuple(texts), tuple(reasoning), tuple(finish_reasons)
