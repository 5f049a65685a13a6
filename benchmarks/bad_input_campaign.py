"""Bad-input campaign for `dsdr-eval score`: run every one-bad-line file of tests/helpers/bad_samples.py
through the CLI (a subprocess each) and classify what happened.

Classes: ``traceback`` (a Python traceback on stderr), ``silent`` (exit 0 and no warning although
the line is bad or odd), ``clean`` (what the case expects: exit 2 with one ``error: FILE:LINE:FIELD:``
line, or exit 0 with a ``warning: FILE:LINE:FIELD:`` line, or exit 0 for harmless oddities),
``wrong`` (accepted, but the odd line's graded row is not what the case says: a numeric gold
turned into other text, a hostile completion graded wrongly), ``unclear`` (exit 2 without traceback, but the message does not name the file, line and field, or is
not one line), ``other`` (any other exit code). Each run starts with a graded.jsonl and metrics.json
already in --out; a failed run must leave them untouched and no temp file behind.

Usage: PYTHONPATH=REPO python benchmarks/bad_input_campaign.py [--jobs 2] [--json OUT.json]
(the code under test is the ``dsdr_eval`` that PYTHONPATH imports, or the installed one; the case table
is this checkout's).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.bad_samples import CASES, Case  # noqa: E402

SENTINELS = {"graded.jsonl": b'{"kept": true}\n', "metrics.json": b'{"benchmarks": {}, "kept": true}\n'}


def run_case(case: Case, root: Path) -> dict:
    work = root / case.name
    out = work / "out"
    out.mkdir(parents=True)
    for name, data in SENTINELS.items():
        (out / name).write_bytes(data)
    samples = work / "samples.jsonl"
    samples.write_bytes(case.content())
    proc = subprocess.run([sys.executable, "-m", "dsdr_eval.cli", "score", str(samples), "--out", str(out),
                           "--workers", "1", "--bootstrap", "0", "--no-progress"],
                          cwd=work, capture_output=True, text=True, errors="backslashreplace", timeout=600)
    label = classify(case, samples, proc)
    if label == "clean" and proc.returncode == 0 and case.graded:
        graded = [json.loads(line) for line in (out / "graded.jsonl").read_text(encoding="utf-8").splitlines()]
        row = graded[case.record_index]
        if any(row.get(name) != value for name, value in case.graded):
            label = "wrong"
            proc.stderr += "\ngraded row: " + json.dumps({name: row.get(name) for name, _ in case.graded})[:200]
    return {"case": case.name, "expect": case.expect, "rc": proc.returncode, "stderr": proc.stderr,
            "class": label, "leftover_tmp": sorted(p.name for p in out.glob("*.tmp*")),
            "sentinels_kept": all((out / n).read_bytes() == d for n, d in SENTINELS.items())}


def classify(case: Case, samples: Path, proc: subprocess.CompletedProcess) -> str:
    err = proc.stderr
    if "Traceback" in err:
        return "traceback"
    lines = [line for line in err.splitlines() if line.strip()]
    where = (re.escape(f"{samples}:{case.line}:" + (f"{case.field}:" if case.field else ""))
             if case.field is not None else None)
    if proc.returncode == 0:
        warned = [line for line in lines if line.startswith("warning: ")]
        if case.expect == "warn":
            return "clean" if where and any(re.match(f"warning: {where} ", line) for line in warned) else "silent"
        if case.expect == "error":
            return "silent"
        return "clean"
    if proc.returncode == 2:
        if case.expect == "error" and len(lines) == 1 and re.match(f"error: {where} ", lines[0]):
            return "clean"
        return "unclear"
    return "other"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write the per-case results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda c: run_case(c, Path(tmp)), CASES))
    width = max(len(c.name) for c in CASES)
    for r in results:
        note = "" if r["class"] == "clean" else "  " + (r["stderr"].strip().splitlines() or [""])[-1][:110]
        print(f"{r['case']:<{width}}  expect={r['expect']:<5} rc={r['rc']:<3} {r['class']:<9}"
              f"{' TMP-LEFT' if r['leftover_tmp'] else ''}{'' if r['sentinels_kept'] or r['rc'] == 0 else ' LOST'}{note}")
    for expect in ("error", "warn", "ok"):
        group = [r for r in results if r["expect"] == expect]
        counts = Counter(r["class"] for r in group)
        print(f"expect={expect}: {len(group)} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    bad = [r for r in results if r["expect"] != "ok"]
    counts = Counter(r["class"] for r in bad)
    print(f"bad or odd lines: {len(bad)}: traceback {counts['traceback']}, silent {counts['silent']}, "
          f"unclear {counts['unclear']}, wrong {counts['wrong']}, other {counts['other']}, clean {counts['clean']}; "
          f"leftover temp files in {sum(bool(r['leftover_tmp']) for r in results)} runs; "
          f"failed runs that changed --out: {sum(not r['sentinels_kept'] for r in results if r['rc'] != 0)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
