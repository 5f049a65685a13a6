"""The TRL engine on TWO processes (accelerate launch, gloo on CPU; a group straddles the ranks)
computes the loss and, after TRL's gradient all-reduce, the gradients of the independent reference
of docs/ALGORITHMS.md (tests/helpers/spec_reference.py) evaluated on the WHOLE batch, at every optimizer
update of a real ``Trainer.train`` step: AdamW with a large learning rate between the two PPO epochs,
so the second update sees importance ratios far from 1 (both clip sides active).

The worker (tests/helpers/trl_reference_worker.py) records, per optimizer step, the parameters, the reduced
gradients, the rows each rank trained on and its micro-batch losses. The reference starts from the
verifier verdicts and the diversity scores (Eq. 9, Eq. 15); Eq. 1-6, 10-14, 16-17 are recomputed.
The DDP objective is (1/world) * sum of what every rank back-propagates (the all-reduce averages),
so a missing x world factor or a wrong cross-rank average shows in both the loss and the gradients."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers import spec_reference as R
from helpers.trl_engine_helpers import launch_two_processes, reference_shaping

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "helpers" / "trl_reference_worker.py"


def _launch(model_dir: Path, train: Path, out: Path, algo: str, mode: str) -> list[dict]:
    launch_two_processes(WORKER, str(model_dir), str(train), str(out), algo, mode, timeout=600)
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]
    assert [d["world"] for d in ranks] == [2, 2]
    return [d["updates"] for d in ranks]


# dsdr and darling in two aggregation modes each, grpo and dapo in their defaults
CASES = [("dsdr", "default"), ("dsdr", "token-mean"), ("darling", "default"), ("darling", "seq-mean-token-sum-norm"),
         ("grpo", "default"), ("dapo", "default")]


@pytest.mark.slow
@pytest.mark.parametrize(("algo", "mode"), CASES)
def test_trl_two_processes_equal_the_reference(algo, mode, tiny_model_dir, train_data_dir, tmp_path):
    from dsdr_train.integrations.trl.run import build_trainer
    from dsdr_train.rollout import RolloutBatch
    from helpers.trl_reference_worker import config

    train = train_data_dir / "gsm8k_train.jsonl"
    per_rank = _launch(tiny_model_dir, train, tmp_path, algo, mode)
    assert len(per_rank[0]) == len(per_rank[1]) == 2  # one mini-batch x 2 PPO epochs
    cfg = config(algo, mode, str(tiny_model_dir), str(train), tmp_path / "one")
    trainer = build_trainer(cfg, model_path=str(tiny_model_dir), run_dir=tmp_path / "one")  # problems, encoder
    s = R.spec(algo)

    # the whole batch: every row of the first update (one mini-batch = the step), both ranks
    rows = sorted(per_rank[0][0]["rows"] + per_rank[1][0]["rows"], key=lambda t: t[0])
    groups_of = [{g for g, *_ in u[0]["rows"]} for u in [per_rank[0], per_rank[1]]]
    assert groups_of[0] & groups_of[1], groups_of  # a group straddles the two ranks
    batch = RolloutBatch()
    prompt_index = {tuple(ids): i for i, ids in enumerate(trainer.setup.prompt_ids.values())}
    eos = set(trainer.eos_token_ids)
    for g, _, p, o in rows:
        batch.prompt_ids.append(p), batch.response_ids.append(o), batch.group_ids.append(g)
        batch.texts.append(trainer.processing_class.decode(o, skip_special_tokens=True))
        batch.finish_reasons.append("stop" if o and o[-1] in eos else "length")
        batch.problem_idx.append(prompt_index[tuple(p)])
    assert len(batch) == cfg.prompts_per_step * cfg.group_size
    acc, advantages, weights, kept = reference_shaping(s, batch, trainer, cfg)
    assert {g for g, k, *_ in rows if k} == kept  # the engine drops exactly the spec's groups (§2)
    index = {(g, tuple(o)): i for i, (g, _, _, o) in enumerate(rows)}

    model = type(trainer.model).from_pretrained(str(tiny_model_dir)).eval()
    params = list(model.parameters())
    with torch.no_grad():
        for p, v in zip(params, per_rank[0][0]["params"]):
            p.copy_(v)
        old = [R.token_log_probs(model, p, o, cfg.temperature) for p, o in zip(batch.prompt_ids, batch.response_ids)]
    worst_grad, worst_loss, ratio_min, ratio_max = 0.0, 0.0, float("inf"), 0.0
    for u0, u1 in zip(*per_rank):
        for a, b in zip(u0["grads"], u1["grads"]):  # the all-reduce left both ranks the same gradient
            assert torch.equal(a, b)
        used = [index[(g, tuple(o))] for g, k, _, o in u0["rows"] + u1["rows"] if k]
        with torch.no_grad():
            for p, v in zip(params, u0["params"]):
                p.copy_(v)
        logp = [R.token_log_probs(model, batch.prompt_ids[i], batch.response_ids[i], cfg.temperature) for i in used]
        loss = R.mini_batch_loss(s, cfg.objective.loss_agg_mode, logp, [old[i] for i in used],
                                 [advantages[i] for i in used], [weights[i] for i in used], [acc[i] for i in used],
                                 n_prompts=len({batch.group_ids[i] for i in used}), max_len=cfg.max_response_length)
        ref = torch.autograd.grad(loss, params, allow_unused=True)
        ref_flat = torch.cat([(g if g is not None else torch.zeros_like(p)).flatten() for g, p in zip(ref, params)])
        ours = torch.cat([g.flatten() for g in u0["grads"]])
        worst_grad = max(worst_grad, float((ours - ref_flat).norm() / ref_flat.norm()))
        shares = sum(u0["losses"]) + sum(u1["losses"])  # each rank's micro-batch shares of the whole loss
        ddp = (sum(u0["returned"]) + sum(u1["returned"])) / 2  # what the averaged gradients descend
        scale = max(abs(float(loss)), 1e-3)
        worst_loss = max(worst_loss, abs(shares - float(loss)) / scale, abs(ddp - float(loss)) / scale)
        with torch.no_grad():
            for k, i in enumerate(used):
                ratio = torch.exp(logp[k] - old[i])
                ratio_min, ratio_max = min(ratio_min, float(ratio.min())), max(ratio_max, float(ratio.max()))
    print(f"trl-2proc {algo} {mode}: grad rel err {worst_grad:.2e}, loss rel err {worst_loss:.2e}, "
          f"ratios {ratio_min:.3f}..{ratio_max:.3f}")
    assert worst_grad < 1e-4 and worst_loss < 1e-4, (algo, mode, worst_grad, worst_loss, ratio_min, ratio_max)
    assert ratio_max > 1.5 and ratio_min < 0.7, (ratio_min, ratio_max)
