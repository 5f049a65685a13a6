"""Sampling for thinking models (issue 33): top-k and min-p as protocol / phase fields, spelled into
every engine's object, and the built-in `thinking` protocol."""

from __future__ import annotations

import pytest

from dsdr_eval.backends.sampling import SamplingSpec, hf_generation_config, openai_sampling_body, \
    server_sampling_fields, vllm_sampling_params
from dsdr_eval.errors import DsdrError
from dsdr_eval.protocols import PROTOCOLS, Phase, load_protocol_file


def test_builtin_thinking_protocol_is_qwen3s_recommended_sampling():
    protocol = PROTOCOLS["thinking"]
    [phase] = protocol.phases
    assert (phase.phase, phase.temperature, phase.top_p, phase.top_k, phase.min_p) == ("sampling", 0.6, 0.95, 20, 0.0)
    assert protocol.max_tokens == 32768
    assert protocol.to_config()["phases"] == [{"phase": "sampling", "n": 16, "temperature": 0.6, "top_p": 0.95,
                                               "top_k": 20}]
    # a protocol without the cuts keeps the config.json shape of runs made before them (resume identity)
    assert PROTOCOLS["dsdr-paper"].to_config()["phases"][0] == {"phase": "pass1", "n": 1, "temperature": 0.1,
                                                               "top_p": 0.9}


def test_protocol_file_top_k_min_p(tmp_path):
    good = tmp_path / "p.yaml"
    good.write_text("name: t\nmax_tokens: 64\nphases: [{phase: sampling, n: 2, temperature: 0.6, top_p: 0.95, "
                    "top_k: 20, min_p: 0.05}]\n", encoding="utf-8")
    [phase] = load_protocol_file(good).phases
    assert (phase.top_k, phase.min_p) == (20, 0.05)
    for field, value, message in (("top_k", "-1", "top_k: must be >= 0"), ("top_k", "2.5", "top_k: must be an integer"),
                                  ("min_p", "1.5", "min_p: must be in [0, 1)")):
        bad = tmp_path / f"bad_{field}.yaml"
        bad.write_text(f"name: t\nmax_tokens: 64\nphases: [{{phase: sampling, n: 2, temperature: 0.6, top_p: 0.95, "
                       f"{field}: {value}}}]\n", encoding="utf-8")
        with pytest.raises(DsdrError, match=f"phases\\[0\\].{message}".replace("[0, 1)", r"\[0, 1\)")):
            load_protocol_file(bad)
    with pytest.raises(DsdrError, match="top_k must be an integer >= 0"):
        Phase("sampling", 1, 0.6, 0.95, top_k=-3)


class _Recorder:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


def test_every_engine_object_carries_top_k_and_min_p():
    """Mutant 'filters dropped' (the neutral top_k 0 / min_p 0 kept): every assertion below fails."""
    spec = SamplingSpec(0.6, 0.95, 128, (2,), top_k=20, min_p=0.05)
    config = hf_generation_config(spec, pad_token_id=0)
    assert (config.top_k, config.min_p, config.temperature, config.top_p) == (20, 0.05, 0.6, 0.95)
    params = vllm_sampling_params(_Recorder, spec, n=1, seed=0).kwargs
    assert (params["top_k"], params["min_p"]) == (20, 0.05)
    assert {**openai_sampling_body(spec), **server_sampling_fields(spec)}["top_k"] == 20
    assert server_sampling_fields(spec)["min_p"] == 0.05
    # off: each engine's neutral value; greedy: no cut (the argmax survives any)
    for off in (SamplingSpec(0.6, 0.95, 128, (2,)), SamplingSpec(0.0, 0.95, 128, (2,), top_k=20)):
        # greedy: the sampling-only flags are unset (transformers warns about any set under greedy)
        assert hf_generation_config(off, pad_token_id=0).top_k == (None if off.greedy else 0)
        assert vllm_sampling_params(_Recorder, off, n=1, seed=0).kwargs["top_k"] == 0
        assert server_sampling_fields(off)["top_k"] == -1


def test_openai_requests_carry_the_protocols_top_k(tmp_path, data_dir):
    from helpers.fault_server import FaultServer

    from dsdr_eval.run.evaluation import run_evaluation
    from dsdr_eval.options.commands import RunOptions
    from dsdr_eval.rundir.jsonl import read_json

    protocol = tmp_path / "thinking-small.yaml"
    protocol.write_text("name: thinking-small\nmax_tokens: 64\nphases: [{phase: sampling, n: 2, temperature: 0.6, "
                        "top_p: 0.95, top_k: 20, min_p: 0.05}]\n", encoding="utf-8")
    out = tmp_path / "run"
    with FaultServer(reply="\\boxed{1}") as server:
        run_evaluation(RunOptions(model=server.model, backend="openai", benchmarks=["math500"], limit=1,
                                  protocol=str(protocol), data_dir=str(data_dir), out=str(out), no_diversity=True,
                                  no_progress=True, base_url=[server.base_url]), command=["t"])
        bodies = [r.body for r in server.completion_requests()]
    assert len(bodies) == 2 and all((b["top_k"], b["min_p"]) == (20, 0.05) for b in bodies)
    assert read_json(out / "config.json")["protocol"]["phases"][0]["top_k"] == 20


def test_one_protocol_model_reads_back_what_a_run_is_given():
    """A run's protocol and the one a report reads back from its config.json are the same model and equal;
    a record from before top_k / min_p existed reads them as off, an unknown field is ignored, and the
    tolerant reader keeps an unrecorded value as None where the strict constructor refuses it."""
    from dsdr_eval.protocols import Protocol

    for protocol in PROTOCOLS.values():
        assert Protocol.from_record(protocol.to_config(), extraction=protocol.extraction) == protocol
    old = {"name": "old", "max_tokens": 64, "seed": 3, "future_field": 1,
           "phases": [{"phase": "sampling", "n": 4, "temperature": 0.7, "top_p": 0.9, "future_phase_field": 2}]}
    read = Protocol.from_record(old)
    assert read == Protocol("old", (Phase("sampling", 4, 0.7, 0.9),), 64, 3)
    assert (read.phases[0].top_k, read.phases[0].min_p) == (0, 0.0)
    unknown = Protocol.from_record({"phases": [{"phase": "sampling", "top_p": 0.9}]})
    assert (unknown.name, unknown.max_tokens, unknown.seed, unknown.phases[0].n) == (None, None, None, None)
    assert unknown.phases[0].describe() == "sampling: n=?, T=?, top-p=0.9"
    with pytest.raises(DsdrError, match="n must be >= 1"):
        Phase("sampling", None, 0.7, 0.9)
    with pytest.raises(DsdrError, match="max_tokens must be >= 1"):
        Protocol("p", (Phase("sampling", 1, 0.7, 0.9),), None)


def test_runs_differing_only_in_top_k_or_min_p_are_not_comparable():
    """Mutant 'comparable_key without top_k / min_p' (PHASE_COMPARED = n, temperature, top_p): fails."""
    from dataclasses import replace

    from dsdr_eval.protocols import Protocol

    base = PROTOCOLS["quick"]
    assert Protocol.from_record(base.to_config()).comparable_key() == base.comparable_key()
    for change, shown in (({"top_k": 20}, "top-k=20"), ({"min_p": 0.05}, "min-p=0.05")):
        other = replace(base, phases=tuple(replace(p, **change) if p.phase == "sampling" else p for p in base.phases))
        assert other.comparable_key() != base.comparable_key(), change
        assert shown in other.phase("sampling").describe()
