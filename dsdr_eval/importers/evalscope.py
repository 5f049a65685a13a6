"""evalscope review files: ``<work_dir>/<timestamp>/reviews/<model>/<benchmark>_<subset>.jsonl``.

Two layouts, told apart line by line:

* early 2025 (evalscope 0.x, ``Evaluator`` of ``evaluator/evaluator.py``): each line is the model's
  ``chat.completion`` object with the data set row (``raw_input``), the prompt (``origin_prompt``)
  and, on each choice, evalscope's ``review``: ``gold`` (the gold answer), ``pred`` (the answer it
  extracted) and ``result`` (its verdict). The message may carry a server's ``reasoning_content``.
* current (evalscope 1.x, ``api/evaluator/cache.py`` ``ReviewResult``): ``index``, ``target`` (the
  gold), ``input`` (the rendered prompt; newer files: ``messages``) and ``sample_score``:
  ``score.prediction`` (the completion's text), ``score.extracted_prediction``, ``score.value``
  (metric -> value; ``main_score_name`` or the first key is the verdict) and ``group_id`` (the
  problem of a repeated sample). The review holds the answer text only: a reasoning model's
  thought is in the assistant message's ``reasoning`` part, in ``messages`` or else in the
  prediction file of the same name under ``predictions/<model>/`` (with ``stop_reason`` and
  ``usage.reasoning_tokens``), read when it is there.

The sampling settings and the evalscope version are in the output directory's one
``configs/task_config*.yaml`` (``task_config``); the reviews themselves record none.

The benchmark is the file name's ``<benchmark>`` (``math_500_Level 1`` -> ``math_500``: the longest
underscore prefix the registry knows, else the name without its last ``_<subset>``). Answer
extraction: evalscope's math benchmarks (math_500, aime24/25, competition_math, and gsm8k in 1.x)
call ``metrics/math/parser.py`` ``extract_answer`` -- Qwen2.5-Math's: the minerva phrase, boxed,
"the answer is", the last number -- the ``flexible`` profile; early gsm8k took the last number
(``gsm8k``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from dsdr_eval.errors import DsdrError
from dsdr_eval.importers.source import (SAMPLING_SETTINGS, SourceRecord, SourceRun, as_label, checked_gold,
                                        numbered_rows, read_source, require, setting)
from dsdr_eval.rundir.json_values import json_type

TOOL = "evalscope"
EARLY_KEYS = (frozenset({"choices", "raw_input"}), frozenset({"choices", "review_id"}))
CURRENT_KEYS = (frozenset({"index", "sample_score"}),)
EXTRACTION = ("flexible", "evalscope metrics/math/parser.py extract_answer (Qwen2.5-Math's): boxed, then "
              "'the answer is', then the last number")
EARLY_GSM8K = ("gsm8k", "evalscope 0.x gsm8k: the last number of the completion")
# evalscope's StopReason -> the finish_reason dsdr records ("length": the token budget was spent)
_STOP_REASONS = {"max_tokens": "length", "model_length": "length", "length": "length"}
_PROBLEM_FIELDS = ("problem", "question", "Question", "query")


def read(path: Path, **_: Any) -> SourceRun:
    raw, sha256 = read_source(path)
    benchmark = benchmark_name(path)
    records: list[SourceRecord] = []
    layouts: set[str] = set()
    predictions = _PredictionFile(path)
    for lineno, row in numbered_rows(raw, path, ("target",)):
        where = f"{path}:{lineno}"
        early = "choices" in row
        layouts.add("early" if early else "current")
        records.append(_early(row, lineno, where) if early else _current(row, lineno, where, predictions))
    if not records:
        raise DsdrError(f"{path}: no samples")
    if len(layouts) > 1:
        raise DsdrError(f"{path}: lines of both evalscope layouts (chat.completion reviews and sample_score "
                        "reviews) in one file: not one review file")
    notes: list[str] = []
    version, sampling, details = task_config(path, notes)
    if predictions.used:
        notes.append(f"reasoning, stop reasons and reasoning tokens from {predictions.path.name} in "
                     f"predictions/{predictions.path.parent.name}/")
    early = layouts == {"early"}
    extraction = EARLY_GSM8K if early and "gsm8k" in (benchmark or "").lower() else EXTRACTION
    details["layout"] = "chat.completion reviews (evalscope 0.x)" if early else "ReviewResult (evalscope 1.x)"
    return SourceRun(TOOL, version, benchmark, records, sampling, details, notes, sha256,
                     verdict_field="choices.review.result" if early else "sample_score.score.value",
                     extraction=extraction)


def task_config(review: Path, notes: list[str]) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
    """(evalscope version, sampling settings, other settings) from the one ``configs/task_config*.yaml``
    of the output directory (``<out>/configs/`` beside ``<out>/reviews/<model>/``): ``generation_config``'s
    temperature, top_p, max_tokens (0.x: max_new_tokens) and seed, ``evalscope_version``. None where
    it does not say; no setting at all when there is no such file, or several (a resumed run: which
    one made these reviews is unknown), or it cannot be read."""
    sampling: dict[str, Any] = {name: None for name in SAMPLING_SETTINGS}
    directory = review.parent.parent.parent / "configs"
    try:
        found = sorted(directory.glob("task_config*.yaml")) if directory.is_dir() else []
    except OSError:
        found = []
    if len(found) != 1:
        notes.append(f"{len(found) or 'no'} configs/task_config*.yaml beside reviews/"
                     f"{' (which one made these reviews is unknown)' if found else ''}: "
                     "temperature, top_p, max_tokens, seed unknown")
        return None, sampling, {}
    try:
        content = yaml.safe_load(read_source(found[0])[0].decode("utf-8"))
    except Exception as exc:  # noqa: BLE001 -- any YAML, decoding or reading failure only loses the settings
        notes.append(f"{found[0].name} not readable ({type(exc).__name__}): sampling settings unknown")
        return None, sampling, {}
    content = content if isinstance(content, dict) else {}
    generation = content.get("generation_config") if isinstance(content.get("generation_config"), dict) else {}
    max_tokens = generation.get("max_tokens", generation.get("max_new_tokens"))
    sampling.update(temperature=setting(generation.get("temperature")), top_p=setting(generation.get("top_p")),
                    max_tokens=setting(max_tokens, int), seed=setting(generation.get("seed"), int))
    if generation.get("do_sample") is False:  # greedy whatever the temperature says: not the one used
        sampling["temperature"] = None
        notes.append(f"{found[0].name}: do_sample false (greedy): temperature left unknown")
    version = content.get("evalscope_version")
    details = {"task_config": found[0].name, "run_seed": setting(content.get("seed"), int)}
    return (version if isinstance(version, str) and version else None), sampling, details


def benchmark_name(path: Path) -> str | None:
    """The evalscope benchmark of ``<benchmark>_<subset>.jsonl``: the longest name of a report
    ``reports/<model>/<benchmark>.json`` of the same output directory that the file name starts with
    (a subset may hold underscores: ``general_qa_Privacy_And_Property``), else the name without its last
    ``_<subset>`` (``math_500_Level 1`` -> ``math_500``, ``gsm8k_main`` -> ``gsm8k``)."""
    stem = path.name[:-len(".jsonl")] if path.name.endswith(".jsonl") else path.name
    reports = path.parent.parent.parent / "reports" / path.parent.name
    try:
        known = sorted((p.stem for p in reports.glob("*.json")), key=len, reverse=True) if reports.is_dir() else []
    except OSError:  # an unreadable reports directory only loses the hint
        known = []
    found = next((name for name in known if stem.startswith(f"{name}_")), None)
    return found or (stem.rsplit("_", 1)[0] if "_" in stem else stem) or None


def _early(row: dict[str, Any], lineno: int, where: str) -> SourceRecord:
    choices = require(row, "choices", where, list, "a list of choices")
    if not choices:
        raise DsdrError(f"{where}:choices: must be a non-empty list of choices")
    texts, thoughts, finishes, labels, preds = [], [], [], [], []
    for i in range(len(choices)):
        name = f"choices.{i}"
        message = require(row, f"{name}.message", where, dict, "an object (the chat message)")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise DsdrError(f"{where}:{name}.message.content: must be a string (got {json_type(content)})")
        texts.append(content or "")  # no content (a refusal): an empty completion, graded as no answer
        thought = message.get("reasoning_content")
        thoughts.append(thought if isinstance(thought, str) else None)
        finish = choices[i].get("finish_reason")
        finishes.append(_STOP_REASONS.get(finish, finish) if isinstance(finish, str) else None)
        review = require(row, f"{name}.review", where, dict, "an object (evalscope's review: gold, pred, result)")
        labels.append(_verdict(review.get("result"), where, f"{name}.review.result"))
        pred = review.get("pred")
        preds.append(pred if isinstance(pred, str) else None if pred is None else json.dumps(pred, ensure_ascii=False))
    gold, _, error = checked_gold(row, where, ("choices.0.review.gold",))
    raw_input = row.get("raw_input") if isinstance(row.get("raw_input"), dict) else {}
    problem = next((raw_input[k] for k in _PROBLEM_FIELDS if isinstance(raw_input.get(k), str)), None)
    data = row.get("origin_prompt", {}).get("data") if isinstance(row.get("origin_prompt"), dict) else None
    prompt = data[0] if isinstance(data, list) and data and isinstance(data[0], str) else None
    problem_id = next((raw_input[k] for k in ("id", "unique_id", "idx") if isinstance(raw_input.get(k), (str, int))
                       and not isinstance(raw_input.get(k), bool)), lineno - 1)
    return SourceRecord(lineno, problem_id, gold, problem, prompt, tuple(texts), tuple(labels), tuple(preds), error,
                        reasoning=tuple(thoughts), finish_reasons=tuple(finishes))


def _current(row: dict[str, Any], lineno: int, where: str, predictions: _PredictionFile) -> SourceRecord:
    index = require(row, "index", where, int, "an integer")
    score = require(row, "sample_score.score", where, dict, "an object (evalscope's Score)")
    text = require(row, "sample_score.score.prediction", where, str, "a string (the completion)")
    value = require(row, "sample_score.score.value", where, dict, "an object (metric name -> value)")
    main = score.get("main_score_name")
    key = main if isinstance(main, str) and main in value else next(iter(value), None)
    verdict = _verdict(value[key], where, f"sample_score.score.value.{key}") if key is not None else None
    extracted = score.get("extracted_prediction")
    target = row.get("target")
    gold_row = {"target": target[0] if isinstance(target, list) and len(target) == 1 else target}
    gold, _, error = checked_gold(gold_row, where, ("target",))
    sample_score = row["sample_score"]
    group = sample_score.get("group_id")
    problem_id = group if isinstance(group, (int, str)) and not isinstance(group, bool) else index
    thought, finish, tokens = _message_reasoning(row.get("messages")), None, None
    found = predictions.get(index, text)
    if found is not None:
        thought = thought if thought is not None else found[0]
        finish, tokens = found[1], found[2]
    return SourceRecord(lineno, problem_id, gold, None, _prompt(row), (text,), (verdict,),
                        (extracted if isinstance(extracted, str) else None,), error,
                        reasoning=(thought,), finish_reasons=(finish,), n_reasoning_tokens=(tokens,))


def _verdict(value: Any, where: str, name: str) -> bool | None:
    """evalscope's verdict: true/false or 0/1 (``acc``); None for a graded score (0.5 of a rouge metric)."""
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value not in (0, 1)):
        return None
    return as_label(value, where, name)


def _prompt(row: dict[str, Any]) -> str | None:
    """The prompt: 1.x's rendered ``input``, else the last user message of ``messages``."""
    if isinstance(row.get("input"), str):
        return row["input"]
    messages = row.get("messages") if isinstance(row.get("messages"), list) else []
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return _parts_text(users[-1].get("content"), "text") if users else None


def _message_reasoning(messages: Any) -> str | None:
    """The reasoning part(s) of the last assistant message (evalscope's ``ContentReasoning``)."""
    if not isinstance(messages, list):
        return None
    assistants = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    return _parts_text(assistants[-1].get("content"), "reasoning") if assistants else None


def _parts_text(content: Any, kind: str) -> str | None:
    """A message's text (``kind`` "text": a string content, or its text parts) or its reasoning parts, joined."""
    if isinstance(content, str):
        return content if kind == "text" else None
    if not isinstance(content, list):
        return None
    parts = [part.get(kind) for part in content if isinstance(part, dict) and part.get("type") == kind
             and isinstance(part.get(kind), str)]
    return "\n".join(parts) if parts else None


class _PredictionFile:
    """``predictions/<model>/<same name>`` beside ``reviews/<model>/``: per ``index``, the reasoning,
    the stop reason and the reasoning token count of its model output. A line is used only when its
    answer text is the review's prediction (a prediction file of another run, or an unreadable one,
    is not: the review alone is imported)."""

    def __init__(self, review: Path) -> None:
        model_dir = review.parent
        self.path = model_dir.parent.parent / "predictions" / model_dir.name / review.name
        self.used = False
        self._by_index: dict[int, tuple[str | None, str | None, str | None, int | None]] | None = None

    def get(self, index: int, text: str) -> tuple[str | None, str | None, int | None] | None:
        if self._by_index is None:
            self._by_index = self._load() if self.path.parent.parent.name == "predictions" else {}
        found = self._by_index.get(index)
        if found is None or found[0] != text:
            return None
        self.used = True
        return found[1:]

    def _load(self) -> dict[int, tuple[str | None, str | None, str | None, int | None]]:
        try:
            raw, _ = read_source(self.path)
            rows = list(numbered_rows(raw, self.path))
        except DsdrError:
            return {}
        found: dict[int, tuple[str | None, str | None, str | None, int | None]] = {}
        for _, row in rows:
            output = row.get("model_output") if isinstance(row.get("model_output"), dict) else {}
            choices = output.get("choices") if isinstance(output.get("choices"), list) else []
            if not isinstance(row.get("index"), int) or len(choices) != 1 or not isinstance(choices[0], dict):
                continue
            message = choices[0].get("message") if isinstance(choices[0].get("message"), dict) else {}
            stop = choices[0].get("stop_reason")
            usage = output.get("usage") if isinstance(output.get("usage"), dict) else {}
            tokens = usage.get("reasoning_tokens")
            found[row["index"]] = (_parts_text(message.get("content"), "text"),
                                   _parts_text(message.get("content"), "reasoning"),
                                   _STOP_REASONS.get(stop, stop) if isinstance(stop, str) else None,
                                   tokens if _count(tokens) else None)
        return found


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0

