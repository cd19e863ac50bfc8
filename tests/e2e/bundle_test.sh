#!/usr/bin/env bash
# The install tree and the relocatable GPU bundle, as a user deploys them:
#   1. `cmake --install` gives P/bin/loom and P/share/loom/{models,hwprofiles,data};
#      the installed loom plans from / with an empty environment;
#   2. scripts/gpu-bundle packs the build into a folder, which is then MOVED;
#      from / with an empty environment its loom plans and trains 2 CPU steps
#      on the sample corpus it carries (found next to the executable, not in
#      the source tree), loom-env reports, and gpu-validate without a GPU
#      exits 2 with a one-line reason;
#   3. gpu-validate's rehearsal (GPU_VALIDATE_REHEARSAL=1, a stand-in
#      nvidia-smi, every stage on the CPU with a 1-layer model): each stage
#      writes its summary line, the files stay within 8, the per-op profile
#      and the calibrated predicted-vs-measured tables come out;
#   4. ldd of every bundled program, with no LD_LIBRARY_PATH, misses nothing
#      but the GPU libraries the node provides.
# usage: bundle_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "bundle_test: FAIL: $*" >&2; exit 1; }

echo "== install tree"
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
for f in bin/loom share/loom/models/gpt2-124m.json share/loom/hwprofiles/dgx-h100.json \
         share/loom/data/tinyshakespeare.txt share/loom/data/tokenizer/shakespeare_bpe.model \
         share/loom/bench/suites/ci.json; do
  [ -e "$tmp/prefix/$f" ] || fail "install tree lacks $f"
done
(cd / && env -i "$tmp/prefix/bin/loom" plan --model gpt2-124m --hw dgx-h100 --gpus 8 --global-batch 64 --seq 1024 \
   --out "$tmp/installed-plan.json" >/dev/null) || fail "installed loom plan failed"

echo "== bundle, moved"
# This bundles the developer build, which links ICU (30 MB of Unicode data,
# for text cleaning); the bundle carried to a GPU host comes from gpu-bundle's
# own configuration, without ICU and Arrow, and keeps its 64 MiB limit.
"$src/scripts/gpu-bundle" "$tmp/bundle" --build "$build" --max-mib 128
mv "$tmp/bundle" "$tmp/moved"
b=$tmp/moved
cd /
env -i "$b/bin/loom" plan --model gpt2-124m --scale layers=2,hidden=64,heads=4,vocab=256 --hw cpu-local --gpus 1 \
  --global-batch 4 --seq 64 --layout dp=1 --out "$tmp/plan.json" >/dev/null || fail "bundled loom plan failed"
out=$(env -i "$b/bin/loom" execute "$tmp/plan.json" --steps 2 --threads 1 --record "$tmp/run.json" 2>&1) ||
  { echo "$out"; fail "bundled loom execute failed"; }
echo "$out" | head -4
grep -q "^data: $b/share/loom/data/tinyshakespeare.txt" <<<"$out" || fail "the sample corpus did not come from the bundle"
grep -q "step    2/2 | loss" <<<"$out" || fail "no second step"
[ -s "$tmp/run.json" ] || fail "no run record"

env_out=$(env -i "$b/bin/loom-env" 2>&1) || true
echo "$env_out" | sed -n '/GPU libraries/,$p'
grep -q "^Programs:" <<<"$env_out" || fail "loom-env printed no program table"
grep -q "loom  *ok" <<<"$env_out" || fail "loom-env: loom is not ok"

if [ -x "$b/bin/gpu-validate" ] && ! (command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1); then
  set +e
  gv=$(env -i "$b/bin/gpu-validate" "$tmp/gv" 2>&1)
  rc=$?
  set -e
  echo "gpu-validate without a GPU: rc=$rc: $gv"
  [ "$rc" = 2 ] || fail "gpu-validate without a GPU exited $rc, not 2"
  [ "$(printf '%s\n' "$gv" | wc -l)" = 1 ] || fail "gpu-validate without a GPU printed more than one line"
fi

echo "== gpu-validate rehearsal"
mkdir -p "$tmp/fakebin"
cp "$src/tests/e2e/fake-nvidia-smi" "$tmp/fakebin/nvidia-smi"
set +e
env -i PATH="$tmp/fakebin:/usr/bin:/bin" GPU_VALIDATE_REHEARSAL=1 LOSS_STEPS=12 PERF_STEPS=2 \
  "$b/bin/gpu-validate" "$tmp/gv" >"$tmp/gv.out" 2>&1
rc=$?
set -e
sed -n '/^gpu-validate:/,/^$/p' "$tmp/gv.out"
[ "$rc" = 1 ] || { cat "$tmp/gv.out"; fail "rehearsal exited $rc (expected 1: its 1-layer loss cannot match GPT-2's curve)"; }
for stage in "1 env" "2 ops (small)" "2 ops (production)" "2 cuDNN attention" "3 trainer" "3 trainer (poisoned)" "4 loss vs CPU fp32" \
             "5 checkpoint+resume" "6 perf gpt2-124m" "6 perf gpt2-355m" "6 calibrate" "6 predicted gpt2-124m" \
             "6d layer vs Loom" "6e attention kernels" "6b 2 GPUs" "7 memcheck" "8 A/B optimizer" "8 A/B fused-head" "8 A/B gemm-packed" "8 A/B gemm-epilogue" "8 A/B cudnn-attention"; do
  grep -q "^$stage  " "$tmp/gv/summary.txt" || fail "the rehearsal's summary has no line for stage '$stage'"
done
grep -q "^5 checkpoint+resume *PASS" "$tmp/gv/summary.txt" || fail "the rehearsal's resume was not bit-identical"
grep -q "^6 perf gpt2-124m *PASS.*tokens/s.*peak memory [0-9.]* GB" "$tmp/gv/summary.txt" || fail "no throughput figures"
grep -q "^gemm " "$tmp/gv/profile.txt" || fail "no per-op profile"
grep -q "step_time " "$tmp/gv/compare.txt" || fail "no predicted-vs-measured table on the calibrated profile"
grep -q "^8 A/B fused-head *INFO.*on/off [0-9.]*" "$tmp/gv/summary.txt" || fail "no A/B figures for the fused head"
grep -q "^2 cuDNN attention *PASS" "$tmp/gv/summary.txt" || fail "the cuDNN attention stage did not pass (its loading tests run without a GPU)"
grep -q "^6d layer vs Loom *PASS.*Loom's layer [0-9.]* ms" "$tmp/gv/summary.txt" || fail "the layer stage's Loom side did not run"
# The dry attention bench plays the profile's table back: what it writes is
# the profile's own rates again, and `loom plan --attention-kernel` loads it.
grep -q "^6e attention kernels *PASS.*16K fwd 673 TFLOP/s (1.00x the profile's), bwd ratio 2.98" "$tmp/gv/summary.txt" ||
  fail "the attention-kernel stage's dry run did not reproduce the dgx-h100 table"
files=$(find "$tmp/gv" -type f | wc -l)
(( files <= 8 )) || fail "gpu-validate left $files files (at most 8)"

echo "== libraries"
for p in "$b"/libexec/*; do
  head -c 4 "$p" | grep -q ELF || continue
  missing=$(env -i ldd "$p" | awk '/not found/ { print $1 }' |
            grep -Ev '^(libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so' || true)
  [ -z "$missing" ] || fail "$(basename "$p") misses $missing"
  rpath=$(readelf -d "$p" | sed -n 's/.*R.*PATH.*\[\(.*\)\]/\1/p')
  [ "$rpath" = '$ORIGIN/../lib' ] || fail "$(basename "$p") has RPATH '$rpath'"
done
size=$(du -sm "$b" | cut -f1)
echo "bundle_test: ok ($size MiB)"
