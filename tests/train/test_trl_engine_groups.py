"""Groups across processes: TRL spreads a prompt's G completions over processes; a 2-process CPU
run (accelerate launch, gloo) where a group straddles the two ranks gives every rollout the same
advantage and coupling weight (so the same within-group diversity, §3.1-§3.3) as one process on
the same completions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

from helpers.trl_engine_helpers import launch_two_processes  # noqa: E402

# slow: two training processes and a reference run (36 s on 2 shared cores)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "helpers" / "trl_group_worker.py"


def _rows(out: Path) -> tuple[int, list[list[dict]]]:
    files = sorted(out.glob("rank*.json"))
    data = [json.loads(f.read_text()) for f in files]
    return data[0]["world"], [d["rows"] for d in data]


def _by_rollout(rows: list[dict]) -> dict:
    return {(r["problem"], tuple(r["completion"])): (r["advantage"], r["weight"]) for r in rows}


def test_group_split_across_two_processes(tiny_model_dir, train_data_dir, tmp_path):
    train = str(train_data_dir / "gsm8k_train.jsonl")
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    from helpers.trl_group_worker import main as one_process

    one_process(str(tiny_model_dir), train, str(one))  # the reference: one process, in this one
    launch_two_processes(WORKER, str(tiny_model_dir), train, str(two), timeout=300)
    world1, (single,) = _rows(one)
    world2, parts = _rows(two)
    assert (world1, world2, len(parts)) == (1, 2, 2)
    # the layout under test: one prompt's group has rollouts on both ranks
    problems = [{r["problem"] for r in p} for p in parts]
    split = problems[0] & problems[1]
    assert split, problems
    merged = _by_rollout(parts[0] + parts[1])
    reference = _by_rollout(single)
    assert merged.keys() == reference.keys() and len(merged) == 6
    for key, (adv, w) in reference.items():
        assert merged[key][0] == pytest.approx(adv, rel=1e-9, abs=1e-12), key
        assert merged[key][1] == pytest.approx(w, rel=1e-9, abs=1e-12), key
    # the split group's rollouts differ in advantage only through their diversity: all correct
    # or all wrong groups get exactly 0 unless the bonus (computed on the whole group) separates them
    split_rows = [v for k, v in reference.items() if k[0] in split]
    assert len(split_rows) == 2
