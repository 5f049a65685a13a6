"""A deterministic fake sentence encoder for diversity tests (no model to load)."""

from __future__ import annotations

import zlib

import numpy as np


class BagOfWordsEncoder:
    """Hashed word counts in ``dim`` dimensions: texts with the same words embed alike."""

    def __init__(self, dim: int = 32) -> None:
        self.dim = dim

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim))
        for i, text in enumerate(texts):
            for word in text.split():
                out[i, zlib.crc32(word.encode()) % self.dim] += 1.0
        return out
