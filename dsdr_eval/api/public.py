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

from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.api.analysis import (DiversityOptions, ImportOptions, JudgeOptions, ReportCommandOptions,
                                    ScoreOptions, run_diversity, run_import, run_judging, run_report, run_score)
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
             seed: int | None = None, extraction: str | None = None, reasoning_format: str | None = None,
             template: str | None = None,
             prompt_mode: str = "auto", backend: str = "auto", dtype: str = "auto", device: str = "auto",
             batch_size: int | None = None, tensor_parallel_size: int = 1, data_parallel_size: int = 1,
             gpu_memory_utilization: float = 0.9, max_model_len: int | None = None, chunk_size: int = 256,
             enforce_eager: bool = False, api: str = "chat", tokenizer: str | None = None,
             extra_body: str | None = None, chat_template_kwargs: str | None = None,
             base_url: list[str] | str | None = None, api_key_env: str | None = None,
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

    def default(f: dataclasses.Field) -> Any:
        return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default

    given = [f"{f.name}={getattr(options, f.name)!r}" for f in dataclasses.fields(options)
             if default(f) is dataclasses.MISSING or getattr(options, f.name) != default(f)]
    return [f"dsdr_eval.{name}", *given]


def score(path: str | Path, *, out: str | Path | None = None, timeout: float = 5.0, workers: int | None = None,
          bootstrap: int = 1000, seed: int = 0, no_progress: bool = False, rounded_fraction_tolerance: bool = False,
          extraction: str | None = None, reasoning_format: str | None = None) -> RunResults:
    """``dsdr-eval score``: grade a samples JSONL (``out`` required) or a run directory (in place, or
    into ``out``) and compute Pass@k / Avg@k / maj@k with bootstrap CIs. Returns ``load_run(out)``."""
    written, _ = run_score(ScoreOptions(**_options("score", "score", locals())))
    return load_run(written)


def import_results(path: str | Path, *, out: str | Path, tool: str = "auto", benchmark: str | None = None,
                   data_dir: str | None = None, label: str | None = None, strict: bool = False,
                   extraction: str | None = None, reasoning_format: str | None = None,
                   lm_eval_filter: str | None = None, step: int | None = None,
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


def diversity(run_dir: str | Path, *, encoder: str | None = None, partition: str = "embedding",
              threshold: float | None = None, chunked: bool = False, device: str = "cpu", batch_size: int = 64,
              no_progress: bool = False, text: str = "answer", judge_model: str | None = None,
              judge_base_url: list[str] | str | None = None, judge_api_key_env: str | None = None,
              max_concurrency: int | None = None, max_retries: int | None = None, timeout_s: float | None = None,
              backoff_base_s: float | None = None) -> RunResults:
    """``dsdr-eval diversity``: every diversity metric of a scored run directory, merged into its
    metrics.json. Returns ``load_run(run_dir)`` (``.benchmarks[name].diversity``)."""
    run_diversity(DiversityOptions(**_options("diversity", "diversity", locals())), log=lambda message: None)
    return load_run(run_dir)


def judge(run_dir: str | Path, *, judge_model: str, judge_base_url: list[str] | str | None = None,
          judge_api_key_env: str | None = None, max_concurrency: int | None = None, max_retries: int | None = None,
          timeout_s: float | None = None, backoff_base_s: float | None = None,
          benchmarks: list[str] | str | None = None, limit: int | None = None, max_rollouts: int = 32,
          correct_only: bool = False, phase: str = "sampling",
          judge_temperature: float = 0.0, judge_max_tokens: int = 512, response_format: str | None = None,
          json_mode: bool = False, max_rollout_chars: int = 6000, max_prompt_chars: int = 100_000,
          cache_dir: str | Path | None = None, no_cache: bool = False, retry_failed: bool = False,
          allow_failures: bool = False, no_progress: bool = False) -> RunResults:
    """``dsdr-eval judge``: LLM-as-judge diversity (logic, formula, semantic, overall; 0-10) of a run
    directory's rollouts through an OpenAI-compatible endpoint; writes judge.jsonl and the 'judge' key of
    each judged benchmark in metrics.json. Returns ``load_run(run_dir)`` (``.benchmarks[name].judge``).

    Where the CLI exits 1 (a problem failed, or every one did even with ``allow_failures``), the files
    are written and a ``DsdrError`` says how many failed and why; with ``allow_failures`` and some
    problems judged, a warning says it and the call returns (the means cover the judged problems)."""
    outcome = run_judging(JudgeOptions(**_options("judge", "judge", locals())))
    if outcome.n_failed:
        what = ("every judge call failed" if outcome.n_ok == 0
                else f"{outcome.n_failed} of {outcome.n_problems} problems failed")
        message = (f"judge {run_dir}: {what} ({outcome.failure_summary()}); call again to retry HTTP failures "
                   "(not cached), with retry_failed=True to ask again for unparseable cached replies")
        if outcome.n_ok == 0:  # nothing judged at all is never a success
            raise DsdrError(message)
        if not allow_failures:
            raise DsdrError(f"{message}; allow_failures=True returns the means of the judged problems")
        warnings.warn(message, stacklevel=2)
    return load_run(run_dir)


# label=[] and train=[]: the CLI's defaults (the keyword test compares them); never mutated.
def report(runs: list[str | Path] | str | Path, *, out: str | Path, label: list[str] = [],  # noqa: B006
           reference: str | None = None, allow_mixed: bool = False, ci: bool = False, avg_metric: str = "auto",
           digits: int = 1, baseline: str | None = None, bootstrap: int = 2000, seed: int = 0,
           no_compare: bool = False, train: list[str | Path] = [],  # noqa: B006
           smoothing: float = 0.0, title: str | None = None, command: list[str] | None = None) -> dict[str, Any]:
    """``dsdr-eval report``: the report directory ``out`` (Table 1 in Markdown/LaTeX/CSV, figures, paired
    comparisons, the protocol) of the evaluation ``runs`` (and the training runs ``train``). ``label``
    and ``train`` are lists, as the repeated ``--label`` / ``--train`` options. Returns the report record
    that ``reporting.build.make_report`` returns and report.json holds (``files``, ``plots`` with their
    ``skipped`` reasons, ``mixed_protocols``, ``comparison_warnings`` ...). ``command``: what report.json
    records (default: this call)."""
    given = {key: _paths(key, value) if key in ("runs", "label", "train") else value
             for key, value in locals().items()}
    runs_given = given.pop("runs")  # a positional list: checked as paths here, not as a comma-list option
    options = ReportCommandOptions(runs=runs_given, **_options("report", "report", given))
    return run_report(options, command=command or _call_record("report", options))


def _paths(name: str, values: Any) -> list[str]:
    """A list option given as a list of strings or paths, or as one of them (one ``--NAME``)."""
    items = [values] if isinstance(values, (str, Path)) else values
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, (str, Path)) for v in items):
        raise DsdrError(f"report({name}={values!r}): expected a string or path, or a list of them")
    return [str(v) for v in items]


def sweep(train_run: str | Path, *, out: str | Path, benchmarks: list[str] | str, every: int = 1,
          include_final: bool = False, revision: str | None = None, data_dir: str | None = None,
          limit: int | None = None, subset_seed: int | None = None, label: str | None = None,
          protocol: str = "dsdr-paper", n: int | None = None, temperature: float | None = None,
          top_p: float | None = None, pass1_temperature: float | None = None, pass1_top_p: float | None = None,
          phases: list[str] | None = None, max_tokens: int | None = None, seed: int | None = None,
          extraction: str | None = None, reasoning_format: str | None = None, template: str | None = None,
          prompt_mode: str = "auto",
          backend: str = "auto", dtype: str = "auto", device: str = "auto", batch_size: int | None = None,
          tensor_parallel_size: int = 1, data_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
          max_model_len: int | None = None, chunk_size: int = 256, enforce_eager: bool = False, api: str = "chat",
          tokenizer: str | None = None, extra_body: str | None = None, chat_template_kwargs: str | None = None,
             base_url: list[str] | str | None = None,
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
