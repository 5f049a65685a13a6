"""``dsdr-eval run`` as one package, read top to bottom: ``evaluation.run_evaluation`` calls

1. ``plan.plan_run``: the options resolved (protocol, template, benchmarks, extraction, backend, model)
   and the config.json record of the run; every check that needs no engine is made here, first;
2. ``resume.open_resume``: the run directory as it is (a mismatched one refused, samples.jsonl read once,
   the ``resumed`` record of a rerun);
3. ``generate.generate`` (or ``generate.nothing_to_generate``): the missing samples, appended as batches
   finish, resumable after any crash;
4. ``finish.finish``: grading, scoring and diversity into graded.jsonl and metrics.json.

``shard`` cuts step 3 to one part of the run (``run --shard I/N``, with the seeds of the whole run) and
``merge`` joins the parts into one run directory (``dsdr-eval merge``).

``dsdr_eval.evaluate``, ``dsdr_eval.sweep`` (``dsdr_eval.api``) and ``dsdr-eval run`` (``dsdr_eval.cli``) call
``run_evaluation``. Nothing is imported here, so importing a step does not import the others.
"""
