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
torch._scaled_mm when the device has it).

Then a burst-only sweep ("waves") of the shapes that decide the simulator's
wave-quantization model (docs/simulator.md 3.1), which no published table
covers: outputs of one to two waves of 256x128 tiles on 132 SMs (e.g.
512 x 9216 = 144 tiles, the model's 55% cliff, against 512 x 8192 = 128),
and Transformer Engine's userbuffers chunks against their whole GEMM (a
ring-exchanged all-gather runs t GEMMs of T/t rows; a pipelined
reduce-scatter 4 GEMMs of a quarter of the columns). Each: 5 warm-up, 20
timed iterations.

Then, burst only ("fp8_accum"), the Llama-3-8B layer's forward, input-gradient
and weight-gradient GEMMs at 8192 tokens in bf16 and in fp8 both ways FP8
training runs them: with fast accumulation (Transformer Engine's forward,
torchao's output GEMM) and with split accumulation, the partial sums promoted
to fp32 (TE's and torchao's two backward GEMMs: _2X_ACC_DGRAD/_2X_ACC_WGRAD,
use_fast_accum=False). The simulator prices all three passes at one FP8 rate
(docs/simulator.md 11); this measures whether the backward pays for its
accumulation.

Then, burst only ("wgrad_accumulate"), the Llama-3-8B layer's weight-gradient
GEMMs at 4096 and 8192 tokens two ways: with a bf16 output, and accumulated
into an fp32 main gradient in the GEMM (C + A.B with an fp32 C, beta = 1:
Megatron's gradient_accumulation_fusion, through torch.addmm's out_dtype where
the node's PyTorch has it). The simulator prices that accumulation as free;
DeepGEMM's FP8 kernels pay an fp32 read and write of the output for it
(docs/validation/h100_gap_sources.md, "Leads"). extra_bytes_per_s is the
output's 8 bytes an element over the extra time.

Then ("attention") the same burst against held measurement for one fused
attention forward, PyTorch's scaled_dot_product_attention on its cuDNN
backend where it has one: bf16, causal, 32 heads of 128, 8192 tokens, held
for max(3, SUSTAIN_S / 8) s (B200 throttled within about 100 ms), after 5 s idle so that
the burst is not the GEMMs' throttled clock. Its held/burst share is what a profile's
`sustained_attention_ratio` holds (docs/simulator.md 3.2): the attention
tables are short-run too, and B200's share is taken from FlashAttention-4
run back to back (0.853), H100's and H200's from nothing yet.

Prints one JSON object; exits 2 without PyTorch or a GPU.
usage: gpu-sustained-gemm.py [OUT.json]
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


def held(fn, flops, sustain_s):
    """Burst (20 iterations after 5 warm-ups) against the rate over the last
    third of sustain_s seconds back to back, nvidia-smi sampled then."""
    for _ in range(5):
        fn()
    burst = rate(fn, flops, 20)
    per_iter = flops / (burst * 1e12)
    chunk = max(1, int(0.25 / per_iter))
    t_end = time.perf_counter() + sustain_s * 2 / 3
    while time.perf_counter() < t_end:
        rate(fn, flops, chunk)
    smi = smi_sampler()
    sustained = rate(fn, flops, max(1, int(sustain_s / 3 / per_iter)))
    smi.terminate()
    out = smi.communicate()[0].splitlines()
    return {"burst_tflops": round(burst, 1), "sustained_tflops": round(sustained, 1),
            "sustained_over_burst": round(sustained / burst, 4), "during_sustained": summarize(out)}


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
    # Sustained: run SUSTAIN_S seconds, time the last third, sample clocks then.
    return dict({"shape": [m, n, k], "dtype": dtype}, **held(fn, 2.0 * m * n * k, SUSTAIN_S))


def attention_held(s=8192, heads=32, d=128, cool_s=5.0):
    """A causal bf16 attention forward held back to back (cuDNN's SDPA where
    the node's PyTorch has it): the share of its burst rate it keeps, for a
    profile's sustained_attention_ratio. It follows minutes of held GEMMs, so
    the GPU idles cool_s seconds first, and the clock during the burst is
    logged: a burst already throttled would read a share near 1."""
    import contextlib
    import torch.nn.functional as F
    q, k, v = (torch.randn(1, heads, s, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
    backend, ctx = "default (PyTorch's pick)", contextlib.nullcontext
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
        backend, ctx = "cudnn", lambda: sdpa_kernel([SDPBackend.CUDNN_ATTENTION])
    except Exception:
        pass
    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    flops = 4.0 * heads * s * s * d * (s + 1) / (2.0 * s)  # causal forward, as the profiles count it
    torch.cuda.synchronize()
    time.sleep(cool_s)
    smi = smi_sampler()
    with ctx():
        out = held(fn, flops, max(3.0, SUSTAIN_S / 8))
    smi.terminate()
    # The whole run's samples; the first ones are the burst's.
    samples = smi.communicate()[0].splitlines()
    out["at_burst"] = summarize(samples[:3])
    return dict({"kernel": "sdpa-" + backend, "shape": [1, heads, s, d], "causal": True, "cool_s": cool_s}, **out)


# (m, n, k): whole GEMMs and their userbuffers chunks (MC9: h 18432, TP 8, T
# 4096; D2: h 8192, TP 4, T 4096 after CP 2), and outputs near one wave.
WAVE_SHAPES = [(4096, 6912, 18432), (512, 6912, 18432), (4096, 9216, 18432), (512, 9216, 18432),
               (4096, 18432, 2304), (4096, 4608, 2304), (4096, 2304, 18432), (512, 2304, 18432),
               (4096, 2560, 8192), (1024, 2560, 8192), (4096, 14336, 8192), (1024, 14336, 8192),
               (4096, 8192, 7168), (4096, 2048, 7168), (1024, 7168, 8192),
               (512, 8192, 8192), (512, 8448, 8192), (512, 9216, 8192), (1024, 4352, 8192), (1024, 4096, 8192),
               (2048, 2176, 8192), (2048, 2048, 8192), (256, 16896, 8192), (256, 16384, 8192)]


def burst_only(m, n, k):
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    bt = torch.randn(n, k, device=dev, dtype=torch.bfloat16).t()
    fn = lambda: a @ bt
    for _ in range(5):
        fn()
    return {"shape": [m, n, k], "dtype": "bf16", "burst_tflops": round(rate(fn, 2.0 * m * n * k, 20), 1)}


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
# Llama-3-8B (h 4096, GQA 32/8 heads, FFN 14336) at 8192 tokens: per linear
# (m, n, k) of its forward, input gradient and weight gradient.
LINEARS = [("qkv", 8192, 6144, 4096), ("proj", 8192, 4096, 4096), ("fc1", 8192, 28672, 4096),
           ("fc2", 8192, 4096, 14336)]


def accum_ab(name, t, out, inp):
    rows = []
    for pass_name, (m, n, k) in (("fprop", (t, out, inp)), ("dgrad", (t, inp, out)), ("wgrad", (inp, out, t))):
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.ones((), device=dev)
        flops = 2.0 * m * n * k
        row = {"linear": name, "pass": pass_name, "shape": [m, n, k]}
        bt = b.t()
        fns = {"bf16": lambda: a @ bt,
               "fp8_fast": lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                    use_fast_accum=True),
               "fp8_split": lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                     use_fast_accum=False)}
        for key, fn in fns.items():
            for _ in range(5):
                fn()
            row[key + "_tflops"] = round(rate(fn, flops, 20), 1)
        row["split_over_fast"] = round(row["fp8_split_tflops"] / row["fp8_fast_tflops"], 4)
        rows.append(row)
    return rows


if hasattr(torch, "float8_e4m3fn") and torch.cuda.get_device_capability(0) >= (8, 9):
    try:
        results["fp8_accum"] = [r for spec in LINEARS for r in accum_ab(*spec)]
        ratios = sorted(r["split_over_fast"] for r in results["fp8_accum"])
        results["fp8_split_over_fast_median"] = ratios[len(ratios) // 2]
    except Exception as e:  # keep the other figures whatever happens here
        results["fp8_accum_error"] = str(e)[:200]
def wgrad_accumulate(t, out, inp):
    """(inp x out) weight gradient over t tokens: bf16 output against an fp32
    C accumulated in the GEMM (beta = 1)."""
    a = torch.randn(inp, t, device=dev, dtype=torch.bfloat16)  # X^T
    b = torch.randn(t, out, device=dev, dtype=torch.bfloat16)  # dY
    c = torch.randn(inp, out, device=dev, dtype=torch.float32)  # the main gradient
    flops = 2.0 * inp * out * t
    plain = lambda: a @ b
    fused = lambda: torch.addmm(c, a, b, out_dtype=torch.float32)
    row = {"shape": [inp, out, t]}
    for key, fn in (("bf16_out", plain), ("fp32_accumulate", fused)):
        for _ in range(5):
            fn()
        row[key + "_tflops"] = round(rate(fn, flops, 20), 1)
    extra_s = flops / (row["fp32_accumulate_tflops"] * 1e12) - flops / (row["bf16_out_tflops"] * 1e12)
    row["accumulate_over_plain_time"] = round(row["bf16_out_tflops"] / row["fp32_accumulate_tflops"], 4)
    row["extra_bytes_per_s"] = round(8.0 * inp * out / extra_s / 1e12, 2) if extra_s > 0 else None  # TB/s
    return row


try:
    rows = [wgrad_accumulate(t, out, inp) for t in (4096, 8192) for _, out, inp in
            (("qkv", 6144, 4096), ("fc1", 28672, 4096), ("fc2", 4096, 14336))]
    results["wgrad_accumulate"] = rows
    ratios = sorted(r["accumulate_over_plain_time"] for r in rows)
    results["wgrad_accumulate_over_plain_median"] = ratios[len(ratios) // 2]
except Exception as e:  # an older torch without addmm's out_dtype: keep the rest
    results["wgrad_accumulate_error"] = str(e)[:200]
try:
    results["attention"] = attention_held()
except Exception as e:  # keep the GEMM figures whatever happens here
    results["attention_error"] = str(e)[:200]
try:
    results["waves"] = [burst_only(*s) for s in WAVE_SHAPES]
except Exception as e:  # keep the sustained figures whatever happens here
    results["waves_error"] = str(e)[:200]
text = json.dumps(results, indent=1)
print(text)
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as f:
        f.write(text + "\n")
