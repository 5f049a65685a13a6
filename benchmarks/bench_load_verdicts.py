"""Do verdicts change with the machine's load? `score` idle and beside CPU-bound processes (issue 43).

Every gold of the chosen benchmarks is boxed as its own answer ("The answer is $\\boxed{GOLD}$."),
and `dsdr-eval score --timeout T` grades the file twice in fresh processes: with nothing of ours
beside it, then beside ``--busy`` processes that spin on the CPU. It prints the statuses of both runs
and how many samples changed verdict, for this checkout and, with ``--ref COMMIT``, for that commit
(exported with ``git archive``), each tree idle then loaded.

Usage: python benchmarks/bench_load_verdicts.py [--ref 2ec6e16] [--timeout 0.5] [--busy 6]
       [--benchmarks aime24,aime25,amc23,math500,minerva,olympiadbench] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_score import REPO, export_tree  # noqa: E402


def write_golds(data_dir: Path, benchmarks: list[str], path: Path) -> None:
    with path.open("w", encoding="utf-8") as out:
        for name in benchmarks:
            with (data_dir / f"{name}.jsonl").open(encoding="utf-8") as handle:
                for line in handle:
                    record = json.loads(line)
                    out.write(json.dumps({"benchmark": name, "problem_id": str(record["id"]), "gold": record["answer"],
                                          "completion": f"The answer is $\\boxed{{{record['answer']}}}$."}) + "\n")


def score(tree: Path, samples: Path, out: Path, timeout: float) -> tuple[list[dict], float]:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dsdr_eval.cli", "score", str(samples), "--out", str(out), "--timeout",
                    str(timeout), "--workers", "2", "--no-progress"], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with (out / "graded.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle], time.perf_counter() - started


def compare(label: str, tree: Path, samples: Path, tmp: Path, args) -> None:
    idle, idle_s = score(tree, samples, tmp / f"{label}-idle", args.timeout)
    load_before = os.getloadavg()[0]
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        loaded, loaded_s = score(tree, samples, tmp / f"{label}-busy", args.timeout)
    finally:
        for proc in busy:
            proc.kill()
        for proc in busy:
            proc.wait()
    changed = [(a["benchmark"], a["problem_id"], a["status"], b["status"], b["grade_note"])
               for a, b in zip(idle, loaded) if a["status"] != b["status"]]
    print(f"{label}: {len(changed)} of {len(idle)} verdicts differ; idle {idle_s:.0f} s "
          f"{dict(collections.Counter(r['status'] for r in idle))}, beside {args.busy} busy processes {loaded_s:.0f} s "
          f"{dict(collections.Counter(r['status'] for r in loaded))} (load {load_before:.1f} before the busy ones)")
    for row in changed[:5]:
        print("   ", row)
    notes = collections.Counter((r["grade_note"] or "")[:90] for r in idle + loaded if r["status"] in ("error", "timeout"))
    for note, count in notes.most_common(3):
        print(f"    {count} x {note}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", default=None, help="also measure this commit")
    parser.add_argument("--timeout", type=float, default=0.5)
    parser.add_argument("--busy", type=int, default=6)
    parser.add_argument("--benchmarks", default="aime24,aime25,amc23,math500,minerva,olympiadbench")
    parser.add_argument("--data-dir", default=os.environ.get("DSDR_DATA_DIR", str(REPO.parent / "shared/data/benchmarks")))
    args = parser.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at start; timeout {args.timeout:g} s")
    with tempfile.TemporaryDirectory(prefix="bench-load-") as name:
        tmp = Path(name)
        samples = tmp / "golds.jsonl"
        write_golds(Path(args.data_dir), args.benchmarks.split(","), samples)
        if args.ref:
            (tmp / "ref").mkdir()
            commit = export_tree(args.ref, tmp / "ref")
            compare(f"ref {commit[:10]}", tmp / "ref", samples, tmp, args)
        compare("this tree", REPO, samples, tmp, args)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
