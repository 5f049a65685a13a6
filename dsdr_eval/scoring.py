"""Score a samples file: read (dsdr_eval.samples validates) -> grade (grading.py) -> metrics -> write files.

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

from dsdr_eval.answer_norm import GradingOptions
from dsdr_eval import rundir
from dsdr_eval.errors import DsdrError
from dsdr_eval.grading import grade_samples, grader_provenance
from dsdr_eval.jsonl import jsonl_chunks
from dsdr_eval.metrics import compute_metrics
from dsdr_eval.samples import GradedSample, SamplesFile, graded_from_grader


class ScoredRun(NamedTuple):
    """What one scoring pass produced: the graded records (as written to graded.jsonl) and metrics.json."""

    graded: list[GradedSample]
    metrics: dict[str, Any]


def score_records(samples_path: str | Path, out_dir: str | Path, *, timeout_s: float = 5.0,
                  workers: int | None = None, progress: bool = True, bootstrap: int = 1000,
                  options: GradingOptions | None = None, seed: int = 0,
                  samples: SamplesFile | None = None) -> ScoredRun:
    """Grade ``samples_path`` into ``out_dir/graded.jsonl`` and ``out_dir/metrics.json``.

    The whole file is validated before any grading (``dsdr_eval.samples``); both outputs are written
    (atomically) only after grading and metrics succeeded, so a failure leaves the previous ones
    untouched. ``samples``: the file already read in this process (``dsdr-eval run``), not read again.
    Returns the graded records with the metrics, so a later stage of the same process (diversity)
    need not read graded.jsonl back."""
    samples_path, out_dir = Path(samples_path), Path(out_dir)
    if samples is None:
        samples = SamplesFile.open(samples_path)
    records = samples.samples
    if not records:
        raise DsdrError(f"{samples_path}: no samples")
    started = time.perf_counter()
    rows = grade_samples([sample.to_json() for sample in records], timeout_s=timeout_s, workers=workers,
                         progress=progress, options=options)
    graded = [graded_from_grader(sample, row) for sample, row in zip(records, rows)]
    grading_wall_s = time.perf_counter() - started

    metrics = compute_metrics(graded, bootstrap=bootstrap, seed=seed)
    provenance = metrics["provenance"]
    provenance["grading"] = grader_provenance(timeout_s, workers, options)
    provenance["grading"]["wall_s"] = round(grading_wall_s, 3)
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
    run_config = _run_config_summary(samples_path.parent)
    if run_config:
        provenance["run_config"] = run_config
    out_dir.mkdir(parents=True, exist_ok=True)
    # the scores' section of metrics.json (diversity / judge blocks already there are kept) and
    # graded.jsonl in one all-or-nothing commit: metrics.json always describes the graded.jsonl beside it
    return ScoredRun(graded, rundir.update_metrics(out_dir, rundir.SCORE_SECTION, metrics["benchmarks"],
                                                   summary=metrics, files={rundir.GRADED: jsonl_chunks(
                                                       record.to_json() for record in graded)}))


def source_agreement(graded: list[GradedSample], *, shown: int = 10) -> dict[str, Any] | None:
    """How often our verdict equals the source tool's (``source_correct``, kept by ``dsdr-eval import``):
    counts overall and per benchmark, and the first ``shown`` disagreeing samples; None without labels."""
    pairs = [(record, record.sample.extra["source_correct"]) for record in graded
             if isinstance(record.sample.extra.get("source_correct"), bool)]
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


def score_samples(samples_path: str | Path, out_dir: str | Path, **options: Any) -> dict[str, Any]:
    """``score_records`` for callers that need only metrics.json's content (``dsdr-eval score``)."""
    return score_records(samples_path, out_dir, **options).metrics


def score_run_dir(run_dir: str | Path, *, timeout_s: float = 5.0, workers: int | None = None,
                  progress: bool = True, bootstrap: int = 1000, seed: int = 0,
                  samples: SamplesFile | None = None) -> dict[str, Any]:
    """Score ``RUN_DIR/samples.jsonl`` in place (graded.jsonl + metrics.json next to it)."""
    return score_run_records(run_dir, timeout_s=timeout_s, workers=workers, progress=progress,
                             bootstrap=bootstrap, seed=seed, samples=samples).metrics


def score_run_records(run_dir: str | Path, **options: Any) -> ScoredRun:
    """``score_run_dir`` returning the graded records too (``dsdr-eval run`` hands them to diversity)."""
    run_dir = rundir.require_run_dir(run_dir, rundir.SAMPLES)
    return score_records(run_dir / rundir.SAMPLES, run_dir, **options)


def _run_config_summary(run_dir: Path) -> dict[str, Any] | None:
    """How the samples were generated (model, backend, protocol, template), when config.json exists."""
    if not (run_dir / rundir.CONFIG).exists():
        return None
    try:
        config = rundir.load_config(run_dir)
    except DsdrError:
        return None
    template = config.get("template")
    summary = {key: config[key] for key in ("kind", "label", "model", "backend", "protocol", "mixed_settings")
               if key in config}
    if isinstance(template, dict):
        summary["template"] = {k: template[k] for k in ("name", "chat") if k in template}
    return summary or None
