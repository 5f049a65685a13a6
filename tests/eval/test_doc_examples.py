"""The Python API examples of docs/python_api.md run as written on the files the repository ships."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dsdr_eval

REPO = Path(__file__).resolve().parents[2]


def test_import_results_example_runs_on_the_shipped_file(tmp_path, monkeypatch):
    page = (REPO / "docs" / "python_api.md").read_text(encoding="utf-8")
    named = re.search(r'import_results\("([^"]+)"', page).group(1)
    assert (REPO / named).is_file(), f"docs/python_api.md imports {named}, which the repository does not ship"
    monkeypatch.chdir(tmp_path)
    done = dsdr_eval.import_results(str(REPO / named), out="runs/imported", tool="jsonl", benchmark="squares")
    assert (done.n_samples, done.n_problems, done.benchmark) == (8, 4, "squares")  # as the page prints
    at_k = dsdr_eval.score("runs/imported", bootstrap=0, no_progress=True).benchmarks["squares"].scores.at_k()
    # independent of the grader: each problem's first completion boxes k^2, its second 2k
    rows = [json.loads(line) for line in (REPO / named).read_text().splitlines()]
    c = [sum(str(int(r["answer"])) in comp.split("boxed{")[1].split("}")[0] for comp in r["completion"]) for r in rows]
    assert c == [1, 1, 1, 1] and at_k == {1: 0.5, 2: 1.0}
