#!/usr/bin/env python3
"""A Llama-3-8B training step of a few layers, measured with the node's
PyTorch and set against Loom's prediction of the same work.

The validation rows (docs/validation.md) put Loom's H100 and B200 step times
10-35% short of the published ones, and the rows cannot tell whether the
per-GPU compute rate or the stack around it is off. This times the compute
alone, on one GPU, as torchtitan writes its Llama block in eager PyTorch
(separate q/k/v projections, RoPE through complex numbers, repeat_kv, SiLU
and the multiply apart; torchtitan/models/llama/model.py), which is what
`loom plan --framework torchtitan` prices (docs/simulator.md 3.3):

  * the model at 2 and at 6 layers, bf16 weights, one sequence of LAYER_SEQ
    (8192) tokens, forward + backward with F.cross_entropy on fp32 logits,
    no optimizer step;
  * each run back to back for LAYER_BENCH_S seconds (12) after 3 warm-up
    steps; the rate over the second half;
  * a layer = (t6 - t2) / 4; the rest (embedding, head, loss) = t2 - 2 layers;
  * Loom's figures for the same: `loom plan --model llama-3-8b --scale
    layers=N --framework torchtitan --gpus 1 --global-batch 1`, forward +
    backward of its one micro-batch (the `phases`), on HW's profile.

Attention runs on cuDNN's SDPA where this PyTorch has it (the profiles'
attention tables are cuDNN's), else on PyTorch's default backend, which the
output names. RMSNorm is F.rms_norm (eager: several kernels; Loom counts one
pass, as torchtitan's fused_rmsnorm ran).

usage: gpu-layer-bench.py LOOM HW OUT.json
env:   LAYER_SEQ (8192), LAYER_BENCH_S (12), LAYER_BENCH_DRY=1 (Loom's side
       only: no PyTorch needed; gpu-validate's rehearsal)
Prints one summary line; exits 2 without PyTorch or a GPU, 1 on an error.
"""
import contextlib
import json
import os
import subprocess
import sys
import time

H, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 4096, 32, 8, 128, 14336, 128256
ROPE_THETA, NORM_EPS = 500000.0, 1e-5
LAYERS = (2, 6)


def loom_step_s(loom, hw, layers, seq):
    """Loom's forward + backward of one micro-batch of `seq` tokens."""
    cmd = [loom, "plan", "--model", "llama-3-8b", "--scale", "layers=%d" % layers, "--hw", hw, "--gpus", "1",
           "--global-batch", "1", "--seq", str(seq), "--precision", "bf16", "--framework", "torchtitan",
           "--layout", "dp=1,tp=1,pp=1,zero=0,micro=1,recompute=none", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("loom plan failed (%d): %s" % (r.returncode, r.stderr.strip()[-400:]))
    phases = json.loads(r.stdout)["phases"]
    return phases["forward_s"] + phases["backward_s"]


def split(t):
    """Per-layer and rest from the step times at LAYERS[0] and LAYERS[1] layers."""
    a, b = LAYERS
    layer = (t[b] - t[a]) / (b - a)
    return layer, t[a] - a * layer


def measure(seq, secs):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    dev = torch.device("cuda")
    bf16 = torch.bfloat16

    def rms_norm(x, w):
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (x.shape[-1],), w, NORM_EPS)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + NORM_EPS)).type_as(x) * w

    def freqs_cis(n):
        inv = 1.0 / (ROPE_THETA ** (torch.arange(0, HEAD_DIM, 2, device=dev).float() / HEAD_DIM))
        ang = torch.outer(torch.arange(n, device=dev).float(), inv)
        return torch.polar(torch.ones_like(ang), ang)  # complex64 (n, HEAD_DIM / 2)

    def rope(x, f):
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * f.view(1, x.shape[1], 1, -1)).flatten(3).type_as(x)

    def repeat_kv(x, n):
        bs, s, kv, d = x.shape
        return x[:, :, :, None, :].expand(bs, s, kv, n, d).reshape(bs, s, kv * n, d)

    def linear(i, o):
        m = nn.Linear(i, o, bias=False, device=dev, dtype=bf16)
        nn.init.normal_(m.weight, std=0.02)
        return m

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq, self.wk = linear(H, HEADS * HEAD_DIM), linear(H, KV_HEADS * HEAD_DIM)
            self.wv, self.wo = linear(H, KV_HEADS * HEAD_DIM), linear(HEADS * HEAD_DIM, H)
            self.w1, self.w3, self.w2 = linear(H, FFN), linear(H, FFN), linear(FFN, H)
            self.attention_norm = nn.Parameter(torch.ones(H, device=dev, dtype=bf16))
            self.ffn_norm = nn.Parameter(torch.ones(H, device=dev, dtype=bf16))

        def attention(self, x, f):
            bs, s, _ = x.shape
            q = rope(self.wq(x).view(bs, s, HEADS, HEAD_DIM), f)
            k = rope(self.wk(x).view(bs, s, KV_HEADS, HEAD_DIM), f)
            v = self.wv(x).view(bs, s, KV_HEADS, HEAD_DIM)
            k, v = repeat_kv(k, HEADS // KV_HEADS), repeat_kv(v, HEADS // KV_HEADS)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            return self.wo(o.transpose(1, 2).contiguous().view(bs, s, -1))

        def forward(self, x, f):
            h = x + self.attention(rms_norm(x, self.attention_norm), f)
            y = rms_norm(h, self.ffn_norm)
            return h + self.w2(F.silu(self.w1(y)) * self.w3(y))

    class Model(nn.Module):
        def __init__(self, layers):
            super().__init__()
            self.tok = nn.Embedding(VOCAB, H, device=dev, dtype=bf16)
            self.layers = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.Parameter(torch.ones(H, device=dev, dtype=bf16))
            self.output = linear(H, VOCAB)

        def forward(self, tokens, f):
            h = self.tok(tokens)
            for layer in self.layers:
                h = layer(h, f)
            return self.output(rms_norm(h, self.norm))

    # cuDNN's SDPA where this PyTorch has it (probed forward and backward).
    backend, attn_ctx = "default", contextlib.nullcontext
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        if hasattr(SDPBackend, "CUDNN_ATTENTION"):
            q = torch.randn(1, HEADS, 256, HEAD_DIM, device=dev, dtype=bf16, requires_grad=True)
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
            torch.cuda.synchronize()
            backend, attn_ctx = "cudnn", (lambda: sdpa_kernel([SDPBackend.CUDNN_ATTENTION]))
    except Exception as e:  # no cuDNN SDPA here: PyTorch's choice, named below
        backend = "default (cuDNN SDPA unavailable: %s)" % str(e).splitlines()[0][:120]

    f = freqs_cis(seq)
    times, peaks = {}, {}
    for layers in LAYERS:
        torch.manual_seed(0)
        model = Model(layers)
        tokens = torch.randint(0, VOCAB, (1, seq), device=dev)
        labels = torch.randint(0, VOCAB, (1, seq), device=dev)

        def step():
            with attn_ctx():
                logits = model(tokens, f)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
                loss.backward()
            for p in model.parameters():
                p.grad = None

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        marks, start, n = [], time.time(), 0
        while time.time() - start < secs or len(marks) < 4:
            step()
            n += 1
            if n % 2 == 0:
                torch.cuda.synchronize()
                marks.append((time.time(), n))
        (t0, n0), (t1, n1) = marks[len(marks) // 2], marks[-1]
        times[layers] = (t1 - t0) / (n1 - n0)
        peaks[layers] = torch.cuda.max_memory_allocated() / 1e9
        del model
        torch.cuda.empty_cache()
    return {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "attention_backend": backend,
            "step_s": {str(k): v for k, v in times.items()}, "peak_memory_gb": {str(k): v for k, v in peaks.items()}}, times


def main():
    if len(sys.argv) != 4:
        print("usage: gpu-layer-bench.py LOOM HW OUT.json")
        return 1
    loom, hw, out_path = sys.argv[1:]
    seq = int(os.environ.get("LAYER_SEQ", "8192"))
    secs = float(os.environ.get("LAYER_BENCH_S", "12"))
    result = {"hw": hw, "seq": seq, "layers": list(LAYERS), "seconds_each": secs}
    try:
        predicted = {n: loom_step_s(loom, hw, n, seq) for n in LAYERS}
    except Exception as e:
        print("gpu-layer-bench: %s" % e)
        return 1
    p_layer, p_rest = split(predicted)
    result["loom"] = {"step_s": {str(k): v for k, v in predicted.items()}, "layer_ms": 1e3 * p_layer,
                      "rest_ms": 1e3 * p_rest}
    if os.environ.get("LAYER_BENCH_DRY") == "1":
        with open(out_path, "w") as fh:
            json.dump(result, fh, indent=1)
        print("gpu-layer-bench (dry): Loom's layer %.2f ms, embedding+head+loss %.2f ms at %d tokens on %s"
              % (1e3 * p_layer, 1e3 * p_rest, seq, hw))
        return 0
    try:
        import torch
    except ImportError:
        print("gpu-layer-bench: PyTorch is not installed here; skipped")
        return 2
    if not torch.cuda.is_available():
        print("gpu-layer-bench: no CUDA device visible; skipped")
        return 2
    measured_info, measured = measure(seq, secs)
    m_layer, m_rest = split(measured)
    result.update(measured_info)
    result["measured"] = {"layer_ms": 1e3 * m_layer, "rest_ms": 1e3 * m_rest}
    result["loom_over_measured"] = {"layer": p_layer / m_layer, "rest": p_rest / m_rest}
    with open(out_path, "w") as fh:
        json.dump(result, fh, indent=1)
    print("layer fwd+bwd %.2f ms measured, %.2f ms Loom (%.3f); embedding+head+loss %.2f ms, %.2f ms Loom (%.3f); "
          "attention %s; %d tokens on %s (profile %s)"
          % (1e3 * m_layer, 1e3 * p_layer, p_layer / m_layer, 1e3 * m_rest, 1e3 * p_rest, p_rest / m_rest,
             measured_info["attention_backend"], seq, measured_info["device"], hw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
