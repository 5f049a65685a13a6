"""The policy as the trainer uses it: device/dtype, loading (dropout off), the optimizer and its
schedule, and the batched forward that scores response tokens (left-padded prompts).

The scoring forward shares prompts (``shared_prompt_logits``): the G rollouts of a group have one
prompt, so each distinct prompt of a micro-batch runs through the model once, its KV cache is
gathered to the rollouts and only the response tokens run per rollout. Gradients flow back through
the gathered cache into the one prompt forward, so the loss and its gradient are those of the
full-sequence forward (``response_logits``) up to float summation order; with an 85-token prompt
and 16-token responses at G=4 that is ~40 % of the tokens. Under gradient checkpointing the
response forward is checkpointed (over a read-only prefix cache) and the prompt forward is not.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from dsdr_train.config import TrainConfig
from dsdr_train.rollout import RolloutBatch


def pick_device(cfg: TrainConfig) -> torch.device:
    if cfg.device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        return torch.device("cpu")
    return torch.device(cfg.device)


def pick_dtype(cfg: TrainConfig, device: torch.device) -> torch.dtype:
    if cfg.dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, cfg.dtype)


def load_policy(path: str, dtype: torch.dtype, *, disable_dropout: bool) -> torch.nn.Module:
    """The policy from an HF dir; with ``disable_dropout`` every dropout probability of its config
    (``attention_dropout``, ``resid_pdrop``, ...) and of its ``nn.Dropout`` modules is zeroed, so the
    update's forward is the deterministic distribution the rollouts were sampled from."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if not disable_dropout:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    config = AutoConfig.from_pretrained(path)
    for key, value in config.to_dict().items():
        if ("dropout" in key or key.endswith("pdrop")) and isinstance(value, float) and value > 0:
            setattr(config, key, 0.0)
    model = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=dtype)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def load_reference(path: str, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    """The frozen initial policy of the KL term (§1, Eq. 5), in eval mode."""
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    ref.requires_grad_(False)
    return ref


def build_optimizer(cfg: TrainConfig, policy: torch.nn.Module) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW and a linear warmup (in optimizer updates) to a constant learning rate."""
    # fused: one kernel per step and no foreach temporaries (a whole extra copy of the
    # parameters at peak); CPU and CUDA both support it for fp32/bf16 in torch >= 2.4.
    optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                  weight_decay=cfg.weight_decay, fused=True)
    warmup = max(cfg.warmup_steps, 0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: min(1.0, (u + 1) / warmup) if warmup else 1.0)
    return optimizer, scheduler


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Run ``model`` in eval mode (no dropout) and restore its train/eval state afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def pad_rollouts(batch: RolloutBatch, rows: list[int], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Left-padded prompts + right-padded responses: input_ids [b, P+R], response_mask [b, R]."""
    P = max(len(batch.prompt_ids[i]) for i in rows)
    R = max(max(len(batch.response_ids[i]) for i in rows), 1)
    ids = torch.full((len(rows), P + R), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for r, i in enumerate(rows):
        p, o = batch.prompt_ids[i], batch.response_ids[i]
        ids[r, P - len(p):P] = torch.tensor(p)
        ids[r, P:P + len(o)] = torch.tensor(o, dtype=torch.long)
        attn[r, P - len(p):P + len(o)] = 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": ids.to(device), "attention_mask": attn.to(device), "position_ids": pos.to(device),
            "response_mask": attn[:, P:].to(device).float(), "prompt_width": torch.tensor(P),
            "labels": ids[:, P:].to(device)}


def can_share_prompts(model: torch.nn.Module) -> bool:
    """Whether ``shared_prompt_logits`` applies: not under DDP (it runs two forwards before one
    backward; DDP's reducer expects one)."""
    from torch.nn.parallel import DistributedDataParallel

    return not isinstance(model, DistributedDataParallel)


def _read_only_prefix(cache: Any) -> Any:
    """``cache`` (a filled DynamicCache) turned read-only: each layer's ``update`` returns prefix ++ new
    keys/values without storing them. The response forward needs nothing stored, and a checkpointed
    layer's backward replay then sees the same prefix again (a storing cache would grow twice)."""
    from transformers import DynamicCache

    class ReadOnlyPrefix(DynamicCache):
        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
                   *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            layer = self.layers[layer_idx]
            return torch.cat([layer.keys, key_states], dim=-2), torch.cat([layer.values, value_states], dim=-2)

    cache.__class__ = ReadOnlyPrefix
    return cache


@contextmanager
def _checkpointing(model: torch.nn.Module, *, prompt: bool) -> Iterator[None]:
    """Gradient checkpointing around the two forwards of ``shared_prompt_logits``: the prompt forward
    writes the cache, so it runs unchecked (its 1/G share of the tokens keeps its activations); the
    response forward keeps the read-only prefix under checkpointing (transformers would drop it)."""
    layers = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False) and hasattr(m, "_can_checkpoint_with_cache")]
    saved = [(m.gradient_checkpointing, m.__dict__.get("_can_checkpoint_with_cache")) for m in layers]
    for m in layers:
        if prompt:
            m.gradient_checkpointing = False
        else:
            m._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for m, (on, can) in zip(layers, saved):
            m.gradient_checkpointing = on
            if can is None:
                m.__dict__.pop("_can_checkpoint_with_cache", None)
            else:
                m._can_checkpoint_with_cache = can


def shared_prompt_logits(model: torch.nn.Module, batch: RolloutBatch, rows: list[int], pad_id: int,
                         device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Raw logits predicting each response token [b, R, V], the labels [b, R] and response mask
    [b, R] of ``rows``: each distinct prompt prefilled once (left-padded [U, P]), its KV cache
    gathered to the b rollouts, then the right-padded responses [b, R] continue from it (module
    docstring). Same values as ``response_logits`` on ``pad_rollouts`` of the same rows."""
    from transformers import DynamicCache

    distinct: dict[tuple[int, ...], int] = {}
    owner = [distinct.setdefault(tuple(batch.prompt_ids[i]), len(distinct)) for i in rows]
    prompts = list(distinct)
    P = max(len(p) for p in prompts)
    R = max(max(len(batch.response_ids[i]) for i in rows), 1)
    prompt_ids = torch.full((len(prompts), P), pad_id, dtype=torch.long)
    prompt_attn = torch.zeros_like(prompt_ids)
    for u, p in enumerate(prompts):
        prompt_ids[u, P - len(p):] = torch.tensor(p, dtype=torch.long)
        prompt_attn[u, P - len(p):] = 1
    labels = torch.full((len(rows), R), pad_id, dtype=torch.long)
    response_attn = torch.zeros_like(labels)
    for r, i in enumerate(rows):
        o = batch.response_ids[i]
        labels[r, :len(o)] = torch.tensor(o, dtype=torch.long)
        response_attn[r, :len(o)] = 1
    index = torch.tensor(owner, dtype=torch.long)
    cache = DynamicCache(config=getattr(model, "config", None))
    with _checkpointing(model, prompt=True):
        first = model(input_ids=prompt_ids.to(device), attention_mask=prompt_attn.to(device),
                      position_ids=(prompt_attn.cumsum(-1) - 1).clamp(min=0).to(device), past_key_values=cache,
                      use_cache=True, logits_to_keep=1).logits[:, -1]  # [U, V]: predicts each response's first token
    cache.batch_select_indices(index.to(device))  # [U, ...] -> [b, ...], differentiable (indexing)
    attn = torch.cat([prompt_attn[index], response_attn], dim=1)
    positions = prompt_attn.sum(-1)[index, None] + torch.arange(R)[None, :]
    with _checkpointing(model, prompt=False):
        rest = model(input_ids=labels.to(device), attention_mask=attn.to(device), position_ids=positions.to(device),
                     past_key_values=_read_only_prefix(cache), use_cache=False,
                     logits_to_keep=R).logits[:, :R - 1]  # [b, R-1, V]
    logits = torch.cat([first[index.to(device)].unsqueeze(1), rest], dim=1).float()
    return logits, labels.to(device), response_attn.to(device).float()


def rollout_logits(model: torch.nn.Module, batch: RolloutBatch, rows: list[int], pad_id: int, device: torch.device,
                   share_prompts: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logits [b, R, V], labels [b, R], response_mask [b, R]) of ``rows``: one prompt forward per
    distinct prompt when ``share_prompts`` and ``can_share_prompts(model)``, else the full-sequence
    forward of each rollout."""
    if share_prompts and can_share_prompts(model):
        return shared_prompt_logits(model, batch, rows, pad_id, device)
    t = pad_rollouts(batch, rows, pad_id, device)
    return response_logits(model, t), t["labels"], t["response_mask"]


def response_logits(model: torch.nn.Module, t: dict[str, torch.Tensor]) -> torch.Tensor:
    """Raw logits that predict each response token: [b, R, V].

    Only the last R+1 positions go through the LM head (``logits_to_keep``): with a 49k-word
    vocabulary the prompt positions' logits would dominate time and memory."""
    R = t["input_ids"].shape[1] - int(t["prompt_width"])
    logits = model(input_ids=t["input_ids"], attention_mask=t["attention_mask"],
                   position_ids=t["position_ids"], use_cache=False, logits_to_keep=R + 1).logits
    return logits[:, -(R + 1):-1].float()


def token_log_probs(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / T)[label]: [b, R]. Rollouts were sampled at T, so the loss uses T too."""
    scaled = logits / temperature
    return scaled.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(scaled, dim=-1)
