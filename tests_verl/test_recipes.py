"""Each paper recipe composes against the installed verl 0.9.1's own Hydra config (every key exists
or is added with +), and its objective settings are dsdr's ALGO_DEFAULTS for that algorithm."""

from __future__ import annotations

from pathlib import Path

import pytest
import verl
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from dsdr_train.integrations.verl import recipe
from dsdr_train.integrations.verl.settings import ESTIMATOR_ALGOS
from dsdr_train.integrations.verl.settings import PluginConfigError
from dsdr_train.integrations.verl.trainer import check_verl_config, generation_cap, settings_from_verl_config
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
    assert ESTIMATOR_ALGOS[estimator] == algo
    # every algorithm through the plugin's trainer (the spec's reward) with verl's dual clip off (Eq. 3)
    assert cfg.trainer.v1.trainer_mode == "dsdr_sync" and actor.clip_ratio_c == float("inf")
    assert actor.loss_scale_factor == cfg.data.max_response_length  # Eq. 4d's L_max
    settings = settings_from_verl_config(cfg)
    check_verl_config(cfg, settings)
    objective = settings.objective
    for key in ("lambda_d", "tau", "lambda_l", "local_term", "uniform_coupling", "std_mode", "reward",
                "overlong_shaping", "dynamic_sampling"):
        assert getattr(objective, key) == defaults[key], key
    assert cfg.algorithm.filter_groups.enable == defaults["dynamic_sampling"]
    if algo == "dapo":  # §2: the filter on the verifier's accuracy, capped by the plugin's trainer
        assert cfg.algorithm.filter_groups.metric == "acc" and objective.dapo_exhausted == "error"
        assert generation_cap(settings, cfg.data.train_batch_size) == 10 * 256
    assert cfg.reward.reward_manager.name != "dapo"  # its +-1 score and overlong term are replaced anyway


@pytest.mark.parametrize(("extra", "key"), [
    (["actor_rollout_ref.actor.clip_ratio_c=3.0"], "clip_ratio_c"),  # verl's default dual clip
    (["algorithm.filter_groups.enable=false"], "filter_groups.enable"),  # DAPO without its filter, unasked
    (["algorithm.filter_groups.metric=score"], "filter_groups.metric"),
    (["algorithm.filter_groups.max_num_gen_batches=3"], "max_num_gen_batches"),
    (["+dsdr.dapo_exhausted=train"], "dapo_exhausted"),
    (["actor_rollout_ref.actor.policy_loss.loss_mode=gspo"], "loss_mode"),
    (["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm", "actor_rollout_ref.actor.loss_scale_factor=null"],
     "loss_scale_factor"),
])
def test_settings_that_change_the_objective_are_refused(composer, extra, key):
    overrides = recipe.overrides("qwen3-4b", "dapo", train_files="t")
    overrides = [o for o in overrides if not (o.startswith("+dsdr.dapo_exhausted") and extra[0].startswith("+dsdr"))]
    cfg = composer([*overrides, *extra])
    with pytest.raises(PluginConfigError, match=key.replace(".", r"\.")):
        check_verl_config(cfg, settings_from_verl_config(cfg))


def test_dynamic_sampling_off_is_accepted_when_both_sides_say_so(composer):
    cfg = composer([*recipe.overrides("qwen3-4b", "dapo", train_files="t"), "algorithm.filter_groups.enable=false",
                    "+dsdr.dynamic_sampling=false"])
    settings = settings_from_verl_config(cfg)
    check_verl_config(cfg, settings)
    assert generation_cap(settings, 256) is None


def test_a_misspelt_key_does_not_compose(composer):
    with pytest.raises(Exception, match="clip_ratio_hgh"):
        composer([*recipe.overrides("qwen3-4b", "dsdr", train_files="t"), "actor_rollout_ref.actor.clip_ratio_hgh=0.3"])


def test_print_gives_the_verl_command(capsys):
    assert recipe.main(["qwen3-4b", "dsdr", "--train-files", "dapo.parquet", "--print", "--", "trainer.total_epochs=1"]) == 0
    out = capsys.readouterr().out
    assert "-m verl.trainer.main_ppo" in out and "algorithm.adv_estimator=dsdr" in out
    assert out.strip().endswith("trainer.total_epochs=1")


def test_the_trainer_caps_dapo_generation_at_max_num_gen_batches(monkeypatch):
    """verl 0.9.1's ReplayBuffer refills evicted DAPO groups without a cap (it ignores
    max_num_gen_batches); the plugin's trainer counts the prompts a step asks for and stops the run
    once more than max_num_gen_batches batches would be generated (§2, dapo_exhausted=error)."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from dsdr_train.integrations.verl.settings import plugin_settings
    from dsdr_train.integrations.verl.trainer import DsdrPPOTrainer

    submitted: list[int] = []
    monkeypatch.setattr(PPOTrainerSync, "_add_prompts_to_generate", lambda self, n: submitted.append(n) or n)
    monkeypatch.setattr(PPOTrainerSync, "prepare_step", lambda self: {})
    trainer = DsdrPPOTrainer.__new__(DsdrPPOTrainer)  # the two methods under test need no Ray
    trainer.dsdr = plugin_settings("dapo", {"dapo_exhausted": "error", "max_num_gen_batches": 3})
    trainer.config = OmegaConf.create({"data": {"train_batch_size": 4}})
    trainer._generation_cap = generation_cap(trainer.dsdr, 4)
    trainer.prepare_step()
    trainer._add_prompts_to_generate(4)
    trainer._add_prompts_to_generate(4)  # 3 batches of 4 prompts: the cap, still allowed
    with pytest.raises(RuntimeError, match="max_num_gen_batches=3"):
        trainer._add_prompts_to_generate(1)
    assert submitted == [4, 4]
    trainer.prepare_step()  # the next step starts counting again
    trainer._add_prompts_to_generate(8)
    assert submitted == [4, 4, 8]
