"""One typed reader for an evaluation run directory: ``load_run(RUN_DIR) -> RunResults``.

``dsdr-eval report`` and the dashboard read a run only through this module, so they show the
same numbers. It reads the documented fields of ``metrics.json`` (docs/run_directory.md "metrics.json": written
by ``rundir.update_metrics``, the scorer's section plus ``benchmarks.<b>.diversity`` and
``benchmarks.<b>.judge``) and the protocol of ``config.json`` (or, without one, of the per-sample
fields of ``graded.jsonl``). Fields it does not know are ignored (a newer writer may add some);
a documented field of the wrong type, or a block of an unknown layout, is a ``DsdrError`` naming
``FILE: field`` (exit code 2 at the CLI), never a guess.

Shapes (fractions in [0, 1]; flat metric names ``pass1``, ``avg@n``, ``avg@16``, ``pass@8``, ``maj@4``)::

    RunResults.benchmarks[name] -> BenchmarkResults(scores: Scores, diversity, judge, counts ...)
    RunResults.average          -> Aggregate(scores, benchmarks)   (macro mean over benchmarks)
    Scores.value("pass@8") -> float | None;  Scores.interval("pass@8") -> (lo, hi) | None
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from dsdr_eval.rundir import result_fields as fields
from dsdr_eval.rundir.budget_curves import read_budget_curve
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.errors import DsdrError, warn
from dsdr_eval.protocols import Phase, Protocol
from dsdr_eval.rundir.jsonl import read_json
from dsdr_eval.rundir.samples import GradedSample, Sample, iter_records, parse_graded, parse_sample

AVERAGE = "average"  # the benchmark name of the macro-average rows in the records below
# the metric@k families metrics.json holds per k (dsdr_eval/scoring/metrics.py): unbiased pass@k, majority vote, Avg@k
AT_K_FAMILIES = ("pass", "maj", "avg")


class BenchmarkMap(dict):
    """``RunResults.benchmarks``: a dict whose missing key says which run lacks it and what it has,
    instead of a bare KeyError('aime')."""

    def __init__(self, items: Mapping[str, Any], where: str) -> None:
        super().__init__(items)
        self.where = where

    def __missing__(self, name: str) -> Any:
        raise KeyError(f"no benchmark {name!r} in {self.where} (it has: {', '.join(self) or 'none'})")


# The paper's Table 1 column order, then the other benchmarks this project ships.
BENCHMARK_ORDER = ("aime24", "aime25", "math500", "minerva", "olympiadbench", "amc23")
JUDGE_GRADING_ACCURACY = ("symbolic", "judge", "both", "any")  # benchmarks.<b>.judge_grading.accuracy
JUDGE_GRADING_COUNTS = ("n_samples", "n_asked", "n_disagree", "n_judge_only", "n_symbolic_only", "n_unsure",
                        "n_unavailable")
_COUNT_FIELDS = ("n_problems", "n_problems_pass1", "n_samples_per_problem", "n_samples_per_problem_max")

# benchmarks.<b>.diversity as `dsdr-eval diversity` writes it (dsdr_eval/diversity_metrics/run.py): per
# subset "all" / "correct", DSDR's D_emb ("d_emb") and D_eq ("d_eq"), DARLING's Div ("darling_div")
# and the Vendi score of order 1 of the embedding kernel ("vendi_embedding" -> "1").
DIVERSITY_SUBSETS = ("all", "correct")
DIVERSITY_PATHS = {"semantic": ("d_emb",), "formula": ("d_eq",), "partition": ("darling_div",),
                   "vendi": ("vendi_embedding", "1")}
DIVERSITY_MEASURES = tuple(DIVERSITY_PATHS)
JUDGE_AXES = ("overall", "logic", "formula", "semantic")  # benchmarks.<b>.judge: means 0-10 (judge/run.py)




def order_benchmarks(names) -> list[str]:
    """Paper order first (Table 1), then any other benchmark alphabetically."""
    names = set(names)
    known = [b for b in BENCHMARK_ORDER if b in names]
    return known + sorted(names - set(BENCHMARK_ORDER))


# ----------------------------------------------------------------------------- the records

@dataclass(frozen=True)
class Scores:
    """Accuracy metrics (fractions) and their 95% bootstrap CIs, keyed by flat metric name."""

    values: Mapping[str, float] = field(default_factory=dict)
    ci95: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def value(self, metric: str) -> float | None:
        return self.values.get(metric)

    def interval(self, metric: str) -> tuple[float, float] | None:
        return self.ci95.get(metric)

    def at_k(self, family: str = "pass") -> dict[int, float]:
        """k -> value of ``pass@k`` (or ``maj@k``, ``avg@k``), in increasing k; {} when the run has none of
        that family. An unknown family is a DsdrError, not {} (a typo must not read as "no values")."""
        if family not in AT_K_FAMILIES:
            raise DsdrError(f"at_k({family!r}): unknown metric family; one of {', '.join(AT_K_FAMILIES)}")
        prefix = f"{family}@"
        return dict(sorted((int(m[len(prefix):]), v) for m, v in self.values.items()
                           if m.startswith(prefix) and m[len(prefix):].isdigit()))

    @classmethod
    def read(cls, entry: dict[str, Any], where: str) -> Scores:
        ci = fields.obj(entry["ci95"], f"{where}.ci95") if entry.get("ci95") is not None else {}
        return cls(fields.flat(entry, where, fields.fraction), fields.flat(ci, f"{where}.ci95", fields.interval))


# The validity line's shares (diversity_metrics.validity; docs/diversity.md), name -> (block, key): what
# the dashboard's hack watch shows per run; a run measured before a share existed has no value for it.
VALIDITY_SHARES = {
    "cut": ("solution_cut", "share_cut"),
    "chars_removed": ("solution_cut", "chars_removed_share"),
    "token_cap": ("token_cap", "share"),
    "long_after_answer": ("long_after_answer", "share"),
    "unbalanced_dollar": ("unbalanced_dollar", "share"),
    "without_formula": ("without_formula", "share"),
    "encoder_tokens_seen": ("encoder_window", "tokens_seen_share"),
}


@dataclass(frozen=True)
class DiversityResults:
    """``benchmarks.<b>.diversity``: (measure, subset) -> mean over problems (None: undefined)."""

    values: Mapping[tuple[str, str], float | None]
    n_problems: int | None
    settings: Mapping[str, Any]
    warnings: tuple[str, ...] = ()  # the validity line's (diversity_metrics.validity): what a number measured
    validity: Mapping[str, float | None] = field(default_factory=dict)  # its shares (VALIDITY_SHARES)

    @classmethod
    def read(cls, block: Any, where: str) -> DiversityResults:
        block = fields.obj(block, where)
        if not isinstance(block.get("all"), dict):
            raise DsdrError(f"{where}: unknown layout (no 'all' block of per-subset means); "
                            "rerun `dsdr-eval diversity RUN_DIR` to rewrite it")
        values = {}
        for subset in DIVERSITY_SUBSETS:
            if subset not in block:
                continue
            sub = fields.obj(block[subset], f"{where}.{subset}")
            for measure, path in DIVERSITY_PATHS.items():
                node: Any = sub
                for key in path[:-1]:  # a null on the way: undefined
                    node = fields.obj(node[key], f"{where}.{subset}.{key}") if node.get(key) is not None else {}
                if path[-1] in node:
                    values[(measure, subset)] = fields.number(node[path[-1]], f"{where}.{subset}.{'.'.join(path)}")
        validity = block.get("validity") if isinstance(block.get("validity"), dict) else {}
        warnings = tuple(w for w in validity.get("warnings") or () if isinstance(w, str))
        shares = {}
        for name, (key, share) in VALIDITY_SHARES.items():
            node = validity.get(key)
            if isinstance(node, dict) and isinstance(node.get(share), (int, float)) and not isinstance(node.get(share), bool):
                shares[name] = float(node[share])
        return cls(values, fields.count(block.get("n_problems"), f"{where}.n_problems"),
                   block.get("settings") if isinstance(block.get("settings"), dict) else {}, warnings, shares)

    def value(self, measure: str, subset: str = "all") -> float | None:
        return self.values.get((measure, subset))


@dataclass(frozen=True)
class JudgeResults:
    """``benchmarks.<b>.judge``: the LLM judge's mean scores (0-10) over successfully judged problems."""

    axes: Mapping[str, float | None]
    n_problems: int | None
    n_ok: int | None
    n_failed: int | None
    judge_model: str | None

    @classmethod
    def read(cls, block: Any, where: str) -> JudgeResults:
        block = fields.obj(block, where)
        if "overall" not in block:
            raise DsdrError(f"{where}: unknown layout (no 'overall' score); rerun `dsdr-eval judge RUN_DIR ...`")
        axes = {axis: fields.number(block.get(axis), f"{where}.{axis}") for axis in JUDGE_AXES}
        for axis, value in axes.items():
            if value is not None and not 0.0 <= value <= 10.0:
                raise DsdrError(f"{where}.{axis}: must be a mean score in [0, 10] or null (got {value})")
        model = block.get("judge_model")
        return cls(axes, *(fields.count(block.get(k), f"{where}.{k}") for k in ("n_problems", "n_ok", "n_failed")),
                   None if model is None else str(model))


@dataclass(frozen=True)
class JudgeGradingResults:
    """``benchmarks.<b>.judge_grading`` (`score --judge-grading`): the symbolic and judge verdicts' accuracy
    (fractions of samples; judge and both null in mode rejected) and the counts that qualify them."""

    mode: str
    accuracy: Mapping[str, float | None]
    counts: Mapping[str, int | None]

    @classmethod
    def read(cls, block: Any, where: str) -> JudgeGradingResults:
        block = fields.obj(block, where)
        accuracy = fields.obj(block.get("accuracy"), f"{where}.accuracy")
        return cls(str(block.get("mode")),
                   {k: fields.fraction(accuracy.get(k), f"{where}.accuracy.{k}") for k in JUDGE_GRADING_ACCURACY},
                   {k: fields.count(block.get(k), f"{where}.{k}") for k in JUDGE_GRADING_COUNTS})


@dataclass(frozen=True)
class BenchmarkResults:
    """One benchmark of a run: its scores, counts, and the diversity / judge sections when written."""

    name: str
    scores: Scores
    n_problems: int | None = None
    n_samples_per_problem: int | None = None
    status_counts: Mapping[str, int] = field(default_factory=dict)
    mean_completion_tokens: float | None = None
    truncated_fraction: float | None = None
    # thinking models (issue 33): share of unclosed reasoning, mean reasoning / answer tokens, and how
    # many extracted answers each grading rule changed
    unclosed_reasoning_fraction: float | None = None
    mean_reasoning_tokens: float | None = None
    mean_answer_tokens: float | None = None
    reasoning_tokens_unknown: str | None = None  # why the mean reasoning / answer tokens are unknown
    answers_changed_by_rule: Mapping[str, int] = field(default_factory=dict)
    # accuracy against token budget (issue 45; dsdr_eval/scoring/budget_curve.py): budget -> {accuracy, finished, ...},
    # or why the benchmark has none
    budget_curve: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    budget_curve_unavailable: str | None = None
    diversity: DiversityResults | None = None
    judge: JudgeResults | None = None
    judge_grading: JudgeGradingResults | None = None

    @classmethod
    def read(cls, name: str, entry: Any, where: str) -> BenchmarkResults:
        entry = fields.obj(entry, where)
        counts = {key: fields.count(entry.get(key), f"{where}.{key}") for key in _COUNT_FIELDS}
        status = fields.obj(entry.get("status_counts") or {}, f"{where}.status_counts")
        return cls(
            name=name, scores=Scores.read(entry, where), n_problems=counts["n_problems"],
            n_samples_per_problem=counts["n_samples_per_problem"],
            status_counts={str(k): fields.count(v, f"{where}.status_counts.{k}") or 0 for k, v in status.items()},
            mean_completion_tokens=fields.number(entry.get("mean_completion_tokens"), f"{where}.mean_completion_tokens"),
            truncated_fraction=fields.fraction(entry.get("truncated_fraction"), f"{where}.truncated_fraction"),
            unclosed_reasoning_fraction=fields.fraction(entry.get("unclosed_reasoning_fraction"),
                                                        f"{where}.unclosed_reasoning_fraction"),
            mean_reasoning_tokens=fields.number(entry.get("mean_reasoning_tokens"), f"{where}.mean_reasoning_tokens"),
            mean_answer_tokens=fields.number(entry.get("mean_answer_tokens"), f"{where}.mean_answer_tokens"),
            reasoning_tokens_unknown=fields.typed(entry.get("reasoning_tokens_unknown"), (str, type(None)), "a string",
                                                  f"{where}.reasoning_tokens_unknown"),
            answers_changed_by_rule={str(k): fields.count(v, f"{where}.answers_changed_by_rule.{k}") or 0
                                     for k, v in fields.obj(entry.get("answers_changed_by_rule") or {},
                                                            f"{where}.answers_changed_by_rule").items()},
            budget_curve=read_budget_curve(entry.get("budget_curve"), f"{where}.budget_curve"),
            budget_curve_unavailable=(str(entry["budget_curve_unavailable"])
                                      if entry.get("budget_curve_unavailable") is not None else None),
            diversity=(DiversityResults.read(entry["diversity"], f"{where}.diversity")
                       if entry.get("diversity") is not None else None),
            judge=JudgeResults.read(entry["judge"], f"{where}.judge") if entry.get("judge") is not None else None,
            judge_grading=(JudgeGradingResults.read(entry["judge_grading"], f"{where}.judge_grading")
                           if entry.get("judge_grading") is not None else None))


@dataclass(frozen=True)
class Aggregate:
    """``average`` / ``average_table1``: the unweighted mean over ``benchmarks`` (stratified-bootstrap CIs)."""

    scores: Scores
    benchmarks: tuple[str, ...]

    @classmethod
    def read(cls, entry: Any, where: str) -> Aggregate | None:
        if entry is None:
            return None
        entry = fields.obj(entry, where)
        names = entry.get("benchmarks") or []
        if not isinstance(names, list):
            raise DsdrError(f"{where}.benchmarks: must be a list of benchmark names")
        return cls(Scores.read(entry, where), tuple(map(str, names)))


@dataclass(frozen=True)
class Provenance:
    """How metrics.json was computed (``provenance``); ``record`` is the object as written."""

    record: Mapping[str, Any] = field(default_factory=dict)

    @property
    def grading(self) -> Mapping[str, Any]:
        grading = self.record.get("grading")
        return grading if isinstance(grading, dict) else {}

    @property
    def versions(self) -> Mapping[str, Any]:
        versions = self.record.get("versions")
        return versions if isinstance(versions, dict) else {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.record.get(key, default)


# ----------------------------------------------------------------------------- the protocol and settings

@dataclass(frozen=True)
class RunSettings:
    """What else a run's numbers depend on, beside its ``Protocol`` (docs/ALGORITHMS.md §5: template and
    engine version go with every score): read from config.json's ``template`` / ``backend`` /
    ``versions``; ``source`` says where the run's protocol was read from."""

    template_name: str | None = None
    template_sha: str | None = None  # first 12 hex of sha256 of the template text
    template_chat: bool | None = None
    backend: str | None = None
    backend_version: str | None = None
    versions: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    source: str = "config.json"  # or "graded.jsonl (config.json missing)"

    def comparable_key(self) -> tuple:
        """What must match across a report's table beside the protocol (library versions are reported)."""
        return tuple(getattr(self, name) for name, _ in SETTINGS_COMPARED)


# The settings whose difference makes two runs incomparable (with their title in a report), in
# `protocol_differences`' order.
SETTINGS_COMPARED = (("template_sha", "template text"), ("template_chat", "template chat mode"), ("backend", "backend"))


def fmt(value: Any) -> str:
    return "?" if value is None else str(value)


def settings_from_config(config: dict[str, Any]) -> RunSettings:
    template = config.get("template") or {}  # config.json was checked by load_run (fields.check_config)
    template = template if isinstance(template, dict) else {"name": str(template)}
    backend = config.get("backend") or {}
    backend = backend if isinstance(backend, dict) else {"name": str(backend)}
    text = template.get("text")
    return RunSettings(
        template_name=template.get("name"),
        template_sha=None if text is None else hashlib.sha256(str(text).encode("utf-8")).hexdigest()[:12],
        template_chat=template.get("chat"), backend=backend.get("name"), backend_version=backend.get("version"),
        versions=dict(config.get("versions") or {}), source="config.json")


def iter_graded(path: Path, *, on_warning: Callable[[str], None] = warn,
                on_partial_tail: Callable[[str], None] | None = None) -> Iterator[GradedSample]:
    """A run's graded.jsonl one typed record at a time (``dsdr_eval.rundir.samples.parse_graded``: errors
    name FILE:LINE:FIELD); a partial last line is skipped with a note to ``on_partial_tail``."""
    return iter_records(path, parse_graded, on_warning=on_warning, on_partial_tail=on_partial_tail)


def iter_samples(path: Path, *, on_warning: Callable[[str], None] = warn,
                 on_partial_tail: Callable[[str], None] | None = None) -> Iterator[Sample]:
    """A run's samples.jsonl (not graded yet) as ``iter_graded`` reads graded.jsonl."""
    return iter_records(path, parse_sample, on_warning=on_warning, on_partial_tail=on_partial_tail)


def protocol_from_graded(graded_path: Path) -> Protocol:
    """The sampling protocol from the per-sample fields of graded.jsonl (a run scored from a samples
    file written elsewhere has no config.json)."""
    per_phase: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    max_tokens: set = set()
    seeds: set = set()
    for record in iter_graded(graded_path):  # one at a time: only the protocol's fields are kept
        sample = record.sample
        per_phase[sample.phase]["temperature"].add(sample.temperature)
        per_phase[sample.phase]["top_p"].add(sample.top_p)
        counts[(sample.phase, sample.benchmark, sample.problem_id)] += 1
        max_tokens.add(sample.max_tokens)
        seeds.add(sample.seed)

    def single(values: set):
        values = {v for v in values if v is not None}
        return next(iter(values)) if len(values) == 1 else None

    phases = []
    for phase in sorted(per_phase):
        ns = {c for (ph, _, _), c in counts.items() if ph == phase}
        # a sample line records no top-k / min-p: unknown (None), never assumed off
        phases.append(Phase(phase, max(ns) if ns else None, single(per_phase[phase]["temperature"]),
                            single(per_phase[phase]["top_p"]), top_k=None, min_p=None, strict=False))
    return Protocol(None, tuple(phases), single(max_tokens), single(seeds), strict=False)


# ----------------------------------------------------------------------------- the run

@dataclass(frozen=True)
class RunResults:
    """An evaluation run directory with a metrics.json (``dsdr-eval score`` has run)."""

    path: Path
    label: str
    config: Mapping[str, Any]
    benchmarks: Mapping[str, BenchmarkResults]
    average: Aggregate | None
    average_table1: Aggregate | None
    provenance: Provenance
    protocol: Protocol  # read back tolerantly (Protocol.from_record): None = not recorded
    settings: RunSettings

    @property
    def model(self) -> str | None:
        model = self.config.get("model") or {}
        if isinstance(model, dict):
            return model.get("spec") or model.get("path")
        return str(model)

    def problem_counts(self) -> dict[str, int | None]:
        return {name: bench.n_problems for name, bench in self.benchmarks.items()}

    def protocol_record(self) -> dict[str, Any]:
        """report.json's ``protocol`` of this run (a phase's top_k / min_p only when on, as config.json)."""
        p, settings = self.protocol, self.settings
        return {
            "phases": [{"phase": ph.phase, "n": ph.n, "temperature": ph.temperature, "top_p": ph.top_p,
                        **{name: getattr(ph, name) for name in ("top_k", "min_p") if getattr(ph, name)}}
                       for ph in p.phases],
            "max_tokens": p.max_tokens, "seed": p.seed, "template": settings.template_name,
            "template_sha256_12": settings.template_sha, "template_chat": settings.template_chat,
            "backend": settings.backend, "backend_version": settings.backend_version, "source": settings.source,
        }

    def relabel(self, label: str) -> RunResults:
        return dataclasses.replace(self, label=label)


def _protocol(path: Path, config: dict[str, Any], provenance: Provenance) -> tuple[Protocol, RunSettings]:
    if "protocol" in config:
        if not isinstance(config["protocol"], dict):
            raise DsdrError(f"{path / rundir.CONFIG}: field 'protocol' missing or not an object")
        extraction = config.get("extraction")
        protocol = Protocol.from_record(config["protocol"], cuts_known=config.get("kind") != "import",
                                        **({"extraction": extraction} if isinstance(extraction, str) else {}))
        settings = settings_from_config(config)
    elif (path / rundir.GRADED).exists():
        protocol, settings = protocol_from_graded(path / rundir.GRADED), RunSettings(
            source="graded.jsonl (config.json missing)")
    else:
        protocol = Protocol(None, (), None, None, strict=False)
        settings = RunSettings(source="unknown (no config.json, no graded.jsonl)")
    if not settings.versions and provenance.versions:  # no config.json: the scorer's record of versions
        settings = dataclasses.replace(settings, versions=dict(provenance.versions))
    return protocol, settings


def load_run(path: str | Path, label: str | None = None) -> RunResults:
    """Read RUN_DIR/metrics.json (+ config.json when present) into a RunResults.

    Raises DsdrError ``FILE: field: message`` for a missing file, a training run, a field of the wrong
    type or a section of an unknown layout."""
    path = Path(path)
    rundir.require_run_dir(path, rundir.METRICS)
    rundir.settle(path)  # an update a killed writer committed is completed first: old state or new, never half
    metrics_path = path / rundir.METRICS
    metrics = read_json(metrics_path)
    if not isinstance(metrics, dict) or not isinstance(metrics.get("benchmarks"), dict):
        raise DsdrError(f"{metrics_path}: field 'benchmarks' missing or not an object "
                        "(was this written by `dsdr-eval score`?)")
    config = rundir.load_config(path) if (path / rundir.CONFIG).exists() else {}
    if config.get("kind") == "train":
        raise DsdrError(f"{path}: a training run (config.json kind=train); `report` takes evaluation runs "
                        "(evaluate a checkpoint with `dsdr-eval run --model RUN/final`)")
    fields.check_config(config, path / rundir.CONFIG)
    where = str(metrics_path)
    entries = {str(name): entry for name, entry in metrics["benchmarks"].items()}
    benchmarks = BenchmarkMap({name: BenchmarkResults.read(name, entries[name], f"{where}: benchmarks.{name}")
                               for name in order_benchmarks(entries)}, where)
    record = metrics.get("provenance")
    provenance = Provenance(fields.obj(record, f"{where}: provenance") if record is not None else {})
    average = Aggregate.read(metrics.get("average"), f"{where}: average")
    average_table1 = Aggregate.read(metrics.get("average_table1"), f"{where}: average_table1")
    protocol, settings = _protocol(path, config, provenance)
    return RunResults(path=path, label=str(label or config.get("label") or path.resolve().name), config=config,
                      benchmarks=benchmarks, average=average, average_table1=average_table1,
                      provenance=provenance, protocol=protocol, settings=settings)
