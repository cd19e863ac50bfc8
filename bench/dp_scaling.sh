#!/usr/bin/env bash
# DP scaling of `loom execute` on this machine: GPT-2 124M, global batch 8 x 64
# tokens, fp32 — 1 rank (1 thread), 1 rank (2 threads), 2 ranks (dp=2, 1 thread
# each), all in one run; prints tokens/s and the ratios.
# usage: bench/dp_scaling.sh [build-dir] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-6}
loom=$build/cli/loom
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
common=(--model gpt2-124m --hw cpu-local --global-batch 8 --seq 64 --precision fp32 --steps "$steps")
"$loom" plan "${common[@]}" --gpus 1 --layout dp=1,micro=4 --out "$tmp/dp1.json" >/dev/null
"$loom" plan "${common[@]}" --gpus 2 --layout dp=2,micro=4 --out "$tmp/dp2.json" >/dev/null
tps() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['tokens_per_s'])" "$1"; }
"$loom" execute "$tmp/dp1.json" --threads 1 --quiet --record "$tmp/r1.json" >/dev/null
"$loom" execute "$tmp/dp1.json" --threads 2 --quiet --record "$tmp/r1t2.json" >/dev/null
"${mpi[@]}" -np 2 "$loom" execute "$tmp/dp2.json" --threads 1 --quiet --record "$tmp/r2.json" >/dev/null
a=$(tps "$tmp/r1.json"); b=$(tps "$tmp/r1t2.json"); c=$(tps "$tmp/r2.json")
python3 - "$a" "$b" "$c" <<'PY'
import sys
a, b, c = map(float, sys.argv[1:])
print(f"1 rank, 1 thread : {a:8.1f} tokens/s")
print(f"1 rank, 2 threads: {b:8.1f} tokens/s  ({b/a:.2f}x)")
print(f"2 ranks (dp=2)   : {c:8.1f} tokens/s  ({c/a:.2f}x of 1 rank/1 thread, {c/b:.2f}x of 1 rank/2 threads)")
PY
