#!/usr/bin/env bash
# Starts a job the torchrun way, without MPI: one plain background process per
# rank with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
# MASTER_PORT set, then checks how they end.
#   run_tcp_job.sh --world N [--start 0,1,...] [--max-seconds S]
#                  [--expect-fail REGEX] -- PROGRAM [ARGS...]
# --start: the ranks to start (default: all; the others never arrive).
# Default: passes when every started rank exits 0 within S seconds.
# --expect-fail: passes when every started rank exits non-zero within S
# seconds and their combined output matches REGEX (grep -E).
# MASTER_PORT is drawn below the kernel's ephemeral range (the ranks' own
# listening sockets use that range); a draw that is in use is drawn again.
set -u
world=2 start="" max_s=60 expect=""
while [ $# -gt 0 ]; do
  case $1 in
    --world) world=$2; shift 2 ;;
    --start) start=$2; shift 2 ;;
    --max-seconds) max_s=$2; shift 2 ;;
    --expect-fail) expect=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "run_tcp_job.sh: unknown argument $1"; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: run_tcp_job.sh --world N [--start R,...] [--max-seconds S] [--expect-fail RE] -- PROGRAM ..."; exit 2; }
[ -n "$start" ] || start=$(seq -s, 0 $((world - 1)))
IFS=, read -r -a ranks <<<"$start"

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

for attempt in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 12000))
  pids=()
  t0=$(date +%s%N)
  for r in "${ranks[@]}"; do
    RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$@" >"$tmp/rank$r.log" 2>&1 &
    pids+=($!)
  done
  # Wait for all of them, killing the rest at the deadline.
  codes=()
  deadline=$(( $(date +%s) + max_s ))
  timed_out=0
  for i in "${!pids[@]}"; do
    p=${pids[$i]}
    while kill -0 "$p" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
    if kill -0 "$p" 2>/dev/null; then
      timed_out=1
      kill -9 "$p" 2>/dev/null
    fi
    wait "$p"
    codes[$i]=$?
  done
  elapsed_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if grep -q "is in use (another job?)" "$tmp"/rank*.log 2>/dev/null && [ $attempt -lt 5 ]; then
    echo "MASTER_PORT $port is in use; drawing another"
    continue
  fi
  break
done
pids=()

for i in "${!ranks[@]}"; do
  echo "---- rank ${ranks[$i]} (exit ${codes[$i]}):"
  cat "$tmp/rank${ranks[$i]}.log"
done
echo "---- ${#ranks[@]} of $world ranks started on MASTER_PORT $port, ended after ${elapsed_ms} ms"
[ $timed_out -eq 0 ] || { echo "FAIL: the job did not end within $max_s s (a hang)"; exit 1; }
if [ -z "$expect" ]; then
  for i in "${!ranks[@]}"; do
    [ "${codes[$i]}" -eq 0 ] || { echo "FAIL: rank ${ranks[$i]} exited with ${codes[$i]}"; exit 1; }
  done
  echo "PASS: every rank exited 0"
else
  for i in "${!ranks[@]}"; do
    [ "${codes[$i]}" -ne 0 ] || { echo "FAIL: rank ${ranks[$i]} exited 0; the failure went unnoticed"; exit 1; }
  done
  cat "$tmp"/rank*.log | grep -qE "$expect" || { echo "FAIL: no output matches '$expect'"; exit 1; }
  echo "PASS: every started rank failed as expected"
fi
