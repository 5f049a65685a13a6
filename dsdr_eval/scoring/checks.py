"""What scoring checks beside the metrics, fed one graded record at a time in file order (issue 36:
``dsdr-eval score`` never holds a whole run): the no-answer warnings (a wrong answer convention must
never be a silent 0 %) and the agreement with the source tool's verdicts of an imported run.

Each tally holds counts per benchmark and a bounded number of examples, never the records.
"""

from __future__ import annotations

from typing import IO, Any, Iterable

from dsdr_eval.grading.extraction import EXTRACTION_PROFILES, extract_answer
from dsdr_eval.rundir.jsonl import jsonl_chunks
from dsdr_eval.rundir.samples import GradedSample, SampleKey

NO_ANSWER_WARN_FRACTION = 0.2  # above this share of no_answer in a benchmark, the profile is probably wrong
NO_ANSWER_MIN_SAMPLES = 5  # fewer samples tell a truncated output from a wrong convention too poorly to warn
SHOWN_DISAGREEMENTS = 10  # in metrics.json; all of them in disagreements.jsonl


class NoAnswerTally:
    """Per benchmark: its samples, those without an answer, and the first of those in key order (its
    completion is the example a warning shows)."""

    def __init__(self, extraction: str, threshold: float = NO_ANSWER_WARN_FRACTION) -> None:
        self.extraction, self.threshold = extraction, threshold
        self.counts: dict[str, list[int]] = {}  # benchmark -> [samples, no_answer]
        self.examples: dict[str, tuple[SampleKey, str]] = {}  # benchmark -> (key, completion)

    def add(self, record: GradedSample) -> None:
        counts = self.counts.setdefault(record.sample.benchmark, [0, 0])
        counts[0] += 1
        if record.status != "no_answer":
            return
        counts[1] += 1
        # the first in key order, not in file order: concurrent engines append in the order requests finish,
        # and the warning must read the same on every run
        example = self.examples.get(record.sample.benchmark)
        if example is None or record.sample.key < example[0]:
            self.examples[record.sample.benchmark] = (record.sample.key, record.sample.completion)

    def messages(self) -> list[str]:
        """One line per benchmark (of at least ``NO_ANSWER_MIN_SAMPLES`` samples) where more than
        ``threshold`` of the samples have no answer under the profile: the share, the profile, the end
        of one such completion and the profiles that do find an answer in it."""
        messages = []
        for benchmark, (n, missing) in self.counts.items():
            if missing <= self.threshold * n or n < NO_ANSWER_MIN_SAMPLES:
                continue
            key, completion = self.examples[benchmark]
            others = [name for name in EXTRACTION_PROFILES
                      if name != self.extraction and extract_answer(completion, name) is not None]
            hint = (f"; profiles that find an answer in it: {', '.join(others)} (--extraction)" if others
                    else "; no profile finds an answer in it")
            messages.append(f"{benchmark}: {missing} of {n} samples ({100 * missing / n:.0f}%) "
                            f"have no answer under extraction profile '{self.extraction}', e.g. problem "
                            f"{key.problem_id} sample {key.sample_idx} "
                            + (f"ends {clip(completion, 80, tail=True)}" if completion.strip() else
                               f"is empty ({'no text' if not completion else 'whitespace only'})") + hint)
        return messages


def no_answer_warnings(graded: Iterable[GradedSample], extraction: str,
                       threshold: float = NO_ANSWER_WARN_FRACTION) -> list[str]:
    """``NoAnswerTally``'s warnings of records in memory."""
    tally = NoAnswerTally(extraction, threshold)
    for record in graded:
        tally.add(record)
    return tally.messages()


class AgreementTally:
    """How often our verdict equals the source tool's (``source_correct``, kept by ``dsdr-eval import``):
    counts overall and per benchmark and the first ``SHOWN_DISAGREEMENTS`` disagreeing samples; every
    disagreeing sample, whole, goes to ``listing`` as a JSONL line (disagreements.jsonl)."""

    def __init__(self, listing: IO[bytes]) -> None:
        self.listing = listing
        self.n_compared = self.n_agree = 0
        self.per_benchmark: dict[str, dict[str, int]] = {}
        self.shown: list[dict[str, Any]] = []

    def add(self, record: GradedSample) -> None:
        theirs = record.sample.extra.get("source_correct")
        if not isinstance(theirs, bool):
            return
        counts = self.per_benchmark.setdefault(record.sample.benchmark, {"n_compared": 0, "n_agree": 0})
        self.n_compared += 1
        counts["n_compared"] += 1
        if record.correct == theirs:
            self.n_agree += 1
            counts["n_agree"] += 1
            return
        source_extracted = record.sample.extra.get("source_extracted")
        if len(self.shown) < SHOWN_DISAGREEMENTS:
            self.shown.append({"key": list(record.key), "ours": record.correct, "source": theirs,
                               "extracted": record.extracted, "source_extracted": source_extracted})
        self.listing.writelines(jsonl_chunks([{
            "key": list(record.key), "line": record.line, "gold": record.sample.gold, "ours": record.correct,
            "status": record.status, "extraction": record.extraction, "extracted": record.extracted,
            "source": theirs, "source_extracted": source_extracted, "completion": record.sample.completion}]))

    def summary(self) -> dict[str, Any] | None:
        """The agreement block of metrics.json's provenance; None without labels."""
        if not self.n_compared:
            return None
        n_disagree = self.n_compared - self.n_agree
        return {"n_compared": self.n_compared, "n_agree": self.n_agree, "n_disagree": n_disagree,
                "fraction": self.n_agree / self.n_compared, "per_benchmark": self.per_benchmark,
                "disagreements": self.shown}


def clip(text: Any, width: int, *, tail: bool = False) -> str:
    """``text`` as a one-line repr of at most about ``width`` characters (its end when ``tail``)."""
    if not isinstance(text, str):
        return repr(text)
    if len(text) > width:
        text = "..." + text[-width:] if tail else text[:width] + "..."
    return repr(text)
