"""Agreement of our grader with another evaluation suite's labels on REAL model completions.

Input: a JSONL file in the output format of the Qwen2.5-Math / math-evaluation-harness / ToRA
evaluation scripts (one problem per line)::

    {"idx": 0, "gt": "18", "code": ["<completion 0>", ...], "pred": ["18", ...], "score": [true, ...]}

Each completion becomes one of our samples (benchmark, problem_id = idx, sample_idx = position
in ``code``, gold = gt) and is graded by ``dsdr_eval.grading.grade_samples``. Their label is
``score[j]`` where the file has it (Qwen2.5-Math and math-evaluation-harness write it). ToRA's
released outputs carry ``pred`` but not ``score``; for them ``--labels tora-numeric`` recomputes
ToRA's own rule for numeric golds (``src/eval/grader.py:math_equal``: both sides numbers after
dropping ","; equal within rel. tol 1e-4 to gt, gt/100 or gt*100; else equal after removing
braces/parentheses). The printed mean of those labels is checked against the suite's published
score (the ``.metrics`` file beside the outputs) before any agreement is reported.

Source used for the figures in the report (not shipped: 1.8 MB each, MIT licence):
    git clone https://github.com/microsoft/ToRA  (commit 213c1c995038c73fab10343814df7a42f990f026)
    src/outputs/llm-agents/tora-70b-v1.0/gsm8k/test_tora_-1_seed0_t0.0_s0_e1319.jsonl   (84.3)
    src/outputs/llm-agents/tora-code-34b-v1.0/gsm8k/test_tora_-1_seed0_t0.0_s0_e1319.jsonl (80.7)

Usage (rerun unchanged after grader changes):
    python benchmarks/bench_grader_agreement.py FILE.jsonl [--benchmark gsm8k] [--labels auto]
        [--published 84.3] [--show 50] [--workers N] [--timeout 5] [--extraction tool-output]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path


def load_records(path: Path) -> list[dict]:
    records = []
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise SystemExit(f"{path}:{line_number}: not JSON ({error.msg})")
            for name in ("idx", "gt", "code"):
                if name not in record:
                    raise SystemExit(f"{path}:{line_number}: missing field '{name}'")
            records.append(record)
    return records


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
        return True
    except ValueError:
        return False


def tora_numeric_label(pred: object, gold: str) -> bool:
    """ToRA's ``math_equal`` for a numeric gold (its symbolic fallback never fires on GSM8K's
    integer golds with a non-numeric prediction that survives its string comparison)."""
    prediction, reference = str(pred if pred is not None else "").strip(), str(gold).strip()
    if _is_number(prediction) and _is_number(reference):
        p, r = float(prediction.replace(",", "")), float(reference.replace(",", ""))
        return any(math.isclose(candidate, p, rel_tol=1e-4) for candidate in (r / 100, r, r * 100))
    strip = str.maketrans("", "", "{}()")
    return bool(prediction) and prediction.translate(strip) == reference.translate(strip)


def to_samples(records: list[dict], benchmark: str, labels: str) -> tuple[list[dict], list[bool], list[str]]:
    """-> (our samples, their labels, their extracted answers), aligned."""
    rows, theirs, their_preds = [], [], []
    for record in records:
        completions = record["code"] if isinstance(record["code"], list) else [record["code"]]
        preds = record.get("pred") or [None] * len(completions)
        for j, completion in enumerate(completions):
            rows.append({"benchmark": benchmark, "problem_id": str(record["idx"]), "sample_idx": j,
                         "gold": str(record["gt"]), "completion": completion})
            pred = preds[j] if j < len(preds) else None
            their_preds.append(pred)
            if labels == "score":
                theirs.append(bool(record["score"][j]))
            else:
                theirs.append(tora_numeric_label(pred, str(record["gt"])))
    return rows, theirs, their_preds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path)
    parser.add_argument("--benchmark", default=None, help="benchmark name for our samples (default: parent folder)")
    parser.add_argument("--labels", choices=("auto", "score", "tora-numeric"), default="auto",
                        help="their labels: the file's 'score' field, or ToRA's numeric rule on 'pred' (auto: score if present)")
    parser.add_argument("--published", type=float, default=None,
                        help="the suite's published mean score (%%) for this file: the labels must reproduce it")
    parser.add_argument("--show", type=int, default=50, help="disagreements to print")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--extraction", default="boxed",
                        help="extraction profile (dsdr_eval.grading.extraction); tool-output for ToRA's tora prompt")
    parser.add_argument("--out", type=Path, default=None, help="write every disagreement as JSONL here")
    args = parser.parse_args()

    from dsdr_eval.grading import grade_samples, grader_provenance

    records = load_records(args.path)
    labels = args.labels
    if labels == "auto":
        labels = "score" if all("score" in r for r in records) else "tora-numeric"
    benchmark = args.benchmark or args.path.parent.name
    rows, theirs, their_preds = to_samples(records, benchmark, labels)
    their_mean = 100 * sum(theirs) / len(theirs)
    print(f"input: {args.path.name}: {len(records)} problems, {len(rows)} completions; their labels: {labels}, "
          f"mean {their_mean:.1f} %" + (f" (published {args.published:.1f} %)" if args.published is not None else ""))
    if args.published is not None and abs(their_mean - args.published) > 0.05:
        print("their labels do not reproduce the published score: agreement would be meaningless")
        return 1

    start = time.perf_counter()
    graded = grade_samples(rows, grading_timeout_s=args.timeout, workers=args.workers, progress=False,
                          extraction=args.extraction)
    elapsed = time.perf_counter() - start
    ours = [row["correct"] for row in graded]
    agree = sum(a == b for a, b in zip(ours, theirs))
    provenance = grader_provenance(args.timeout, args.workers, extraction=args.extraction)
    print(f"our grader: math-verify {provenance['math_verify_version']}, extraction rules "
          f"v{provenance['extraction_rules_version']}, profile {args.extraction}; graded in {elapsed:.1f} s; "
          f"our mean {100 * sum(ours) / len(ours):.1f} %; statuses {dict(Counter(r['status'] for r in graded))}")
    print(f"AGREEMENT: {agree}/{len(rows)} = {100 * agree / len(rows):.2f} %")
    table = Counter((a, b) for a, b in zip(ours, theirs))
    print(f"  ours correct & theirs correct {table[True, True]}, ours correct & theirs wrong {table[True, False]}, "
          f"ours wrong & theirs correct {table[False, True]}, both wrong {table[False, False]}")
    disagreements = [(row, their, pred) for row, their, pred in zip(graded, theirs, their_preds)
                     if row["correct"] != their]
    out = args.out.open("w", encoding="utf-8") if args.out else None
    for shown, (row, their, pred) in enumerate(disagreements):
        record = {"key": f"{row['problem_id']}/{row['sample_idx']}", "gold": row["gold"], "their_pred": pred,
                  "theirs": their, "our_extracted": row["extracted"], "our_method": row["extraction"],
                  "our_status": row["status"], "completion_tail": row["completion"][-160:]}
        if out:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
        if shown < args.show:
            print(f"  DISAGREE {record['key']}: gold={row['gold']!r} theirs={their} (pred {pred!r}) "
                  f"ours={row['status']} (extracted {row['extracted']!r} via {row['extraction']})")
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
