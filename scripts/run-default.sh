#!/usr/bin/env bash
# The main job on an embedded default: measure this machine's ranks into a
# hardware profile (loom calibrate), plan a small GPT-2-family model for them,
# train it with the chosen layout on the sample corpus under mpirun, and
# compare predicted with measured.
# usage: scripts/run-default.sh [build-dir] [ranks] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
ranks=${2:-2}
steps=${3:-30}
loom=$build/cli/loom
out=${LOOM_OUT:-out}
mkdir -p "$out"
mpi=(mpirun --oversubscribe -np "$ranks")
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
echo "== ${mpi[*]} loom calibrate: this machine as $ranks ranks of 1 thread"
OMP_WAIT_POLICY=PASSIVE "${mpi[@]}" "$loom" calibrate --threads 1 --name cpu-calibrated --out "$out/cpu-calibrated.json"
echo
echo "== loom plan: every layout of a scaled-down GPT-2 (its real 50,257-token vocabulary) on the $ranks calibrated ranks"
"$loom" plan --model gpt2-124m --scale layers=4,hidden=128 --hw "$out/cpu-calibrated.json" --gpus "$ranks" \
  --global-batch 16 --seq 64 --precision fp32 --steps "$steps" --lr 1e-3 --warmup 5 --top 8 \
  --out "$out/plan.json" --trace "$out/predicted_trace.json"
echo
echo "== ${mpi[*]} loom execute $out/plan.json"
"${mpi[@]}" "$loom" execute "$out/plan.json" --data data/tinyshakespeare.txt --threads 1 \
  --metrics "$out/metrics.jsonl" --record "$out/run.json" --trace "$out/measured_trace.json"
echo
echo "outputs in $out/: cpu-calibrated.json, plan.json, predicted_trace.json, measured_trace.json, metrics.jsonl, run.json"
