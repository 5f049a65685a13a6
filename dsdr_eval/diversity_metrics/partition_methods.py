"""Build a DARLING partition's pair equivalence by name: ``--partition METHOD[:ARGUMENT]``.

This module sits above both ``dsdr_eval.diversity_metrics`` (embedding, classifier, answer-formula) and
``dsdr_eval.llm_judge`` (the LLM judge): neither imports it, so building a method never closes an
import circle, and no method registers itself as a side effect of being imported. The table
``EQUIVALENCES`` holds one builder per method, all with one signature
``builder(argument: str | None, options: EquivalenceOptions) -> Equivalence``; the heavy
pieces (transformers for a classifier, the openai client for a judge) load inside the builder.

    make_equivalence("embedding:0.85")
    make_equivalence("classifier:PATH", device="cuda")
    make_equivalence("judge", judge_model="MODEL", judge_endpoint={"base_urls": [URL], "max_concurrency": 8})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dsdr_eval.equivalence import Equivalence
from dsdr_eval.errors import DsdrError


@dataclass(frozen=True)
class EquivalenceOptions:
    """What a builder may use; each takes the fields it needs and ignores the others."""

    threshold: float | None = None   # embedding: cosine threshold (0.9); classifier: P(similar) (0.5)
    encoder: Any = None              # embedding: the encoder for groups given without embeddings
    device: str = "cpu"              # classifier: torch device
    judge_model: str | None = None   # judge: the served model (or --partition judge:MODEL)
    # judge: EndpointConfig fields other than the model (base_urls, api_key_env, max_concurrency,
    # max_retries, timeout_s, backoff_base_s); base_urls default to $OPENAI_BASE_URL, else OpenAI's API.
    judge_endpoint: Mapping[str, Any] = field(default_factory=dict)
    judge_pair: Any = None           # judge: a JudgePairSettings (None = its defaults)
    judge_cache_dir: Any = None      # judge: where judge_cache.jsonl caches pair decisions (None = no cache)
    progress: bool | None = False    # judge: a progress bar per batch of pairs
    extraction: str = "boxed"        # answer-formula: profile for groups given without answer classes


EquivalenceBuilder = Callable[[str | None, EquivalenceOptions], Equivalence]
EQUIVALENCES: dict[str, EquivalenceBuilder] = {}


def register_equivalence(name: str) -> Callable[[EquivalenceBuilder], EquivalenceBuilder]:
    """Add ``builder(argument, options) -> Equivalence`` under ``name`` (``--partition NAME:ARGUMENT``
    calls it with ARGUMENT, None without a colon). The built-in methods are registered below."""

    def decorator(builder: EquivalenceBuilder) -> EquivalenceBuilder:
        EQUIVALENCES[name] = builder
        return builder

    return decorator


@register_equivalence("embedding")
def _embedding(argument: str | None, options: EquivalenceOptions) -> Equivalence:
    from dsdr_eval.diversity_metrics.partition import DEFAULT_COSINE_THRESHOLD, EmbeddingThresholdEquivalence

    threshold = options.threshold
    if argument:  # "embedding:0.85" is accepted as a threshold too
        try:
            threshold = float(argument)
        except ValueError:
            raise DsdrError(f"--partition embedding:{argument}: expected a number") from None
    return EmbeddingThresholdEquivalence(DEFAULT_COSINE_THRESHOLD if threshold is None else threshold,
                                         encoder=options.encoder)


@register_equivalence("classifier")
def _classifier(argument: str | None, options: EquivalenceOptions) -> Equivalence:
    from dsdr_eval.diversity_metrics.partition import CLASSIFIER_PROBABILITY_THRESHOLD, PairClassifierEquivalence

    if not argument:
        raise DsdrError("--partition classifier:PATH needs the path of the classifier")
    threshold = CLASSIFIER_PROBABILITY_THRESHOLD if options.threshold is None else options.threshold
    return PairClassifierEquivalence(argument, device=options.device, probability_threshold=threshold)


@register_equivalence("answer-formula")
def _answer_formula(argument: str | None, options: EquivalenceOptions) -> Equivalence:
    from dsdr_eval.diversity_metrics.partition import AnswerFormulaEquivalence

    return AnswerFormulaEquivalence(options.extraction)


@register_equivalence("judge")
def _judge(argument: str | None, options: EquivalenceOptions) -> Equivalence:
    """``--partition judge`` (model from ``--judge-model``) or ``--partition judge:MODEL``.
    No request is sent here."""
    from dsdr_eval.llm_judge.cache import JudgeCache
    from dsdr_eval.llm_judge.equivalence import JudgeEquivalence
    from dsdr_eval.openai_api.client import EndpointConfig, OpenAICompatClient, resolve_base_urls

    if argument and options.judge_model and argument != options.judge_model:
        raise DsdrError(f"--partition judge:{argument} and --judge-model {options.judge_model} name different models")
    model = options.judge_model or argument
    if not model:
        raise DsdrError("--partition judge needs the judge's model: --judge-model MODEL (or --partition judge:MODEL)")
    endpoint = dict(options.judge_endpoint)
    config = EndpointConfig(base_urls=resolve_base_urls(endpoint.pop("base_urls", None)), model=model, **endpoint)
    cache = JudgeCache(options.judge_cache_dir) if options.judge_cache_dir is not None else None
    return JudgeEquivalence(OpenAICompatClient(config), options.judge_pair, progress=options.progress, cache=cache)


def check_partition_spec(spec: str) -> tuple[str, str | None]:
    """(method, argument) of a ``--partition`` spec; DsdrError for an unknown method.
    Cheap: lets a command fail before it loads any model."""
    name, _, argument = spec.partition(":")
    if name not in EQUIVALENCES:
        raise DsdrError(f"--partition {spec}: unknown method {name!r} (known: {', '.join(sorted(EQUIVALENCES))})")
    return name, argument or None


def make_equivalence(spec: str | Equivalence, **options: Any) -> Equivalence:
    """An ``Equivalence`` from a ``--partition`` spec (an ``Equivalence`` is returned as it is);
    ``options`` are the fields of ``EquivalenceOptions``."""
    if isinstance(spec, Equivalence):
        return spec
    name, argument = check_partition_spec(spec)
    try:
        settings = EquivalenceOptions(**options)
    except TypeError as exc:
        raise TypeError(f"make_equivalence({spec!r}): {exc}") from None
    return EQUIVALENCES[name](argument, settings)


__all__ = ["EQUIVALENCES", "EquivalenceOptions", "check_partition_spec", "make_equivalence", "register_equivalence"]
