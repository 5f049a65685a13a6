"""Exact sampling: the one place that turns (temperature, top-p, max tokens, EOS set) into each
engine's sampling object, so every generation path samples from softmax(logits / T) truncated
to the top-p nucleus and nothing else.

A checkpoint's ``generation_config.json`` is *never* a source of sampling settings here. Under
transformers 5.x every field a ``GenerationConfig`` passed to ``generate`` leaves ``None`` is
filled from ``model.generation_config`` (the checkpoint's file): a Qwen2.5 checkpoint would add
repetition penalty 1.05 and top-k 20, and the trainer would sample from a penalised distribution
while its log-probs assume softmax(logits / T). So the config is built from scratch with every
processor neutral, and ``hf_generate`` swaps it in as ``model.generation_config`` for the call:
a field this module does not know (a future transformers option) then falls back to
transformers' global defaults, never to the checkpoint. vLLM gets ``generation_config="vllm"``
at engine start (``VLLM_ENGINE_ARGS``) and fully spelled-out ``SamplingParams``; an OpenAI-
compatible server gets the neutral values in the request body, since a vLLM server fills every
field a request omits from the model's ``generation_config.json``.

The EOS set is chosen, not inherited by accident: the tokenizer's EOS plus the ids the
checkpoint declares as ``eos_token_id`` (chat models end turns with a token such as
``<|im_end|>`` that is listed only there) -- the same set vLLM stops at.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

# vLLM engine arguments that keep the checkpoint's generation_config.json out of default sampling.
VLLM_ENGINE_ARGS: dict[str, Any] = {"generation_config": "vllm"}

# Every GenerationConfig field that adds a logits processor, at its neutral value (None = off).
_HF_NEUTRAL: dict[str, Any] = {
    "top_k": 0, "min_p": None, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "top_h": None,
    "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0, "bad_words_ids": None, "sequence_bias": None, "suppress_tokens": None,
    "begin_suppress_tokens": None, "forced_bos_token_id": None, "forced_eos_token_id": None,
    "exponential_decay_length_penalty": None, "guidance_scale": None, "watermarking_config": None,
    "renormalize_logits": False, "remove_invalid_values": False, "min_length": 0, "min_new_tokens": None,
    "num_beams": 1, "length_penalty": 1.0, "stop_strings": None, "max_time": None, "use_cache": True,
}
# Fields read back from a GenerationConfig / SamplingParams into config.json.
# The fields transformers reads only when sampling: under greedy they are left out (a value set there is
# reported by transformers as "not valid and may be ignored"; greedy builds no warper from them anyway).
_HF_SAMPLING_ONLY = frozenset({"top_k", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "top_h"})
_HF_RECORDED = ("do_sample", "temperature", "top_p", "top_k", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff",
                "repetition_penalty", "no_repeat_ngram_size", "bad_words_ids", "suppress_tokens", "min_new_tokens",
                "max_new_tokens", "num_beams", "eos_token_id", "pad_token_id")
_VLLM_RECORDED = ("n", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                  "repetition_penalty", "max_tokens", "min_tokens", "stop", "stop_token_ids", "ignore_eos",
                  "bad_words", "logit_bias", "allowed_token_ids", "skip_special_tokens", "logprobs",
                  "include_stop_str_in_output")


@dataclass(frozen=True)
class SamplingSpec:
    """What a protocol or training config asks for; ``temperature == 0`` means greedy."""

    temperature: float
    top_p: float
    max_tokens: int
    eos_token_ids: tuple[int, ...]
    top_k: int = 0  # 0 = off (every engine's own "off" value is written where the spec is applied)
    min_p: float = 0.0  # 0 = off
    stop: tuple[str, ...] = ()  # stop strings: the completion ends before the first one (``trim_at_stop``)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def filters(self) -> dict[str, Any]:
        """The top-k / min-p cuts that are on (none when greedy: the argmax is kept by both)."""
        if self.greedy:
            return {}
        return {**({"top_k": int(self.top_k)} if self.top_k else {}),
                **({"min_p": float(self.min_p)} if self.min_p else {})}


def trim_at_stop(text: str, stop: tuple[str, ...] | list[str]) -> tuple[str, str | None]:
    """``text`` cut before the first occurrence of any stop string, and that stop string (None: none occurs): the
    vLLM / OpenAI convention (the stop string is not part of the output), applied by every backend
    so the same generated tokens give the same completion text whichever engine produced them."""
    cuts = [(i, s) for i, s in ((text.find(s), s) for s in stop if s) if i >= 0]
    if not cuts:
        return text, None
    position, first = min(cuts, key=lambda cut: cut[0])
    return text[:position], first


def chosen_eos_ids(tokenizer: Any, checkpoint_generation_config: Any = None) -> tuple[int, ...]:
    """The tokenizer's EOS plus the checkpoint's declared ``eos_token_id`` (int or list), sorted."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    declared = getattr(checkpoint_generation_config, "eos_token_id", None)
    for value in (declared if isinstance(declared, (list, tuple)) else [declared]):
        if value is not None:
            ids.add(int(value))
    return tuple(sorted(ids))


def checkpoint_generation_config(model_path: str, revision: str | None = None) -> Any:
    """The checkpoint's generation_config.json (for its EOS ids only), or None when it has none."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model_path, revision=revision)
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- transformers

def hf_generation_config(spec: SamplingSpec, *, pad_token_id: int, bos_token_id: int | None = None,
                         num_return_sequences: int = 1, **outputs: Any) -> Any:
    """A GenerationConfig from scratch: only temperature/top-p (and the top-k / min-p the spec turns on) or argmax.

    ``outputs``: return-format options only (``output_scores``, ``return_dict_in_generate``)."""
    from transformers import GenerationConfig

    unknown = set(outputs) - {"output_scores", "return_dict_in_generate", "output_logits"}
    if unknown:
        raise ValueError(f"hf_generation_config: not a return-format option: {sorted(unknown)}")
    return GenerationConfig(
        do_sample=not spec.greedy, temperature=1.0 if spec.greedy else float(spec.temperature),
        top_p=1.0 if spec.greedy else float(spec.top_p), max_new_tokens=int(spec.max_tokens),
        num_return_sequences=num_return_sequences, eos_token_id=list(spec.eos_token_ids),
        pad_token_id=int(pad_token_id), bos_token_id=bos_token_id, **_hf_neutral(spec), **outputs)


def _hf_neutral(spec: SamplingSpec) -> dict[str, Any]:
    """Every logits-processor field at its neutral value (the spec's cuts on); greedy: without the
    sampling-only ones."""
    fields = {**_HF_NEUTRAL, **spec.filters()}
    return {k: v for k, v in fields.items() if k not in _HF_SAMPLING_ONLY} if spec.greedy else fields


@contextmanager
def _generation_defaults(model: Any, gen_config: Any) -> Iterator[None]:
    """Make ``gen_config`` the model's defaults for the call, so nothing falls back to the checkpoint."""
    saved = model.generation_config
    model.generation_config = gen_config
    try:
        yield
    finally:
        model.generation_config = saved


def hf_generate(model: Any, gen_config: Any, **inputs: Any) -> Any:
    """``model.generate(**inputs, generation_config=gen_config)`` with the checkpoint's defaults out."""
    with _generation_defaults(model, gen_config):
        return model.generate(**inputs, generation_config=gen_config)


def hf_effective_sampling(model: Any, gen_config: Any) -> dict[str, Any]:
    """What ``hf_generate`` will sample with, read back from transformers' own resolution of
    ``gen_config`` (fields) and the logits processors it builds from it (names, in order)."""
    from transformers.generation import LogitsProcessorList

    with _generation_defaults(model, gen_config):
        effective = model._prepare_generation_config(gen_config)[0]
        record: dict[str, Any] = {k: getattr(effective, k, None) for k in _HF_RECORDED}
        try:
            processors = model._get_logits_processor(
                generation_config=effective, input_ids_seq_length=1, encoder_input_ids=None,
                prefix_allowed_tokens_fn=None, logits_processor=LogitsProcessorList(), device="cpu")
            record["logits_processors"] = [type(p).__name__ for p in processors]
        except (TypeError, AttributeError):  # a transformers without this internal signature
            record["logits_processors"] = None
    return record


# --------------------------------------------------------------------------- vLLM

def vllm_sampling_params(sampling_params_cls: Any, spec: SamplingSpec, *, n: int, seed: int | None,
                         skip_special_tokens: bool = True, logprobs: int | None = None) -> Any:
    """``SamplingParams`` with every processor spelled out neutral (top-k 0 = off in vLLM >= 0.8)."""
    return sampling_params_cls(
        n=n, temperature=0.0 if spec.greedy else float(spec.temperature),
        top_p=1.0 if spec.greedy else float(spec.top_p), **{"top_k": 0, "min_p": 0.0, **spec.filters()},
        presence_penalty=0.0,
        frequency_penalty=0.0, repetition_penalty=1.0, max_tokens=int(spec.max_tokens), min_tokens=0,
        stop_token_ids=list(spec.eos_token_ids), ignore_eos=False, bad_words=None, logit_bias=None,
        allowed_token_ids=None, seed=seed, skip_special_tokens=skip_special_tokens, logprobs=logprobs,
        stop=list(spec.stop) or None, include_stop_str_in_output=False)


def vllm_effective_sampling(params: Any, llm: Any = None) -> dict[str, Any]:
    """The fields of a SamplingParams, plus the defaults the engine would take from the checkpoint
    (``{}`` with ``generation_config="vllm"``)."""
    record: dict[str, Any] = {k: getattr(params, k, None) for k in _VLLM_RECORDED}
    model_config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
    if model_config is not None:
        record["engine_generation_config"] = getattr(model_config, "generation_config", None)
        record["engine_default_sampling"] = model_config.get_diff_sampling_param()
    return record


# --------------------------------------------------------------------------- OpenAI-compatible API

# Sampling fields outside the OpenAI API that vLLM and SGLang servers read from the request body
# (top_k -1 = off in every vLLM version and in SGLang); OpenAI's own API rejects them.
SERVER_NEUTRAL_FIELDS: dict[str, Any] = {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}


def server_sampling_fields(spec: SamplingSpec) -> dict[str, Any]:
    """``SERVER_NEUTRAL_FIELDS`` with the spec's top-k / min-p when on."""
    return {**SERVER_NEUTRAL_FIELDS, **spec.filters()}


def openai_sampling_body(spec: SamplingSpec) -> dict[str, Any]:
    """The OpenAI-API sampling fields of a request body, every one explicit, because a server fills
    what a request omits from its own defaults (vLLM: the model's generation_config.json). The
    server-side extras (``SERVER_NEUTRAL_FIELDS``) travel in the client's ``extra_body``."""
    return {"temperature": 0.0 if spec.greedy else float(spec.temperature),
            "top_p": 1.0 if spec.greedy else float(spec.top_p), "max_tokens": int(spec.max_tokens),
            "presence_penalty": 0.0, "frequency_penalty": 0.0, **({"stop": list(spec.stop)} if spec.stop else {})}
