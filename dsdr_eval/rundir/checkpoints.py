"""The checkpoint layout of a training run (docs/run_directory.md "Training run"), defined once.

``dsdr-train`` writes ``RUN_DIR/checkpoints/step_XXXXXX/`` (an HF model directory, renamed into place
only once it is whole) and ``RUN_DIR/final/``; ``dsdr-eval sweep`` reads them. Both take the names and
the rule of what counts as a step checkpoint from here, so a checkpoint the trainer writes is the one
the sweep finds. No heavy import (the sweep and the dashboard read this without torch).
"""

from __future__ import annotations

import re
from pathlib import Path

from dsdr_eval.rundir.directory import CONFIG

CHECKPOINTS = "checkpoints"
FINAL = "final"
_STEP_DIR = re.compile(r"^step_(\d{6,})$")


def step_dir(run_dir: str | Path, step: int) -> Path:
    """RUN_DIR/checkpoints/step_XXXXXX/ of ``step`` (six digits at least: names sort by step)."""
    return Path(run_dir) / CHECKPOINTS / f"step_{step:06d}"


def step_checkpoints(run_dir: str | Path, *, required: tuple[str, ...] = (CONFIG,)) -> list[tuple[int, Path]]:
    """(step, directory) of every complete step checkpoint of RUN_DIR, by step: a ``step_XXXXXX``
    directory holding each of ``required`` (the HF config.json; the trainer's resume adds its state
    file). A temp or half-written directory (``step_000010.tmp``, no config.json) is not one."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir() and all((child / name).exists() for name in required):
            found.append((int(match.group(1)), child))
    return sorted(found)
