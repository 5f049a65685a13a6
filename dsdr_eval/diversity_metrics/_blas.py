"""Run small dense linear algebra single-threaded.

The per-group matrices here are tiny ([64, 384] products, [64, 64] eigenproblems). A
multi-threaded BLAS gains nothing on them and, on a loaded machine (or next to torch's own
thread pool), loses a lot: measured on the 2-core dev box under load, a 64x384 float64 Gram
product took 41 ms with 2 OpenBLAS threads and 0.2 ms with one.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any


@functools.lru_cache(maxsize=1)
def _controller() -> Any:
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # optional: without it the BLAS keeps its default thread count
        return None
    return ThreadpoolController()


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    controller = _controller()
    if controller is None:
        yield
        return
    with controller.limit(limits=1, user_api="blas"):
        yield
