"""A ``SourceRun`` -> RUN_DIR/samples.jsonl + config.json (kind "import").

Each completion is one sample in phase "sampling" (``sample_idx`` 0..n-1 per problem, in source
order), built and validated by ``dsdr_eval.samples.parse_sample`` like any samples.jsonl line, with
the source's verdict kept as ``source_correct`` and its extracted answer as ``source_extracted``.
With ``--benchmark`` naming a registered benchmark (or a benchmark JSONL), problems are matched to
it by their text (a source with only the prompt: the problem text found in it); a matched problem
takes the registry's id, gold answer (gold fixes included) and grading metadata, so the run
compares with ``dsdr-eval run`` runs of that benchmark; the source's gold is kept as ``source_gold``
where it differs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from dsdr_eval import rundir
from dsdr_eval.errors import DsdrError, warn
from dsdr_eval.importers import IMPORTERS
from dsdr_eval.importers.source import SAMPLING_SETTINGS, ProblemMatcher, SourceRecord, SourceRun
from dsdr_eval.jsonl import write_jsonl
from dsdr_eval.samples import DEFAULT_BENCHMARK, SAMPLING, Sample, parse_sample
from dsdr_eval.tasks import BENCHMARKS, load_benchmark

UNKNOWN = "unknown"


class Imported(NamedTuple):
    """What ``import_run`` wrote."""

    source: SourceRun
    benchmark: str
    n_problems: int
    n_samples: int
    n_labels: int
    config: dict[str, Any]


def import_run(tool: str, path: str | Path, out_dir: str | Path, *, benchmark: str | None = None,
               label: str | None = None, command: list[str] | None = None, data_dir: str | Path | None = None,
               **options: Any) -> Imported:
    """Read ``path`` as ``tool``'s format and write the run directory ``out_dir`` (which must not hold samples)."""
    out_dir, path = Path(out_dir), Path(path)
    if (out_dir / rundir.SAMPLES).exists():
        raise DsdrError(f"{out_dir / rundir.SAMPLES}: already exists; import into a new run directory")
    registry, name = _registry(benchmark, data_dir)
    source = IMPORTERS[tool](path, problems=registry, **options)  # a source without golds needs them
    path = source.file or path
    name = name or source.benchmark or DEFAULT_BENCHMARK
    samples, matched = _samples(source, path, name, registry)
    config = _config(source, path, name, samples, label, command, registry, matched)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(out_dir / rundir.SAMPLES, (sample.to_json() for sample in samples))
    rundir.save_config(out_dir, config)
    n_labels = sum("source_correct" in sample.extra for sample in samples)
    return Imported(source, name, len({s.problem_id for s in samples}), len(samples), n_labels, config)


def _registry(benchmark: str | None, data_dir: str | Path | None) -> tuple[ProblemMatcher | None, str | None]:
    """(the problems of a registered benchmark or a benchmark JSONL, its name); (None, name) for any
    other name (a label only)."""
    if benchmark is None:
        return None, None
    if benchmark not in BENCHMARKS and not (benchmark.endswith(".jsonl") and Path(benchmark).is_file()):
        return None, benchmark
    problems = load_benchmark(benchmark, data_dir=data_dir)
    return ProblemMatcher(problems), problems[0].benchmark


def _samples(source: SourceRun, path: Path, benchmark: str,
             registry: ProblemMatcher | None) -> tuple[list[Sample], set[str]]:
    """Every completion as a validated Sample; the ids of problems matched to the registry."""
    samples: list[Sample] = []
    next_idx: dict[str, int] = {}
    golds: dict[str, tuple[str, int]] = {}
    matched: set[str] = set()
    replaced: dict[str, int] = {}
    for record in source.records:
        where = f"{path}:{record.line}"
        row = _identity(record, benchmark, registry, where)
        if "answer_meta" in row:
            matched.add(row["problem_id"])
        first = golds.setdefault(row["problem_id"], (str(row["gold"]), record.line))
        if first[0] != str(row["gold"]):
            raise DsdrError(f"{where}: gold answer {row['gold']!r} differs from {first[0]!r} given for the same "
                            f"problem {row['problem_id']!r} on line {first[1]}")
        for j, completion in enumerate(record.completions):
            idx = next_idx.get(row["problem_id"], 0)
            next_idx[row["problem_id"]] = idx + 1
            line = {**row, "sample_idx": idx, "completion": completion, **_sampling(source),
                    **_source_fields(record, j)}
            sample, fields = parse_sample(line, where)
            samples.append(sample)
            for name in fields:
                replaced[name] = replaced.get(name, 0) + 1
    for name, count in replaced.items():
        warn(f"{path}: {name}: lone surrogate(s) (not valid Unicode) replaced by U+FFFD in {count} samples")
    if not samples:
        raise DsdrError(f"{path}: no completions to import")
    return samples, matched


def _identity(record: SourceRecord, benchmark: str, registry: ProblemMatcher | None,
              where: str) -> dict[str, Any]:
    """benchmark / problem_id / gold / problem / prompt of a record, from the registry when it matches."""
    problem_id = record.problem_id if isinstance(record.problem_id, str) else str(record.problem_id)
    row: dict[str, Any] = {"benchmark": benchmark, "phase": SAMPLING, "problem_id": problem_id, "gold": record.gold,
                           "problem": record.problem, "prompt": record.prompt}
    known = None
    if registry is not None:  # the problem's own text, else the problem quoted in the prompt (verl)
        known = registry.exact(record.problem) if record.problem else None
        known = known if known is not None or not record.prompt else registry.within(record.prompt)
    if known is not None:
        row.update(problem_id=known.id, gold=known.answer, problem=known.problem, answer_meta=known.answer_meta,
                   source_id=record.problem_id)
        if str(record.gold) != known.answer:
            row["source_gold"] = record.gold
    return row


def _sampling(source: SourceRun) -> dict[str, Any]:
    return {name: source.sampling.get(name) for name in SAMPLING_SETTINGS}


def _source_fields(record: SourceRecord, j: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if j < len(record.source_correct) and record.source_correct[j] is not None:
        out["source_correct"] = record.source_correct[j]
    if j < len(record.source_extracted) and record.source_extracted[j] is not None:
        out["source_extracted"] = record.source_extracted[j]
    return out


def _config(source: SourceRun, path: Path, benchmark: str, samples: list[Sample], label: str | None,
            command: list[str] | None, registry: ProblemMatcher | None, matched: set[str]) -> dict[str, Any]:
    """config.json of an imported run: the source (tool, version, file, sha256, every recorded
    setting, unknown ones as "unknown") and the protocol the samples were generated with."""
    per_problem: dict[str, int] = {}
    for sample in samples:
        per_problem[sample.problem_id] = per_problem.get(sample.problem_id, 0) + 1
    ns = set(per_problem.values())
    notes = list(source.notes) + ([f"completions per problem vary ({min(ns)}..{max(ns)})"] if len(ns) > 1 else [])
    bench: dict[str, Any] = {"name": benchmark, "n_problems": len(per_problem)}
    if registry is not None:
        bench["registry"] = {"n_matched": len(matched), "n_unmatched": len(per_problem) - len(matched),
                             "n_registry_problems": len(registry)}
    sampling = source.sampling
    return {
        "kind": "import", "label": label, "command": command,
        "source": {"tool": source.tool, "version": source.version, "file": str(path), "sha256": source.sha256,
                   "n_records": len(source.records), "benchmark": source.benchmark,
                   "sampling": {name: UNKNOWN if sampling.get(name) is None else sampling[name]
                                for name in SAMPLING_SETTINGS},
                   "details": source.details, "notes": notes},
        "backend": {"name": f"{source.tool} (imported)", "version": source.version},
        "protocol": {"name": f"import:{source.tool}",
                     "phases": [{"phase": SAMPLING, "n": max(ns), "temperature": sampling.get("temperature"),
                                 "top_p": sampling.get("top_p")}],
                     "max_tokens": sampling.get("max_tokens"), "seed": sampling.get("seed")},
        "benchmarks": [bench],
    }
