"""LLM-as-judge diversity over a run directory (docs/ALGORITHMS.md §5; DSDR paper's judge protocol).

For each problem, the first ``max_rollouts`` (32) rollouts of the "sampling" phase, by
sample_idx, go into ONE judge call that returns logic / formula / semantic diversity (0-10) and
their mean. Results: RUN_DIR/judge.jsonl (one line per problem) and a "judge" key per benchmark
in metrics.json (means over successful problems; failures counted by reason, never scored 0).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from dsdr_eval.rundir import directory as rundir
from dsdr_eval.errors import DsdrError
from dsdr_eval.grading.solution import DEFAULT_SOLUTION_CUT, solution_text
from dsdr_eval.grading.reasoning import split_completion
from dsdr_eval.llm_judge.cache import JudgeCache
from dsdr_eval.llm_judge.parse import AXES, JudgeParseError, parse_judge_response
from dsdr_eval.llm_judge.prompt import (
    PROMPT_VERSION,
    JudgePrompt,
    PromptBudget,
    build_judge_prompt,
    prompt_record,
)
from dsdr_eval.llm_judge.structured import AUTO, VERDICT_SCHEMA, Reply, StructuredAsker, check_response_format
from dsdr_eval.rundir.jsonl import jsonl_chunks, read_jsonl
from dsdr_eval.openai_api.client import OpenAICompatClient
from dsdr_eval.rundir.samples import SAMPLING, GradedSample, Sample, read_graded, read_samples, sample_of

PAPER_BENCHMARKS = ("aime24", "aime25", "minerva", "olympiadbench")


@dataclass(frozen=True)
class JudgeSettings:
    benchmarks: tuple[str, ...] | None = None  # None = every benchmark in the file
    limit: int | None = None                   # problems per benchmark (first N in file order)
    max_rollouts: int = 32                     # paper: 32 rollouts per judge call
    min_rollouts: int = 2                      # diversity of fewer than 2 rollouts is undefined -> skipped
    correct_only: bool = False
    phase: str = SAMPLING
    temperature: float = 0.0
    max_tokens: int = 512
    response_format: str = AUTO                # auto (json_schema -> json_object -> text) or one mode
    use_cache: bool = True
    excerpt_chars: int = 600                   # raw reply excerpt kept in judge.jsonl
    solution_cut: str = DEFAULT_SOLUTION_CUT   # each rollout up to the end of its graded answer (issue 42)
    budget: PromptBudget = field(default_factory=PromptBudget)

    def __post_init__(self) -> None:
        if self.max_rollouts < 1:
            raise DsdrError(f"judge: --max-rollouts must be >= 1, got {self.max_rollouts}")
        if self.min_rollouts < 1:
            raise DsdrError(f"judge: min_rollouts must be >= 1, got {self.min_rollouts}")
        if self.limit is not None and self.limit < 1:
            raise DsdrError(f"judge: --limit must be >= 1, got {self.limit}")
        if self.max_tokens < 1:
            raise DsdrError(f"judge: --judge-max-tokens must be >= 1, got {self.max_tokens}")
        check_response_format(self.response_format)

    def request_params(self) -> dict[str, Any]:
        """The sampling parameters sent with every judge call (hashed into the cache key with the
        response format of ``dsdr_eval.llm_judge.structured``)."""
        return {"temperature": self.temperature, "max_tokens": self.max_tokens}

    def to_config(self) -> dict[str, Any]:
        out = asdict(self)
        out["benchmarks"] = list(self.benchmarks) if self.benchmarks else None
        return out


@dataclass(frozen=True)
class ProblemRollouts:
    benchmark: str
    problem_id: str
    problem: str | None
    texts: list[str]
    sample_idx: list[int]
    n_available: int  # rollouts of this problem in the phase (before correct-only and the cap)


def _source_file(run_dir: Path, correct_only: bool) -> Path:
    graded = rundir.run_path(run_dir, rundir.GRADED)
    if graded.exists():
        return graded
    if correct_only:
        raise DsdrError(f"{run_dir}: --correct-only needs {rundir.GRADED} (run `dsdr-eval score {run_dir}` first)")
    samples = rundir.run_path(run_dir, rundir.SAMPLES)
    if samples.exists():
        return samples
    raise DsdrError(f"{run_dir}: neither {rundir.GRADED} nor {rundir.SAMPLES} found")


def select_rollouts(records: Sequence[Sample | GradedSample], settings: JudgeSettings,
                    source: str | Path) -> list[ProblemRollouts]:
    """Group the phase's records per problem, keep the first ``max_rollouts`` by sample_idx (the
    records come validated from ``samples.read_graded`` / ``read_samples``: keys are unique)."""
    groups: dict[tuple[str, str], list[Sample | GradedSample]] = {}
    for record in records:
        key = record.key
        if key.phase != settings.phase:
            continue
        if settings.correct_only and not isinstance(record, GradedSample):
            raise DsdrError(f"{source}:{record.line}: --correct-only needs field 'correct' (a graded file)")
        groups.setdefault((key.benchmark, key.problem_id), []).append(record)

    present = sorted({b for b, _ in groups})
    wanted = settings.benchmarks
    if wanted:
        unknown = [b for b in wanted if b not in present]
        if unknown:
            raise DsdrError(f"{source}: benchmark(s) {unknown} not in the file (phase {settings.phase!r}); "
                            f"present: {present}")
    selected: list[ProblemRollouts] = []
    per_benchmark = Counter()
    for (benchmark, problem_id), members in groups.items():  # dicts keep file order
        if wanted and benchmark not in wanted:
            continue
        if settings.limit is not None and per_benchmark[benchmark] >= settings.limit:
            continue
        per_benchmark[benchmark] += 1
        members.sort(key=lambda record: record.key.sample_idx)
        pool = [r for r in members if not settings.correct_only or r.correct]
        kept = pool[: settings.max_rollouts]
        chosen = [sample_of(r) for r in kept]
        selected.append(ProblemRollouts(
            benchmark=benchmark, problem_id=problem_id,
            problem=next((sample_of(r).problem for r in members if sample_of(r).problem is not None), None),
            texts=[answer_part(r, settings.solution_cut) for r in kept], sample_idx=[r.sample_idx for r in chosen],
            n_available=len(members)))
    return selected


def answer_part(record: Sample | GradedSample, cut: str = DEFAULT_SOLUTION_CUT) -> str:
    """What the judge reads of a rollout: its answer part (issue 33: a thinking model's reasoning is not
    its solution) up to the end of its graded final answer under ``cut`` (issue 42: what follows the
    answer is not the solution) -- as graded, or split with the default reasoning format, uncut, for an
    ungraded sample."""
    if isinstance(record, GradedSample):
        sample = record.sample
        return solution_text(sample.completion, sample.reasoning, record.answer_span,
                             record.answer_end if record.extracted is not None else None, "answer", cut).text
    return split_completion(record.completion, reasoning=record.reasoning,
                            prompt=record.prompt).answer(record.completion)


def _base_record(item: ProblemRollouts, model: str) -> dict[str, Any]:
    return {"benchmark": item.benchmark, "problem_id": item.problem_id, "n_rollouts": len(item.texts),
            "n_available": item.n_available, "sample_idx": item.sample_idx, "judge_model": model}


def _scored_record(base: dict, prompt: JudgePrompt, reply: Reply, *, excerpt_chars: int) -> dict[str, Any]:
    record = dict(base)
    record.update({"n_truncated": prompt.n_truncated, "rollout_char_budget": prompt.rollout_char_budget,
                   "problem_truncated": prompt.problem_truncated, "request_key": reply.key,
                   "response_format": reply.mode, "cache_hit": reply.cache_hit, "attempts": reply.attempts})
    if not reply.ok:
        record.update({"status": "failed", "reason": f"http_error:{reply.error_kind}", "error": reply.error,
                       "scores": None, "raw_response_excerpt": None})
        return record
    record.update({"finish_reason": reply.finish_reason, "usage": reply.usage or {},
                   "raw_response_excerpt": (reply.text or "")[:excerpt_chars]})
    try:
        scores = parse_judge_response(reply.text)
    except JudgeParseError as exc:
        record.update({"status": "failed", "reason": f"parse:{exc.reason}", "error": exc.detail[:300],
                       "scores": None})
    else:
        record.update({"status": "ok", "reason": None, "error": None, "scores": scores.to_dict()})
    return record


def _unparseable(text: str | None) -> bool:
    try:
        parse_judge_response(text)
    except JudgeParseError:
        return True
    return False


def judge_problems(items: list[ProblemRollouts], asker: StructuredAsker, settings: JudgeSettings, *,
                   on_record: Callable[[dict], None] | None = None, progress: bool | None = None,
                   retry_failed: bool = False) -> list[dict[str, Any]]:
    """One judge call per problem (cache first, ``asker``'s response format); a record per problem,
    in the order of ``items``.

    ``retry_failed``: a cached reply that does not parse is asked again (and the new reply replaces
    it in the cache); without it the cached reply is what the judge said, failed again."""
    model = asker.client.config.model
    records: list[dict[str, Any] | None] = [None] * len(items)
    asked: list[tuple[int, JudgePrompt, dict]] = []

    def emit(index: int, record: dict[str, Any]) -> None:
        records[index] = record
        if on_record is not None:
            on_record(record)

    for index, item in enumerate(items):
        base = _base_record(item, model)
        if len(item.texts) < settings.min_rollouts:
            reason = "no_correct_rollouts" if settings.correct_only and not item.texts else "too_few_rollouts"
            emit(index, {**base, "status": "skipped", "reason": reason, "scores": None, "cache_hit": False,
                         "n_truncated": 0, "error": f"{len(item.texts)} rollout(s) < min {settings.min_rollouts}"})
            continue
        asked.append((index, build_judge_prompt(item.problem, item.texts, settings.budget), base))

    def on_reply(position: int, reply: Reply) -> None:
        index, prompt, base = asked[position]
        emit(index, _scored_record(base, prompt, reply, excerpt_chars=settings.excerpt_chars))

    if asked:
        asker.ask_many([prompt.messages for _, prompt, _ in asked], progress=progress, description="judge calls",
                       on_reply=on_reply, reask=_unparseable if retry_failed else None)
    return [r for r in records if r is not None]


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def summarize(records: list[dict[str, Any]], *, settings: JudgeSettings, endpoint: dict[str, Any],
              source: str, structured_output: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The metrics.json "judge" block per benchmark (means over successful problems only)."""
    by_benchmark: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        by_benchmark[record["benchmark"]].append(record)
    prompt = prompt_record(settings.budget)
    out: dict[str, dict[str, Any]] = {}
    for benchmark, rows in by_benchmark.items():
        ok = [r for r in rows if r["status"] == "ok"]
        block: dict[str, Any] = {}
        for axis in AXES + ("overall",):
            mean, std = _mean_std([r["scores"][axis] for r in ok])
            block[axis] = mean
            block[f"{axis}_std"] = std
        block.update({
            "scale": "0-10",
            "n_problems": len(rows),
            "n_ok": len(ok),
            "n_failed": sum(r["status"] == "failed" for r in rows),
            "failed_by_reason": dict(Counter(r["reason"] for r in rows if r["status"] == "failed")),
            "n_skipped": sum(r["status"] == "skipped" for r in rows),
            "skipped_by_reason": dict(Counter(r["reason"] for r in rows if r["status"] == "skipped")),
            "n_overall_mismatch": sum(bool(r["scores"]["overall_mismatch"]) for r in ok),
            "n_rollouts_judged": sum(r["n_rollouts"] for r in rows if r["status"] != "skipped"),
            "n_truncated_rollouts": sum(r.get("n_truncated", 0) for r in rows),
            "n_cache_hits": sum(bool(r.get("cache_hit")) for r in rows),
            "n_by_response_format": dict(Counter(r["response_format"] for r in rows if r.get("response_format"))),
            "judge_model": endpoint.get("model"),
            "prompt_version": PROMPT_VERSION,
            "prompt_sha256": prompt["sha256"],
            "source": source,
            "settings": settings.to_config(),
            "endpoint": endpoint,
            "structured_output": structured_output,
            "created": rundir.now_iso(),
        })
        out[benchmark] = block
    return out


def run_judge(run_dir: str | Path, client: OpenAICompatClient, settings: JudgeSettings, *,
              cache_dir: str | Path | None = None, progress: bool | None = None,
              retry_failed: bool = False) -> dict[str, dict[str, Any]]:
    """Judge a run directory; write judge.jsonl, metrics.json["benchmarks"][b]["judge"], config.json["judge"].

    Returns the per-benchmark judge blocks. The cache (judge_cache.jsonl) is appended as results arrive
    (a crash keeps what was judged; the rerun gets it free); judge.jsonl, metrics.json and config.json
    are replaced together at the end (``rundir.update_metrics``), so they always describe one judging."""
    run_dir = rundir.require_run_dir(run_dir)
    source = _source_file(run_dir, settings.correct_only)
    records = read_graded(source) if source.name == rundir.GRADED else read_samples(source)
    items = select_rollouts(records, settings, source)
    if not items:
        raise DsdrError(f"{source}: no {settings.phase!r} rollouts to judge")
    cache = JudgeCache(Path(cache_dir) if cache_dir else run_dir) if settings.use_cache else None

    judge_path = rundir.run_path(run_dir, rundir.JUDGE)
    # Records of benchmarks not judged this time stay (they match their metrics.json blocks).
    judged = {item.benchmark for item in items}
    kept = ([r for r in read_jsonl(judge_path, tolerate_truncated_tail=True) if r.get("benchmark") not in judged]
            if judge_path.exists() else [])
    asker = StructuredAsker(client, VERDICT_SCHEMA, settings.request_params(),
                            response_format=settings.response_format, cache=cache)
    records = judge_problems(items, asker, settings, progress=progress, retry_failed=retry_failed)

    endpoint = client.config.to_config()
    structured_output = asker.settings()
    blocks = summarize(records, settings=settings, endpoint=endpoint, source=source.name,
                       structured_output=structured_output)

    stage_settings = {
        "prompt": prompt_record(settings.budget), "settings": settings.to_config(), "endpoint": endpoint,
        "structured_output": structured_output,
        "cache": str(cache.path) if cache is not None else None, "benchmarks": sorted(blocks),
        "created": rundir.now_iso()}
    # judge.jsonl, metrics.json's judge blocks and config.json's "judge" in one all-or-nothing commit
    rundir.update_metrics(run_dir, rundir.JUDGE_SECTION, blocks, settings=stage_settings,
                          files={rundir.JUDGE: jsonl_chunks(kept + records)})
    return blocks


# -- pairwise equivalence hook (DARLING partitions with an LLM judge, docs/ALGORITHMS.md §4) --------

def judge_equivalent(client: OpenAICompatClient, a: str, b: str, *, max_tokens: int = 32,
                     max_chars: int = 6000) -> bool | None:
    """Does the judge consider solutions ``a`` and ``b`` the same approach?

    True/False from ``{"equivalent": ...}``; None when the call failed or the reply is not that JSON
    (the caller decides what undecided means; ``darling_partition`` should treat it as "not merged").
    The same request and parse as ``--partition judge`` (``JudgeEquivalence``), for one pair."""
    from dsdr_eval.llm_judge.equivalence import JudgeEquivalence, JudgePairSettings

    judge = JudgeEquivalence(client, JudgePairSettings(max_tokens=max_tokens, max_chars=max_chars,
                                                       abort_if_first_undecided=0))
    return judge.ask(a, b)
