// The CPU kernel table: every op forwards to exec/backend/cpu_ops.h, so runs
// through the table are bit-identical to calling cpu:: directly (on the same
// addresses: Eigen peels an unaligned head of an elementwise exp() into scalar
// code, so results are the same bit for bit at the same 64-byte alignment,
// which the CPU backend's allocations have). Not final:
// a test can derive from it to change one aspect (the fp16-emulating table of
// tests/unit/exec/loss_scaling_test.cc rounds GEMM operands).
#pragma once

#include <algorithm>

#include "exec/backend/cpu_ops.h"
#include "exec/backend/kernels.h"

namespace loom::exec {

class CpuKernels : public Kernels {
 protected:
  // A Gemm with A16 / B16: those operands widened by from_16bit (this
  // table's 16-bit format), then gemm() on the fp32 copies.
  void gemm_16bit_operands(const Gemm& a);
  // x without a residual; else sum = x + residual (add_inplace's adds), returned.
  static const float* residual_sum(const float* x, const float* residual, float* sum, int64_t n) {
    if (!residual) return x;
    if (sum != x) std::copy(x, x + n, sum);
    cpu::add_inplace(sum, residual, n);
    return sum;
  }

 public:
  Precision precision() const override { return Precision::kFp32; }
  Status status() override { return Status::ok(); }
  void set_weights(const float*, int64_t) override {}
  void weights_changed(const float*, int64_t) override {}

  void gemm(const Gemm& a) override {
    if (a.A16 || a.B16) return gemm_16bit_operands(a);
    LOOM_CHECK(!a.dgelu_pre || (a.beta == 0.f && !a.bias && !a.gelu_out),
               "Gemm::dgelu_pre needs beta 0 and neither bias nor gelu_out (kernel_ops.h)");
    LOOM_CHECK(!a.dbias || a.dgelu_pre, "Gemm::dbias needs dgelu_pre (kernel_ops.h)");
    cpu::gemm(a.trans_a, a.trans_b, a.M, a.N, a.K, a.alpha, a.A, a.B, a.beta, a.C);
    // The epilogue: the ops it replaces, in order (their bits).
    if (a.bias) cpu::add_bias(a.C, a.bias, a.M, a.N);
    if (a.gelu_out) cpu::gelu_forward(a.C, a.gelu_out, a.M * a.N);
    if (a.dgelu_pre) cpu::gelu_backward(a.C, a.dgelu_pre, a.C, a.M * a.N);  // elementwise: in place
    if (a.dbias) cpu::bias_backward(a.C, a.dbias, a.M, a.N);
  }
  void grouped_gemm(const GroupedGemm& a) override {
    for (int64_t g = 0; g < a.count; ++g) {
      const GemmGroup& x = a.groups[g];
      cpu::gemm(a.trans_a, a.trans_b, x.M, x.N, x.K, a.alpha, x.A, x.B, a.beta, x.C);
    }
  }
  // The fused residual forms: the two ops the fusion replaces, in order.
  void layernorm_forward(const LayernormForward& a) override {
    cpu::layernorm_forward(residual_sum(a.x, a.residual, a.sum, a.N * a.C), a.w, a.b, a.y, a.mean, a.rstd, a.N, a.C,
                           a.eps);
  }
  void layernorm_backward(const LayernormBackward& a) override {
    cpu::layernorm_backward(a.dy, a.x, a.w, a.mean, a.rstd, a.dx, a.dw, a.db, a.N, a.C);
    if (a.dx_add) cpu::add_inplace(a.dx, a.dx_add, a.N * a.C);
  }
  void rmsnorm_forward(const RmsnormForward& a) override {
    cpu::rmsnorm_forward(residual_sum(a.x, a.residual, a.sum, a.N * a.C), a.w, a.y, a.rstd, a.N, a.C, a.eps);
  }
  void rmsnorm_backward(const RmsnormBackward& a) override {
    cpu::rmsnorm_backward(a.dy, a.x, a.w, a.rstd, a.dx, a.dw, a.N, a.C);
    if (a.dx_add) cpu::add_inplace(a.dx, a.dx_add, a.N * a.C);
  }
  void gelu_forward(const GeluForward& a) override { cpu::gelu_forward(a.x, a.y, a.n); }
  void gelu_backward(const GeluBackward& a) override { cpu::gelu_backward(a.dy, a.x, a.dx, a.n); }
  void swiglu_forward(const SwigluForward& a) override { cpu::swiglu_forward(a.gate, a.up, a.y, a.n); }
  void swiglu_backward(const SwigluBackward& a) override {
    cpu::swiglu_backward(a.dy, a.gate, a.up, a.dgate, a.dup, a.n);
  }
  void rope_forward(const RopeForward& a) override {
    cpu::rope_forward(a.x, a.B, a.T, a.H, a.D, a.theta, a.pos_offset);
  }
  void rope_backward(const RopeBackward& a) override {
    cpu::rope_backward(a.dx, a.B, a.T, a.H, a.D, a.theta, a.pos_offset);
  }
  void rope_freqs_forward(const RopeFreqsForward& a) override {
    cpu::rope_freqs_forward(a.x, a.B, a.T, a.H, a.D, a.inv_freq, a.pos_offset);
  }
  void rope_freqs_backward(const RopeFreqsBackward& a) override {
    cpu::rope_freqs_backward(a.dx, a.B, a.T, a.H, a.D, a.inv_freq, a.pos_offset);
  }
  void attention_forward(const AttentionForward& a) override {
    cpu::attention_forward(a.q, a.k, a.v, a.out, a.lse, a.B, a.T, a.Hq, a.Hk, a.D, a.causal);
  }
  void attention_backward(const AttentionBackward& a) override {
    cpu::attention_backward(a.dout, a.q, a.k, a.v, a.out, a.lse, a.dq, a.dk, a.dv, a.B, a.T, a.Hq, a.Hk, a.D,
                            a.causal);
  }
  void attention_merge(const AttentionMerge& a) override {
    cpu::attention_merge(a.out, a.lse, a.out_b, a.lse_b, a.B, a.T, a.H, a.D);
  }
  void embedding_forward(const EmbeddingForward& a) override {
    cpu::embedding_forward(a.tokens, a.wte, a.out, a.N, a.C, a.v_begin, a.V);
  }
  void embedding_backward(const EmbeddingBackward& a) override {
    cpu::embedding_backward(a.tokens, a.dout, a.dwte, a.N, a.C, a.v_begin, a.V);
  }
  void add_positions(const AddPositions& a) override {
    for (int64_t r = 0; r < a.R; ++r) cpu::add_inplace(a.x + r * a.C, a.wpe + ((a.row0 + r) % a.T) * a.C, a.C);
  }
  void positions_backward(const PositionsBackward& a) override {
    for (int64_t r = 0; r < a.R; ++r) cpu::add_inplace(a.dwpe + ((a.row0 + r) % a.T) * a.C, a.dx + r * a.C, a.C);
  }
  void fill_columns(const FillColumns& a) override {
    for (int64_t r = 0; r < a.R; ++r)
      for (int64_t c = a.c_begin; c < a.c_end; ++c) a.x[r * a.ld + c] = a.value;
  }
  void xent_row_max(const XentRowMax& a) override { cpu::xent_row_max(a.logits, a.row_max, a.N, a.V); }
  void xent_sumexp_and_target(const XentSumexpAndTarget& a) override {
    cpu::xent_sumexp_and_target(a.logits, a.targets, a.row_max, a.row_sumexp, a.target_logit, a.N, a.V, a.v_begin);
  }
  void xent_loss(const XentLoss& a) override {
    cpu::xent_loss(a.row_max, a.row_sumexp, a.target_logit, a.loss, a.N);
  }
  void xent_backward(const XentBackward& a) override {
    cpu::xent_backward(a.logits, a.targets, a.row_max, a.row_sumexp, a.dlogits, a.N, a.V, a.v_begin, a.scale);
  }
  void adamw_update(const AdamwUpdate& a) override {
    cpu::adamw_update(a.param, a.grad, a.m, a.v, a.n, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.step,
                      a.grad_scale);
  }
  void adamw_multi(const AdamwMulti& a) override {
    for (int64_t i = 0; i < a.count; ++i) {
      const int64_t* e = a.table + 4 * i;  // param offset, state offset, n, decay
      cpu::adamw_update(a.param + e[0], a.grad + e[1], a.m + e[1], a.v + e[1], e[2], a.lr, a.beta1, a.beta2, a.eps,
                        e[3] ? a.weight_decay : 0.f, a.step, a.grad_scale);
    }
  }
  void add_inplace(const AddInplace& a) override {
    if (a.base && a.base != a.y) std::copy(a.base, a.base + a.n, a.y);
    cpu::add_inplace(a.y, a.x, a.n);
  }
  void add_bias(const AddBias& a) override { cpu::add_bias(a.y, a.bias, a.N, a.C); }
  void bias_backward(const BiasBackward& a) override { cpu::bias_backward(a.dy, a.dbias, a.N, a.C); }
  void scale_inplace(const ScaleInplace& a) override { cpu::scale_inplace(a.y, a.s, a.n); }
  // bf16, round to nearest even; NaN stays NaN (cpu_kernels.cc).
  void to_16bit(const To16bit& a) override;
  void from_16bit(const From16bit& a) override;
  void grad_pack(const GradPack& a) override;
  void grad_unpack(const GradUnpack& a) override;
  // cpu_moe.cc
  void moe_router_forward(const MoeRouterForward& a) override;
  void moe_router_backward(const MoeRouterBackward& a) override;
  void moe_gather(const MoeGather& a) override;
  void moe_unpermute(const MoeUnpermute& a) override;
  void moe_unpermute_backward(const MoeUnpermuteBackward& a) override;
  void sigmoid_gate_forward(const SigmoidGateForward& a) override;
  void sigmoid_gate_backward(const SigmoidGateBackward& a) override;
  double sum(const Sum& a) override {
    double s = 0;
    for (int64_t i = 0; i < a.n; ++i) s += a.x[i];
    return s;
  }
  void accumulate_sum(const AccumulateSum& a) override { *a.acc += sum({a.x, a.n}) * a.scale; }
  void add_sum_squares(const AddSumSquares& a) override { pending_sq_ += cpu::sum_squares(a.x, a.n); }
  void add_sum_squares_multi(const AddSumSquaresMulti& a) override {
    for (int64_t i = 0; i < a.count; ++i) pending_sq_ += cpu::sum_squares(a.x + a.table[2 * i], a.table[2 * i + 1]);
  }
  double take_sum_squares(const TakeSumSquares&) override {
    double s = pending_sq_;
    pending_sq_ = 0;
    return s;
  }

 private:
  double pending_sq_ = 0;
};

}  // namespace loom::exec
