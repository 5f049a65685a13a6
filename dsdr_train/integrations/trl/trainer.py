"""``DsdrGRPOTrainer``: TRL's GRPOTrainer (generation, vLLM, accelerate / DeepSpeed / FSDP) with
the objectives of docs/ALGORITHMS.md computed by core_algos, not TRL's nearest option.

What it replaces in GRPOTrainer (TRL 1.16):

* ``_tokenize_prompts``: the prompt ids of ``dsdr_eval.prompts`` (the compact trainer's template
  and rendering), not a second tokenisation;
* the reward: ``dsdr_accuracy`` grades this process's completions with dsdr_eval.grading;
* ``_generate_and_score_completions``: after TRL generated, the WHOLE batch is gathered and
  scored as the compact trainer scores it (``shaping.shape_batch``: the diversity of each whole group,
  ``core_algos.shape_rewards``: population std, the configured eps, coupling weights); TRL's
  advantages (Bessel std, eps 1e-4) are replaced by these;
* ``_prepare_inputs``: whole-group shuffling and per-mini-batch divisors (``batch``);
* ``_compute_loss``: ``loss.micro_batch_loss`` (Eq. 14) times the number of processes (the
  gradient all-reduce averages; the shares add up over processes).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from dsdr_eval.backends import BackendChoice
from dsdr_eval.tasks import Problem
from dsdr_train import scoring
from dsdr_train.config import TrainConfig
from dsdr_train.distributed import Dist
from dsdr_train.integrations.trl.batch import LocalRollouts, gather_batch, group_order, mini_batch_chunks, signal_mask
from dsdr_train.integrations.trl.loss import STAT_KEYS, micro_batch_loss
from dsdr_train.integrations.trl.mapping import Geometry
from dsdr_train.rollout import RolloutBatch
from dsdr_train.setup import DiversityModels, PromptFormat
from dsdr_train.shaping import shape_batch
from dsdr_train.stats import CollectStats, RewardStats, UpdateStats, step_metrics


@dataclass
class DsdrSetup:
    """What the objective needs besides TRL: the config, problems, prompt ids by prompt text, the
    batch geometry, the diversity models (``setup.build_diversity``), and for config.json the
    prompt format and the rollout engine's choice."""

    cfg: TrainConfig
    problems: list[Problem]
    prompt_ids: dict[str, list[int]]
    geometry: Geometry
    prompts: PromptFormat
    diversity: DiversityModels
    rollout_engine: BackendChoice  # mapping.rollout_choice


@dataclass
class _StepRecord:
    """The current generation batch's stats until its last optimizer update is done."""

    started: float
    collect: CollectStats | None = None
    reward: RewardStats | None = None
    update: dict[str, float] = field(default_factory=dict)


class DsdrGRPOTrainer(GRPOTrainer):
    def __init__(self, *, setup: DsdrSetup, **kwargs: Any) -> None:
        self.setup = setup
        self._local: LocalRollouts | None = None
        self._record: _StepRecord | None = None
        super().__init__(reward_funcs=[self.dsdr_accuracy], **kwargs)

    # -- prompts and rewards -------------------------------------------------------------
    def _tokenize_prompts(self, prompts: list) -> tuple[list[list[int]], None, dict]:
        return [list(self.setup.prompt_ids[p]) for p in prompts], None, {}

    def dsdr_accuracy(self, prompts: list, completions: list, completion_ids: list, problem_idx: list,
                      **_: Any) -> list[float]:
        """Verifier verdicts of this process's completions (dsdr_eval.grading, the run's pool)."""
        t0 = time.perf_counter()
        eos = set(self.eos_token_ids)
        batch = RolloutBatch(prompt_ids=[self.setup.prompt_ids[p] for p in prompts],
                             response_ids=[list(c) for c in completion_ids], texts=list(completions),
                             finish_reasons=["stop" if c and c[-1] in eos else "length" for c in completion_ids],
                             group_ids=[int(i) for i in problem_idx], problem_idx=[int(i) for i in problem_idx])
        graded = scoring.grade(batch, self.setup.problems, self.setup.cfg)
        self._local = LocalRollouts(batch, graded, time.perf_counter() - t0)
        return [float(r["correct"]) for r in graded]

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        started = time.perf_counter()
        out = super()._generate_and_score_completions(inputs)
        if not self.model.training or self._local is None:
            return out
        cfg = self.setup.cfg
        t0 = time.perf_counter()
        whole, graded = gather_batch(self._local, cfg.group_size, gather_object)
        accuracy = torch.tensor([float(r["correct"]) for r in graded], dtype=torch.float64)
        shaped, reward_stats = shape_batch(cfg, whole, graded, accuracy.numpy(), self.setup.diversity)  # as compact
        keep = signal_mask(accuracy, torch.tensor(whole.group_ids), cfg.objective.dynamic_sampling)
        n = len(self._local.batch)
        rows = slice(self.accelerator.process_index * n, (self.accelerator.process_index + 1) * n)
        device = out["advantages"].device
        out["advantages"] = shaped.advantages[rows].to(device)
        out["dsdr_weights"] = shaped.weights[rows].to(device)
        out["dsdr_keep"] = keep[rows].to(device)
        out["dsdr_group_ids"] = whole.group_ids[rows]
        reward_s = time.perf_counter() - t0 + self._local.grade_s
        collect = CollectStats.of_groups(whole.group_ids, accuracy.tolist(), num_gen_batches=1,
                                         generate_s=t0 - started - self._local.grade_s, grade_s=self._local.grade_s)
        self._record = _StepRecord(started=started, collect=collect,
                                   reward=dataclasses.replace(reward_stats, reward_s=reward_s))
        self._local = None
        return out

    # -- mini-batches and loss ---------------------------------------------------------------
    def _prepare_inputs(self, generation_batch: Any) -> dict[str, Any]:
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            cfg = self.setup.cfg
            step = self.state.global_step // self.setup.geometry.updates_per_step  # the compact step index
            order = group_order(batch["dsdr_group_ids"], cfg.seed, step)
            self._buffered_inputs = mini_batch_chunks(
                batch, order, micro=self.setup.geometry.micro_batch_size, grad_accum=self.setup.geometry.grad_accum,
                objective=cfg.objective, norm_constant=cfg.loss_norm_constant, gather_object=gather_object)
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def _compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        log_probs, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, inputs["completion_ids"].size(1), compute_entropy=True)
        mask = inputs["completion_mask"].to(log_probs.dtype) * inputs["dsdr_keep"][:, None].to(log_probs.dtype)
        old = inputs.get("old_per_token_logps")
        old = log_probs.detach() if old is None else old
        terms = micro_batch_loss(self.setup.cfg.objective, log_probs, old, inputs["advantages"], mask,
                                 inputs["dsdr_weights"], inputs["dsdr_divisors"], entropies=entropies,
                                 ref_log_probs=inputs.get("ref_per_token_logps"))
        if self.model.training and self._record is not None:
            n_updates = self.setup.geometry.updates_per_step
            acc = self._record.update
            for key, value in (("loss/pg", terms.pg), ("loss/local", terms.local), ("loss/kl", terms.kl),
                               ("entropy/mean", terms.entropy), *terms.stats.items()):
                acc[key] = acc.get(key, 0.0) + value / n_updates
        # The gradient all-reduce averages over processes; each share is of the whole mini-batch.
        return terms.total * self.accelerator.num_processes

    # -- the step's metrics ---------------------------------------------------------------------
    def step_metrics(self, step: int) -> dict[str, Any]:
        """The finished compact step's metrics.jsonl record, the same keys as the compact trainer
        (reduced over processes in one all-reduce: ``stats.step_metrics``). Every process calls it."""
        record = self._record
        assert record is not None and record.collect is not None and record.reward is not None
        u = record.update
        now = time.perf_counter()
        update = UpdateStats(loss_pg=u.get("loss/pg", 0.0), loss_local=u.get("loss/local", 0.0),
                             loss_kl=u.get("loss/kl", 0.0), entropy=u.get("entropy/mean", 0.0),
                             clip_frac=u.get(STAT_KEYS[0], 0.0), clip_frac_low=u.get(STAT_KEYS[1], 0.0),
                             clip_frac_high=u.get(STAT_KEYS[2], 0.0), kl_approx=u.get(STAT_KEYS[3], 0.0),
                             lr=self.lr_scheduler.get_last_lr()[0],
                             update_s=now - record.started - record.collect.generate_s - record.reward.reward_s)
        dist = Dist(rank=self.accelerator.process_index, world=self.accelerator.num_processes)
        m: dict[str, Any] = {"step": step, **step_metrics(dist, record.collect, record.reward, update)}
        m["time/reward_s"] = record.reward.reward_s
        m["time/total_s"] = now - record.started
        self._record.update = {}
        return m
