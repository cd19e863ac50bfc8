#!/usr/bin/env bash
# Checkpoints through `loom execute` under mpirun, checked from outside.
#   exact    for several layouts (context parallelism among them): a run
#            interrupted (--stop-after) and resumed from its checkpoint
#            reproduces the uninterrupted run's per-step losses bit for bit,
#            from more than one interruption point;
#   reshard  checkpoints saved under dp=2 ZeRO-3, tp x pp, interleaved pp and
#            cp=2 ZeRO-3 resume under tp=2, pp=2, dp=1, dp=2 x tp=2, dp=4 and
#            cp=2 x tp=2 with the same losses (1e-5 relative);
#   moe      a Mixtral-style MoE checkpoint saved under dp=2 ep=2 (experts
#            sharded) resumes under ep=1, ep=4, ep=2 with ZeRO-1, tp=2, ep=2
#            folded over tp=2 (etp=1) and cp=2 with the same losses (1e-5
#            relative): experts are saved by global name;
#   kill     a rank is SIGKILLed while asynchronous saves run; resuming from
#            `latest` works, and continues the uninterrupted run bit for bit;
#   corrupt  a flipped byte is found by `loom ckpt verify` and refused by --resume.
# usage: checkpoint_resume.sh MODE LOOM MPIEXEC [MPIEXEC_ARGS...]
set -u
mode=$1 loom=$2
shift 2
mpi=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
STEPS=8
MODEL=llama-3-8b SCALE=layers=4,hidden=64,heads=4,kv_heads=2,ffn=128,vocab=256
plan() {  # plan NAME LAYOUT RANKS [extra plan args...]
  local name=$1 layout=$2 ranks=$3
  shift 3
  "$loom" plan --model "$MODEL" --scale "$SCALE" --hw cpu-local \
    --gpus "$ranks" --global-batch 8 --seq 32 --layout "$layout" --steps $STEPS --lr 2e-3 --warmup 2 \
    --out "$tmp/$name.json" "$@" >/dev/null || { echo "FAIL: plan $layout $*"; exit 1; }
}
run() {  # run NAME RANKS METRICS [extra args...]
  local name=$1 ranks=$2 metrics=$3
  shift 3
  "${mpi[@]}" -np "$ranks" "$loom" execute "$tmp/$name.json" --threads 1 --quiet --metrics "$metrics" "$@" \
    >"$tmp/out" 2>&1 || { cat "$tmp/out"; echo "FAIL: execute $name $*"; exit 1; }
}
# compare A B FIRST_STEP TOLERANCE: losses of steps >= FIRST_STEP in A and B agree
compare() {
  python3 - "$1" "$2" "$3" "$4" <<'PY' || exit 1
import json, sys
a = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
b = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2]))}
first, tol = int(sys.argv[3]), float(sys.argv[4])
steps = sorted(s for s in b if s >= first)
assert steps and steps[-1] == max(a), f"resumed run covers steps {steps}, expected up to {max(a)}"
for s in steps:
    ok = a[s] == b[s] if tol == 0 else abs(b[s] / a[s] - 1) <= tol
    assert ok, f"step {s}: uninterrupted {a[s]!r} vs resumed {b[s]!r}"
print("  steps", steps[0], "-", steps[-1], "match", "bit for bit" if tol == 0 else f"within {tol}")
PY
}

case "$mode" in
exact)
  # The compressed gradient reduction keeps no state: resumes bit for bit too.
  for spec in "dp=2,zero=1:2" "dp=1,tp=2,sp=1:2" "dp=1,pp=2,schedule=1f1b,micro=2:2" "dp=2,zero=3:2" "dp=1,tp=2,pp=2,micro=2:4" \
              "dp=2,zero=0:2:bf16" "dp=2,zero=2:2:fp8" "dp=2,cp=2,zero=1:4"; do
    layout=${spec%%:*} rest=${spec#*:}
    ranks=${rest%%:*} reduce=fp32
    [ "$rest" != "$ranks" ] && reduce=${rest#*:}
    echo "layout $layout ($ranks ranks, gradients reduced in $reduce)"
    plan p "$layout" "$ranks" --grad-reduce "$reduce"
    run p "$ranks" "$tmp/full.jsonl"
    for cut in 3 5; do
      rm -rf "$tmp/ck"
      run p "$ranks" "$tmp/first.jsonl" --ckpt-dir "$tmp/ck" --stop-after $cut
      run p "$ranks" "$tmp/resumed.jsonl" --ckpt-dir "$tmp/ck" --resume latest
      compare "$tmp/full.jsonl" "$tmp/resumed.jsonl" $((cut + 1)) 0
    done
  done
  ;;
reshard)
  # save layout -> load layouts
  for src in "dp=2,zero=3:2" "dp=1,tp=2,pp=2,micro=2:4" "dp=1,pp=2,schedule=interleaved,v=2,micro=2:2" \
             "dp=1,cp=2,zero=3:2"; do
    slayout=${src%:*} sranks=${src##*:}
    plan src "$slayout" "$sranks"
    run src "$sranks" "$tmp/full.jsonl"
    rm -rf "$tmp/ck"
    run src "$sranks" "$tmp/first.jsonl" --ckpt-dir "$tmp/ck" --stop-after 4
    for spec in "dp=1,tp=2,sp=1:2" "dp=1,pp=2,schedule=1f1b,micro=2:2" "dp=1:1" "dp=2,tp=2,zero=1:4" "dp=4,zero=3:4" \
                "dp=1,cp=2,tp=2,sp=1:4"; do
      layout=${spec%:*} ranks=${spec##*:}
      echo "$slayout -> $layout ($ranks ranks)"
      plan dst "$layout" "$ranks"
      run dst "$ranks" "$tmp/resumed.jsonl" --resume "$tmp/ck/step_000004"
      compare "$tmp/full.jsonl" "$tmp/resumed.jsonl" 5 1e-5
    done
  done
  ;;
moe)
  MODEL=mixtral-8x7b SCALE=layers=4,hidden=64,heads=4,kv_heads=2,ffn=96,vocab=256,experts=4
  plan src "dp=2,ep=2" 2 --moe-z-loss-coeff 0.001
  run src 2 "$tmp/full.jsonl"
  run src 2 "$tmp/first.jsonl" --ckpt-dir "$tmp/ck" --stop-after 4
  for spec in "dp=1:1" "dp=4,ep=4:4" "dp=2,ep=2,zero=1:2" "dp=2,tp=2,sp=1:4" "dp=4,ep=2,zero=3:4" \
              "dp=1,tp=2,sp=1,ep=2,etp=1:2" "dp=1,ep=1,cp=2:2"; do
    layout=${spec%:*} ranks=${spec##*:}
    echo "dp=2,ep=2 -> $layout ($ranks ranks)"
    plan dst "$layout" "$ranks" --moe-z-loss-coeff 0.001
    run dst "$ranks" "$tmp/resumed.jsonl" --resume "$tmp/ck/step_000004"
    compare "$tmp/full.jsonl" "$tmp/resumed.jsonl" 5 1e-5
  done
  ;;
kill)
  STEPS=400
  plan p "dp=2,zero=1" 2
  "${mpi[@]}" -np 2 "$loom" execute "$tmp/p.json" --threads 1 --quiet --metrics "$tmp/m.jsonl" \
    --ckpt-dir "$tmp/ck" --save-every 1 >"$tmp/out" 2>&1 &
  job=$!
  for _ in $(seq 1 600); do
    [ -f "$tmp/m.jsonl" ] && [ "$(wc -l <"$tmp/m.jsonl")" -ge 6 ] && break
    sleep 0.05
  done
  victim=$(pgrep -P "$job" | tail -n 1)
  kill -9 "$victim"
  wait "$job"
  echo "  killed a rank after $(wc -l <"$tmp/m.jsonl") steps; latest = $(cat "$tmp/ck/latest")"
  "$loom" ckpt verify "$tmp/ck" >/dev/null || { echo "FAIL: latest checkpoint does not verify"; exit 1; }
  ls "$tmp/ck" | grep -q "tmp" && echo "  (a partial save was left as a .tmp directory, not taken as a checkpoint)"
  resumed_from=$(sed 's/step_0*//' "$tmp/ck/latest")
  end=$((resumed_from + 3))
  # The same plan (its LR schedule spans 400 steps), uninterrupted up to `end`, vs resumed.
  run p 2 "$tmp/full.jsonl" --stop-after $end
  run p 2 "$tmp/resumed.jsonl" --ckpt-dir "$tmp/ck" --resume latest --stop-after $end
  compare "$tmp/full.jsonl" "$tmp/resumed.jsonl" $((resumed_from + 1)) 0
  ;;
sigterm)
  # What a scheduler sends before preemption: finish the step, save, stop.
  STEPS=5000  # long enough that SIGTERM always lands mid-run, even on a loaded machine
  plan p "dp=2,zero=1" 2
  "${mpi[@]}" -np 2 "$loom" execute "$tmp/p.json" --threads 1 --quiet --metrics "$tmp/m.jsonl" \
    --ckpt-dir "$tmp/ck" >"$tmp/out" 2>&1 &
  job=$!
  for _ in $(seq 1 600); do
    [ -f "$tmp/m.jsonl" ] && [ "$(wc -l <"$tmp/m.jsonl")" -ge 3 ] && break
    sleep 0.05
  done
  kill -TERM "$job"
  for _ in $(seq 1 600); do kill -0 "$job" 2>/dev/null || break; sleep 0.05; done
  kill -0 "$job" 2>/dev/null && { echo "FAIL: still running 30 s after SIGTERM"; kill -9 "$job"; exit 1; }
  wait "$job"; rc=$?
  grep -q "stopped by a signal" "$tmp/out" || { cat "$tmp/out"; echo "FAIL: no stop message"; exit 1; }
  [ -f "$tmp/ck/latest" ] || { cat "$tmp/out"; echo "FAIL: no final checkpoint"; exit 1; }
  saved=$(sed 's/step_0*//' "$tmp/ck/latest")
  echo "  SIGTERM after $(wc -l <"$tmp/m.jsonl") steps: exit $rc, final checkpoint at step $saved"
  "$loom" ckpt verify "$tmp/ck" >/dev/null || { echo "FAIL: the final checkpoint does not verify"; exit 1; }
  end=$((saved + 2))
  run p 2 "$tmp/full.jsonl" --stop-after $end
  run p 2 "$tmp/resumed.jsonl" --ckpt-dir "$tmp/ck" --resume latest --stop-after $end
  compare "$tmp/full.jsonl" "$tmp/resumed.jsonl" $((saved + 1)) 0
  ;;
corrupt)
  plan p "dp=2" 2
  run p 2 "$tmp/m.jsonl" --ckpt-dir "$tmp/ck" --stop-after 2 --sync-save
  shard=$(ls "$tmp"/ck/step_000002/model_weights/*.h5 | head -n 1)
  "$loom" ckpt verify "$tmp/ck" >/dev/null || { echo "FAIL: a fresh checkpoint does not verify"; exit 1; }
  # A resume with nothing left to train is refused; one under another seed
  # says that the data order changes.
  STEPS=2 plan short "dp=2" 2
  if "${mpi[@]}" -np 2 "$loom" execute "$tmp/short.json" --quiet --resume "$tmp/ck" >"$tmp/r" 2>&1; then
    cat "$tmp/r"; echo "FAIL: a resume past the run's last step ran"; exit 1
  fi
  grep -q "nothing left to train" "$tmp/r" || { cat "$tmp/r"; echo "FAIL: no clear message past the end"; exit 1; }
  plan seeded "dp=2" 2 --seed 99
  run seeded 2 "$tmp/s.jsonl" --resume "$tmp/ck" --stop-after 3
  grep -q "notice: the checkpoint's run used seed 1234, this one 99" "$tmp/out" ||
    { cat "$tmp/out"; echo "FAIL: the seed change was not said"; exit 1; }
  echo "  a resume past the end refused; a seed change said"
  python3 - "$shard" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0x40; open(p, "wb").write(b)
PY
  if "$loom" ckpt verify "$tmp/ck" >"$tmp/v" 2>&1; then cat "$tmp/v"; echo "FAIL: verify accepted a flipped byte"; exit 1; fi
  grep -q "$(basename "$shard")" "$tmp/v" || { cat "$tmp/v"; echo "FAIL: verify does not name the file"; exit 1; }
  if "${mpi[@]}" -np 2 "$loom" execute "$tmp/p.json" --quiet --ckpt-dir "$tmp/ck" --resume latest >"$tmp/r" 2>&1; then
    cat "$tmp/r"; echo "FAIL: --resume accepted a corrupt checkpoint"; exit 1
  fi
  grep -qi "checksum\|corrupt\|mismatch" "$tmp/r" || { cat "$tmp/r"; echo "FAIL: no clear message"; exit 1; }
  echo "  flipped byte found by verify and refused by --resume"
  ;;
esac
echo "PASS: $mode"
