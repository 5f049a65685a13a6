"""`--top-k` / `--min-p` (and the pass1 twins) on `dsdr-eval run` (issue 33): Qwen3's recommended thinking
sampling is T 0.6, top-p 0.95, top-k 20. The flags override the protocol's phases, reach the engine
(an OpenAI-compatible server's request body; transformers' sampling, checked against the model's own
logits), and are recorded in config.json, metrics.json's provenance and the report's protocol."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest

from dsdr_eval.backends.base import GenerationRequest
from dsdr_eval.rundir.jsonl import read_json


def _cli(argv: list[str]) -> tuple[int, str]:
    from dsdr_eval.cli import main

    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, err.getvalue()


def test_flags_reach_the_servers_request_bodies_and_every_record(tmp_path, data_dir):
    """Mutants: 'apply_overrides ignores top_k' (sampling bodies keep the neutral -1 and config.json has no
    top_k), 'the pass1 twins write the sampling phase' (pass1 bodies carry 20), 'plan.py drops min_p'."""
    from helpers.fault_server import FaultServer

    from dsdr_eval.reporting.runs import protocol_differences
    from dsdr_eval.rundir.results import load_run

    out = tmp_path / "run"
    with FaultServer(reply="so \\boxed{1}") as server:
        code, err = _cli(["run", "--model", server.model, "--backend", "openai", "--base-url", server.base_url,
                          "--benchmarks", "math500", "--data-dir", str(data_dir), "--limit", "2",
                          "--protocol", "quick", "--n", "2", "--max-tokens", "16", "--top-k", "20",
                          "--min-p", "0.05", "--pass1-top-k", "-1", "--pass1-min-p", "0.1",
                          "--out", str(out), "--no-diversity", "--no-progress"])
        bodies = [r.body for r in server.completion_requests()]
    assert code == 0, err
    by_temperature = {}
    for body in bodies:
        by_temperature.setdefault(body["temperature"], []).append((body["top_k"], body["min_p"]))
    # quick: pass1 at T 0.1 (top-k -1 = the server's off, min-p 0.1), sampling at T 0.7 (top-k 20, min-p 0.05)
    assert set(by_temperature[0.1]) == {(-1, 0.1)} and len(by_temperature[0.1]) == 2
    assert set(by_temperature[0.7]) == {(20, 0.05)} and len(by_temperature[0.7]) >= 2

    config = read_json(out / "config.json")
    assert config["protocol"]["name"] == "quick+custom"
    pass1, sampling = config["protocol"]["phases"]
    assert (pass1.get("top_k"), pass1["min_p"]) == (None, 0.1)  # off: not written (identity of older runs)
    assert (sampling["top_k"], sampling["min_p"]) == (20, 0.05)
    metrics = read_json(out / "metrics.json")
    assert metrics["provenance"]["run_config"]["protocol"] == config["protocol"]

    run = load_run(out)
    text = "; ".join(p.describe() for p in run.protocol.phases)
    assert "sampling: n=2, T=0.7, top-p=0.9, top-k=20, min-p=0.05" in text and "pass1: n=1, T=0.1, top-p=0.9, min-p=0.1" in text
    assert {p.phase: (p.top_k, p.min_p) for p in run.protocol.phases} == \
        {"pass1": (0, 0.1), "sampling": (20, 0.05)}

    # a run without the cuts beside it: the report names the difference (needs --allow-mixed)
    plain = tmp_path / "plain"
    with FaultServer(reply="so \\boxed{1}") as server:
        code, err = _cli(["run", "--model", server.model, "--backend", "openai", "--base-url", server.base_url,
                          "--benchmarks", "math500", "--data-dir", str(data_dir), "--limit", "2",
                          "--protocol", "quick", "--n", "2", "--max-tokens", "16", "--pass1-min-p", "0.1",
                          "--out", str(plain), "--no-diversity", "--no-progress"])
    assert code == 0, err
    differences = protocol_differences([run, load_run(plain)])
    assert any(d.startswith("sampling.top_k: ") and "=20 vs " in d for d in differences)
    assert any(d.startswith("sampling.min_p: ") for d in differences)
    assert not any(d.startswith("pass1.") for d in differences)


@pytest.mark.parametrize("argv, message", [
    (["--top-k", "-2"], "--top-k"), (["--top-k", "2.5"], "--top-k"), (["--min-p", "1"], "--min-p"),
    (["--min-p", "-0.01"], "--min-p"), (["--pass1-min-p", "nan"], "--pass1-min-p"),
    (["--pass1-top-k", "x"], "--pass1-top-k")])
def test_bad_values_are_one_line_exit_2(tmp_path, argv, message):
    code, err = _cli(["run", "--model", "m", "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1",
                      "--benchmarks", "math500", "--out", str(tmp_path / "r"), *argv])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_api_keywords_take_the_same_checks():
    from dsdr_eval.errors import DsdrError
    from dsdr_eval.options.commands import RUN
    from dsdr_eval.options.schema import checked

    assert checked(RUN, "evaluate", {"top_k": -1, "min_p": 0, "pass1_top_k": 5}) == \
        {"top_k": 0, "min_p": 0.0, "pass1_top_k": 5}
    for key, value in (("top_k", -3), ("min_p", 1.0), ("pass1_min_p", float("inf"))):
        with pytest.raises(DsdrError, match=f"evaluate\\({key}="):
            checked(RUN, "evaluate", {key: value})


# ----------------------------------------------------------------------------- transformers honours the cuts

K, MIN_P = 3, 0.3  # the reference cuts every sampled step is checked against


@pytest.fixture(scope="module")
def hf_backend(tiny_model_dir):
    from dsdr_eval.backends.hf import HFBackend

    return HFBackend(str(tiny_model_dir), batch_size=16)


def _sample_and_check(backend, *, top_k: int, min_p: float, temperature: float):
    """Sample with the hf backend's own spec, then replay every sampled sequence through the model and return
    (steps checked, steps whose token lies outside the top-K set, steps whose probability is below MIN_P x
    the top probability at ``temperature``): the reference is the model's logits, not the sampler."""
    import torch

    from dsdr_eval.backends.hf import hf_sample

    prompt = backend.render(_template(), "What is 2+3?")[0]
    request = GenerationRequest(prompt, "q", 16, temperature, 1.0, 12, 3, top_k=top_k, min_p=min_p)
    ids = backend.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    [sequences], _ = hf_sample(backend.model, [ids], request.sampling_spec(tuple(backend.eos_ids)), n=16,
                               pad_id=int(backend.tokenizer.pad_token_id), seed=11)
    steps = outside_k = below_min_p = 0
    with torch.inference_mode():
        for seq in sequences:
            tokens = list(seq.token_ids)
            logits = backend.model(torch.tensor([ids + tokens])).logits[0, len(ids) - 1:len(ids) - 1 + len(tokens)]
            for step, token in enumerate(tokens):
                row = logits[step].double()
                steps += 1
                outside_k += bool(row[token] < torch.topk(row, K).values[-1])
                probs = torch.softmax(row / temperature, -1)
                below_min_p += bool(probs[token] < MIN_P * probs.max() * (1 - 1e-6))
    return steps, outside_k, below_min_p


def _template():
    from dsdr_eval.prompts import load_template

    return load_template("plain")


def test_hf_sampling_keeps_every_token_inside_top_k_and_min_p(hf_backend):
    """Without a cut, a random model at a high temperature samples outside its top 3 and below 0.3 x its top
    probability often; with ``top_k`` 3 no token leaves the top 3, with ``min_p`` 0.3 none falls below.
    Mutant 'hf_generation_config drops spec.filters()' (or 'filters() returns {}'): the cut counts are > 0."""
    steps, outside, below = _sample_and_check(hf_backend, top_k=0, min_p=0.0, temperature=TEMPERATURE)
    assert steps > 100 and outside > steps // 2 and below > steps // 4  # the control: the cuts would bite ...
    steps, outside, _ = _sample_and_check(hf_backend, top_k=K, min_p=0.0, temperature=TEMPERATURE)
    assert steps > 100 and outside == 0  # ... and with them no step leaves
    steps, _, below = _sample_and_check(hf_backend, top_k=0, min_p=MIN_P, temperature=TEMPERATURE)
    assert steps > 100 and below == 0


TEMPERATURE = 1.0


def test_a_sweep_keeps_one_value_of_each_cut(tmp_path):
    """Mutant 'top_k / min_p / pass1 twins left out of sweepdir.IDENTITY_OPTIONS': the rerun is accepted."""
    from dsdr_eval.errors import DsdrError
    from dsdr_eval.rundir.sweepdir import check_settings

    record = {"eval": {"top_k": 20, "min_p": 0.0, "pass1_top_k": 0, "pass1_min_p": 0.05}}
    check_settings(record, dict(record["eval"]), tmp_path)
    for key, value in (("top_k", 0), ("min_p", 0.1), ("pass1_top_k", 5), ("pass1_min_p", 0.0)):
        with pytest.raises(DsdrError, match=f"{key}: .* -> {value}"):
            check_settings(record, {**record["eval"], key: value}, tmp_path)


def test_absent_cuts_are_off_for_a_run_and_unknown_for_an_import(tmp_path):
    from dsdr_eval.protocols import Protocol

    phases = {"phases": [{"phase": "sampling", "n": 4, "temperature": 0.6, "top_p": 0.95}], "max_tokens": 64}
    [run] = Protocol.from_record(phases).phases
    [imported] = Protocol.from_record(phases, cuts_known=False).phases
    assert (run.top_k, run.min_p) == (0, 0.0) and run.describe() == "sampling: n=4, T=0.6, top-p=0.95"
    assert (imported.top_k, imported.min_p) == (None, None) and imported.describe().endswith("top-k=?, min-p=?")


def test_an_imported_run_reads_its_absent_cuts_as_unknown(tmp_path):
    # an lm-eval file does not say whether top-k / min-p were on: load_run must not claim "off"
    from pathlib import Path

    from dsdr_eval.cli import main
    from dsdr_eval.rundir.results import load_run

    source = (Path(__file__).resolve().parent / "real_files" / "lm-eval-gsm8k"
              / "samples_gsm8k_2026-04-03T02-02-47.394179.jsonl")
    assert main(["import", str(source), "--out", str(tmp_path / "run")]) == 0
    assert main(["score", str(tmp_path / "run")]) == 0
    phases = load_run(tmp_path / "run").protocol.phases
    assert phases and all((p.top_k, p.min_p) == (None, None) for p in phases)
