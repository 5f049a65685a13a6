"""transformers backend: batched ``generate`` with left padding, prompts encoded once.

Each batch holds prompts with identical sampling settings and the same ``n``. The prompts are
prefilled once into a KV cache that is then repeated n times (``_generate_prefill_once``), so a
prompt's n rollouts share one prefill -- what ``num_return_sequences=n`` alone does not do. Seeding is per batch and keyed by the batch's content (the seeds of its requests, which
the runner derives from benchmark/phase/problem id), so a resumed run regenerates a batch with
the same random stream; the seed actually used is recorded in every sample line.
"""

from __future__ import annotations

from typing import Any, Sequence

from dsdr_eval.backends.base import Completion, GenerationRequest, LocalTokenizerBackend, OnResults, RequestResult
from dsdr_eval.backends.sampling import SamplingSpec, chosen_eos_ids, hf_effective_sampling, hf_generate, hf_generation_config
from dsdr_eval.errors import DsdrError
from dsdr_eval.prompts import encode_prompt, resolve_chat_mode
from dsdr_eval.protocols import derive_seed


class HFBackend(LocalTokenizerBackend):
    name = "hf"

    def __init__(self, model_path: str, *, device: str = "auto", dtype: str = "auto", batch_size: int | None = None,
                 prompt_mode: str = "auto", revision: str | None = None, prefill_once: bool = True) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if batch_size is None:  # rollouts per generate(): a paper run's 64 rollouts fit one call on a GPU
            batch_size = 16 if device == "cpu" else 64
        if batch_size < 1:
            raise DsdrError(f"--batch-size must be >= 1 (got {batch_size})")
        if dtype == "auto":  # fp32 on CPU (bf16 matmuls are slow/inexact there), bf16 on accelerators
            dtype = "float32" if device == "cpu" else "bfloat16"
        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise DsdrError(f"--dtype {dtype}: not a torch dtype (float32, bfloat16, float16)")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model_path, revision=revision)
            self.model = AutoModelForCausalLM.from_pretrained(model_path, revision=revision, dtype=torch_dtype)
        except OSError as exc:
            raise DsdrError(f"--model {model_path}: cannot load with transformers ({exc})") from None
        self.model.to(device).eval()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.device = device
        self.dtype = dtype
        self.batch_size = batch_size
        self.prompt_mode = prompt_mode
        self._chat = resolve_chat_mode(prompt_mode, self.tokenizer)
        self.eos_ids = list(chosen_eos_ids(self.tokenizer, self.model.generation_config))
        self._prefill_once = prefill_once
        self.prefill_fallback_reason: str | None = None
        if not self.eos_ids:
            raise DsdrError(f"--model {model_path}: no EOS token in tokenizer or generation_config")

    def batch_capacity(self) -> int:
        return self.batch_size

    def config(self) -> dict[str, Any]:
        import torch
        import transformers

        return {"name": self.name, "version": transformers.__version__, "torch": torch.__version__,
                "device": self.device, "dtype": self.dtype, "batch_size": self.batch_size,
                "eos_token_ids": self.eos_ids,
                "prefill_once": self._prefill_once,
                "seeding": "per batch, seed = derive_seed(0, request seeds of the batch)"}

    def _generation_config(self, request: GenerationRequest) -> Any:
        """Built from scratch (``sampling.hf_generation_config``): a checkpoint's generation_config.json
        (Qwen's top_k=20, repetition_penalty=1.05) cannot change the protocol's sampling."""
        spec = SamplingSpec(request.temperature, request.top_p, request.max_tokens, tuple(self.eos_ids))
        return hf_generation_config(spec, pad_token_id=int(self.tokenizer.pad_token_id),
                                    bos_token_id=self.tokenizer.bos_token_id)

    def effective_sampling(self, request: GenerationRequest) -> dict[str, Any]:
        return hf_effective_sampling(self.model, self._generation_config(request))

    def generate(self, requests: Sequence[GenerationRequest], batches: Sequence[Sequence[int]],
                 on_results: OnResults) -> None:
        for batch in batches:
            results = self.generate_batch([requests[i] for i in batch])
            on_results(list(zip(batch, results)))

    def _generate_prefill_once(self, input_ids: Any, attention: Any, n: int, gen_config: Any, seed: int) -> Any:
        """Encode each prompt once, then decode n rollouts from copies of its KV cache.

        ``generate(num_return_sequences=n)`` copies the prompt n times *before* the forward pass,
        so the prompt is prefilled n times. Here the prompts [B, L] minus their last token are run
        once into a DynamicCache, the cache is repeated to [B*n, ...] and ``generate`` continues
        from it (it only feeds the uncached last token). Same positions, masks and sampling order
        as the plain call -- outputs are token-identical (checked in tests) -- at 1/n of the
        prefill cost. Models whose cache cannot be built this way fall back to the plain call.
        Returns sequences [B*n, L + T]."""
        import torch

        if self._prefill_once and input_ids.shape[1] > 1:
            try:
                from transformers import DynamicCache

                torch.manual_seed(seed)
                cache = DynamicCache(config=self.model.config)
                positions = (attention.cumsum(-1) - 1).clamp(min=0)
                self.model(input_ids=input_ids[:, :-1], attention_mask=attention[:, :-1],
                           position_ids=positions[:, :-1], past_key_values=cache, use_cache=True)
                if n > 1:
                    cache.batch_repeat_interleave(n)
                return hf_generate(self.model, gen_config, input_ids=input_ids.repeat_interleave(n, dim=0),
                                   attention_mask=attention.repeat_interleave(n, dim=0), past_key_values=cache)
            except (TypeError, ValueError, AttributeError, NotImplementedError) as exc:
                self._prefill_once = False  # e.g. a hybrid/sliding cache this path cannot build
                self.prefill_fallback_reason = f"{type(exc).__name__}: {exc}"
        torch.manual_seed(seed)  # (again: a failed fast path may have drawn from the generator)
        gen_config.num_return_sequences = n
        try:
            return hf_generate(self.model, gen_config, input_ids=input_ids, attention_mask=attention)
        finally:
            gen_config.num_return_sequences = 1

    def generate_batch(self, batch: Sequence[GenerationRequest]) -> list[RequestResult]:
        """Shapes: input_ids [B, L] left-padded; output sequences [B*n, L + T]."""
        import torch

        first = batch[0]
        settings = {(r.n, r.temperature, r.top_p, r.max_tokens) for r in batch}
        if len(settings) != 1:
            raise ValueError(f"a HF batch needs one (n, temperature, top_p, max_tokens); got {settings}")
        encoded = [encode_prompt(self.tokenizer, r.prompt, chat=self._chat) for r in batch]
        width = max(len(ids) for ids in encoded)
        pad = int(self.tokenizer.pad_token_id)
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, ids in enumerate(encoded):
            input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            attention[row, width - len(ids):] = 1
        greedy = first.temperature == 0
        # Greedy rollouts of one prompt are identical: decode once, copy n times (HF also refuses
        # num_return_sequences > 1 without sampling).
        n_decode = 1 if greedy else first.n
        gen_config = self._generation_config(first)
        batch_seed = derive_seed(0, *(r.seed for r in batch))
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        with torch.inference_mode():
            sequences = self._generate_prefill_once(input_ids, attention, n_decode, gen_config, batch_seed)
        if n_decode != first.n:
            sequences = sequences.repeat_interleave(first.n // n_decode, dim=0)
        generated = sequences[:, width:].tolist()
        eos = set(self.eos_ids)
        results: list[RequestResult] = []
        for row, request in enumerate(batch):
            completions = []
            for j in range(first.n):
                tokens = generated[row * first.n + j]
                stop_at = next((k for k, tok in enumerate(tokens) if tok in eos), None)
                if stop_at is None:
                    kept, finish, count = tokens, ("length" if len(tokens) >= first.max_tokens else "stop"), len(tokens)
                else:  # the EOS token counts as generated (as in vLLM's token counts)
                    kept, finish, count = tokens[:stop_at], "stop", stop_at + 1
                text = self.tokenizer.decode(kept, skip_special_tokens=True)
                completions.append(Completion(text, finish, len(encoded[row]), count, batch_seed))
            results.append(RequestResult(tuple(completions)))
        return results
