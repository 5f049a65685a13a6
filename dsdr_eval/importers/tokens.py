"""Completion token counts of an imported run (issue 45 item 3), for its budget curve.

The source file's own count (an engine's ``usage.completion_tokens``) is kept where it has one. Where it has
none, ``import --tokenizer MODEL`` counts the completion text with the model's tokenizer (no special tokens
added), plus one for an EOS when the finish reason is ``stop`` -- the EOS is a generated token in vLLM's and
dsdr's own counts but is not in the text. A re-tokenization can differ from the engine's own ids by a token
or so where the text does not round-trip; config.json ``token_counts`` says which samples were counted how.
Without counts and without a tokenizer a benchmark gets no curve, with the reason (``dsdr_eval.scoring.budget_curve``):
characters are never passed off as tokens.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dsdr_eval.errors import DsdrError


def count_tokens(samples: list[Any], tokenizer: str | None) -> tuple[list[Any], dict[str, Any]]:
    """``samples`` with ``n_completion_tokens`` filled by ``tokenizer`` where missing, and the record of how
    they were counted (config.json ``token_counts``)."""
    missing = [i for i, s in enumerate(samples) if s.n_completion_tokens is None]
    record: dict[str, Any] = {"from_source": len(samples) - len(missing), "from_tokenizer": 0, "tokenizer": None,
                              "missing": len(missing)}
    if not missing or tokenizer is None:
        return samples, record
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(tokenizer)
    except (OSError, ValueError) as exc:
        raise DsdrError(f"--tokenizer {tokenizer}: cannot load ({exc})") from None
    counted = list(samples)
    texts = [samples[i].completion for i in missing]
    for start in range(0, len(texts), 256):  # batches: the fast tokenizer's parallel path, bounded memory
        ids = tok(texts[start:start + 256], add_special_tokens=False)["input_ids"]
        for i, row in zip(missing[start:start + 256], ids):
            eos = 1 if samples[i].finish_reason == "stop" else 0
            counted[i] = dataclasses.replace(samples[i], n_completion_tokens=len(row) + eos,
                                             absent=samples[i].absent - {"n_completion_tokens"})
    record.update(from_tokenizer=len(missing), tokenizer=tokenizer, missing=0,
                  rule="len(tokenizer(completion, add_special_tokens=False)) + 1 for an EOS (finish_reason stop)")
    return counted, record
