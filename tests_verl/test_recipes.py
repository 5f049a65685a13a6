"""Each paper recipe composes against the installed verl 0.9.1's own Hydra config (every key exists
or is added with +), and its objective settings are dsdr's ALGO_DEFAULTS for that algorithm."""

from __future__ import annotations

from pathlib import Path

import pytest
import verl
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from dsdr_train.integrations.verl import recipe
from dsdr_train.integrations.verl.settings import ESTIMATOR_ALGOS
from dsdr_train.integrations.verl.trainer import settings_from_verl_config
from dsdr_train.objective import ALGO_DEFAULTS

CONFIG_DIR = str(Path(verl.__file__).parent / "trainer" / "config")


@pytest.fixture(scope="module")
def composer():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        yield lambda overrides: compose(config_name="ppo_trainer", overrides=overrides)
    GlobalHydra.instance().clear()


# every algorithm on one model, every model on one algorithm (the models differ only in path and length)
CASES = [("qwen3-4b", algo) for algo in sorted(recipe.ALGOS)] + [
    (model, "dsdr") for model in sorted(recipe.MODELS) if model != "qwen3-4b"]


@pytest.mark.parametrize(("model", "algo"), CASES)
def test_recipe_composes_with_the_paper_settings(composer, model, algo):
    cfg = composer(recipe.overrides(model, algo, train_files="train.parquet"))
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert (cfg.data.train_batch_size, rollout.n, actor.ppo_mini_batch_size) == (256, 8, 16)
    assert actor.optim.lr == 1e-6 and rollout.temperature == 1.0
    assert cfg.data.max_response_length == recipe.MODELS[model][1]
    assert rollout.response_length == cfg.data.max_response_length  # verl's interpolation resolves
    defaults = ALGO_DEFAULTS[algo]
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (defaults["clip_ratio_low"], defaults["clip_ratio_high"])
    assert actor.loss_agg_mode == defaults["loss_agg_mode"]
    assert not actor.use_kl_loss and not cfg.algorithm.use_kl_in_reward
    estimator = cfg.algorithm.adv_estimator
    assert ESTIMATOR_ALGOS[estimator] == algo or (algo == "dapo" and estimator == "grpo_pop_std")
    if defaults["reward"] in ("dsdr", "darling"):
        assert cfg.trainer.v1.trainer_mode == "dsdr_sync"
        objective = settings_from_verl_config(cfg).objective
        for key in ("lambda_d", "tau", "lambda_l", "local_term", "uniform_coupling", "std_mode"):
            assert getattr(objective, key) == defaults[key], key
    else:
        assert cfg.trainer.v1.trainer_mode == "sync"
    if algo == "dapo":
        assert cfg.algorithm.filter_groups.enable and cfg.algorithm.filter_groups.metric == "acc"
        kwargs = OmegaConf.to_container(cfg.reward.reward_kwargs, resolve=True)
        assert kwargs["max_resp_len"] == cfg.data.max_response_length
        assert kwargs["overlong_buffer_cfg"]["len"] == cfg.data.max_response_length // 4


def test_a_misspelt_key_does_not_compose(composer):
    with pytest.raises(Exception, match="clip_ratio_hgh"):
        composer([*recipe.overrides("qwen3-4b", "dsdr", train_files="t"), "actor_rollout_ref.actor.clip_ratio_hgh=0.3"])


def test_print_gives_the_verl_command(capsys):
    assert recipe.main(["qwen3-4b", "dsdr", "--train-files", "dapo.parquet", "--print", "--", "trainer.total_epochs=1"]) == 0
    out = capsys.readouterr().out
    assert "-m verl.trainer.main_ppo" in out and "algorithm.adv_estimator=dsdr" in out
    assert out.strip().endswith("trainer.total_epochs=1")
