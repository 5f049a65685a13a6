"""Step 4 of ``dsdr-eval run``: grade and score the run directory's samples (graded.jsonl, metrics.json)
and, unless ``--no-diversity``, compute its CPU diversity metrics into metrics.json; the outcome says
whether samples are still missing (exit code 1: rerun to retry them).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsdr_eval.options.commands import RunOptions
from dsdr_eval.protocols import Protocol
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.names import SAMPLING
from dsdr_eval.run.generate import GenerationOutcome
from dsdr_eval.run.plan import RunPlan
from dsdr_eval.run.resume import Resume


@dataclass(frozen=True)
class RunOutcome:
    """What one evaluation did: its exit code (1: samples still missing after every retry; rerun to
    retry them), the metrics.json it wrote and where the time went."""

    exit_code: int
    metrics: dict[str, Any] | None
    timings: dict[str, float] = field(default_factory=dict)
    n_failed: int = 0
    n_missing: int = 0
    out: Path | None = None  # the run directory
    backend: dict[str, Any] = field(default_factory=dict)  # config.json's backend record (name, version ...)
    protocol: Protocol | None = None  # the protocol the run used


def diversity_skipped(protocol: Protocol) -> str | None:
    """Why a run's diversity cannot be computed (None: it can). Diversity is measured over the rollouts
    of the sampling phase (docs/diversity.md); a protocol without one (greedy: one pass1 rollout) has
    nothing to measure, which is not an error of the run."""
    if any(phase.phase == SAMPLING for phase in protocol.phases):
        return None
    return (f"protocol {protocol.name} has no '{SAMPLING}' phase (diversity is measured over its rollouts; "
            f"phases: {', '.join(phase.phase for phase in protocol.phases)})")


def finish(plan: RunPlan, resume: Resume, outcome: GenerationOutcome, options: RunOptions,
           timings: dict[str, float], t_start: float) -> RunOutcome:
    """Grade, score and (unless no_diversity) compute the diversity of the run directory's samples."""
    from dsdr_eval.diversity_metrics.run import compute_run_diversity
    from dsdr_eval.scoring.score import score_run_records

    out, progress = plan.out, not options.no_progress
    timings["generate_s"] = outcome.generate_s
    timings["write_s"] = outcome.write_s
    # a resumed run keeps its recorded convention unless --extraction says otherwise (None: config.json's)
    extraction = plan.extraction if resume.old_config is None else options.extraction
    if plan.shard is not None and not resume.samples.samples:  # more shards than units of work: nothing to grade
        resume.samples.path.touch()
        metrics = rundir.update_metrics(out, rundir.SCORE_SECTION, {}, summary={})
        timings["total_s"] = time.perf_counter() - t_start
        return RunOutcome(0, metrics, timings, out=out, backend=dict(plan.config["backend"]), protocol=plan.protocol)
    t0 = time.perf_counter()
    graded, metrics = score_run_records(out, grading_timeout_s=options.grading_timeout_s, workers=options.grading_workers,
                                        progress=progress, samples=resume.samples, extraction=extraction,
                                        reasoning_format=options.reasoning_format, data_dir=options.data_dir)
    timings["score_s"] = time.perf_counter() - t0
    skipped = diversity_skipped(plan.protocol)
    if not options.no_diversity and skipped:
        print(f"note: diversity skipped: {skipped}")
    # a shard may hold part of a problem's rollouts: diversity is computed on the merged run
    if not options.no_diversity and not skipped and plan.shard is None:
        t0 = time.perf_counter()
        diversity = compute_run_diversity(out, progress=progress, graded=graded,
                                          threads=plan.config["backend"].get("threads"))  # from the records just graded
        timings["diversity_s"] = time.perf_counter() - t0
        for name, block in diversity.items():  # what rundir.update_metrics merged into metrics.json
            metrics["benchmarks"].setdefault(name, {})[rundir.DIVERSITY_SECTION] = block
    timings["total_s"] = time.perf_counter() - t_start

    exit_code = 1 if outcome.n_missing > 0 else 0
    return RunOutcome(exit_code, metrics, timings, outcome.n_failed, outcome.n_missing, out=out,
                      backend=dict(plan.config["backend"]), protocol=plan.protocol)
