"""Generate the mini-experiment's verifiable task: two-number addition with a boxed answer.

Deterministic (seeded); train and held-out problems are disjoint. Written to
reports/mini_experiment/data/{train,heldout}.jsonl (fields id/problem/answer).

    python reports/mini_experiment/make_task.py
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

# Few-shot completion format (used with prompt_mode=raw, template=plain): SmolLM2-135M-Instruct
# almost never boxes an answer when asked in chat (measured: 0/32 at T=0.7), but it continues this
# pattern, so the verifier (dsdr_eval.grading, last \boxed{}) gets a gradable answer.
FEW_SHOT = "Q: 2 + 3 = ?\nA: \\boxed{5}\nQ: 7 + 1 = ?\nA: \\boxed{8}\n"


def make(seed: int, n_train: int, n_heldout: int, lo: int, hi: int) -> tuple[list[dict], list[dict]]:
    if (hi - lo + 1) ** 2 < n_train + n_heldout:
        raise SystemExit(f"only {(hi - lo + 1) ** 2} distinct pairs in [{lo}, {hi}]; ask for fewer problems")
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    rows: list[dict] = []
    while len(rows) < n_train + n_heldout:
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        rows.append({"problem": f"{FEW_SHOT}Q: {a} + {b} = ?\nA:", "answer": str(a + b)})
    train = [{"id": f"add-train-{i}", **r} for i, r in enumerate(rows[:n_train])]
    heldout = [{"id": f"add-heldout-{i}", **r} for i, r in enumerate(rows[n_train:])]
    return train, heldout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-train", type=int, default=96)
    p.add_argument("--n-heldout", type=int, default=48)
    p.add_argument("--low", type=int, default=1, help="smallest operand")
    p.add_argument("--high", type=int, default=12, help="largest operand (12: all 144 pairs are used)")
    p.add_argument("--out", default=str(Path(__file__).parent / "data"))
    args = p.parse_args()
    train, heldout = make(args.seed, args.n_train, args.n_heldout, args.low, args.high)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("heldout", heldout)):
        with (out / f"{name}.jsonl").open("w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
    print(f"wrote {len(train)} train and {len(heldout)} held-out problems to {out}")


if __name__ == "__main__":
    main()
