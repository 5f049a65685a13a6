"""``dsdr-eval score``, ``import``, ``diversity``, ``judge`` and ``report`` as library calls on frozen
options (``dsdr_eval.options.commands``: the declared options, the CLI's too). The CLI and the keyword API
(``dsdr_eval.score`` ...) both call these; the CLI prints what they return. Heavy libraries are imported inside the functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from dsdr_eval.errors import DsdrError
from dsdr_eval.options.commands import DiversityOptions, ImportOptions, JudgeOptions, ReportOptions, ScoreOptions

if TYPE_CHECKING:  # built inside _answer_judge, only with --judge-grading
    from dsdr_eval.llm_judge.answers import AnswerJudge


def run_score(options: ScoreOptions) -> tuple[Path, dict[str, Any]]:
    """Grade a samples file (into ``out``) or a run directory (in place, or into ``out``); returns the
    directory written and its metrics.json content."""
    from dsdr_eval.rundir import directory as rundir
    from dsdr_eval.grading.answer_norm import GradingOptions
    from dsdr_eval.scoring.score import score_samples

    path = Path(options.path)
    if path.is_dir():
        # an import killed past its commit point has samples.jsonl still under its temp name: finish it first
        rundir.settle(path)
        samples = path / rundir.SAMPLES
        if not samples.exists():
            raise DsdrError(f"{path}: run directory has no {rundir.SAMPLES}")
        out = Path(options.out) if options.out else path
    elif path.is_file():
        if not options.out:
            raise DsdrError(f"{path}: --out DIR is required when scoring a samples file "
                            "(or pass a run directory to score it in place)")
        samples, out = path, Path(options.out)
    else:
        raise DsdrError(f"{path}: no such file or directory")
    judge = _answer_judge(options, out)
    try:
        with rundir.writer_lock(out):  # one writer per run directory
            metrics = score_samples(samples, out, grading_timeout_s=options.grading_timeout_s, workers=options.workers,
                                    progress=not options.no_progress, bootstrap=options.bootstrap, seed=options.seed,
                                    options=GradingOptions(rounded_fraction_tolerance=options.rounded_fraction_tolerance),
                                    extraction=options.extraction, reasoning_format=options.reasoning_format,
                                    judge=judge, judge_mode=options.judge_grading, data_dir=options.data_dir)
    finally:
        if judge is not None:
            judge.close()
    return out, metrics


def _answer_judge(options: ScoreOptions, out: Path) -> "AnswerJudge | None":
    """The ``AnswerJudge`` of ``--judge-grading rejected|all`` (its cache: OUT/judge_cache.jsonl), else
    None; the judge options only apply with it."""
    from dsdr_eval.options.endpoint import JUDGE_ENDPOINT, endpoint_config, given_endpoint_options

    given = (["--judge-model"] if options.judge_model else []) + given_endpoint_options(options, prefix="judge-")
    if options.judge_grading == "off":
        if given:
            raise DsdrError(f"{given[0]} only applies to --judge-grading rejected|all")
        return None
    if not options.judge_model:
        raise DsdrError(f"--judge-grading {options.judge_grading} needs the judge's model: --judge-model MODEL")
    from dsdr_eval.llm_judge.answers import AnswerJudge
    from dsdr_eval.llm_judge.cache import JudgeCache
    from dsdr_eval.openai_api.client import OpenAICompatClient

    out.mkdir(parents=True, exist_ok=True)
    client = OpenAICompatClient(endpoint_config(options, JUDGE_ENDPOINT, model=options.judge_model, prefix="judge-"))
    return AnswerJudge(client, cache=JudgeCache(out), progress=not options.no_progress)


def run_import(options: ImportOptions, command: list[str]) -> Any:
    """Write ``options.out`` (samples.jsonl + config.json) from another tool's results; returns the
    importer's record (``dsdr_eval.importers.write.import_run``). ``command`` goes to config.json."""
    from dsdr_eval.importers.plain import FieldMap
    from dsdr_eval.importers.write import import_run
    from dsdr_eval.rundir.directory import writer_lock

    fields = FieldMap(id=options.id_field, gold=options.gold_field, completion=options.completion_field,
                      problem=options.problem_field, prompt=options.prompt_field, correct=options.correct_field,
                      reasoning=options.reasoning_field, finish_reason=options.finish_reason_field)
    with writer_lock(options.out):  # one writer per run directory
        return import_run(options.tool, Path(options.path), Path(options.out), benchmark=options.benchmark,
                          label=options.label, command=command, data_dir=options.data_dir,
                          filter_name=options.lm_eval_filter, step=options.step, fields=fields,
                          batch_input=options.batch_input, strict=options.strict, extraction=options.extraction,
                          reasoning_format=options.reasoning_format, tokenizer=options.tokenizer)


def _equivalence(options: DiversityOptions) -> Any:
    """The pair equivalence of ``partition`` (the judge options only apply to ``partition='judge'``).
    Built before the encoder loads, so a bad option costs no model load."""
    from dsdr_eval.options.endpoint import JUDGE_ENDPOINT, endpoint_options, given_endpoint_options
    from dsdr_eval.diversity_metrics.partition_methods import check_partition_spec, make_equivalence

    method, _ = check_partition_spec(options.partition)
    given = (["--judge-model"] if options.judge_model else []) + given_endpoint_options(options, prefix="judge-")
    if method != "judge":
        if given:
            raise DsdrError(f"{given[0]} only applies to --partition judge")
        return make_equivalence(options.partition, threshold=options.threshold, device=options.device)
    return make_equivalence(options.partition, judge_model=options.judge_model, judge_cache_dir=options.run_dir,
                            judge_endpoint=endpoint_options(options, JUDGE_ENDPOINT, prefix="judge-"))


def run_diversity(options: DiversityOptions, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every diversity metric of a scored run directory, merged into its metrics.json (and the per-problem
    and per-sample files); returns the per-benchmark blocks. ``log`` gets the progress notes."""
    from dsdr_eval.rundir import directory as rundir
    from dsdr_eval.diversity_metrics.run import compute_run_diversity
    from dsdr_eval.diversity_metrics.semantic import load_encoder
    from dsdr_eval.backends.threads import set_torch_threads

    rundir.require_run_dir(options.run_dir, rundir.GRADED)  # fail before loading any model
    if options.no_progress:
        from dsdr_eval.progress import quiet_library_bars

        quiet_library_bars()
    equivalence = _equivalence(options)
    try:
        with rundir.writer_lock(options.run_dir):  # one writer per run directory
            threads = set_torch_threads(options.threads, log=log).to_record()
            encoder = load_encoder(options.encoder, options.device, chunked=options.chunked,
                                   batch_size=options.batch_size)
            return compute_run_diversity(options.run_dir, encoder=encoder, equivalence=equivalence,
                                         progress=not options.no_progress, device=options.device, log=log,
                                         text=options.text, cut=options.solution_cut, threads=threads)
    finally:
        equivalence.close()


@dataclass(frozen=True)
class JudgeOutcome:
    """What a judge run did: the judge model and the per-benchmark judge blocks (as in metrics.json)."""

    model: str
    blocks: dict[str, dict[str, Any]]

    @property
    def n_ok(self) -> int:
        return sum(block["n_ok"] for block in self.blocks.values())

    @property
    def n_failed(self) -> int:
        return sum(block["n_failed"] for block in self.blocks.values())

    @property
    def n_problems(self) -> int:
        return sum(block["n_problems"] for block in self.blocks.values())

    def failure_summary(self) -> str:
        """``reason=count, ...`` over every benchmark, sorted by reason."""
        reasons: dict[str, int] = {}
        for block in self.blocks.values():
            for reason, count in block["failed_by_reason"].items():
                reasons[reason] = reasons.get(reason, 0) + count
        return ", ".join(f"{reason}={count}" for reason, count in sorted(reasons.items()))


def _judge_settings(options: JudgeOptions) -> Any:
    """The ``JudgeSettings`` of the options; a contradiction or a bad budget is a DsdrError."""
    from dsdr_eval.llm_judge.prompt import PromptBudget
    from dsdr_eval.llm_judge.run import JudgeSettings
    from dsdr_eval.llm_judge.structured import AUTO, JSON_OBJECT

    try:
        budget = PromptBudget(max_rollout_chars=options.max_rollout_chars, max_prompt_chars=options.max_prompt_chars)
    except ValueError as exc:
        raise DsdrError(f"judge: {exc}") from None
    if options.json_mode and options.response_format not in (None, JSON_OBJECT):
        raise DsdrError(f"judge: --json-mode contradicts --response-format {options.response_format}")
    names = tuple(part.strip() for part in (options.benchmarks or "").split(",") if part.strip())
    return JudgeSettings(benchmarks=names or None, limit=options.limit, max_rollouts=options.max_rollouts,
                         correct_only=options.correct_only, phase=options.phase,
                         temperature=options.judge_temperature, max_tokens=options.judge_max_tokens,
                         response_format=JSON_OBJECT if options.json_mode else (options.response_format or AUTO),
                         use_cache=not options.no_cache, budget=budget)


def run_judging(options: JudgeOptions) -> JudgeOutcome:
    """LLM-judge diversity of a run directory's rollouts: writes judge.jsonl, the 'judge' key of each judged
    benchmark in metrics.json and config.json's 'judge'. Failed problems are counted in the blocks, not
    raised (``allow_failures`` is the caller's policy: the CLI's exit status, the API's exception)."""
    from dsdr_eval.options.endpoint import JUDGE_ENDPOINT, endpoint_config
    from dsdr_eval.llm_judge.run import run_judge
    from dsdr_eval.openai_api.client import OpenAICompatClient
    from dsdr_eval.rundir.directory import require_run_dir, writer_lock

    endpoint = endpoint_config(options, JUDGE_ENDPOINT, model=options.judge_model, prefix="judge-")
    settings = _judge_settings(options)
    require_run_dir(options.run_dir)  # a missing RUN_DIR is an error, not created by the lock
    with writer_lock(options.run_dir), OpenAICompatClient(endpoint) as client:  # one writer per run directory
        blocks = run_judge(options.run_dir, client, settings, cache_dir=options.cache_dir,
                           progress=False if options.no_progress else None, retry_failed=options.retry_failed)
    return JudgeOutcome(model=endpoint.model, blocks=blocks)


def run_report(options: ReportOptions, command: list[str]) -> dict[str, Any]:
    """Write the report directory ``options.out``; returns its record (report.json's content, as
    ``make_report`` returns it). ``command`` goes to report.json."""
    from dsdr_eval.reporting.build import make_report
    from dsdr_eval.reporting.reference import select_reference

    select_reference(options.reference)  # an unknown reference fails before any run is read
    return make_report(options, command=command)
