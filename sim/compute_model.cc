#include "sim/compute_model.h"

#include "sim/compute_parts.h"
#include "sim/cp_exchange.h"
#include "sim/tp_collectives.h"

#include <algorithm>
#include <cmath>

namespace loom {

using compute_parts::GemmSum;
using compute_parts::mem_time_s;

Precision sixteen_bit(Precision p) { return p == Precision::kFp8 ? Precision::kBf16 : p; }

double attention_tile_occupancy(double heads, double q_rows, int sms) {
  if (sms <= 0 || heads <= 0 || q_rows <= 0) return 1.0;
  const double n = std::ceil(q_rows / kAttentionTileRows);
  return std::min(1.0, heads * (n + 1) / (2.0 * sms));
}

int hook_added_params(const ModelSpec& m, bool moe_layer) {
  const int norm = m.norm == NormKind::kLayerNorm ? 2 : 1;  // weight (+ bias)
  int n = 2 * norm;                                         // the two pre-norms
  if (m.qk_norm && !m.mla.enabled) n += 2;
  if (m.mla.enabled) n += m.mla.q_lora_rank > 0 ? 2 : 1;  // the kv (and q) latent norms (MLA)
  if (moe_layer) n += 1;     // the router's weight (TopKRouter: a plain autograd gradient)
  if (m.qkv_bias) n += 1;    // the fused QKV linear's bias
  if (m.attn_out_bias || m.linear_bias) n += 1;
  if (m.mlp_bias || m.linear_bias) n += 2;  // the first and second MLP linears
  return n;
}

// Bytes one FP8 cast moves per element of a 16-bit tensor: read it, write
// the FP8 copy and its transpose (Hopper's FP8 tensor cores take only the
// TN layout, so the weight-gradient GEMM needs transposed copies; Transformer
// Engine fuses the two writes into cast_transpose), plus, with current
// scaling, one more read to reduce the tensor's amax before the cast.
double fp8_cast_bytes(const SimOptions& opt) { return 2 + 1 + 1 + (opt.fp8_scaling == Fp8Scaling::kCurrent ? 2 : 0); }
int fp8_cast_kernels(const SimOptions& opt) { return opt.fp8_scaling == Fp8Scaling::kCurrent ? 2 : 1; }
double fp8_cast_time_s(const HwProfile& hw, const SimOptions& opt, double elements, int casts) {
  return mem_time_s(hw, opt, elements * fp8_cast_bytes(opt), casts * fp8_cast_kernels(opt));
}


double comm_contention_fraction(const HwProfile& hw) {
  if (hw.accel.sm_count <= 0) return 0;
  return std::min(1.0, nccl_channels() / hw.accel.sm_count);
}

double ep_comm_contention_fraction(const HwProfile& hw, const SimOptions& opt) {
  if (opt.moe_dispatch_sms <= 0 || hw.accel.sm_count <= 0) return comm_contention_fraction(hw);
  return std::min(1.0, double(opt.moe_dispatch_sms) / hw.accel.sm_count);
}

bool uses_dropout(const ModelSpec& model, const SimOptions& opt) {
  if (opt.dropout >= 0) return opt.dropout > 0;
  return model.model_type == "gpt2";
}

ComputeShape compute_shape(const Layout& layout, int64_t seq_len, const HwProfile& hw) {
  ComputeShape s;
  s.cp = std::max(1, layout.cp);
  s.cp_comm = s.cp > 1 ? layout.cp_comm : CpComm::kP2p;
  s.tokens = int64_t(layout.micro_batch) * seq_len / s.cp;
  s.seq = seq_len;
  s.tp = layout.tp;
  s.ep = layout.ep;
  s.etp = layout.expert_tp();
  s.sp = layout.sequence_parallel;
  s.recompute = layout.recompute;
  s.recompute_modules = layout.selective_modules();
  s.tp_group = group_shape(layout, Dim::kTp, hw.node.devices_per_node);
  s.ep_group = expert_group_shape(layout, hw.node.devices_per_node);
  s.cp_group = group_shape(layout, Dim::kCp, hw.node.devices_per_node);
  return s;
}

PieceCost layer_cost(const ModelSpec& m, const HwProfile& hw, const SimOptions& opt, Precision p,
                     const ComputeShape& sh, bool moe_layer) {
  PieceCost c;
  const double T = double(sh.tokens), t = sh.tp, h = double(m.hidden), e = element_bytes(p);
  const double s = double(sh.seq), cp = sh.cp, b = T * cp / s;  // b sequences of s tokens (T = b s / cp here)
  const double a = m.num_heads, g = m.num_kv_heads, d = double(m.head_dim);
  const double r = sh.sp ? 1.0 / t : 1.0;  // share of replicated elementwise work with SP
  const bool dropout = uses_dropout(m, opt);
  GemmSum gemm{hw, p, opt};
  // torchtitan's eager Llama block (SimOptions::layer_ops): dense layers
  // without MLA.
  const bool eager = opt.layer_ops == LayerOps::kTorchEager && !moe_layer && !m.mla.enabled;
  // Transformer Engine's userbuffers (tp_comm_overlap, with SP): the fused
  // QKV, proj, FC1 and FC2 linears run each pass as their overlap does
  // (GemmSum::ub_linear). MLA's projections and the experts run plain.
  const TpOverlapConfig& ubc = opt.tp_overlap;
  const bool ub_gemms = opt.tp_comm_overlap && sh.sp && sh.tp_group.ranks > 1 && !eager && !m.mla.enabled;
  auto column = [&](double rows, double n, double k, const UbGemm& fprop, const UbGemm& dgrad, const UbGemm& wgrad) {
    if (ub_gemms) gemm.ub_linear(rows, n, k, 1, t, &fprop, &dgrad, &wgrad);
    else gemm.weight(rows, n, k);
  };
  auto row = [&](double rows, double n, double k, const UbGemm& fprop, const UbGemm& dgrad) {
    if (ub_gemms) gemm.ub_linear(rows, n, k, 1, t, &fprop, &dgrad, nullptr);
    else gemm.weight(rows, n, k);
  };

  // --- attention projections ---------------------------------------------
  double qk_dim = d, v_dim = d, kv_heads = g;
  if (m.mla.enabled) {
    qk_dim = double(m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim);
    v_dim = double(m.mla.v_head_dim);
    kv_heads = a;
    const double ql = double(m.mla.q_lora_rank), kvl = double(m.mla.kv_lora_rank);
    // Down-projections are replicated across TP ranks (Megatron MLA).
    if (ql > 0) {
      gemm.weight(T, ql, h);
      gemm.weight(T, a * qk_dim / t, ql);
    } else {
      gemm.weight(T, a * qk_dim / t, h);
    }
    gemm.weight(T, kvl + double(m.mla.qk_rope_head_dim), h);
    gemm.weight(T, a * (double(m.mla.qk_nope_head_dim) + v_dim) / t, kvl);
  } else if (eager) {
    gemm.weight(T, a * d / t, h);     // wq, wk, wv apart (nn.Linear each)
    gemm.weight(T, g * d / t, h, 2);
  } else {
    column(T, (a + 2 * g) * d / t, h, ubc.qkv_fprop, ubc.qkv_dgrad, ubc.qkv_wgrad);  // fused QKV, column-parallel
  }
  // The attention block's column-parallel GEMMs (one of dgrad / wgrad each
  // costs their forward time): the window its backward TP collectives hide in.
  const double attn_column_s = gemm.fwd_s;
  if (m.mla.enabled) gemm.weight(T, h, a * v_dim / t);  // output projection, row-parallel
  else row(T, h, a * v_dim / t, ubc.proj_fprop, ubc.proj_dgrad);
  const double attn_row_s = gemm.fwd_s - attn_column_s;

  // --- attention core (scores and weighted sum) --------------------------
  double heads_local = a / t;
  double core_fwd_s = 0, core_flops = 0;
  double fp8_core_fwd_speedup = 1, fp8_core_bwd_speedup = 1;  // FP8 attention over 16 bits (below)
  {
    // Per head: (s x qk) * (qk x s) and (s x s) * (s x v), batched over b*heads.
    double per_head_flops = 2 * s * s * qk_dim + 2 * s * s * v_dim;
    double batches = b * heads_local;
    // Flash skips masked blocks: the causal triangle, and beyond a sliding
    // window whole blocks more (ModelSpec::attention_window_share; the
    // scores of the materialized path stay whole).
    double causal = opt.flash_attention ? (s + 1) / (2 * s) * m.attention_window_share(int64_t(s)) : 1.0;
    // Under CP each rank does 1/cp of it (the load-balanced chunks), 2cp+1
    // blocks of c x c scores (c = s / 2cp) on the ring. Loom's executor runs
    // each block as its own kernel (exec/model/context_parallel.cc), a merge
    // after each but the first. Transformer Engine's AttnFuncWithCPAndKVP2P
    // and PyTorch's ring attention run one kernel a step: step 0 the local
    // 2c x 2c causal, each later step 2c queries x c keys or c x 2c (two
    // blocks' work each), a correction each after the first. With the K/V
    // all-gathered each local query chunk is one kernel against the keys up
    // to its own chunk (Transformer Engine's two steps, a bottom-right
    // causal mask): two kernels of 1/(4cp) of a head's work on average.
    // With the heads exchanged (a2a) the attention is the whole sequence's
    // for heads/cp heads: one kernel, a head's whole work.
    core_flops = per_head_flops * batches * causal / cp;
    const bool ring_per_block = opt.for_loom_executor();
    double kernel_flops = per_head_flops * causal, launches = 2;
    // The share of the core's work its kernels run without a mask: on the
    // stacks' ring every step but the first (the local causal block) is a
    // full block, 1 - 1/cp of the rank's work (2c^2 of its 2 c^2 cp).
    double unmasked_share = 0;
    if (cp > 1 && sh.cp_comm == CpComm::kA2a) {
      // as without CP
    } else if (cp > 1 && sh.cp_comm == CpComm::kAllGather) {
      kernel_flops = per_head_flops / (4 * cp);
      launches = 2 * 2;
    } else if (cp > 1 && ring_per_block) {
      kernel_flops = per_head_flops / (4 * cp * cp);
      launches = 2 * (2 * cp + 1) + (2 * cp - 1);
    } else if (cp > 1) {
      kernel_flops = per_head_flops / (2 * cp * cp);
      launches = 2 * cp + (cp - 1);
      unmasked_share = 1 - 1 / cp;
    }
    // The profile's attention table measures a fused flash-style kernel;
    // materialized scores run as batched GEMMs at the GEMM table's rate.
    const bool measured = opt.flash_attention && !hw.accel.attention_efficiency.flops.empty();
    // A measured table is short-run: the part's power cap holds a training
    // step's back-to-back kernels to sustained_attention_share() of it.
    // Batched GEMMs at the GEMM table's rate take its power cap, as every
    // GEMM does (sim/gemm_time.cc).
    // FP8 attention (fp8_attention) is the 16-bit kernel's time over the
    // FP8 speedup its profile measured (below); the tables are 16-bit ones.
    const Precision core_p = sixteen_bit(p);
    // Materialized scores run as two batched GEMMs (torch.bmm / baddbmm over
    // the b x heads batch: one kernel each, not one a head), so the table is
    // read at one bmm's FLOPs over the whole batch.
    const double table_flops = opt.flash_attention ? kernel_flops : kernel_flops / 2 * batches;
    double eff = measured ? hw.accel.attention_efficiency.lookup(kernel_flops) * hw.accel.sustained_attention_share()
                          : std::min(hw.accel.gemm_efficiency.lookup(table_flops),
                                     hw.accel.sustained_gemm_efficiency(core_p));
    // Unmasked steps at the kernel's unmasked rate where the profile
    // measured one (attention_efficiency_no_mask, keyed by the unmasked
    // FLOP, which a full c x 2c block's kernel_flops is); else the causal.
    const GemmEfficiencyTable& no_mask = hw.accel.attention_efficiency_no_mask;
    double eff_unmasked = measured && unmasked_share > 0 && !no_mask.flops.empty()
                              ? no_mask.lookup(kernel_flops) * hw.accel.sustained_attention_share()
                              : eff;
    // The published tables (a named kernel) ran with every SM busy; a kernel
    // with few query tiles leaves SMs idle (attention_tile_occupancy).
    if (measured && !hw.accel.attention_kernel.empty()) {
      const bool heads_split = cp > 1 && sh.cp_comm == CpComm::kA2a;
      const double q_rows = cp > 1 && !heads_split ? s / cp : s;
      const double occupancy =
          attention_tile_occupancy(b * (heads_split ? heads_local / cp : heads_local), q_rows, hw.accel.sm_count);
      eff *= occupancy;
      eff_unmasked *= occupancy;
    }
    const double per_flop = (1 - unmasked_share) / eff + unmasked_share / eff_unmasked;
    core_fwd_s = core_flops / hw.accel.peak_flops(core_p) * per_flop + launches * opt.kernel_overhead_s;
    // Transformer Engine's fp8_dot_product_attention runs cuDNN's FP8 fused
    // kernel forward and (NVTE_FP8_DPA_BWD=1, its default) backward: the
    // 16-bit times over the FP8 / BF16 throughput the profile measured at the
    // kernel's query length (AcceleratorSpec::fp8_attention_speedup), which
    // measures head dim 128. No measurement (another head dim: Hopper's FP8
    // backward takes 128 only, Transformer Engine's fused_attn.cpp), or
    // materialized scores (no fused FP8 kernel): 16 bits.
    if (opt.fp8_attention && p == Precision::kFp8 && opt.flash_attention && qk_dim == 128 && v_dim == 128 &&
        !hw.accel.fp8_attention_speedup.empty()) {
      const double q_len = cp > 1 && sh.cp_comm != CpComm::kA2a ? s / cp : s;
      fp8_core_fwd_speedup = hw.accel.fp8_attention_speedup.forward_at(q_len);
      fp8_core_bwd_speedup = hw.accel.fp8_attention_speedup.backward_at(q_len);
    }
  }
  double core_bwd_factor = opt.flash_attention ? 2.5 : 2.0;  // flash recomputes scores in backward
  // Time of the backward relative to the forward: the FLOP ratio unless the
  // profile measured the kernel's own (CPU kernels: about 1.2-1.3).
  const double core_bwd_time = opt.flash_attention && hw.accel.attention_backward_ratio > 0 ? hw.accel.attention_backward_ratio
                                                                      : core_bwd_factor;
  double core_bwd_s = core_fwd_s * core_bwd_time / fp8_core_bwd_speedup;
  core_fwd_s /= fp8_core_fwd_speedup;
  if (!opt.flash_attention) {
    // Materialized scores. Each bmm also moves the s x s score tensor
    // (head dim 128: 128 FLOP a score byte, under the HBM ridge of a GPU,
    // so the bmm is memory-bound): forward QK^T writes it and PV reads it;
    // backward dP is written and P and dS read for dV, dQ and dK (four
    // passes). A bmm takes the longer of its FLOPs and its bytes. Then the
    // fused scale-mask-softmax (read+write) and dropout.
    const double elems = b * heads_local * s * s / cp;
    core_fwd_s = std::max(core_fwd_s, mem_time_s(hw, opt, 2 * elems * e, 2));
    core_bwd_s = std::max(core_bwd_s, mem_time_s(hw, opt, 4 * elems * e, 4));
    core_fwd_s += mem_time_s(hw, opt, elems * (2 * e + (dropout ? 2 * e + 1 : 0)), dropout ? 2 : 1);
    core_bwd_s += mem_time_s(hw, opt, elems * (3 * e + (dropout ? 2 * e + 1 : 0)), dropout ? 2 : 1);
  }

  // --- MLP or experts --------------------------------------------------------
  double mlp_mats = m.mlp == MlpKind::kSwiGlu ? 2 : 1;  // gate+up or fc1
  double act_elem_fwd = 0;  // elements through the activation function
  double expert_act_elems = 0;  // of them, the routed experts' (recompute module moe_act)
  double mlp_column_s = 0;  // FC1 / gate+up: the MLP block's window (none for experts)
  double mlp_row_s = 0;     // FC2 / down
  double moe_bytes = 0;     // MoE permutation and router traffic (forward)
  int moe_kernels = 0;
  CollectiveCost dispatch, combine;  // one MoE dispatch / combine exchange
  double moe_fp8_quant_bytes = 0;    // the FP8 dispatch's quantizing pass (forward)
  double router_weights = 0;         // of gemm.weight_elems, the router's
  if (!moe_layer) {
    double f = double(m.ffn_hidden);
    const double before = gemm.fwd_s;
    if (eager) gemm.weight(T, mlp_mats * f / t, h);
    else column(T, mlp_mats * f / t, h, ubc.fc1_fprop, ubc.fc1_dgrad, ubc.fc1_wgrad);
    mlp_column_s = gemm.fwd_s - before;
    if (eager) gemm.weight(T, h, f / t);
    else row(T, h, f / t, ubc.fc2_fprop, ubc.fc2_dgrad);
    mlp_row_s = gemm.fwd_s - before - mlp_column_s;
    act_elem_fwd += T * f / t;
  } else {
    const double E = m.moe.num_experts, k = m.moe.experts_per_token, fe = double(m.moe.expert_ffn_hidden);
    gemm.weight(T, E, h, 1, false);  // router, replicated, 16-bit
    router_weights = E * h;          // a plain autograd gradient (hook_added_params)
    double local_experts = E / sh.ep;
    // Balanced routing gives every expert T*k*ep/E tokens; the busiest
    // rank's experts get moe_load_imbalance times that, and the step waits
    // for it.
    // A capacity factor caps it: the busiest expert drops what is over.
    double imbalance = std::max(1.0, opt.moe_load_imbalance);
    if (opt.moe_capacity_factor > 0) imbalance = std::min(imbalance, opt.moe_capacity_factor);
    // Experts split over TP see every TP rank's tokens (gathered); folded
    // (etp = 1) each TP rank dispatches its 1/t share to whole experts.
    const double etp = sh.etp, fold = t / etp;
    double tokens_per_expert = T * k * sh.ep / E / fold * imbalance;
    // The local experts' GEMMs: one grouped kernel, or one GEMM each.
    gemm.grouped(local_experts, tokens_per_expert, mlp_mats * fe / etp, h);
    gemm.grouped(local_experts, tokens_per_expert, h, fe / etp);
    expert_act_elems = T * k * fe / t;
    act_elem_fwd += expert_act_elems;
    if (m.moe.num_shared_experts > 0) {
      double fs = double(m.moe.shared_expert_ffn_hidden) * m.moe.num_shared_experts;
      gemm.weight(T, mlp_mats * fs / t, h);
      gemm.weight(T, h, fs / t);
      act_elem_fwd += T * fs / t;
    }
    // Token permutation around the all-to-alls (Megatron's moe_permute /
    // moe_unpermute): gather the k copies of each local token into expert
    // order (read + write T*k*h), and after the combine scatter them back
    // with their router weights (read T*k*h, write T*h); the router's
    // softmax and top-k over T x E fp32 scores. Backward moves the same.
    moe_bytes = (3 * T * r * k * h + T * r * h) * e + 3 * T * r * E * 4;
    moe_kernels = 6;
    // With several local experts and ep > 1 the rows received from each
    // rank come sorted by expert per source, and are regrouped by local
    // expert before the experts and back after them (Megatron-Core's
    // MoEAlltoAllTokenDispatcher, sort_chunks_by_idxs): read + write of the
    // received rows twice; one local expert needs neither.
    if (sh.ep > 1 && local_experts > 1) {
      moe_bytes += 2 * 2 * T * r * k * h * e * imbalance;
      moe_kernels += 2;
    }
    // Dispatch + combine of the routed tokens' hidden states, forward and
    // (gradients) backward. FP8 dispatch: 1 byte an element and an fp32
    // scale per 128 (DeepSeek-V3's 1x128 tiles), after a quantizing pass
    // (read 16-bit, write 8-bit); the combine and the backward stay 16-bit.
    const double e_dispatch = opt.moe_fp8_dispatch ? 1.0 + 4.0 / 128 : e;
    if (opt.moe_fp8_dispatch) {  // forward only: the backward exchanges are 16-bit
      moe_fp8_quant_bytes = T * r * h * (e + e_dispatch);
    }
    dispatch = moe_exchange(m, hw, opt, sh, e_dispatch, imbalance).cost;
    combine = moe_exchange(m, hw, opt, sh, e, imbalance).cost;
    c.fwd_ep_s = dispatch.time_s + combine.time_s;
    c.bwd_ep_s = 2 * combine.time_s;
    if (sh.ep_group.ranks > 1) {
      c.ep_bytes.add(dispatch, 1);
      c.ep_bytes.add(combine, 3);
      c.ep_calls = 4;
      c.ep_comm_total_s = c.fwd_ep_s + c.bwd_ep_s;
    }
  }

  // --- memory-bound elementwise work ------------------------------------------
  double elem_bytes = 0;
  int kernels = 0;
  elem_bytes += 2 * (2 * T * h * e) * r;                  // two norms: read + write
  elem_bytes += 2 * (3 * T * h * e) * r;                  // two residual adds (fused with bias/dropout)
  if (dropout) elem_bytes += 2 * T * h * r;               // hidden dropout masks
  elem_bytes += (m.mlp == MlpKind::kSwiGlu ? 3 : 2) * act_elem_fwd * e;  // activation function
  if (m.position == PositionKind::kRope) elem_bytes += 2 * T * (heads_local + kv_heads / t) * qk_dim * e;
  kernels += 8;
  if (m.qk_norm && !m.mla.enabled) {  // Qwen3's per-head q/k RMSNorm: read + write q and k
    elem_bytes += 2 * T * (heads_local + kv_heads / t) * qk_dim * e;
    kernels += 2;
  }
  double elem_bwd_bytes = 2 * elem_bytes;
  int elem_bwd_kernels = 2 * kernels;
  // A named stack's fused kernels, op by op, where their backward moves less
  // than twice the forward: a norm's backward reads its input and the output
  // gradient and writes the input gradient (3 passes, not 4: Transformer
  // Engine's layernorm_bwd / rmsnorm_bwd); the fused SwiGLU's reads its two
  // inputs and the output gradient and writes two gradients (5, not 6:
  // Megatron's swiglu_back); the fused RoPE's reads and writes the gradient
  // once (2, not 4: Transformer Engine's fused_rope backward); Qwen3's q/k
  // norms as norms. Without a bias or dropout on the residual branch its
  // add's backward is autograd's one accumulation of the two gradients into
  // the residual stream (3 passes, not the 6 of a bias-dropout-add's
  // backward). Set by the stacks whose layers run these kernels
  // (SimOptions::fused_layer_backward); Loom's executor, eager and unnamed
  // stacks keep twice the forward.
  if (opt.fused_layer_backward && !eager) {
    elem_bwd_bytes -= 2 * (T * h * e) * r;
    const bool branch_bias = m.attn_out_bias || m.linear_bias || m.mlp_bias;
    if (!dropout && !branch_bias) elem_bwd_bytes -= 2 * (3 * T * h * e) * r;
    if (m.mlp == MlpKind::kSwiGlu) elem_bwd_bytes -= act_elem_fwd * e;
    if (m.position == PositionKind::kRope) elem_bwd_bytes -= 2 * T * (heads_local + kv_heads / t) * qk_dim * e;
    if (m.qk_norm && !m.mla.enabled) elem_bwd_bytes -= T * (heads_local + kv_heads / t) * qk_dim * e;
    // With RoPE the fused kernel's backward writes dq and dk as tensors of
    // their own, so Transformer Engine's _SplitAlongDim cannot hand the
    // fused QKV a view of one buffer and concatenates the three gradients
    // (torch.cat: read + write them), in every release.
    if (m.position == PositionKind::kRope && !m.mla.enabled) {
      elem_bwd_bytes += 2 * T * ((heads_local + kv_heads / t) * qk_dim + kv_heads / t * v_dim) * e;
      elem_bwd_kernels += 1;
    }
  }
  if (eager) {
    // Eager PyTorch's extra passes over the fused count above (each op reads
    // its inputs and writes its output; fp32 = 4 bytes):
    // * RoPE (apply_rotary_emb): x.float() (e + 4), the complex multiply
    //   (4 + 4), .type_as(x) (4 + e): 16 + 2e a q/k element, three kernels
    //   per tensor, against the fused 2e; backward runs the same three in
    //   reverse (fused: 4e).
    // * repeat_kv: K and V expanded to the query heads and copied (read the
    //   kv heads, write the query heads); backward sums them back.
    // * SwiGLU: F.silu (2e) and the multiply (3e) against one 3e kernel;
    //   backward the multiply's two products (3e each) and silu's (3e),
    //   against 6e.
    double fwd = 0, bwd = 0;
    int k_fwd = 0, k_bwd = 0;
    if (m.position == PositionKind::kRope) {
      const double qk = T * (heads_local + kv_heads / t) * qk_dim;
      fwd += qk * (16 + 2 * e - 2 * e);
      bwd += qk * (16 + 2 * e - 4 * e);
      k_fwd += 5;
      k_bwd += 5;
    }
    if (heads_local > kv_heads / t) {
      const double copy = 2 * T * (heads_local + kv_heads / t) * d * e;  // K and V
      fwd += copy;
      bwd += copy;
      k_fwd += 2;
      k_bwd += 2;
    }
    if (m.mlp == MlpKind::kSwiGlu) {
      fwd += act_elem_fwd * 2 * e;
      bwd += act_elem_fwd * 3 * e;
      k_fwd += 1;
      k_bwd += 1;
    }
    elem_bytes += fwd;
    kernels += k_fwd;
    elem_bwd_bytes += bwd;
    elem_bwd_kernels += k_bwd;
  }
  // Megatron-core r0.5-v0.13's bshd copies (SimOptions::qkv_bshd_copies):
  // v, a view into the fused QKV output, is copied (read + write); q and k
  // too unless a fused RoPE wrote them anew (its output is contiguous in the
  // transposed order: apex's transpose_output_memory, or at one sequence a
  // micro-batch Transformer Engine's); their gradients come back three
  // tensors apart and are concatenated (read + write the fused QKV's).
  double bshd_fwd_bytes = 0;  // re-run with the attention core under selective recompute
  int bshd_fwd_kernels = 0;
  if (opt.qkv_bshd_copies && !m.mla.enabled && !eager) {
    const double kv_local = kv_heads / t;
    const bool rope = m.position == PositionKind::kRope;
    bshd_fwd_bytes = 2 * T * kv_local * v_dim * e;
    bshd_fwd_kernels = 1;
    if (!rope) {
      bshd_fwd_bytes += 2 * T * (heads_local + kv_local) * qk_dim * e;
      bshd_fwd_kernels += 2;
    }
    elem_bytes += bshd_fwd_bytes;
    kernels += bshd_fwd_kernels;
    // The concatenation of the gradients (priced above for a fused stack's
    // RoPE layers, which run it in every release).
    if (!(rope && opt.fused_layer_backward)) {
      elem_bwd_bytes += 2 * T * ((heads_local + kv_local) * qk_dim + kv_local * v_dim) * e;
      elem_bwd_kernels += 1;
    }
  }
  // Transformer Engine's fused norm + FP8 cast under delayed scaling
  // (SimOptions::fp8_norm_cast_fused): the norms feeding a LayerNormLinear
  // (the QKV's; the FC1's on a dense layer, where a MoE layer's norm feeds
  // the router) write FP8 and transpose it, 5 bytes an element, not the 16-bit
  // output (4) and the cast (4) counted above and in the casts.
  if (opt.fp8_norm_cast_fused && opt.fp8_scaling == Fp8Scaling::kDelayed && gemm.fp8_casts > 0 && !eager &&
      !m.mla.enabled)
    elem_bytes -= 3 * T * h * r * (moe_layer ? 1 : 2);
  double elem_fwd_s = mem_time_s(hw, opt, elem_bytes + moe_bytes + moe_fp8_quant_bytes,
                                 kernels + moe_kernels + (moe_fp8_quant_bytes > 0 ? 1 : 0));
  // Megatron-core's main-gradient hook (SimOptions::grad_hook_add): one add
  // kernel a micro-batch for each of the layer's parameters whose gradient
  // autograd returns instead of its GEMM accumulating it (norm weights and
  // biases, the linears' biases); their bytes are negligible beside the
  // layer's.
  if (opt.grad_hook_add) elem_bwd_kernels += hook_added_params(m, moe_layer);
  // The linears' (and experts') weight gradients added into the main
  // gradient by their GEMMs (SimOptions::wgrad_gemm_accumulate).
  elem_bwd_bytes += compute_parts::wgrad_accumulate_bytes(hw, opt, p, gemm.weight_elems - router_weights);
  double elem_bwd_s = mem_time_s(hw, opt, elem_bwd_bytes + moe_bytes, elem_bwd_kernels + moe_kernels);

  // --- tensor-parallel collectives -------------------------------------------
  // Forward collectives are exposed. In backward, with opt.tp_async_backward
  // (Megatron-core's linear layers, tensor_parallel/layers.py,
  // LinearWithGradAccumulationAndAsyncCommunication.backward), a
  // column-parallel linear (QKV, FC1) starts its input-gradient all-reduce
  // (with SP: reduce-scatter) and computes its weight gradient meanwhile, and
  // with SP re-gathers its input (which that weight gradient needs) while it
  // computes the input gradient: per block, backward exposes only what those
  // GEMMs cannot cover, plus (SP) the all-gather of the output gradient
  // before the row-parallel linear's backward (proj, FC2), which has nothing
  // to hide behind. Without it every backward collective is exposed and SP's
  // backward mirrors its forward (the gathered input kept, as Loom's executor does).
  double tp_bytes = T * h * e;  // one activation of the layer's hidden size
  // FP8 with SP on a dense MHA/GQA layer: Transformer Engine casts the local
  // shard and gathers FP8 (half the bytes; the output gradients' gathers
  // too), so those casts cover 1/t of the gathered tensor (QKV and FC1
  // inputs in forward, the proj and FC2 output gradients in backward);
  // reduce-scatters stay 16-bit.
  const bool fp8_gathers = sh.sp && sh.tp_group.ranks > 1 && gemm.fp8_casts > 0 && !m.mla.enabled && !moe_layer;
  if (fp8_gathers) {
    gemm.fp8_inputs -= 2 * T * h * (1 - 1 / t);
    gemm.fp8_output_grads -= 2 * T * h * (1 - 1 / t);
  }
  const double ag_bytes = fp8_gathers ? tp_bytes / 2 : tp_bytes;
  TpLayerComm tp;
  if (sh.tp_group.ranks > 1) {
    const double windows[2] = {attn_column_s, mlp_column_s};
    const double rows[2] = {attn_row_s, mlp_row_s};
    tp = tp_layer_comm(hw, opt, sh, ag_bytes, tp_bytes, windows, rows, &c.tp_bytes);
  }
  c.tp_calls = tp.calls;
  c.fwd_tp_s = tp.fwd_exposed;
  c.bwd_tp_s = tp.bwd_exposed;
  c.tp_comm_total_s = tp.fwd_total + tp.bwd_total;
  // Gathered FP8 shards share one scale per tensor: with current scaling the
  // TP ranks all-reduce each gathered tensor's amax before casting (Transformer
  // Engine's Float8CurrentScalingQuantizer with_amax_reduction over the TP
  // group, set for sequence-parallel column-parallel inputs and row-parallel
  // output gradients, te/pytorch/module/linear.py set_quantizer_amax_reduction_group):
  // two in forward (QKV and FC1 inputs) and two in backward (proj and FC2
  // output gradients), 4 bytes each, latency-bound and on the compute
  // stream's path (the cast waits for them).
  if (fp8_gathers && opt.fp8_scaling == Fp8Scaling::kCurrent) {
    const double amax = collective_cost(hw, Collective::kAllReduce, sh.tp_group, 4).time_s;
    c.fwd_tp_s += 2 * amax;
    c.bwd_tp_s += 2 * amax;
    c.tp_calls += 4;
    c.tp_comm_total_s += 4 * amax;
  }
  // The collectives hidden behind GEMMs slow those GEMMs (the SMs they hold).
  const double contention = comm_contention_fraction(hw);
  double fwd_compute = gemm.fwd_s + core_fwd_s + elem_fwd_s + gemm.cast_s(gemm.fp8_inputs) + tp.fwd_sm_s;
  double bwd_compute = gemm.bwd_s + core_bwd_s + elem_bwd_s + gemm.cast_s(gemm.fp8_output_grads) + tp.bwd_sm_s;
  if (opt.ep_comm_overlap && c.ep_calls > 0) {
    // A forward and a backward micro-batch's layer run together, each one's
    // all-to-alls behind the other's compute, in three windows one after the
    // other (Megatron-core's --overlap-moe-expert-parallel-comm,
    // models/common/model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run;
    // DeepSeek-V3's DualPipe pairs them alike, report Figure 4):
    //   comm: combine_bwd   | dispatch_fwd -> dispatch_bwd | combine_fwd
    //   comp: attention_fwd | mlp_bwd -> mlp_fwd           | attention_bwd
    // (attention = the pre-dispatch part: the attention block, norms, router
    // and permutation; mlp = the experts). In the middle window mlp_fwd waits
    // for dispatch_fwd and dispatch_bwd for mlp_bwd. The pair exposes what
    // its windows take beyond its compute, shared in proportion; the hidden
    // part slows that compute by the share of SMs the dispatcher's kernels
    // hold (SimOptions::moe_dispatch_sms; NCCL's channels by default).
    const double attn_gemm_fwd = attn_column_s + attn_row_s;
    const double attn_gemm_bwd = gemm.fwd_s > 0 ? attn_gemm_fwd * gemm.bwd_s / gemm.fwd_s : 0;
    const double a_f = std::min(fwd_compute, attn_gemm_fwd + core_fwd_s + elem_fwd_s), m_f = fwd_compute - a_f;
    const double a_b = std::min(bwd_compute, attn_gemm_bwd + core_bwd_s + elem_bwd_s), m_b = bwd_compute - a_b;
    const double d_f = dispatch.time_s, c_f = combine.time_s, d_b = combine.time_s, c_b = combine.time_s;
    const double comm = c.fwd_ep_s + c.bwd_ep_s, compute = fwd_compute + bwd_compute;
    const double pair = std::max(c_b, a_f) + std::max(m_b, d_f) + std::max(m_f, d_b) + std::max(c_f, a_b);
    const double exposed = std::clamp(pair - compute, 0.0, comm), hidden = comm - exposed;
    c.fwd_ep_s = exposed * fwd_compute / compute;
    c.bwd_ep_s = exposed - c.fwd_ep_s;
    const double ep_contention = ep_comm_contention_fraction(hw, opt);
    fwd_compute += hidden * ep_contention * fwd_compute / compute;
    bwd_compute += hidden * ep_contention * bwd_compute / compute;
  }
  // --- context parallelism: the K/V exchange (sim/cp_exchange.h) --------------
  // The forward's share of the CP traffic: a recompute that re-runs the
  // attention core exchanges it again.
  LinkBytes cp_fwd_bytes;
  int cp_fwd_calls = 0;
  double cp_fwd_total_s = 0;
  if (cp > 1) {
    const CpExchangeCost x = cp_exchange_cost(hw, opt, sh.cp_comm, sh.cp_group,
                                              CpTensors{T, a / t, kv_heads / t, qk_dim, v_dim, e}, core_fwd_s, core_bwd_s);
    c.fwd_cp_s = x.fwd_exposed_s;
    c.bwd_cp_s = x.bwd_exposed_s;
    c.cp_bytes.add(x.bytes);
    c.cp_calls = x.calls;
    c.cp_comm_total_s = x.total_s;
    cp_fwd_bytes = x.fwd_bytes;
    cp_fwd_calls = x.fwd_calls;
    cp_fwd_total_s = x.fwd_total_s;
    if (x.fwd_copy_kernels > 0) fwd_compute += mem_time_s(hw, opt, x.fwd_copy_bytes, x.fwd_copy_kernels);
    if (x.bwd_copy_kernels > 0) bwd_compute += mem_time_s(hw, opt, x.bwd_copy_bytes, x.bwd_copy_kernels);
    fwd_compute += x.fwd_hidden_s * contention;
    bwd_compute += x.bwd_hidden_s * contention;
  }
  c.fwd_s = fwd_compute + c.fwd_tp_s + c.fwd_ep_s + c.fwd_cp_s;
  c.bwd_s = bwd_compute + c.bwd_tp_s + c.bwd_ep_s + c.bwd_cp_s;
  c.wgrad_s = gemm.bwd_s / 2;
  c.weight_cast_s = gemm.cast_s(gemm.fp8_weights);
  c.fwd_flops = gemm.fwd_flops + core_flops;
  c.bwd_flops = 2 * gemm.fwd_flops + core_flops * core_bwd_factor;

  // --- recompute ---------------------------------------------------------------
  const bool op_ac = sh.recompute == Recompute::kSelective && every_other_matmul(opt, p, moe_layer, m.mla.enabled);
  const unsigned modules = sh.recompute == Recompute::kSelective ? sh.recompute_modules : 0u;
  const bool core_rerun = sh.recompute == Recompute::kFull || (modules & kRecomputeCoreAttn);
  if (cp > 1 && core_rerun && !op_ac) {  // the recomputed forward's exchanges again
    c.cp_bytes.add(cp_fwd_bytes);
    c.cp_calls += cp_fwd_calls;
    c.cp_comm_total_s += cp_fwd_total_s;
  }
  if (sh.recompute == Recompute::kFull) {
    c.recompute_s = c.fwd_s;
    c.recompute_cp_s = c.fwd_cp_s;
    c.recompute_tp_s = c.fwd_tp_s;
    c.recompute_flops = c.fwd_flops;
    if (sh.tp_group.ranks > 1) {
      LinkBytes fwd_only;
      if (sh.sp) {
        collective_time(hw, Collective::kAllGather, sh.tp_group, ag_bytes, &fwd_only, 2);
        collective_time(hw, Collective::kReduceScatter, sh.tp_group, tp_bytes, &fwd_only, 2);
      } else {
        collective_time(hw, Collective::kAllReduce, sh.tp_group, tp_bytes, &fwd_only, 2);
      }
      c.tp_bytes.add(fwd_only);
      c.tp_calls += sh.sp ? 4 : 2;  // the forward's collectives again
      c.tp_comm_total_s += tp.fwd_total;
    }
    if (moe_layer && sh.ep_group.ranks > 1) {
      // recompute_s = fwd_s already holds the dispatch/combine time; count
      // their traffic: the forward's two exchanges again.
      c.ep_bytes.add(dispatch, 1);
      c.ep_bytes.add(combine, 1);
      c.ep_calls += 2;
      c.ep_comm_total_s += c.fwd_ep_s;
    }
  } else if (op_ac) {
    // torchtitan's selective op AC (parallelize_llama.py, _custom_policy):
    // the outputs of aten.mm, the attention kernel and reduce-scatters are
    // kept, except every second mm of the layer, and every other op re-runs.
    // A layer's mms in forward order are q, k, v, o, then gate (w1), up (w3),
    // down (w2), or fc1, fc2: k, o and up (GELU: fc2) re-run, with every
    // memory-bound op and the forward's all-gathers (SP) or all-reduces; the
    // attention core does not.
    const double f = double(m.ffn_hidden);
    const double mms[3][3] = {{T, kv_heads * d / t, h},
                              {T, h, a * v_dim / t},
                              {T, m.mlp == MlpKind::kSwiGlu ? f / t : h, m.mlp == MlpKind::kSwiGlu ? h : f / t}};
    double mm_s = 0, mm_flops = 0;
    for (const auto& g : mms) {
      mm_s += gemm_time_s(hw, p, g[0], g[1], g[2]);
      mm_flops += 2 * g[0] * g[1] * g[2];
    }
    if (sh.tp_group.ranks > 1) {
      LinkBytes fwd_only;
      if (sh.sp) {
        c.recompute_tp_s = collective_time(hw, Collective::kAllGather, sh.tp_group, ag_bytes, &fwd_only, 2);
      } else {
        c.recompute_tp_s = collective_time(hw, Collective::kAllReduce, sh.tp_group, tp_bytes, &fwd_only, 2);
      }
      c.tp_bytes.add(fwd_only);
      c.tp_calls += 2;
      c.tp_comm_total_s += c.recompute_tp_s;
    }
    c.recompute_s = mm_s + elem_fwd_s + c.recompute_tp_s;
    c.recompute_flops = mm_flops;
  } else if (sh.recompute == Recompute::kSelective) {
    if (modules & kRecomputeCoreAttn) {
      // The attention core (Korthikanti et al. 2022; Megatron's default
      // core_attn); under CP with its ring.
      // Megatron's checkpoint wraps TEDotProductAttention.forward, so the
      // bshd copies (SimOptions::qkv_bshd_copies) run again with it.
      c.recompute_s = core_fwd_s + c.fwd_cp_s +
                      (bshd_fwd_kernels > 0 ? mem_time_s(hw, opt, bshd_fwd_bytes, bshd_fwd_kernels) : 0.0);
      c.recompute_cp_s = c.fwd_cp_s;
      c.recompute_flops = core_flops;
    }
    // Megatron's other --recompute-modules: each re-runs its forward in the
    // layer's backward (output-discarding checkpoints for layernorm,
    // mla_up_proj and moe_act; a normal checkpoint of the dense MLP).
    double pass_bytes = 0, mm_s = 0, mm_flops = 0;
    int passes = 0;
    if (modules & kRecomputeLayernorm) {
      // The norms that are modules of their own (sim/memory_model.cc): read
      // the input, write the output.
      const int norms = (m.mla.enabled ? 1 : 0) + (moe_layer ? 1 : 0);
      pass_bytes += norms * 2 * T * r * h * e;
      passes += norms;
    }
    if ((modules & kRecomputeMlaUpProj) && m.mla.enabled) {
      const double ql = double(m.mla.q_lora_rank), kvl = double(m.mla.kv_lora_rank);
      const double nope = double(m.mla.qk_nope_head_dim), rope = double(m.mla.qk_rope_head_dim);
      const double ups[2][3] = {{T, a * qk_dim / t, ql}, {T, a * (nope + v_dim) / t, kvl}};
      for (const auto& u : ups) {
        if (u[2] <= 0) continue;  // no q down-projection: q comes from the hidden state, not re-run
        mm_s += gemm_time_s(hw, p, u[0], u[1], u[2]);
        mm_flops += 2 * u[0] * u[1] * u[2];
      }
      pass_bytes += 2 * T * (a / t + 1) * rope * e;  // RoPE on the q heads' and the shared k's rope slices
      passes += 1;
    }
    if ((modules & kRecomputeMoeAct) && moe_layer) {
      pass_bytes += expert_act_elems * (mlp_mats + 1) * e;  // read gate (and up), write the product
      passes += 1;
    }
    if ((modules & kRecomputeMlp) && !moe_layer) {
      // The dense MLP's forward again, its activation and TP collectives
      // included (the checkpoint wraps the whole submodule).
      mm_s += mlp_column_s + mlp_row_s;
      mm_flops += 2 * T * double(m.ffn_hidden) / t * h * (mlp_mats + 1);
      pass_bytes += T * double(m.ffn_hidden) / t * (mlp_mats + 1) * e;
      passes += 1;
      if (sh.tp_group.ranks > 1) {
        LinkBytes fwd_only;
        double tp_s = 0;
        if (sh.sp) {
          tp_s += collective_time(hw, Collective::kAllGather, sh.tp_group, ag_bytes, &fwd_only, 1);
          tp_s += collective_time(hw, Collective::kReduceScatter, sh.tp_group, tp_bytes, &fwd_only, 1);
        } else {
          tp_s += collective_time(hw, Collective::kAllReduce, sh.tp_group, tp_bytes, &fwd_only, 1);
        }
        c.tp_bytes.add(fwd_only);
        c.tp_calls += sh.sp ? 2 : 1;
        c.tp_comm_total_s += tp_s;
        c.recompute_tp_s += tp_s;
        c.recompute_s += tp_s;
      }
    }
    if (passes > 0 || mm_s > 0) c.recompute_s += mm_s + mem_time_s(hw, opt, pass_bytes, passes);
    c.recompute_flops += mm_flops;
  }
  return c;
}

}  // namespace loom
