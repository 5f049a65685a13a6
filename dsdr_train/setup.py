"""What a training run loads before its first step, the same for both engines (the compact
:class:`~dsdr_train.train.Trainer` and ``--engine trl``): the prompt pool rendered as ``dsdr-eval
run`` renders prompts, the diversity models the objective or the logging needs, and the
config.json record. Plain functions of the config, so an engine cannot depend on another
engine's private state.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dsdr_eval.errors import DsdrError
from dsdr_eval.prompts import PromptTemplate
from dsdr_train import core_algos as algos
from dsdr_train.collect import PromptPool
from dsdr_train.config import TrainConfig
from dsdr_train.data import PromptSampler, load_train_problems


@dataclass(frozen=True)
class PromptFormat:
    """The run's template and chat mode on its tokenizer: problem text -> prompt token ids."""

    tokenizer: Any
    template: PromptTemplate
    chat: bool

    def encode(self, problem: str) -> list[int]:
        from dsdr_eval.prompts import encode_prompt, render_prompt

        text = render_prompt(self.template, problem, tokenizer=self.tokenizer, chat=self.chat)
        return encode_prompt(self.tokenizer, text, chat=self.chat)


@dataclass(frozen=True)
class DiversityModels:
    """The sentence encoder (DSDR's D_emb, diversity logging, DARLING's embedding partition) and
    DARLING's equivalence; each None when the run does not use it."""

    encoder: Any = None
    equivalence: Any = None


def prompt_format(cfg: TrainConfig, tokenizer: Any) -> PromptFormat:
    from dsdr_eval.prompts import load_template, resolve_chat_mode

    return PromptFormat(tokenizer, load_template(cfg.template), resolve_chat_mode(cfg.prompt_mode, tokenizer))


def load_prompt_pool(cfg: TrainConfig, prompts: PromptFormat, *, main: bool) -> PromptPool:
    """Problems and prompts: the same template/rendering as `dsdr-eval run` (dsdr_eval.prompts).
    Every prompt is tokenised once; those over max_prompt_length are dropped up front so each
    draw is a full batch on every rank (skipping at draw time would desynchronise ranks).
    ``main``: this process reports the skipped count (once per run, not once per rank)."""
    problems = load_train_problems(cfg.train_data, problem_field=cfg.problem_field, answer_field=cfg.answer_field,
                                   split=cfg.dataset_split, dataset_config=cfg.dataset_config,
                                   limit=cfg.max_train_examples)
    rendered = [prompts.encode(p.problem) for p in problems]
    keep = [i for i, ids in enumerate(rendered) if len(ids) <= cfg.max_prompt_length]
    skipped = len(rendered) - len(keep)
    if not keep:
        raise DsdrError(f"config key 'max_prompt_length': all {len(rendered)} training prompts are longer "
                        f"than {cfg.max_prompt_length} tokens")
    if skipped and main:
        print(f"dsdr-train: skipping {skipped} of {len(rendered)} training problems longer than "
              f"max_prompt_length={cfg.max_prompt_length} tokens", file=sys.stderr)
    return PromptPool([problems[i] for i in keep], [rendered[i] for i in keep], PromptSampler(len(keep), cfg.seed))


def build_diversity(cfg: TrainConfig, device: torch.device) -> DiversityModels:
    """The encoder and DARLING's equivalence on the training ``device``, each loaded only when the
    run uses it."""
    reward = cfg.objective.reward
    encoder = equivalence = None
    if reward == "dsdr" or cfg.log_diversity or (reward == "darling" and cfg.darling_partition.startswith("embedding")):
        from dsdr_eval.diversity_metrics import load_encoder

        encoder = load_encoder(cfg.encoder, device="cpu" if device.type == "cpu" else str(device),
                               chunked=cfg.encoder_chunked, max_seq_length=cfg.encoder_max_seq_length)
    if reward == "darling":
        from dsdr_eval.diversity_metrics.partition_methods import make_equivalence

        equivalence = make_equivalence(cfg.darling_partition, encoder=encoder, threshold=cfg.darling_threshold,
                                       device=str(device))
    return DiversityModels(encoder, equivalence)


def save_run_config(run_dir: Path, config_record: dict[str, Any], *, cfg: TrainConfig, prompts: PromptFormat,
                    rollout_engine: dict[str, Any], diversity: DiversityModels) -> None:
    """config.json: ``config_record`` plus what the run resolved (template text and chat mode, the
    rollout engine's choice, the encoder's settings, the formula rules, the objective's notes)."""
    from dsdr_eval.diversity_metrics import EXTRACTION_RULES
    from dsdr_eval.rundir.directory import save_config

    save_config(run_dir, dict(
        config_record, template={"name": prompts.template.name, "text": prompts.template.text, "chat": prompts.chat},
        rollout_engine=rollout_engine,
        encoder=diversity.encoder.settings() if diversity.encoder is not None else None,
        formula_extraction=EXTRACTION_RULES[cfg.formula_rules],
        objective_notes={**algos.COMMON_NOTES, **algos.ALGO_NOTES.get(cfg.objective.algo, {})}))


__all__ = ["DiversityModels", "PromptFormat", "build_diversity", "load_prompt_pool", "prompt_format", "save_run_config"]
