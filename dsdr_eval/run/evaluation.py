"""``dsdr-eval run`` as a library call: plan, resume, generate, finish (``dsdr_eval.run``), from a frozen
``RunOptions``. ``dsdr_eval.evaluate`` (the keyword API), ``dsdr_eval.sweep`` and ``dsdr-eval run`` (the
CLI, which adds the summary table) all call ``run_evaluation``.
"""

from __future__ import annotations

import time

from dsdr_eval.options.commands import RunOptions
from dsdr_eval.progress import quiet_library_bars
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.run.finish import RunOutcome, diversity_skipped, finish
from dsdr_eval.run.generate import EngineFactory, generate, make_backend, nothing_to_generate
from dsdr_eval.run.plan import plan_run
from dsdr_eval.run.resume import open_resume


def run_evaluation(options: RunOptions, *, command: list[str] | None = None,
                   engine: EngineFactory | None = None) -> RunOutcome:
    """Evaluate ``options.model`` into ``options.out``, holding its writer lock (one writer per run
    directory). ``command`` is what config.json records as the command (default ``sys.argv``);
    ``engine(backend_name, resolved_model)`` builds the backend instead of ``make_backend``: the seam
    for a fake or an already-loaded engine (it is closed when the run ends)."""
    with rundir.writer_lock(options.out):
        t_start = time.perf_counter()
        timings: dict[str, float] = {}
        plan = plan_run(options, command)
        if options.no_progress:
            quiet_library_bars()
        if plan.backend_name == "hf" or (not options.no_diversity and diversity_skipped(plan.protocol) is None):
            from dsdr_eval.backends.threads import set_torch_threads  # torch computes in this process

            plan.config["backend"]["threads"] = set_torch_threads(options.threads).to_record()
        resume = open_resume(plan, force=options.force_config, allow_mixed_models=options.allow_mixed_models)
        if resume.all_generated:  # re-grade and re-score without starting an engine
            outcome = nothing_to_generate(plan, resume)
            timings["load_s"] = time.perf_counter() - t_start
        else:
            backend = engine(plan.backend_name, plan.model) if engine is not None else make_backend(plan, options)
            outcome = generate(plan, resume, backend, progress=not options.no_progress,
                               preload_encoder=(not options.no_diversity and diversity_skipped(plan.protocol) is None
                                                and plan.shard is None),
                               timings=timings, t_start=t_start)
        return finish(plan, resume, outcome, options, timings, t_start)
