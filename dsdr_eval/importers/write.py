"""A ``SourceRun`` -> RUN_DIR/samples.jsonl + config.json (kind "import").

Each completion is one sample in phase "sampling" (``sample_idx`` 0..n-1 per problem, in source
order), built and validated by ``dsdr_eval.rundir.samples.parse_sample`` like any samples.jsonl line, with
the source's verdict kept as ``source_correct`` and its extracted answer as ``source_extracted``.
With ``--benchmark`` naming a registered benchmark (or a benchmark JSONL), or without it when the
source's own task / data set name stands for one (``registry_name``), problems are matched to it by
their text (``source.match_key``; a source with only the prompt: the problem text found in it); a
matched problem takes the registry's id, gold answer (gold fixes included) and grading metadata, so
the run compares with ``dsdr-eval run`` runs of that benchmark; the source's gold is kept as
``source_gold`` where it differs. A record whose own gold is unusable and that matches no registry
problem is skipped (one warning; config.json ``source.skipped``; ``strict``: an error). config.json
records the answer extraction the source tool used (``"extraction"``, what ``score`` grades with).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from dsdr_eval.rundir import directory as rundir
from dsdr_eval.errors import DsdrError, warn
from dsdr_eval.grading.extraction import DEFAULT_EXTRACTION, extending_profile, get_profile
from dsdr_eval.grading.reasoning import parse_reasoning_format
from dsdr_eval.importers import IMPORTERS, detect, nemo_skills, qwen_math
from dsdr_eval.importers.tokens import count_tokens
from dsdr_eval.importers.source import SAMPLING_SETTINGS, ProblemMatcher, SourceRecord, SourceRun
from dsdr_eval.rundir.jsonl import json_document, jsonl_chunks
from dsdr_eval.rundir.samples import DEFAULT_BENCHMARK, SAMPLING, Sample, parse_sample
from dsdr_eval.tasks import BENCHMARKS, load_benchmark

UNKNOWN = "unknown"
MATCH_WARN_BELOW = 0.9  # matched fraction of a benchmark's source problems below which import warns
# a tool's own name of a data set (separators dropped, lower case) -> the registered benchmark it is
_REGISTRY_NAMES = {"math500": "math500", "hendrycksmath500": "math500", "minervamath500": "math500",
                   "aime24": "aime24", "aime2024": "aime24", "aime25": "aime25", "aime2025": "aime25",
                   "amc23": "amc23", "amc2023": "amc23", "olympiadbench": "olympiadbench"}
# Qwen2.5-Math's data/minerva_math is Minerva's OCWCourses set (lm-eval's minerva_math is MATH: not here)
# (NeMo-Skills' minerva_math is prepared from Qwen2.5-Math's data: the same set)
_TOOL_REGISTRY_NAMES = {qwen_math.TOOL: {"minervamath": "minerva"}, nemo_skills.TOOL: {"minervamath": "minerva"}}


class Imported(NamedTuple):
    """What ``import_run`` wrote."""

    source: SourceRun  # the first file's (a directory: one per benchmark, all in ``config["source"]["files"]``)
    benchmark: str  # the benchmarks, comma-separated
    n_problems: int
    n_samples: int
    n_labels: int
    config: dict[str, Any]
    matching: list[dict[str, Any]]  # per benchmark matched to a registry: name, n_matched, n_problems


class _Part(NamedTuple):
    """One source file read and turned into samples."""

    source: SourceRun
    path: Path
    benchmark: str
    samples: list[Sample]
    registry: ProblemMatcher | None
    matched: set[str]
    similar: dict[str, float]  # of the matched problem ids, those matched by similar text: their word overlap
    inferred: str | None  # why the benchmark was inferred (no --benchmark), None when given or not inferred
    skipped: list[str]  # FILE:LINE:FIELD: message of each record left out for its unusable gold


def import_run(tool: str, path: str | Path, out_dir: str | Path, *, benchmark: str | None = None,
               label: str | None = None, command: list[str] | None = None, data_dir: str | Path | None = None,
               strict: bool = False, extraction: str | None = None, reasoning_format: str | None = None,
               tokenizer: str | None = None, **options: Any) -> Imported:
    """Read ``path`` (a file, or a tool's output directory: each result file one benchmark) as ``tool``'s
    format (``auto``: detected) and write the run directory ``out_dir`` (which must not hold samples).

    A record whose gold is unusable is skipped with one warning (``strict``: DsdrError). The run
    directory is written completely or not at all (``_commit``). ``tokenizer``: count the completion tokens of
    samples the source gives no count for with this model's tokenizer (``importers.tokens``)."""
    out_dir, path = Path(out_dir), Path(path)
    if (out_dir / rundir.SAMPLES).exists():
        raise DsdrError(f"{out_dir / rundir.SAMPLES}: already exists; import into a new run directory")
    if extraction is not None:
        get_profile(extraction)  # an unknown profile is refused before anything is read
    if reasoning_format is not None:
        parse_reasoning_format(reasoning_format)  # so is an unknown reasoning format
    tool = detect.resolve(tool, path)
    files = _source_files(tool, path)
    if benchmark is not None and len(files) > 1:
        raise DsdrError(f"{path}: {len(files)} result files (one benchmark each); --benchmark names one: give "
                        "one file, or import the directory without --benchmark")
    parts = [_part(tool, file, benchmark, data_dir, strict, options) for file in files]
    names = [part.benchmark for part in parts]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        same = [str(part.path) for part in parts if part.benchmark == twice[0]]
        raise DsdrError(f"{path}: several result files for benchmark {twice[0]!r} ({', '.join(same)}): import them "
                        "one by one")
    samples = [sample for part in parts for sample in part.samples]
    config = _config(parts, path, label, command, extraction)
    samples, config["token_counts"] = count_tokens(samples, tokenizer)
    if reasoning_format is not None:  # what `score` splits completions with (absent: auto)
        config["reasoning_format"] = parse_reasoning_format(reasoning_format).spec
    _commit(out_dir, samples, config)
    n_labels = sum("source_correct" in sample.extra for sample in samples)
    matching = [{"benchmark": part.benchmark, "n_matched": len(part.matched), "n_similar": len(part.similar),
                 "least_overlap": min(part.similar.values(), default=None),
                 "n_problems": len({s.problem_id for s in part.samples}), "inferred": part.inferred}
                for part in parts if part.registry is not None]
    return Imported(parts[0].source, ", ".join(names), sum(len({s.problem_id for s in p.samples}) for p in parts),
                    len(samples), n_labels, config, matching)


def _source_files(tool: str, path: Path) -> list[Path]:
    """The files to import: PATH itself, or the result files of the directory PATH (verl: its reader
    picks one step's dump; the others: every result file of that tool, one benchmark each)."""
    if not path.is_dir() or tool == "verl":
        return [path]
    if tool == nemo_skills.TOOL:  # a benchmark is a directory of seed files: its reader reads them together
        return sorted({file.parent for file in detect.directory_files(path).get(tool, [])}) or [path]
    files, older = detect.latest_runs(detect.directory_files(path).get(tool, []), tool)
    if not files:
        raise DsdrError(f"{path}: no {tool} result files in this directory")
    if older:
        warn(f"{path}: {len(older)} earlier result file{'s' if len(older) > 1 else ''} of a task evaluated again in "
             f"the same directory left out (first: {older[0].name}); the latest of each is imported")
    return files


def _part(tool: str, file: Path, benchmark: str | None, data_dir: str | Path | None, strict: bool,
          options: dict[str, Any]) -> _Part:
    registry, name = _registry(benchmark, data_dir)
    source = IMPORTERS[tool](file, problems=registry, **options)  # a source without golds needs them
    file = source.file or file
    inferred = None
    if benchmark is None:
        registry, name, inferred = _inferred_registry(tool, source, data_dir)
    name = name or source.benchmark or DEFAULT_BENCHMARK
    samples, matched, similar, skipped = _samples(source, file, name, registry, strict)
    if skipped:
        first, more = skipped[0], len(skipped) - 1
        warn(f"{file}: skipped {len(skipped)} record{'s' if len(skipped) > 1 else ''} with an unusable gold answer "
             f"(first: {first}{f'; {more} more' if more else ''}; listed in config.json source.skipped); --strict "
             "stops instead")
    return _Part(source, file, name, samples, registry, matched, similar, inferred, skipped)


def _registry(benchmark: str | None, data_dir: str | Path | None) -> tuple[ProblemMatcher | None, str | None]:
    """(the problems of a registered benchmark or a benchmark JSONL, its name); (None, name) for any
    other name (a label only)."""
    if benchmark is None:
        return None, None
    if benchmark not in BENCHMARKS and not (benchmark.endswith(".jsonl") and Path(benchmark).is_file()):
        return None, benchmark
    problems = load_benchmark(benchmark, data_dir=data_dir)
    return ProblemMatcher(problems), problems[0].benchmark


def registry_name(tool: str, name: str | None) -> str | None:
    """The registered benchmark a tool's own data set / task name stands for (lm-eval ``aime25``,
    lighteval ``lighteval|math_500|0``, Qwen's data directory ``minerva_math``); None when none does."""
    if not name:
        return None
    parts = [part for part in name.split("|") if part and not part.isdigit()]  # lighteval suite|task|fewshot
    key = "".join(ch for ch in (parts[-1] if parts else name).lower() if ch.isalnum())
    return _TOOL_REGISTRY_NAMES.get(tool, {}).get(key) or _REGISTRY_NAMES.get(key)


def _inferred_registry(tool: str, source: SourceRun, data_dir: str | Path | None
                       ) -> tuple[ProblemMatcher | None, str | None, str | None]:
    """Without --benchmark: the registered benchmark the source's task / data set name stands for, its
    problems and why; (None, None, None) when the name stands for none or its data cannot be loaded."""
    name = registry_name(tool, source.benchmark)
    if name is None:
        return None, None, None
    try:
        problems = load_benchmark(name, data_dir=data_dir)
    except DsdrError as exc:
        source.notes.append(f"the source's {source.benchmark!r} is benchmark {name!r}, whose problems could not be "
                            f"loaded ({exc}): problems not matched")
        return None, None, None
    return ProblemMatcher(problems), name, f"{tool} names the data set {source.benchmark!r}"


def _samples(source: SourceRun, path: Path, benchmark: str, registry: ProblemMatcher | None,
             strict: bool) -> tuple[list[Sample], set[str], dict[str, float], list[str]]:
    """Every completion as a validated Sample; the ids of problems matched to the registry (and of those
    by similar text, with their word overlap: ``ProblemMatcher.similar``); the records skipped for an unusable gold (a record matched to the registry takes its gold instead).
    ``strict``: the first such record is a DsdrError."""
    samples: list[Sample] = []
    skipped: list[str] = []
    next_idx: dict[str, int] = {}
    used: dict[tuple[str, int], int] = {}  # (problem id, sample_idx) -> the source line that gave it
    golds: dict[str, tuple[str, int]] = {}
    matched: set[str] = set()
    similar: dict[str, float] = {}  # problem id -> word overlap, of the problems matched by similar text
    replaced: dict[str, int] = {}
    for record in source.records if registry is not None else ():  # exact matches first: a similar-text
        if record.problem:  # match never takes a problem another record names exactly
            registry.exact(record.problem)
    for record in source.records:
        where = f"{path}:{record.line}"
        row, overlap = _identity(record, benchmark, registry, where)
        if overlap is not None:
            similar[row["problem_id"]] = overlap
        if row["gold"] is None:
            if strict:
                raise DsdrError(f"{record.gold_error} (--strict: a record with an unusable gold stops the import)")
            skipped.append(record.gold_error or f"{where}: no gold answer")
            continue
        if "answer_meta" in row:
            matched.add(row["problem_id"])
        first = golds.setdefault(row["problem_id"], (str(row["gold"]), record.line))
        if first[0] != str(row["gold"]):
            raise DsdrError(f"{where}: gold answer {row['gold']!r} differs from {first[0]!r} given for the same "
                            f"problem {row['problem_id']!r} on line {first[1]}")
        for j, completion in enumerate(record.completions):  # the source's sample_idx (a seed), else the next
            idx = record.sample_idx[j] if j < len(record.sample_idx) else next_idx.get(row["problem_id"], 0)
            next_idx[row["problem_id"]] = max(idx + 1, next_idx.get(row["problem_id"], 0))
            if used.setdefault((row["problem_id"], idx), record.line) != record.line:
                raise DsdrError(f"{where}: sample {idx} of problem {row['problem_id']!r} is also given on line "
                                f"{used[row['problem_id'], idx]} (two source lines are one problem)")
            line = {**row, "sample_idx": idx, "completion": completion, **_sampling(source),
                    **_source_fields(record, j)}
            sample, fields = parse_sample(line, where)
            samples.append(sample)
            for name in fields:
                replaced[name] = replaced.get(name, 0) + 1
    for name, count in replaced.items():
        warn(f"{path}: {name}: lone surrogate(s) (not valid Unicode) replaced by U+FFFD in {count} samples")
    if not samples:
        why = f" ({len(skipped)} records skipped for their gold answer, first: {skipped[0]})" if skipped else ""
        raise DsdrError(f"{path}: no completions to import{why}")
    return samples, matched, similar, skipped


def _commit(out_dir: Path, samples: list[Sample], config: dict[str, Any]) -> None:
    """Write config.json and samples.jsonl in one ``rundir.commit_files``: RUN_DIR holds both or neither.

    A failure or a kill -9 before the commit record leaves only temp files (the next writer of RUN_DIR
    removes them; importing again proceeds); after it, the next command that opens RUN_DIR completes
    the renames (samples.jsonl, the file that makes RUN_DIR a run, last), so importing again is then
    refused as for any run. The caller holds the writer lock (``api.run_import``)."""
    files = {rundir.CONFIG: json_document(rundir.stamped_config(config)),
             rundir.SAMPLES: jsonl_chunks(sample.to_json() for sample in samples)}
    try:
        rundir.commit_files(out_dir, files)
    except OSError as exc:  # a full disk, a read-only directory: one line
        raise rundir.commit_failure(out_dir, "the run directory", exc) from None


def _identity(record: SourceRecord, benchmark: str, registry: ProblemMatcher | None,
              where: str) -> tuple[dict[str, Any], float | None]:
    """benchmark / problem_id / gold / problem / prompt of a record, from the registry when it matches;
    and the word overlap of a ``similar`` match (None for any other)."""
    problem_id = record.problem_id if isinstance(record.problem_id, str) else str(record.problem_id)
    row: dict[str, Any] = {"benchmark": benchmark, "phase": SAMPLING, "problem_id": problem_id, "gold": record.gold,
                           "problem": record.problem, "prompt": record.prompt}
    known, overlap = None, None
    if registry is not None:  # the problem's own text, else the problem quoted in the prompt (verl)
        known = registry.exact(record.problem) if record.problem else None
        known = known if known is not None or not record.prompt else registry.within(record.prompt)
        if known is None and record.problem:  # the same problem retyped: most words and the gold in common
            known, overlap = registry.similar(record.problem, record.gold)
            overlap = overlap if known is not None else None
    if known is not None:
        row.update(problem_id=known.id, gold=known.answer, problem=known.problem, answer_meta=known.answer_meta,
                   source_id=record.problem_id)
        if record.gold is not None and record.gold != known.answer:
            row["source_gold"] = record.gold
    return row, overlap


def _sampling(source: SourceRun) -> dict[str, Any]:
    return {name: source.sampling.get(name) for name in SAMPLING_SETTINGS}


def _source_fields(record: SourceRecord, j: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if j < len(record.source_correct) and record.source_correct[j] is not None:
        out["source_correct"] = record.source_correct[j]
    if j < len(record.source_extracted) and record.source_extracted[j] is not None:
        out["source_extracted"] = record.source_extracted[j]
    for name, values in (("reasoning", record.reasoning), ("finish_reason", record.finish_reasons),
                         ("n_reasoning_tokens", record.n_reasoning_tokens),
                         ("n_completion_tokens", record.n_completion_tokens),
                         ("n_prompt_tokens", record.n_prompt_tokens), ("seed", record.seeds)):
        if j < len(values) and values[j] is not None:
            out[name] = values[j]
    if j < len(record.source_labels):
        out.update(record.source_labels[j])
    return out


def _config(parts: list[_Part], path: Path, label: str | None, command: list[str] | None,
            extraction: str | None) -> dict[str, Any]:
    """config.json of an imported run: the source (tool, version, file, sha256, every recorded
    setting, unknown ones as "unknown", records skipped), the protocol the samples were generated
    with, the benchmarks (problems matched to the registry) and the answer extraction to grade with."""
    blocks = [_source_block(part) for part in parts]
    samples = [sample for part in parts for sample in part.samples]
    per_problem: dict[tuple[str, str], int] = {}
    for sample in samples:
        key = (sample.benchmark, sample.problem_id)
        per_problem[key] = per_problem.get(key, 0) + 1
    ns = set(per_problem.values())
    first = parts[0].source
    if len(parts) == 1:
        source = blocks[0]
        sampling = first.sampling
    else:  # a directory: one block per file; a setting is the run's when every file records the same
        sampling = {name: first.sampling.get(name) if all(part.source.sampling.get(name) == first.sampling.get(name)
                                                          for part in parts) else None for name in SAMPLING_SETTINGS}
        versions = {part.source.version for part in parts}
        source = {"tool": first.tool, "version": first.version if len(versions) == 1 else None, "file": str(path),
                  "sha256": None, "n_records": sum(block["n_records"] for block in blocks), "benchmark": None,
                  "sampling": {name: UNKNOWN if sampling.get(name) is None else sampling[name]
                               for name in SAMPLING_SETTINGS},
                  "details": {}, "notes": [f"{len(parts)} result files, one benchmark each: see files"],
                  "skipped": _skipped([message for part in parts for message in part.skipped]), "files": blocks}
    if len(ns) > 1:
        source["notes"] = [*source["notes"], f"completions per problem vary ({min(ns)}..{max(ns)})"]
    profiles = {part.benchmark: _profile(part, extraction) for part in parts}
    return {
        "kind": "import", "label": label, "command": command,
        "source": source,
        "backend": {"name": f"{first.tool} (imported)", "version": source["version"]},
        "protocol": {"name": f"import:{first.tool}",
                     "phases": [{"phase": SAMPLING, "n": max(ns), "temperature": sampling.get("temperature"),
                                 "top_p": sampling.get("top_p")}],
                     "max_tokens": sampling.get("max_tokens"), "seed": sampling.get("seed")},
        "benchmarks": [_benchmark_block(part, profiles[part.benchmark]) for part in parts],
        "extraction": _run_extraction(profiles, extraction),
    }


def _source_block(part: _Part) -> dict[str, Any]:
    source, sampling = part.source, part.source.sampling
    return {"tool": source.tool, "version": source.version, "file": str(part.path), "sha256": source.sha256,
            "n_records": len(source.records), "benchmark": source.benchmark,
            "sampling": {name: UNKNOWN if sampling.get(name) is None else sampling[name] for name in SAMPLING_SETTINGS},
            "details": source.details, "notes": list(source.notes), "skipped": _skipped(part.skipped),
            "verdict_field": source.verdict_field}


def _skipped(messages: list[str]) -> dict[str, Any]:
    """Records left out for an unusable gold: how many, and each one's ``FILE:LINE:FIELD: message``."""
    return {"n": len(messages), "records": messages}


def _benchmark_block(part: _Part, profile: dict[str, str]) -> dict[str, Any]:
    n_problems = len({sample.problem_id for sample in part.samples})
    bench: dict[str, Any] = {"name": part.benchmark, "n_problems": n_problems, "extraction": profile["profile"],
                             "extraction_reason": profile["reason"]}
    if part.registry is not None:
        bench["registry"] = {"n_matched": len(part.matched), "n_unmatched": n_problems - len(part.matched),
                             "n_matched_by_similar_text": len(part.similar),
                             "similar_text_overlap": {pid: round(v, 3) for pid, v in sorted(part.similar.items())},
                             "n_registry_problems": len(part.registry), "inferred": part.inferred}
    return bench


def _profile(part: _Part, override: str | None) -> dict[str, str]:
    """The extraction profile for a part's samples and why: --extraction, else the source tool's."""
    if override is not None:
        return {"profile": override, "reason": "--extraction"}
    if part.source.extraction is not None:
        return {"profile": part.source.extraction[0], "reason": part.source.extraction[1]}
    return {"profile": DEFAULT_EXTRACTION, "reason": "the source records no answer convention: the default"}


def _run_extraction(profiles: dict[str, dict[str, str]], override: str | None) -> str:
    """config.json's top-level "extraction": the one profile ``score`` grades the whole run with.
    Files whose tools used different conventions (an lm-eval directory with gsm8k and aime25) are
    refused rather than graded with a convention one of them did not use (a silent 0 %)."""
    if override is not None:
        return override
    names = sorted({profile["profile"] for profile in profiles.values()})
    if len(names) > 1 and extending_profile(names) is not None:  # cot + tora files: tool-output reads both alike
        return extending_profile(names)
    if len(names) > 1:
        used = ", ".join(f"{name}: {profile['profile']}" for name, profile in profiles.items())
        raise DsdrError(f"these result files use different answer conventions ({used}); a run is graded with one "
                        "extraction profile: import them one by one, or choose one with --extraction")
    return names[0]
