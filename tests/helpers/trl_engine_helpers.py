"""Fixed rollouts injected into the TRL engine instead of generated, and the compact trainer's
reference update on the same rollouts (shared by tests/test_trl_engine*.py and the 2-process
worker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dsdr_train.rollout import RolloutBatch

# Per group: which completions are correct (True) / wrong (False); texts differ in formulas so
# D_eq and D_emb vary within a group. A mixed group, an all-correct one (only the bonus gives
# signal there), an all-wrong one and a mixed one with a single correct rollout.
PATTERNS = ((True, False, True, False), (True, True, True, True), (False, False, False, False),
            (False, True, False, False))
_CORRECT = ("So $x = 2$ and the answer is \\boxed{{{a}}}.", "\\boxed{{{a}}}", "We have $y^2 = 4$, hence \\boxed{{{a}}}",
            "Adding \\[3 + 4 = 7\\] gives \\boxed{{{a}}} in the end")
_WRONG = ("The answer is \\boxed{{{w}}}.", "I think $z = 1$ so \\boxed{{{w}}}", "Not sure at all, maybe",
          "Compute \\[1+1\\] then \\boxed{{{w}}}")


def completion_texts(answer: str, pattern: tuple[bool, ...]) -> list[str]:
    wrong = f"{answer}1"
    return [(_CORRECT if ok else _WRONG)[k % 4].format(a=answer, w=wrong) for k, ok in enumerate(pattern)]


class FixedRollouts:
    """``_generate_single_turn`` replacement: the rollout at position k of its group gets problem
    ``pi``'s k-th fixed completion (token ids of the text, EOS appended on even k, cut at
    ``max_len``). TRL's layout puts group g at global rows g*G..g*G+G-1 (process-major), so the
    position is (row_offset + local row) % G, with row_offset = process index * rows per process."""

    def __init__(self, tokenizer: Any, answers: list[str], prompt_to_problem: dict[tuple[int, ...], int],
                 max_len: int, group_size: int, row_offset: int = 0) -> None:
        self.tokenizer, self.prompt_to_problem = tokenizer, prompt_to_problem
        self.group_size, self.row_offset = group_size, row_offset
        self.ids: dict[int, list[list[int]]] = {}
        for pi, answer in enumerate(answers):
            out = []
            for k, text in enumerate(completion_texts(answer, PATTERNS[pi % len(PATTERNS)])):
                ids = tokenizer(text, add_special_tokens=False)["input_ids"]
                if k % 2 == 0:
                    ids = ids + [tokenizer.eos_token_id]
                out.append(ids[:max_len])
            self.ids[pi] = out

    def __call__(self, prompt_ids: list[list[int]], *_: Any, **__: Any) -> tuple[list[list[int]], None]:
        out = []
        for i, p in enumerate(prompt_ids):
            k = (self.row_offset + i) % self.group_size
            out.append(list(self.ids[self.prompt_to_problem[tuple(p)]][k]))
        return out, None


def inject(trainer: Any) -> FixedRollouts:
    setup = trainer.setup
    fixed = FixedRollouts(trainer.processing_class, [p.answer for p in setup.problems],
                          {tuple(ids): int(i) for i, ids in enumerate(setup.prompt_ids.values())},
                          setup.cfg.max_response_length, setup.cfg.group_size,
                          trainer.accelerator.process_index * setup.geometry.rows_per_process)
    trainer._generate_single_turn = fixed
    return fixed


def batch_from_trl(trainer: Any, chunks: list[dict[str, Any]]) -> RolloutBatch:
    """The rollouts TRL trained on, rebuilt as the compact trainer's RolloutBatch (whole groups,
    in TRL's generation order; single process)."""
    rows = []
    for c in chunks:
        for r in range(len(c["advantages"])):
            p = c["prompt_ids"][r][c["prompt_mask"][r].bool()].tolist()
            o = c["completion_ids"][r][c["completion_mask"][r].bool()].tolist()
            rows.append((c["dsdr_group_ids"][r], p, o))
    rows.sort(key=lambda t: t[0])  # stable: rows of a group keep their order
    tok = trainer.processing_class
    eos = set(trainer.eos_token_ids)
    prompt_index = {tuple(ids): i for i, ids in enumerate(trainer.setup.prompt_ids.values())}
    batch = RolloutBatch()
    for g, p, o in rows:
        batch.prompt_ids.append(p)
        batch.response_ids.append(o)
        batch.texts.append(tok.decode(o, skip_special_tokens=True))
        batch.finish_reasons.append("stop" if o and o[-1] in eos else "length")
        batch.group_ids.append(int(g))
        batch.problem_idx.append(prompt_index[tuple(p)])
    return batch


class RecordingSGD(torch.optim.SGD):
    """lr 0 (the weights never move) and a copy of every update's gradients."""

    def __init__(self, params: Any) -> None:
        super().__init__(params, lr=0.0)
        self.grads: list[list[torch.Tensor]] = []

    def step(self, closure: Any = None) -> Any:
        self.grads.append([p.grad.detach().clone() for g in self.param_groups for p in g["params"]])
        return super().step(closure)


def compact_update(cfg: Any, model_dir: Path, batch: RolloutBatch, diversity: Any, graded: list[dict], pad_id: int
                   ) -> tuple[Any, Any, Any]:
    """The compact trainer on ``batch``: (UpdateStats, per-update gradients, ShapedRewards), the
    weights held fixed (lr 0) so every update's gradient is comparable."""
    import numpy as np

    from dsdr_train.distributed import Dist
    from dsdr_train.modeling import load_policy, load_reference
    from dsdr_train.shaping import shape_batch
    from dsdr_train.update import UpdateContext, ppo_update

    policy = load_policy(str(model_dir), torch.float32, disable_dropout=True)
    ref = load_reference(str(model_dir), torch.float32, torch.device("cpu")) if cfg.objective.use_kl else None
    opt = RecordingSGD(policy.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda u: 1.0)
    acc = np.array([float(r["correct"]) for r in graded])
    shaped, _ = shape_batch(cfg, batch, graded, acc, diversity)
    ctx = UpdateContext(cfg, policy, policy, ref, opt, sched, Dist(), torch.device("cpu"), pad_id)
    stats = ppo_update(ctx, batch, shaped, 0)
    return stats, opt.grads, shaped


CPU_2PROC = Path(__file__).resolve().parents[2] / "dsdr_train" / "configs" / "accelerate" / "cpu_2proc.yaml"


def launch_two_processes(worker: Path, *args: str, timeout: float) -> None:
    """``accelerate launch`` of a test worker on two CPU processes (gloo), one thread each."""
    import os
    import subprocess
    import sys

    from helpers.net_helpers import free_port

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CPU_2PROC),
           "--main_process_port", str(free_port()), str(worker), *args]
    subprocess.run(cmd, env=env, check=True, timeout=timeout)


def reference_shaping(spec: Any, batch: RolloutBatch, trainer: Any, cfg: Any) -> tuple[list, Any, Any, set]:
    """Correctness, and the independent reference's advantages, coupling weights and kept groups
    (tests/helpers/spec_reference.py) for a whole batch, from the engines' own grading and diversity scores
    (the measured inputs)."""
    from helpers import spec_reference as R
    from dsdr_train import scoring

    graded = scoring.grade(batch, trainer.setup.problems, cfg)
    acc = [float(r["correct"]) for r in graded]
    diversity = list(scoring.group_diversity(batch, graded, trainer.setup.diversity.encoder, cfg.formula_rules,
                                                cfg.solution_cut)[2]) if spec.bonus or spec.lambda_l \
        else [0.0] * len(batch)
    div = list(scoring.darling_diversity(batch, graded, trainer.setup.diversity.equivalence, cfg)) if spec.darling else [1.0] * len(batch)
    lengths = [len(o) for o in batch.response_ids]
    _, advantages, weights = R.rewards_advantages_weights(spec, batch.group_ids, acc, lengths, cfg.max_response_length,
                                                          diversity, div)
    return acc, advantages, weights, R.kept_groups(spec, batch.group_ids, acc)
