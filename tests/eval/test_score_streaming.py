"""`dsdr-eval score` holds a few problems at a time, not the run (issue 36): the samples alive at once do
not grow with the file, and grading in chunks writes the same bytes as grading everything at once."""

from __future__ import annotations

import json
import weakref
from pathlib import Path

import dsdr_eval.scoring.score as scoring
from dsdr_eval.rundir.jsonl import read_json
from dsdr_eval.rundir.samples import SamplesFile, read_graded

PER_PROBLEM = 4


def write_samples(path: Path, n_problems: int, *, interleave: bool = False) -> Path:
    """``n_problems`` problems of ``PER_PROBLEM`` rollouts (right, wrong, no answer, another wrong) and a
    pass1 rollout each; ``interleave``: two problems' lines alternate (as concurrent engines append)."""
    rows = []
    for p in range(n_problems):
        answers = [f"\\boxed{{{p}}}", f"\\boxed{{{p + 1}}}", "no box here", f"\\boxed{{{p + 2}}}"]
        rows.append([{"benchmark": "bench", "problem_id": str(p), "sample_idx": i, "phase": "sampling", "gold": str(p),
                      "completion": f"Rollout {i}. So {answer}", "n_completion_tokens": 10 + i,
                      "source_correct": i % 2 == 0} for i, answer in enumerate(answers)]
                    + [{"benchmark": "bench", "problem_id": str(p), "phase": "pass1", "gold": str(p),
                        "completion": f"\\boxed{{{p}}}", "sample_idx": 0}])
    if interleave:
        rows = [pair for a, b in zip(rows[::2], rows[1::2]) for pair in zip(a, b)]
    lines = [json.dumps(row) for group in rows for row in group]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _count_alive(monkeypatch) -> dict[str, int]:
    """Patch the samples reader scoring uses so that it counts the Sample records alive at each read."""
    alive: dict[int, weakref.ref] = {}  # id -> a weak reference that removes itself (records are unhashable)
    seen = {"max_alive": 0, "parsed": 0}
    parse = scoring.parse_sample

    def counting_parse(*args, **kwargs):
        sample, replaced = parse(*args, **kwargs)
        alive[id(sample)] = weakref.ref(sample, lambda _, key=id(sample): alive.pop(key, None))
        seen["parsed"] += 1
        seen["max_alive"] = max(seen["max_alive"], len(alive))
        return sample, replaced

    monkeypatch.setattr(scoring, "parse_sample", counting_parse)
    return seen


def test_samples_held_at_once_do_not_grow_with_the_run(tmp_path, monkeypatch):
    """Mutant: score_records reads the whole file into records (``ProblemIndex.build(path,
    list(iter_records(path, parse_sample)), ...)``) -> every sample alive at once: fails here."""
    monkeypatch.setattr(scoring, "GRADE_CHUNK_SAMPLES", 2 * (PER_PROBLEM + 1))  # two problems a chunk
    peaks = {}
    for n_problems in (6, 24):
        seen = _count_alive(monkeypatch)
        path = write_samples(tmp_path / f"n{n_problems}" / "samples.jsonl", n_problems)
        scoring.score_records(path, path.parent, workers=1, progress=False, bootstrap=0)
        assert len(read_graded(path.parent / "graded.jsonl")) == n_problems * (PER_PROBLEM + 1)
        peaks[n_problems] = seen["max_alive"], seen["parsed"]
    # two chunks of two problems -- the one graded and the next, prepared beside it (issue 44) -- and the
    # problem being read: never the run
    assert peaks[24][0] == peaks[6][0] <= 5 * (PER_PROBLEM + 1), peaks
    assert peaks[24][1] == 2 * 24 * (PER_PROBLEM + 1)  # an index pass and a grading pass, each a line at a time


def test_a_chunk_ends_at_its_text_budget(tmp_path, monkeypatch):
    """Long completions: a chunk closes on its characters before its sample count. Mutant: the
    ``GRADE_CHUNK_MAX_CHARS`` condition dropped from ``_chunks`` -> the whole run in one chunk: fails."""
    monkeypatch.setattr(scoring, "GRADE_CHUNK_SAMPLES", 10**6)
    monkeypatch.setattr(scoring, "GRADE_CHUNK_MAX_CHARS", 1)  # every problem is over budget alone
    seen = _count_alive(monkeypatch)
    path = write_samples(tmp_path / "samples.jsonl", 12)
    scoring.score_records(path, path.parent, workers=1, progress=False, bootstrap=0)
    assert len(read_graded(path.parent / "graded.jsonl")) == 12 * (PER_PROBLEM + 1)
    assert seen["max_alive"] <= 3 * (PER_PROBLEM + 1), seen  # one problem graded, the next prepared, one read


def _outputs(run: Path) -> dict[str, object]:
    metrics = read_json(run / "metrics.json")
    for key in ("created", "samples_file", "versions"):
        metrics["provenance"].pop(key)
    metrics["provenance"]["grading"].pop("wall_s")
    return {"graded": (run / "graded.jsonl").read_bytes(), "disagreements": (run / "disagreements.jsonl").read_bytes(),
            "metrics": metrics}


def test_chunked_grading_writes_what_one_chunk_writes(tmp_path, monkeypatch):
    """Chunks of one problem, and the samples given in memory (``dsdr-eval run``), give the bytes of one
    chunk for the whole run, on an interleaved file too (graded.jsonl keeps the samples' order).
    Mutant: ``_graded_in_file_order`` yields each chunk's records in problem order instead of waiting
    for the lines before them -> the interleaved file's graded.jsonl is reordered: fails here."""
    for interleave in (False, True):
        outputs = []
        for chunk, in_memory in ((10 ** 6, False), (1, False), (1, True)):
            monkeypatch.setattr(scoring, "GRADE_CHUNK_SAMPLES", chunk)
            monkeypatch.setattr(scoring, "GRADE_CHUNK_MAX_SAMPLES", max(chunk, PER_PROBLEM + 1))
            path = write_samples(tmp_path / f"{interleave}-{chunk}-{in_memory}" / "samples.jsonl", 6,
                                 interleave=interleave)
            samples = SamplesFile.open(path) if in_memory else None
            scored = scoring.score_records(path, path.parent, workers=2, progress=False, bootstrap=50, samples=samples)
            outputs.append(_outputs(path.parent))
            graded = list(scored.graded)  # a list in memory, else read back from graded.jsonl
            assert graded == read_graded(path.parent / "graded.jsonl") and len(scored.graded) == 6 * (PER_PROBLEM + 1)
        assert outputs[1] == outputs[0] and outputs[2] == outputs[0]
        lines = [json.loads(line) for line in outputs[0]["graded"].splitlines()]
        assert [(r["problem_id"], r["phase"], r["sample_idx"]) for r in lines] == [
            (r["problem_id"], r.get("phase"), r["sample_idx"]) for r in map(json.loads, path.read_text().splitlines())]
        assert outputs[0]["metrics"]["provenance"]["source_agreement"]["n_compared"] == 6 * PER_PROBLEM
