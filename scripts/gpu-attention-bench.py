#!/usr/bin/env python3
"""Measures this GPU's fused attention kernels and writes them as a hardware
profile's `attention_kernels` entries (docs/simulator.md 3.2).

Loom prices attention from a profile's measured table of one kernel and
release (dgx-h100: cuDNN 9.19 from the cudnn-frontend CSV, plus the mid-2024
cuDNN and FlashAttention-2 from the FlashAttention-3 paper); a run's stack
picks which (`loom plan --attention-kernel`). This measures the kernels the
node's PyTorch has, as the FlashAttention-3 paper set them up:

  * causal, bf16, head dim 128, 16 heads, batch x sequence = 16384 tokens
    (batch 1 from 16K on), sequences 512 to 32K;
  * torch.nn.functional.scaled_dot_product_attention under sdpa_kernel with
    the cuDNN backend (named cudnn-<its version>) and the flash backend
    (PyTorch's FlashAttention-2: fa2-torch-<version>);
  * forward, then forward + backward, each repeated for ATTN_BENCH_S seconds
    after 2 warm-ups, CUDA events; backward = the difference;
  * FLOPs as the paper and the profiles count them: forward 4 s^2 d per head
    halved for the causal mask, backward 2.5 x the forward.

Each kernel is written in the profile's form: `attention_efficiency` keyed by
one head's causal forward GFLOP 4 s^2 d (s+1)/(2s), efficiency = TFLOP/s /
the profile's bf16 peak; `attention_backward_ratio` = the median of backward /
forward time at 2K and above (the rule the shipped profiles follow); a
`source` naming the device, PyTorch, cuDNN and the date. With LOOM given, the
entries are merged into a copy of the profile and `loom plan --attention-kernel`
prices a layout with each, so what is written is known to load.

usage: gpu-attention-bench.py PROFILE.json OUT.json [LOOM]
env:   ATTN_BENCH_S (0.25 per shape and pass), ATTN_BENCH_DRY=1 (no PyTorch:
       timings made from the profile's own table, to exercise the output;
       gpu-validate's rehearsal)
Prints one summary line; exits 2 without PyTorch or a GPU, 1 on an error.
"""
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

SEQS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
HEADS, HEAD_DIM, TOKENS = 16, 128, 16384


def head_gflop(s, d=HEAD_DIM):
    """One head's causal forward GFLOP, the profiles' table key."""
    return 4.0 * s * s * d * (s + 1) / (2.0 * s) / 1e9


def fwd_flops(batch, s):
    return 4.0 * batch * HEADS * s * s * HEAD_DIM * 0.5


def lookup(table, gflop):
    """The profile's efficiency table, interpolated in log(FLOPs) as Loom does, clamped."""
    pts = [(p["gflop"], p["efficiency"]) for p in table]
    if gflop <= pts[0][0]:
        return pts[0][1]
    if gflop >= pts[-1][0]:
        return pts[-1][1]
    for (g0, e0), (g1, e1) in zip(pts, pts[1:]):
        if g0 <= gflop <= g1:
            t = (math.log(gflop) - math.log(g0)) / (math.log(g1) - math.log(g0))
            return e0 + t * (e1 - e0)
    return pts[-1][1]


def measure(backend_name, budget_s):
    """[(s, batch, fwd_s, bwd_s)] for one SDPA backend, or raises."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend_name]
    rows = []
    for s in SEQS:
        batch = max(1, TOKENS // s)
        q, k, v = (torch.randn(batch, HEADS, s, HEAD_DIM, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(batch, HEADS, s, HEAD_DIM, device="cuda", dtype=torch.bfloat16)

        def fwd():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def fwd_bwd():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.backward(grad)

        times = []
        with sdpa_kernel([backend]):
            for fn in (fwd, fwd_bwd):
                for _ in range(2):
                    fn()
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                one = max(start.elapsed_time(end) / 1e3, 1e-6)
                n = max(3, min(200, int(budget_s / one)))
                start.record()
                for _ in range(n):
                    fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / 1e3 / n)
        rows.append((s, batch, times[0], max(times[1] - times[0], 1e-9)))
        del q, k, v, grad
    return rows


def dry_rows(profile):
    """Timings the profile's own table gives: what a measurement equal to the profile would write."""
    acc = profile["accelerator"]
    peak = acc["peak_bf16_tflops"] * 1e12
    table = acc.get("attention_efficiency") or [{"gflop": 1.0, "efficiency": 0.5}]
    ratio = acc.get("attention_backward_ratio", 2.5)
    rows = []
    for s in SEQS:
        batch = max(1, TOKENS // s)
        f = fwd_flops(batch, s) / (peak * lookup(table, head_gflop(s)))
        rows.append((s, batch, f, ratio * f))
    return rows


def kernel_entry(rows, peak_tflops, source):
    eff, ratios = [], []
    for s, batch, f, b in rows:
        tflops = fwd_flops(batch, s) / f / 1e12
        eff.append({"gflop": round(head_gflop(s), 4), "efficiency": round(min(1.0, tflops / peak_tflops), 4)})
        if s >= 2048:
            ratios.append(b / f)
    return {"attention_efficiency": eff, "attention_backward_ratio": round(statistics.median(ratios), 2),
            "source": source}


def check_with_loom(loom, profile, kernels):
    """Merges the entries into a copy of the profile and prices a layout with each."""
    merged = json.loads(json.dumps(profile))
    acc = merged["accelerator"]
    if not acc.get("attention_kernel"):
        acc["attention_kernel"] = "profile-table"
    acc.setdefault("attention_kernels", {})
    names = []
    for name, entry in kernels.items():
        key = name if name != acc["attention_kernel"] else name + "-measured"
        acc["attention_kernels"][key] = entry
        names.append(key)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(merged, f, indent=2)
        path = f.name
    try:
        for key in names:
            cmd = [loom, "plan", "--model", "llama-3-8b", "--scale", "layers=2", "--hw", path, "--gpus", "1",
                   "--global-batch", "1", "--seq", "8192", "--layout", "dp=1,tp=1,pp=1,micro=1",
                   "--attention-kernel", key, "--json"]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise RuntimeError("loom plan --attention-kernel %s failed (%d): %s" % (key, r.returncode,
                                                                                      r.stderr.strip()[-400:]))
    finally:
        os.unlink(path)
    return names


def main():
    if len(sys.argv) not in (3, 4):
        print("usage: gpu-attention-bench.py PROFILE.json OUT.json [LOOM]", file=sys.stderr)
        return 1
    profile_path, out_path = sys.argv[1], sys.argv[2]
    loom = sys.argv[3] if len(sys.argv) == 4 else None
    with open(profile_path) as f:
        profile = json.load(f)
    peak = float(profile["accelerator"]["peak_bf16_tflops"])
    dry = os.environ.get("ATTN_BENCH_DRY", "0") == "1"
    budget = float(os.environ.get("ATTN_BENCH_S", "0.25"))
    today = datetime.date.today().isoformat()
    out = {"profile": profile.get("name"), "peak_bf16_tflops": peak, "dry": dry, "raw": {}, "errors": {}}
    kernels = {}
    if dry:
        out["device"] = "none (dry run: timings from the profile's own table)"
        kernels["dry-profile-table"] = kernel_entry(
            dry_rows(profile), peak, "gpu-attention-bench.py dry run: the profile's own table played back (%s)" % today)
    else:
        try:
            import torch
        except ImportError:
            print("gpu-attention-bench: no PyTorch here (import torch fails)")
            return 2
        if not torch.cuda.is_available():
            print("gpu-attention-bench: PyTorch sees no GPU")
            return 2
        device = torch.cuda.get_device_name(0)
        cudnn = torch.backends.cudnn.version() or 0
        cudnn_name = "%d.%d.%d" % (cudnn // 10000, cudnn // 100 % 100, cudnn % 100) if cudnn >= 10000 else str(cudnn)
        out.update(device=device, torch=torch.__version__, cudnn=cudnn_name)
        for backend, name in (("cudnn", "cudnn-" + cudnn_name), ("flash", "fa2-torch-" + torch.__version__.split("+")[0])):
            try:
                rows = measure(backend, budget)
            except Exception as e:  # a backend this build or GPU lacks
                out["errors"][name] = "%s: %s" % (type(e).__name__, str(e)[:300])
                continue
            out["raw"][name] = [{"seq": s, "batch": b, "fwd_s": f, "bwd_s": bw,
                                 "fwd_tflops": round(fwd_flops(b, s) / f / 1e12, 1),
                                 "bwd_tflops": round(2.5 * fwd_flops(b, s) / bw / 1e12, 1)} for s, b, f, bw in rows]
            kernels[name] = kernel_entry(rows, peak, (
                "gpu-attention-bench.py on %s (%s), PyTorch %s, cuDNN %s: scaled_dot_product_attention with the %s "
                "backend, causal bf16, %d heads of %d, batch x sequence = %d tokens (batch 1 from 16K), 512-32K, "
                "forward and forward+backward timed with CUDA events; efficiency = causal forward TFLOP/s / %g; "
                "attention_backward_ratio = median backward/forward time at 2K-32K") % (
                    device, today, torch.__version__, cudnn_name, backend, HEADS, HEAD_DIM, TOKENS, peak))
    if not kernels:
        print("gpu-attention-bench: no attention backend ran: %s" % out["errors"])
        json.dump(out, open(out_path, "w"), indent=1)
        return 1
    out["attention_kernels"] = kernels
    # Against the table the profile prices with now, at each sequence.
    table = profile["accelerator"].get("attention_efficiency")
    if table:
        out["vs_profile"] = {name: {str(s): round(p["efficiency"] / lookup(table, p["gflop"]), 3)
                                    for s, p in zip(SEQS, k["attention_efficiency"])} for name, k in kernels.items()}
    if loom:
        out["loaded_by_loom"] = check_with_loom(loom, profile, kernels)
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)
    parts = []
    for name, k in kernels.items():
        e16 = k["attention_efficiency"][SEQS.index(16384)]["efficiency"]
        vs = out.get("vs_profile", {}).get(name, {}).get("16384")
        parts.append("%s 16K fwd %.0f TFLOP/s%s, bwd ratio %.2f" % (
            name, e16 * peak, "" if vs is None else " (%.2fx the profile's)" % vs, k["attention_backward_ratio"]))
    print("; ".join(parts) + ("" if not out["errors"] else "; failed: " + ", ".join(out["errors"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
