"""HF backend throughput versus a plain hand-written `generate` loop on the same prompts.

Both sides use the same model, prompts (qwen-boxed chat template), sampling settings
(T=0.7, top-p 0.9, n rollouts per prompt, max_new_tokens) and fp32 on CPU:

* baseline: the loop people write first -- one `model.generate` call per prompt with
  `num_return_sequences=n` (prompt encoded once, rollouts batched, prompts not);
* dsdr: `HFBackend.generate_batch` -- prompts left-padded into batches of `--batch-size` rollouts.

Throughput = generated tokens (EOS included, padding excluded) / wall seconds. Target >= 1.0x.
The CPU here is shared by several processes: run it twice and read the ratio, not the seconds.

    python benchmarks/bench_hf_generate.py --model smollm2-135m --prompts 8 --n 4 --max-tokens 32
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--data-dir", default=os.environ.get("DSDR_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared/data/benchmarks")))
    args = parser.parse_args()

    import torch
    import transformers
    from transformers import GenerationConfig

    from dsdr_eval.backends.base import GenerationRequest
    from dsdr_eval.backends.hf import HFBackend
    from dsdr_eval.tasks import load_benchmark
    from dsdr_eval.models import resolve_model
    from dsdr_eval.prompts import BUILTIN_TEMPLATES, encode_prompt

    model = resolve_model(args.model)
    backend = HFBackend(model.path, batch_size=args.batch_size)
    problems = load_benchmark("math500", data_dir=args.data_dir, limit=args.prompts)
    template = BUILTIN_TEMPLATES["qwen-boxed"]
    requests = []
    for i, p in enumerate(problems):
        prompt, user = backend.render(template, p.problem)
        requests.append(GenerationRequest(prompt, user, args.n, 0.7, 0.9, args.max_tokens, i))
    per_batch = max(1, args.batch_size // args.n)
    eos = set(backend.eos_ids)

    def run_backend() -> tuple[int, float]:
        t0 = time.perf_counter()
        tokens = 0
        for start in range(0, len(requests), per_batch):
            for result in backend.generate_batch(requests[start:start + per_batch]):
                tokens += sum(c.n_completion_tokens for c in result.completions)
        return tokens, time.perf_counter() - t0

    def run_plain_loop() -> tuple[int, float]:
        tok, mdl = backend.tokenizer, backend.model
        config = GenerationConfig(do_sample=True, temperature=0.7, top_p=0.9, top_k=0,
                                  max_new_tokens=args.max_tokens, num_return_sequences=args.n,
                                  eos_token_id=backend.eos_ids, pad_token_id=tok.pad_token_id)
        t0 = time.perf_counter()
        tokens = 0
        for i, request in enumerate(requests):
            ids = torch.tensor([encode_prompt(tok, request.prompt, chat=True)])
            torch.manual_seed(i)
            with torch.inference_mode():
                out = mdl.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
            for row in out[:, ids.shape[1]:].tolist():
                stop = next((k for k, t in enumerate(row) if t in eos), None)
                tokens += len(row) if stop is None else stop + 1
        return tokens, time.perf_counter() - t0

    print(f"model {args.model} ({model.path}), transformers {transformers.__version__}, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, fp32 CPU; {args.prompts} math500 prompts x n={args.n}, "
          f"T=0.7 top-p 0.9, max_new_tokens {args.max_tokens}, backend batch {args.batch_size} rollouts")
    for repeat in range(args.repeats):
        base_tokens, base_s = run_plain_loop()
        ours_tokens, ours_s = run_backend()
        base_tps, ours_tps = base_tokens / base_s, ours_tokens / ours_s
        print(f"repeat {repeat}: plain loop {base_tokens} tok in {base_s:.1f}s = {base_tps:.1f} tok/s | "
              f"HF backend {ours_tokens} tok in {ours_s:.1f}s = {ours_tps:.1f} tok/s | "
              f"ratio {ours_tps / base_tps:.2f}x (target >= 1.0x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
