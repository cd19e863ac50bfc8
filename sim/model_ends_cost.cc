// The model's ends and the step's memory passes: the token (and position)
// embedding, the head (final norm, logits GEMM, loss), the multi-token
// prediction projection, and the optimizer's and the gradients' passes
// (sim/compute_model.h).
#include "sim/compute_model.h"

#include "sim/compute_parts.h"
#include "sim/tp_collectives.h"

#include <algorithm>

namespace loom {

using compute_parts::GemmSum;
using compute_parts::mem_time_s;

PieceCost embedding_cost(const ModelSpec& m, const HwProfile& hw, const SimOptions& opt, Precision p,
                         const ComputeShape& sh) {
  PieceCost c;
  const double T = double(sh.tokens), h = double(m.hidden), e = element_bytes(p);
  // Gather rows (+ positions), write the activations; backward scatter-adds.
  double bytes = 3 * T * h * e;
  c.fwd_s = mem_time_s(hw, opt, bytes, 2);
  double bwd_bytes = 2 * bytes;
  int bwd_kernels = 2;
  // The tables' gradients whole, every micro-batch: PyTorch's dense embedding
  // backward writes a zero-filled 16-bit gradient of the local table (the
  // vocabulary's 1/t share; the position table whole), and Megatron-core's
  // hook then adds it into the main gradient (read both, write the main one).
  const double rows = double(m.vocab) / sh.tp + (m.position == PositionKind::kLearned ? double(m.max_position) : 0.0);
  const double tables = m.position == PositionKind::kLearned ? 2 : 1;
  const double grad_e = compute_parts::main_grad_bytes(opt, p);
  if (opt.embedding_dense_grad) {
    bwd_bytes += rows * h * element_bytes(sixteen_bit(p));
    bwd_kernels += int(tables);
  }
  if (opt.grad_hook_add) {
    bwd_bytes += rows * h * (grad_e + element_bytes(sixteen_bit(p)) + grad_e);
    bwd_kernels += int(tables);
  }
  c.bwd_s = mem_time_s(hw, opt, bwd_bytes, bwd_kernels);
  if (sh.tp_group.ranks > 1) {
    // Vocab-parallel embedding: partial rows summed over TP (reduce-scatter with SP).
    Collective coll = sh.sp ? Collective::kReduceScatter : Collective::kAllReduce;
    double t_comm = collective_time(hw, coll, sh.tp_group, T * h * e, &c.tp_bytes, 1);
    c.fwd_tp_s = t_comm;
    c.fwd_s += t_comm;
    c.tp_calls = 1;
    c.tp_comm_total_s = t_comm;
  }
  // Nothing is recomputed: under full recompute the embedding output is the
  // first layer's checkpoint.
  return c;
}

PieceCost head_cost(const ModelSpec& m, const HwProfile& hw, const SimOptions& opt, Precision p,
                    const ComputeShape& sh) {
  PieceCost c;
  const double T = double(sh.tokens), t = sh.tp, h = double(m.hidden), e = element_bytes(p);
  const double r = sh.sp ? 1.0 / t : 1.0;
  const double V = double(m.vocab);
  GemmSum gemm{hw, p, opt};
  const GemmEfficiencyTable& head_table = hw.accel.head_gemm_efficiency;
  if (head_table.flops.empty() || V / t < double(AcceleratorSpec::kHeadGemmMinVocab)) {
    gemm.weight(T, V / t, h, 1, false);  // the output layer stays 16-bit under FP8
  } else {
    // Measured on the head's own shapes (`loom calibrate`): the mean rate of
    // its three GEMMs, split between the passes by its measured forward share.
    gemm.measured(head_table, hw.accel.peak_flops(sixteen_bit(p)), T, V / t, h);
  }
  // Final norm; cross-entropy over the local vocab slice: the passes over
  // the logits of the stack's implementation (SimOptions::cross_entropy).
  double norm_bytes = 2 * T * h * e * r;
  const CrossEntropyBytes ce = cross_entropy_bytes(opt.cross_entropy, e);
  double ce_fwd_bytes = T * (V / t) * ce.forward;
  double ce_bwd_bytes = T * (V / t) * ce.backward;
  double comm = 0, bwd_comm = 0, bwd_exposed = 0;
  if (sh.tp_group.ranks > 1) {
    // Max and sum-exp all-reduces of the vocab-parallel loss (fp32 per token),
    // and the gather of the final norm's output under SP.
    comm += collective_time(hw, Collective::kAllReduce, sh.tp_group, T * 4, &c.tp_bytes, 3);
    if (sh.sp) comm += collective_time(hw, Collective::kAllGather, sh.tp_group, T * h * e, &c.tp_bytes, 1);
    // Backward: the head is column-parallel over the vocabulary, so each rank
    // holds a partial gradient of its (replicated) input: all-reduced, with SP
    // reduce-scattered; behind the weight gradient with tp_async_backward.
    bwd_comm = collective_time(hw, sh.sp ? Collective::kReduceScatter : Collective::kAllReduce, sh.tp_group,
                               T * h * e, &c.tp_bytes, 1);
    bwd_exposed = opt.tp_async_backward ? std::max(0.0, bwd_comm - gemm.bwd_s / 2) : bwd_comm;  // the wgrad's time
    c.tp_calls = sh.sp ? 5 : 4;
  }
  c.fwd_tp_s = comm;
  c.bwd_tp_s = bwd_exposed;
  c.tp_comm_total_s = comm + bwd_comm;
  // A profile measured by `loom calibrate` times the executor's loss kernels
  // per logit. That executor writes the logits' gradient in its forward pass
  // (exec/model/chunk.cc: the logits are not needed again), so both parts
  // are forward time there; otherwise the loss is memory traffic, the
  // gradient in the backward.
  const double logits = T * (V / t);
  double ce_fwd_s = mem_time_s(hw, opt, ce_fwd_bytes, ce.forward_kernels),
         ce_bwd_s = mem_time_s(hw, opt, ce_bwd_bytes, ce.backward_kernels);
  if (hw.accel.xent_fwd_ns_per_logit > 0) {
    ce_fwd_s = logits * (hw.accel.xent_fwd_ns_per_logit + hw.accel.xent_bwd_ns_per_logit) * 1e-9;
    ce_bwd_s = 0;
  }
  // Loom's executor's fused head runs the gradient GEMMs in its forward
  // (core/executor_head.h); the input gradient's TP reduction stays in the
  // backward, with no weight-gradient GEMM left there to hide behind.
  double head_gemm_fwd = gemm.fwd_s, head_gemm_bwd = gemm.bwd_s;
  if (sh.head_grad_in_forward) {
    head_gemm_fwd += head_gemm_bwd;
    head_gemm_bwd = 0;
    bwd_exposed = bwd_comm;
  }
  c.bwd_tp_s = bwd_exposed;
  c.fwd_s = head_gemm_fwd + mem_time_s(hw, opt, norm_bytes, 2) + ce_fwd_s + comm;
  // (The final norm's weight, and bias, through Megatron-core's main-gradient hook.)
  const int norm_hook = opt.grad_hook_add ? (m.norm == NormKind::kLayerNorm ? 2 : 1) : 0;
  // (The final norm's backward: 3 passes of its input for a fused stack, as a layer's.)
  const double norm_bwd_bytes = opt.fused_layer_backward ? 1.5 * norm_bytes : 2 * norm_bytes;
  // (The head's weight gradient added into the main gradient by its GEMM:
  // SimOptions::wgrad_gemm_accumulate.)
  const double head_accumulate = compute_parts::wgrad_accumulate_bytes(hw, opt, p, gemm.weight_elems);
  c.bwd_s = head_gemm_bwd + mem_time_s(hw, opt, norm_bwd_bytes + head_accumulate, 2 + norm_hook) + ce_bwd_s +
            bwd_exposed +
            (bwd_comm - bwd_exposed) * comm_contention_fraction(hw);
  // (Loom's executor leaves the head's weight gradient in its backward.)
  c.wgrad_s = opt.for_loom_executor() ? 0 : head_gemm_bwd / 2;
  c.fwd_flops = gemm.fwd_flops;
  c.bwd_flops = 2 * gemm.fwd_flops;
  return c;
}

PieceCost mtp_projection_cost(const ModelSpec& m, const HwProfile& hw, const SimOptions& opt, Precision p,
                              const ComputeShape& sh) {
  PieceCost c;
  const double T = double(sh.tokens), t = sh.tp, h = double(m.hidden), e = element_bytes(p);
  const double r = sh.sp ? 1.0 / t : 1.0;
  GemmSum gemm{hw, p, opt};
  gemm.weight(T, h / t, 2 * h);  // the projection of [norm(h); norm(emb)] (2h) back to h
  // The next token's embedding lookup, the two RMSNorms and the concatenation.
  const double bytes = T * h * e * r * (1 + 2 * 2 + 2 * 2);
  c.fwd_s = gemm.fwd_s + mem_time_s(hw, opt, bytes, 4) + gemm.cast_s(gemm.fp8_inputs);
  const double accumulate = compute_parts::wgrad_accumulate_bytes(hw, opt, p, gemm.weight_elems);
  c.bwd_s = gemm.bwd_s + mem_time_s(hw, opt, 2 * bytes + accumulate, 4) + gemm.cast_s(gemm.fp8_output_grads);
  c.wgrad_s = gemm.bwd_s / 2;
  c.weight_cast_s = gemm.cast_s(gemm.fp8_weights);
  c.fwd_flops = gemm.fwd_flops;
  c.bwd_flops = 2 * gemm.fwd_flops;
  if (sh.recompute == Recompute::kFull) {
    c.recompute_s = c.fwd_s;
    c.recompute_flops = c.fwd_flops;
  }
  return c;
}

double memory_pass_time_s(const HwProfile& hw, double bytes) {
  const double eff = hw.accel.memory_bw_efficiency > 0 ? hw.accel.memory_bw_efficiency : 1.0;
  return bytes / (hw.accel.memory_bw_bytes_per_s * eff);
}

double discard_time_s(const HwProfile& hw, const SimOptions& opt, double bytes) {
  if (bytes <= 0) return 0;
  const double t = hw.accel.discard_bytes_per_s > 0 ? bytes / hw.accel.discard_bytes_per_s : memory_pass_time_s(hw, bytes);
  return t + opt.kernel_overhead_s;
}

double optimizer_time_s(const HwProfile& hw, const SimOptions& opt, Precision p, double local_params) {
  // AdamW: read+write the master weights, m and v (24 B in fp32; fewer with
  // bf16 moments or a 16-bit remainder, SimOptions::optimizer_*_bytes), read
  // the gradient, write the 16-bit weights; one more gradient read for the norm.
  const double grad_bytes = compute_parts::main_grad_bytes(opt, p);
  const bool fp32_states = opt.for_loom_executor();
  const double moments = 2 * (fp32_states ? 4 : opt.optimizer_moment_bytes);
  const double master = p == Precision::kFp32 || fp32_states ? 4 : opt.optimizer_master_bytes;
  double bytes_per_param = 2 * (master + moments) + 2 * grad_bytes + (p == Precision::kFp32 ? 0 : 2);
  const double eff = hw.accel.optimizer_bw_efficiency > 0 ? hw.accel.optimizer_bw_efficiency
                                                          : hw.accel.memory_bw_efficiency;
  return local_params * bytes_per_param / (hw.accel.memory_bw_bytes_per_s * eff) + 4 * opt.kernel_overhead_s;
}

}  // namespace loom
