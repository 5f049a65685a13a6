"""Speed of the diversity metrics (targets from the diversity issue).

1. Semantic diversity over a 64-samples-per-problem run versus the raw
   ``SentenceTransformer.encode`` of the same texts: target ratio <= 1.1 (the encoder must
   dominate). Measured for ``dsdr_diversity_batch`` (one batched encode + D_emb + D_eq per group)
   and for the semantic path alone (``embed_texts`` + ``semantic_diversity``).
2. Everything except the encoder for 500 problems x 64 samples (given embeddings): formula
   extraction, D_emb/D_eq/d, partition (embedding threshold), DARLING Div, Gini-Simpson, Vendi
   (both kernels), Coverage@N, distinct-n, self-BLEU, answer diversity, over all samples and over
   correct samples, plus writing the three outputs: ``compute_run_diversity`` end to end with an
   encoder that returns precomputed embeddings. Target: seconds, not minutes.

Texts are synthetic math-style solutions (seeded): sentences with inline/display formulas,
~1.5-3 k characters, groups that share some formulas and wording, so partitions and n-gram
overlaps are non-trivial. Timings are wall-clock on whatever CPU this runs on; the dev machine
has 2 cores shared by several processes, so repeat runs and take the minimum.

Usage: python benchmarks/bench_diversity.py [--problems 500] [--samples 64]
       [--semantic-problems 4] [--repeats 2] [--skip-semantic] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SENTENCES = [
    "First we rewrite the expression so that the common factor is visible.",
    "Substituting the value back into the original equation gives",
    "By the AM-GM inequality we obtain",
    "Let us consider the cases separately.",
    "Therefore the required quantity equals",
    "We can check this with a small example.",
    "Squaring both sides and simplifying yields",
    "Note that the function is increasing on this interval, hence",
    "Using Vieta's formulas for the roots we have",
    "Counting the arrangements one by one we get",
]


def synthetic_solution(rng: np.random.Generator, problem_seed: int) -> str:
    """A math-style solution: sentences with formulas; shared building blocks per problem."""
    local = np.random.default_rng(problem_seed)
    shared = [f"x^{local.integers(2, 5)} + {local.integers(1, 9)}x = {local.integers(10, 99)}" for _ in range(6)]
    parts = []
    for _ in range(int(rng.integers(12, 24))):
        parts.append(SENTENCES[int(rng.integers(len(SENTENCES)))])
        kind = rng.integers(4)
        formula = shared[int(rng.integers(len(shared)))] if rng.random() < 0.6 else \
            f"\\frac{{{rng.integers(1, 50)}}}{{{rng.integers(2, 60)}}} + {rng.integers(0, 9)}y"
        parts.append([f"${formula}$", f"\\[ {formula} \\]", f"$$ {formula} $$", f"\\( {formula} \\)"][kind])
    parts.append(f"So the answer is \\boxed{{{local.integers(0, 3) + rng.integers(0, 2)}}}.")
    return " ".join(parts)


def build_texts(problems: int, samples: int, seed: int = 0) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    return [[synthetic_solution(rng, 1000 + p) for _ in range(samples)] for p in range(problems)]


def bench_semantic(problems: int, samples: int, repeats: int) -> dict:
    from dsdr_eval.diversity_metrics import dsdr_diversity_batch, load_encoder, semantic_diversity
    from dsdr_eval.diversity_metrics.semantic import embed_texts

    encoder = load_encoder()
    groups = build_texts(problems, samples, seed=1)
    texts = [t for g in groups for t in g]
    group_ids = [p for p, g in enumerate(groups) for _ in g]
    model = encoder.model
    model.encode(texts[:32], batch_size=encoder.batch_size)  # warm-up (threads, allocator)

    def raw() -> None:
        model.encode(texts, batch_size=encoder.batch_size, convert_to_numpy=True)

    def semantic_only() -> None:
        z = embed_texts(texts, encoder)
        for p in range(problems):
            semantic_diversity(z[p * samples:(p + 1) * samples])

    def full_dsdr() -> None:
        dsdr_diversity_batch(texts, group_ids, encoder=encoder)

    timings: dict[str, list[float]] = {"raw_encode": [], "semantic_only": [], "dsdr_d": []}
    cpu: dict[str, list[float]] = {k: [] for k in timings}
    for _ in range(repeats):  # interleaved so load changes on the shared CPU hit all three
        for name, fn in (("raw_encode", raw), ("semantic_only", semantic_only), ("dsdr_d", full_dsdr)):
            start, cpu_start = time.perf_counter(), time.process_time()
            fn()
            timings[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - cpu_start)
    best = {k: min(v) for k, v in timings.items()}
    best_cpu = {k: min(v) for k, v in cpu.items()}
    return {
        "n_texts": len(texts), "problems": problems, "samples_per_problem": samples,
        "mean_chars": float(np.mean([len(t) for t in texts])),
        "encoder": encoder.settings(), "timings_s": timings, "best_s": best,
        "ratio_semantic_only_vs_raw": best["semantic_only"] / best["raw_encode"],
        "ratio_dsdr_d_vs_raw": best["dsdr_d"] / best["raw_encode"],
        # process CPU time (all threads): less sensitive to other jobs on a shared machine
        "cpu_s": cpu, "best_cpu_s": best_cpu,
        "cpu_ratio_semantic_only_vs_raw": best_cpu["semantic_only"] / best_cpu["raw_encode"],
        "cpu_ratio_dsdr_d_vs_raw": best_cpu["dsdr_d"] / best_cpu["raw_encode"],
    }


class PrecomputedEncoder:
    """Returns stored embeddings in call order (the run encodes all texts in one call)."""

    def __init__(self, embeddings: np.ndarray):
        self.embeddings = embeddings

    def encode(self, texts: list[str]) -> np.ndarray:
        assert len(texts) == len(self.embeddings)
        return self.embeddings

    def settings(self) -> dict:
        return {"name": "precomputed (benchmark)", "path": None, "truncation": "n/a"}


def bench_run_without_encoder(problems: int, samples: int, repeats: int) -> dict:
    from dsdr_eval.diversity_metrics.formula import formula_set
    from dsdr_eval.diversity_metrics.lexical import GroupNgrams
    from dsdr_eval.diversity_metrics.run import compute_run_diversity
    from dsdr_eval.rundir.jsonl import write_jsonl

    groups = build_texts(problems, samples, seed=2)
    rng = np.random.default_rng(3)
    rows, embeddings = [], []
    for p, group in enumerate(groups):
        centres = rng.normal(size=(4, 384))  # 4 "strategies" per problem -> non-trivial partitions
        for s, text in enumerate(group):
            embeddings.append(centres[s % 4] + 0.15 * rng.normal(size=384))
            correct = bool(rng.random() < 0.5)
            rows.append({"benchmark": "synthetic", "problem_id": f"p{p}", "sample_idx": s, "phase": "sampling",
                         "gold": "1", "completion": text, "correct": correct,
                         "status": "correct" if correct else "incorrect", "answer_class": int(rng.integers(0, 3))})
    embeddings = np.asarray(embeddings)
    texts = [r["completion"] for r in rows]
    out: dict = {"problems": problems, "samples_per_problem": samples, "n_texts": len(texts),
                 "mean_chars": float(np.mean([len(t) for t in texts]))}

    start = time.perf_counter()
    sets = [formula_set(t) for t in texts]
    out["formula_extraction_s"] = time.perf_counter() - start
    out["mean_formulas_per_text"] = float(np.mean([len(s) for s in sets]))
    start = time.perf_counter()
    for p in range(problems):
        GroupNgrams(texts[p * samples:(p + 1) * samples]).self_bleu()
    out["tokenize_ngrams_self_bleu_s"] = time.perf_counter() - start

    totals, cpu_totals = [], []
    with tempfile.TemporaryDirectory() as tmp:
        write_jsonl(Path(tmp) / "graded.jsonl", rows)
        for _ in range(repeats):
            start, cpu_start = time.perf_counter(), time.process_time()
            result = compute_run_diversity(tmp, encoder=PrecomputedEncoder(embeddings), progress=False)
            totals.append(time.perf_counter() - start)
            cpu_totals.append(time.process_time() - cpu_start)
    out["compute_run_diversity_s"] = totals
    out["compute_run_diversity_best_s"] = min(totals)
    out["compute_run_diversity_cpu_s"] = cpu_totals  # this process's CPU time: less load-dependent
    summary = result["synthetic"]["all"]
    out["sanity"] = {"mean_n_classes": summary["n_classes"], "mean_d": summary["d"],
                     "mean_self_bleu": summary["self_bleu"]}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=500)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--semantic-problems", type=int, default=4,
                        help="problems (x --samples texts) for the encoder-ratio benchmark")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-semantic", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures as JSON")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    report = {"machine": {"python": sys.version.split()[0], "platform": platform.platform(),
                          "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                          "note": "wall-clock; on the dev machine the 2 CPU cores are shared with other jobs"}}
    if not args.skip_semantic:
        semantic = bench_semantic(args.semantic_problems, args.samples, args.repeats)
        report["semantic"] = semantic
        print(f"[semantic] {semantic['n_texts']} texts (~{semantic['mean_chars']:.0f} chars): "
              f"raw encode {semantic['best_s']['raw_encode']:.2f} s, semantic path "
              f"{semantic['best_s']['semantic_only']:.2f} s (ratio {semantic['ratio_semantic_only_vs_raw']:.3f}), "
              f"full d = (D_emb + D_eq)/2 {semantic['best_s']['dsdr_d']:.2f} s "
              f"(ratio {semantic['ratio_dsdr_d_vs_raw']:.3f}); CPU-time ratios "
              f"{semantic['cpu_ratio_semantic_only_vs_raw']:.3f} / {semantic['cpu_ratio_dsdr_d_vs_raw']:.3f}; "
              "target <= 1.1", flush=True)
    run = bench_run_without_encoder(args.problems, args.samples, args.repeats)
    report["run_without_encoder"] = run
    print(f"[run] {run['problems']} problems x {run['samples_per_problem']} samples "
          f"(~{run['mean_chars']:.0f} chars, {run['mean_formulas_per_text']:.1f} formulas/text): "
          f"formula extraction {run['formula_extraction_s']:.2f} s, tokenize+n-grams+self-BLEU "
          f"{run['tokenize_ngrams_self_bleu_s']:.2f} s, compute_run_diversity end to end "
          f"{run['compute_run_diversity_best_s']:.2f} s wall (runs: "
          f"{', '.join(f'{t:.2f}' for t in run['compute_run_diversity_s'])}; CPU time "
          f"{', '.join(f'{t:.2f}' for t in run['compute_run_diversity_cpu_s'])} s)", flush=True)
    print(f"[load] 1/5/15-min load average at the end: {os.getloadavg()}", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
