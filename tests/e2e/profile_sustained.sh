#!/usr/bin/env bash
# gpu-validate's stage 6c hands its long-run GEMM rate to the calibrated
# profile (scripts/gpu-profile-sustained.py): the rate lands in
# sustained_gemm_tflops, the source names the run, loom reads the profile and
# caps its large GEMMs there; a rate above the peak or for a precision the
# profile has no peak for is not taken; no 8192^3 figure changes nothing. The
# attention kernel's held/burst share lands in sustained_attention_ratio
# (capped at 1; refused without an attention table to scale). The weight-
# gradient GEMMs' accumulation into an fp32 main gradient lands in
# wgrad_accumulate_exposed: the median extra time at the profile's streaming
# rate over 8 bytes an output element, clamped to [0, 1].
# usage: profile_sustained.sh LOOM SOURCE_DIR
set -euo pipefail
loom=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "profile_sustained: FAIL: $*" >&2; exit 1; }
script=$src/scripts/gpu-profile-sustained.py

# A calibrated-style profile: the H100 one without its cap, its FP8 peak and
# what is measured in FP8.
python3 - "$src/hwprofiles/dgx-h100.json" "$tmp/cal.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
a = p["accelerator"]
for k in ("sustained_gemm_tflops", "peak_fp8_tflops", "fp8_gemm_best_efficiency", "fp8_attention_speedup"):
    a.pop(k, None)
json.dump(p, open(sys.argv[2], "w"), indent=1)
PY
cat > "$tmp/sus.json" <<'J'
{"device": "NVIDIA H200", "torch": "2.9.0", "sustain_s": 40,
 "gemms": [{"shape": [8192, 8192, 8192], "dtype": "bf16", "burst_tflops": 790.0, "sustained_tflops": 700.0},
           {"shape": [8192, 6144, 4096], "dtype": "bf16", "burst_tflops": 700.0, "sustained_tflops": 650.0},
           {"shape": [8192, 8192, 8192], "dtype": "fp8", "burst_tflops": 1500.0, "sustained_tflops": 1400.0}],
 "attention": {"kernel": "sdpa-cudnn", "shape": [1, 32, 8192, 128], "causal": true,
               "burst_tflops": 640.0, "sustained_tflops": 600.0, "sustained_over_burst": 0.9375}}
J
out=$(python3 "$script" "$tmp/cal.json" "$tmp/sus.json")
echo "$out"
grep -q "not taken, fp8: the profile has no fp8 peak" <<<"$out" || fail "an fp8 rate without an fp8 peak was not refused"
python3 - "$tmp/cal.json" <<'PY' || fail "the profile does not carry the rate and its source"
import json, sys
a = json.load(open(sys.argv[1]))["accelerator"]
assert a["sustained_gemm_tflops"] == {"bf16": 700.0}, a.get("sustained_gemm_tflops")
assert a["sustained_attention_ratio"] == 0.9375, a.get("sustained_attention_ratio")
assert "gpu-validate stage 6c" in a["source"] and "NVIDIA H200" in a["source"], a["source"]
assert "sdpa-cudnn 1x32x8192x128 held" in a["source"], a["source"]
PY
# A second run replaces its sentence in the source instead of adding one.
python3 "$script" "$tmp/cal.json" "$tmp/sus.json" >/dev/null
[ "$(grep -o 'sustained_gemm_tflops: gpu-validate stage 6c' "$tmp/cal.json" | wc -l)" = 1 ] || fail "the source names the GEMM run twice"
[ "$(grep -o 'sustained_attention_ratio: gpu-validate stage 6c' "$tmp/cal.json" | wc -l)" = 1 ] || fail "the source names the attention run twice"
# A run that takes only the attention share keeps the GEMM run's sentence.
cat > "$tmp/att_only.json" <<'J'
{"device": "NVIDIA H200", "torch": "2.9.0", "gemms": [],
 "attention": {"kernel": "sdpa-cudnn", "shape": [1, 32, 8192, 128], "burst_tflops": 640.0, "sustained_tflops": 608.0,
               "sustained_over_burst": 0.95}}
J
python3 "$script" "$tmp/cal.json" "$tmp/att_only.json" | grep -q "now has sustained_attention_ratio 0.95$" ||
  fail "an attention-only run did not report what it took"
python3 - "$tmp/cal.json" <<'PY' || fail "an attention-only run lost the GEMM run's sentence or repeated its own"
import json, sys
a = json.load(open(sys.argv[1]))["accelerator"]
assert a["sustained_attention_ratio"] == 0.95 and a["sustained_gemm_tflops"] == {"bf16": 700.0}, a
src = a["source"]
assert "an 8192^3 GEMM back to back for 40 s" in src, src
assert src.count("sustained_attention_ratio: gpu-validate stage 6c") == 1 and "608.0 TFLOP/s against 640.0" in src, src
PY
plan=$("$loom" plan --model llama-3-8b --hw "$tmp/cal.json" --gpus 8 --global-batch 64 --seq 2048 \
       --layout dp=8,zero=3,micro=1,recompute=full 2>&1) || { echo "$plan"; fail "loom plan on the profile failed"; }
grep -q "capped at the 0.71 a large GEMM sustains" <<<"$plan" || { echo "$plan"; fail "the plan does not cap at 700/989"; }

# The accumulating weight-gradient GEMMs: the profile streams at 3350 x 0.9
# GB/s, so a 4096 x 14336 output's 8 bytes an element (469.8 MB) take 155.8
# us; two shapes show half of that (+77.9 us on 1.3746 ms), one none: 0.5.
python3 - "$tmp/wg.json" <<'PY'
import json, sys
inp, out, t = 4096, 14336, 8192
flops = 2.0 * inp * out * t
plain_s = flops / 700e12
half = 0.5 * 8.0 * inp * out / (3350e9 * 0.9)
rows = [{"shape": [inp, out, t], "bf16_out_tflops": 700.0, "fp32_accumulate_tflops": flops / (plain_s + half) / 1e12},
        {"shape": [inp, out, t], "bf16_out_tflops": 700.0, "fp32_accumulate_tflops": flops / (plain_s + half) / 1e12},
        {"shape": [inp, out, t], "bf16_out_tflops": 700.0, "fp32_accumulate_tflops": 700.0}]
json.dump({"device": "NVIDIA H200", "torch": "2.9.0", "gemms": [], "wgrad_accumulate": rows}, open(sys.argv[1], "w"))
PY
out=$(python3 "$script" "$tmp/cal.json" "$tmp/wg.json")
grep -q "now has wgrad_accumulate_exposed 0.5$" <<<"$out" || { echo "$out"; fail "the accumulation share was not taken as 0.5"; }
python3 - "$tmp/cal.json" <<'PY' || fail "the accumulation share or its source is wrong, or it dropped the other runs' sentences"
import json, sys
a = json.load(open(sys.argv[1]))["accelerator"]
assert a["wgrad_accumulate_exposed"] == 0.5, a.get("wgrad_accumulate_exposed")
src = a["source"]
assert src.count("wgrad_accumulate_exposed: gpu-validate stage 6c") == 1 and "3 weight-gradient GEMMs" in src, src
assert "an 8192^3 GEMM back to back for 40 s" in src and "608.0 TFLOP/s against 640.0" in src, src
PY
"$loom" plan --model llama-3-8b --hw "$tmp/cal.json" --gpus 8 --global-batch 64 --seq 2048 --framework megatron-core \
  --layout dp=8,zero=1,micro=1,recompute=none >/dev/null 2>&1 || fail "loom plan on the profile with the share failed"
# An accumulating GEMM slower than the whole read and write is taken as 1.
python3 - "$tmp/wg.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["wgrad_accumulate"]:
    r["fp32_accumulate_tflops"] = 500.0
json.dump(d, open(sys.argv[1], "w"))
PY
python3 "$script" "$tmp/cal.json" "$tmp/wg.json" | grep -q "now has wgrad_accumulate_exposed 1.0$" ||
  fail "a share above 1 was not taken as 1"

# Above the peak: not taken, the file unchanged.
python3 - "$tmp/sus.json" "$tmp/over.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d.pop("attention")
d["gemms"][0]["sustained_tflops"] = 1200.0
json.dump(d, open(sys.argv[2], "w"))
PY
python3 - "$tmp/cal.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["accelerator"].pop("sustained_gemm_tflops")
json.dump(p, open(sys.argv[1], "w"), indent=1)
PY
cp "$tmp/cal.json" "$tmp/before.json"
out=$(python3 "$script" "$tmp/cal.json" "$tmp/over.json")
grep -q "bf16: 1200.0 TFLOP/s is above the profile's peak" <<<"$out" || { echo "$out"; fail "a rate above the peak was taken"; }
cmp -s "$tmp/cal.json" "$tmp/before.json" || fail "the profile changed though nothing was taken"
# No 8192^3 figure: nothing to take.
echo '{"gemms": []}' > "$tmp/none.json"
python3 "$script" "$tmp/cal.json" "$tmp/none.json" | grep -q "no 8192^3 sustained rate" || fail "an empty run was not reported"
# A held share above 1 is noise, taken as 1; a profile without an attention
# table has nothing for the share to scale.
echo '{"gemms": [], "attention": {"kernel": "sdpa-cudnn", "shape": [1], "sustained_over_burst": 1.02}}' > "$tmp/att.json"
python3 "$script" "$tmp/cal.json" "$tmp/att.json" >/dev/null
python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["accelerator"]; assert a["sustained_attention_ratio"] == 1.0, a' \
  "$tmp/cal.json" || fail "a share above 1 was not taken as 1"
python3 - "$tmp/cal.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); a = p["accelerator"]
for k in ("attention_efficiency", "attention_kernel", "attention_kernel_source", "attention_kernels",
          "sustained_attention_ratio"):
    a.pop(k, None)
json.dump(p, open(sys.argv[1], "w"), indent=1)
PY
out=$(python3 "$script" "$tmp/cal.json" "$tmp/att.json")
grep -q "not taken, attention: the profile has no attention_efficiency table" <<<"$out" || { echo "$out"; fail "a share without a table was taken"; }
echo "profile_sustained: ok"
