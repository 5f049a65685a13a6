"""Long solutions and the encoder window (issue 42 item 3): what D_emb reads of a thinking trace.

The encoder reads its first ``max_seq_length`` word pieces (256 for all-MiniLM-L6-v2). On real long
traces this script measures, per text part (the answer part after the reasoning, and the whole
trace), the share of tokens the encoder reads, the time of encoder truncation vs pooling the mean
of window embeddings (``--chunked``), and how far pooling moves D_emb (per rollout and per group).

Input: Qwen2.5-Math ``math_eval.py`` output files (``idx``, ``code``: list of responses), several
of them (models, seeds) of ONE benchmark; rollouts of the same ``idx`` across the files (and within
a file's ``code`` list) form one group. The committed figures (docs/benchmarks.md) used SkyThought's
Sky-T1 outputs on AIME24 (4 models x 30 problems, traces in ``<|begin_of_thought|>`` markup), from
NovaSky-AI/SkyThought at commit f7bcf0b4e7d429e798a39524acd4a68031c905ba,
``skythought/Qwen2.5-Math/evaluation/outputs/home/ubuntu/skyov1-dl/Sky-T1-math-{correct,wrong}-5K-{14B,27B}/
aime24_eval/aime24/test_Sky-T1_-1_seed0_t0.0_s0_e-1.jsonl``.

Usage: OMP_NUM_THREADS=1 python benchmarks/bench_encoder_window.py FILE.jsonl [FILE.jsonl ...]
       [--limit N] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np


def read_groups(paths: list[Path], limit: int | None) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for path in paths:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                responses = row.get("code") or []
                groups.setdefault(str(row["idx"]), []).extend(r for r in responses if isinstance(r, str))
    keys = sorted(groups, key=lambda k: int(k) if k.isdigit() else k)[:limit]
    return {k: groups[k] for k in keys if len(groups[k]) >= 2}


def parts_of(text: str) -> dict[str, str]:
    from dsdr_eval.grading.reasoning import split_completion

    split = split_completion(text)
    return {"answer": split.answer(text), "whole": text}


def measure(groups: dict[str, list[str]], part: str) -> dict[str, float]:
    from dsdr_eval.diversity_metrics.semantic import embed_texts, load_encoder, semantic_diversity

    truncating, pooling = load_encoder(), load_encoder(chunked=True)
    seen = total = over = n = 0
    times = {"truncation": 0.0, "chunk-mean": 0.0}
    d_emb: dict[str, list[np.ndarray]] = {"truncation": [], "chunk-mean": []}
    for texts in groups.values():
        texts = [parts_of(t)[part] for t in texts]
        counts, read = truncating.token_counts(texts)
        seen, total, n = seen + sum(read), total + sum(counts), n + len(texts)
        over += sum(1 for c, r in zip(counts, read) if r < c)
        for name, encoder in (("truncation", truncating), ("chunk-mean", pooling)):
            t0 = time.perf_counter()
            d_emb[name].append(semantic_diversity(embed_texts(texts, encoder)))
            times[name] += time.perf_counter() - t0
    a, b = np.concatenate(d_emb["truncation"]), np.concatenate(d_emb["chunk-mean"])
    group_a = np.asarray([g.mean() for g in d_emb["truncation"]])
    group_b = np.asarray([g.mean() for g in d_emb["chunk-mean"]])
    return {"part": part, "groups": len(groups), "rollouts": n, "mean_tokens": total / max(n, 1),
            "share_over_window": over / max(n, 1), "tokens_seen_share": seen / max(total, 1),
            "time_truncation_s": times["truncation"], "time_chunk_mean_s": times["chunk-mean"],
            "time_ratio": times["chunk-mean"] / max(times["truncation"], 1e-9),
            "d_emb_truncation": float(a.mean()), "d_emb_chunk_mean": float(b.mean()),
            "mean_abs_diff_per_rollout": float(np.abs(a - b).mean()),
            "group_rank_correlation": float(np.corrcoef(np.argsort(np.argsort(group_a)),
                                                        np.argsort(np.argsort(group_b)))[0, 1])
            if len(group_a) > 2 else float("nan")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--limit", type=int, default=None, help="the first N problems")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    groups = read_groups(args.files, args.limit)
    print(f"{len(groups)} groups, {sum(map(len, groups.values()))} rollouts; OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS')}; load {os.getloadavg()[0]:.1f}", file=sys.stderr)
    rows = [measure(groups, part) for part in ("answer", "whole")]
    for row in rows:
        print(f"{row['part']:>6}: {row['rollouts']} rollouts, mean {row['mean_tokens']:.0f} tokens, "
              f"{row['share_over_window']:.0%} over the window, encoder read {row['tokens_seen_share']:.1%} of tokens; "
              f"D_emb truncation {row['d_emb_truncation']:.4f} vs chunk-mean {row['d_emb_chunk_mean']:.4f} "
              f"(|diff| per rollout {row['mean_abs_diff_per_rollout']:.4f}, group rank corr "
              f"{row['group_rank_correlation']:.2f}); time {row['time_truncation_s']:.1f} s vs "
              f"{row['time_chunk_mean_s']:.1f} s ({row['time_ratio']:.1f}x)")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
