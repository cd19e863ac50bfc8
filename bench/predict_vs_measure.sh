#!/usr/bin/env bash
# Predicted (loom plan on a profile from loom calibrate) vs measured (loom
# execute) step time on this machine for the cases the calibration issue names:
# single rank, dp2, tp2, pp2 1F1B (m=4), dp2 ZeRO-1, and a 4-rank dp2 x tp2.
# Each world size is calibrated as itself (ranks x 1 thread).
# usage: bench/predict_vs_measure.sh [build-dir] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-12}
loom=$build/cli/loom
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1
mpi=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
for n in 1 2 4; do "${mpi[@]}" -np $n "$loom" calibrate --threads 1 --out "$tmp/cal$n.json" >/dev/null; done
printf "%-34s %6s %12s %12s %8s\n" case ranks predicted measured error
for spec in "dp=1,micro=8:1" "dp=2,micro=8:2" "dp=1,tp=2,micro=8:2" "dp=1,pp=2,schedule=1f1b,micro=4:2" \
            "dp=2,zero=1,micro=8:2" "dp=2,tp=2,micro=4:4"; do
  layout=${spec%:*} n=${spec##*:}
  "$loom" plan --model gpt2-124m --scale layers=4,hidden=128,heads=4,ffn=512,vocab=256 --hw "$tmp/cal$n.json" --gpus "$n" \
    --global-batch 16 --seq 64 --precision fp32 --layout "$layout" --steps "$steps" --out "$tmp/p.json" >/dev/null
  "${mpi[@]}" -np "$n" "$loom" execute "$tmp/p.json" --threads 1 --quiet --record "$tmp/r.json" >/dev/null
  python3 - "$tmp/p.json" "$tmp/r.json" "$layout" "$n" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["prediction"]["step_time_s"]
m = json.load(open(sys.argv[2]))["step_time_s"]
print(f"{sys.argv[3]:34s} {sys.argv[4]:>6s} {p*1e3:10.1f}ms {m*1e3:10.1f}ms {100*(m/p-1):+7.0f}%")
PY
done
