"""The Python API: one function per ``dsdr-eval`` subcommand, for notebooks and scripts.

Each keyword is the CLI option of the same name (``--max-tokens`` -> ``max_tokens``, ``--from`` ->
``tool``) with the same default, and its value is checked as the CLI checks it (``DsdrError`` in one
line). The functions write the same run directory, with the same files and one writer lock per
directory, as the CLI, and return what ``load_run`` reads back (docs/python_api.md)::

    import dsdr_eval
    res = dsdr_eval.evaluate("smollm2-135m", benchmarks=["math500"], out="runs/x", protocol="quick",
                             limit=1, n=2, max_tokens=8, backend="hf")
    res.benchmarks["math500"].scores.at_k()
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from dsdr_eval.rundir import directory as rundir
from dsdr_eval.api.analysis import (DiversityOptions, ImportOptions, ScoreOptions, run_diversity, run_import,
                                    run_score)
from dsdr_eval.api.evaluation import EngineFactory, run_evaluation
from dsdr_eval.api.options import RunOptions, checked
from dsdr_eval.api.sweeping import run_sweep
from dsdr_eval.rundir.results import RunResults, load_run

# Seams and call settings of a function that are not CLI options.
_NOT_OPTIONS = ("engine", "command")


def _options(command: str, caller: str, values: dict[str, Any]) -> dict[str, Any]:
    return checked(command, caller, {k: v for k, v in values.items() if k not in _NOT_OPTIONS})


def _run_options(caller: str, values: dict[str, Any]) -> RunOptions:
    given = dict(values)
    model = given.pop("model", None)
    checked_values = _options("run", caller, given)
    return RunOptions(model=model, **checked_values)  # model: a name, path or a ResolvedModel (not checked)


def evaluate(model: Any, *, benchmarks: list[str] | str, out: str | Path, revision: str | None = None,
             data_dir: str | None = None, limit: int | None = None, subset_seed: int | None = None,
             label: str | None = None, protocol: str = "dsdr-paper", n: int | None = None,
             temperature: float | None = None, top_p: float | None = None, pass1_temperature: float | None = None,
             pass1_top_p: float | None = None, phases: list[str] | None = None, max_tokens: int | None = None,
             seed: int | None = None, extraction: str | None = None, template: str | None = None,
             prompt_mode: str = "auto", backend: str = "auto", dtype: str = "auto", device: str = "auto",
             batch_size: int | None = None, tensor_parallel_size: int = 1, data_parallel_size: int = 1,
             gpu_memory_utilization: float = 0.9, max_model_len: int | None = None, chunk_size: int = 256,
             enforce_eager: bool = False, api: str = "chat", tokenizer: str | None = None,
             extra_body: str | None = None, base_url: list[str] | str | None = None, api_key_env: str | None = None,
             max_concurrency: int | None = None, max_retries: int | None = None, timeout_s: float | None = None,
             backoff_base_s: float | None = None, grading_timeout: float = 5.0, grading_workers: int | None = None,
             no_diversity: bool = False, force_config: bool = False, allow_mixed_models: bool = False,
             no_progress: bool = False, engine: EngineFactory | None = None,
             command: list[str] | None = None) -> RunResults:
    """``dsdr-eval run``: generate, grade and score ``model`` on ``benchmarks`` into the run directory
    ``out`` (an existing one is resumed). Returns the run as ``load_run(out)`` reads it.

    Besides the CLI options: ``model`` may be a ``dsdr_eval.models.ResolvedModel`` (no resolution);
    ``engine(backend_name, resolved_model)`` returns the ``dsdr_eval.backends.Backend`` that generates
    instead of the one ``backend`` names (a fake, or an engine you built); ``command`` is what
    config.json records as the command (default: this call, ``["dsdr_eval.evaluate", ...]``).
    Samples that still failed after every retry leave the run incomplete: a warning says how many,
    the metrics cover the samples present, and the same call again retries only those."""
    options = _run_options("evaluate", locals())
    outcome = run_evaluation(options, command=command or _call_record("evaluate", options), engine=engine)
    if outcome.n_missing:
        warnings.warn(f"{outcome.n_missing} samples missing in {out} after every retry ({outcome.n_failed} failed); "
                      "call evaluate() again to retry only those", stacklevel=2)
    return load_run(options.out)


def _call_record(name: str, options: Any) -> list[str]:
    """config.json's command of an API call: the function and the options that differ from the default."""
    import dataclasses

    given = [f"{f.name}={getattr(options, f.name)!r}" for f in dataclasses.fields(options)
             if f.default is dataclasses.MISSING or getattr(options, f.name) != f.default]
    return [f"dsdr_eval.{name}", *given]


def score(path: str | Path, *, out: str | Path | None = None, timeout: float = 5.0, workers: int | None = None,
          bootstrap: int = 1000, seed: int = 0, no_progress: bool = False, rounded_fraction_tolerance: bool = False,
          extraction: str | None = None) -> RunResults:
    """``dsdr-eval score``: grade a samples JSONL (``out`` required) or a run directory (in place, or
    into ``out``) and compute Pass@k / Avg@k / maj@k with bootstrap CIs. Returns ``load_run(out)``."""
    written, _ = run_score(ScoreOptions(**_options("score", "score", locals())))
    return load_run(written)


def import_results(path: str | Path, *, out: str | Path, tool: str = "auto", benchmark: str | None = None,
                   data_dir: str | None = None, label: str | None = None, strict: bool = False,
                   extraction: str | None = None, lm_eval_filter: str | None = None, step: int | None = None,
                   batch_input: str | None = None, id_field: str = "id", gold_field: str = "answer",
                   completion_field: str = "completion", problem_field: str = "problem",
                   prompt_field: str | None = None, correct_field: str | None = None,
                   command: list[str] | None = None) -> Any:
    """``dsdr-eval import`` (``tool`` is ``--from``): another tool's results become the run directory
    ``out`` (samples.jsonl + config.json; ``score(out)`` grades it). Returns the importer's record
    (``n_samples``, ``n_problems``, ``benchmark``, ``config``, ``matching``). ``command``: what
    config.json records (default: this call)."""
    options = ImportOptions(**_options("import", "import_results", locals()))
    return run_import(options, command=command or _call_record("import_results", options))


def compute_diversity(run_dir: str | Path, *, encoder: str | None = None, partition: str = "embedding",
              threshold: float | None = None, chunked: bool = False, device: str = "cpu", batch_size: int = 64,
              no_progress: bool = False, judge_model: str | None = None,
              judge_base_url: list[str] | str | None = None, judge_api_key_env: str | None = None,
              max_concurrency: int | None = None, max_retries: int | None = None, timeout_s: float | None = None,
              backoff_base_s: float | None = None) -> RunResults:
    """``dsdr-eval diversity``: every diversity metric of a scored run directory, merged into its
    metrics.json. Returns ``load_run(run_dir)`` (``.benchmarks[name].diversity``).

    Not named ``diversity``: ``dsdr_eval.diversity_metrics`` is the metrics package, and importing it sets that
    attribute of ``dsdr_eval`` to the package, so a function of that name would vanish on first use."""
    run_diversity(DiversityOptions(**_options("diversity", "compute_diversity", locals())), log=lambda message: None)
    return load_run(run_dir)


def sweep(train_run: str | Path, *, out: str | Path, benchmarks: list[str] | str, every: int = 1,
          include_final: bool = False, revision: str | None = None, data_dir: str | None = None,
          limit: int | None = None, subset_seed: int | None = None, label: str | None = None,
          protocol: str = "dsdr-paper", n: int | None = None, temperature: float | None = None,
          top_p: float | None = None, pass1_temperature: float | None = None, pass1_top_p: float | None = None,
          phases: list[str] | None = None, max_tokens: int | None = None, seed: int | None = None,
          extraction: str | None = None, template: str | None = None, prompt_mode: str = "auto",
          backend: str = "auto", dtype: str = "auto", device: str = "auto", batch_size: int | None = None,
          tensor_parallel_size: int = 1, data_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
          max_model_len: int | None = None, chunk_size: int = 256, enforce_eager: bool = False, api: str = "chat",
          tokenizer: str | None = None, extra_body: str | None = None, base_url: list[str] | str | None = None,
          api_key_env: str | None = None, max_concurrency: int | None = None, max_retries: int | None = None,
          timeout_s: float | None = None, backoff_base_s: float | None = None, grading_timeout: float = 5.0,
          grading_workers: int | None = None, no_diversity: bool = False, force_config: bool = False,
          allow_mixed_models: bool = False, no_progress: bool = False, engine: EngineFactory | None = None,
          command: list[str] | None = None) -> dict[str, RunResults]:
    """``dsdr-eval sweep``: evaluate every ``every``-th checkpoint of the training run ``train_run``
    (and final/ with ``include_final``) into ``out``/<checkpoint>/ with the run options (all of
    ``evaluate``'s but ``model``); resumable. Returns {checkpoint name: RunResults} of the evaluated
    checkpoints (sweep.json records every checkpoint's status; a failed one is warned about)."""
    given = dict(locals())
    every, include_final, train_run = given.pop("every"), given.pop("include_final"), given.pop("train_run")
    checked_sweep = checked("sweep", "sweep", {"every": every, "include_final": include_final})
    options = _run_options("sweep", given)
    code, record = run_sweep(train_run, options, every=checked_sweep["every"],
                             include_final=checked_sweep["include_final"],
                             command=command or _call_record("sweep", options), engine=engine)
    runs = {e["name"]: load_run(Path(options.out) / e["run_dir"]) for e in record["checkpoints"]
            if (Path(options.out) / e["run_dir"] / rundir.METRICS).exists()}
    failed = [f"{e['name']} ({e['status']}: {e.get('message', '')})" for e in record["checkpoints"]
              if e["status"] != "done"]
    if code and failed:
        warnings.warn(f"sweep {options.out}: not done: {'; '.join(failed)}", stacklevel=2)
    return runs
