#!/usr/bin/env bash
# Checkpoint cost on this machine, measured in one run: a 1-rank training of a
# ~19M-parameter GPT-2-style model (fp32; a full checkpoint is ~230 MB:
# weights + two Adam moments) without checkpoints, with an asynchronous full
# save after every step, and with a synchronous one; plus `dd` of the same
# number of bytes with fsync as the plain sequential-write ceiling.
# usage: bench/ckpt_stall.sh [build-dir] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-16}
loom=$build/cli/loom
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
"$loom" plan --model gpt2-124m --scale layers=6,hidden=512,heads=8,vocab=256 --hw cpu-local --gpus 1 \
  --global-batch 8 --seq 128 --precision fp32 --layout dp=1,micro=8 --steps "$steps" --out "$tmp/p.json" >/dev/null
mean() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['step_time_s'])" "$1"; }
field() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r[sys.argv[2]])" "$1" "$2"; }
# Training on one thread leaves the second core to the background writer.
every=4
"$loom" execute "$tmp/p.json" --quiet --threads 1 --record "$tmp/none.json" >/dev/null
"$loom" execute "$tmp/p.json" --quiet --threads 1 --record "$tmp/async.json" --ckpt-dir "$tmp/ck_async" \
  --save-every $every --keep 2 >/dev/null
"$loom" execute "$tmp/p.json" --quiet --threads 1 --record "$tmp/sync.json" --ckpt-dir "$tmp/ck_sync" \
  --save-every $every --keep 2 --sync-save >/dev/null
bytes=$(du -sb "$tmp/ck_sync/$(cat "$tmp/ck_sync/latest")" | cut -f1)
t0=$(date +%s.%N)
dd if=/dev/zero of="$tmp/dd.bin" bs=1M count=$((bytes / 1048576 + 1)) conv=fsync 2>/dev/null
dd_s=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$(date +%s.%N)")
python3 - "$(mean "$tmp/none.json")" "$(mean "$tmp/async.json")" "$(field "$tmp/async.json" checkpoint_stall_s)" \
  "$(field "$tmp/sync.json" checkpoint_stall_s)" "$bytes" "$dd_s" "$steps" "$every" <<'PY'
import sys
none, asy, astall, sstall, size, dd, steps, every = map(float, sys.argv[1:])
saves = steps // every
print(f"step time without checkpoints        {none:.3f} s (1 training thread)")
print(f"async save every {every:.0f} steps: step time   {asy:.3f} s; training-thread stall {astall:.3f} s over "
      f"{saves:.0f} saves = {100 * astall / (steps * none):.1f}% of the training time")
print(f"sync save: {sstall / saves:.3f} s per save of {size / 1e6:.0f} MB = {size / 1e6 / (sstall / saves):.0f} MB/s")
print(f"dd of the same bytes (fsync): {dd:.2f} s = {size / 1e6 / max(dd, 1e-9):.0f} MB/s")
PY
