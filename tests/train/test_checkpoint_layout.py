"""One checkpoint layout (issue 32): what ``dsdr-train`` saves is what ``dsdr-eval sweep`` finds, and both
read a training run's checkpoints/ by the same rule (``dsdr_eval.rundir.checkpoints``)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from dsdr_eval.rundir import sweepdir
from dsdr_train import checkpoint as ckpt


class _TinyModel(torch.nn.Linear):
    """A model with HF's save_pretrained (what the trainer calls): writes config.json and the weights."""

    def save_pretrained(self, path: Path, safe_serialization: bool = True) -> None:
        (Path(path) / "config.json").write_text(json.dumps({"in": self.in_features}))
        torch.save(self.state_dict(), Path(path) / "weights.pt")


class _Tokenizer:
    def save_pretrained(self, path: Path) -> None:
        (Path(path) / "tokenizer.json").write_text("{}")


def _save(run: Path, step: int) -> Path:
    model = _TinyModel(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    return ckpt.save_checkpoint(run, step=step, model=model, tokenizer=_Tokenizer(), optimizer=optimizer,
                                scheduler=scheduler, extra={})


def _train_run(root: Path) -> Path:
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"kind": "train", "algo": "dsdr", "config": {}}))
    return root


def test_what_the_trainer_saves_the_sweep_and_resume_find_by_step(tmp_path):
    run = _train_run(tmp_path / "train")
    saved = [_save(run, step) for step in (12, 3, 1_000_000)]  # out of order; a step past six digits
    steps = [3, 12, 1_000_000]
    assert [c.step for c in sweepdir.list_checkpoints(run)] == steps
    assert [c.model for c in sweepdir.list_checkpoints(run)] == sorted(saved, key=lambda p: int(p.name[5:]))
    assert ckpt.list_checkpoints(run) == [c.model for c in sweepdir.list_checkpoints(run)]
    assert ckpt.latest_checkpoint(run) == saved[2]
    assert ckpt.load_trainer_state(saved[0])["step"] == 12


def test_both_readers_skip_what_is_not_a_whole_checkpoint(tmp_path):
    run = _train_run(tmp_path / "train")
    whole = _save(run, 2)
    root = run / "checkpoints"
    hf_only = root / "step_000005"  # an HF directory without the trainer's state (a copied model)
    hf_only.mkdir()
    (hf_only / "config.json").write_text("{}")
    for name in ("step_000007.tmp", "step_7", "step_00000x", "final"):  # a save in flight; not step names
        (root / name).mkdir()
        (root / name / "config.json").write_text("{}")
        (root / name / ckpt.TRAINER_STATE).write_bytes(b"")
    (root / "step_000009").mkdir()  # killed before save_pretrained wrote config.json
    (root / "step_000009" / ckpt.TRAINER_STATE).write_bytes(b"")
    (root / "step_000011").write_text("a file")
    assert [c.step for c in sweepdir.list_checkpoints(run)] == [2, 5]  # the sweep evaluates any HF dir
    assert ckpt.list_checkpoints(run) == [whole]  # resume needs the trainer state too
