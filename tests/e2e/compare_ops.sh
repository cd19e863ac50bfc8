#!/usr/bin/env bash
# loom compare --ops: for each layout (2 ranks, a scaled GPT-2, 3 gradient
# buckets rather than the default 4) the predicted trace of `loom plan --trace`
# and the measured trace of `loom execute --trace` join one to one on op ids:
# "N ops joined, 0 unmatched" with N the predicted trace's program ops, every
# op measured on the ranks that run it (dp x tp replicas). Then the refusals,
# exit 2 with a message: a measured trace against the predicted trace of the
# same layout planned with other buckets (the program hashes, both named), the
# traces given in the wrong order, a trace without program ops.
# usage: compare_ops.sh LOOM MPIEXEC [MPIEXEC_ARGS...]
set -u
loom=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# plan NAME LAYOUT LAYERS BUCKETS: plan and predicted trace for 2 ranks
plan() {
  "$loom" plan --model gpt2-124m --scale "layers=$3,hidden=64,heads=2" --hw cpu-local --gpus 2 --global-batch 8 \
    --seq 32 --layout "$2" --grad-buckets "$4" --out "$tmp/$1.plan.json" --trace "$tmp/$1.pred.json" \
    >"$tmp/$1.plan.out" 2>&1 || { cat "$tmp/$1.plan.out"; fail "plan $1 ($2)"; }
}

# name layout layers replicas-per-op (ranks that run each op: dp x tp)
layouts="dp2 dp=2,micro=2 2 2
tp2 dp=1,tp=2,micro=2 2 2
pp2-1f1b dp=1,pp=2,schedule=1f1b,micro=2 2 1
pp2-interleaved dp=1,pp=2,schedule=interleaved,v=2,micro=2 4 1
pp2-dualpipev dp=1,pp=2,schedule=dualpipev,micro=1 4 1
dp2-zero1 dp=2,zero=1,micro=2 2 2
dp2-zero2 dp=2,zero=2,micro=2 2 2
dp2-zero3 dp=2,zero=3,micro=2 2 2"

done_layouts=0
while read -r name layout layers replicas; do
  plan "$name" "$layout" "$layers" 3
  timeout 120 "$@" -np 2 "$loom" execute "$tmp/$name.plan.json" --steps 3 --threads 1 --quiet \
    --trace "$tmp/$name.meas.json" </dev/null >"$tmp/$name.exec.out" 2>&1 || { cat "$tmp/$name.exec.out"; fail "execute $name"; }
  n=$(python3 -c 'import json,sys; print(sum(1 for e in json.load(open(sys.argv[1]))["traceEvents"]
        if e.get("ph") == "X" and e.get("args", {}).get("op_id", -1) >= 0))' "$tmp/$name.pred.json") ||
    fail "cannot count the predicted ops of $name"
  [ "$n" -gt 0 ] || fail "$name: the predicted trace has no program ops"
  "$loom" compare --ops "$tmp/$name.pred.json" "$tmp/$name.meas.json" --top 5 >"$tmp/$name.ops" 2>&1
  rc=$?
  [ $rc = 0 ] || { cat "$tmp/$name.ops"; fail "compare --ops $name exited $rc"; }
  grep -q "^$n ops joined, 0 unmatched" "$tmp/$name.ops" || { cat "$tmp/$name.ops"; fail "$name: not '$n ops joined, 0 unmatched'"; }
  grep -q "^per op kind" "$tmp/$name.ops" && grep -qE "^  fwd +[0-9]+ " "$tmp/$name.ops" ||
    { cat "$tmp/$name.ops"; fail "$name: no per-kind summary"; }
  "$loom" compare --ops "$tmp/$name.pred.json" "$tmp/$name.meas.json" --json >"$tmp/$name.ops.json" ||
    fail "compare --ops --json $name"
  python3 - "$tmp/$name.ops.json" "$n" "$replicas" "$name" <<'PY' || exit 1
import json, sys
j = json.load(open(sys.argv[1]))
n, replicas, name = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
assert j["joined"] == n and j["unmatched"] == 0 and len(j["ops"]) == n, (name, j["joined"], n)
ids = [o["op_id"] for o in j["ops"]]
assert ids == sorted(set(ids)), (name, "op ids not one to one")
for o in j["ops"]:
    assert o["ranks"] == replicas, (name, o["name"], o["ranks"], replicas)
    assert o["measured_max_us"] >= o["measured_us"] >= 0, (name, o)
assert sum(k["count"] for k in j["kinds"]) == n, (name, j["kinds"])
if name.startswith("dp2"):
    assert any(k["kind"] == "grad_sync" for k in j["kinds"]), (name, j["kinds"])
if name.startswith("pp2"):
    assert any(k["kind"] == "recv_act" for k in j["kinds"]), (name, j["kinds"])
if name == "pp2-dualpipev":  # the deferred weight gradients, measured as ops of their own
    assert any(k["kind"] == "wgrad" and k["count"] > 0 for k in j["kinds"]), (name, j["kinds"])
PY
  echo "ok: $name ($n ops)"
  done_layouts=$((done_layouts + 1))
done <<<"$layouts"
[ "$done_layouts" = 8 ] || fail "$done_layouts of the 8 layouts ran"

# The dp=2 run against the same layout planned with 2 buckets: another program.
plan other dp=2,micro=2 2 2
"$loom" compare --ops "$tmp/other.pred.json" "$tmp/dp2.meas.json" >"$tmp/o" 2>&1
rc=$?
[ $rc = 2 ] || { cat "$tmp/o"; fail "traces of different programs: exit $rc (expected 2)"; }
grep -q "different programs" "$tmp/o" || { cat "$tmp/o"; fail "no 'different programs' message"; }
for f in other.pred dp2.meas; do
  h=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["otherData"]["program_hash"])' "$tmp/$f.json")
  [ -n "$h" ] && grep -q "$h" "$tmp/o" || { cat "$tmp/o"; fail "the message does not name $f's program hash '$h'"; }
done

# The wrong order, and a trace without program ops.
"$loom" compare --ops "$tmp/dp2.meas.json" "$tmp/dp2.pred.json" >"$tmp/o" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "is a measured trace" "$tmp/o" || { cat "$tmp/o"; fail "swapped traces: exit $rc"; }
echo '{"traceEvents": [{"name": "x", "ph": "X", "ts": 0, "dur": 1, "pid": 0, "tid": 0}]}' >"$tmp/none.json"
"$loom" compare --ops "$tmp/dp2.pred.json" "$tmp/none.json" >"$tmp/o" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "has no program ops" "$tmp/o" || { cat "$tmp/o"; fail "a trace without ops: exit $rc"; }
echo "PASS"
