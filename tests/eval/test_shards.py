"""`dsdr-eval run --shard I/N` and `dsdr-eval merge` (issue 44 item 3).

The merge identity: the shards of a run, merged, hold the samples of the unsharded run (same keys,
seeds and texts; modulo line order), and score like it. Checked on the real hf backend with a tiny
random Llama (slow), and on two fake engines that imitate the two seed scopes: one whose text depends
on the seeds of its whole batch (hf), one seeded per request (vllm, openai). Then every refusal of
merge: settings that differ, a missing, doubled or unfinished shard, a directory that is no shard.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dsdr_eval.backends.base import Backend, Completion, RequestResult
from dsdr_eval.cli import main
from dsdr_eval.errors import DsdrError
from dsdr_eval.options.checks import shard as parse_shard
from dsdr_eval.options.commands import RunOptions
from dsdr_eval.protocols import derive_seed
from dsdr_eval.run.evaluation import run_evaluation
from dsdr_eval.run.merge import merge_shards

N_SHARDS = 3


class SeededFake(Backend):
    """A fake engine whose completion is a function of the seed(s) that drew it: with ``seed_scope``
    "batch" each text depends on every request seed of its batch (as hf's one seed per batch does), with
    "request" on the request's own seed and the rollout's index."""

    def __init__(self, seed_scope: str) -> None:
        self.name, self.seed_scope = "hf", seed_scope

    def render(self, template, problem):
        return problem, problem

    def batch_capacity(self):
        return 4

    def generate(self, requests, batches, on_results):
        for batch in batches:
            batch_seed = derive_seed(0, *(requests[i].seed for i in batch))
            results = []
            for i in batch:
                seed = batch_seed if self.seed_scope == "batch" else requests[i].seed
                salt = i if self.seed_scope == "batch" else 0
                texts = [f"rollout {derive_seed(seed, salt, j) % 97}: \\boxed{{{j % 2}}}" for j in range(requests[i].n)]
                results.append((i, RequestResult(tuple(Completion(t, "stop", 5, 3, seed) for t in texts))))
            on_results(results)

    def config(self):
        return {"name": self.name, "version": "fake"}


def _options(out: Path, data_dir: Path, shard: str | None = None, **over) -> RunOptions:
    settings = dict(benchmarks=["math500"], protocol="quick", n=3, limit=5, max_tokens=8, data_dir=str(data_dir),
                    backend="hf", no_diversity=True, no_progress=True, grading_workers=1)
    return RunOptions(model="smollm2-135m", out=str(out), shard=shard, **{**settings, **over})


def _run(out: Path, data_dir: Path, scope: str, shard: str | None = None, **over):
    return run_evaluation(_options(out, data_dir, shard, **over), command=["test", str(shard)],
                          engine=lambda name, model: SeededFake(scope))


def _rows(run_dir: Path) -> list[str]:
    """samples.jsonl as a sorted list of canonical lines (content-equal modulo order)."""
    lines = (run_dir / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    return sorted(json.dumps(json.loads(line), sort_keys=True) for line in lines)


def _shards(tmp_path: Path, data_dir: Path, scope: str, count: int = N_SHARDS, **over) -> list[Path]:
    paths = []
    for index in range(count):
        out = tmp_path / f"shard{index}"
        assert _run(out, data_dir, scope, f"{index}/{count}", **over).exit_code == 0
        paths.append(out)
    return paths


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir) -> dict[str, tuple[Path, list[Path]]]:
    """Per seed scope: the unsharded run and its 3 shards (made once; a test that changes one copies it)."""
    made = {}
    for scope in ("batch", "request"):
        root = tmp_path_factory.mktemp(f"runs-{scope}")
        _run(root / "whole", data_dir, scope)
        made[scope] = (root / "whole", _shards(root, data_dir, scope))
    return made


def _copies(tmp_path: Path, paths: list[Path]) -> list[Path]:
    copies = [tmp_path / path.name for path in paths]
    for path, copy in zip(paths, copies):
        shutil.copytree(path, copy)
    return copies


@pytest.mark.parametrize("scope", ["batch", "request"])
def test_merged_shards_are_the_unsharded_run(tmp_path, runs, scope):
    whole, shards = runs[scope]
    counts = [json.loads((p / "config.json").read_text())["shard"]["n_samples"] for p in shards]
    assert all(c > 0 for c in counts) and sum(counts) == 5 * (1 + 3)  # every shard has work; none twice
    assert main(["merge", *map(str, shards), "--out", str(tmp_path / "merged")]) == 0
    assert _rows(tmp_path / "merged") == _rows(whole)
    config = json.loads((tmp_path / "merged" / "config.json").read_text())
    assert "shard" not in config and [s["shard"] for s in config["merged"]["shards"]] == ["0/3", "1/3", "2/3"]
    # the merged run scores like the unsharded one
    assert main(["score", str(tmp_path / "merged"), "--no-progress", "--workers", "1", "--bootstrap", "0"]) == 0
    merged_m = json.loads((tmp_path / "merged" / "metrics.json").read_text())["benchmarks"]["math500"]
    whole_m = json.loads((whole / "metrics.json").read_text())["benchmarks"]["math500"]
    for key in ("pass1", "avg@n", "pass@k", "maj@k", "n_problems", "n_samples_per_problem"):
        assert merged_m.get(key) == whole_m.get(key), key


def test_a_shard_is_a_resumable_run_directory(tmp_path, data_dir):
    out = tmp_path / "s1"
    first = _run(out, data_dir, "batch", "1/3")
    assert first.exit_code == 0 and (out / "metrics.json").exists()  # graded like any run (its part only)
    lines = (out / "samples.jsonl").read_text().splitlines()
    (out / "samples.jsonl").write_text("\n".join(lines[:-2]) + "\n")  # a shard killed before its end
    _run(out, data_dir, "batch", "1/3")
    assert sorted((out / "samples.jsonl").read_text().splitlines()) == sorted(lines)

    def no_engine(name, model):
        raise AssertionError("a finished shard starts no engine")

    again = run_evaluation(_options(out, data_dir, "1/3"), command=["test"], engine=no_engine)
    assert again.exit_code == 0
    with pytest.raises(DsdrError, match=r"holds shard 1/3, not 2/3"):
        _run(out, data_dir, "batch", "2/3")
    with pytest.raises(DsdrError, match=r"holds shard 1/3; give --shard 1/3"):
        _run(out, data_dir, "batch")


def test_a_shard_cut_otherwise_on_a_rerun_is_refused(tmp_path, data_dir):
    out = tmp_path / "s0"
    _run(out, data_dir, "batch", "0/3")
    (out / "samples.jsonl").write_text("")  # a rerun would generate: it must cut the same units

    class Wider(SeededFake):
        def batch_capacity(self):
            return 8

    with pytest.raises(DsdrError, match=r"was cut into .* these settings cut it into"):
        run_evaluation(_options(out, data_dir, "0/3"), command=["t"], engine=lambda n, m: Wider("batch"))


def _merge_error(capsys, *args) -> str:
    assert main(["merge", *map(str, args)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err  # one line
    return err


def test_merge_refuses_shards_of_other_settings_naming_the_field(tmp_path, data_dir, runs, capsys):
    _, shards = runs["request"]
    other = tmp_path / "other2"
    _run(other, data_dir, "request", "2/3", max_tokens=9)
    err = _merge_error(capsys, shards[0], shards[1], other, "--out", tmp_path / "m")
    assert "protocol.max_tokens is 9" in err and str(other) in err
    assert not (tmp_path / "m").exists()


def test_merge_takes_shards_whose_nodes_keep_weights_and_data_elsewhere(tmp_path, runs):
    """What differs between nodes without moving an output (the model's and the data file's paths, the
    compile caches, the kernel) is not a different run; the model's fingerprint is."""
    shards = _copies(tmp_path, runs["request"][1])
    config = json.loads((shards[1] / "config.json").read_text())
    config["model"]["path"] = "/node7/models/smollm2"
    config["benchmarks"][0]["source"] = "/node7/data/math500.jsonl"
    config["backend"]["compile_cache"] = {"vllm_cache_root": "/node7/tmp"}
    config["versions"]["platform"] = "Linux-another-kernel"
    (shards[1] / "config.json").write_text(json.dumps(config))
    assert main(["merge", *map(str, shards), "--out", str(tmp_path / "m")]) == 0
    config["model"]["fingerprint"] = "0123456789abcdef"
    (shards[1] / "config.json").write_text(json.dumps(config))
    assert main(["merge", *map(str, shards), "--out", str(tmp_path / "m2")]) == 2


def test_merge_refuses_a_missing_doubled_or_unfinished_shard(tmp_path, runs, capsys):
    shards = _copies(tmp_path, runs["request"][1])
    out = tmp_path / "m"
    assert "shard 1/3 missing" in _merge_error(capsys, shards[0], shards[2], "--out", out)
    assert "shard 2/3 given twice" in _merge_error(capsys, *shards, shards[2], "--out", out)
    lines = (shards[1] / "samples.jsonl").read_text().splitlines()
    (shards[1] / "samples.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    err = _merge_error(capsys, *shards, "--out", out)
    assert f"{shards[1]}: shard 1/3 is unfinished: {len(lines) - 1} of its {len(lines)} samples" in err
    assert not (out / "samples.jsonl").exists()


def test_merge_refuses_overlapping_shards_and_a_plan_not_covered(tmp_path, runs, capsys):
    """Shards whose own records agree with their samples, yet that do not cover the run once (a shard of
    another partition mixed in: hf's batches, not requests): refused by the independent check of the plan."""
    request, batch = runs["request"][1], runs["batch"][1]
    err = _merge_error(capsys, request[0], batch[1], request[2], "--out", tmp_path / "m")
    assert "also in" in err or "in no shard" in err


def test_merge_refuses_a_run_that_is_no_shard(tmp_path, runs, capsys):
    whole, shards = runs["request"]
    err = _merge_error(capsys, whole, *shards[1:], "--out", tmp_path / "m")
    assert f"{whole / 'config.json'}: not a shard" in err


def test_more_shards_than_units_leave_valid_empty_shards(tmp_path, data_dir):
    """A run of 2 batches cut into 3 shards: the third is an empty run directory, and merge takes it."""
    shards = _shards(tmp_path, data_dir, "batch", limit=1, n=1)
    assert (shards[2] / "samples.jsonl").read_text() == ""
    assert main(["merge", *map(str, shards), "--out", str(tmp_path / "m")]) == 0
    assert len(_rows(tmp_path / "m")) == 2


@pytest.mark.parametrize(("text", "value"), [("0/8", "0/8"), ("7/8", "7/8"), (" 1 / 2 ", "1/2")])
def test_shard_option_accepts_i_of_n(text, value):
    assert parse_shard(text) == value


@pytest.mark.parametrize("text", ["8/8", "1/0", "-1/3", "1", "a/b", "1/2/3"])
def test_shard_option_refuses_anything_else(text, capsys):
    assert main(["run", "--model", "m", "--benchmarks", "math500", "--out", "o", "--shard", text]) == 2
    assert "--shard" in capsys.readouterr().err


@pytest.mark.slow  # generates with the tiny random Llama (hf backend): 4 runs of 20 samples (~20 s)
def test_hf_shards_merge_to_the_unsharded_run(tmp_path, tiny_model_dir, data_dir):
    """The merge identity on the real hf backend: per-batch seeds and padding are those of the whole run."""
    def run(out: Path, *extra: str) -> None:
        argv = ["run", "--model", str(tiny_model_dir), "--benchmarks", "math500", "--protocol", "quick", "--n", "4",
                "--limit", "5", "--max-tokens", "8", "--batch-size", "4", "--backend", "hf", "--data-dir",
                str(data_dir), "--out", str(out), "--no-diversity", "--no-progress", "--grading-workers", "1", *extra]
        assert main(argv) == 0

    run(tmp_path / "whole")
    for index in range(N_SHARDS):
        run(tmp_path / f"shard{index}", "--shard", f"{index}/{N_SHARDS}")
    assert main(["merge", *(str(tmp_path / f"shard{i}") for i in range(N_SHARDS)), "--out", str(tmp_path / "m")]) == 0
    merged, whole = _rows(tmp_path / "m"), _rows(tmp_path / "whole")
    assert len(merged) == 5 * (1 + 4) and merged == whole
    assert len({json.loads(row)["completion"] for row in whole}) > 5  # sampled text, not one repeated string
