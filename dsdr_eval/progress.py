"""The one progress bar of the project (rich), used the same way by every long-running stage.

``progress_bar(total, description, unit=..., enabled=...)`` is a context manager yielding an object
with ``advance(n=1)``; it draws on stderr so stdout stays for results, and draws nothing when
disabled (``--no-progress``) or when ``total`` is 0.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


class _Bar:
    def __init__(self, progress=None, task=None) -> None:
        self._progress, self._task = progress, task

    def advance(self, n: int = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)


@contextmanager
def progress_bar(total: int, description: str, *, unit: str = "item", enabled: bool = True,
                 initial: int = 0) -> Iterator[_Bar]:
    """A bar counting ``initial..total`` ``unit``s; a no-op bar when disabled or empty."""
    if not enabled or total <= 0:
        yield _Bar()
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(file=sys.stderr), transient=False) as progress:
        task = progress.add_task(description, total=total, completed=initial)
        yield _Bar(progress, task)


def quiet_library_bars() -> None:
    """``--no-progress`` for the libraries' own bars too: transformers' (loading and converting weights,
    writing shards) and huggingface_hub's (downloads) tqdm bars, for the rest of the process."""
    try:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    except ImportError:
        pass
    try:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    except ImportError:
        pass
