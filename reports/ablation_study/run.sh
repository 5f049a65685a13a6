#!/usr/bin/env bash
# Ablation study: for each arm and seed  dsdr-train -> dsdr-eval sweep (every K steps) ; then analyze.py
# (claims with paired bootstrap CIs + plots) and dsdr-eval report. Resumable: kill it and rerun the same
# command; finished pieces are skipped, a training run resumes from its last checkpoint, a sweep from its
# last evaluated checkpoint. From the repo root:
#   nohup bash reports/ablation_study/run.sh > reports/ablation_study/run.log 2>&1 &     # the full study
#   bash reports/ablation_study/run.sh --smoke                                           # 2 steps, 1 seed
# A design is a directory STUDY (default reports/ablation_study: design 1) with its study.yaml (the trainer's
# config; max_response_length is also the evaluation's --max-tokens) and, optionally, study.env: the
# design's defaults for the knobs below, written as `: "${KNOB:=value}"` so the environment still wins.
#   STUDY=reports/ablation_study/design2 JOBS=1 nohup bash reports/ablation_study/run.sh > reports/ablation_study/design2/run.log 2>&1 &
# Knobs (environment): RUNS (default STUDY/runs, smoke: STUDY/runs_smoke), DESIGN (gentask design, default
# linear), N_TRAIN / N_HELDOUT (its split sizes, default 256 / 64), EVAL_TOP_P (top-p of the T=1.0 evaluation
# rollouts, default 1.0), ARMS, MAIN_ARMS (arms run with SEEDS_MAIN seeds, default "grpo dsdr"), SEEDS_MAIN (default 5),
# SEEDS_ABL (the other arms, default 3), N (T=1.0 rollouts, default 32), LIMIT (held-out problems, default
# 8), JOBS (arm/seed units run side by side, default 2 = the cores), KEEP_WEIGHTS=1 (keep checkpoints after
# their sweep), COMMIT=1 (commit each finished unit's directory, the base model's and the analysis as they
# complete: `git commit -- PATH`, one at a time). Each unit's output goes to RUNS/<arm>/s<seed>/*.log.
# A REGISTERED study (design 3 on: a study.yaml with the pre-registration and the trainer's config under
# `train:`, read by study_plan.py) sets these knobs itself, adds its stop strings to the evaluation, and is
# guarded: it starts only from a committed study.yaml with status `registered`, and stops (exit 2) if the
# file changed since its first start (RUNS/registration.json):
#   STUDY=reports/ablation_study/design3 nohup bash reports/ablation_study/run.sh > reports/ablation_study/design3/run.log 2>&1 &
set -euo pipefail
HERE=reports/ablation_study
STUDY=${STUDY:-$HERE}
[ -f "$STUDY/study.yaml" ] || { echo "run.sh: $STUDY/study.yaml not found (STUDY is a design directory)" >&2; exit 2; }
# shellcheck source=/dev/null
[ -f "$STUDY/study.env" ] && . "$STUDY/study.env"
PY=${PYTHON:-python}
SMOKE=0
for a in "$@"; do
  case "$a" in
    --smoke) SMOKE=1 ;;
    *) echo "run.sh: unknown argument $a (only --smoke)" >&2; exit 2 ;;
  esac
done
REGISTERED=0; TRAIN_CONFIG=$STUDY/study.yaml
if grep -q '^train:' "$STUDY/study.yaml"; then
  REGISTERED=1   # its knobs (a smoke run keeps its own sizes: only the task's and the sampling's)
  KNOBS=$($PY $HERE/study_plan.py "$STUDY/study.yaml" --shell $([ "$SMOKE" = 1 ] && echo --smoke)) || exit 2
  eval "$KNOBS"
fi
DESIGN=${DESIGN:-linear}; MAIN_ARMS=${MAIN_ARMS:-"grpo dsdr"}; N_TRAIN=${N_TRAIN:-256}; N_HELDOUT=${N_HELDOUT:-64}
EVAL_TOP_P=${EVAL_TOP_P:-1.0}
# One thread per process: several processes on a shared CPU oversubscribe it otherwise (mini_experiment).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ "$SMOKE" = 1 ]; then
  RUNS=${RUNS:-$STUDY/runs_smoke}; ARMS=${ARMS:-"grpo dsdr"}; SEEDS_MAIN=${SEEDS_MAIN:-1}; SEEDS_ABL=${SEEDS_ABL:-1}
  N=${N:-4}; LIMIT=${LIMIT:-4}; JOBS=${JOBS:-2}
  TRAIN_OVERRIDES=(total_steps=2 save_every=1 group_size=4 prompts_per_step=1 mini_batch_prompts=1 max_response_length=24)
  MAXTOK=24
  COMMIT=0   # a smoke run is never committed
else
  RUNS=${RUNS:-$STUDY/runs}; ARMS=${ARMS:-"grpo dsdr dapo dsdr_wo_gd dsdr_wo_gc darling"}; SEEDS_MAIN=${SEEDS_MAIN:-5}
  SEEDS_ABL=${SEEDS_ABL:-3}; N=${N:-32}; LIMIT=${LIMIT:-8}; JOBS=${JOBS:-2}
  TRAIN_OVERRIDES=()
  # the evaluation generates as many tokens as training did
  MAXTOK=${MAXTOK:-$(awk -F'[:#]' '$1 == "max_response_length" { gsub(/ /, "", $2); print $2 }' "$STUDY/study.yaml")}
  [ -n "$MAXTOK" ] || { echo "run.sh: $STUDY/study.yaml sets no max_response_length" >&2; exit 2; }
fi
mkdir -p "$RUNS"
COMMIT=${COMMIT:-0}
if [ "$COMMIT" = 1 ] && [ "${KEEP_WEIGHTS:-0}" = 1 ]; then
  echo "run.sh: COMMIT=1 with KEEP_WEIGHTS=1 would commit the checkpoints' weights" >&2; exit 2
fi
STOPS=()
if [ "$REGISTERED" = 1 ]; then
  # the registration check (study_plan.py --guard): nothing in the registration changes after the first unit
  [ "$SMOKE" = 1 ] || $PY $HERE/study_plan.py "$STUDY/study.yaml" --guard "$RUNS" || exit 2
  TRAIN_CONFIG=$RUNS/train_config.yaml
  $PY $HERE/study_plan.py "$STUDY/study.yaml" --train-config "$TRAIN_CONFIG" || exit 2
  while IFS= read -r -d '' s; do STOPS+=(--stop "$s"); done < <($PY $HERE/study_plan.py "$STUDY/study.yaml" --stop)
fi
# The writers record absolute paths (the checkpoint, the encoder, the command, the samples file); in git a
# run names the checkout's files relative to its root and the home directory as ~ (tests/test_repo_hygiene.py:
# no path of this machine in a tracked file). Text files only; a file without either prefix is not rewritten.
relativise() {
  $PY - "$1" "$PWD/" "$HOME/" <<'PY'
import sys
from pathlib import Path
root, checkout, home = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
for path in [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()):
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        continue
    new = text.replace(checkout, "").replace(home, "~/") if home != "/" else text.replace(checkout, "")
    if new != text:
        path.write_text(new, encoding="utf-8")
PY
}
# One commit at a time (units finish side by side): only PATH's files go into the commit.
commit_path() {
  [ "$COMMIT" = 1 ] || return 0
  # the lock lives in the git directory: never committed itself
  ( flock 9; relativise "$1" && git add -- "$1" && { git diff --cached --quiet -- "$1" || git commit -q -m "$2" -- "$1"; } ) 9> "$(git rev-parse --git-dir)/dsdr-study-commit.lock"
}
T0=$(date +%s)
stamp() { date -u +%H:%M:%S; }
# CPU time of each invocation (user+sys of every finished child, from the shell's `times`) goes to
# RUNS/cpu_time.log, also when it is killed or fails (the study's total = the sum of the lines; the
# child running at a kill is not counted). `times` must run in this shell: in $(...) it reports nothing.
log_time() {
  T1=$(date +%s)
  times > "$RUNS/.times"
  CPU=$(tail -1 "$RUNS/.times" | awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.0f", u[1]*60+u[2]+s[1]*60+s[2] }')
  echo "$(date -u +%FT%TZ) smoke=$SMOKE $1 wall_s=$((T1 - T0)) cpu_s=$CPU" >> "$RUNS/cpu_time.log"
}
# Stopping the study stops its units too (each unit's subshell and the dsdr-train / dsdr-eval under it):
# a rerun must not find an orphaned writer still working in a unit's directory. Job control (set -m)
# gives every unit its own process group, killed whole: this also reaches a trainer whose subshell
# died first (`kill` of every run.sh process at once, as pkill -f run.sh does). The pids are kept here,
# not read from `jobs`, which forgets a job once it is reaped.
set -m
UNIT_PIDS=()
stop_units() { local j; for j in "${UNIT_PIDS[@]}"; do kill -- -"$j" 2> /dev/null || true; done; }
trap 'stop_units; log_time interrupted' EXIT
trap 'exit 143' TERM INT
# The task: deterministic, so a rerun rewrites the same files; the disjointness check runs every time.
$PY -m dsdr_train.gentask --design "$DESIGN" --seed 0 --n-train "$N_TRAIN" --n-heldout "$N_HELDOUT" --out "$RUNS/data"
$PY -m dsdr_train.gentask --check "$RUNS/data"
EVAL=(--benchmarks "$RUNS/data/heldout.jsonl" --limit "$LIMIT" --protocol quick --n "$N" --temperature 1.0 --top-p "$EVAL_TOP_P"
      --pass1-temperature 0.1 --pass1-top-p 0.9 --max-tokens "$MAXTOK" --template plain --prompt-mode raw
      --backend hf --seed 0 --no-progress "${STOPS[@]}")
# One arm/seed: train (or resume), sweep its checkpoints, delete the weights. Each unit writes only its own
# directory RUNS/<arm>/s<seed> (one writer process per directory), so JOBS units run side by side.
unit() {
  local arm=$1 seed=$2 d="$RUNS/$1/s$2"
  [ -f "$d/sweep.done" ] && { echo "$(stamp) $arm seed $seed: done"; return 0; }
  mkdir -p "$d"
  echo "$(stamp) $arm seed $seed: train"
  if [ ! -d "$d/train/final" ]; then
    if compgen -G "$d/train/checkpoints/step_*" > /dev/null; then
      dsdr-train --resume --out "$d/train" > "$d/train.log" 2>&1
    else
      rm -rf "$d/train"   # killed before its first checkpoint: nothing to keep, start again
      dsdr-train --algo "$arm" --config "$TRAIN_CONFIG" --train-data "$RUNS/data/train.jsonl" --out "$d/train" \
        seed="$seed" "${TRAIN_OVERRIDES[@]}" > "$d/train.log" 2>&1
    fi
  fi
  echo "$(stamp) $arm seed $seed: sweep"
  dsdr-eval sweep "$d/train" --out "$d/sweep" --label "$arm s$seed" "${EVAL[@]}" > "$d/sweep.log" 2>&1
  touch "$d/sweep.done"
  [ "${KEEP_WEIGHTS:-0}" = 1 ] || rm -rf "$d/train/checkpoints" "$d/train/final"   # ~0.5-1.5 GB each
  commit_path "$d" "$(basename "$STUDY") unit $arm seed $seed: trained and evaluated (run.sh)"
  echo "$(stamp) $arm seed $seed: finished"
}
base() {
  [ -f "$RUNS/base/metrics.json" ] && return 0
  echo "$(stamp) base model"
  dsdr-eval run --model smollm2-135m --out "$RUNS/base" --label base "${EVAL[@]}" > "$RUNS/base.log" 2>&1
  commit_path "$RUNS/base" "$(basename "$STUDY"): the base model's evaluation (run.sh)"
}
# Seed-major order: every arm's seed 0, then seed 1, ... so a study cut short has all arms at equal seeds.
UNITS=()
for ((seed = 0; seed < (SEEDS_MAIN > SEEDS_ABL ? SEEDS_MAIN : SEEDS_ABL); seed++)); do
  for arm in $ARMS; do
    case " $MAIN_ARMS " in *" $arm "*) nseeds=$SEEDS_MAIN ;; *) nseeds=$SEEDS_ABL ;; esac
    [ "$seed" -lt "$nseeds" ] && UNITS+=("$arm $seed")
  done
done
# A pool of JOBS background units; a failed unit fails the study (after the running ones finish).
FAILED=0
base & UNIT_PIDS+=($!)
for u in "${UNITS[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || FAILED=1; done
  unit $u & UNIT_PIDS+=($!)
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || FAILED=1; done
wait || FAILED=1
[ "$FAILED" = 0 ] || { echo "$(stamp) a unit failed: see RUNS/<arm>/s<seed>/{train,sweep}.log" >&2; exit 1; }
echo "$(stamp) analysis"
ANALYZE_ARGS=()
[ "$REGISTERED" = 1 ] && ANALYZE_ARGS=(--claims "$($PY -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["analysis"]["claim_set"])' "$STUDY/study.yaml")")
$PY $HERE/analyze.py --runs "$RUNS" --out "$RUNS/report" "${ANALYZE_ARGS[@]}"
# The project's report over each arm's last checkpoint of seed 0 (Table 1 layout, paired bootstrap vs base).
LAST=()
for arm in $ARMS; do
  last=$(ls -d "$RUNS/$arm/s0/sweep"/step_* 2>/dev/null | sort | tail -1)
  [ -n "$last" ] && LAST+=("$last")
done
dsdr-eval report "$RUNS/base" "${LAST[@]}" --out "$RUNS/report/table" --ci
log_time "done"
commit_path "$RUNS" "$(basename "$STUDY"): analysis and report of the finished study (run.sh)"
trap - EXIT
echo "$(stamp) done: this invocation took $((T1 - T0)) s wall, $CPU s CPU (children); all invocations: $RUNS/cpu_time.log"
