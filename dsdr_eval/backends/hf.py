"""transformers backend: batched ``generate`` with left padding, prompts encoded once.

:func:`hf_sample` is THE transformers generation loop of the project: the eval backend below
(text + finish reasons) and the trainer's HF rollouts (``dsdr_train.rollout.HFRollout``: token ids
and, on request, per-token log-probs) both call it. Each batch holds prompts with identical sampling settings and the same ``n``. The prompts are
prefilled once into a KV cache that is then repeated n times (``_generate``), so a
prompt's n rollouts share one prefill -- what ``num_return_sequences=n`` alone does not do. Seeding is per batch and keyed by the batch's content (the seeds of its requests, which
the runner derives from benchmark/phase/problem id), so a resumed run regenerates a batch with
the same random stream; the seed actually used is recorded in every sample line.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

from dsdr_eval.backends.base import Completion, GenerationRequest, LocalTokenizerBackend, OnResults, RequestResult
from dsdr_eval.backends.sampling import (SamplingSpec, chosen_eos_ids, hf_effective_sampling, hf_generate,
                                         hf_generation_config, trim_at_stop)
from dsdr_eval.errors import DsdrError
from dsdr_eval.grading.reasoning import DEFAULT_REASONING_FORMAT
from dsdr_eval.prompts import encode_prompt, resolve_chat_mode
from dsdr_eval.protocols import derive_seed


@dataclass(frozen=True)
class SampledSequence:
    """One sampled rollout: ``token_ids`` are the generated tokens up to and including the first
    EOS (``ended_with_eos``); ``finish_reason`` is "stop" or "length" (the token budget was spent);
    ``log_probs`` (when recorded) is log q of each token under the scores ``generate`` sampled from."""

    token_ids: tuple[int, ...]
    finish_reason: str
    ended_with_eos: bool
    log_probs: tuple[float, ...] | None = None

    @property
    def content_ids(self) -> tuple[int, ...]:
        """The tokens without the final EOS (what is decoded to text)."""
        return self.token_ids[:-1] if self.ended_with_eos else self.token_ids


def _left_pad(prompt_ids: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
    import torch

    width = max(len(ids) for ids in prompt_ids)
    input_ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompt_ids), width), dtype=torch.long)
    for row, ids in enumerate(prompt_ids):
        input_ids[row, width - len(ids):] = torch.tensor(list(ids), dtype=torch.long)
        attention[row, width - len(ids):] = 1
    return input_ids, attention


def _generate(model: Any, input_ids: Any, attention: Any, n: int, gen_config: Any, seed: int | None,
              prefill_once: bool, **extra: Any) -> tuple[Any, str | None]:
    """Encode each prompt once, then decode n rollouts from copies of its KV cache.

    ``generate(num_return_sequences=n)`` copies the prompt n times *before* the forward pass,
    so the prompt is prefilled n times. Here the prompts [B, L] minus their last token are run
    once into a DynamicCache, the cache is repeated to [B*n, ...] and ``generate`` continues
    from it (it only feeds the uncached last token). Same positions, masks and sampling order
    as the plain call -- outputs are token-identical (checked in tests) -- at 1/n of the
    prefill cost. Models whose cache cannot be built this way fall back to the plain call; the
    reason is returned (None when the fast path ran or was not asked for). ``seed``: reseed the
    global generator first (None: continue its stream). Returns generate's output (sequences
    [B*n, L + T]) and the fallback reason."""
    import torch

    if seed is not None:
        torch.manual_seed(seed)
    fallback = None
    if prefill_once and input_ids.shape[1] > 1:
        try:
            from transformers import DynamicCache

            cache = DynamicCache(config=model.config)
            positions = (attention.cumsum(-1) - 1).clamp(min=0)
            # logits_to_keep=1: the prefill's logits are discarded, and the LM head over every prompt
            # position (49k words x L) would cost as much as a third of the model.
            model(input_ids=input_ids[:, :-1], attention_mask=attention[:, :-1], position_ids=positions[:, :-1],
                  past_key_values=cache, use_cache=True, logits_to_keep=1)
            if n > 1:
                cache.batch_repeat_interleave(n)
            return hf_generate(model, gen_config, input_ids=input_ids.repeat_interleave(n, dim=0),
                               attention_mask=attention.repeat_interleave(n, dim=0), past_key_values=cache,
                               **extra), None
        except (TypeError, ValueError, AttributeError, NotImplementedError) as exc:
            fallback = f"{type(exc).__name__}: {exc}"  # e.g. a hybrid/sliding cache this path cannot build
            if seed is not None:
                torch.manual_seed(seed)  # (again: a failed fast path may have drawn from the generator)
    gen_config.num_return_sequences = n
    try:
        return hf_generate(model, gen_config, input_ids=input_ids, attention_mask=attention, **extra), fallback
    finally:
        gen_config.num_return_sequences = 1


def _cut(tokens: list[int], log_probs: list[float] | None, eos: set[int], max_tokens: int,
         stop: tuple[str, ...] = (), decode: Callable[[Sequence[int]], str] | None = None) -> SampledSequence:
    stop_at = next((k for k, tok in enumerate(tokens) if tok in eos), None)
    if stop_at is None:  # the EOS token counts as generated (as in vLLM's token counts)
        kept, finish = tokens, ("length" if len(tokens) >= max_tokens else "stop")
    else:
        kept, finish = tokens[:stop_at + 1], "stop"
    ended_with_eos = stop_at is not None
    if stop and decode is not None:
        content = kept[:-1] if ended_with_eos else kept
        through = _stop_string_end(content, stop, decode)
        if through is not None:  # rows a stop string ended are padded after it by generate: cut there
            kept, finish, ended_with_eos = content[:through], "stop", False
    lps = tuple(log_probs[:len(kept)]) if log_probs is not None else None
    return SampledSequence(tuple(kept), finish, ended_with_eos, lps)


def generated_stop_criteria(stop: tuple[str, ...], tokenizer: Any, prompt_width: int) -> Any:
    """A ``generate`` stopping criterion: a row is done once its *generated* text holds a stop string.
    transformers' own ``stop_strings`` also matches across the prompt's end (a prompt ending in "\n" and a
    first generated "\n\n" stop at "\n\n\n" before it is written), which vLLM never does; this one decodes
    only a window of each row's generated tail, wide enough for the longest stop string."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    window = max(len(s) for s in stop) + 8  # tokens: every token decodes to >= 1 character but specials

    class GeneratedStopStrings(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            tails = input_ids[:, max(prompt_width, input_ids.shape[1] - window):].tolist()
            texts = tokenizer.batch_decode(tails, skip_special_tokens=True)
            return torch.tensor([any(s in text for s in stop) for text in texts], device=input_ids.device)

    return StoppingCriteriaList([GeneratedStopStrings()])


def _stop_string_end(ids: Sequence[int], stop: tuple[str, ...], decode: Callable[[Sequence[int]], str]) -> int | None:
    """The fewest leading ``ids`` whose decoding holds a stop string (None: none does): the token that
    completes a stop string is the last one generated, as vLLM counts it. ``generate``'s own stop-string
    criterion (``generated_stop_criteria``) stops the row there, and ``generate`` pads a stopped row of a
    batch after it: this cut is where the rollout ends. Binary search: containment only grows with the prefix."""
    if not any(s in decode(ids) for s in stop if s):
        return None
    low, high = 0, len(ids)  # decode(ids[:low]) holds none, decode(ids[:high]) holds one
    while low + 1 < high:
        middle = (low + high) // 2
        low, high = (low, middle) if any(s in decode(ids[:middle]) for s in stop if s) else (middle, high)
    return high


def hf_sample(model: Any, prompt_ids: Sequence[Sequence[int]], spec: SamplingSpec, *, n: int, pad_id: int,
              bos_token_id: int | None = None, seed: int | None = None, prefill_once: bool = True,
              record_log_probs: bool = False,
              tokenizer: Any = None) -> tuple[list[list[SampledSequence]], str | None]:
    """``n`` rollouts of each prompt (token ids, left-padded into one ``generate`` call), sampled
    exactly from softmax(logits / T) in the top-p nucleus (``sampling.hf_generation_config``: no
    checkpoint defaults). Greedy rollouts of one prompt are identical: decoded once, copied n
    times. ``record_log_probs`` keeps the sampled scores ([B*n, V] per step, one step at a time).
    ``spec.stop`` (stop strings) needs ``tokenizer``: a rollout ends with the token that completes the
    first stop string (``_stop_string_end``); its text is cut before it by the caller (``trim_at_stop``).

    Shapes: prompts [B, L] left-padded; generate's sequences [B*n, L + T]. Returns, per prompt,
    its ``n`` :class:`SampledSequence` s, and the prefill-once fallback reason (or None)."""
    import torch

    if spec.stop and tokenizer is None:
        raise ValueError("hf_sample: stop strings need the tokenizer")
    input_ids, attention = _left_pad(prompt_ids, pad_id)
    device = next(model.parameters()).device
    n_decode = 1 if spec.greedy else n
    record = {"output_scores": True, "return_dict_in_generate": True} if record_log_probs else {}
    gen_config = hf_generation_config(spec, pad_token_id=pad_id, bos_token_id=bos_token_id, **record)
    stop_inputs = {"stopping_criteria": generated_stop_criteria(spec.stop, tokenizer, input_ids.shape[1])} \
        if spec.stop else {}
    with torch.inference_mode():
        out, fallback = _generate(model, input_ids.to(device), attention.to(device), n_decode, gen_config, seed,
                                  prefill_once, **stop_inputs)
        sequences = out.sequences if record_log_probs else out
        width = input_ids.shape[1]
        sampled_lp = None
        if record_log_probs:  # one step at a time: stacking [B, T, V] log-softmaxes would copy the scores twice
            sampled_lp = torch.stack([step.float().log_softmax(-1).gather(-1, sequences[:, width + t, None]).squeeze(-1)
                                      for t, step in enumerate(out.scores)], dim=1).tolist()
        generated = sequences[:, width:].tolist()
    eos = set(spec.eos_token_ids)
    decode = (lambda ids: tokenizer.decode(list(ids), skip_special_tokens=True)) if spec.stop else None
    return [[_cut(generated[k], sampled_lp[k] if sampled_lp is not None else None, eos, spec.max_tokens,
                  spec.stop, decode)
             for k in [p * n_decode + (j if n_decode == n else 0) for j in range(n)]]
            for p in range(len(prompt_ids))], fallback


class HFBackend(LocalTokenizerBackend):
    name = "hf"

    def __init__(self, model_path: str, *, device: str = "auto", dtype: str = "auto", batch_size: int | None = None,
                 prompt_mode: str = "auto", revision: str | None = None, prefill_once: bool = True,
                 chat_template_kwargs: Mapping[str, Any] | None = None,
                 reasoning_format: str = DEFAULT_REASONING_FORMAT) -> None:
        self.chat_template_kwargs = MappingProxyType(dict(chat_template_kwargs or {}))
        self.reasoning_format = reasoning_format
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
        spec = request.sampling_spec(tuple(self.eos_ids))
        return hf_generation_config(spec, pad_token_id=int(self.tokenizer.pad_token_id),
                                    bos_token_id=self.tokenizer.bos_token_id)

    def effective_sampling(self, request: GenerationRequest) -> dict[str, Any]:
        return {**hf_effective_sampling(self.model, self._generation_config(request)),
                **({"stop": list(request.stop)} if request.stop else {})}

    def generate(self, requests: Sequence[GenerationRequest], batches: Sequence[Sequence[int]],
                 on_results: OnResults) -> None:
        for batch in batches:
            results = self.generate_batch([requests[i] for i in batch])
            on_results(list(zip(batch, results)))

    def generate_batch(self, batch: Sequence[GenerationRequest]) -> list[RequestResult]:
        """One :func:`hf_sample` call for requests sharing (n, temperature, top_p, top_k, min_p, max_tokens)."""
        first = batch[0]
        settings = {(r.n, r.temperature, r.top_p, r.top_k, r.min_p, r.max_tokens, r.stop) for r in batch}
        if len(settings) != 1:
            raise ValueError(f"a HF batch needs one (n, temperature, top_p, top_k, min_p, max_tokens, stop); "
                             f"got {settings}")
        encoded = [encode_prompt(self.tokenizer, r.prompt, chat=self._chat) for r in batch]
        spec = first.sampling_spec(tuple(self.eos_ids))
        batch_seed = derive_seed(0, *(r.seed for r in batch))
        sampled, fallback = hf_sample(self.model, encoded, spec, n=first.n, pad_id=int(self.tokenizer.pad_token_id),
                                      bos_token_id=self.tokenizer.bos_token_id, seed=batch_seed,
                                      prefill_once=self._prefill_once, tokenizer=self.tokenizer)
        if fallback is not None:
            self._prefill_once, self.prefill_fallback_reason = False, fallback
        return [RequestResult(tuple(self._completion(seq, request, len(ids), batch_seed) for seq in sequences))
                for request, ids, sequences in zip(batch, encoded, sampled)]

    def _completion(self, seq: SampledSequence, request: GenerationRequest, n_prompt: int, seed: int) -> Completion:
        generated = self._decode(seq.content_ids)
        text, stopped_by = trim_at_stop(generated, request.stop)  # vLLM's convention: the stop string is not kept
        # counted on every generated token: the stop string's tokens are the answer's, as an EOS is
        return Completion(text, seq.finish_reason, n_prompt, len(seq.token_ids), seed,
                          n_reasoning_tokens=self.reasoning_tokens(generated, seq.content_ids, request.prompt),
                          stopped_by=stopped_by if seq.finish_reason == "stop" else None)
