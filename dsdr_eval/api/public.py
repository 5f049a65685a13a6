"""The Python API: one function per ``dsdr-eval`` subcommand, for notebooks and scripts.

Each keyword is the CLI option of the same name (``--max-tokens`` -> ``max_tokens``, ``--from`` ->
``tool``) with the same default: a function's signature is made from its subcommand's declared options
(``dsdr_eval.options.commands``), and a value is checked as the CLI checks it (``DsdrError`` in one
line). The functions write the same run directory, with the same files and one writer lock per
directory, as the CLI, and return what ``load_run`` reads back (docs/python_api.md)::

    import dsdr_eval
    res = dsdr_eval.evaluate("smollm2-135m", benchmarks=["math500"], out="runs/x", protocol="quick",
                             limit=1, n=2, max_tokens=8, backend="hf")
    res.benchmarks["math500"].scores.at_k()
"""

from __future__ import annotations

import functools
import inspect
import warnings
from pathlib import Path
from typing import Any, Callable

from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.api.analysis import run_diversity, run_import, run_judging, run_report, run_score
from dsdr_eval.run.evaluation import run_evaluation
from dsdr_eval.api.sweeping import run_sweep
from dsdr_eval.options import commands
from dsdr_eval.options.commands import (AuditOptions, DiversityOptions, ImportOptions, JudgeOptions, MergeOptions,
                                        ReportOptions, RunOptions, ScoreOptions)
from dsdr_eval.options.schema import Option, checked, keyword_spelling, signature
from dsdr_eval.rundir.results import RunResults, load_run

# Seams and call settings of a function that are not CLI options: keyword-only, after the options.
_ENGINE = inspect.Parameter("engine", inspect.Parameter.KEYWORD_ONLY, default=None)
_COMMAND = inspect.Parameter("command", inspect.Parameter.KEYWORD_ONLY, default=None)


def _declared(options: tuple[Option, ...], *extra: inspect.Parameter,
              positional: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give ``function(*args, **kwargs)`` the signature of ``options`` (then ``extra``): ``help()`` and
    ``inspect.signature`` show every keyword with its default, and ``_bind`` refuses an unknown one."""
    def attach(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return function(*args, **kwargs)
            except DsdrError as exc:  # the library's messages name CLI flags; the caller wrote keywords
                exc.args = (keyword_spelling(str(exc), options), *exc.args[1:])
                raise
        call.__signature__ = signature(options, positional=positional, extra=extra)  # type: ignore[attr-defined]
        return call
    return attach


def _bind(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every parameter of ``function``'s declared signature: given, or its default (TypeError as for a def)."""
    parameters = inspect.signature(function).parameters
    unknown = [name for name in kwargs if name not in parameters]
    if unknown and not any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        import difflib

        close = difflib.get_close_matches(unknown[0], list(parameters), n=1, cutoff=0.6)
        raise TypeError(f"dsdr_eval.{function.__name__}() got an unexpected keyword argument {unknown[0]!r}"
                        + (f"; did you mean {close[0]}=?" if close else "")
                        + f" (every keyword: help(dsdr_eval.{function.__name__}))")
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _run_options(options: tuple[Option, ...], caller: str, values: dict[str, Any], model: Any) -> Any:
    """``RunOptions`` of checked ``values``; ``model`` (a name, path or a ResolvedModel) is not checked."""
    return RunOptions(model=model, **checked(options, caller, values))


@_declared(commands.RUN, _ENGINE, _COMMAND, positional=("model",))
def evaluate(*args: Any, **kwargs: Any) -> RunResults:
    """``dsdr-eval run``: generate, grade and score ``model`` on ``benchmarks`` into the run directory
    ``out`` (an existing one is resumed). Returns the run as ``load_run(out)`` reads it.

    Besides the CLI options: ``model`` may be a ``dsdr_eval.models.ResolvedModel`` (no resolution);
    ``engine(backend_name, resolved_model)`` returns the ``dsdr_eval.backends.Backend`` that generates
    instead of the one ``backend`` names (a fake, or an engine you built); ``command`` is what
    config.json records as the command (default: this call, ``["dsdr_eval.evaluate", ...]``).
    Samples that still failed after every retry leave the run incomplete: a warning says how many,
    the metrics cover the samples present, and the same call again retries only those."""
    given = _bind(evaluate, args, kwargs)
    engine, command, model = given.pop("engine"), given.pop("command"), given.pop("model")
    options = _run_options(commands.RUN, "evaluate", given, model)
    outcome = run_evaluation(options, command=command or _call_record("evaluate", options), engine=engine)
    if outcome.n_missing:
        warnings.warn(f"{outcome.n_missing} samples missing in {options.out} after every retry ({outcome.n_failed} "
                      "failed); call evaluate() again to retry only those", stacklevel=2)
    return load_run(options.out)


def _call_record(name: str, options: Any) -> list[str]:
    """config.json's command of an API call: the function and the options that differ from the default."""
    import dataclasses

    def default(f: dataclasses.Field) -> Any:
        return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default

    given = [f"{f.name}={getattr(options, f.name)!r}" for f in dataclasses.fields(options)
             if default(f) is dataclasses.MISSING or getattr(options, f.name) != default(f)]
    return [f"dsdr_eval.{name}", *given]


@_declared(commands.SCORE)
def score(*args: Any, **kwargs: Any) -> RunResults:
    """``dsdr-eval score``: grade a samples JSONL (``out`` required) or a run directory (in place, or
    into ``out``) and compute Pass@k / Avg@k / maj@k with bootstrap CIs. Returns ``load_run(out)``.

    With ``judge_grading``: where the CLI exits 1 (a judge call failed), the files are written and a
    ``DsdrError`` says how many verdicts are unavailable."""
    from dsdr_eval.scoring.judge_grading import unavailable_message

    written, metrics = run_score(ScoreOptions(**checked(commands.SCORE, "score", _bind(score, args, kwargs))))
    failed = unavailable_message(metrics)
    if failed:
        raise DsdrError(f"score {written}: {failed}")
    return load_run(written)


@_declared(commands.IMPORT, _COMMAND)
def import_results(*args: Any, **kwargs: Any) -> Any:
    """``dsdr-eval import`` (``tool`` is ``--from``): another tool's results become the run directory
    ``out`` (samples.jsonl + config.json; ``score(out)`` grades it). Returns the importer's record
    (``n_samples``, ``n_problems``, ``benchmark``, ``config``, ``matching``). ``command``: what
    config.json records (default: this call)."""
    given = _bind(import_results, args, kwargs)
    command = given.pop("command")
    options = ImportOptions(**checked(commands.IMPORT, "import_results", given))
    return run_import(options, command=command or _call_record("import_results", options))


@_declared(commands.DIVERSITY)
def diversity(*args: Any, **kwargs: Any) -> RunResults:
    """``dsdr-eval diversity``: every diversity metric of a scored run directory, merged into its
    metrics.json. Returns ``load_run(run_dir)`` (``.benchmarks[name].diversity``)."""
    options = DiversityOptions(**checked(commands.DIVERSITY, "diversity", _bind(diversity, args, kwargs)))
    run_diversity(options, log=lambda message: None)
    return load_run(options.run_dir)


@_declared(commands.JUDGE)
def judge(*args: Any, **kwargs: Any) -> RunResults:
    """``dsdr-eval judge``: LLM-as-judge diversity (logic, formula, semantic, overall; 0-10) of a run
    directory's rollouts through an OpenAI-compatible endpoint; writes judge.jsonl and the 'judge' key of
    each judged benchmark in metrics.json. Returns ``load_run(run_dir)`` (``.benchmarks[name].judge``).

    Where the CLI exits 1 (a problem failed, or every one did even with ``allow_failures``), the files
    are written and a ``DsdrError`` says how many failed and why; with ``allow_failures`` and some
    problems judged, a warning says it and the call returns (the means cover the judged problems)."""
    options = JudgeOptions(**checked(commands.JUDGE, "judge", _bind(judge, args, kwargs)))
    outcome = run_judging(options)
    if outcome.n_failed:
        what = ("every judge call failed" if outcome.n_ok == 0
                else f"{outcome.n_failed} of {outcome.n_problems} problems failed")
        message = (f"judge {options.run_dir}: {what} ({outcome.failure_summary()}); call again to retry HTTP "
                   "failures (not cached), with retry_failed=True to ask again for unparseable cached replies")
        if outcome.n_ok == 0:  # nothing judged at all is never a success
            raise DsdrError(message)
        if not options.allow_failures:
            raise DsdrError(f"{message}; allow_failures=True returns the means of the judged problems")
        warnings.warn(message, stacklevel=2)
    return load_run(options.run_dir)


@_declared(commands.REPORT, _COMMAND)
def report(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """``dsdr-eval report``: the report directory ``out`` (Table 1 in Markdown/LaTeX/CSV, figures, paired
    comparisons, the protocol) of the evaluation ``runs`` (and the training runs ``train``). ``label``
    and ``train`` are lists, as the repeated ``--label`` / ``--train`` options. Returns the report record
    that ``reporting.build.make_report`` returns and report.json holds (``files``, ``plots`` with their
    ``skipped`` reasons, ``mixed_protocols``, ``comparison_warnings`` ...). ``command``: what report.json
    records (default: this call)."""
    given = {key: _paths(key, value) if key in ("runs", "label", "train") else value
             for key, value in _bind(report, args, kwargs).items()}
    runs_given, command = given.pop("runs"), given.pop("command")  # runs: checked as paths here, not as a comma-list
    options = ReportOptions(runs=runs_given, **checked(commands.REPORT, "report", given))
    return run_report(options, command=command or _call_record("report", options))


@_declared(commands.AUDIT)
def audit(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """``dsdr-eval audit``: the samples of a scored run directory (or graded.jsonl) ``path`` that raise
    audit flags (docs/evaluate.md "Audit flags"), each a dict with ``key``, ``line``, ``audit`` (its
    flags), ``status``, ``gold``, ``extracted``, ``extraction``, ``finish_reason``, ``problem``,
    ``answer_end`` (the end of the graded answer part); only ``flag`` / ``benchmark`` when given, at
    most ``limit``. The counts per benchmark are in ``load_run(path)``'s metrics (``audit_counts``)."""
    from dsdr_eval.scoring.audit_listing import flagged_samples

    options = AuditOptions(**checked(commands.AUDIT, "audit", _bind(audit, args, kwargs)))
    return list(flagged_samples(options.path, flag=options.flag, benchmark=options.benchmark, limit=options.limit))


def _paths(name: str, values: Any, caller: str = "report") -> list[str]:
    """A list option given as a list of strings or paths, or as one of them (one ``--NAME``)."""
    items = [values] if isinstance(values, (str, Path)) else values
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, (str, Path)) for v in items):
        raise DsdrError(f"{caller}({name}={values!r}): expected a string or path, or a list of them")
    return [str(v) for v in items]


@_declared(commands.MERGE, _COMMAND)
def merge(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """``dsdr-eval merge``: join the run directories ``shards`` of ``evaluate(..., shard="I/N")`` (every I of
    one N) into the run directory ``out``, after checking that they are one run's shards, each finished,
    together every sample once (docs/evaluate.md, Shards). Returns the merged config.json record; grade
    it with ``score(out)``. ``command``: what config.json records (default: this call)."""
    given = _bind(merge, args, kwargs)
    shards = [str(path) for path in _paths("shards", given.pop("shards"), caller="merge")]
    command = given.pop("command")
    options = MergeOptions(shards=shards, **checked(commands.MERGE, "merge", given))
    from dsdr_eval.run.merge import merge_shards

    return merge_shards(options.shards, options.out, command=command or _call_record("merge", options))


@_declared(commands.SWEEP, _ENGINE, _COMMAND)
def sweep(*args: Any, **kwargs: Any) -> dict[str, RunResults]:
    """``dsdr-eval sweep``: evaluate every ``every``-th checkpoint of the training run ``train_run``
    (and final/ with ``include_final``) into ``out``/<checkpoint>/ with the run options (all of
    ``evaluate``'s but ``model``); resumable. Returns {checkpoint name: RunResults} of the evaluated
    checkpoints (sweep.json records every checkpoint's status; a failed one is warned about)."""
    given = _bind(sweep, args, kwargs)
    engine, command, train_run = given.pop("engine"), given.pop("command"), given.pop("train_run")
    which = checked(commands.SWEEP_OWN, "sweep", {"every": given.pop("every"),
                                                  "include_final": given.pop("include_final")})
    options = _run_options(commands.SWEEP, "sweep", given, None)
    code, record = run_sweep(train_run, options, every=which["every"], include_final=which["include_final"],
                             command=command or _call_record("sweep", options), engine=engine)
    runs = {e["name"]: load_run(Path(options.out) / e["run_dir"]) for e in record["checkpoints"]
            if (Path(options.out) / e["run_dir"] / rundir.METRICS).exists()}
    failed = [f"{e['name']} ({e['status']}: {e.get('message', '')})" for e in record["checkpoints"]
              if e["status"] != "done"]
    if code and failed:
        warnings.warn(f"sweep {options.out}: not done: {'; '.join(failed)}", stacklevel=2)
    return runs
