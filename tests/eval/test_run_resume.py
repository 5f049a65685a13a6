"""`dsdr-eval run` end to end on the tiny model (HF backend): kill -9 mid-run, rerun, compare.

The rerun must generate only what is missing (no sample lost or doubled) and end with the same
samples and metrics as an uninterrupted run of the same command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsdr_eval.rundir.jsonl import read_json, read_jsonl

DSDR_EVAL = Path(sys.executable).parent / "dsdr-eval"
N_PROBLEMS, N_SAMPLES = 8, 4
EXPECTED = N_PROBLEMS * (1 + N_SAMPLES)


def _command(model_dir, data_dir, out, *extra):
    return [str(DSDR_EVAL), "run", "--model", str(model_dir), "--benchmarks", "math500", "--protocol", "quick",
            "--n", str(N_SAMPLES), "--limit", str(N_PROBLEMS), "--max-tokens", "40", "--batch-size", "4",
            "--backend", "hf", "--data-dir", str(data_dir), "--out", str(out), "--no-diversity",
            "--no-progress", *extra]


def _env():
    return dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")


def _run(cmd, timeout=300):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _by_key(rows):
    return {(r["benchmark"], r["phase"], r["problem_id"], r["sample_idx"]): r for r in rows}


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("run-full") / "run"
    proc = _run(_command(tiny_model_dir, data_dir, out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


@pytest.mark.slow  # `dsdr-eval run` subprocesses generating with the tiny Llama (28-33 s)
def test_uninterrupted_run_writes_the_contract(uninterrupted):
    out, proc = uninterrupted
    samples = read_jsonl(out / "samples.jsonl")
    assert len(samples) == EXPECTED == len(_by_key(samples))
    fields = {"benchmark", "problem_id", "sample_idx", "phase", "problem", "gold", "prompt", "completion",
              "finish_reason", "n_prompt_tokens", "n_completion_tokens", "temperature", "top_p",
              "max_tokens", "seed"}
    assert all(fields <= set(row) for row in samples)
    assert {(r["phase"], r["temperature"], r["top_p"]) for r in samples} == {("pass1", 0.1, 0.9), ("sampling", 0.7, 0.9)}
    assert all(r["finish_reason"] in ("stop", "length") and 1 <= r["n_completion_tokens"] <= 40 for r in samples)
    assert all("Please reason step by step" in r["prompt"] and r["prompt"].startswith("<|im_start|>") for r in samples)
    config = read_json(out / "config.json")
    assert config["kind"] == "eval" and config["backend"]["name"] == "hf" and config["backend"]["version"]
    assert config["model"]["fingerprint"] and config["template"]["chat"] is True
    assert config["protocol"]["max_tokens"] == 40 and config["versions"]["torch"]
    assert config["benchmarks"][0]["n_problems"] == N_PROBLEMS
    assert len(read_jsonl(out / "graded.jsonl")) == EXPECTED
    metrics = read_json(out / "metrics.json")
    assert metrics["benchmarks"]["math500"]["n_problems"] == N_PROBLEMS
    assert "math500" in proc.stdout  # the summary table


@pytest.mark.slow  # `dsdr-eval run` subprocesses generating with the tiny Llama (28-33 s)
def test_kill_9_then_rerun_equals_uninterrupted(uninterrupted, tiny_model_dir, data_dir, tmp_path):
    full_dir, _ = uninterrupted
    out = tmp_path / "run"
    cmd = _command(tiny_model_dir, data_dir, out)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(),
                            start_new_session=True)
    samples = out / "samples.jsonl"
    deadline = time.time() + 240
    try:
        while _lines(samples) < 5:
            assert proc.poll() is None, f"run ended before it could be killed: {proc.stderr.read()[-2000:]}"
            assert time.time() < deadline, "no samples written in 240 s"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    written = _lines(samples)
    assert 5 <= written < EXPECTED, "the kill must land mid-run"
    # what a kill in the middle of an append leaves: a torn last line
    with samples.open("a") as fh:
        fh.write('{"benchmark": "math500", "problem_id": "torn')

    rerun = _run(cmd)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "resumed:" in rerun.stdout
    resumed = read_jsonl(out / "samples.jsonl")
    full = read_jsonl(full_dir / "samples.jsonl")
    assert len(resumed) == EXPECTED == len(_by_key(resumed))  # none doubled, none missing
    # same text for every sample (batches and seeds are keyed by content), so the same metrics
    assert {k: r["completion"] for k, r in _by_key(resumed).items()} == \
           {k: r["completion"] for k, r in _by_key(full).items()}
    assert read_json(out / "metrics.json")["benchmarks"] == read_json(full_dir / "metrics.json")["benchmarks"]

    # a complete run dir: rerunning re-scores without generating
    again = _run(cmd)
    assert again.returncode == 0 and "nothing to generate" in again.stdout
    assert len(read_jsonl(out / "samples.jsonl")) == EXPECTED
    config = read_json(out / "config.json")
    assert len(config["resumed"]) == 1  # one continuation that generated


@pytest.mark.slow  # `dsdr-eval run` subprocesses generating with the tiny Llama (28-33 s)
def test_rerun_with_another_protocol_is_refused(uninterrupted, tiny_model_dir, data_dir):
    out, _ = uninterrupted
    before = (out / "samples.jsonl").read_bytes()
    proc = _run(_command(tiny_model_dir, data_dir, out, "--temperature", "1.0"))
    assert proc.returncode == 2
    assert "different protocol" in proc.stderr and "--force-config" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (out / "samples.jsonl").read_bytes() == before


# ------------------------------------------------- --force-config provenance (OpenAI backend, fault server)
def _run_openai(out: Path, data_dir: Path, server, model: str, n: int, **options):
    from dsdr_eval.run.evaluation import run_evaluation
    from dsdr_eval.options.commands import RunOptions

    return run_evaluation(RunOptions(model=model, backend="openai", base_url=[server.base_url], benchmarks=["math500"],
                                     limit=2, protocol="quick", n=n, max_tokens=16, data_dir=str(data_dir),
                                     out=str(out), no_diversity=True, no_progress=True, grading_workers=1, **options),
                          command=["test_run_resume"])


def _sampling_n(protocol: dict) -> int:
    return next(p["n"] for p in protocol["phases"] if p["phase"] == "sampling")


def test_force_config_records_every_change_and_which_samples_it_wrote(tmp_path, data_dir, capsys):
    from helpers.fault_server import FaultServer

    from dsdr_eval.errors import DsdrError

    out = tmp_path / "run"
    with FaultServer(reply="The answer is \\boxed{42}.") as server:
        assert _run_openai(out, data_dir, server, "model-a", 2).exit_code == 0
        assert len(read_jsonl(out / "samples.jsonl")) == 2 * (1 + 2)

        # a larger n, forced: the first settings stay on top, the change and its lines are recorded
        assert _run_openai(out, data_dir, server, "model-a", 3, force_config=True).exit_code == 0
        config = read_json(out / "config.json")
        assert _sampling_n(config["protocol"]) == 2 and config["model"]["spec"] == "model-a"
        forced = config["resumed"][-1]
        assert set(forced["forced"]["changed"]) == {"protocol"} and config["mixed_settings"] == ["protocol"]
        change = forced["forced"]["changed"]["protocol"]
        assert _sampling_n(change["was"]) == 2 and _sampling_n(change["now"]) == 3
        assert _sampling_n(forced["forced"]["settings"]["protocol"]) == 3
        assert forced["first_line"] == 7 and forced["n_generated"] == 2 and forced["backend"]["name"] == "openai"
        samples = read_jsonl(out / "samples.jsonl")
        assert [r["sample_idx"] for r in samples[6:8]] == [2, 2]  # lines 7-8: the forced continuation's

        # a smaller n, forced: nothing to generate, said and recorded (the extra samples are kept and scored)
        capsys.readouterr()
        assert _run_openai(out, data_dir, server, "model-a", 1, force_config=True).exit_code == 0
        err = capsys.readouterr().err
        assert "4 samples" in err and "outside the forced settings" in err
        config = read_json(out / "config.json")
        shrink = config["resumed"][-1]
        assert _sampling_n(shrink["forced"]["changed"]["protocol"]["now"]) == 1
        assert shrink["n_generated"] == 0 and shrink["forced"]["n_samples_outside_settings"] == 4
        assert len(config["resumed"]) == 2

        # another model: refused even with --force-config, nothing written
        before = (out / "samples.jsonl").read_bytes()
        with pytest.raises(DsdrError, match="--allow-mixed-models"):
            _run_openai(out, data_dir, server, "model-b", 4, force_config=True)
        assert (out / "samples.jsonl").read_bytes() == before
        assert len(read_json(out / "config.json")["resumed"]) == 2

        # ... unless explicitly allowed: which samples came from which model is in config.json
        assert _run_openai(out, data_dir, server, "model-b", 4, force_config=True,
                           allow_mixed_models=True).exit_code == 0
    config = read_json(out / "config.json")
    mixed = config["resumed"][-1]
    assert config["model"]["spec"] == "model-a" and config["mixed_settings"] == ["model", "protocol"]
    assert mixed["forced"]["changed"]["model"] == {"was": ["model-a", None], "now": ["model-b", None]}
    assert mixed["forced"]["settings"]["model"]["spec"] == "model-b"
    assert mixed["first_line"] == 9 and mixed["n_generated"] == 2
    samples = read_jsonl(out / "samples.jsonl")
    assert len(samples) == 10 and [r["sample_idx"] for r in samples[8:]] == [3, 3]
    assert server.completion_requests()[-1].body["model"] == "model-b"


def test_force_config_into_a_run_without_samples_starts_it_afresh(tmp_path, data_dir):
    from helpers.fault_server import FaultServer

    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"kind": "eval", "model": {"spec": "old"}, "protocol": {}}))
    with FaultServer(reply="\\boxed{1}") as server:  # no samples yet: nothing to mix, the new settings are the run's
        assert _run_openai(out, data_dir, server, "model-b", 2, force_config=True).exit_code == 0
    config = read_json(out / "config.json")
    assert config["model"]["spec"] == "model-b" and "resumed" not in config and "mixed_settings" not in config


# ------------------------------------------------- one process, one read of samples.jsonl (issue 11, item 3)
class _SamplesFileAccess:
    """Counts, during one ``dsdr-eval run``, the reads of RUN_DIR/samples.jsonl (opens for reading),
    its parses (decodes of its first line) and its hashes (sha256 fed bytes that start like it)."""

    def __init__(self, monkeypatch, path: Path) -> None:
        import builtins
        import hashlib
        import pathlib

        from dsdr_eval.rundir import jsonl

        self.path, self.reads, self.parses, self.hashes = path, 0, 0, 0
        self.head = path.read_bytes()[:200]  # the file exists: a first run wrote it
        real_open, real_path_open, real_decode, real_sha = builtins.open, pathlib.Path.open, jsonl._decode_line, \
            hashlib.sha256

        def is_read(target, mode) -> bool:
            return str(target) == str(self.path) and not any(c in mode for c in "aw")

        def counting_open(file, mode="r", *args, **kwargs):
            self.reads += is_read(file, mode)
            return real_open(file, mode, *args, **kwargs)

        def counting_path_open(target, mode="r", *args, **kwargs):
            self.reads += is_read(target, mode)
            return real_path_open(target, mode, *args, **kwargs)

        def counting_decode(decoder, line, where):
            self.parses += where == f"{self.path}:1"
            return real_decode(decoder, line, where)

        access = self

        class CountingSha:
            """A sha256 that counts itself as a hash of the file when the first bytes it is given (at
            once, or line by line through update) are the file's first bytes."""

            def __init__(self, data=b"", *args, **kwargs):
                self.inner, self.fresh = real_sha(*args, **kwargs), True
                self.update(data)

            def update(self, data) -> None:
                head = bytes(data[:200])
                if self.fresh and head:
                    access.hashes += head == access.head[:len(head)]
                    self.fresh = False
                self.inner.update(data)

            def __getattr__(self, name):
                return getattr(self.inner, name)

        counting_sha = CountingSha

        monkeypatch.setattr(builtins, "open", counting_open)
        monkeypatch.setattr(pathlib.Path, "open", counting_path_open)
        monkeypatch.setattr(jsonl, "_decode_line", counting_decode)
        monkeypatch.setattr(hashlib, "sha256", counting_sha)

    def counts(self) -> dict[str, int]:
        counts = {"reads": self.reads, "parses": self.parses, "hashes": self.hashes}
        self.reads = self.parses = self.hashes = 0
        return counts


def test_one_run_parses_and_hashes_samples_jsonl_once(tmp_path, data_dir, monkeypatch):
    """``dsdr-eval run`` used to parse samples.jsonl 3 times and hash it after reading it once more
    (resume check, generation's resume check, scoring); now the resume reader's records and hash go
    to generation and scoring in memory: at most one read, one parse, one hash per run."""
    from helpers.fault_server import FaultServer

    from dsdr_eval.rundir.jsonl import read_json

    out = tmp_path / "run"
    with FaultServer(reply="The answer is \\boxed{42}.") as server:
        assert _run_openai(out, data_dir, server, "model-a", 2).exit_code == 0  # a fresh run: nothing to read
        sha = __import__("hashlib").sha256((out / "samples.jsonl").read_bytes()).hexdigest()
        assert read_json(out / "metrics.json")["provenance"]["samples_sha256"] == sha  # the in-memory hash is the file's
        access = _SamplesFileAccess(monkeypatch, out / "samples.jsonl")
        assert _run_openai(out, data_dir, server, "model-a", 3, force_config=True).exit_code == 0  # resume + generate
        resumed = access.counts()
        assert _run_openai(out, data_dir, server, "model-a", 3, force_config=True).exit_code == 0  # all done: re-score
        rescored = access.counts()
    print("samples.jsonl in one run (resume + generate):", resumed, "| (nothing to generate):", rescored)
    assert resumed["parses"] == rescored["parses"] == 1
    assert resumed["hashes"] == rescored["hashes"] == 1
    assert resumed["reads"] <= 2 and rescored["reads"] <= 2  # the tail check (last line only) + the read
    metrics = read_json(out / "metrics.json")
    assert metrics["provenance"]["n_samples"] == 2 * (1 + 3)
    assert metrics["provenance"]["samples_sha256"] == __import__("hashlib").sha256(
        (out / "samples.jsonl").read_bytes()).hexdigest()


@pytest.mark.slow  # `run` preloads MiniLM in a thread beside the stub encoder (caught by DSDR_CHECK_FAST=1)
def test_one_run_hands_the_graded_records_to_diversity(tmp_path, data_dir, monkeypatch):
    """Inside one ``dsdr-eval run`` the diversity stage takes the records scoring just wrote; it used
    to read graded.jsonl back (and the run then re-read metrics.json for the summary)."""
    from helpers.fault_server import FaultServer
    from helpers.encoders import BagOfWordsEncoder

    import dsdr_eval.diversity_metrics.run as diversity_run
    import dsdr_eval.rundir.problems as problem_reader
    from dsdr_eval.run.evaluation import run_evaluation
    from dsdr_eval.options.commands import RunOptions
    from dsdr_eval.rundir.jsonl import read_json

    def no_read_back(*args, **kwargs):
        raise AssertionError("graded.jsonl was read back within the run")

    # the two ways the diversity stage reads graded.jsonl: its index pass and its per-problem pass
    monkeypatch.setattr(problem_reader, "iter_records", no_read_back)
    monkeypatch.setattr(problem_reader, "iter_jsonl_numbered", no_read_back)
    monkeypatch.setattr(diversity_run, "_resolve_encoder", lambda encoder, **kwargs: BagOfWordsEncoder())
    out = tmp_path / "run"
    with FaultServer(reply="The answer is \\boxed{42}.") as server:
        result = run_evaluation(RunOptions(model="model-a", backend="openai", benchmarks=["math500"], limit=2,
                                           protocol="quick", n=3, max_tokens=16, data_dir=str(data_dir), out=str(out),
                                           no_progress=True, grading_workers=1, base_url=[server.base_url]),
                                command=["test_run_resume"])
    assert result.exit_code == 0
    written = read_json(out / "metrics.json")["benchmarks"]["math500"]
    assert written["diversity"] and "pass@k" in written  # both stages' sections landed
    assert result.metrics["benchmarks"]["math500"] == written  # the summary is what the file holds
