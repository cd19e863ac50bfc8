#include "exec/model/chunk.h"

#include <algorithm>
#include <cmath>

#include "core/executor_head.h"
#include "core/program.h"
#include "exec/backend/memory_ledger.h"
#include "exec/model/linear.h"


namespace loom::exec {

// Saved activations of one layer for one micro-batch (shapes with N = B*T,
// Nl = rows of the residual stream on this rank, local head / MLP widths).
struct ModelChunk::LayerActs {
  DeviceBuffer x_in;          // (Nl, C)
  DeviceBuffer h1, h2;        // (N, C) norm outputs, gathered under SP
  DeviceBuffer mean1, rstd1, mean2, rstd2;  // (Nl)
  DeviceBuffer q, k, v;       // (N, Hq_l*D), (N, Hk_l*D) after RoPE
  DeviceBuffer qn_in, kn_in;  // q, k before their per-head RMSNorm (qk_norm)
  DeviceBuffer q_rstd, k_rstd;  // (N*Hq_l), (N*Hk_l)
  DeviceBuffer ctx, lse;      // (N, Hq_l*D), (B, Hq_l, T)
  DeviceBuffer x_mid;         // (Nl, C)
  DeviceBuffer a, g;          // GELU: pre- and post-activation (N, F_l); SwiGLU: gate, up
  DeviceBuffer s;             // SwiGLU product (N, F_l)
  MoeActsPtr moe;             // a MoE layer's MLP state (its large tensors packed as the others)
  bool packed = false;        // the large tensors above are held in 16 bits
  // The tensors only GEMMs read, forward and backward, held in 16 bits from
  // the moment layer_forward makes them (gemm16): h1 (q, k, v), a dense
  // layer's h2 (its MLP's first GEMMs; a MoE layer's router reads h2 in
  // fp32) and its MLP's second GEMM input (GELU's output g, SwiGLU's
  // product s). Bits of bit16; backward never restores them.
  unsigned kept16 = 0;
  unsigned bit16(const DeviceBuffer* b) const { return b == &h1 ? 1u : b == &h2 ? 2u : b == &g ? 4u : b == &s ? 8u : 0u; }
  void keep16(const DeviceBuffer& b) { kept16 |= bit16(&b); }
  // A GEMM operand: fp32, or (kept16) the packed 16 bits, the other null.
  bool is16(const DeviceBuffer& b) const { return (kept16 & bit16(&b)) != 0; }
  const float* f32(const DeviceBuffer& b) const { return is16(b) ? nullptr : b.f32(); }
  const uint16_t* b16(const DeviceBuffer& b) const {
    return is16(b) ? reinterpret_cast<const uint16_t*>(b.f32()) : nullptr;
  }
  // `with_residual` false leaves the residual stream (x_in, x_mid) alone: fp16
  // keeps it in fp32, as Megatron's fp32 residual connection does, since it
  // is unscaled and may grow past fp16's range.
  template <typename F>
  void for_each_large(bool with_residual, F&& f) {
    for (DeviceBuffer* b : {&h1, &h2, &q, &k, &v, &qn_in, &kn_in, &ctx, &a, &g, &s}) f(*b);
    if (moe) for_each_large_moe_act(moe.get(), f);
    if (with_residual) {
      f(x_in);
      f(x_mid);
    }
  }
};

struct ModelChunk::MicroActs {
  std::vector<LayerActs> layers;
  DeviceBuffer tokens;        // (N) first chunk
  DeviceBuffer head_in;       // (Nl, C) last chunk input
  DeviceBuffer hf;            // (N, C) final-norm output, gathered
  DeviceBuffer meanf, rstdf;  // (Nl)
  DeviceBuffer dlogits;       // (N, Vp_l): computed in forward, consumed in backward
  DeviceBuffer dh_part;       // (N, C): the fused head's input gradient (instead of hf and dlogits)
};

ModelChunk::ModelChunk(const ChunkConfig& cfg, ParamStore* params, ComputeBackend* backend, Communicator* tp)
    : cfg_(cfg), params_(params), backend_(backend), tp_(tp) {
  LOOM_CHECK(cfg.tp_size == 1 || tp != nullptr, "TP communicator missing");
  LOOM_CHECK(!cfg.sequence_parallel || (cfg.micro_batch * cfg.seq) % cfg.tp_size == 0,
             "sequence parallel needs B*T divisible by tp");
  if (cfg.dims.moe.enabled())
    moe_ = std::make_unique<MoeLayer>(cfg.dims, cfg.moe, cfg.tp_size, cfg.tp_rank, tp, params, backend);
  if (cfg.cp.enabled()) {
    LOOM_CHECK(cfg.seq % 2 == 0, "context parallelism needs an even number of tokens per rank (2 chunks)");
    cp_attn_ = make_cp_attention(backend, cfg.cp, cfg.micro_batch, cfg.seq / 2, cfg.dims.Hq / cfg.tp_size,
                                 cfg.dims.Hk / cfg.tp_size, cfg.dims.D);
  }
}

int64_t ModelChunk::activation_rows() const {
  int64_t n = cfg_.micro_batch * cfg_.seq;
  return cfg_.sequence_parallel ? n / cfg_.tp_size : n;
}

namespace {
// Every activation buffer is written whole by the op that produces it before
// anything reads it: no zero fill (the poisoned test runs check that).
DeviceBuffer make(ComputeBackend* be, int64_t floats) {
  return DeviceBuffer::uninitialized(be, size_t(floats) * sizeof(float));
}

// Mixed precision keeps a layer's saved activations in the backend's 16-bit
// format between its forward and its backward (half the memory of the
// micro-batches in flight); backward restores fp32 copies one layer at a time.
bool saves_16bit(ComputeBackend* be) {
  const Precision p = be->kernels().precision();
  return p == Precision::kBf16 || p == Precision::kFp16;
}
bool residual_16bit(ComputeBackend* be) { return be->kernels().precision() == Precision::kBf16; }
void pack(ComputeBackend* be, DeviceBuffer& b) {
  if (b.empty()) return;
  const int64_t n = int64_t(b.floats());
  DeviceBuffer h = DeviceBuffer::uninitialized(be, size_t(n) * sizeof(uint16_t));
  be->kernels().to_16bit({b.f32(), reinterpret_cast<uint16_t*>(h.f32()), n});
  b = std::move(h);
}
void unpack(ComputeBackend* be, DeviceBuffer& b) {
  if (b.empty()) return;
  const int64_t n = int64_t(b.bytes() / sizeof(uint16_t));
  DeviceBuffer f = make(be, n);
  be->kernels().from_16bit({reinterpret_cast<const uint16_t*>(b.f32()), f.f32(), n});
  b = std::move(f);
}
std::string L(int layer) { return "layers." + std::to_string(layer) + "."; }

}  // namespace

// RoPE at each row's global position: the whole sequence, or under CP each
// half of the (2, B, c) rows at its chunk's offset.
void ModelChunk::apply_rope(float* x, int64_t H, bool backward) {
  Kernels& k = backend_->kernels();
  const ModelDims& d = cfg_.dims;
  const int64_t B = cfg_.micro_batch, T = cfg_.seq;
  const int halves = cfg_.cp.enabled() ? 2 : 1;
  const int64_t len = T / halves;
  for (int h = 0; h < halves; ++h) {
    float* xh = x + h * B * len * H * d.D;
    const int64_t off = cfg_.cp.enabled() ? cfg_.cp.chunk_of_half(h) * len : 0;
    if (d.rope_inv_freq.empty()) {
      if (backward)
        k.rope_backward({xh, B, len, H, d.D, d.rope_theta, off});
      else
        k.rope_forward({xh, B, len, H, d.D, d.rope_theta, off});
    } else {
      if (backward)
        k.rope_freqs_backward({xh, B, len, H, d.D, d.rope_inv_freq.data(), off});
      else
        k.rope_freqs_forward({xh, B, len, H, d.D, d.rope_inv_freq.data(), off});
    }
  }
}

// Learned positions (GPT-2) of this rank's residual rows: under SP a slice of
// the rows, under CP rows whose chunks start at their own offsets (the table
// is addressed from the chunk's first position).
void ModelChunk::positions(float* x, bool backward) {
  Kernels& k = backend_->kernels();
  const int64_t Nl = activation_rows(), C = cfg_.dims.C, T = cfg_.seq;
  const int64_t row0 = cfg_.sequence_parallel ? Nl * cfg_.tp_rank : 0;
  ParamStore& P = *params_;
  if (!cfg_.cp.enabled()) {
    if (backward)
      k.positions_backward({x, P.grad("embed.wpe"), Nl, C, T, row0});
    else
      k.add_positions({x, P.param("embed.wpe"), Nl, C, T, row0});
    return;
  }
  const int64_t c = T / 2;
  for_each_cp_segment(cfg_.cp, cfg_.micro_batch, c, row0, Nl,
                      [&](int64_t first, int64_t count, int64_t chunk_pos, int64_t row_in_half) {
                        float* xs = x + first * C;
                        if (backward)
                          k.positions_backward({xs, P.grad("embed.wpe") + chunk_pos * C, count, C, c, row_in_half});
                        else
                          k.add_positions({xs, P.param("embed.wpe") + chunk_pos * C, count, C, c, row_in_half});
                      });
}

Status ModelChunk::attention_forward(LayerActs& a) {
  const ModelDims& d = cfg_.dims;
  const int64_t B = cfg_.micro_batch, T = cfg_.seq, Hq = d.Hq / cfg_.tp_size, Hk = d.Hk / cfg_.tp_size;
  a.ctx = make(backend_, B * T * Hq * d.D);
  a.lse = make(backend_, B * Hq * T);
  if (cp_attn_) return cp_attn_->forward(a.q.f32(), a.k.f32(), a.v.f32(), a.ctx.f32(), a.lse.f32());
  backend_->kernels().attention_forward({a.q.f32(), a.k.f32(), a.v.f32(), a.ctx.f32(), a.lse.f32(), B, T, Hq, Hk, d.D});
  return Status::ok();
}

Status ModelChunk::attention_backward(const float* dctx, LayerActs& a, float* dq, float* dk, float* dv) {
  const ModelDims& d = cfg_.dims;
  const int64_t B = cfg_.micro_batch, T = cfg_.seq, Hq = d.Hq / cfg_.tp_size, Hk = d.Hk / cfg_.tp_size;
  if (cp_attn_) return cp_attn_->backward(dctx, a.q.f32(), a.k.f32(), a.v.f32(), a.ctx.f32(), a.lse.f32(), dq, dk, dv);
  backend_->kernels().attention_backward(
      {dctx, a.q.f32(), a.k.f32(), a.v.f32(), a.ctx.f32(), a.lse.f32(), dq, dk, dv, B, T, Hq, Hk, d.D});
  return Status::ok();
}


Status ModelChunk::tp_all_reduce(float* b, int64_t n) {
  if (cfg_.tp_size == 1) return Status::ok();
  return tp_->all_reduce(b, size_t(n), ReduceOp::kSum);
}

Status ModelChunk::tp_all_gather_rows(const float* local, float* full, int64_t local_rows) {
  return tp_->all_gather(local, full, size_t(local_rows * cfg_.dims.C));
}

Status ModelChunk::tp_reduce_scatter_rows(const float* full, float* local, int64_t local_rows) {
  return tp_->reduce_scatter(full, local, size_t(local_rows * cfg_.dims.C));
}

// Entering a TP region: gather the sequence shards (SP) or use the replicated
// activation as is. Its backward is exit's forward and vice versa.
Status ModelChunk::enter_tp(const float* x_local, float* x_full) {
  const int64_t Nl = activation_rows(), C = cfg_.dims.C;
  if (cfg_.sequence_parallel && cfg_.tp_size > 1) return tp_all_gather_rows(x_local, x_full, Nl);
  if (x_full != x_local) backend_->copy(x_full, x_local, size_t(Nl * C) * sizeof(float));
  return Status::ok();
}

// Leaving a TP region: sum the partial outputs of the row-parallel linear,
// reduce-scattered to sequence shards (SP) or all-reduced.
Status ModelChunk::leave_tp(float* partial_full, float* out_local) {
  const int64_t Nl = activation_rows(), C = cfg_.dims.C;
  if (cfg_.sequence_parallel && cfg_.tp_size > 1) return tp_reduce_scatter_rows(partial_full, out_local, Nl);
  LOOM_RETURN_IF_ERROR(tp_all_reduce(partial_full, Nl * C));
  if (out_local != partial_full) backend_->copy(out_local, partial_full, size_t(Nl * C) * sizeof(float));
  return Status::ok();
}

Status ModelChunk::leave_tp_backward(float* dpartial_full, float* dlocal) { return leave_tp(dpartial_full, dlocal); }

Status ModelChunk::layer_forward(int layer, const float* x_in, float* x_out, LayerActs& a, bool keep) {
  MemoryClassScope charge(MemoryClass::kActivations);
  Kernels& k = backend_->kernels();
  const ModelDims& d = cfg_.dims;
  const int64_t B = cfg_.micro_batch, T = cfg_.seq, N = B * T, Nl = activation_rows(), C = d.C;
  const int64_t tp = cfg_.tp_size, Hq = d.Hq / tp, Hk = d.Hk / tp, D = d.D, F = d.F / tp;
  const std::string p = L(layer);
  ParamStore& P = *params_;
  a.x_in = make(backend_, Nl * C);
  backend_->copy(a.x_in.f32(), x_in, size_t(Nl * C) * sizeof(float));
  // attention block
  DeviceBuffer h_loc = make(backend_, Nl * C);
  if (d.gpt2) a.mean1 = make(backend_, Nl);  // LayerNorm only
  a.rstd1 = make(backend_, Nl);
  if (d.gpt2)
    k.layernorm_forward({x_in, P.param(p + "ln1.weight"), P.param(p + "ln1.bias"), h_loc.f32(), a.mean1.f32(),
                           a.rstd1.f32(), Nl, C, d.norm_eps});
  else
    k.rmsnorm_forward({x_in, P.param(p + "ln1.weight"), h_loc.f32(), a.rstd1.f32(), Nl, C, d.norm_eps});
  // Mixed precision (ChunkConfig::gemm_reads_packed): a tensor that only
  // GEMMs read from here on, forward and backward, is rounded to 16 bits
  // once, as soon as it is made: its forward GEMMs read those bits (one cast
  // where each GEMM made its own), it is saved as them (the pack it would
  // get), and its fp32 form is freed.
  const bool round_once = saves_16bit(backend_) && cfg_.gemm_reads_packed;
  auto gemm16 = [&](DeviceBuffer& b) {
    if (!round_once) return;
    pack(backend_, b);
    a.keep16(b);
  };
  a.h1 = make(backend_, N * C);
  LOOM_RETURN_IF_ERROR(enter_tp(h_loc.f32(), a.h1.f32()));
  gemm16(a.h1);
  a.q = make(backend_, N * Hq * D);
  a.k = make(backend_, N * Hk * D);
  a.v = make(backend_, N * Hk * D);
  const bool qkv_bias = d.gpt2 || d.qkv_bias;
  linear(k, a.f32(a.h1), P.param(p + "attn.q.weight"), qkv_bias ? P.param(p + "attn.q.bias") : nullptr, a.q.f32(), N,
         C, Hq * D, a.b16(a.h1));
  linear(k, a.f32(a.h1), P.param(p + "attn.k.weight"), qkv_bias ? P.param(p + "attn.k.bias") : nullptr, a.k.f32(), N,
         C, Hk * D, a.b16(a.h1));
  linear(k, a.f32(a.h1), P.param(p + "attn.v.weight"), qkv_bias ? P.param(p + "attn.v.bias") : nullptr, a.v.f32(), N,
         C, Hk * D, a.b16(a.h1));
  if (!d.gpt2) {
    if (d.qk_norm) {  // Qwen3: RMSNorm over each head's D values, before RoPE
      a.qn_in = std::move(a.q);
      a.kn_in = std::move(a.k);
      a.q = make(backend_, N * Hq * D);
      a.k = make(backend_, N * Hk * D);
      a.q_rstd = make(backend_, N * Hq);
      a.k_rstd = make(backend_, N * Hk);
      k.rmsnorm_forward({a.qn_in.f32(), P.param(p + "attn.q_norm.weight"), a.q.f32(), a.q_rstd.f32(), N * Hq, D,
                        d.norm_eps});
      k.rmsnorm_forward({a.kn_in.f32(), P.param(p + "attn.k_norm.weight"), a.k.f32(), a.k_rstd.f32(), N * Hk, D,
                        d.norm_eps});
    }
    apply_rope(a.q.f32(), Hq, false);
    apply_rope(a.k.f32(), Hk, false);
  }
  LOOM_RETURN_IF_ERROR(attention_forward(a));
  DeviceBuffer part = make(backend_, N * C);
  linear(k, a.ctx.f32(), P.param(p + "attn.o.weight"), nullptr, part.f32(), N, Hq * D, C);
  DeviceBuffer o = make(backend_, Nl * C);
  LOOM_RETURN_IF_ERROR(leave_tp(part.f32(), o.f32()));
  if (d.gpt2 || d.o_bias) k.add_bias({o.f32(), P.param(p + "attn.o.bias"), Nl, C});
  // MLP block: its norm takes the residual add, x_mid = x_in + o (fused)
  a.x_mid = make(backend_, Nl * C);
  if (d.gpt2) a.mean2 = make(backend_, Nl);
  a.rstd2 = make(backend_, Nl);
  if (d.gpt2)
    k.layernorm_forward({x_in, P.param(p + "ln2.weight"), P.param(p + "ln2.bias"), h_loc.f32(), a.mean2.f32(),
                         a.rstd2.f32(), Nl, C, d.norm_eps, o.f32(), a.x_mid.f32()});
  else
    k.rmsnorm_forward({x_in, P.param(p + "ln2.weight"), h_loc.f32(), a.rstd2.f32(), Nl, C, d.norm_eps, o.f32(),
                       a.x_mid.f32()});
  a.h2 = make(backend_, N * C);
  LOOM_RETURN_IF_ERROR(enter_tp(h_loc.f32(), a.h2.f32()));
  if (d.moe.is_moe(layer)) {
    LOOM_RETURN_IF_ERROR(moe_->forward(layer, a.h2.f32(), part.f32(), N, &a.moe, keep ? nullptr : &moe_stats_));
  } else if (d.gpt2) {
    gemm16(a.h2);
    a.a = make(backend_, N * F);
    a.g = make(backend_, N * F);
    linear(k, a.f32(a.h2), P.param(p + "mlp.fc1.weight"), P.param(p + "mlp.fc1.bias"), a.a.f32(), N, C, F,
           a.b16(a.h2), a.g.f32());  // g = GELU(a), the GEMM's epilogue
    gemm16(a.g);
    linear(k, a.f32(a.g), P.param(p + "mlp.fc2.weight"), nullptr, part.f32(), N, F, C, a.b16(a.g));
  } else {
    gemm16(a.h2);
    a.a = make(backend_, N * F);
    a.g = make(backend_, N * F);
    linear(k, a.f32(a.h2), P.param(p + "mlp.gate.weight"), d.mlp_bias ? P.param(p + "mlp.gate.bias") : nullptr,
           a.a.f32(), N, C, F, a.b16(a.h2));
    linear(k, a.f32(a.h2), P.param(p + "mlp.up.weight"), d.mlp_bias ? P.param(p + "mlp.up.bias") : nullptr, a.g.f32(),
           N, C, F, a.b16(a.h2));
    a.s = make(backend_, N * F);
    k.swiglu_forward({a.a.f32(), a.g.f32(), a.s.f32(), N * F});
    gemm16(a.s);
    linear(k, a.f32(a.s), P.param(p + "mlp.down.weight"), nullptr, part.f32(), N, F, C, a.b16(a.s));
  }
  LOOM_RETURN_IF_ERROR(leave_tp(part.f32(), o.f32()));
  if (d.gpt2) k.add_bias({o.f32(), P.param(p + "mlp.fc2.bias"), Nl, C});
  if (!d.gpt2 && d.mlp_bias) k.add_bias({o.f32(), P.param(p + "mlp.down.bias"), Nl, C});
  k.add_inplace({x_out, o.f32(), Nl * C, a.x_mid.f32()});  // x_out = x_mid + o
  if (!keep) {
    // Full recompute keeps only the layer input (partial: the chunk's first
    // recompute_layers layers; the others keep everything); selective drops
    // the attention core (recomputed from q, k, v).
    if (recomputes(layer)) {
      DeviceBuffer x = std::move(a.x_in);
      a = LayerActs{};
      a.x_in = std::move(x);
    } else if (cfg_.recompute == Recompute::kSelective) {
      a.ctx = DeviceBuffer();
      a.lse = DeviceBuffer();
    }
    if (saves_16bit(backend_)) {
      a.for_each_large(residual_16bit(backend_), [&](DeviceBuffer& b) {
        if (!a.is16(b)) pack(backend_, b);
      });
      a.packed = true;
    }
  }
  return Status::ok();
}

// Backward's own buffers (activation gradients, temporaries) are workspace;
// what it restores or recomputes of the forward is activations.
Status ModelChunk::layer_backward(int layer, const float* dx_out, float* dx_in, LayerActs& a, DeferredWgrad* defer) {
  MemoryClassScope charge(MemoryClass::kWorkspace);
  Kernels& k = backend_->kernels();
  const ModelDims& d = cfg_.dims;
  const int64_t B = cfg_.micro_batch, T = cfg_.seq, N = B * T, Nl = activation_rows(), C = d.C;
  const int64_t tp = cfg_.tp_size, Hq = d.Hq / tp, Hk = d.Hk / tp, D = d.D, F = d.F / tp;
  const std::string p = L(layer);
  ParamStore& P = *params_;
  const bool qkv_bias = d.gpt2 || d.qkv_bias;
  std::vector<Gemm>* dw = defer ? &defer->gemms : nullptr;
  if (a.packed) {
    MemoryClassScope restored(MemoryClass::kActivations);
    a.for_each_large(residual_16bit(backend_), [&](DeviceBuffer& b) {
      if (!a.is16(b)) unpack(backend_, b);  // the kept16 ones stay 16-bit
    });
    a.packed = false;
  }
  if (recomputes(layer)) {
    MemoryClassScope recomputed(MemoryClass::kActivations);
    DeviceBuffer x = std::move(a.x_in);
    DeviceBuffer out = make(backend_, Nl * C);
    LOOM_RETURN_IF_ERROR(layer_forward(layer, x.f32(), out.f32(), a, /*keep=*/true));
  } else if (a.ctx.empty()) {
    MemoryClassScope recomputed(MemoryClass::kActivations);
    LOOM_RETURN_IF_ERROR(attention_forward(a));
  }
  // MLP block
  DeviceBuffer dfull = make(backend_, N * C);
  if (d.gpt2) k.bias_backward({dx_out, P.grad(p + "mlp.fc2.bias"), Nl, C});
  if (!d.gpt2 && d.mlp_bias) k.bias_backward({dx_out, P.grad(p + "mlp.down.bias"), Nl, C});
  LOOM_RETURN_IF_ERROR(enter_tp(dx_out, dfull.f32()));
  DeviceBuffer dh_part = make(backend_, N * C);
  if (d.moe.is_moe(layer)) {
    LOOM_RETURN_IF_ERROR(moe_->backward(layer, a.h2.f32(), dfull.f32(), dh_part.f32(), &a.moe, grad_scale_, defer));
  } else if (d.gpt2) {
    // fc2's input gradient goes through GELU's backward in its GEMM (one
    // (N, F) buffer, not two), which sums fc1's bias gradient too.
    DeviceBuffer da = make(backend_, N * F);
    linear_backward(k, dfull.f32(), a.f32(a.g), P.param(p + "mlp.fc2.weight"), P.grad(p + "mlp.fc2.weight"), nullptr,
                    da.f32(), N, F, C, false, a.b16(a.g), a.a.f32(), P.grad(p + "mlp.fc1.bias"), dw);
    linear_backward(k, da.f32(), a.f32(a.h2), P.param(p + "mlp.fc1.weight"), P.grad(p + "mlp.fc1.weight"), nullptr,
                    dh_part.f32(), N, C, F, false, a.b16(a.h2), nullptr, nullptr, dw);
    if (defer) defer->hold(da);
  } else {
    DeviceBuffer ds = make(backend_, N * F);
    linear_backward(k, dfull.f32(), a.f32(a.s), P.param(p + "mlp.down.weight"), P.grad(p + "mlp.down.weight"),
                    nullptr, ds.f32(), N, F, C, false, a.b16(a.s), nullptr, nullptr, dw);
    DeviceBuffer dgate = make(backend_, N * F), dup = make(backend_, N * F);
    k.swiglu_backward({ds.f32(), a.a.f32(), a.g.f32(), dgate.f32(), dup.f32(), N * F});
    linear_backward(k, dgate.f32(), a.f32(a.h2), P.param(p + "mlp.gate.weight"), P.grad(p + "mlp.gate.weight"),
                    d.mlp_bias ? P.grad(p + "mlp.gate.bias") : nullptr, dh_part.f32(), N, C, F, false, a.b16(a.h2),
                    nullptr, nullptr, dw);
    linear_backward(k, dup.f32(), a.f32(a.h2), P.param(p + "mlp.up.weight"), P.grad(p + "mlp.up.weight"),
                    d.mlp_bias ? P.grad(p + "mlp.up.bias") : nullptr, dh_part.f32(), N, C, F, true, a.b16(a.h2),
                    nullptr, nullptr, dw);
    if (defer)
      for (DeviceBuffer* b : {&dgate, &dup}) defer->hold(*b);
  }
  if (defer) {
    // The MLP's deferred GEMMs read its output gradient, which the
    // attention's would overwrite next, and its saved inputs (a MoE
    // layer's shared experts and router read h2 too).
    defer->hold(dfull);
    dfull = make(backend_, N * C);
    for (DeviceBuffer* b : {&a.g, &a.s, &a.h2}) defer->hold(*b);
  }
  DeviceBuffer dh = make(backend_, Nl * C);
  LOOM_RETURN_IF_ERROR(leave_tp_backward(dh_part.f32(), dh.f32()));
  DeviceBuffer dx_mid = make(backend_, Nl * C);
  // dx_mid = the norm's dx + dx_out (the residual branch), fused
  if (d.gpt2)
    k.layernorm_backward({dh.f32(), a.x_mid.f32(), P.param(p + "ln2.weight"), a.mean2.f32(), a.rstd2.f32(),
                          dx_mid.f32(), P.grad(p + "ln2.weight"), P.grad(p + "ln2.bias"), Nl, C, dx_out});
  else
    k.rmsnorm_backward({dh.f32(), a.x_mid.f32(), P.param(p + "ln2.weight"), a.rstd2.f32(), dx_mid.f32(),
                        P.grad(p + "ln2.weight"), Nl, C, dx_out});
  // attention block
  if (d.gpt2 || d.o_bias) k.bias_backward({dx_mid.f32(), P.grad(p + "attn.o.bias"), Nl, C});
  LOOM_RETURN_IF_ERROR(enter_tp(dx_mid.f32(), dfull.f32()));
  DeviceBuffer dctx = make(backend_, N * Hq * D);
  linear_backward(k, dfull.f32(), a.ctx.f32(), P.param(p + "attn.o.weight"), P.grad(p + "attn.o.weight"), nullptr,
                  dctx.f32(), N, Hq * D, C, false, nullptr, nullptr, nullptr, dw);
  DeviceBuffer dq = make(backend_, N * Hq * D), dk = make(backend_, N * Hk * D), dv = make(backend_, N * Hk * D);
  LOOM_RETURN_IF_ERROR(attention_backward(dctx.f32(), a, dq.f32(), dk.f32(), dv.f32()));
  if (!d.gpt2) {
    apply_rope(dq.f32(), Hq, true);
    apply_rope(dk.f32(), Hk, true);
    if (d.qk_norm) {
      // The norm weights are replicated over TP but each rank holds only its
      // heads: without SP their gradients are summed over TP here (a
      // micro-batch's part only); with SP the trainer sums every replicated
      // gradient over TP after backward.
      const bool sum_here = cfg_.tp_size > 1 && !cfg_.sequence_parallel;
      DeviceBuffer dw;
      float* dwq = P.grad(p + "attn.q_norm.weight");
      float* dwk = P.grad(p + "attn.k_norm.weight");
      if (sum_here) {
        dw = DeviceBuffer(backend_, size_t(2 * D) * sizeof(float));  // zeroed: the kernels accumulate
        dwq = dw.f32();
        dwk = dw.f32() + D;
      }
      DeviceBuffer dq_in = make(backend_, N * Hq * D), dk_in = make(backend_, N * Hk * D);
      k.rmsnorm_backward({dq.f32(), a.qn_in.f32(), P.param(p + "attn.q_norm.weight"), a.q_rstd.f32(), dq_in.f32(), dwq,
                         N * Hq, D});
      k.rmsnorm_backward({dk.f32(), a.kn_in.f32(), P.param(p + "attn.k_norm.weight"), a.k_rstd.f32(), dk_in.f32(), dwk,
                         N * Hk, D});
      if (sum_here) {
        LOOM_RETURN_IF_ERROR(tp_all_reduce(dw.f32(), 2 * D));
        k.add_inplace({P.grad(p + "attn.q_norm.weight"), dw.f32(), D});
        k.add_inplace({P.grad(p + "attn.k_norm.weight"), dw.f32() + D, D});
      }
      dq = std::move(dq_in);
      dk = std::move(dk_in);
    }
  }
  linear_backward(k, dq.f32(), a.f32(a.h1), P.param(p + "attn.q.weight"), P.grad(p + "attn.q.weight"),
                  qkv_bias ? P.grad(p + "attn.q.bias") : nullptr, dh_part.f32(), N, C, Hq * D, false, a.b16(a.h1),
                  nullptr, nullptr, dw);
  linear_backward(k, dk.f32(), a.f32(a.h1), P.param(p + "attn.k.weight"), P.grad(p + "attn.k.weight"),
                  qkv_bias ? P.grad(p + "attn.k.bias") : nullptr, dh_part.f32(), N, C, Hk * D, true, a.b16(a.h1),
                  nullptr, nullptr, dw);
  linear_backward(k, dv.f32(), a.f32(a.h1), P.param(p + "attn.v.weight"), P.grad(p + "attn.v.weight"),
                  qkv_bias ? P.grad(p + "attn.v.bias") : nullptr, dh_part.f32(), N, C, Hk * D, true, a.b16(a.h1),
                  nullptr, nullptr, dw);
  if (defer)
    for (DeviceBuffer* b : {&dfull, &a.ctx, &dq, &dk, &dv, &a.h1}) defer->hold(*b);
  LOOM_RETURN_IF_ERROR(leave_tp_backward(dh_part.f32(), dh.f32()));
  if (d.gpt2)
    k.layernorm_backward({dh.f32(), a.x_in.f32(), P.param(p + "ln1.weight"), a.mean1.f32(), a.rstd1.f32(), dx_in,
                          P.grad(p + "ln1.weight"), P.grad(p + "ln1.bias"), Nl, C, dx_mid.f32()});
  else
    k.rmsnorm_backward({dh.f32(), a.x_in.f32(), P.param(p + "ln1.weight"), a.rstd1.f32(), dx_in,
                        P.grad(p + "ln1.weight"), Nl, C, dx_mid.f32()});
  a = LayerActs{};
  return Status::ok();
}

Status ModelChunk::forward(int micro, const int32_t* tokens, const float* input, const int32_t* targets,
                           float loss_scale, float* output) {
  Kernels& k = backend_->kernels();
  const ModelDims& d = cfg_.dims;
  const int64_t B = cfg_.micro_batch, T = cfg_.seq, N = B * T, Nl = activation_rows(), C = d.C;
  const int64_t tp = cfg_.tp_size, Vl = d.Vp / tp, v_begin = Vl * cfg_.tp_rank;
  ParamStore& P = *params_;
  MemoryClassScope charge(MemoryClass::kActivations);
  auto acts = std::make_unique<MicroActs>();
  acts->layers.resize(cfg_.num_layers);
  DeviceBuffer x = make(backend_, Nl * C), y = make(backend_, Nl * C);
  if (cfg_.has_embedding) {
    acts->tokens = DeviceBuffer::uninitialized(backend_, size_t(N) * sizeof(int32_t));
    backend_->copy(acts->tokens.i32(), tokens, size_t(N) * sizeof(int32_t));
    DeviceBuffer part = make(backend_, N * C);
    k.embedding_forward({tokens, P.param("embed.wte"), part.f32(), N, C, v_begin, Vl});
    LOOM_RETURN_IF_ERROR(leave_tp(part.f32(), x.f32()));
    if (d.gpt2) positions(x.f32(), false);
  } else {
    backend_->copy(x.f32(), input, size_t(Nl * C) * sizeof(float));
  }
  for (int i = 0; i < cfg_.num_layers; ++i) {
    LOOM_RETURN_IF_ERROR(layer_forward(cfg_.first_layer + i, x.f32(), y.f32(), acts->layers[i], false));
    std::swap(x, y);
  }
  if (!cfg_.has_head) {
    backend_->copy(output, x.f32(), size_t(Nl * C) * sizeof(float));
    saved_[micro] = std::move(acts);
    return k.status();
  }
  // Final norm, logits over the local vocabulary slice, vocab-parallel loss.
  acts->head_in = std::move(x);
  DeviceBuffer hf_loc = make(backend_, Nl * C);
  if (d.gpt2) acts->meanf = make(backend_, Nl);
  acts->rstdf = make(backend_, Nl);
  if (d.gpt2)
    k.layernorm_forward({acts->head_in.f32(), P.param("final_norm.weight"), P.param("final_norm.bias"),
                           hf_loc.f32(), acts->meanf.f32(), acts->rstdf.f32(), Nl, C, d.norm_eps});
  else
    k.rmsnorm_forward({acts->head_in.f32(), P.param("final_norm.weight"), hf_loc.f32(), acts->rstdf.f32(), Nl, C,
                         d.norm_eps});
  acts->hf = make(backend_, N * C);
  LOOM_RETURN_IF_ERROR(enter_tp(hf_loc.f32(), acts->hf.f32()));
  const char* wname = d.tied ? "embed.wte" : "lm_head.weight";
  const float* W = P.param(wname);
  if (cfg_.head_grad_in_forward) {
    LOOM_RETURN_IF_ERROR(fused_head(acts.get(), targets, W, P.grad(wname), loss_scale));
    saved_[micro] = std::move(acts);
    return k.status();
  }
  acts->dlogits = make(backend_, N * Vl);
  DeviceBuffer row_max = make(backend_, N), sumexp = make(backend_, N), target_logit = make(backend_, N),
               loss = make(backend_, N);
  LOOM_RETURN_IF_ERROR(head_loss_block(acts->hf.f32(), targets, W, N, loss_scale, acts->dlogits.f32(), row_max.f32(),
                                       sumexp.f32(), target_logit.f32(), loss.f32()));
  saved_[micro] = std::move(acts);
  return k.status();
}

// The head's loss over n rows of the gathered normed input `hf`: their
// logits over the local vocabulary slice (the padded columns masked), the
// vocab-parallel max, sum-exp and target logit, the loss added to the device
// total, and the logits turned into their gradient in place. `row_max`,
// `sumexp`, `target_logit`, `loss`: n each.
Status ModelChunk::head_loss_block(const float* hf, const int32_t* targets, const float* W, int64_t n,
                                   float loss_scale, float* logits, float* row_max, float* sumexp,
                                   float* target_logit, float* loss) {
  Kernels& k = backend_->kernels();
  const ModelDims& d = cfg_.dims;
  const int64_t tp = cfg_.tp_size, Vl = d.Vp / tp, v_begin = Vl * cfg_.tp_rank;
  linear(k, hf, W, nullptr, logits, n, d.C, Vl);
  // Padded vocabulary columns take no part in the softmax.
  if (v_begin + Vl > d.V) k.fill_columns({logits, n, Vl, std::max<int64_t>(0, d.V - v_begin), Vl, -1e30f});
  k.xent_row_max({logits, row_max, n, Vl});
  if (tp > 1) LOOM_RETURN_IF_ERROR(tp_->all_reduce(row_max, size_t(n), ReduceOp::kMax));
  k.xent_sumexp_and_target({logits, targets, row_max, sumexp, target_logit, n, Vl, v_begin});
  if (tp > 1) {
    LOOM_RETURN_IF_ERROR(tp_->all_reduce(sumexp, size_t(n), ReduceOp::kSum));
    LOOM_RETURN_IF_ERROR(tp_->all_reduce(target_logit, size_t(n), ReduceOp::kSum));
  }
  k.xent_loss({row_max, sumexp, target_logit, loss, n});
  k.accumulate_sum({loss, n, double(loss_scale), loss_total()});
  // The gradient of the logits now, in place: the logits are not needed again.
  k.xent_backward({logits, targets, row_max, sumexp, logits, n, Vl, v_begin, loss_scale * grad_scale_});
  return Status::ok();
}

// The fused linear cross-entropy (core/executor_head.h): per block of rows,
// the logits, the vocab-parallel loss, the logits' gradient in place, then
// the head's weight gradient (accumulated) and input gradient (saved for
// backward). The ops and their order are the unfused head's, its backward's
// GEMMs moved here, so one block of all rows gives bit for bit its result.
Status ModelChunk::fused_head(MicroActs* acts, const int32_t* targets, const float* W, float* dW, float loss_scale) {
  Kernels& k = backend_->kernels();
  const ModelDims& d = cfg_.dims;
  const int64_t N = cfg_.micro_batch * cfg_.seq, C = d.C, Vl = d.Vp / cfg_.tp_size;
  const int64_t R = cfg_.head_block_rows > 0 ? std::min(cfg_.head_block_rows, N) : executor_head_block_rows(N, Vl);
  acts->dh_part = make(backend_, N * C);  // saved: the activations' class
  MemoryClassScope charge(MemoryClass::kWorkspace);
  DeviceBuffer logits = make(backend_, R * Vl);
  DeviceBuffer row_max = make(backend_, R), sumexp = make(backend_, R), target_logit = make(backend_, R),
               loss = make(backend_, R);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t n = std::min(R, N - r0);
    const float* hf = acts->hf.f32() + r0 * C;
    LOOM_RETURN_IF_ERROR(head_loss_block(hf, targets + r0, W, n, loss_scale, logits.f32(), row_max.f32(),
                                         sumexp.f32(), target_logit.f32(), loss.f32()));
    linear_backward(k, logits.f32(), hf, W, dW, nullptr, acts->dh_part.f32() + r0 * C, n, C, Vl, false);
  }
  acts->hf = DeviceBuffer();  // the weight gradient is done: backward needs dh_part only
  return k.status();
}

// A backward in progress between its parts: the micro-batch's saved
// activations and the gradient flowing down the layers.
struct ModelChunk::BackwardInFlight {
  int micro = -1;
  int next_part = 0;
  std::unique_ptr<MicroActs> acts;
  DeviceBuffer dx, dy;
  bool defer = false;
  DeferredWgrad deferred;
};

Status ModelChunk::backward(int micro, const float* dout, float* dinput) {
  return backward_part(micro, dout, dinput, 0, 1);
}

Status ModelChunk::backward_part(int micro, const float* dout, float* dinput, int part, int num_parts,
                                 bool defer_wgrad) {
  Kernels& k = backend_->kernels();
  const ModelDims& d = cfg_.dims;
  const int64_t B = cfg_.micro_batch, T = cfg_.seq, N = B * T, Nl = activation_rows(), C = d.C;
  const int64_t tp = cfg_.tp_size, Vl = d.Vp / tp, v_begin = Vl * cfg_.tp_rank;
  ParamStore& P = *params_;
  MemoryClassScope charge(MemoryClass::kWorkspace);
  if (num_parts < 1 || part < 0 || part >= num_parts)
    return internal_error("backward part " + std::to_string(part) + " of " + std::to_string(num_parts));
  if (part == 0) {
    if (bwd_) return internal_error("backward of micro-batch " + std::to_string(micro) + " while micro-batch " +
                                    std::to_string(bwd_->micro) + " is still in backward");
    auto it = saved_.find(micro);
    if (it == saved_.end())
      return internal_error("backward of micro-batch " + std::to_string(micro) + " before its forward");
    if (defer_wgrad && deferred_.count(micro))
      return internal_error("backward of micro-batch " + std::to_string(micro) +
                            " defers weight gradients its earlier backward still defers");
    bwd_ = std::make_unique<BackwardInFlight>();
    bwd_->micro = micro;
    bwd_->defer = defer_wgrad;
    bwd_->acts = std::move(it->second);
    saved_.erase(it);
    bwd_->dx = make(backend_, Nl * C);
    bwd_->dy = make(backend_, Nl * C);
    MicroActs* acts = bwd_->acts.get();
    if (cfg_.has_head) {
      const char* wname = d.tied ? "embed.wte" : "lm_head.weight";
      DeviceBuffer dh_part;
      if (!acts->dh_part.empty()) {
        dh_part = std::move(acts->dh_part);  // the fused head's, from the forward
      } else {
        dh_part = make(backend_, N * C);
        linear_backward(k, acts->dlogits.f32(), acts->hf.f32(), P.param(wname), P.grad(wname), nullptr,
                        dh_part.f32(), N, C, Vl, false);
      }
      DeviceBuffer dh = make(backend_, Nl * C);
      LOOM_RETURN_IF_ERROR(leave_tp_backward(dh_part.f32(), dh.f32()));
      if (d.gpt2)
        k.layernorm_backward({dh.f32(), acts->head_in.f32(), P.param("final_norm.weight"), acts->meanf.f32(),
                             acts->rstdf.f32(), bwd_->dx.f32(), P.grad("final_norm.weight"), P.grad("final_norm.bias"),
                             Nl, C});
      else
        k.rmsnorm_backward({dh.f32(), acts->head_in.f32(), P.param("final_norm.weight"), acts->rstdf.f32(),
                           bwd_->dx.f32(), P.grad("final_norm.weight"), Nl, C});
      // The head is done with this micro-batch: its logits (the largest
      // buffer with a real vocabulary) go before the layers' backward.
      acts->dlogits = DeviceBuffer();
      acts->hf = DeviceBuffer();
      acts->head_in = DeviceBuffer();
      acts->meanf = DeviceBuffer();
      acts->rstdf = DeviceBuffer();
    } else {
      backend_->copy(bwd_->dx.f32(), dout, size_t(Nl * C) * sizeof(float));
    }
  } else if (!bwd_ || bwd_->micro != micro || bwd_->next_part != part || bwd_->defer != defer_wgrad) {
    return internal_error("backward part " + std::to_string(part) + " of micro-batch " + std::to_string(micro) +
                          " out of order");
  }
  BackwardInFlight& b = *bwd_;
  const LayerRange layers = backward_part_layers(cfg_.num_layers, part, num_parts);
  for (int i = layers.end - 1; i >= layers.begin; --i) {
    LOOM_RETURN_IF_ERROR(layer_backward(cfg_.first_layer + i, b.dx.f32(), b.dy.f32(), b.acts->layers[size_t(i)],
                                        b.defer ? &b.deferred : nullptr));
    std::swap(b.dx, b.dy);
  }
  b.next_part = part + 1;
  if (part + 1 < num_parts) return k.status();
  if (cfg_.has_embedding) {
    if (d.gpt2) positions(b.dx.f32(), true);
    DeviceBuffer dfull = make(backend_, N * C);
    LOOM_RETURN_IF_ERROR(enter_tp(b.dx.f32(), dfull.f32()));
    k.embedding_backward({b.acts->tokens.i32(), dfull.f32(), P.grad("embed.wte"), N, C, v_begin, Vl});
  } else {
    backend_->copy(dinput, b.dx.f32(), size_t(Nl * C) * sizeof(float));
  }
  if (b.defer) deferred_[micro] = std::move(b.deferred);
  bwd_.reset();
  return k.status();
}

Status ModelChunk::weight_grad(int micro) {
  auto it = deferred_.find(micro);
  if (it == deferred_.end())
    return internal_error("weight gradients of micro-batch " + std::to_string(micro) + " were not deferred");
  Kernels& k = backend_->kernels();
  // In the order backward met them: each accumulates into its weight's
  // gradient as the backward would have.
  it->second.run(k);
  deferred_.erase(it);  // after the GEMMs: a device backend's stream orders the frees
  return k.status();
}

ModelChunk::~ModelChunk() = default;

double* ModelChunk::loss_total() {
  if (loss_total_.empty()) {
    MemoryClassScope charge(MemoryClass::kWorkspace);
    loss_total_ = DeviceBuffer(backend_, sizeof(double));  // zero-filled
  }
  return reinterpret_cast<double*>(loss_total_.f32());
}

double ModelChunk::take_loss() {
  if (loss_total_.empty()) return 0;
  double total = 0;
  backend_->copy_to_host(&total, loss_total_.f32(), sizeof(double));
  backend_->fill_zero(loss_total_.f32(), sizeof(double));
  return total;
}

}  // namespace loom::exec
