"""`dsdr-eval audit`: the samples of a scored run that raise audit flags (``dsdr_eval.grading.audit``),
read from graded.jsonl one record at a time, with what a person needs to judge each: the problem,
the gold, the extracted answer, the status and the end of the graded answer part."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from dsdr_eval.errors import DsdrError
from dsdr_eval.grading.audit import FLAGS
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.rundir.samples import GradedSample, iter_records, parse_graded

END_CHARS = 300  # of the answer part shown per sample


def graded_path(path: str | Path) -> Path:
    """graded.jsonl of a run directory, or the graded file given."""
    path = Path(path)
    if path.is_dir():
        return rundir.require_run_dir(path, rundir.GRADED) / rundir.GRADED
    if not path.is_file():
        raise DsdrError(f"{path}: neither a run directory nor a graded.jsonl file")
    return path


def flagged_samples(path: str | Path, *, flag: str | None = None, benchmark: str | None = None,
                    limit: int | None = None, end_chars: int = END_CHARS) -> Iterator[dict[str, Any]]:
    """One entry per sample of ``path`` (a run directory or a graded.jsonl) raising an audit flag (only
    ``flag`` when given; only ``benchmark``'s samples when given), in file order, at most ``limit``."""
    if flag is not None and flag not in FLAGS:
        raise DsdrError(f"--flag: unknown audit flag {flag!r} (known: {', '.join(FLAGS)})")
    shown = 0
    audited = False
    for record in iter_records(graded_path(path), parse_graded):
        audited = audited or record.audit is not None
        if limit is not None and shown >= limit:
            break
        if not record.audit or (flag is not None and flag not in record.audit):
            continue
        if benchmark is not None and record.sample.benchmark != benchmark:
            continue
        shown += 1
        yield entry(record, end_chars)
    if not audited and shown == 0:
        raise DsdrError(f"{graded_path(path)}: its samples carry no audit (graded before issue 43): "
                        "run `dsdr-eval score` again")


def entry(record: GradedSample, end_chars: int = END_CHARS) -> dict[str, Any]:
    """What the listing shows of one flagged record."""
    answer = record.answer_text
    return {"key": list(record.key), "line": record.line, "audit": list(record.audit or ()),
            "status": record.status, "gold": record.sample.gold, "extracted": record.extracted,
            "extraction": record.extraction, "finish_reason": record.sample.finish_reason,
            "problem": record.sample.problem, "answer_end": answer[-end_chars:] if end_chars > 0 else "",
            "answer_chars": len(answer)}


def audit_counts(metrics: dict[str, Any]) -> dict[str, dict[str, int]]:
    """benchmark -> {flag: samples} of metrics.json (benchmarks scored before the audit are left out)."""
    return {name: entry["audit_counts"] for name, entry in metrics.get("benchmarks", {}).items()
            if isinstance(entry.get("audit_counts"), dict)}
