#!/usr/bin/env bash
# `loom execute` launched without MPI, as torchrun or a bare srun would: two
# plain processes with RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE /
# MASTER_ADDR / MASTER_PORT meet at rank 0's TCP store.
#   layouts   dp=2, tp=2 and pp=2 plans give the losses of the same plan on
#             one rank (1e-5 relative at every step);
#   missing   WORLD_SIZE=2 but only rank 0 starts: it exits non-zero within
#             its --timeout, naming rank 1.
# usage: tcp_launch.sh MODE LOOM
set -u
mode=$1 loom=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Below the kernel's ephemeral range (32768 up), where the ranks' own
# listeners and connections take their ports.
port=$(( 20000 + (RANDOM % 12000) ))
export OMP_NUM_THREADS=1 LOOM_LAUNCH=
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE PMIX_RANK SLURM_PROCID SLURM_NTASKS
plan() {  # plan NAME GPUS LAYOUT
  "$loom" plan --model gpt2-124m --scale layers=4,hidden=64,heads=4,vocab=256 --hw cpu-local --gpus "$2" \
    --global-batch 8 --seq 32 --layout "$3" --steps 4 --out "$tmp/$1.json" >/dev/null || {
    echo "FAIL: plan $3"; exit 1; }
}
losses() { sed -n 's/.*"loss":\([-0-9.eE+]*\).*/\1/p' "$1"; }
launch() {  # launch NAME WORLD RANKS...: the given ranks of a WORLD-rank job, in the background; waits
  local name=$1 world=$2 pids=() r rc=0
  shift 2
  port=$((port + 1))
  for r in "$@"; do
    RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$loom" execute "$tmp/$name.json" --threads 1 --timeout "${TIMEOUT:-60}" --metrics "$tmp/$name.m$r.jsonl" \
      >"$tmp/$name.out$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  return $rc
}

if [ "$mode" = missing ]; then
  plan two 2 dp=2
  start=$(date +%s)
  TIMEOUT=5 launch two 2 0
  rc=$?
  took=$(( $(date +%s) - start ))
  cat "$tmp/two.out0"
  [ $rc -ne 0 ] || { echo "FAIL: exit 0 with rank 1 missing"; exit 1; }
  grep -q "rank 1" "$tmp/two.out0" || { echo "FAIL: the message does not name rank 1"; exit 1; }
  (( took <= 30 )) || { echo "FAIL: took ${took} s with a 5 s timeout"; exit 1; }
  echo "PASS: a missing rank ends the job in ${took} s (exit $rc)"
  exit 0
fi

plan single 1 dp=1
LOOM_LAUNCH=single "$loom" execute "$tmp/single.json" --threads 1 --metrics "$tmp/single.jsonl" >"$tmp/single.out" 2>&1 ||
  { cat "$tmp/single.out"; echo "FAIL: single-rank run"; exit 1; }
fails=0
for l in "dp=2,zero=1" "tp=2,sp=1" "pp=2,micro=2,schedule=1f1b"; do
  name=l$(echo "$l" | cut -d, -f1 | tr '=' '_')
  plan "$name" 2 "$l"
  if ! launch "$name" 2 0 1; then
    cat "$tmp/$name.out0" "$tmp/$name.out1"; echo "FAIL: $l did not run"; fails=$((fails + 1)); continue
  fi
  grep -q "joined by TCP rendezvous" "$tmp/$name.out0" || { echo "FAIL: $l was not joined over TCP"; fails=$((fails + 1)); }
  worst=$(paste <(losses "$tmp/single.jsonl") <(losses "$tmp/$name.m0.jsonl") |
          awk 'NF == 2 { n++; d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > m) m = d } END { if (n != 4) print "missing"; else printf "%.2e", m }')
  if [ "$worst" = missing ] || awk -v w="$worst" 'BEGIN { exit !(w > 1e-5) }'; then
    echo "FAIL: $l losses differ from one rank: $worst"; paste <(losses "$tmp/single.jsonl") <(losses "$tmp/$name.m0.jsonl")
    fails=$((fails + 1))
  else
    echo "PASS: $l over TCP matches one rank (largest relative difference $worst)"
  fi
done
exit $(( fails > 0 ))
