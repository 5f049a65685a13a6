"""The policy as the trainer uses it: device/dtype, loading (dropout off), the optimizer and its
schedule, and the batched forward that scores response tokens (left-padded prompts)."""

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
            "response_mask": attn[:, P:].to(device).float(), "prompt_width": torch.tensor(P)}


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
