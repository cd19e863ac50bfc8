#!/usr/bin/env bash
# `loom execute` failure modes under mpirun, checked from outside:
#   kill      a rank is killed with SIGKILL after two steps: the job must end,
#             non-zero, within a bounded time, with a message;
#   world     the plan is for 2 ranks but 3 are launched: every rank exits
#             non-zero, the message naming both numbers and the fix is printed
#             once (not once per rank), and nobody calls MPI_Abort.
# usage: execute_failures.sh MODE LOOM MPIEXEC [MPIEXEC_ARGS...]
set -u
mode=$1 loom=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$loom" plan --model gpt2-124m --scale layers=2,hidden=64,heads=4,vocab=256 --hw cpu-local --gpus 2 \
  --global-batch 4 --seq 32 --layout dp=2 --steps 100000 --out "$tmp/plan.json" >/dev/null || {
  echo "FAIL: could not write the plan"; exit 1; }

if [ "$mode" = world ]; then
  "$@" -np 3 "$loom" execute "$tmp/plan.json" --steps 2 >"$tmp/out" 2>&1
  rc=$?
  cat "$tmp/out"
  [ $rc -ne 0 ] || { echo "FAIL: exit code 0 for a 3-rank launch of a 2-rank plan"; exit 1; }
  grep -q "the plan is for 2 ranks but 3 were launched" "$tmp/out" || { echo "FAIL: no message"; exit 1; }
  n=$(grep -c "the plan is for 2 ranks but 3 were launched" "$tmp/out")
  [ "$n" = 1 ] || { echo "FAIL: the message is printed $n times (once, not once per rank)"; exit 1; }
  ! grep -q "MPI_ABORT" "$tmp/out" || { echo "FAIL: a check every rank fails aborts the job (MPI_ABORT boilerplate)"; exit 1; }
  echo "PASS: wrong world size refused (exit $rc)"
  exit 0
fi

start=$(date +%s)
"$@" -np 2 "$loom" execute "$tmp/plan.json" --metrics "$tmp/m.jsonl" --timeout 10 >"$tmp/out" 2>&1 &
job=$!
for _ in $(seq 1 600); do
  [ -f "$tmp/m.jsonl" ] && [ "$(wc -l <"$tmp/m.jsonl")" -ge 2 ] && break
  sleep 0.1
done
victim=$(pgrep -P "$job" | tail -n 1)
[ -n "$victim" ] || { echo "FAIL: no rank process under mpirun"; cat "$tmp/out"; kill -9 "$job"; exit 1; }
kill -9 "$victim"
echo "killed rank process $victim after $(wc -l <"$tmp/m.jsonl") steps"
for _ in $(seq 1 600); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$job" 2>/dev/null; then
  echo "FAIL: the job still runs 60 s after a rank died (hang)"
  pkill -9 -P "$job"; kill -9 "$job"
  exit 1
fi
wait "$job"
rc=$?
elapsed=$(( $(date +%s) - start ))
tail -n 20 "$tmp/out"
[ $rc -ne 0 ] || { echo "FAIL: exit code 0 after a rank died"; exit 1; }
grep -qiE "signal 9|killed|aborts|failed" "$tmp/out" || { echo "FAIL: no message about the dead rank"; exit 1; }
echo "PASS: the job ended with exit $rc, ${elapsed} s after start"
