#!/usr/bin/env bash
# `loom calibrate` under mpirun writes a profile that `loom plan` accepts, with
# measured figures in it (GEMM peak, memory bandwidth, elementwise kernels,
# collectives).
# usage: calibrate.sh LOOM MPIEXEC [MPIEXEC_ARGS...]
set -u
loom=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$@" -np 2 "$loom" calibrate --quick --threads 1 --name t --out "$tmp/t.json" >"$tmp/out" 2>&1 ||
  { cat "$tmp/out"; echo "FAIL: calibrate"; exit 1; }
python3 - "$tmp/t.json" <<'PY' || exit 1
import json, sys
j = json.load(open(sys.argv[1]))
a, n = j["accelerator"], j["node"]
assert "measured by `loom calibrate`" in a["source"], a["source"]
assert 1e-3 < a["peak_fp32_tflops"] < 100, a["peak_fp32_tflops"]
assert a["memory_bw_gb_per_s"] > 0.1 and n["intra_ring_busbw_gb_per_s"] > 0.01 and n["devices_per_node"] == 2
g = [p["gflop"] for p in a["gemm_efficiency"]]
assert g == sorted(g) and len(g) >= 3, g
assert all(0 < p["efficiency"] <= 1 for p in a["gemm_efficiency"])
assert len(j["calibration"]["collectives"]) >= 3
# bandwidth x efficiency reproduces the measured elementwise-layer and optimizer
# rates; the bandwidth is the best of the three streaming rates measured
c = j["calibration"]
rates = [c["triad_gb_per_s"], c["elementwise_gb_per_s"], c["optimizer_gb_per_s"]]
assert min(rates) > 0 and abs(a["memory_bw_gb_per_s"] - max(rates)) < 1e-9 * max(rates), (a, c)
for key, rate in (("memory_bw_efficiency", c["elementwise_gb_per_s"]), ("optimizer_bw_efficiency", c["optimizer_gb_per_s"])):
    assert 0 < a[key] <= 1 and abs(a[key] * a["memory_bw_gb_per_s"] - rate) < 1e-6 * rate, (key, a, c)
# the attention kernel's table, keyed by one head's forward GFLOP
t = [p["gflop"] for p in a["attention_efficiency"]]
assert 0.2 < a["attention_backward_ratio"] < 10, a["attention_backward_ratio"]
assert t == sorted(t) and len(t) >= 4 and all(0 < p["efficiency"] <= 1 for p in a["attention_efficiency"]), t
# the collective sweep itself, which the simulator interpolates by size
m = n["measured_collectives"]
assert m["ranks"] == 2, m
for name in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv"):
    rows = m[name]
    assert [r["bytes"] for r in rows] == [r["bytes"] for r in c["collectives"]], name
    for r, cr in zip(rows, c["collectives"]):
        assert abs(r["time_us"] - cr[name]["time_us"]) < 1e-6 * r["time_us"], (name, r, cr)
print("profile ok:", a["peak_fp32_tflops"] * 1e3, "GFLOP/s per rank,", n["intra_ring_busbw_gb_per_s"], "GB/s busbw")
PY
"$loom" plan --model gpt2-124m --scale layers=2,hidden=64,heads=4,vocab=256 --hw "$tmp/t.json" --gpus 2 \
  --global-batch 8 --seq 32 --json >/dev/null || { echo "FAIL: plan with the calibrated profile"; exit 1; }
# A backend this build lacks is refused before anything runs, naming the fix.
"$loom" calibrate --backend cuda >"$tmp/o" 2>"$tmp/e"; rc=$?
[ $rc = 2 ] && grep -q "backend cpu" "$tmp/e" || { cat "$tmp/e"; echo "FAIL: --backend cuda (rc $rc)"; exit 1; }
"$loom" calibrate --backend tpu >"$tmp/o" 2>"$tmp/e"; rc=$?
[ $rc = 2 ] && grep -q "'tpu' is not one of" "$tmp/e" || { cat "$tmp/e"; echo "FAIL: --backend tpu (rc $rc)"; exit 1; }
echo "PASS"
