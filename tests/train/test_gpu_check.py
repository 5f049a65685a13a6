"""benchmarks/gpu_check.py: the prepared GPU check (issue 26). The fast tests cover its pieces (the
shipped architectures, exact-length prompts, the EOS hook, time boxes, ratios, bad arguments); the
slow one runs the whole script with --tiny on CPU so it cannot rot before a GPU is lent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false"}


def _config(name: str) -> dict:
    return json.loads((gpu_check.CONFIGS / name / "config.json").read_text())


def test_shipped_configs_are_the_papers_architectures():
    """The vendored config.json files are the real architectures (figures from the model cards:
    1.54B and 4.02B parameters with tied embeddings)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    expected = {"qwen2.5-math-1.5b": (1536, 28, 12, 2, 8960, 1.54e9), "qwen3-4b-base": (2560, 36, 32, 8, 9728, 4.02e9)}
    for name, (hidden, layers, heads, kv, inter, params) in expected.items():
        c = _config(name)
        assert (c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"],
                c["intermediate_size"], c["vocab_size"], c["tie_word_embeddings"]) == (hidden, layers, heads, kv, inter,
                                                                                      151936, True)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(gpu_check.CONFIGS / name))
        assert abs(sum(p.numel() for p in model.parameters()) - params) / params < 0.01


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    work = tmp_path_factory.mktemp("gpu_check")
    gpu_check.build_model("qwen2.5-math-1.5b", work, tiny=True, device="cpu")
    return gpu_check.model_dir_of("qwen2.5-math-1.5b", work)


@pytest.mark.slow  # builds and runs gpu_check's tiny Qwen2.5 (3-36 s)
def test_prompts_have_exactly_the_configured_length(tiny_dir, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    assert tok.eos_token_id == 151643 and len(tok) == 151665  # the Qwen BPE with its added tokens
    for prompt_len in (64, 97):
        geo = gpu_check.Geometry(prompt_len=prompt_len, response_len=4, prompts=3, group=2, micro_batch=2)
        ids = gpu_check.write_problems(tmp_path / "p.jsonl", tiny_dir, geo)
        assert [len(p) for p in ids] == [prompt_len] * 3 and len({tuple(p) for p in ids}) == 3
        assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 3
    short = gpu_check.Geometry(prompt_len=5, response_len=4, prompts=1, group=2, micro_batch=2)
    with pytest.raises(ValueError, match="--prompt-len 5: cannot render"):  # shorter than the chat template
        gpu_check.write_problems(tmp_path / "q.jsonl", tiny_dir, short)


@pytest.mark.slow  # builds and runs gpu_check's tiny Qwen2.5 (3-36 s)
def test_eos_hook_makes_the_configured_length_certain(tiny_dir):
    """With EOS made the argmax, greedy decoding stops at once; under the hook it never does."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    eos = model.config.eos_token_id
    model.get_output_embeddings().register_forward_hook(lambda m, i, out: out.index_fill(-1, torch.tensor([eos]), 1e4))
    ids = torch.tensor([[9707, 11, 1879]])
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=eos, eos_token_id=eos)
    assert model.generate(ids, **kwargs).shape[1] < ids.shape[1] + 6
    handle = gpu_check.suppress_eos(model, [eos])
    out = model.generate(ids, **kwargs)
    assert out.shape[1] == ids.shape[1] + 6 and eos not in out[0, 3:].tolist()
    logits = model(ids).logits
    assert torch.isinf(logits[..., eos]).all() and torch.isfinite(logits[..., :eos]).all()
    handle.remove()
    assert (model(ids).logits[..., eos] == 1e4).all()


def _report(tmp_path):
    return gpu_check.Report(tmp_path, {"_t0": time.monotonic(), "command": "x", "tiny": True, "machine": {},
                                       "versions": {}, "geometry": {}, "budget_s": 9})


def test_a_phase_past_its_box_stops_and_the_next_still_runs(tmp_path):
    report = _report(tmp_path)
    deadline = time.monotonic() + 60

    def busy():  # pure Python, as the decode loop between kernels: the alarm lands within it
        t0 = time.monotonic()
        while time.monotonic() - t0 < 6:
            pass
        return {"ok": True}

    t0 = time.monotonic()
    assert not gpu_check.run_phase(report, deadline, "m", "slow", busy, cap_s=0.5)
    assert time.monotonic() - t0 < 4
    assert gpu_check.run_phase(report, deadline, "m", "next", lambda: {"ok": True, "generate_s": 1.0}, cap_s=5)
    rows = json.loads((tmp_path / "gpu_check.json").read_text())["phases"]
    assert [(r["phase"], r["status"]) for r in rows] == [("slow", "timed_out"), ("next", "ok")]
    assert "| m | slow | timed_out |" in (tmp_path / "gpu_check.md").read_text()


def test_skips_failures_and_budget_are_recorded(tmp_path):
    report = _report(tmp_path)
    deadline = time.monotonic() + 30
    ran = []

    def fn():
        ran.append(1)
        return {"ok": True}

    assert not gpu_check.run_phase(report, deadline, "m", "predicted", fn, cap_s=60, predicted_s=100)
    assert not gpu_check.run_phase(report, deadline, "m", "dependent", fn, cap_s=60, needs=["build"])
    assert not gpu_check.run_phase(report, time.monotonic() + 1, "m", "late", fn, cap_s=60)
    assert not gpu_check.run_phase(report, deadline, "m", "bad", lambda: {"ok": False, "grad_cosine": 0.5}, cap_s=9)

    def boom():
        raise ValueError("no such kernel")

    assert not gpu_check.run_phase(report, deadline, "m", "boom", boom, cap_s=9)
    assert ran == []
    rows = {r["phase"]: r for r in json.loads((tmp_path / "gpu_check.json").read_text())["phases"]}
    assert rows["predicted"]["status"] == "skipped" and "predicted 100 s" in rows["predicted"]["reason"]
    assert rows["dependent"]["reason"] == "needs build" and "budget spent" in rows["late"]["reason"]
    assert rows["bad"]["status"] == "failed" and rows["bad"]["detail"]["grad_cosine"] == 0.5
    assert rows["boom"]["status"] == "failed" and rows["boom"]["error"].startswith("ValueError: no such kernel")
    assert "test_gpu_check.py:" in rows["boom"]["error"]


def test_ratios_are_engine_over_floor(tmp_path):
    report = _report(tmp_path)
    for phase, detail in (("floor_generate", {"generate_s": 10.0, "generate_peak_gib": 20.0}),
                          ("floor_fwd_bwd", {"fwd_bwd_s": 4.0, "fwd_bwd_peak_gib": 40.0}),
                          ("compact_step", {"generate_s": 12.0, "generate_peak_gib": 25.0, "update_s": 6.0,
                                            "step_peak_gib": 50.0}),
                          ("trl_step", {"generate_s": 30.0, "update_s": 8.0, "step_peak_gib": 80.0})):
        report.add({"model": "m", "phase": phase, "status": "ok", "seconds": 1.0, "detail": detail})
    assert report.ratios()["m"] == {
        "compact_generate_time_over_floor": 1.2, "compact_generate_peak_over_floor": 1.25,
        "compact_update_time_over_floor": 1.5, "compact_step_peak_over_floor_fwd_bwd_peak": 1.25,
        "trl_generate_time_over_floor": 3.0, "trl_update_time_over_floor": 2.0,
        "trl_step_peak_over_floor_fwd_bwd_peak": 2.0}
    assert "| m | trl_generate_time_over_floor | 3 |" in (tmp_path / "gpu_check.md").read_text()


@pytest.mark.parametrize("args, field", [(["--models", "qwen9"], "--models"), (["--response-len", "0"], "--response-len"),
                                         (["--phases", "fast"], "--phases"), (["--budget-s", "-1"], "--budget-s")])
def test_bad_arguments_exit_2_with_one_line(args, field, tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--out", str(tmp_path), *args],
                          capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert field in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "gpu_check.json").exists()


@pytest.mark.slow
def test_tiny_run_on_cpu_passes_every_phase(tmp_path):
    """The whole script, --tiny, one architecture (Qwen3: the other builds in the fast tests)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--tiny", "--models",
                           "qwen3-4b-base", "--out", str(tmp_path), "--budget-s", "400"],
                          capture_output=True, text=True, env=ENV, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((tmp_path / "gpu_check.json").read_text())
    status = {r["phase"]: r["status"] for r in record["phases"]}
    assert status == {"build": "ok", "hf_backend": "ok", "bf16_vs_fp32": "ok", "trl_small": "skipped",
                      "floor_generate": "ok", "compact_step": "ok", "floor_fwd_bwd": "ok", "trl_step": "ok"}
    detail = {r["phase"]: r.get("detail", {}) for r in record["phases"]}
    assert detail["hf_backend"]["greedy_repeat_identical"] and detail["hf_backend"]["sampling_ratio_dev_max_float32"] < 1e-3
    assert detail["bf16_vs_fp32"]["grad_cosine"] >= 0.99
    assert all(detail[p]["full_length"] for p in ("floor_generate", "compact_step", "trl_step"))
    assert detail["compact_step"]["tokens"] == 2 * 2 * 8 and detail["compact_step"]["prompt_lengths"] == [64]
    assert set(record["ratios"]["qwen3-4b-base"]) == {"compact_generate_time_over_floor",
                                                      "compact_update_time_over_floor", "trl_generate_time_over_floor",
                                                      "trl_update_time_over_floor"}  # no memory ratios on CPU
    assert record["versions"]["trl"] and record["command"].endswith("--budget-s 400")
    assert "| qwen3-4b-base | compact_step | ok |" in (tmp_path / "gpu_check.md").read_text()


@pytest.mark.slow  # builds and runs gpu_check's tiny Qwen2.5 (3-36 s)
def test_a_boxed_generate_stops_and_keeps_its_decode_rate(tiny_dir):
    """The box interrupts HF ``generate`` itself (between decode steps); the step counter keeps the
    rate reached, which the floor phase reports when boxed out."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    steps = gpu_check._StepCounter.make()

    def slow(input_ids, scores, **_):  # >= 50 ms a step: unboxed, 200 steps outlast the box on any machine
        time.sleep(0.05)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    t0 = time.monotonic()
    with pytest.raises(gpu_check.PhaseTimeout):
        with gpu_check.time_box(5.0), torch.inference_mode():
            model.generate(torch.tensor([[9707, 11]] * 2), do_sample=True, max_new_tokens=200, min_new_tokens=200,
                           pad_token_id=0, stopping_criteria=[steps, slow])
    assert time.monotonic() - t0 < 30
    partial = steps.partial(2)
    assert 2 <= partial["decode_steps_done"] < 200
    # both are rounded (tokens/s to 0.1, steps/s to 0.01): at a loaded machine's ~1 step/s that alone is 2 %
    assert partial["tokens_per_s"] == pytest.approx(2 * partial["decode_steps_per_s"], rel=1e-2, abs=0.05 + 2 * 0.005)
