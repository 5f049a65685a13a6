"""Design 3's hack watch (issue 47 item 4): per checkpoint and arm, the share of rollouts that
  * carry an unbalanced ``$`` in their solution (the text up to the end of the graded answer): an odd
    number of unescaped ``$``. Design 2's DSDR policies learned to drop the closing ``$`` before
    ``\\boxed{}``, so the formula extractor's ``$..$`` span ran into the text after the answer (issue 42);
  * carry text after their graded answer (anything but whitespace after the answer's end);
  * hit the token cap (``finish_reason == "length"``).

The answer's end is ``answer_end`` of graded.jsonl when the grader records it (the character offset
where the extracted final answer ends, issue 42), else the end of the last ``\\boxed{...}`` when the
sample was graded from a box (the grader takes the last box). A rollout with no extracted answer has no
cut: its whole text is its solution and nothing follows its answer.

    python reports/ablation_study/hackwatch.py RUN_DIR [RUN_DIR ...]     # one line per run directory
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# the suite's own rule: the validity line of every run's diversity counts the same (one implementation)
from dsdr_eval.diversity_metrics.formula import unbalanced_dollar

BOX = "\\boxed{"
WATCH = ("unbalanced_dollar", "after_answer", "hit_cap")


def last_box_span(text: str) -> tuple[int, int] | None:
    """(start, end) of the last ``\\boxed{...}`` whose braces close, end exclusive; None if there is none."""
    start = text.rfind(BOX)
    while start >= 0:
        depth, i = 0, start + len(BOX) - 1
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return start, i + 1
            i += 1
        start = text.rfind(BOX, 0, start)  # an unclosed last box: the grader reads the one before it
    return None


def answer_end(record: dict) -> int | None:
    """Where the graded final answer ends in ``record["completion"]`` (module docstring), or None."""
    text = record.get("completion") or ""
    end = record.get("answer_end")
    if isinstance(end, int) and not isinstance(end, bool) and 0 <= end <= len(text):
        return end
    if record.get("extracted") is None or record.get("extraction") not in ("boxed", None):
        return None
    span = last_box_span(text)
    return span[1] if span else None


def flags(record: dict) -> dict[str, bool]:
    """The three watch flags of one graded rollout."""
    text = record.get("completion") or ""
    end = answer_end(record)
    solution = text if end is None else text[:end]
    return {"unbalanced_dollar": unbalanced_dollar(solution),
            "after_answer": end is not None and bool(text[end:].strip()),
            "hit_cap": record.get("finish_reason") == "length"}


def watch(run_dir: Path, phase: str = "sampling") -> dict[str, float | int]:
    """Shares of the ``phase`` rollouts of one evaluated checkpoint (graded.jsonl) with each flag; the
    T = 1.0 rollouts are phase ``sampling``, the T = 0.1 one per problem ``pass1``. n = the rollouts
    counted (those with a ``completion``); every share is NaN when n = 0."""
    counts = dict.fromkeys(WATCH, 0)
    n = 0
    with (run_dir / "graded.jsonl").open() as fh:
        for i, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{run_dir / 'graded.jsonl'}:{i}: not JSON ({exc.msg})") from None
            # a row without its text (a synthetic or stripped file) has nothing to watch: not counted in n
            if not isinstance(r, dict) or r.get("phase") != phase or not isinstance(r.get("completion"), str):
                continue
            n += 1
            for k, v in flags(r).items():
                counts[k] += int(v)
    return {"n": n, **{k: (counts[k] / n if n else float("nan")) for k in WATCH}}


def main(argv: list[str] | None = None) -> int:
    dirs = sys.argv[1:] if argv is None else argv
    if not dirs:
        print("usage: hackwatch.py RUN_DIR [RUN_DIR ...]", file=sys.stderr)
        return 2
    try:
        for d in dirs:
            w = watch(Path(d))
            print(f"{d}: n={w['n']} " + " ".join(f"{k}={w[k]:.3f}" for k in WATCH))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
