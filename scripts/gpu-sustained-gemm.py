#!/usr/bin/env python3
"""Burst vs sustained GEMM throughput on one GPU, with the SM clock and power.

The planner's GEMM tables come from short microbenchmarks (XLA's matmul
table, mamf-finder at 100 iterations). Training runs the tensor cores for
hours under the board's power cap, and the clock drops. This measures both on
the same shapes, so a profile can take its numbers from the sustained rate
(docs/validation.md, "Where the errors are"):

  burst      20 timed iterations after 5 warm-up ones
  sustained  back-to-back for SUSTAIN_S seconds (default 40); the rate over
             the last third, with nvidia-smi's SM clock and power sampled
             every 200 ms during it

Shapes: 8192^3 and the Llama-3-8B layer GEMMs at 8192 tokens (bf16; fp8 via
torch._scaled_mm when the device has it). Prints one JSON object; exits 2
without PyTorch or a GPU. usage: gpu-sustained-gemm.py [OUT.json]
"""
import json
import os
import subprocess
import sys
import time

try:
    import torch
except ImportError:
    print("gpu-sustained-gemm: PyTorch is not installed here; skipped")
    sys.exit(2)
if not torch.cuda.is_available():
    print("gpu-sustained-gemm: no CUDA device visible; skipped")
    sys.exit(2)

SUSTAIN_S = float(os.environ.get("SUSTAIN_S", "40"))
dev = torch.device("cuda")
SHAPES = [(8192, 8192, 8192), (8192, 6144, 4096), (8192, 4096, 4096), (8192, 28672, 4096), (8192, 4096, 14336)]


def smi_sampler():
    return subprocess.Popen(
        ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu", "--format=csv,noheader,nounits",
         "-lms", "200"], stdout=subprocess.PIPE, text=True)


def summarize(lines):
    rows = []
    for ln in lines:
        try:
            mhz, watts, temp = (float(x) for x in ln.split(","))
            rows.append((mhz, watts, temp))
        except ValueError:
            continue
    if not rows:
        return {}
    mhz = sorted(r[0] for r in rows)
    return {"sm_mhz_median": mhz[len(mhz) // 2], "sm_mhz_min": mhz[0], "power_w_mean": sum(r[1] for r in rows) / len(rows),
            "temp_c_max": max(r[2] for r in rows), "samples": len(rows)}


def rate(fn, flops, iters):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return flops * iters / (time.perf_counter() - t0) / 1e12


def measure(m, n, k, dtype):
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    if dtype == "fp8":
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.ones((), device=dev)
        fn = lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        bt = b.t()
        fn = lambda: a @ bt
    flops = 2.0 * m * n * k
    for _ in range(5):
        fn()
    burst = rate(fn, flops, 20)
    # Sustained: run SUSTAIN_S seconds, time the last third, sample clocks then.
    per_iter = flops / (burst * 1e12)
    chunk = max(1, int(0.25 / per_iter))
    t_end = time.perf_counter() + SUSTAIN_S * 2 / 3
    while time.perf_counter() < t_end:
        rate(fn, flops, chunk)
    smi = smi_sampler()
    sustained = rate(fn, flops, max(1, int(SUSTAIN_S / 3 / per_iter)))
    smi.terminate()
    out = smi.communicate()[0].splitlines()
    return {"shape": [m, n, k], "dtype": dtype, "burst_tflops": round(burst, 1), "sustained_tflops": round(sustained, 1),
            "sustained_over_burst": round(sustained / burst, 4), "during_sustained": summarize(out)}


results = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "sustain_s": SUSTAIN_S, "gemms": []}
results["gemms"].append(measure(*SHAPES[0], "bf16"))
for s in SHAPES[1:]:
    SUSTAIN_S_SAVED = SUSTAIN_S
    SUSTAIN_S = max(6.0, SUSTAIN_S / 4)
    results["gemms"].append(measure(*s, "bf16"))
    SUSTAIN_S = SUSTAIN_S_SAVED
if hasattr(torch, "float8_e4m3fn") and torch.cuda.get_device_capability(0) >= (8, 9):
    try:
        results["gemms"].append(measure(*SHAPES[0], "fp8"))
    except Exception as e:  # an older torch without _scaled_mm's signature
        results["fp8_error"] = str(e)[:200]
text = json.dumps(results, indent=1)
print(text)
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as f:
        f.write(text + "\n")
