"""The DSDR_CHECK_FAST guard (tests/helpers/fast_guard.py) catches a real model loaded in a child process
started by a fast test, and lets the tiny random models of the fast tests through."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import fast_guard
LOAD_TWO_MODELS = """
import sys
from transformers import LlamaConfig, LlamaForCausalLM
for name, hidden, layers in (("tiny", 64, 2), ("big", 768, 3)):
    config = LlamaConfig(vocab_size=1000, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=4)
    LlamaForCausalLM(config).save_pretrained(f"{sys.argv[1]}/{name}")
    LlamaForCausalLM.from_pretrained(f"{sys.argv[1]}/{name}")
"""


@pytest.mark.slow  # it builds and loads a 30M-parameter random Llama in a child process
def test_a_child_that_loads_a_real_sized_model_is_reported(tmp_path: Path) -> None:
    report = tmp_path / "caught.txt"
    report.touch()
    env = {**os.environ, "DSDR_CHECK_FAST": "1", **fast_guard.child_env(report)}
    subprocess.run([sys.executable, "-c", LOAD_TWO_MODELS, str(tmp_path)], env=env, check=True, timeout=600)
    caught = report.read_text().splitlines()
    assert len(caught) == 1, caught  # the tiny one (~0.2M) passes, the 30M one is caught
    assert "LlamaForCausalLM.from_pretrained(" in caught[0] and "/big'" in caught[0] and "30M parameters" in caught[0]


def test_the_guard_stays_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DSDR_CHECK_FAST", raising=False)
    assert not fast_guard.enabled()
    monkeypatch.setenv("DSDR_CHECK_FAST", "1")
    assert fast_guard.enabled()
