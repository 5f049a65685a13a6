"""Score a samples file: read (dsdr_eval.rundir.samples validates) -> grade (dsdr_eval.grading) -> metrics -> write files.

``score_run_dir(RUN_DIR)`` reads ``RUN_DIR/samples.jsonl`` and writes ``graded.jsonl`` and
``metrics.json`` next to it; ``score_samples(path, out_dir)`` does the same for any samples file.
``metrics.json`` is written through ``rundir.update_metrics`` (its "score" section): the
``diversity`` / ``judge`` keys of each benchmark are kept, so re-scoring never loses what
``dsdr-eval diversity`` / ``dsdr-eval judge`` computed.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, Callable, Iterator, NamedTuple

from dsdr_eval.grading.answer_norm import GradingOptions
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.errors import DsdrError, warn
from dsdr_eval.grading.extraction import DEFAULT_EXTRACTION, EXTRACTION_PROFILES, get_profile
from dsdr_eval.grading import GradingPool, default_workers, grader_provenance
from dsdr_eval.grading.grade import PreparedGrading, grade_prepared, prepare_grading
from dsdr_eval.grading.reasoning import DEFAULT_REASONING_FORMAT, ReasoningFormat, parse_reasoning_format
from dsdr_eval.progress import progress_bar
from dsdr_eval.scoring.judge_grading import JUDGE_DISAGREEMENTS, OFF, JudgeTally, check_mode, judge_graded
from dsdr_eval.llm_judge.answers import AnswerJudge
from dsdr_eval.rundir.jsonl import jsonl_chunks
from dsdr_eval.rundir.problems import ProblemIndex, iter_groups
from dsdr_eval.scoring.metrics import MetricsAccumulator, TokenCounter
from dsdr_eval.scoring.checks import AgreementTally, NoAnswerTally
from dsdr_eval.tasks import BENCHMARKS, Problem, load_benchmark
from dsdr_eval.rundir.samples import (GradedSample, Sample, SamplesFile, graded_from_grader, iter_records,
                                      parse_graded, parse_sample)


DISAGREEMENTS = "disagreements.jsonl"  # every sample where our verdict differs from the source tool's
GRADE_CHUNK_SAMPLES = 512  # grade at least this many samples per call (whole problems) ...
GRADE_CHUNK_MAX_SAMPLES = 8192  # ... and at most this many unless one problem alone has more
# ... and a chunk ends once its completions hold this many characters, whatever the counts above: a
# thinking model's 64 rollouts of 128 KB are 8 MB a problem, so 2 x 16 workers' problems would be 256 MB
# of text, held again by the graded records and the workers' copies.
GRADE_CHUNK_MAX_CHARS = 64 * 2**20


class ScoredRun(NamedTuple):
    """What one scoring pass produced: the graded records and metrics.json. ``graded``: a list when the
    samples were given in memory (``dsdr-eval run``: the records share their samples' texts), else a
    ``GradedFile`` that reads graded.jsonl again, one record at a time, each time it is iterated."""

    graded: "list[GradedSample] | GradedFile"
    metrics: dict[str, Any]


class GradedFile:
    """graded.jsonl as written by one scoring pass: ``len`` its records, iteration reads them from the
    file (``iter_records``), so a caller of ``score_records`` never forces a run into memory."""

    def __init__(self, path: Path, n_records: int) -> None:
        self.path, self.n_records = path, n_records

    def __len__(self) -> int:
        return self.n_records

    def __iter__(self) -> Iterator[GradedSample]:
        return iter_records(self.path, parse_graded)


def score_records(samples_path: str | Path, out_dir: str | Path, *, grading_timeout_s: float = 5.0,
                  workers: int | None = None, progress: bool = True, bootstrap: int = 1000,
                  options: GradingOptions | None = None, seed: int = 0,
                  samples: SamplesFile | None = None, extraction: str | None = None,
                  reasoning_format: str | None = None, judge: AnswerJudge | None = None,
                  judge_mode: str = OFF, data_dir: str | Path | None = None) -> ScoredRun:
    """Grade ``samples_path`` into ``out_dir/graded.jsonl`` and ``out_dir/metrics.json``.

    The whole file is validated before any grading (an index pass: ``rundir.problems``); then it is
    read again and graded a few problems at a time, graded.jsonl streamed to a temp file in the
    samples' order and the metrics, warnings and agreement computed from per-problem aggregates, so
    memory follows a problem, not the run (issue 36). All outputs are committed (atomically) only
    after grading and metrics succeeded, so a failure leaves the previous ones untouched.
    ``samples``: the file already read in this process (``dsdr-eval run``), not read again.
    ``extraction``: the answer convention (a profile of ``dsdr_eval.grading.extraction.EXTRACTION_PROFILES``);
    None: the run directory's config.json ``"extraction"`` (written by ``run`` / ``import``), else the
    default ``boxed``. ``reasoning_format``: how completions mark their reasoning
    (``dsdr_eval.grading.reasoning``); None: config.json's ``"reasoning_format"``, else ``auto``.
    ``judge`` (an ``AnswerJudge``) and ``judge_mode`` (rejected, all): the judge's second opinion beside
    the symbolic verdict (``dsdr_eval.scoring.judge_grading``), which stays ``correct``. ``data_dir``: where the
    registry benchmarks' files are (``RegistryContext``; None: config.json's, $DSDR_DATA_DIR, the hub)."""
    samples_path, out_dir = Path(samples_path), Path(out_dir)
    extraction = extraction if extraction is not None else run_extraction(samples_path.parent)
    get_profile(extraction)  # an unknown profile is refused before the samples are read
    reasoning = parse_reasoning_format(reasoning_format if reasoning_format is not None
                                       else run_reasoning_format(samples_path.parent))
    if samples is None and not samples_path.is_file():
        raise DsdrError(f"{samples_path}: samples file not found")
    digest = hashlib.sha256()
    index = ProblemIndex.build(samples_path, samples.samples if samples is not None else None, parse=parse_sample,
                               phase=None, on_bytes=digest.update)
    if not index.lines:
        raise DsdrError(f"{samples_path}: no samples")
    out_dir.mkdir(parents=True, exist_ok=True)
    judged = judge is not None and check_mode(judge_mode) != OFF
    grading = _Grading(grading_timeout_s, workers, options, extraction, reasoning, len(index.groups),
                       (judge, judge_mode) if judged else None,
                       RegistryContext(data_dir, recorded_benchmark_files(samples_path.parent)))
    kept: list[GradedSample] | None = [] if samples is not None else None
    counter = model_token_counter(samples_path.parent)
    no_answer, metrics_input = NoAnswerTally(extraction), MetricsAccumulator(counter)
    with tempfile.TemporaryFile(dir=out_dir) as graded_out, tempfile.TemporaryFile(dir=out_dir) as listing, \
            tempfile.TemporaryFile(dir=out_dir) as judge_listing, \
            progress_bar(len(index.lines), "grading", unit="sample", enabled=progress) as bar:
        started = time.perf_counter()
        agreement_tally = AgreementTally(listing)
        judge_tally = JudgeTally(judge_mode, judge_listing) if judged else None
        try:
            for record in _graded_in_file_order(index, grading, metrics_input, bar.advance):
                graded_out.writelines(jsonl_chunks([record.to_json()]))
                no_answer.add(record)
                agreement_tally.add(record)
                if judge_tally is not None:
                    judge_tally.add(record)
                if kept is not None:
                    kept.append(record)
        finally:
            grading.close()
        grading_wall_s = time.perf_counter() - started

        for message in no_answer.messages():
            warn(message)
        metrics = metrics_input.result(bootstrap=bootstrap, seed=seed)
        provenance = metrics["provenance"]
        provenance["grading"] = _grading_record(grader_provenance(grading_timeout_s, workers, options, extraction, reasoning),
                                                grading_wall_s, grading.registry, counter)
        agreement = agreement_tally.summary()
        _add_provenance(provenance, samples_path, samples.sha256 if samples is not None else digest.hexdigest(),
                        len(index.lines), agreement)
        if judge_tally is not None:
            for name, block in judge_tally.blocks().items():
                metrics["benchmarks"][name]["judge_grading"] = block
            provenance["judge_grading"] = judge.provenance(judge_mode)
        files = _files_beside(out_dir, graded_out, (listing, agreement is not None and agreement["n_disagree"] > 0),
                              (judge_listing, judge_tally is not None and judge_tally.n_disagree > 0))
        written = rundir.update_metrics(out_dir, rundir.SCORE_SECTION, metrics["benchmarks"], summary=metrics,
                                        files=files)
    graded = kept if kept is not None else GradedFile(rundir.run_path(out_dir, rundir.GRADED), len(index.lines))
    return ScoredRun(graded, written)


def _grading_record(record: dict[str, Any], wall_s: float, registry: RegistryContext,
                    counter: TokenCounter | None) -> dict[str, Any]:
    """metrics.json's provenance.grading: the grader's, its wall time, the registry context given and
    the tokenizer that counted reasoning without a recorded count."""
    record["wall_s"] = round(wall_s, 3)
    if counter is not None and counter.n_counted:
        record["reasoning_tokens_counted_with"] = {"tokenizer": counter.name, "n_samples": counter.n_counted}
    if registry.counts():
        record["registry_context"] = registry.counts()
    return record


def _add_provenance(provenance: dict[str, Any], samples_path: Path, sha256: str, n_samples: int,
                    agreement: dict[str, Any] | None) -> None:
    """The samples read, when, with what, the source's agreement (an imported run) and the run's config."""
    provenance.update({
        "samples_file": str(samples_path.resolve()),
        "samples_sha256": sha256,
        "n_samples": n_samples,
        "created": rundir.now_iso(),
        "versions": rundir.library_versions(),
    })
    if agreement is not None:  # an imported run: our grader beside the source tool's
        provenance["source_agreement"] = agreement
        if agreement["n_disagree"]:
            agreement["disagreements_file"] = DISAGREEMENTS
    run_config = _run_config_summary(samples_path.parent)
    if run_config:
        provenance["run_config"] = run_config


def _files_beside(out_dir: Path, graded_out: IO[bytes], *listings: tuple[IO[bytes], bool]) -> dict[str, Any]:
    """``update_metrics``' files: graded.jsonl, and each disagreements list (the source tool's, the judge's)
    that has lines; an earlier scoring's list is removed when none disagree now. The scores' section of
    metrics.json (diversity / judge blocks already there are kept), graded.jsonl and the lists go in one
    all-or-nothing commit, so metrics.json always describes the files beside it."""
    files: dict[str, Any] = {rundir.GRADED: _read_back(graded_out)}
    for name, (listing, has_lines) in zip((DISAGREEMENTS, JUDGE_DISAGREEMENTS), listings):
        if has_lines:
            files[name] = _read_back(listing)
        elif (out_dir / name).is_file():
            files[name] = None
    return files


def _read_back(handle: IO[bytes]) -> Iterator[bytes]:
    """A temp file's bytes from its start, in chunks (``rundir.commit_files`` copies them into place)."""
    handle.seek(0)
    return iter(lambda: handle.read(1 << 16), b"")


class _Grading:
    """The grader of one scoring pass: one pool of workers for every chunk, the registry's context."""

    def __init__(self, grading_timeout_s: float, workers: int | None, options: GradingOptions | None, extraction: str,
                 reasoning: ReasoningFormat, n_problems: int, judge: tuple[AnswerJudge, str] | None = None,
                 registry: RegistryContext | None = None) -> None:
        self.options, self.extraction, self.reasoning, self.judge = options, extraction, reasoning, judge
        self.registry = registry if registry is not None else RegistryContext()
        self.workers = max(1, min(workers or default_workers(), n_problems))
        self.pool = GradingPool(grading_timeout_s=grading_timeout_s, workers=self.workers)

    def prepare(self, numbered: list[tuple[int, Sample]]) -> PreparedGrading:
        """(position, sample) pairs of whole problems, their answers extracted: no worker involved, so
        the next chunk is prepared while the workers grade this one (``_graded_in_file_order``)."""
        rows = self.registry.fill([(position, record.to_json()) for position, record in numbered])
        return prepare_grading(rows, options=self.options, extraction=self.extraction,
                               reasoning_format=self.reasoning)

    def grade(self, numbered: list[tuple[int, Sample]], prepared: PreparedGrading) -> list[GradedSample]:
        """Graded records of (position, sample) pairs (``prepare``'d): whole problems, graded in parallel."""
        rows = grade_prepared(prepared, self.pool)
        graded = [graded_from_grader(record, row) for (_, record), row in zip(numbered, rows)]
        return judge_graded(graded, *self.judge) if self.judge is not None else graded

    def close(self) -> None:
        self.pool.close()


def _graded_in_file_order(index: ProblemIndex, grading: _Grading, metrics: MetricsAccumulator,
                          advance: Callable[[int], None]) -> Iterator[GradedSample]:
    """Every sample of ``index`` graded, in the file's order: whole problems (``iter_groups``) are
    graded a chunk at a time (enough of them to keep the workers busy); each problem goes to
    ``metrics`` by phase; a graded record waits only for the lines before it (problems in flight).
    The next chunk is read and its answers extracted in a thread while the workers grade this one:
    done in turn, the parent's share left the workers idle (issue 44: score 1.3x slower than before
    it graded in chunks). So two chunks are held at once."""
    done: dict[int, GradedSample] = {}
    order = iter(index.lines)
    next_position = next(order, None)
    chunks = _chunks(iter_groups(index), 2 * grading.workers)

    def prepare_next() -> tuple[list[list[tuple[int, Sample]]], PreparedGrading] | None:
        chunk = next(chunks, None)
        return None if chunk is None else (chunk, grading.prepare([pair for members in chunk for pair in members]))

    with ThreadPoolExecutor(1, thread_name_prefix="dsdr-score-prepare") as ahead:
        upcoming = ahead.submit(prepare_next)
        while (current := upcoming.result()) is not None:
            upcoming = ahead.submit(prepare_next)
            advance(_grade_chunk(*current, grading, metrics, done))
            del current  # this chunk's records are not kept beyond the next one, being prepared
            while next_position in done:
                yield done.pop(next_position)
                next_position = next(order, None)


def _grade_chunk(chunk: list[list[tuple[int, Sample]]], prepared: PreparedGrading, grading: _Grading,
                 metrics: MetricsAccumulator, done: dict[int, GradedSample]) -> int:
    """Grade one prepared chunk into ``done`` (by position) and its problems into ``metrics`` -> samples."""
    numbered = [pair for members in chunk for pair in members]
    done.update(zip((position for position, _ in numbered), grading.grade(numbered, prepared)))
    for members in chunk:
        by_phase: dict[str, list[tuple[int, GradedSample]]] = {}
        for position, _ in members:
            by_phase.setdefault(done[position].key.phase, []).append((position, done[position]))
        for phase_members in by_phase.values():
            metrics.add(phase_members[0][0], sorted((r for _, r in phase_members), key=lambda r: r.key.sample_idx))
    return len(numbered)


def _chunks(groups: Iterator[tuple[int, list[tuple[int, Sample]]]],
            min_problems: int) -> Iterator[list[list[tuple[int, Sample]]]]:
    """Problems in chunks of at least ``GRADE_CHUNK_SAMPLES`` samples and ``min_problems`` problems (the
    workers grade a chunk's problems in parallel), at most ``GRADE_CHUNK_MAX_SAMPLES`` samples; a chunk
    also ends when its completions reach ``GRADE_CHUNK_MAX_CHARS`` (memory follows text, not counts)."""
    chunk: list[list[tuple[int, Sample]]] = []
    size = chars = 0
    for _, members in groups:
        if chunk and size + len(members) > GRADE_CHUNK_MAX_SAMPLES:
            yield chunk
            chunk, size, chars = [], 0, 0
        chunk.append(members)
        size += len(members)
        chars += sum(len(sample.completion) for _, sample in members)
        if (size >= GRADE_CHUNK_SAMPLES and len(chunk) >= min_problems) or chars >= GRADE_CHUNK_MAX_CHARS:
            yield chunk
            chunk, size, chars = [], 0, 0
    if chunk:
        yield chunk


class RegistryContext:
    """Rows of a registry benchmark (``benchmark`` a registered name, ``problem_id`` one of its ids) that
    carry no problem text or answer metadata get the registry's, so the grading rules that read the
    question (ordered lists, extremes) and the metadata apply to a user's own files too; only when the
    row's gold is the registry's (another gold: another problem, left as it is). Each benchmark is
    loaded once per scoring pass; ``counts`` says how many problems were given context. Where from:
    ``data_dir`` (the command's --data-dir), else the benchmark's file in ``recorded`` (the files the run's
    config.json names, while they exist), else ``$DSDR_DATA_DIR``, else the hub."""

    def __init__(self, data_dir: str | Path | None = None, recorded: dict[str, Path] | None = None) -> None:
        self.data_dir, self.recorded = data_dir, dict(recorded or {})
        self.registry: dict[str, dict[str, Problem]] = {}  # benchmark -> id -> problem ({}: not available)
        self.given: dict[str, tuple[int, set[str]]] = {}  # benchmark -> (first position given, problem ids)

    def fill(self, numbered: list[tuple[Any, dict[str, Any]]]) -> list[dict[str, Any]]:
        """The rows to grade of (position, row) pairs; the rows given are not changed."""
        wanted = {str(row.get("benchmark")) for _, row in numbered
                  if row.get("benchmark") in BENCHMARKS and (not row.get("problem") or row.get("answer_meta") is None)}
        for name in sorted(wanted - set(self.registry)):
            try:
                where = self.data_dir if self.data_dir is not None else self.recorded.get(name)
                self.registry[name] = {p.id: p for p in load_benchmark(name, data_dir=where)}
            except DsdrError as exc:  # no local copy and no hub: graded without the registry's context
                self.registry[name] = {}
                warn(f"score: benchmark {name}: problem texts not available for grading ({exc})")
        out = []
        for position, row in numbered:
            known = self.registry.get(str(row.get("benchmark")), {}).get(str(row.get("problem_id")))
            if known is not None and str(row.get("gold", "")).strip() in (known.answer, known.extra.get("answer_original")):
                filled = {"problem": row.get("problem") or known.problem,
                          "answer_meta": row.get("answer_meta") if row.get("answer_meta") is not None else known.answer_meta}
                if any(row.get(k) != v for k, v in filled.items()):
                    row = {**row, **filled}
                    first, ids = self.given.setdefault(known.benchmark, (position, set()))
                    self.given[known.benchmark] = (min(first, position), ids | {known.id})
            out.append(row)
        return out

    def counts(self) -> dict[str, int]:
        """{benchmark: problems given context}, in the order of the first row given context."""
        return {name: len(ids) for name, (_, ids) in sorted(self.given.items(), key=lambda item: item[1][0])}


def model_token_counter(run_dir: Path) -> TokenCounter | None:
    """A token counter with the tokenizer of the model config.json names, when it is a local directory
    holding one (loaded on first use: most runs record their counts); None otherwise."""
    config = rundir.load_config(run_dir) if (run_dir / rundir.CONFIG).is_file() else {}
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    path = model.get("path")
    if not isinstance(path, str) or not model.get("is_local") or not (Path(path) / "tokenizer_config.json").is_file():
        return None
    tokenizer: list[Any] = []

    def count(text: str) -> int:
        if not tokenizer:
            from transformers import AutoTokenizer

            tokenizer.append(AutoTokenizer.from_pretrained(path))
        return len(tokenizer[0](text, add_special_tokens=False)["input_ids"])

    return TokenCounter(count, path)


def recorded_benchmark_files(run_dir: Path) -> dict[str, Path]:
    """{benchmark: the directory of its local file} for the registry benchmarks a run's config.json lists
    with a local file that still exists (``run`` records each benchmark's ``source``); {} otherwise."""
    if not (run_dir / rundir.CONFIG).is_file():
        return {}
    try:
        listed = rundir.load_config(run_dir).get("benchmarks")
    except DsdrError:
        return {}
    found: dict[str, Path] = {}
    for entry in listed if isinstance(listed, list) else []:
        name, source = (entry.get("name"), entry.get("source")) if isinstance(entry, dict) else (None, None)
        if name in BENCHMARKS and isinstance(source, str) and Path(source).name == BENCHMARKS[name].local_file \
                and Path(source).is_file():
            found[name] = Path(source).parent
    return found


def score_samples(samples_path: str | Path, out_dir: str | Path, **options: Any) -> dict[str, Any]:
    """``score_records`` for callers that need only metrics.json's content (``dsdr-eval score``)."""
    return score_records(samples_path, out_dir, **options).metrics


def score_run_dir(run_dir: str | Path, *, grading_timeout_s: float = 5.0, workers: int | None = None,
                  progress: bool = True, bootstrap: int = 1000, seed: int = 0,
                  samples: SamplesFile | None = None, extraction: str | None = None,
                  reasoning_format: str | None = None) -> dict[str, Any]:
    """Score ``RUN_DIR/samples.jsonl`` in place (graded.jsonl + metrics.json next to it)."""
    return score_run_records(run_dir, grading_timeout_s=grading_timeout_s, workers=workers, progress=progress,
                             bootstrap=bootstrap, seed=seed, samples=samples, extraction=extraction,
                             reasoning_format=reasoning_format).metrics


def score_run_records(run_dir: str | Path, **options: Any) -> ScoredRun:
    """``score_run_dir`` returning the graded records too (``dsdr-eval run`` hands them to diversity)."""
    run_dir = rundir.require_run_dir(run_dir, rundir.SAMPLES)
    return score_records(run_dir / rundir.SAMPLES, run_dir, **options)


def run_extraction(run_dir: Path) -> str:
    """The extraction profile recorded in ``run_dir``'s config.json (top-level ``"extraction"``),
    else ``DEFAULT_EXTRACTION``; a recorded value that is not a profile is a one-line error."""
    if not (run_dir / rundir.CONFIG).is_file():
        return DEFAULT_EXTRACTION
    config = rundir.load_config(run_dir)
    name = config.get("extraction", DEFAULT_EXTRACTION)
    if not isinstance(name, str) or name not in EXTRACTION_PROFILES:
        raise DsdrError(f"{run_dir / rundir.CONFIG}:extraction: unknown extraction profile {name!r} "
                        f"(known: {', '.join(EXTRACTION_PROFILES)})")
    return name


def run_reasoning_format(run_dir: Path) -> str:
    """The reasoning format recorded in ``run_dir``'s config.json (``"reasoning_format"``), else
    ``auto``; a recorded value that is not a format is a one-line error naming the file."""
    if not (run_dir / rundir.CONFIG).is_file():
        return DEFAULT_REASONING_FORMAT
    spec = rundir.load_config(run_dir).get("reasoning_format", DEFAULT_REASONING_FORMAT)
    try:
        return parse_reasoning_format(spec).spec
    except DsdrError as error:
        raise DsdrError(f"{run_dir / rundir.CONFIG}:reasoning_format: {error}") from None


def _run_config_summary(run_dir: Path) -> dict[str, Any] | None:
    """How the samples were generated (model, backend, protocol, template), when config.json exists."""
    if not (run_dir / rundir.CONFIG).exists():
        return None
    try:
        config = rundir.load_config(run_dir)
    except DsdrError:
        return None
    template = config.get("template")
    summary = {key: config[key] for key in ("kind", "label", "model", "backend", "protocol", "mixed_settings",
                                            "reasoning_format", "chat_template_kwargs", "budget_forcing")
               if key in config}
    if isinstance(template, dict):
        summary["template"] = {k: template[k] for k in ("name", "chat") if k in template}
    return summary or None
