"""lm-evaluation-harness ``--log_samples`` files: ``samples_<task>_<date>.jsonl``.

One line per (document, filter): ``doc_id``, ``doc`` (the data set row), ``target`` (gold, as a
string), ``arguments`` (``{"gen_args_0": {"arg_0": prompt, "arg_1": generation kwargs}}``; files of
lm-eval before 0.4.3 keep the requests' own list, ``[[prompt, kwargs]]``), ``resps`` (per request,
the ``repeats`` generations: ``[[text, ...]]`` for a ``generate_until`` task; lm-eval 0.7 drops the
outer list of a single request), ``filtered_resps`` (per request, after the filter: the first
generation's extracted answer for ``take_first``), ``filter`` (its name), ``metrics`` (metric names)
and each metric's value. Files of lm-eval 0.4.0–0.4.2 have no ``filter`` / ``metrics`` keys: their
filters are told apart by a document's repeated ``doc_id`` and the metrics are the line's other 0/1 keys.

A task with several filters logs every document once per filter: one filter is imported
(``filter_name``, default the first one in the file). The per-document metric is the source's
verdict on the filtered response; with one generation per document that is the verdict on it
(``source_correct``, from the first 0/1 metric), with several it is a verdict on whatever the
filter made of them (the first one under ``take_first``, a majority vote under ``maj@k``...), which
the samples file does not say, so no completion gets one.
The gold is ``target``, else the data set's ``doc.answer``; a GSM8K-style gold (a rationale ending
``#### 18``) is the value after its last ``####`` (as lm-eval's gsm8k task compares it, commas
between digits dropped). The harness version is in the ``results_<date>.json`` written beside the
samples, when present.

Chat / thinking models: the completions are ``resps`` (the raw generations), never ``filtered_resps``, so a
``<think>...</think>`` block (or a prompt whose chat template opened ``<think>``, kept as the sample's
prompt) stays in the sample and grading splits it (``dsdr_eval.grading.reasoning``) even when the task's
filter dropped it. lm-eval's ``think_end_token`` model argument (hf, vllm) cuts every generation at that
token before it is logged: the reasoning is then not in the file at all, and a generation the token
limit cut off before the token is logged whole, indistinguishable from an answer (lm-eval issue 3382).
The results file's ``config.model_args`` says whether it was set: the import records it and says so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.importers.source import (SourceRecord, SourceRun, answers, checked_gold, get_path, numbered_rows,
                                        read_source, require, setting, string_list)
from dsdr_eval.rundir.jsonl import read_json

TOOL = "lm-eval"
FILE_NAME = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl$")
GOLD_FIELDS = ("target", "doc.answer")
# lm-eval generation kwargs -> our sampling settings
_KWARGS = {"temperature": float, "top_p": float, "max_gen_toks": int, "seed": int}
_OURS = {"temperature": "temperature", "top_p": "top_p", "max_gen_toks": "max_tokens", "seed": "seed"}
# keys every logged sample has: the others of an old (0.4.0-0.4.2) line are its metrics
_SAMPLE_KEYS = frozenset({"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics",
                          "doc_hash", "prompt_hash", "target_hash"})
_GSM8K_GOLD = re.compile(r"####\s*(?P<value>[^\n#]*?)\s*$")
_DIGIT_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def gsm8k_gold(text: str) -> str:
    """The value after the last ``####`` of a GSM8K rationale (commas between digits dropped, as the
    task's ``regexes_to_ignore`` do); any other text unchanged."""
    match = _GSM8K_GOLD.search(text)
    return _DIGIT_COMMA.sub("", match["value"]) if match and match["value"] else text


def extraction(task: str | None, filter_name: str | None) -> tuple[str, str]:
    """The answer extraction lm-eval used for ``task`` (extraction profile, why)."""
    name = (task or "").lower()
    if "gsm8k" in name:
        return "gsm8k", f"lm-eval task {task}: '#### N' (strict-match), else the last number (flexible-extract)"
    if "minerva" in name:
        return "minerva", f"lm-eval task {task}: 'Final Answer: The final answer is X' (minerva_math)"
    if filter_name and "flexible" in filter_name:
        return "flexible", f"lm-eval filter {filter_name}: boxed, then 'the answer is', then the last number"
    return "boxed", f"lm-eval task {task or '(unknown)'}: the last \\boxed{{}}"


def read(path: Path, *, filter_name: str | None = None, **_: Any) -> SourceRun:
    raw, sha256 = read_source(path)
    records: list[SourceRecord] = []
    kwargs_seen: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    seen_docs: set[Any] = set()
    repeats, from_rationale, fallback, verdicts = 0, 0, 0, set()
    has_filter = None
    for lineno, row in numbered_rows(raw, path, ("target", "doc")):
        where = f"{path}:{lineno}"
        doc_id = require(row, "doc_id", where, (int, str), "an integer")
        if has_filter is None:
            has_filter = "filter" in row
        if has_filter:
            name = require(row, "filter", where, str, "a string")
            filter_name = filter_name if filter_name is not None else name
            if name != filter_name:
                skipped[name] = skipped.get(name, 0) + 1
                continue
        elif filter_name is not None:
            raise DsdrError(f"{where}:filter: missing: this file (lm-eval 0.4.0-0.4.2) names no filters, so "
                            "--lm-eval-filter cannot choose one (its first line per document is imported without it)")
        elif doc_id in seen_docs:  # an old file: a document's next line is the next filter's
            repeats += 1
            continue
        seen_docs.add(doc_id)
        record, field, verdict = _record(row, lineno, where, doc_id)
        records.append(record)
        kwargs_seen.append(_gen_kwargs(row))
        from_rationale += field is not None and "####" in str(get_path(row, field))
        fallback += field not in (None, GOLD_FIELDS[0])
        if verdict:
            verdicts.add(verdict)
    if not records:
        raise DsdrError(f"{path}: no lines with filter {filter_name!r}" if filter_name else f"{path}: no samples")
    match = FILE_NAME.match(path.name)
    task = match["task"] if match else None
    sampling, notes = _sampling(kwargs_seen)
    if any(len(record.completions) > 1 for record in records):
        notes.append("several generations per document: the per-document metric judges the filter's output "
                     "(first generation, majority vote...), not each completion: no source_correct")
    notes += [f"skipped {n} lines of filter {name!r} (the same generations; import one filter: --lm-eval-filter)"
              for name, n in skipped.items()]
    if has_filter is False:
        notes.append("no 'filter' / 'metrics' keys (a file of lm-eval 0.4.0-0.4.2): the first line of each document "
                     "is imported" + (f", {repeats} further lines (other filters) skipped" if repeats else ""))
    if from_rationale:
        notes.append(f"gold: the value after '####' of the GSM8K rationale ({from_rationale} documents)")
    if fallback:
        notes.append(f"gold from doc.answer where 'target' is empty or missing ({fallback} documents)")
    version, details = _results_file(path, match["date"] if match else None, notes)
    same = sampling.pop("_same")
    details.update(filter=filter_name if has_filter else None,
                   generation_kwargs=kwargs_seen[0] if kwargs_seen and same else None)
    return SourceRun(TOOL, version, task, records, sampling, details, notes, sha256,
                     verdict_field=", ".join(sorted(verdicts)) or None,
                     extraction=extraction(task, filter_name if has_filter else None))


def _record(row: dict[str, Any], lineno: int, where: str,
            doc_id: Any) -> tuple[SourceRecord, str | None, str | None]:
    doc = require(row, "doc", where, dict, "an object")
    resps = require(row, "resps", where, list, "a list (one entry per request)")
    if resps and all(isinstance(item, str) for item in resps):
        resps = [resps]  # lm-eval 0.7 writes a single request's generations without the outer list
    if len(resps) != 1:
        raise DsdrError(f"{where}:resps: {len(resps)} requests for one document: a loglikelihood "
                        "(multiple-choice) task; only generate_until tasks have completions to import")
    completions = string_list(resps[0], where, "resps.0")
    gold, field, error = checked_gold(row, where, GOLD_FIELDS, transform=gsm8k_gold)
    filtered = row.get("filtered_resps")
    extracted: tuple[str | None, ...] = ()
    correct: tuple[bool | None, ...] = ()
    name, verdict = _verdict(row)
    if len(completions) == 1 and isinstance(filtered, list) and len(filtered) == 1:
        extracted = answers(filtered[0] if not isinstance(filtered[0], list) or len(filtered[0]) != 1
                            else filtered[0][0], 1)  # one generation: the filter's output and verdict are its own
        correct = () if verdict is None else (verdict,)
    problem = next((doc[k] for k in ("problem", "question", "Question") if isinstance(doc.get(k), str)), None)
    record = SourceRecord(lineno, doc_id, gold, problem, _prompt(row), completions, correct, extracted, error)
    return record, field, name


def _request(row: dict[str, Any]) -> list[Any]:
    """The first request's arguments: ``[prompt, kwargs]`` from either layout of ``arguments``."""
    args = row.get("arguments")
    if isinstance(args, dict):
        first = args.get("gen_args_0")
        return [first.get(f"arg_{i}") for i in range(len(first))] if isinstance(first, dict) else []
    if isinstance(args, list) and args and isinstance(args[0], list):
        return args[0]
    return []


def _prompt(row: dict[str, Any]) -> str | None:
    """The prompt sent: a string, or a chat request's messages as their JSON text. lm-eval 0.4.11's
    chat-completions models log ``arg_0`` as a one-item list holding the messages' JSON text (a real
    file: ``["[{\"role\": \"user\", ...}]"]``): that text is the prompt, not the list encoded again."""
    request = _request(row)
    prompt = request[0] if request else None
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    return json.dumps(prompt, ensure_ascii=False) if isinstance(prompt, (list, dict)) and prompt else None


def _verdict(row: dict[str, Any]) -> tuple[str | None, bool | None]:
    """(metric, value) of the first metric of the line whose value is a 0/1 verdict (exact_match,
    math_verify, acc ...); an old line without ``metrics``: its first other key with a 0/1 value."""
    names = row.get("metrics") if isinstance(row.get("metrics"), list) else [
        key for key in row if key not in _SAMPLE_KEYS] if "metrics" not in row else []
    for name in names:
        value = row.get(name) if isinstance(name, str) else None
        if isinstance(value, bool) or (isinstance(value, (int, float)) and value in (0, 1)):
            return name, bool(value)
    return None, None


def _gen_kwargs(row: dict[str, Any]) -> dict[str, Any]:
    request = _request(row)
    kwargs = request[1] if len(request) > 1 else None
    return kwargs if isinstance(kwargs, dict) else {}


def _sampling(kwargs_seen: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """The settings of the generation kwargs (one set for the whole file, else none is claimed)."""
    first = kwargs_seen[0] if kwargs_seen else {}
    same = all(kwargs == first for kwargs in kwargs_seen)
    notes = [] if same else ["generation kwargs differ between lines: no sampling setting recorded"]
    sampling: dict[str, Any] = {_OURS[theirs]: (setting(first.get(theirs), kind) if same else None)
                                for theirs, kind in _KWARGS.items()}
    bad = [theirs for theirs in _KWARGS if same and first.get(theirs) is not None and sampling[_OURS[theirs]] is None]
    if bad:
        notes.append(f"generation kwargs {', '.join(bad)} not a number: unknown")
    if same and first.get("do_sample") is False and sampling["temperature"] is None:
        notes.append("do_sample=false (greedy) with no temperature recorded: temperature left unknown")
    sampling["_same"] = same
    return sampling, notes


def _results_file(path: Path, date: str | None, notes: list[str]) -> tuple[str | None, dict[str, Any]]:
    """The harness version (and git hash) from ``results_<date>.json`` beside the samples, if any."""
    results = path.with_name(f"results_{date}.json") if date else None
    if results is None or not results.is_file():
        notes.append("no results_<date>.json beside the samples file: lm-eval version unknown")
        return None, {}
    try:
        content = read_json(results)
    except (DsdrError, OSError) as exc:  # a results file we cannot read only loses the version
        notes.append(f"results file not readable ({exc}): lm-eval version unknown")
        return None, {}
    content = content if isinstance(content, dict) else {}
    version = content.get("lm_eval_version")
    details = {"results_file": results.name, "git_hash": content.get("git_hash"),
               "model_name": content.get("model_name")}
    config = content.get("config")
    reasoning_args = model_reasoning_args(config.get("model_args") if isinstance(config, dict) else None)
    if reasoning_args:
        details["model_reasoning_args"] = reasoning_args
    end = reasoning_args.get("think_end_token")
    if end is not None:
        notes.append(f"lm-eval cut each generation at think_end_token {end!r} before logging it (model_args): "
                     "the reasoning is not in the file, and a generation the token limit cut off before that "
                     "token is logged whole, as if it were an answer (lm-eval issue 3382). A prompt that opened "
                     "<think> makes every response unclosed reasoning (graded truncated); --reasoning-format none "
                     "grades each response as an answer, a cut-off reasoning included. Rerun lm-eval without "
                     "think_end_token to keep the split")
    return (version if isinstance(version, str) else None), details


_REASONING_ARGS = ("think_end_token", "enable_thinking")


def model_reasoning_args(model_args: Any) -> dict[str, Any]:
    """lm-eval's reasoning model arguments (``think_end_token``, ``enable_thinking``) from a results file's
    ``config.model_args``: a dict, or lm-eval's ``key=value,key=value`` command-line string."""
    if isinstance(model_args, dict):
        return {k: model_args[k] for k in _REASONING_ARGS if model_args.get(k) is not None}
    if not isinstance(model_args, str):
        return {}
    found: dict[str, Any] = {}
    for part in model_args.split(","):
        key, sep, value = part.partition("=")
        if sep and key.strip() in _REASONING_ARGS and value.strip():
            found[key.strip()] = value.strip()
    return found
