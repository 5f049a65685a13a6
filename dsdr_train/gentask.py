"""Generated verifiable tasks with a short derivation (the ablation study's task, docs/ablation_study.md).

Each design writes few-shot completion prompts (``template=plain``, ``prompt_mode=raw``: SmolLM2-135M
continues a pattern but rarely boxes an answer in chat, reports/mini_experiment/README.md) whose worked
examples carry ``$...$`` equations before ``\\boxed{}``, so a correct completion has a derivation and
D_eq (formula uniqueness, docs/ALGORITHMS.md §3.1 Eq. 8) and D_emb can differ between correct answers.
Study design 3's candidates (sum3, sum3s, distrib, times, add1c, timesr) show a different solution route
(or form) in each of their two examples; ``timesr`` was chosen by measurement (docs/ablation_study.md
"Design 3").

Deterministic by seed; train and held-out problems are disjoint by their operand tuple, checked by
:func:`check_disjoint` (also on files, ``python -m dsdr_train.gentask --check DIR``).

    python -m dsdr_train.gentask --design linear --seed 0 --out reports/ablation_study/data
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Item:
    key: tuple[int, ...]  # the operands: the identity used for disjointness
    question: str
    answer: int


def _linear(rng: random.Random) -> Item:
    """a*x + b = c, x integer: two steps (subtract b, divide by a)."""
    a, x, b = rng.randint(2, 9), rng.randint(2, 12), rng.randint(1, 20)
    return Item((a, x, b), f"Solve ${a}x + {b} = {a * x + b}$.", x)


def _paren(rng: random.Random) -> Item:
    """(a + b) * c: two steps (sum, product)."""
    a, b, c = rng.randint(2, 19), rng.randint(2, 19), rng.randint(2, 9)
    return Item((a, b, c), f"Compute $({a} + {b}) \\times {c}$.", (a + b) * c)


def _word(rng: random.Random) -> Item:
    """a + b*c in words: two steps (product, sum)."""
    a, b, c = rng.randint(2, 20), rng.randint(2, 6), rng.randint(2, 9)
    return Item((a, b, c), f"Sam has {a} apples and buys {b} bags of {c} apples. How many apples does Sam have?",
                a + b * c)


def _add(rng: random.Random) -> Item:
    """a + b: one step. Measured for study design 2 and not chosen (docs/ablation_study.md): the base model
    carries wrongly into the tens digit (10 + 3 = 43), 28 % correct at T = 1.0."""
    a, b = rng.randint(2, 50), rng.randint(2, 9)
    return Item((a, b), f"Compute ${a} + {b}$.", a + b)


def _add_nc(rng: random.Random) -> Item:
    """a + b without a carry (the tens digit of a is the answer's). Measured for study design 2 and not chosen
    (docs/ablation_study.md): the base model adds 10 to the tens digit (72 + 2 = 84), 3 % correct at T =
    1.0."""
    a = rng.randint(10, 98)
    if a % 10 == 9:
        a -= 1  # a units digit of 9 leaves no b without a carry
    b = rng.randint(1, 9 - a % 10)
    return Item((a, b), f"Compute ${a} + {b}$.", a + b)


def _add1(rng: random.Random) -> Item:
    """a + b, one digit each: study design 2's task (docs/ablation_study.md), easy enough for SmolLM2-135M that
    groups of 8 are all correct from the first steps, which DSDR's global term needs. 81 problems in all."""
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return Item((a, b), f"Compute ${a} + {b}$.", a + b)


def _sum3(rng: random.Random) -> Item:
    """a + b + c, one digit each: two routes (a + b first, or b + c first); study design 3
    (docs/ablation_study.md)."""
    a, b, c = rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 9)
    return Item((a, b, c), f"Compute ${a} + {b} + {c}$.", a + b + c)


def _sum3s(rng: random.Random) -> Item:
    """a + b + c, each 1..5 (125 problems): sum3 with sums the 135M model gets right more often; study design 3
    candidate."""
    a, b, c = rng.randint(1, 5), rng.randint(1, 5), rng.randint(1, 5)
    return Item((a, b, c), f"Compute ${a} + {b} + {c}$.", a + b + c)


def _add1c(rng: random.Random) -> Item:
    """a + b, one digit each (add1's 81 problems); the worked examples add in either order (a + b, or the larger
    first), two formula forms of one route; study design 3 candidate."""
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return Item((a, b), f"Compute ${a} + {b}$.", a + b)


def _timesr(rng: random.Random) -> Item:
    """a * b, a 2..4, b 2..12 (33 problems): times with the repeated-addition example last, the one the 135M
    model copies most (measured on times: it copied the last example's form); study design 3 candidate."""
    a, b = rng.randint(2, 4), rng.randint(2, 12)
    return Item((a, b), f"Compute ${a} \\times {b}$.", a * b)


def _distrib(rng: random.Random) -> Item:
    """a * (b + c), small operands: two routes (sum then product, or distribute); study design 3 candidate."""
    a, b, c = rng.randint(2, 5), rng.randint(1, 5), rng.randint(1, 5)
    return Item((a, b, c), f"Compute ${a} \\times ({b} + {c})$.", a * (b + c))


def _times(rng: random.Random) -> Item:
    """a * b, a small: two routes (repeated addition, or the product); study design 3 candidate. 40 problems."""
    a, b = rng.randint(2, 5), rng.randint(2, 11)
    return Item((a, b), f"Compute ${a} \\times {b}$.", a * b)


# Two worked examples per design; each answer is its equations then the boxed result. Design 3's designs
# (sum3, distrib, times) show a different route in each example, so the base model samples both.
FEW_SHOT = {
    "linear": ("Q: Solve $3x + 4 = 19$.\nA: $3x = 19 - 4 = 15$, so $x = 15 / 3 = 5$. \\boxed{5}\n"
               "Q: Solve $2x + 7 = 13$.\nA: $2x = 13 - 7 = 6$, so $x = 6 / 2 = 3$. \\boxed{3}\n"),
    "paren": ("Q: Compute $(3 + 4) \\times 5$.\nA: $3 + 4 = 7$, then $7 \\times 5 = 35$. \\boxed{35}\n"
              "Q: Compute $(6 + 2) \\times 3$.\nA: $6 + 2 = 8$, then $8 \\times 3 = 24$. \\boxed{24}\n"),
    "word": ("Q: Sam has 4 apples and buys 3 bags of 5 apples. How many apples does Sam have?\n"
             "A: $3 \\times 5 = 15$, then $4 + 15 = 19$. \\boxed{19}\n"
             "Q: Sam has 7 apples and buys 2 bags of 6 apples. How many apples does Sam have?\n"
             "A: $2 \\times 6 = 12$, then $7 + 12 = 19$. \\boxed{19}\n"),
    "add": ("Q: Compute $14 + 5$.\nA: $14 + 5 = 19$. \\boxed{19}\n"
            "Q: Compute $23 + 8$.\nA: $23 + 8 = 31$. \\boxed{31}\n"),
    "add1": ("Q: Compute $3 + 4$.\nA: $3 + 4 = 7$. \\boxed{7}\n"
             "Q: Compute $5 + 8$.\nA: $5 + 8 = 13$. \\boxed{13}\n"),
    "sum3": ("Q: Compute $3 + 4 + 6$.\nA: $4 + 6 = 10$, then $3 + 10 = 13$. \\boxed{13}\n"
             "Q: Compute $5 + 2 + 7$.\nA: $5 + 2 = 7$, then $7 + 7 = 14$. \\boxed{14}\n"),
    "sum3s": ("Q: Compute $2 + 4 + 1$.\nA: $4 + 1 = 5$, then $2 + 5 = 7$. \\boxed{7}\n"
              "Q: Compute $3 + 1 + 5$.\nA: $3 + 1 = 4$, then $4 + 5 = 9$. \\boxed{9}\n"),
    "add1c": ("Q: Compute $3 + 4$.\nA: $3 + 4 = 7$. \\boxed{7}\n"
              "Q: Compute $5 + 8$.\nA: $8 + 5 = 13$. \\boxed{13}\n"),
    "timesr": ("Q: Compute $2 \\times 7$.\nA: $2 \\times 7 = 14$. \\boxed{14}\n"
               "Q: Compute $3 \\times 4$.\nA: $4 + 4 + 4 = 12$. \\boxed{12}\n"),
    "distrib": ("Q: Compute $3 \\times (2 + 4)$.\nA: $2 + 4 = 6$, then $3 \\times 6 = 18$. \\boxed{18}\n"
                "Q: Compute $2 \\times (5 + 3)$.\nA: $2 \\times 5 = 10$ and $2 \\times 3 = 6$, then $10 + 6 = 16$. "
                "\\boxed{16}\n"),
    "times": ("Q: Compute $3 \\times 4$.\nA: $4 + 4 + 4 = 12$. \\boxed{12}\n"
              "Q: Compute $2 \\times 7$.\nA: $2 \\times 7 = 14$. \\boxed{14}\n"),
    "add_nc": ("Q: Compute $14 + 5$.\nA: $14 + 5 = 19$. \\boxed{19}\n"
               "Q: Compute $32 + 6$.\nA: $32 + 6 = 38$. \\boxed{38}\n"),
}
DESIGNS: dict[str, Callable[[random.Random], Item]] = {"linear": _linear, "paren": _paren, "word": _word,
                                                        "add": _add, "add_nc": _add_nc,
                                                        "add1": _add1, "sum3": _sum3, "sum3s": _sum3s, "add1c": _add1c,
                                                        "timesr": _timesr, "distrib": _distrib,
                                                        "times": _times}


def design_lines() -> dict[str, str]:
    """Each design's one-line description: the first sentence of its generator's docstring and an example."""
    return {name: " ".join((DESIGNS[name].__doc__ or "(undocumented)").split()).split(". ")[0].rstrip(".")
            + f"; e.g. {DESIGNS[name](random.Random(0)).question!r}" for name in sorted(DESIGNS)}


def make(design: str, seed: int, n_train: int, n_heldout: int) -> tuple[list[dict], list[dict]]:
    """Draw ``n_train + n_heldout`` distinct problems; the first go to train, the rest are held out."""
    if design not in DESIGNS:
        raise ValueError(f"unknown design {design!r}; choose from {sorted(DESIGNS)}")
    rng, gen = random.Random(seed), DESIGNS[design]
    seen: set[tuple[int, ...]] = set()
    rows: list[dict] = []
    tries = 0
    while len(rows) < n_train + n_heldout:
        tries += 1
        if tries > 100 * (n_train + n_heldout):
            raise ValueError(f"design {design!r} has too few distinct problems for {n_train + n_heldout}")
        item = gen(rng)
        if item.key in seen:
            continue
        seen.add(item.key)
        rows.append({"key": list(item.key), "problem": f"{FEW_SHOT[design]}Q: {item.question}\nA:",
                     "answer": str(item.answer)})
    train = [{"id": f"{design}-train-{i}", **r} for i, r in enumerate(rows[:n_train])]
    heldout = [{"id": f"{design}-heldout-{i}", **r} for i, r in enumerate(rows[n_train:])]
    check_disjoint(train, heldout)
    return train, heldout


def check_disjoint(train: list[dict], heldout: list[dict]) -> None:
    """Raise if a held-out problem (by operands, or by its prompt text) is also a training problem."""
    keys = {tuple(r["key"]) for r in train}
    texts = {r["problem"] for r in train}
    for r in heldout:
        if tuple(r["key"]) in keys or r["problem"] in texts:
            raise ValueError(f"held-out problem {r['id']} is also in the training split")


def _read(path: Path) -> list[dict]:
    with path.open() as fh:
        return [json.loads(line) for line in fh if line.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="designs (each: few-shot prompts, answers checked by dsdr-eval's grader):\n"
                                       + "\n".join(f"  {name:8s}{line}" for name, line in design_lines().items()))
    p.add_argument("--design", choices=sorted(DESIGNS), default="linear", help="the task (listed below; default linear)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-train", type=int, default=256)
    p.add_argument("--n-heldout", type=int, default=64)
    p.add_argument("--out", help="directory for train.jsonl and heldout.jsonl")
    p.add_argument("--check", metavar="DIR", help="only check that DIR/train.jsonl and DIR/heldout.jsonl are disjoint")
    args = p.parse_args(argv)
    try:
        if args.check:
            d = Path(args.check)
            check_disjoint(_read(d / "train.jsonl"), _read(d / "heldout.jsonl"))
            print(f"{d}: train and held-out are disjoint")
            return 0
        if not args.out:
            p.error("--out is required unless --check")
        train, heldout = make(args.design, args.seed, args.n_train, args.n_heldout)
    except (ValueError, OSError, KeyError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("heldout", heldout)):
        tmp = out / f"{name}.jsonl.tmp"  # write then rename: a killed run never leaves half a split
        with tmp.open("w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
        tmp.replace(out / f"{name}.jsonl")
    print(f"wrote {len(train)} train and {len(heldout)} held-out {args.design} problems to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
