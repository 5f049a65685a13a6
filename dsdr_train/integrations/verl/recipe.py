"""The paper runs as verl 0.9.1 Hydra overrides: DSDR (and its ablations), GRPO, DAPO and DARLING on
Qwen2.5-Math-1.5B, Qwen3-1.7B and Qwen3-4B (docs/ALGORITHMS.md §3.5: G = 8, 256 prompts per rollout
batch, 16 per mini-batch, lr 1e-6, T = 1.0, 4096 / 8192 response tokens, DAPO-Math-17k).

    python -m dsdr_train.integrations.verl.recipe MODEL ALGO --train-files F.parquet [--val-files V]
           [--n-gpus 8] [--print] [-- extra hydra overrides]

runs ``python -m verl.trainer.main_ppo <overrides>`` (``--print`` only prints the command). Every key
exists in verl 0.9.1's ``ppo_trainer`` config or is added with ``+`` (``tests_verl/test_recipes.py``
composes each recipe against the installed verl's config and checks the clip bounds and aggregation
against ``dsdr_train.objective.ALGO_DEFAULTS``). The data must be in verl's parquet format (``prompt``
chat list, ``reward_model.ground_truth``, ``data_source="math_dapo"`` so verl grades with
``math_dapo``); ``--train-files`` names it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

# §3.5 settings shared by every run (KL off: §1; no entropy bonus: §4)
COMMON: tuple[str, ...] = (
    "data.train_batch_size=256",
    "data.max_prompt_length=1024",
    "data.filter_overlong_prompts=true",
    "actor_rollout_ref.rollout.n=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    "actor_rollout_ref.actor.ppo_epochs=1",
    "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.rollout.top_p=1.0",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.actor.use_kl_loss=false",
    "actor_rollout_ref.actor.kl_loss_coef=0.0",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "algorithm.use_kl_in_reward=false",
    "actor_rollout_ref.model.use_remove_padding=true",
    "actor_rollout_ref.actor.use_dynamic_bsz=true",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
    "trainer.logger=[console,file]",
    "trainer.project_name=dsdr",
)

# model alias -> (hub id, max response tokens)
MODELS: dict[str, tuple[str, int]] = {
    "qwen2.5-math-1.5b": ("Qwen/Qwen2.5-Math-1.5B", 4096),
    "qwen3-1.7b": ("Qwen/Qwen3-1.7B", 8192),
    "qwen3-4b": ("Qwen/Qwen3-4B", 8192),
}

# Every recipe runs the plugin's trainer: it writes the spec's reward (verl's math_dapo score is +-1)
# and refuses verl settings that change Eq. 3 (its dual clip: clip_ratio_c=inf turns it off)
_PLUGIN = ("trainer.v1.trainer_mode=dsdr_sync", "actor_rollout_ref.actor.clip_ratio_c=inf")
ALGOS: dict[str, tuple[str, ...]] = {
    # §1 GRPO with the population std (verl's built-in `grpo` is Bessel: algorithm.adv_estimator=grpo)
    "grpo": ("algorithm.adv_estimator=grpo_pop_std", *_PLUGIN, "actor_rollout_ref.actor.clip_ratio_low=0.2",
             "actor_rollout_ref.actor.clip_ratio_high=0.2", "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"),
    # §2 DAPO: clip-higher, token-mean, {0, 1} reward + Eq. 6 overlong term (buffer L_max // 4, the plugin's
    # trainer), dynamic sampling on accuracy (verl's ReplayBuffer; the cap of 10 generation batches is
    # enforced by the plugin's trainer, which stops the run when it is reached)
    "dapo": ("algorithm.adv_estimator=dapo", *_PLUGIN, "actor_rollout_ref.actor.clip_ratio_low=0.2",
             "actor_rollout_ref.actor.clip_ratio_high=0.28", "actor_rollout_ref.actor.loss_agg_mode=token-mean",
             "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
             "algorithm.filter_groups.max_num_gen_batches=10", "+dsdr.dapo_exhausted=error"),
    # §3 DSDR: bonus lambda_d, coupling tau, local term lambda_l, clip-higher
    "dsdr": ("algorithm.adv_estimator=dsdr", *_PLUGIN, "actor_rollout_ref.actor.clip_ratio_low=0.2",
             "actor_rollout_ref.actor.clip_ratio_high=0.28", "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
             "+dsdr.lambda_d=0.001", "+dsdr.tau=5.0", "+dsdr.lambda_l=0.001"),
    # §3.6 w/o GD: no bonus, uniform coupling, local term kept
    "dsdr_wo_gd": ("algorithm.adv_estimator=dsdr_wo_gd", *_PLUGIN, "actor_rollout_ref.actor.clip_ratio_low=0.2",
                   "actor_rollout_ref.actor.clip_ratio_high=0.28",
                   "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", "+dsdr.lambda_l=0.001"),
    # §3.6 w/o GC: bonus kept, no local term
    "dsdr_wo_gc": ("algorithm.adv_estimator=dsdr_wo_gc", *_PLUGIN, "actor_rollout_ref.actor.clip_ratio_low=0.2",
                   "actor_rollout_ref.actor.clip_ratio_high=0.28",
                   "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", "+dsdr.lambda_d=0.001"),
    # §4 DARLING: r * Div, no std, token-mean, clip (0.2, 0.2); the authors' partition is a fine-tuned
    # classifier (+dsdr.darling_partition=classifier:PATH); the embedding threshold is the default here
    "darling": ("algorithm.adv_estimator=darling", *_PLUGIN, "actor_rollout_ref.actor.clip_ratio_low=0.2",
                "actor_rollout_ref.actor.clip_ratio_high=0.2", "actor_rollout_ref.actor.loss_agg_mode=token-mean",
                "+dsdr.darling_partition=embedding"),
}


def overrides(model: str, algo: str, *, train_files: str, val_files: str | None = None, n_gpus: int = 8,
              nnodes: int = 1) -> list[str]:
    """The Hydra overrides of one paper run (``ValueError`` naming the valid models / algorithms)."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; expected one of {sorted(MODELS)}")
    if algo not in ALGOS:
        raise ValueError(f"unknown algo {algo!r}; expected one of {sorted(ALGOS)}")
    hub_id, max_response = MODELS[model]
    out = [*COMMON, f"actor_rollout_ref.model.path={hub_id}", f"data.max_response_length={max_response}",
           # Eq. 4d's L_max if loss_agg_mode is set to seq-mean-token-sum-norm (verl: the padded width)
           f"actor_rollout_ref.actor.loss_scale_factor={max_response}",
           # dynamic batching packs whole sequences: at least one prompt + response per GPU
           f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={2 * (1024 + max_response)}",
           f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={2 * (1024 + max_response)}",
           *ALGOS[algo], f"data.train_files={train_files}", f"data.val_files={val_files or train_files}",
           f"trainer.n_gpus_per_node={n_gpus}", f"trainer.nnodes={nnodes}", f"trainer.experiment_name={model}-{algo}"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run a paper recipe on verl (python -m verl.trainer.main_ppo ...)")
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("algo", choices=sorted(ALGOS))
    parser.add_argument("--train-files", required=True, help="DAPO-Math-17k in verl's parquet format")
    parser.add_argument("--val-files", default=None, help="validation parquet (default: the training files)")
    parser.add_argument("--n-gpus", type=int, default=8, help="GPUs per node (the DSDR paper: 8x A100)")
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--print", action="store_true", help="print the command instead of running it")
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args, extra = parser.parse_args(argv[:cut]), argv[cut + 1:]  # after --: further Hydra overrides
    command = [sys.executable, "-m", "verl.trainer.main_ppo",
               *overrides(args.model, args.algo, train_files=args.train_files, val_files=args.val_files,
                          n_gpus=args.n_gpus, nnodes=args.nnodes), *extra]
    if args.print:
        print(shlex.join(command))
        return 0
    os.execv(sys.executable, command)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
