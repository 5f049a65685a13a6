"""Checkpoints: HF directories (evaluable by ``dsdr-eval run --model``) + trainer state for resume.

Layout (``dsdr_eval.rundir.checkpoints``, the one ``dsdr-eval sweep`` reads): RUN_DIR/checkpoints/
step_{step:06d}/ = save_pretrained + tokenizer + trainer_state.pt (optimizer, scheduler, RNG states,
sampler cursor, step). A checkpoint is written to a temporary sibling and renamed into place, so a
kill mid-save never leaves a half checkpoint that resume would pick up.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.checkpoints import step_checkpoints, step_dir
from dsdr_eval.rundir.directory import CONFIG, TRAIN_METRICS
from dsdr_eval.rundir.jsonl import read_jsonl, repair_truncated_tail, write_jsonl

TRAINER_STATE = "trainer_state.pt"


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _stage_hf(model: torch.nn.Module, tokenizer: Any, target: Path) -> Path:
    """save_pretrained + tokenizer into a fresh ``<target>.tmp`` directory (renamed into place later)."""
    tmp = target.with_name(target.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    return tmp


def save_hf(model: torch.nn.Module, tokenizer: Any, target: Path) -> None:
    """save_pretrained + tokenizer into ``target`` atomically (tmp dir, then rename)."""
    replace_dir(_stage_hf(model, tokenizer, target), target)


def replace_dir(tmp: Path, target: Path) -> None:
    """Put the complete directory ``tmp`` at ``target`` by renames (a kill leaves the old or the new one)."""
    if target.exists():
        old = target.with_name(target.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old)
    else:
        os.replace(tmp, target)


def save_checkpoint(run_dir: str | Path, *, step: int, model: torch.nn.Module, tokenizer: Any,
                    optimizer: torch.optim.Optimizer, scheduler: Any, extra: dict[str, Any],
                    keep_last: int = 0) -> Path:
    target = step_dir(run_dir, step)
    tmp = _stage_hf(model, tokenizer, target)
    state = {"step": step, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "rng": rng_state(), **extra}
    torch.save(state, tmp / TRAINER_STATE)
    replace_dir(tmp, target)
    if keep_last > 0:
        for old in list_checkpoints(run_dir)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    return target


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete step checkpoints a resume can start from (the trainer state too), oldest first."""
    return [path for _, path in step_checkpoints(run_dir, required=(CONFIG, TRAINER_STATE))]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


def load_trainer_state(ckpt: Path) -> dict[str, Any]:
    path = ckpt / TRAINER_STATE
    try:
        # weights_only=False: the state holds numpy/python RNG tuples we wrote ourselves.
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001
        raise DsdrError(f"{path}: cannot read trainer state ({type(exc).__name__}: {exc})") from None


def prepare_metrics_for_resume(run_dir: Path, step: int) -> int:
    """Drop metrics lines past the checkpoint step (they will be recomputed) and a torn last line.

    Returns how many lines were dropped."""
    path = run_dir / TRAIN_METRICS
    if not path.exists():
        return 0
    repair_truncated_tail(path)
    rows = read_jsonl(path)
    keep = [r for r in rows if int(r.get("step", 0)) <= step]
    if len(keep) != len(rows):
        write_jsonl(path, keep)
    return len(rows) - len(keep)
