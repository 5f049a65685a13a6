"""Every Hydra override the shipped shell scripts pass to verl (gpu_smoke.sh's run, each command
paper_runs.sh prints) composes against the installed verl 0.9.1's own config schema, builds verl's
actor config dataclass, and passes the plugin's objective checks (no dual clip, the spec's reward):
a typo or a key verl renamed fails here on a CPU, not on the first GPU."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import verl
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from verl.utils.config import omega_conf_to_dataclass

from dsdr_train.integrations.verl.recipe import ALGOS, MODELS
from dsdr_train.integrations.verl.trainer import check_verl_config, settings_from_verl_config

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "dsdr_train" / "integrations" / "verl"
CONFIG_DIR = str(Path(verl.__file__).parent / "trainer" / "config")


@pytest.fixture(scope="module")
def composer():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        yield lambda overrides: compose(config_name="ppo_trainer", overrides=overrides)
    GlobalHydra.instance().clear()


def smoke_overrides() -> list[str]:
    """The overrides of gpu_smoke.sh's `-m verl.trainer.main_ppo` command, shell variables filled in."""
    text = (SCRIPTS / "gpu_smoke.sh").read_text()
    start = text.index("-m verl.trainer.main_ppo")
    command = text[start:text.index("| tee", start)].replace("\\\n", " ")
    command = command.replace("$SMOKE", "/smoke")
    return [a for a in shlex.split(command)[2:] if a != "2>&1"]  # drop "-m verl.trainer.main_ppo", redirection


def _check(composer, overrides: list[str]):
    cfg = composer(overrides)
    settings = settings_from_verl_config(cfg)
    check_verl_config(cfg, settings)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)  # verl's own dataclass validation
    assert actor.clip_ratio_c == float("inf")
    return cfg, settings


def test_gpu_smoke_overrides_fit_verl_schema(composer):
    overrides = smoke_overrides()
    assert any(o.startswith("algorithm.adv_estimator=") for o in overrides) and len(overrides) > 20
    cfg, settings = _check(composer, overrides)
    assert cfg.trainer.v1.trainer_mode == "dsdr_sync" and settings.objective.algo == "dsdr"
    # the encoder goes where the trainer process can see a GPU, else the CPU (the TaskRunner has none)
    assert settings.encoder_device == "auto"
    assert cfg.actor_rollout_ref.rollout.name == "vllm" and cfg.trainer.n_gpus_per_node == 1


def test_gpu_smoke_model_has_head_dim_64():
    text = (SCRIPTS / "gpu_smoke.sh").read_text()
    call = re.search(r"LlamaConfig\((.*?)\)\n", text, re.S).group(1)
    kwargs = dict(re.findall(r"(\w+)=(\d+)", call))
    assert int(kwargs["hidden_size"]) // int(kwargs["num_attention_heads"]) >= 64


def test_paper_runs_commands_fit_verl_schema(composer, tmp_path):
    env = dict(os.environ, TRAIN_FILES="dapo.parquet", PRINT="1", PYTHON=sys.executable,
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(["bash", str(SCRIPTS / "paper_runs.sh")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    commands = [shlex.split(line) for line in proc.stdout.splitlines() if "verl.trainer.main_ppo" in line]
    assert len(commands) == len(MODELS) * len(ALGOS)
    for argv in commands:
        overrides = argv[argv.index("verl.trainer.main_ppo") + 1:]
        cfg, settings = _check(composer, overrides)
        assert cfg.trainer.v1.trainer_mode == "dsdr_sync"
