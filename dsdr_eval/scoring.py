"""Score a samples file: read (dsdr_eval.rundir.samples validates) -> grade (dsdr_eval.grading) -> metrics -> write files.

``score_run_dir(RUN_DIR)`` reads ``RUN_DIR/samples.jsonl`` and writes ``graded.jsonl`` and
``metrics.json`` next to it; ``score_samples(path, out_dir)`` does the same for any samples file.
``metrics.json`` is written through ``rundir.update_metrics`` (its "score" section): the
``diversity`` / ``judge`` keys of each benchmark are kept, so re-scoring never loses what
``dsdr-eval diversity`` / ``dsdr-eval judge`` computed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NamedTuple

from dsdr_eval.grading.answer_norm import GradingOptions
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.errors import DsdrError, warn
from dsdr_eval.grading.extraction import DEFAULT_EXTRACTION, EXTRACTION_PROFILES, extract_answer, get_profile
from dsdr_eval.grading import grade_samples, grader_provenance
from dsdr_eval.grading.reasoning import DEFAULT_REASONING_FORMAT, parse_reasoning_format
from dsdr_eval.rundir.jsonl import jsonl_chunks
from dsdr_eval.judge_grading import OFF, check_mode, judge_disagreements_file, judge_graded, judge_metrics
from dsdr_eval.llm_judge.answers import AnswerJudge
from dsdr_eval.metrics import compute_metrics
from dsdr_eval.tasks import BENCHMARKS, Problem, load_benchmark
from dsdr_eval.rundir.samples import GradedSample, SamplesFile, graded_from_grader


DISAGREEMENTS = "disagreements.jsonl"  # every sample where our verdict differs from the source tool's
NO_ANSWER_WARN_FRACTION = 0.2  # above this share of no_answer in a benchmark, the profile is probably wrong
NO_ANSWER_MIN_SAMPLES = 5  # fewer samples tell a truncated output from a wrong convention too poorly to warn


class ScoredRun(NamedTuple):
    """What one scoring pass produced: the graded records (as written to graded.jsonl) and metrics.json."""

    graded: list[GradedSample]
    metrics: dict[str, Any]


def score_records(samples_path: str | Path, out_dir: str | Path, *, timeout_s: float = 5.0,
                  workers: int | None = None, progress: bool = True, bootstrap: int = 1000,
                  options: GradingOptions | None = None, seed: int = 0,
                  samples: SamplesFile | None = None, extraction: str | None = None,
                  reasoning_format: str | None = None, judge: AnswerJudge | None = None,
                  judge_mode: str = OFF) -> ScoredRun:
    """Grade ``samples_path`` into ``out_dir/graded.jsonl`` and ``out_dir/metrics.json``.

    The whole file is validated before any grading (``dsdr_eval.rundir.samples``); both outputs are written
    (atomically) only after grading and metrics succeeded, so a failure leaves the previous ones
    untouched. ``samples``: the file already read in this process (``dsdr-eval run``), not read again.
    Returns the graded records with the metrics, so a later stage of the same process (diversity)
    need not read graded.jsonl back. ``extraction``: the answer convention (a profile of
    ``dsdr_eval.grading.extraction.EXTRACTION_PROFILES``); None: the run directory's config.json
    ``"extraction"`` (written by ``run`` / ``import``), else the default ``boxed``. ``reasoning_format``:
    how completions mark their reasoning (``dsdr_eval.grading.reasoning``); None: config.json's
    ``"reasoning_format"``, else ``auto``. ``judge`` (an ``AnswerJudge``) and ``judge_mode`` (rejected, all):
    the judge's second opinion beside the symbolic verdict (``dsdr_eval.judge_grading``), which stays
    ``correct``."""
    samples_path, out_dir = Path(samples_path), Path(out_dir)
    extraction = extraction if extraction is not None else run_extraction(samples_path.parent)
    get_profile(extraction)  # an unknown profile is refused before the samples are read
    reasoning = parse_reasoning_format(reasoning_format if reasoning_format is not None
                                       else run_reasoning_format(samples_path.parent))
    if samples is None:
        samples = SamplesFile.open(samples_path)
    records = samples.samples
    if not records:
        raise DsdrError(f"{samples_path}: no samples")
    started = time.perf_counter()
    rows, context = registry_context([sample.to_json() for sample in records])
    rows = grade_samples(rows, timeout_s=timeout_s, workers=workers,
                         progress=progress, options=options, extraction=extraction, reasoning_format=reasoning)
    graded = [graded_from_grader(sample, row) for sample, row in zip(records, rows)]
    grading_wall_s = time.perf_counter() - started
    judged = judge is not None and check_mode(judge_mode) != OFF
    graded = judge_graded(graded, judge, judge_mode) if judged else graded

    for message in no_answer_warnings(graded, extraction):
        warn(message)
    metrics = compute_metrics(graded, bootstrap=bootstrap, seed=seed)
    provenance = metrics["provenance"]
    provenance["grading"] = grader_provenance(timeout_s, workers, options, extraction, reasoning)
    provenance["grading"]["wall_s"] = round(grading_wall_s, 3)
    if context:
        provenance["grading"]["registry_context"] = context
    provenance.update({
        "samples_file": str(samples_path.resolve()),
        "samples_sha256": samples.sha256,
        "n_samples": len(graded),
        "created": rundir.now_iso(),
        "versions": rundir.library_versions(),
    })
    agreement = source_agreement(graded)
    if agreement is not None:  # an imported run: our grader beside the source tool's
        provenance["source_agreement"] = agreement
        if agreement["n_disagree"]:
            agreement["disagreements_file"] = DISAGREEMENTS
    if judged:
        for name, block in judge_metrics(graded, judge_mode).items():
            metrics["benchmarks"][name]["judge_grading"] = block
        provenance["judge_grading"] = judge.provenance(judge_mode)
    run_config = _run_config_summary(samples_path.parent)
    if run_config:
        provenance["run_config"] = run_config
    out_dir.mkdir(parents=True, exist_ok=True)
    # the scores' section of metrics.json (diversity / judge blocks already there are kept),
    # graded.jsonl and the disagreements list in one all-or-nothing commit: metrics.json always
    # describes the files beside it (an earlier scoring's list is removed when none disagree now)
    files: dict[str, Any] = {rundir.GRADED: jsonl_chunks(record.to_json() for record in graded)}
    if agreement is not None and agreement["n_disagree"]:
        files[DISAGREEMENTS] = jsonl_chunks(disagreement_records(graded))
    elif (out_dir / DISAGREEMENTS).is_file():
        files[DISAGREEMENTS] = None
    files.update(judge_disagreements_file(graded if judged else [], out_dir))
    return ScoredRun(graded, rundir.update_metrics(out_dir, rundir.SCORE_SECTION, metrics["benchmarks"],
                                                   summary=metrics, files=files))


def registry_context(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rows of a registry benchmark (``benchmark`` a registered name, ``problem_id`` one of its ids) that
    carry no problem text or answer metadata get the registry's, so the grading rules that read the
    question (ordered lists, extremes) and the metadata apply to a user's own files too; only when the
    row's gold is the registry's (another gold: another problem, left as it is). The rows given are
    not changed -> (rows to grade, {benchmark: problems given context})."""
    wanted = {str(row.get("benchmark")) for row in rows
              if row.get("benchmark") in BENCHMARKS and (not row.get("problem") or row.get("answer_meta") is None)}
    registry: dict[tuple[str, str], Problem] = {}
    for name in sorted(wanted):
        try:
            registry.update(((name, p.id), p) for p in load_benchmark(name))
        except DsdrError as exc:  # no local copy and no hub: graded without the registry's context
            warn(f"score: benchmark {name}: problem texts not available for grading ({exc})")
    if not registry:
        return rows, {}
    out, given = [], {}
    for row in rows:
        known = registry.get((str(row.get("benchmark")), str(row.get("problem_id"))))
        if known is not None and str(row.get("gold", "")).strip() in (known.answer, known.extra.get("answer_original")):
            filled = {"problem": row.get("problem") or known.problem,
                      "answer_meta": row.get("answer_meta") if row.get("answer_meta") is not None else known.answer_meta}
            if any(row.get(k) != v for k, v in filled.items()):
                row = {**row, **filled}
                given.setdefault(known.benchmark, set()).add(known.id)
        out.append(row)
    return out, {name: len(ids) for name, ids in given.items()}


def source_agreement(graded: list[GradedSample], *, shown: int = 10) -> dict[str, Any] | None:
    """How often our verdict equals the source tool's (``source_correct``, kept by ``dsdr-eval import``):
    counts overall and per benchmark, and the first ``shown`` disagreeing samples; None without labels."""
    pairs = _labelled(graded)
    if not pairs:
        return None
    differ = [(record, theirs) for record, theirs in pairs if record.correct != theirs]
    per_benchmark: dict[str, dict[str, int]] = {}
    for record, theirs in pairs:
        counts = per_benchmark.setdefault(record.sample.benchmark, {"n_compared": 0, "n_agree": 0})
        counts["n_compared"] += 1
        counts["n_agree"] += record.correct == theirs
    return {"n_compared": len(pairs), "n_agree": len(pairs) - len(differ), "n_disagree": len(differ),
            "fraction": (len(pairs) - len(differ)) / len(pairs), "per_benchmark": per_benchmark,
            "disagreements": [{"key": list(record.key), "ours": record.correct, "source": theirs,
                               "extracted": record.extracted,
                               "source_extracted": record.sample.extra.get("source_extracted")}
                              for record, theirs in differ[:shown]]}


def _labelled(graded: list[GradedSample]) -> list[tuple[GradedSample, bool]]:
    """The records that carry the source tool's verdict, with that verdict."""
    return [(record, record.sample.extra["source_correct"]) for record in graded
            if isinstance(record.sample.extra.get("source_correct"), bool)]


def disagreement_records(graded: list[GradedSample]) -> list[dict[str, Any]]:
    """Every sample whose verdict differs from the source tool's, whole (``DISAGREEMENTS``)."""
    return [{"key": list(record.key), "line": record.line, "gold": record.sample.gold, "ours": record.correct,
             "status": record.status, "extraction": record.extraction, "extracted": record.extracted,
             "source": theirs, "source_extracted": record.sample.extra.get("source_extracted"),
             "completion": record.sample.completion}
            for record, theirs in _labelled(graded) if record.correct != theirs]


def no_answer_warnings(graded: list[GradedSample], extraction: str,
                       threshold: float = NO_ANSWER_WARN_FRACTION) -> list[str]:
    """One line per benchmark (of at least ``NO_ANSWER_MIN_SAMPLES`` samples) where more than
    ``threshold`` of the samples have no answer under ``extraction``: the share, the profile, the end
    of one such completion and the profiles that do find an answer in it -- a wrong answer
    convention must never be a silent 0 %."""
    per_benchmark: dict[str, list[GradedSample]] = {}
    for record in graded:
        per_benchmark.setdefault(record.sample.benchmark, []).append(record)
    messages = []
    for benchmark, records in per_benchmark.items():
        missing = [record for record in records if record.status == "no_answer"]
        if len(missing) <= threshold * len(records) or len(records) < NO_ANSWER_MIN_SAMPLES:
            continue
        # the first in key order, not in file order: concurrent engines append in the order requests finish,
        # and the warning must read the same on every run
        example = min(missing, key=lambda record: record.sample.key)
        others = [name for name in EXTRACTION_PROFILES
                  if name != extraction and extract_answer(example.sample.completion, name) is not None]
        hint = (f"; profiles that find an answer in it: {', '.join(others)} (--extraction)" if others
                else "; no profile finds an answer in it")
        messages.append(f"{benchmark}: {len(missing)} of {len(records)} samples ({100 * len(missing) / len(records):.0f}%) "
                        f"have no answer under extraction profile '{extraction}', e.g. problem "
                        f"{example.sample.problem_id} sample {example.sample.sample_idx} ends "
                        f"{clip(example.sample.completion, 80, tail=True)}{hint}")
    return messages


def clip(text: Any, width: int, *, tail: bool = False) -> str:
    """``text`` as a one-line repr of at most about ``width`` characters (its end when ``tail``)."""
    if not isinstance(text, str):
        return repr(text)
    if len(text) > width:
        text = "..." + text[-width:] if tail else text[:width] + "..."
    return repr(text)


def score_samples(samples_path: str | Path, out_dir: str | Path, **options: Any) -> dict[str, Any]:
    """``score_records`` for callers that need only metrics.json's content (``dsdr-eval score``)."""
    return score_records(samples_path, out_dir, **options).metrics


def score_run_dir(run_dir: str | Path, *, timeout_s: float = 5.0, workers: int | None = None,
                  progress: bool = True, bootstrap: int = 1000, seed: int = 0,
                  samples: SamplesFile | None = None, extraction: str | None = None,
                  reasoning_format: str | None = None) -> dict[str, Any]:
    """Score ``RUN_DIR/samples.jsonl`` in place (graded.jsonl + metrics.json next to it)."""
    return score_run_records(run_dir, timeout_s=timeout_s, workers=workers, progress=progress,
                             bootstrap=bootstrap, seed=seed, samples=samples, extraction=extraction,
                             reasoning_format=reasoning_format).metrics


def score_run_records(run_dir: str | Path, **options: Any) -> ScoredRun:
    """``score_run_dir`` returning the graded records too (``dsdr-eval run`` hands them to diversity)."""
    run_dir = rundir.require_run_dir(run_dir, rundir.SAMPLES)
    return score_records(run_dir / rundir.SAMPLES, run_dir, **options)


def run_extraction(run_dir: Path) -> str:
    """The extraction profile recorded in ``run_dir``'s config.json (top-level ``"extraction"``),
    else ``DEFAULT_EXTRACTION``; a recorded value that is not a profile is a one-line error."""
    if not (run_dir / rundir.CONFIG).is_file():
        return DEFAULT_EXTRACTION
    config = rundir.load_config(run_dir)
    name = config.get("extraction", DEFAULT_EXTRACTION)
    if not isinstance(name, str) or name not in EXTRACTION_PROFILES:
        raise DsdrError(f"{run_dir / rundir.CONFIG}:extraction: unknown extraction profile {name!r} "
                        f"(known: {', '.join(EXTRACTION_PROFILES)})")
    return name


def run_reasoning_format(run_dir: Path) -> str:
    """The reasoning format recorded in ``run_dir``'s config.json (``"reasoning_format"``), else
    ``auto``; a recorded value that is not a format is a one-line error naming the file."""
    if not (run_dir / rundir.CONFIG).is_file():
        return DEFAULT_REASONING_FORMAT
    spec = rundir.load_config(run_dir).get("reasoning_format", DEFAULT_REASONING_FORMAT)
    try:
        return parse_reasoning_format(spec).spec
    except DsdrError as error:
        raise DsdrError(f"{run_dir / rundir.CONFIG}:reasoning_format: {error}") from None


def _run_config_summary(run_dir: Path) -> dict[str, Any] | None:
    """How the samples were generated (model, backend, protocol, template), when config.json exists."""
    if not (run_dir / rundir.CONFIG).exists():
        return None
    try:
        config = rundir.load_config(run_dir)
    except DsdrError:
        return None
    template = config.get("template")
    summary = {key: config[key] for key in ("kind", "label", "model", "backend", "protocol", "mixed_settings",
                                            "reasoning_format", "chat_template_kwargs")
               if key in config}
    if isinstance(template, dict):
        summary["template"] = {k: template[k] for k in ("name", "chat") if k in template}
    return summary or None
