"""Run-level diversity: every metric per problem (over all rollouts and over the correct ones),
averaged per benchmark, written into the run directory.

Reads   RUN_DIR/graded.jsonl (only phase "sampling"; the single "pass1" rollout is skipped).
Writes  RUN_DIR/diversity_per_problem.jsonl   one line per (benchmark, problem)
        RUN_DIR/diversity_per_sample.jsonl    one line per rollout
        RUN_DIR/metrics.json                  benchmarks.<name>.diversity (other keys preserved)
        RUN_DIR/config.json                   "diversity" = the settings (only if the file exists)

Subsets. ``all``: every sampled rollout of the problem. ``correct``: the correct rollouts only,
as a group of their own (D_emb, D_eq, the partition, ... are recomputed inside that subgroup:
"how diverse are the correct solutions"). Pairwise quantities of a (sub)group with fewer than
2 rollouts are undefined: null per problem, and left out of the benchmark mean (which is the
unweighted mean over problems where the value is defined; ``n_problems`` says how many).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from dsdr_eval.rundir import directory as rundir
from dsdr_eval.diversity_metrics._blas import single_threaded_blas
from dsdr_eval.diversity_metrics.answers import answer_diversity
from dsdr_eval.diversity_metrics.combined import dsdr_from_parts
from dsdr_eval.diversity_metrics.formula import EXTRACTION_RULE, formula_set
from dsdr_eval.diversity_metrics.lexical import DISTINCT_ORDERS, MAX_NGRAM_ORDER, TOKENIZER, GroupNgrams
from dsdr_eval.diversity_metrics.partition import (
    DARLING_DIV_FLOOR,
    EmbeddingThresholdEquivalence,
    coverage_at_n,
    darling_div,
    darling_partition,
    gini_simpson,
)
from dsdr_eval.diversity_metrics.semantic import Encoder, embed_texts, load_encoder
from dsdr_eval.grading.solution import (DEFAULT_SOLUTION_CUT, DEFAULT_TEXT_PART, TEXT_PART_DEFINITIONS,
                                                  TEXT_PARTS, SolutionText, check_cut, cut_settings, solution_text)
from dsdr_eval.diversity_metrics.validity import ValidityCounter
from dsdr_eval.diversity_metrics.vendi import VENDI_ORDERS, embedding_kernel, order_key, partition_vendi_scores, vendi_scores
from dsdr_eval.equivalence import CachedEquivalence, Equivalence
from dsdr_eval.errors import DsdrError, warn
from dsdr_eval.rundir.jsonl import jsonl_chunks
from dsdr_eval.rundir.json_values import to_json_safe
from dsdr_eval.progress import progress_bar
from dsdr_eval.rundir.samples import SAMPLING as SAMPLING_PHASE
from dsdr_eval.rundir.problems import ProblemIndex, iter_groups
from dsdr_eval.rundir.samples import GradedSample
SUBSETS = ("all", "correct")


@dataclass(frozen=True)
class _Rollout:
    sample_idx: int
    text: str
    correct: bool
    answer_class: int | None
    ends_at_answer: bool = False  # the text ends at its graded final answer (formula spans close there)


@dataclass(frozen=True)
class _Problem:
    benchmark: str
    problem_id: str
    problem: str | None
    rollouts: tuple[_Rollout, ...]   # sorted by sample_idx


# ----------------------------------------------------------------------------- reading

def load_problems(graded_path: Path, records: Sequence[GradedSample] | None = None,
                  text: str = DEFAULT_TEXT_PART, cut: str = DEFAULT_SOLUTION_CUT) -> list[_Problem]:
    """Every problem of ``iter_problems`` in a list (small runs and tests; a run's diversity streams them).
    ``text``: the part of each rollout measured (``rollout_text``): by default the answer, which for a
    thinking model excludes its reasoning and for any other model is the whole completion; ``cut``: the
    solution rule (``solution.SOLUTION_CUTS``), by default each text ends at its graded final answer."""
    return list(iter_problems(ProblemIndex.build(graded_path, records), text, cut))


def _problem_of(benchmark: str, problem_id: str, members: Sequence[GradedSample], text: str, cut: str,
                counter: ValidityCounter | None) -> _Problem:
    """A problem's rollouts (``members``: its "sampling" records) sorted by sample_idx, each as its ``text``
    part under ``cut``; each is counted by ``counter`` (what the cut removed, the token cap)."""
    members = sorted(members, key=lambda r: r.key.sample_idx)
    rollouts = []
    for record in members:
        solution = rollout_solution(record, text, cut)
        if counter is not None:
            counter.add_rollout(benchmark, record, solution)
        rollouts.append(_Rollout(record.key.sample_idx, solution.text, record.correct, record.answer_class,
                                 solution.ends_at_answer))
    return _Problem(benchmark, problem_id, next((r.sample.problem for r in members if r.sample.problem), None),
                    tuple(rollouts))


def iter_problems(index: ProblemIndex, text: str = DEFAULT_TEXT_PART, cut: str = DEFAULT_SOLUTION_CUT,
                  counter: ValidityCounter | None = None) -> Iterator[_Problem]:
    """The problems of ``index`` (``rundir.problems.iter_groups``: each as soon as its last rollout is
    read, in order of first appearance), each rollout as its ``text`` part under ``cut``."""
    for group, members in iter_groups(index):
        yield _problem_of(*index.groups[group], [record for _, record in members], text, cut, counter)


def rollout_solution(record: GradedSample, part: str, cut: str = DEFAULT_SOLUTION_CUT) -> SolutionText:
    """The text of one of ``TEXT_PARTS`` (``TEXT_PART_DEFINITIONS``) of a graded rollout, cut at the
    end of its graded final answer under ``cut`` (``solution.solution_text``)."""
    sample = record.sample
    return solution_text(sample.completion, sample.reasoning, record.answer_span,
                         record.answer_end if record.extracted is not None else None, part, cut)


def rollout_text(record: GradedSample, part: str, cut: str = DEFAULT_SOLUTION_CUT) -> str:
    """The measured text of ``rollout_solution``: the graded answer part, the reasoning (the sample's
    reasoning field, else the completion outside its answer part, tags included) or everything
    generated (the reasoning field, if any, then the completion), each ending at the final answer."""
    return rollout_solution(record, part, cut).text


# ----------------------------------------------------------------------------- one group

def _mean_or_nan(values: np.ndarray) -> float:
    return float(np.mean(values)) if values.size else float("nan")


def _subset_metrics(*, texts: list[str], embeddings: np.ndarray, sets: list[frozenset[str]],
                    answers: list[int | None], ngrams: GroupNgrams, members: np.ndarray,
                    equivalence: Equivalence, problem: str | None,
                    coverage_ns: Sequence[int] | None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Metrics of the sub-group ``members`` (bool [G]): (per-problem dict, per-rollout arrays [g])."""
    index = np.nonzero(members)[0]
    size = int(index.size)
    sub_texts = [texts[i] for i in index]
    sub_sets = [sets[i] for i in index]
    sub_answers = [answers[i] for i in index]
    sub_embeddings = embeddings[index]
    pairwise_defined = size >= 2
    nan = float("nan")

    similarities = sub_embeddings @ sub_embeddings.T  # [g, g]: D_emb, Vendi kernel, partition
    dsdr = dsdr_from_parts(sub_embeddings, sub_sets, similarities=similarities)
    class_ids = (darling_partition(sub_texts, equivalence, embeddings=sub_embeddings,
                                   answer_classes=sub_answers, formula_sets=sub_sets, problem=problem,
                                   similarities=similarities)
                 if size else np.zeros(0, dtype=np.int64))
    div = darling_div(class_ids)
    self_bleu = ngrams.self_bleu_per_rollout(members)[index] if pairwise_defined else np.full(size, nan)
    answers_summary = answer_diversity(sub_answers)

    metrics: dict[str, Any] = {
        "n": size,
        "d_emb": _mean_or_nan(dsdr.d_emb) if pairwise_defined else nan,
        "d_eq": _mean_or_nan(dsdr.d_eq) if pairwise_defined else nan,
        "d": _mean_or_nan(dsdr.d) if pairwise_defined else nan,
        "no_formula_fraction": float(np.mean(dsdr.n_formulas == 0)) if size else nan,
        "n_classes": int(class_ids.max() + 1) if size else nan,  # empty subset: undefined
        "darling_div": _mean_or_nan(div) if pairwise_defined else nan,
        "gini_simpson": gini_simpson(class_ids),
        "vendi_embedding": vendi_scores(embedding_kernel(sub_embeddings, similarities=similarities)),
        "vendi_partition": partition_vendi_scores(class_ids),
        "distinct_n": {str(n): ngrams.distinct_n(n, members) for n in DISTINCT_ORDERS},
        "self_bleu": _mean_or_nan(self_bleu) if pairwise_defined else nan,
        "answer_classes": answers_summary.answer_classes if size else nan,
        "answer_entropy": answers_summary.answer_entropy,
        "no_answer_fraction": answers_summary.no_answer_fraction,
    }
    if coverage_ns is not None:
        metrics["coverage"] = {str(n): coverage_at_n(class_ids, n) for n in coverage_ns}
    per_rollout = {"d_emb": dsdr.d_emb, "d_eq": dsdr.d_eq, "d": dsdr.d, "class_id": class_ids,
                   "div": div, "self_bleu": self_bleu}
    if not pairwise_defined:
        for name in ("d_emb", "d_eq", "d", "div"):
            per_rollout[name] = np.full(size, nan)
    return metrics, per_rollout


def _problem_diversity(problem: _Problem, embeddings: np.ndarray, equivalence: Equivalence,
                       coverage_ns: Sequence[int]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    texts = [r.text for r in problem.rollouts]
    answers = [r.answer_class for r in problem.rollouts]
    correct = np.asarray([r.correct for r in problem.rollouts], dtype=bool)
    sets = [formula_set(r.text, ends_at_answer=r.ends_at_answer) for r in problem.rollouts]
    ngrams = GroupNgrams(texts)
    common = dict(texts=texts, embeddings=embeddings, sets=sets, answers=answers, ngrams=ngrams,
                  equivalence=equivalence, problem=problem.problem)
    all_metrics, all_rollouts = _subset_metrics(members=np.ones(len(texts), dtype=bool),
                                                coverage_ns=None, **common)
    correct_metrics, correct_rollouts = _subset_metrics(members=correct, coverage_ns=coverage_ns, **common)
    problem_record = {"benchmark": problem.benchmark, "problem_id": problem.problem_id,
                      "n_samples": len(texts), "n_correct": int(correct.sum()),
                      "all": all_metrics, "correct": correct_metrics}
    correct_position = {int(i): k for k, i in enumerate(np.nonzero(correct)[0])}
    sample_records = []
    for i, rollout in enumerate(problem.rollouts):
        record = {"benchmark": problem.benchmark, "problem_id": problem.problem_id,
                  "sample_idx": rollout.sample_idx, "correct": rollout.correct,
                  "answer_class": rollout.answer_class, "n_formulas": len(sets[i])}
        for name in ("d_emb", "d_eq", "d", "class_id", "div", "self_bleu"):
            record[name] = all_rollouts[name][i]
        k = correct_position.get(i)
        for name in ("d_emb", "d_eq", "d", "class_id", "div", "self_bleu"):
            record[f"{name}_correct"] = None if k is None else correct_rollouts[name][k]
        sample_records.append(record)
    return problem_record, sample_records


# ----------------------------------------------------------------------------- aggregation

def _aggregate(values: list[Any]) -> Any:
    """Unweighted mean over problems of a scalar (NaN ignored) or, recursively, of a dict."""
    if values and isinstance(values[0], dict):
        return {key: _aggregate([v[key] for v in values]) for key in values[0]}
    array = np.asarray([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    defined = array[~np.isnan(array)]
    return float(defined.mean()) if defined.size else float("nan")


def _count_defined(values: list[Any]) -> Any:
    if values and isinstance(values[0], dict):
        return {key: _count_defined([v[key] for v in values]) for key in values[0]}
    return int(sum(1 for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))))


def _benchmark_summary(records: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "settings": settings,
        "n_problems": len(records),
        "n_samples": int(sum(r["n_samples"] for r in records)),
        "n_correct_samples": int(sum(r["n_correct"] for r in records)),
    }
    for subset in SUBSETS:
        per_problem = [r[subset] for r in records]
        metric_names = [k for k in per_problem[0] if k != "n"]
        block = {name: _aggregate([p[name] for p in per_problem]) for name in metric_names}
        block["n_problems"] = {
            "with_any_sample": int(sum(1 for p in per_problem if p["n"] >= 1)),
            "with_2_or_more": int(sum(1 for p in per_problem if p["n"] >= 2)),
        }
        if "coverage" in block:
            block["coverage_n_problems"] = _count_defined([p["coverage"] for p in per_problem])
        summary[subset] = block
    return summary


# ----------------------------------------------------------------------------- entry point

def coverage_orders(max_group: int) -> list[int]:
    """N in {1, 2, 4, ...} up to the largest group (and the largest group itself)."""
    orders, n = [], 1
    while n <= max_group:
        orders.append(n)
        n *= 2
    if max_group >= 1 and orders[-1] != max_group:
        orders.append(max_group)
    return orders


def _encoder_settings(encoder: Any) -> dict[str, Any]:
    settings = getattr(encoder, "settings", None)
    if callable(settings):
        return dict(settings())
    return {"name": type(encoder).__qualname__, "path": None, "truncation": "unknown (custom encoder)"}


def _resolve_encoder(encoder: Any, *, chunked: bool, device: str) -> Any:
    if encoder is None or isinstance(encoder, str):
        return load_encoder(encoder, device, chunked=chunked)
    if chunked and isinstance(encoder, Encoder) and not encoder.chunked:
        return Encoder(encoder.model, name=encoder.name, path=encoder.path, device=encoder.device,
                       chunked=True, batch_size=encoder.batch_size)
    return encoder


def compute_run_diversity(run_dir: str | Path, *, encoder: Any = None, equivalence: Equivalence | None = None,
                          progress: bool = True, chunked: bool = False, device: str = "cpu",
                          log: Callable[[str], None] | None = None,
                          graded: Sequence[GradedSample] | None = None,
                          text: str = DEFAULT_TEXT_PART, cut: str = DEFAULT_SOLUTION_CUT,
                          count_window: bool = True, threads: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Compute every diversity metric of RUN_DIR (see the module docstring).

    encoder: None (all-MiniLM-L6-v2), a name/path, an ``Encoder``, or any object with
    ``encode(list[str]) -> [N, D]``. equivalence: the pair decision of the partition metrics
    (``dsdr_eval.diversity_metrics.partition_methods.make_equivalence`` builds one from a ``--partition`` spec:
    embedding, classifier:PATH, answer-formula, judge); None = embedding cosine >= 0.9. The
    caller keeps ownership (and closes it). graded: RUN_DIR/graded.jsonl's records when the caller
    holds them (not read again). text: the part of each rollout measured (``load_problems``); cut:
    where each text ends (``solution.SOLUTION_CUTS``; by default at its graded final answer).
    count_window: count every text's encoder tokens for the validity line (one tokenizer pass).
    threads: the torch thread choice to record (``dsdr_eval.backends.threads``).
    Returns {benchmark: the "diversity" dict written into metrics.json}; each has ``validity``
    (``validity.ValidityCounter``), whose warnings go to ``log``."""
    run_dir = rundir.require_run_dir(run_dir, rundir.GRADED)
    graded_path = rundir.run_path(run_dir, rundir.GRADED)
    if text not in TEXT_PARTS:
        raise DsdrError(f"unknown text part {text!r} (known: {', '.join(TEXT_PARTS)})")
    index = ProblemIndex.build(graded_path, graded)
    if not index.groups:
        raise DsdrError(f"{graded_path}: no rollouts of phase {SAMPLING_PHASE!r}")
    encoder = _resolve_encoder(encoder, chunked=chunked, device=device)
    equivalence = CachedEquivalence(EmbeddingThresholdEquivalence(encoder=encoder) if equivalence is None
                                    else equivalence)
    coverage_ns = coverage_orders(max(index.sizes))
    settings = _run_settings(encoder, equivalence, coverage_ns)
    settings["text"] = {"part": text, "definition": TEXT_PART_DEFINITIONS[text]}
    settings["solution_cut"] = cut_settings(cut)
    counter = ValidityCounter(check_cut(cut))
    if threads is not None:  # torch's thread count (dsdr_eval.backends.threads): speed only, recorded
        settings["threads"] = threads
    if log:
        log(f"encoding {sum(index.sizes)} rollouts of {len(index.groups)} problems with {settings['encoder']['name']}")

    # The per-rollout lines go to an unnamed temp file as they are computed (a run's worth of them
    # as dicts would be the largest thing held); the commit copies it into place.
    with tempfile.TemporaryFile(dir=run_dir) as per_sample:
        problem_records = _all_problems_diversity(iter_problems(index, text, cut, counter), len(index.groups), encoder,
                                                  equivalence, coverage_ns, per_sample, progress=progress,
                                                  counter=counter if count_window else None)

        # Re-read after the loop: an equivalence that calls out (e.g. the LLM judge) counts its
        # pair decisions while it runs, and those counts belong in the recorded settings.
        settings["partition"] = equivalence.settings()
        by_benchmark: dict[str, list[dict[str, Any]]] = {}
        for record in problem_records:
            by_benchmark.setdefault(record["benchmark"], []).append(record)
        result = {name: to_json_safe({**_benchmark_summary(records, settings), "validity": counter.summary(name)})
                  for name, records in by_benchmark.items()}
        for name, block in result.items():  # what a number measured, said where it is computed
            for warning in block["validity"]["warnings"]:
                warn(f"diversity of {name}: {warning}")

        # the per-problem / per-sample files, metrics.json's blocks and config.json's settings in one commit
        per_sample.seek(0)
        rundir.update_metrics(run_dir, rundir.DIVERSITY_SECTION, result, settings=to_json_safe(settings), files={
            rundir.DIVERSITY_PER_PROBLEM: jsonl_chunks(to_json_safe(r) for r in problem_records),
            rundir.DIVERSITY_PER_SAMPLE: iter(lambda: per_sample.read(1 << 16), b"")})
    return result


def _run_settings(encoder: Any, equivalence: Equivalence, coverage_ns: list[int]) -> dict[str, Any]:
    """What the numbers of a run depend on (recorded with them in metrics.json and config.json)."""
    return {
        "phase": SAMPLING_PHASE,
        "encoder": _encoder_settings(encoder),
        "partition": equivalence.settings(),
        "darling_div_floor": DARLING_DIV_FLOOR,
        "formula_extraction": EXTRACTION_RULE,
        "vendi_orders": [order_key(q) for q in VENDI_ORDERS],
        "vendi_kernels": {"embedding": "cosine of unit-norm embeddings",
                          "partition": "1[same class]"},
        "coverage_ns": coverage_ns,
        "coverage_definition": "expected number of distinct classes among N correct rollouts drawn "
                               "without replacement; null when N > number of correct rollouts",
        "distinct_n_orders": list(DISTINCT_ORDERS),
        "lexical_tokenizer": TOKENIZER,
        "self_bleu": f"sacrebleu sentence_bleu (max order {MAX_NGRAM_ORDER}, exp smoothing, "
                     "effective order) vs the other rollouts, mean, as a fraction",
        "answer_entropy_unit": "nats",
        "subsets": {"all": "every sampled rollout", "correct": "the correct rollouts as their own group"},
        "aggregation": "unweighted mean over problems where the value is defined",
    }


def _all_problems_diversity(problems: Iterator[_Problem], n_problems: int, encoder: Any,
                            equivalence: CachedEquivalence, coverage_ns: Sequence[int], per_sample: IO[bytes], *,
                            progress: bool, counter: ValidityCounter | None = None) -> list[dict[str, Any]]:
    """The per-problem records; each problem's per-rollout records are appended to ``per_sample`` as
    JSONL. One problem at a time: its texts are encoded, measured and dropped before the next is read."""
    problem_records: list[dict[str, Any]] = []
    with progress_bar(n_problems, "diversity", unit="problem", enabled=progress) as bar:
        for problem in problems:
            texts = [r.text for r in problem.rollouts]
            embeddings = embed_texts(texts, encoder)
            if counter is not None and isinstance(encoder, Encoder):
                counter.add_window(problem.benchmark, *encoder.token_counts(texts), encoder.window_settings())
            with single_threaded_blas():
                problem_record, samples = _problem_diversity(problem, embeddings, equivalence, coverage_ns)
            if counter is not None:
                counter.add_formulas(problem.benchmark, [r["n_formulas"] for r in samples])
            equivalence.clear()  # its memoised pairs serve only the two subsets of this problem
            problem_records.append(problem_record)
            for chunk in jsonl_chunks(to_json_safe(r) for r in samples):
                per_sample.write(chunk)
            bar.advance()
    return problem_records


def summary_rows(result: dict[str, dict[str, Any]]) -> list[tuple[str, ...]]:
    """Rows for a console table: benchmark, subset and the headline numbers."""
    rows = []
    for name, diversity in result.items():
        for subset in SUBSETS:
            block = diversity[subset]

            def fmt(value: Any) -> str:
                return "-" if value is None else f"{value:.3f}"

            rows.append((name, subset, fmt(block["d_emb"]), fmt(block["d_eq"]), fmt(block["d"]),
                         fmt(block["n_classes"]), fmt(block["darling_div"]),
                         fmt(block["vendi_embedding"]["1"]), fmt(block["self_bleu"]),
                         fmt(block["answer_classes"])))
    return rows


__all__ = ["compute_run_diversity", "load_problems", "coverage_orders", "to_json_safe", "summary_rows"]
