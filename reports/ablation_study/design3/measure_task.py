"""Design 3's task choice, measured at the base model (issue 47 item 1; docs/ablation_study.md "Design 3").

For each candidate gentask design: P held-out problems x G rollouts of SmolLM2-135M-Instruct (the
project's offline alias smollm2-135m), sampled with transformers directly at T / top-p, up to MAX new
tokens, each rollout ended by the stop string (``generate(stop_strings=..., tokenizer=...)``). Writes
every rollout to OUT/<design>.jsonl and prints per design:
  * accuracy: share of rollouts whose graded answer (the last closed ``\\boxed{}``, as the grader takes it,
    compared as an integer with the gold) is correct;
  * cap: share of rollouts that ended at MAX tokens without the stop string;
  * forms: per problem, the number of distinct solution FORMS among the correct rollouts whose every
    equation is arithmetically true. A rollout's form is the sequence of its ``$...$`` formulas written
    before the graded box, each normalised (spaces dropped; ``\\times``, ``\\cdot``, ``×`` -> ``*``;
    trailing ``.``/``,`` dropped); no formula at all is the form "()";
  * routes: the same with a coarser key: the operation pattern of each equation's left side (numbers
    written ``n``) and the set of intermediate values the equations compute (the value after the last
    ``=``, the final answer removed). ``4 + 6 = 10, 3 + 10 = 13`` and ``6 + 4 = 10, 10 + 3 = 13`` are two
    forms of one route ("n+n; n+n | 10"); ``3 + 4 = 7, 7 + 6 = 13`` is another ("n+n; n+n | 7");
    ``5 \\times 2 = 10`` ("n*n |") and ``5 + 5 = 10`` ("n+n |") are two routes, ``3 + 6 = 9`` and
    ``6 + 3 = 9`` one. No formula at all is the route "no formula". Routes are the solution's path;
    forms also count commuted operands;
  * the same for a second stop rule, "\\n" (the rollout cut at its first newline, a prefix of the same
    sample, so it is a sample of generation with that stop), with its own cap share.

    OMP_NUM_THREADS=1 python reports/ablation_study/design3/measure_task.py --designs sum3 distrib times \\
        --problems 20 --rollouts 8 --out reports/ablation_study/design3/candidates
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "reports" / "ablation_study"))

from hackwatch import last_box_span  # noqa: E402

from dsdr_train import gentask  # noqa: E402

FORMULA = re.compile(r"\$([^$]*)\$")
_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div)


def normalise(formula: str) -> str:
    f = formula.replace("\\times", "*").replace("\\cdot", "*").replace("×", "*")
    return re.sub(r"\s+", "", f).rstrip(".,")


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, _OPS):
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Div):
            return left / right
        return {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}[type(node.op)]
    raise ValueError("not plain arithmetic")


def evaluate(expr: str) -> float | None:
    """Value of an arithmetic expression of integers, + - * / and parentheses; None for anything else."""
    if len(expr) > 60 or not re.fullmatch(r"[0-9+\-*/() ]+", expr):
        return None
    try:
        return _value(ast.parse(expr, mode="eval").body)
    except (ValueError, SyntaxError, ZeroDivisionError, RecursionError):
        return None


def analyse(text: str, gold: int) -> dict:
    """Correctness, form, route and validity of one rollout (module docstring)."""
    span = last_box_span(text)
    answer = text[span[0] + len("\\boxed{"):span[1] - 1].strip() if span else None
    correct = answer is not None and re.fullmatch(r"-?\d+", answer) is not None and int(answer) == gold
    before = text[:span[0]] if span else text
    formulas = [normalise(f) for f in FORMULA.findall(before)]
    valid, patterns, values = True, [], set()
    for f in formulas:
        sides = f.split("=")
        patterns.append(re.sub(r"\d+", "n", sides[0]))
        sides_values = [evaluate(s) for s in sides]
        if len(sides) < 2 or any(v is None for v in sides_values) or len(set(sides_values)) != 1:
            valid = False
            continue
        values.add(int(sides_values[-1]) if float(sides_values[-1]).is_integer() else sides_values[-1])
    values.discard(gold)
    route = f"{'; '.join(patterns)} | {', '.join(map(str, sorted(values)))}" if formulas else "no formula"
    return {"answer": answer, "correct": correct, "form": "; ".join(formulas) or "()", "valid": valid, "route": route, "after_answer": bool(span) and bool(text[span[1]:].strip())}


def generate(design: str, problems: int, rollouts: int, args, path: Path) -> list[dict]:
    """Sample every problem not yet in ``path`` (JSONL, appended problem by problem: a killed run resumes)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dsdr_eval.models import smollm2_hf_dir

    model_dir = smollm2_hf_dir()
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    _, held = gentask.make(design, 0, args.n_train, problems)
    rows = [json.loads(line) for line in path.open()] if path.exists() else []
    done = {r["problem_id"] for r in rows}
    for i, prob in enumerate(held):
        if prob["id"] in done:
            continue
        torch.manual_seed(1000 + i)
        ids = tok(prob["problem"], return_tensors="pt")
        t0 = time.time()
        with torch.inference_mode():
            out = model.generate(**ids, do_sample=True, temperature=args.temperature, top_p=args.top_p, top_k=0,
                                 max_new_tokens=args.max_tokens, num_return_sequences=rollouts,
                                 stop_strings=[args.stop], tokenizer=tok, pad_token_id=tok.eos_token_id)
        new = []
        for k, seq in enumerate(out[:, ids["input_ids"].shape[1]:].tolist()):
            while seq and seq[-1] == tok.eos_token_id:  # padding after a finished rollout
                seq.pop()
            text = tok.decode(seq, skip_special_tokens=True)
            stopped = args.stop in text
            new.append({"design": design, "problem_id": prob["id"], "gold": int(prob["answer"]), "k": k,
                         "completion": text, "n_tokens": len(seq), "hit_cap": not stopped and len(seq) >= args.max_tokens,
                         "tokens_to_newline": len(tok(text.split("\n", 1)[0])["input_ids"]) if "\n" in text else None})
        with path.open("a") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in new))
        rows += new
        print(f"{design} {i + 1}/{problems} {time.time() - t0:.1f}s", file=sys.stderr, flush=True)
    return rows


def summary(rows: list[dict], rule: str, cap: int) -> dict:
    """Per-design figures for stop rule ``rule`` ("stop": as generated; "newline": cut at the first \\n)."""
    by_problem: dict[str, list[dict]] = {}
    n_cap = 0
    for r in rows:
        text = r["completion"]
        if rule == "newline":
            # no newline: the rollout ended as generated (the cap, or the model's end-of-text)
            capped = r["hit_cap"] if r["tokens_to_newline"] is None else r["tokens_to_newline"] >= cap
            text = text.split("\n", 1)[0]
        else:
            capped = r["hit_cap"]
        n_cap += capped
        by_problem.setdefault(r["problem_id"], []).append(analyse(text, r["gold"]))
    forms, routes, formula_routes, any_forms, acc = [], [], [], [], []
    for a in by_problem.values():
        good = [x for x in a if x["correct"] and x["valid"]]
        forms.append(len({x["form"] for x in good}))
        routes.append(len({x["route"] for x in good}))
        # routes written as formulas: "no formula" beside one formula route is not two solution paths
        formula_routes.append(len({x["route"] for x in good if x["route"] != "no formula"}))
        any_forms.append(len({x["form"] for x in a if x["correct"]}))
        acc.append(sum(x["correct"] for x in a) / len(a))
    n = len(by_problem)
    return {"rule": rule, "problems": n, "rollouts": len(rows), "accuracy": sum(acc) / n, "cap_share": n_cap / len(rows),
            "valid_correct_share": sum(x["correct"] and x["valid"] for a in by_problem.values() for x in a) / len(rows),
            "forms_mean": sum(forms) / n, "routes_mean": sum(routes) / n,
            "problems_with_2plus_routes": sum(r >= 2 for r in routes),
            "formula_routes_mean": sum(formula_routes) / n,
            "problems_with_2plus_formula_routes": sum(r >= 2 for r in formula_routes), "forms_any_correct_mean": sum(any_forms) / n,
            "after_answer_share": sum(x["after_answer"] for a in by_problem.values() for x in a) / len(rows),
            "routes_per_problem": routes}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--designs", nargs="+", required=True)
    p.add_argument("--problems", type=int, default=20)
    p.add_argument("--rollouts", type=int, default=8)
    p.add_argument("--n-train", type=int, default=64, help="the split's train size (held-out problems follow it)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--stop", default="\nQ:")
    p.add_argument("--out", required=True)
    p.add_argument("--summarise-only", action="store_true", help="re-read OUT/<design>.jsonl, generate nothing")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for design in args.designs:
        path = out / f"{design}.jsonl"
        if args.summarise_only:
            rows = [json.loads(line) for line in path.open()]
        else:
            t0 = time.time()
            rows = generate(design, args.problems, args.rollouts, args, path)
            print(f"{design}: generated in {time.time() - t0:.0f}s", file=sys.stderr)
        for rule in ("stop", "newline"):
            print(json.dumps({"design": design, **summary(rows, rule, args.max_tokens)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
