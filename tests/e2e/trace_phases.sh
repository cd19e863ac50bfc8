#!/usr/bin/env bash
# scripts/trace_phases.py on a hand-made Kineto trace: kernels go to the
# innermost annotation holding their launch (on the launching thread, else on
# any thread, as autograd's backward thread launches inside the main thread's
# annotation), kinds come from kernel names, --per divides, --exclude drops an
# annotation, and a file that is not a trace is refused.
# usage: trace_phases.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "trace_phases: FAIL: $*" >&2; exit 1; }
script=$src/scripts/trace_phases.py

# Main thread 1: "step" [0, 1000] holds "fwd" [10, 400] and "bwd" [500, 900].
# Thread 2 (autograd) launches at 600 with no annotation of its own.
# Kernels (durations in us): a GEMM and a flash kernel from fwd, a cast and
# an NCCL kernel from bwd (thread 2), an elementwise kernel outside "fwd" and
# "bwd" (in "step" only), and one launched outside every annotation.
cat > "$tmp/t.json" <<'J'
{"traceEvents": [
 {"ph": "X", "cat": "user_annotation", "name": "step", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
 {"ph": "X", "cat": "user_annotation", "name": "fwd", "pid": 1, "tid": 1, "ts": 10, "dur": 390},
 {"ph": "X", "cat": "user_annotation", "name": "bwd", "pid": 1, "tid": 1, "ts": 500, "dur": 400},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 3, "args": {"correlation": 1}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 30, "dur": 3, "args": {"correlation": 2}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 600, "dur": 3, "args": {"correlation": 3}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 610, "dur": 3, "args": {"correlation": 4}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 450, "dur": 3, "args": {"correlation": 5}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2000, "dur": 3, "args": {"correlation": 6}},
 {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32", "pid": 0, "tid": 7, "ts": 40, "dur": 100, "args": {"correlation": 1}},
 {"ph": "X", "cat": "kernel", "name": "flash::FlashAttnFwd", "pid": 0, "tid": 7, "ts": 140, "dur": 40, "args": {"correlation": 2}},
 {"ph": "X", "cat": "kernel", "name": "cast_transpose_kernel", "pid": 0, "tid": 7, "ts": 620, "dur": 8, "args": {"correlation": 3}},
 {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0, "tid": 9, "ts": 620, "dur": 60, "args": {"correlation": 4}},
 {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "pid": 0, "tid": 7, "ts": 460, "dur": 6, "args": {"correlation": 5}},
 {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "pid": 0, "tid": 7, "ts": 2010, "dur": 4, "args": {"correlation": 6}}
]}
J
out=$(python3 "$script" "$tmp/t.json" --json)
python3 - "$out" <<'PY' || fail "phases: $out"
import json, sys
t = json.loads(sys.argv[1])
want = {"fwd": {"gemm": 0.1, "attn": 0.04}, "bwd": {"cast": 0.008, "comm": 0.06}, "step": {"elem": 0.006}, "-": {"elem": 0.004}}
for phase, kinds in want.items():
    for kind, ms in kinds.items():
        assert abs(t[phase][kind] - ms) < 1e-9, (phase, kind, t[phase][kind], ms)
assert abs(sum(v for k in t.values() for v in k.values()) - 0.218) < 1e-9
PY
# --per halves every figure; --exclude step leaves its elementwise kernel unannotated.
out=$(python3 "$script" "$tmp/t.json" --json --per 2 --exclude step)
python3 - "$out" <<'PY' || fail "--per/--exclude: $out"
import json, sys
t = json.loads(sys.argv[1])
assert "step" not in t, t
assert abs(t["fwd"]["gemm"] - 0.05) < 1e-9, t
assert abs(t["-"]["elem"] - 0.005) < 1e-9, t
PY
# The table form sums a phase's kinds.
# (read whole, then matched: grep -q would close the pipe under the writer)
table=$(python3 "$script" "$tmp/t.json")
grep -Eq '^fwd +0\.100 +0\.040 +0\.000 +0\.000 +0\.000 +0\.140$' <<< "$table" || fail "table: $table"
# Not a trace, no kernels, a bad --per: refused with a message, exit 1.
echo '{"x": 1}' > "$tmp/bad.json"
if python3 "$script" "$tmp/bad.json" 2> "$tmp/err"; then fail "a file without traceEvents was read"; fi
grep -q "cannot read" "$tmp/err" || fail "message: $(cat "$tmp/err")"
echo '{"traceEvents": []}' > "$tmp/empty.json"
if python3 "$script" "$tmp/empty.json" 2> "$tmp/err"; then fail "a trace without kernels was read"; fi
grep -q "no GPU kernels" "$tmp/err" || fail "message: $(cat "$tmp/err")"
if python3 "$script" "$tmp/t.json" --per 0 2> /dev/null; then fail "--per 0 was taken"; fi
echo "trace_phases: ok"
