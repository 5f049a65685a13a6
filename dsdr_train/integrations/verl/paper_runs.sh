#!/usr/bin/env bash
# The paper's verl runs, one after another: every model x algorithm of recipe.py (docs/ALGORITHMS.md §3.5).
#   TRAIN_FILES=dapo-math-17k.parquet [VAL_FILES=aime24.parquet] [N_GPUS=8] [MODELS="qwen3-4b"] \
#   [ALGOS="grpo dapo dsdr"] [PRINT=1] dsdr_train/integrations/verl/paper_runs.sh [-- hydra overrides]
# Run it in the verl GPU environment (pip install -e .[verl] with verl[vllm]); PRINT=1 only prints the commands.
set -euo pipefail
: "${TRAIN_FILES:?set TRAIN_FILES to DAPO-Math-17k in verl parquet format}"
MODELS=${MODELS:-"qwen2.5-math-1.5b qwen3-1.7b qwen3-4b"}
ALGOS=${ALGOS:-"grpo dapo darling dsdr dsdr_wo_gd dsdr_wo_gc"}
PY=${PYTHON:-python3}
for model in $MODELS; do
  for algo in $ALGOS; do
    args=("$model" "$algo" --train-files "$TRAIN_FILES" --n-gpus "${N_GPUS:-8}")
    [ -n "${VAL_FILES:-}" ] && args+=(--val-files "$VAL_FILES")
    [ -n "${PRINT:-}" ] && args+=(--print)
    "$PY" -m dsdr_train.integrations.verl.recipe "${args[@]}" "$@" \
      2>&1 | tee "verl-${model}-${algo}.log"
  done
done
