"""One prepared GPU check at the papers' geometry (issue 26): correctness on CUDA, then speed and
memory of a training step as ratios to the hardware's own floor measured in the same run.

Models: random weights built on the device from the architecture configs in ``benchmarks/gpu/``
(Qwen2.5-Math-1.5B; Qwen3-4B-Base = Qwen3-4B's architecture; its ``README.md`` says where each file
came from). Speed and memory do not depend on the weights' values. In the speed phases a forward hook
on the LM head sets the EOS/pad logits to -inf, so every rollout is exactly ``--response-len`` tokens.

Phases, per model, in priority order (correctness of every model before any speed phase):

* ``build``          random bf16 weights from config.json, saved with the tokenizer files (the HF dir every
                     phase loads);
* ``hf_backend``     ``dsdr_eval.backends.hf``: two greedy ``generate_batch`` calls give the same tokens
                     (n=2 copies identical), greedy with and without the shared prefill agree, and
                     sampling is exact: the sampler's log q of every token equals the trainer's scoring
                     forward of the same tokens (fp32: max |q/pi - 1| <= 1e-3; bf16 reported);
* ``bf16_vs_fp32``   the compact trainer's update (``dsdr_train.update.ppo_update``) in bf16 with gradient
                     checkpointing vs fp32 without, same weights and rollouts: loss, entropy and gradients
                     within bf16 tolerance (entropy rel. diff <= 2e-2, gradient cosine >= 0.99);
* ``trl_small``      the TRL engine (``dsdr_train.integrations.trl``) runs one step at a small geometry;
* ``floor_generate`` bare ``model.generate`` of the paper batch (8 prompts x 8 rollouts, prompt 512,
                     response 4096);
* ``compact_step``   the compact trainer's step on the same batch: generate (HF rollouts) / score
                     (grading + rewards) / update (bf16, gradient checkpointing), each timed with its peak
                     memory;
* ``floor_fwd_bwd``  bare forward + backward (cross-entropy of the response tokens, same micro-batches,
                     gradient checkpointing as the trainer; no optimizer) of the step's rollouts;
* ``trl_step``       the TRL engine's step (generate / score / update) at the same geometry.

Time-boxing: every phase runs under a wall-clock box (its cap, and never past ``--budget-s`` from the
start); a phase predicted from the floors to overrun what is left is skipped with the prediction
recorded. JSON + Markdown are rewritten after every phase, so a killed run keeps what it measured.
Exit code: 0 when no phase failed (timed-out / skipped phases are reported, not failures), 1 when a
check failed, 2 on bad arguments.

Device (no network there; it lacks TRL, math-verify and datasets): build the wheelhouse here once,
``bash benchmarks/gpu/build_wheelhouse.sh`` (writes the gitignored ``.whl/``, 2.2 MB), then call the device
tool ``run`` with ``carry: [".whl"]``, ``timeout_s: 540`` and this command (outputs land in ``$OUT``:
gpu_check.json, gpu_check.md, gpu_check.log; commit the first two under ``reports/gpu/``)::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false && python3 benchmarks/gpu_check.py --out $OUT --budget-s 450 2>&1 | tee $OUT/gpu_check.log

The budget (450 s: the issue's 8 minutes less the wheel install and imports) leaves the 15-minute
lease ~4 minutes after a ~1.5-minute machine start: enough for an immediate rerun on the still-warm
machine (``--budget-s 180``), not for a fresh start. Expect the default run to reach the correctness
phases of both models and Qwen2.5-Math-1.5B's speed phases (an estimate, not a measurement: HF
``generate`` pays a Python-bound ~20-30 ms per decode step at this size, so a 4096-token call takes
minutes, and the floor and each engine step make one); whatever the budget did not reach
is recorded as skipped, and the next lease runs it with e.g. ``--models qwen3-4b-base --phases speed``.

On CPU: ``python benchmarks/gpu_check.py --tiny --out /tmp/gpu_check`` (2-layer models, tiny geometry;
tests/train/test_gpu_check.py runs it so the script cannot rot).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
CONFIGS = ROOT / "benchmarks" / "gpu"
BPE_FILES = ("vocab.json", "merges.txt")  # shared by both architectures (identical merges: benchmarks/gpu/README.md)
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer_config.json")
DEFAULT_MODELS = ("qwen2.5-math-1.5b", "qwen3-4b-base")
# --tiny: the shipped architectures shrunk to 2 layers (same tokenizer, same model classes).
TINY_OVERRIDES = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 16, "max_window_layers": 2}
# bf16 tolerances (bf16 keeps 8 mantissa bits: ~4e-3 relative per rounding, accumulated over the layers).
ENTROPY_RTOL = 2e-2
GRAD_COSINE_MIN = 0.99
FP32_RATIO_DEV_MAX = 1e-3


@dataclass(frozen=True)
class Geometry:
    """One batch layout: ``prompts`` x ``group`` rollouts, prompts of exactly ``prompt_len`` tokens
    (chat template included), responses of ``response_len`` tokens, ``micro_batch`` rollouts per
    forward/backward."""

    prompt_len: int
    response_len: int
    prompts: int
    group: int
    micro_batch: int

    @property
    def rollouts(self) -> int:
        return self.prompts * self.group


PAPER = Geometry(prompt_len=512, response_len=4096, prompts=8, group=8, micro_batch=8)  # §3.5, paper_*.yaml
SMALL = Geometry(prompt_len=64, response_len=16, prompts=2, group=2, micro_batch=2)     # correctness phases
TINY = Geometry(prompt_len=64, response_len=8, prompts=2, group=2, micro_batch=2)       # --tiny speed phases

# Per-phase caps in seconds on the GPU (a box never extends past the budget's end either); --tiny
# triples them: on 2 shared CPU cores the phases' fixed costs (loads, imports) swing with the load.
CAPS = {"build": 90, "hf_backend": 90, "bf16_vs_fp32": 90, "trl_small": 120, "floor_generate": 180,
        "compact_step": 240, "floor_fwd_bwd": 120, "trl_step": 300}


class PhaseTimeout(BaseException):
    """Raised in the main thread when a phase's box expires (BaseException: no library
    ``except Exception`` swallows it)."""


@contextmanager
def time_box(seconds: float) -> Iterator[None]:
    """SIGALRM after ``seconds``: Python code between CUDA kernels (the decode loop, the layers)
    sees it within one step, so a slow phase stops instead of eating the budget."""
    def expire(signum: int, frame: Any) -> None:
        raise PhaseTimeout(f"time box of {seconds:.0f} s expired")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ----------------------------------------------------------------------------- device helpers
def _torch() -> Any:
    import torch

    return torch


def sync() -> None:
    torch = _torch()
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def reset_peak() -> None:
    torch = _torch()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak_gib() -> float | None:
    """Peak CUDA memory allocated since the last ``reset_peak`` (None on CPU: no resettable peak)."""
    torch = _torch()
    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    return round(torch.cuda.max_memory_allocated() / 2**30, 3)


def free_memory() -> None:
    gc.collect()
    torch = _torch()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@contextmanager
def timed(out: dict[str, Any], key: str) -> Iterator[None]:
    """``out[key + '_s']`` = seconds, ``out[key + '_peak_gib']`` = peak memory of the block."""
    reset_peak()
    t0 = time.perf_counter()
    yield
    sync()
    out[f"{key}_s"] = round(time.perf_counter() - t0, 3)
    out[f"{key}_peak_gib"] = peak_gib()


def suppress_eos(model: Any, token_ids: list[int]) -> Any:
    """A forward hook on the LM head: logits of ``token_ids`` (EOS, pad) are -inf, so generation
    never stops early and every rollout has the configured length. Returns the hook handle."""
    torch = _torch()
    head = model.get_output_embeddings()
    ids = sorted(set(token_ids))

    def hook(module: Any, inputs: Any, output: Any) -> Any:
        index = torch.tensor(ids, device=output.device)
        return output.index_fill(-1, index, float("-inf"))

    return head.register_forward_hook(hook)


# ----------------------------------------------------------------------------- models and data
def model_dir_of(name: str, work: Path) -> Path:
    return work / "models" / name


def build_model(name: str, work: Path, *, tiny: bool, device: str) -> dict[str, Any]:
    """Random bf16 weights of the shipped architecture, saved with its tokenizer files to
    ``work/models/NAME`` (the HF dir every later phase loads)."""
    torch = _torch()
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src, out = CONFIGS / name, model_dir_of(name, work)
    out.mkdir(parents=True, exist_ok=True)
    for f in MODEL_FILES:
        shutil.copy(src / f, out / f)
    for f in BPE_FILES:
        shutil.copy(CONFIGS / "qwen-bpe" / f, out / f)
    config = AutoConfig.from_pretrained(out)
    if tiny:
        for key, value in TINY_OVERRIDES.items():
            setattr(config, key, value)
        if getattr(config, "layer_types", None):
            config.layer_types = config.layer_types[:config.num_hidden_layers]
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(out).save_pretrained(out)  # tokenizer.json: later loads skip the BPE conversion
    params = sum(p.numel() for p in model.parameters())
    del model
    return {"parameters": params, "layers": config.num_hidden_layers, "hidden_size": config.hidden_size,
            "vocab_size": config.vocab_size, "model_class": config.architectures[0]}


def write_problems(path: Path, model_dir: Path, geo: Geometry) -> list[list[int]]:
    """``geo.prompts`` distinct training problems whose rendered prompts (the trainer's template and
    chat mode) are exactly ``geo.prompt_len`` tokens; returns their token ids."""
    from transformers import AutoTokenizer

    from dsdr_eval.prompts import encode_prompt, load_template, render_prompt, resolve_chat_mode

    tok = AutoTokenizer.from_pretrained(model_dir)
    template, chat = load_template(None), resolve_chat_mode("auto", tok)

    def encoded(text: str) -> list[int]:
        return encode_prompt(tok, render_prompt(template, text, tokenizer=tok, chat=chat), chat=chat)

    rows, ids = [], []
    for i in range(geo.prompts):
        head = f"Problem {i}: what is {i} + 1?"
        filler = max(geo.prompt_len - len(encoded(head)), 0)
        for _ in range(8):  # " x" is one token; the loop absorbs any merge at the seams
            text = head + " x" * filler
            got = len(encoded(text))
            if got == geo.prompt_len or filler == 0 and got > geo.prompt_len:
                break
            filler = max(filler + geo.prompt_len - got, 0)
        if got != geo.prompt_len:
            raise ValueError(f"--prompt-len {geo.prompt_len}: cannot render a prompt of exactly that many tokens "
                             f"(the template with a one-line problem alone is {len(encoded(head))})")
        rows.append({"problem": text, "answer": str(i + 1)})
        ids.append(encoded(text))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ids


def train_config(model_dir: Path, data: Path, run_dir: Path, geo: Geometry, *, engine: str, dtype: str,
                 gradient_checkpointing: bool, device: str) -> Any:
    """The compact / TRL trainer config of ``geo``: GRPO (random weights grade all-wrong; DAPO's
    dynamic sampling would resample forever), no diversity logging (its encoder's weights are not on
    the device), one optimizer update per step, nothing saved."""
    from dsdr_train.config import resolve_config

    return resolve_config(dict(
        algo="grpo", engine=engine, model=str(model_dir), train_data=str(data), out=str(run_dir), seed=0,
        device=device, dtype=dtype, group_size=geo.group, prompts_per_step=geo.prompts,
        mini_batch_prompts=geo.prompts, micro_batch_size=geo.micro_batch, generation_batch_size=geo.rollouts,
        max_prompt_length=geo.prompt_len, max_response_length=geo.response_len, temperature=1.0, top_p=1.0,
        rollout_engine="hf", gradient_checkpointing=gradient_checkpointing, log_diversity=False, total_steps=1,
        save_every=0, save_final=False, progress=False, max_grad_norm=0.0))


# ----------------------------------------------------------------------------- correctness phases
def check_hf_backend(model_dir: Path, device: str) -> dict[str, Any]:
    """Greedy == greedy through the eval backend; exact sampling against the trainer's scoring."""
    torch = _torch()
    from dsdr_eval.backends.base import GenerationRequest
    from dsdr_eval.backends.hf import HFBackend, hf_sample
    from dsdr_eval.backends.sampling import SamplingSpec
    from dsdr_train.modeling import rollout_logits, token_log_probs
    from dsdr_train.rollout import RolloutBatch, sampler_ratio_deviation

    out: dict[str, Any] = {}
    prompt = "Problem: what is 1 + 1? Put the answer in \\boxed{}."
    for dtype in ("bfloat16", "float32"):
        backend = HFBackend(str(model_dir), device=device, dtype=dtype, batch_size=4)
        pad = int(backend.tokenizer.pad_token_id)
        if dtype == "bfloat16":  # the backend's CUDA default
            req = GenerationRequest(prompt=prompt, user_message=prompt, n=2, temperature=0.0, top_p=1.0,
                                    max_tokens=SMALL.response_len, seed=1)
            first, second = backend.generate_batch([req])[0], backend.generate_batch([req])[0]
            texts = [c.text for c in first.completions] + [c.text for c in second.completions]
            out["greedy_repeat_identical"] = len(set(texts)) == 1
            ids = [list(backend.tokenizer(prompt)["input_ids"])]
            spec = SamplingSpec(0.0, 1.0, SMALL.response_len, tuple(backend.eos_ids))
            shared, _ = hf_sample(backend.model, ids, spec, n=1, pad_id=pad, prefill_once=True)
            plain, _ = hf_sample(backend.model, ids, spec, n=1, pad_id=pad, prefill_once=False)
            a, b = shared[0][0].token_ids, plain[0][0].token_ids
            out["greedy_prefill_once_vs_plain_identical"] = a == b
            out["greedy_prefill_once_vs_plain_first_diff"] = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y),
                                                                  None)
        prompts = [list(backend.tokenizer(f"Problem {i}: compute {i} * 3.")["input_ids"]) for i in range(2)]
        spec = SamplingSpec(1.0, 1.0, SMALL.response_len, tuple(backend.eos_ids))
        sampled, _ = hf_sample(backend.model, prompts, spec, n=2, pad_id=pad, seed=0, record_log_probs=True)
        batch = RolloutBatch()
        for g, seqs in enumerate(sampled):
            for seq in seqs:
                batch.prompt_ids.append(prompts[g])
                batch.response_ids.append(list(seq.token_ids))
                batch.texts.append("")
                batch.finish_reasons.append(seq.finish_reason)
                batch.group_ids.append(g)
                batch.problem_idx.append(g)
                batch.sampler_log_probs.append(list(seq.log_probs or ()))
        rows = list(range(len(batch)))
        with torch.no_grad():
            logits, labels, _ = rollout_logits(backend.model, batch, rows, pad, torch.device(backend.device),
                                               share_prompts=True)
            lp = token_log_probs(logits, labels, 1.0)
        scored = {i: lp[i, :len(batch.response_ids[i])].cpu() for i in rows}
        out[f"sampling_ratio_dev_max_{dtype}"] = sampler_ratio_deviation(scored, batch)
        del backend
        free_memory()
    out["ok"] = bool(out["greedy_repeat_identical"] and out["sampling_ratio_dev_max_float32"] <= FP32_RATIO_DEV_MAX)
    return out


def small_rollouts(vocab: int, geo: Geometry, seed: int) -> Any:
    """A RolloutBatch of random prompt and response ids with unequal lengths (padding exercised)."""
    torch = _torch()
    from dsdr_train.rollout import RolloutBatch

    gen = torch.Generator().manual_seed(seed)
    batch = RolloutBatch()
    for g in range(geo.prompts):
        prompt = torch.randint(0, vocab, (geo.prompt_len - 3 * g,), generator=gen).tolist()
        for j in range(geo.group):
            length = geo.response_len - 2 * j
            batch.prompt_ids.append(prompt)
            batch.response_ids.append(torch.randint(0, vocab, (length,), generator=gen).tolist())
            batch.texts.append("")
            batch.finish_reasons.append("length")
            batch.group_ids.append(g)
            batch.problem_idx.append(g)
    return batch


def check_bf16_vs_fp32(model_dir: Path, work: Path, device: str) -> dict[str, Any]:
    """The compact trainer's update of one small batch in bf16 + gradient checkpointing vs fp32,
    from the same weights (the fp32 copy is the bf16 weights upcast, exactly): compare loss,
    entropy and the gradient of every parameter (kept after the optimizer step)."""
    torch = _torch()
    from dsdr_train import core_algos as algos
    from dsdr_train.distributed import Dist
    from dsdr_train.modeling import build_optimizer, load_policy
    from dsdr_train.update import UpdateContext, ppo_update

    from transformers import AutoTokenizer

    data = work / "small.jsonl"
    write_problems(data, model_dir, SMALL)
    pad_id = int(AutoTokenizer.from_pretrained(model_dir).pad_token_id)
    results: dict[str, dict[str, float]] = {}
    kept: dict[str, Any] = {}  # the bf16 run's gradients, on the device in bf16 (no host copy of 2 x 4B floats)
    sums = dict.fromkeys(("dot", "low", "ref", "diff"), 0.0)
    worst, worst_cos, compared = "", 2.0, 0
    batch = shaped = None
    for dtype, checkpointing in (("bfloat16", True), ("float32", False)):
        cfg = train_config(model_dir, data, work / "run-small", SMALL, engine="compact", dtype=dtype,
                           gradient_checkpointing=checkpointing, device=device)
        policy = load_policy(str(model_dir), getattr(torch, dtype), disable_dropout=True).to(device)
        if checkpointing:
            policy.gradient_checkpointing_enable()
        policy.train()
        if batch is None:
            batch = small_rollouts(policy.config.vocab_size, SMALL, seed=0)
            gen = torch.Generator().manual_seed(1)
            adv = torch.randn(len(batch), generator=gen, dtype=torch.float64)
            shaped = algos.ShapedRewards(reward=adv.clone(), shaped=adv.clone(), advantages=adv,
                                         weights=torch.zeros(len(batch), dtype=torch.float64))
        optimizer, scheduler = build_optimizer(cfg, policy)
        ctx = UpdateContext(cfg, policy, policy, None, optimizer, scheduler, Dist(), torch.device(device), pad_id)
        stats = ppo_update(ctx, batch, shaped, 0)  # the gradients stay on the parameters after the step
        results[dtype] = {"loss_pg": stats.loss_pg, "entropy": stats.entropy}
        for name, p in policy.named_parameters():
            if p.grad is None:
                continue
            if dtype == "bfloat16":
                kept[name] = p.grad.detach().clone()
                continue
            low, ref = kept.pop(name).double(), p.grad.detach().double()
            compared += 1
            dot, nl, nr = float((low * ref).sum()), float((low * low).sum()), float((ref * ref).sum())
            sums["dot"] += dot
            sums["low"] += nl
            sums["ref"] += nr
            sums["diff"] += float(((low - ref) ** 2).sum())
            cos = dot / max((nl * nr) ** 0.5, 1e-300)
            if cos < worst_cos:
                worst, worst_cos = name, cos
        del policy, optimizer, scheduler, ctx
        free_memory()
    cosine = sums["dot"] / max((sums["low"] * sums["ref"]) ** 0.5, 1e-300)
    rel_err = (sums["diff"] / max(sums["ref"], 1e-300)) ** 0.5
    e16, e32 = results["bfloat16"]["entropy"], results["float32"]["entropy"]
    entropy_rel = abs(e16 - e32) / max(abs(e32), 1e-12)
    loss_abs = abs(results["bfloat16"]["loss_pg"] - results["float32"]["loss_pg"])
    return {"bf16": results["bfloat16"], "fp32": results["float32"], "loss_abs_diff": loss_abs,
            "entropy_rel_diff": entropy_rel, "grad_cosine": cosine, "grad_rel_l2_err": rel_err,
            "grad_params_compared": compared, "grad_params_bf16_only": sorted(kept), "worst_param": worst,
            "worst_param_cosine": worst_cos,
            "ok": bool(cosine >= GRAD_COSINE_MIN and entropy_rel <= ENTROPY_RTOL and loss_abs <= 1e-2 and compared
                       and not kept)}


class _StepRecorder:
    """A transformers TrainerCallback (built lazily) that keeps the TRL engine's compact-step record
    (``DsdrGRPOTrainer.step_metrics``: time/generate_s, reward_s, update_s, total_s)."""

    @staticmethod
    def make(trainer: Any, records: list[dict[str, Any]]) -> Any:
        from transformers import TrainerCallback

        per_step = trainer.setup.geometry.updates_per_step

        class Recorder(TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
                if state.global_step % per_step == 0:
                    records.append(trainer.step_metrics(state.global_step // per_step))
                return control

        return Recorder()


def trl_step(model_dir: Path, work: Path, geo: Geometry, *, device: str, dtype: str, tag: str) -> dict[str, Any]:
    """One TRL-engine step (``build_trainer`` + ``train``) at ``geo``, EOS suppressed; its phase times
    from the engine's own step record and the step's peak memory."""
    from dsdr_train.integrations.trl.run import build_trainer

    data = work / f"trl-{tag}.jsonl"
    write_problems(data, model_dir, geo)
    run_dir = work / f"run-trl-{tag}"
    cfg = train_config(model_dir, data, run_dir, geo, engine="trl", dtype=dtype, gradient_checkpointing=True,
                       device=device)
    trainer = build_trainer(cfg, model_path=str(model_dir), run_dir=run_dir)
    tok = trainer.processing_class
    handle = suppress_eos(trainer.model, [tok.eos_token_id, tok.pad_token_id])
    records: list[dict[str, Any]] = []
    trainer.add_callback(_StepRecorder.make(trainer, records))
    out: dict[str, Any] = {}
    try:
        with timed(out, "step"):
            trainer.train()
    finally:
        handle.remove()
        del trainer
        free_memory()
    if not records:
        raise RuntimeError("the TRL engine finished without a step record")
    m = records[-1]
    for key in ("generate", "reward", "update", "total"):
        out[f"{key}_s"] = round(float(m[f"time/{key}_s"]), 3)
    out["response_length_mean"] = m.get("response_length/mean")
    if out["response_length_mean"] is not None:
        out["tokens_per_s"] = round(out["response_length_mean"] * geo.rollouts / out["generate_s"], 1)
        out["full_length"] = out["response_length_mean"] == geo.response_len
    out["ok"] = True
    return out


# ----------------------------------------------------------------------------- speed phases
class _StepCounter:
    """A transformers StoppingCriteria (built lazily) that never stops: it counts decode steps and
    their times, so a ``generate`` cut by its time box still reports its per-step rate."""

    @staticmethod
    def make() -> Any:
        import torch
        from transformers import StoppingCriteria

        class Counter(StoppingCriteria):
            def __init__(self) -> None:
                self.t0, self.times = time.perf_counter(), []

            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                self.times.append(time.perf_counter())
                return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

            def partial(self, rows: int) -> dict[str, Any]:
                n = len(self.times)
                rate = (n - 1) / (self.times[-1] - self.times[0]) if n > 1 else None  # steady decode, prefill excluded
                return {"decode_steps_done": n, "decode_steps_per_s": round(rate, 2) if rate else None,
                        "tokens_per_s": round(rate * rows, 1) if rate else None}

        return Counter()


class SpeedRun:
    """The paper-geometry phases of one model; state shared between them (the trainer, its batch)."""

    def __init__(self, model_dir: Path, work: Path, geo: Geometry, device: str, dtype: str) -> None:
        self.model_dir, self.work, self.geo, self.device, self.dtype = model_dir, work, geo, device, dtype
        self.trainer: Any = None
        self.batch: Any = None
        self.hook: Any = None
        self.prompt_ids: list[list[int]] = []

    def _trainer(self) -> Any:
        if self.trainer is None:
            from dsdr_train.train import Trainer

            data = self.work / "paper.jsonl"
            self.prompt_ids = write_problems(data, self.model_dir, self.geo)
            cfg = train_config(self.model_dir, data, self.work / "run-compact", self.geo, engine="compact",
                               dtype=self.dtype, gradient_checkpointing=True, device=self.device)
            self.trainer = Trainer(cfg, model_path=str(self.model_dir), run_dir=self.work / "run-compact")
            tok = self.trainer.tokenizer
            self.hook = suppress_eos(self.trainer.policy, [tok.eos_token_id, tok.pad_token_id])
        return self.trainer

    def floor_generate(self) -> dict[str, Any]:
        """Bare ``model.generate``: the same prompts, each repeated G times, sampling at T=1 (the
        protocol's GenerationConfig), no prefill sharing, no log-prob bookkeeping."""
        torch = _torch()
        from dsdr_eval.backends.sampling import SamplingSpec, hf_generation_config

        trainer = self._trainer()
        model, tok, geo = trainer.policy, trainer.tokenizer, self.geo
        ids = torch.tensor([p for p in self.prompt_ids for _ in range(geo.group)], device=trainer.device)
        gen_cfg = hf_generation_config(SamplingSpec(1.0, 1.0, geo.response_len, (int(tok.eos_token_id),)),
                                       pad_token_id=int(tok.pad_token_id))
        out: dict[str, Any] = {}
        steps = _StepCounter.make()
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode(), timed(out, "generate"):
                seqs = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gen_cfg,
                                      stopping_criteria=[steps])
        except PhaseTimeout as exc:  # keep the decode rate reached so far: a boxed-out floor still says something
            exc.partial = steps.partial(ids.shape[0])
            raise
        finally:
            model.train(was_training)
        new = (seqs.shape[1] - ids.shape[1]) * ids.shape[0]
        out.update(tokens=int(new), tokens_per_s=round(new / out["generate_s"], 1),
                   full_length=bool(seqs.shape[1] - ids.shape[1] == geo.response_len), ok=True)
        return out

    def compact_step(self) -> dict[str, Any]:
        """The trainer's own step pieces (``Trainer.collect`` / ``shape`` / ``update``, what
        ``train_step`` calls), each timed with its peak memory."""
        trainer = self._trainer()
        out: dict[str, Any] = {}
        with timed(out, "generate"):
            collected = trainer.collect()
        with timed(out, "score"):
            shaped, _ = trainer.shape(collected.batch, collected.graded, collected.accuracy)
        with timed(out, "update"):
            trainer.update(collected.batch, shaped)
        self.batch = collected.batch
        lengths = [len(r) for r in collected.batch.response_ids]
        # Trainer.collect grades as it generates: its grading seconds belong to "score", not "generate".
        out["grade_s"] = round(collected.stats.grade_s, 3)
        out["score_s"] = round(out["score_s"] + collected.stats.grade_s, 3)
        out["generate_s"] = round(out["generate_s"] - collected.stats.grade_s, 3)
        out["total_s"] = round(out["generate_s"] + out["score_s"] + out["update_s"], 3)
        peaks = [out[f"{k}_peak_gib"] for k in ("generate", "score", "update") if out[f"{k}_peak_gib"] is not None]
        out["step_peak_gib"] = max(peaks) if peaks else None
        out.update(tokens=sum(lengths), tokens_per_s=round(sum(lengths) / out["generate_s"], 1),
                   full_length=all(n == self.geo.response_len for n in lengths),
                   prompt_lengths=sorted({len(p) for p in collected.batch.prompt_ids}), ok=True)
        return out

    def floor_fwd_bwd(self) -> dict[str, Any]:
        """Bare forward + backward of the step's rollouts: the same micro-batches (``pad_rollouts``),
        logits of the response positions only, cross-entropy, backward; no optimizer."""
        torch = _torch()
        from dsdr_train.modeling import pad_rollouts

        trainer, geo = self._trainer(), self.geo
        model = trainer.policy
        rows = list(range(len(self.batch)))
        out: dict[str, Any] = {}
        model.train()
        with timed(out, "fwd_bwd"):
            for start in range(0, len(rows), geo.micro_batch):
                t = pad_rollouts(self.batch, rows[start:start + geo.micro_batch], trainer.pad_id, trainer.device)
                R = t["labels"].shape[1]
                logits = model(input_ids=t["input_ids"], attention_mask=t["attention_mask"],
                               position_ids=t["position_ids"], use_cache=False, logits_to_keep=R + 1).logits
                loss = torch.nn.functional.cross_entropy(logits[:, -(R + 1):-1].float().flatten(0, 1),
                                                         t["labels"].flatten())
                loss.backward()
                del logits, loss
        model.zero_grad(set_to_none=True)
        tokens = sum(len(p) + len(r) for p, r in zip(self.batch.prompt_ids, self.batch.response_ids))
        out.update(tokens=tokens, tokens_per_s=round(tokens / out["fwd_bwd_s"], 1), ok=True)
        return out

    def close(self) -> None:
        from dsdr_train import scoring

        scoring.close_grading_pools()
        if self.hook is not None:
            self.hook.remove()
        self.trainer = self.batch = self.hook = None
        free_memory()


# ----------------------------------------------------------------------------- the run and its report
class Report:
    """The JSON + Markdown under ``out``, rewritten after every phase (a killed run keeps them)."""

    def __init__(self, out: Path, header: dict[str, Any]) -> None:
        self.out, self.header, self.phases = out, header, []
        out.mkdir(parents=True, exist_ok=True)

    def add(self, row: dict[str, Any]) -> None:
        self.phases.append(row)
        self.write()

    def find(self, model: str, phase: str) -> dict[str, Any] | None:
        return next((p for p in self.phases if p["model"] == model and p["phase"] == phase and p["status"] == "ok"),
                    None)

    def ratios(self) -> dict[str, dict[str, Any]]:
        """Each engine's step over the floors of the same model and run: time of its generate phase
        over bare ``generate``, time of its update over bare forward+backward, and peak memory over
        the floors' peaks (1.0 = the bare model's own cost; CUDA only for memory)."""
        out: dict[str, dict[str, Any]] = {}
        for model in dict.fromkeys(p["model"] for p in self.phases):
            gen, fb = self.find(model, "floor_generate"), self.find(model, "floor_fwd_bwd")
            r: dict[str, Any] = {}
            for engine in ("compact_step", "trl_step"):
                step = self.find(model, engine)
                if step is None:
                    continue
                d, name = step["detail"], engine.split("_")[0]
                if gen:
                    g = gen["detail"]
                    r[f"{name}_generate_time_over_floor"] = _ratio(d.get("generate_s"), g["generate_s"])
                    r[f"{name}_generate_peak_over_floor"] = _ratio(d.get("generate_peak_gib"), g["generate_peak_gib"])
                if fb:
                    f = fb["detail"]
                    r[f"{name}_update_time_over_floor"] = _ratio(d.get("update_s"), f["fwd_bwd_s"])
                    r[f"{name}_step_peak_over_floor_fwd_bwd_peak"] = _ratio(d.get("step_peak_gib"), f["fwd_bwd_peak_gib"])
            out[model] = {k: v for k, v in r.items() if v is not None}
        return out

    def write(self) -> None:
        record = {**self.header, "elapsed_s": round(time.monotonic() - self.header["_t0"], 1),
                  "phases": self.phases, "ratios": self.ratios()}
        record.pop("_t0", None)
        _atomic(self.out / "gpu_check.json", json.dumps(record, indent=2, default=str) + "\n")
        _atomic(self.out / "gpu_check.md", self.markdown(record))

    def markdown(self, record: dict[str, Any]) -> str:
        h = record
        lines = [f"# GPU check ({'tiny, CPU' if h['tiny'] else 'paper geometry'})", "",
                 f"- command: `{h['command']}`", f"- machine: {h['machine']}", f"- versions: {h['versions']}",
                 f"- geometry: {h['geometry']}; budget {h['budget_s']} s, elapsed {h['elapsed_s']} s", "",
                 "| model | phase | status | s | generate s | score s | update s | tokens/s | peak GiB | notes |",
                 "|---|---|---|---|---|---|---|---|---|---|"]
        for p in self.phases:
            d = p.get("detail") or {}
            peak = d.get("step_peak_gib", d.get("generate_peak_gib", d.get("fwd_bwd_peak_gib")))
            gen = d.get("generate_s")
            upd = d.get("update_s", d.get("fwd_bwd_s"))
            note = "; ".join(x for x in (p.get("error") or p.get("reason"), _checks(d)) if x)
            lines.append(f"| {p['model']} | {p['phase']} | {p['status']} | {p['seconds']} | {_fmt(gen)} | "
                         f"{_fmt(d.get('score_s', d.get('reward_s')))} | {_fmt(upd)} | {_fmt(d.get('tokens_per_s'))} | "
                         f"{_fmt(peak)} | {note} |")
        ratios = record["ratios"]
        if any(ratios.values()):
            lines += ["", "Ratios to the floors of the same run (1.0 = the bare model's own cost):", "",
                      "| model | ratio | value |", "|---|---|---|"]
            for model, r in ratios.items():
                lines += [f"| {model} | {k} | {_fmt(v)} |" for k, v in r.items()]
        return "\n".join(lines) + "\n"


def _checks(d: dict[str, Any]) -> str:
    keep = ("greedy_repeat_identical", "greedy_prefill_once_vs_plain_identical", "sampling_ratio_dev_max_float32",
            "sampling_ratio_dev_max_bfloat16", "grad_cosine", "grad_rel_l2_err", "entropy_rel_diff", "full_length",
            "parameters")
    return ", ".join(f"{k}={_fmt(d[k])}" for k in keep if k in d)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def machine_and_versions(device: str) -> tuple[dict[str, Any], dict[str, Any]]:
    import importlib.metadata as md

    torch = _torch()
    machine: dict[str, Any] = {"host": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count(),
                               "device": device}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        machine.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                       multiprocessors=props.multi_processor_count, cuda=torch.version.cuda)
    versions = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "accelerate", "trl", "datasets", "math-verify"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return machine, versions


def run_phase(report: Report, deadline: float, model: str, phase: str, fn: Callable[[], dict[str, Any]], *,
              cap_s: float, needs: list[str] = (), predicted_s: float | None = None) -> bool:
    """Run ``fn`` under a time box of min(cap, time left); record ok / failed / timed_out / skipped.
    Returns whether it succeeded."""
    left = deadline - time.monotonic()
    missing = [n for n in needs if report.find(model, n) is None]
    reason = None
    if missing:
        reason = f"needs {', '.join(missing)}"
    elif left < 5:
        reason = f"budget spent ({left:.0f} s left)"
    elif predicted_s is not None and predicted_s > left:
        reason = f"predicted {predicted_s:.0f} s from the floors > {left:.0f} s left"
    if reason:
        report.add({"model": model, "phase": phase, "status": "skipped", "seconds": 0.0, "reason": reason})
        return False
    box = min(cap_s, left)
    print(f"gpu_check: {model} {phase} (box {box:.0f} s)", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    row: dict[str, Any] = {"model": model, "phase": phase}
    try:
        with time_box(box):
            detail = fn()
        row.update(status="ok" if detail.get("ok", True) else "failed", detail=detail)
        if not detail.get("ok", True):
            row["error"] = "check outside tolerance"
    except PhaseTimeout as exc:
        row.update(status="timed_out", error=str(exc))
        if getattr(exc, "partial", None):
            row["detail"] = exc.partial
    except Exception as exc:  # a failed phase is a finding; the next phases still run
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        row.update(status="failed", error=f"{type(exc).__name__}: {str(exc)[:300]} "
                                          f"({Path(tb.filename).name}:{tb.lineno})")
        traceback.print_exc()
    row["seconds"] = round(time.monotonic() - t0, 1)
    free_memory()
    report.add(row)
    print(f"gpu_check: {model} {phase} -> {row['status']} in {row['seconds']} s", file=sys.stderr, flush=True)
    return row["status"] == "ok"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tiny", action="store_true", help="2-layer models, tiny geometry (CPU test)")
    p.add_argument("--out", default=str(ROOT / "reports" / "gpu"), help="where gpu_check.json/.md go")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS),
                   help=f"comma-separated dirs of benchmarks/gpu/ ({', '.join(DEFAULT_MODELS)})")
    p.add_argument("--budget-s", type=float, default=450.0, help="wall-clock budget of the whole run")
    p.add_argument("--phases", default="all", help="'all' | 'correctness' | 'speed'")
    p.add_argument("--work", default=None, help="scratch dir for the random weights (default: a temp dir)")
    for field, default in asdict(PAPER).items():  # a shorter geometry for a rerun in what is left of a lease
        p.add_argument(f"--{field.replace('_', '-')}", type=int, default=None,
                       help=f"speed-phase geometry (default {default}; --tiny: {getattr(TINY, field)})")
    args = p.parse_args(argv)
    base = TINY if args.tiny else PAPER
    sizes = {f: getattr(args, f) if getattr(args, f) is not None else getattr(base, f) for f in asdict(PAPER)}
    bad = [f for f, v in sizes.items() if v < 1]
    if bad:
        p.error(f"--{bad[0].replace('_', '-')}: must be >= 1 (got {sizes[bad[0]]})")
    args.geometry = Geometry(**sizes)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in args.models:
        if not (CONFIGS / m / "config.json").is_file():
            p.error(f"--models: {m!r} has no benchmarks/gpu/{m}/config.json (known: {', '.join(DEFAULT_MODELS)})")
    if args.phases not in ("all", "correctness", "speed"):
        p.error(f"--phases: {args.phases!r} is not all | correctness | speed")
    if args.budget_s <= 0:
        p.error(f"--budget-s: must be > 0 (got {args.budget_s})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.monotonic()
    deadline = t0 + args.budget_s
    torch = _torch()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    geo = args.geometry
    speed_dtype = "bfloat16" if device == "cuda" else "float32"
    caps = {k: v * (3 if args.tiny else 1) for k, v in CAPS.items()}
    machine, versions = machine_and_versions(device)
    header = {"_t0": t0, "command": " ".join(["python", *sys.argv]), "tiny": args.tiny, "machine": machine,
              "versions": versions, "geometry": asdict(geo), "small_geometry": asdict(SMALL),
              "budget_s": args.budget_s, "speed_dtype": speed_dtype, "gradient_checkpointing": True,
              "eos": "suppressed in the speed phases (LM-head hook): every rollout is response_len tokens",
              "algo": "grpo (random weights: every rollout graded wrong; DSDR's encoder is not on the device)"}
    report = Report(Path(args.out), header)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="gpu_check-"))
    try:
        for model in args.models:
            run_phase(report, deadline, model, "build",
                      lambda m=model: build_model(m, work, tiny=args.tiny, device=device), cap_s=caps["build"])
        if args.phases in ("all", "correctness"):
            for model in args.models:
                mdir = model_dir_of(model, work)
                run_phase(report, deadline, model, "hf_backend", lambda d=mdir: check_hf_backend(d, device),
                          cap_s=caps["hf_backend"], needs=["build"])
                run_phase(report, deadline, model, "bf16_vs_fp32", lambda d=mdir: check_bf16_vs_fp32(d, work, device),
                          cap_s=caps["bf16_vs_fp32"], needs=["build"])
                if args.tiny and args.phases == "all":  # trl_step below runs the same engine at this size
                    report.add({"model": model, "phase": "trl_small", "status": "skipped", "seconds": 0.0,
                                "reason": "--tiny: trl_step runs the same one step at the tiny geometry"})
                    continue
                run_phase(report, deadline, model, "trl_small",
                          lambda d=mdir: trl_step(d, work, SMALL, device=device, dtype=speed_dtype, tag="small"),
                          cap_s=caps["trl_small"], needs=["build"])
        if args.phases in ("all", "speed"):
            for model in args.models:
                speed_phases(report, deadline, model, work, geo, device, speed_dtype, caps)
    finally:
        report.write()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    failed = [f"{p['model']}:{p['phase']}" for p in report.phases if p["status"] == "failed"]
    print(f"gpu_check: wrote {Path(args.out) / 'gpu_check.json'} and .md; "
          f"{'failed: ' + ', '.join(failed) if failed else 'no phase failed'}", file=sys.stderr)
    return 1 if failed else 0


def speed_phases(report: Report, deadline: float, model: str, work: Path, geo: Geometry, device: str,
                 dtype: str, caps: dict[str, float]) -> None:
    """floor_generate -> compact_step -> floor_fwd_bwd -> trl_step of one model; the engine steps are
    skipped when the floors predict they cannot finish in what is left."""
    run = SpeedRun(model_dir_of(model, work), work, geo, device, dtype)
    try:
        run_phase(report, deadline, model, "floor_generate", run.floor_generate, cap_s=caps["floor_generate"],
                  needs=["build"])
        gen = report.find(model, "floor_generate")
        run_phase(report, deadline, model, "compact_step", run.compact_step, cap_s=caps["compact_step"],
                  needs=["floor_generate"], predicted_s=gen["detail"]["generate_s"] if gen else None)
        run_phase(report, deadline, model, "floor_fwd_bwd", run.floor_fwd_bwd, cap_s=caps["floor_fwd_bwd"],
                  needs=["compact_step"])
    finally:
        run.close()
    gen, fb = report.find(model, "floor_generate"), report.find(model, "floor_fwd_bwd")
    predicted = gen["detail"]["generate_s"] + fb["detail"]["fwd_bwd_s"] if gen and fb else None
    run_phase(report, deadline, model, "trl_step",
              lambda: trl_step(model_dir_of(model, work), work, geo, device=device, dtype=dtype, tag="paper"),
              cap_s=caps["trl_step"], needs=["build"], predicted_s=predicted)


if __name__ == "__main__":
    sys.exit(main())
