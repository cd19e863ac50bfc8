// The CPU kernel table: every op forwards to exec/backend/cpu_ops.h, so runs
// through the table are bit-identical to calling cpu:: directly. Not final:
// a test can derive from it to change one aspect (the fp16-emulating table of
// tests/unit/exec/loss_scaling_test.cc rounds GEMM operands).
#pragma once

#include "exec/backend/cpu_ops.h"
#include "exec/backend/kernels.h"

namespace loom::exec {

class CpuKernels : public Kernels {
 public:
  Precision precision() const override { return Precision::kFp32; }
  Status status() override { return Status::ok(); }
  void set_weights(const float*, int64_t) override {}
  void weights_changed(const float*, int64_t) override {}

  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, const float* B,
            float beta, float* C) override {
    cpu::gemm(ta, tb, M, N, K, alpha, A, B, beta, C);
  }
  void layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                         int64_t N, int64_t C, float eps) override {
    cpu::layernorm_forward(x, w, b, y, mean, rstd, N, C, eps);
  }
  void layernorm_backward(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                          float* dx, float* dw, float* db, int64_t N, int64_t C) override {
    cpu::layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, N, C);
  }
  void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t C,
                       float eps) override {
    cpu::rmsnorm_forward(x, w, y, rstd, N, C, eps);
  }
  void rmsnorm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                        int64_t N, int64_t C) override {
    cpu::rmsnorm_backward(dy, x, w, rstd, dx, dw, N, C);
  }
  void gelu_forward(const float* x, float* y, int64_t n) override { cpu::gelu_forward(x, y, n); }
  void gelu_backward(const float* dy, const float* x, float* dx, int64_t n) override {
    cpu::gelu_backward(dy, x, dx, n);
  }
  void swiglu_forward(const float* gate, const float* up, float* y, int64_t n) override {
    cpu::swiglu_forward(gate, up, y, n);
  }
  void swiglu_backward(const float* dy, const float* gate, const float* up, float* dgate, float* dup,
                       int64_t n) override {
    cpu::swiglu_backward(dy, gate, up, dgate, dup, n);
  }
  void rope_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, float theta, int64_t pos) override {
    cpu::rope_forward(x, B, T, H, D, theta, pos);
  }
  void rope_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D, float theta, int64_t pos) override {
    cpu::rope_backward(dx, B, T, H, D, theta, pos);
  }
  void rope_freqs_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, const double* f,
                          int64_t pos) override {
    cpu::rope_freqs_forward(x, B, T, H, D, f, pos);
  }
  void rope_freqs_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D, const double* f,
                           int64_t pos) override {
    cpu::rope_freqs_backward(dx, B, T, H, D, f, pos);
  }
  void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse, int64_t B,
                         int64_t T, int64_t Hq, int64_t Hk, int64_t D) override {
    cpu::attention_forward(q, k, v, out, lse, B, T, Hq, Hk, D);
  }
  void attention_backward(const float* dout, const float* q, const float* k, const float* v, const float* out,
                          const float* lse, float* dq, float* dk, float* dv, int64_t B, int64_t T, int64_t Hq,
                          int64_t Hk, int64_t D) override {
    cpu::attention_backward(dout, q, k, v, out, lse, dq, dk, dv, B, T, Hq, Hk, D);
  }
  void embedding_forward(const int32_t* tokens, const float* wte, float* out, int64_t N, int64_t C,
                         int64_t v_begin, int64_t V) override {
    cpu::embedding_forward(tokens, wte, out, N, C, v_begin, V);
  }
  void embedding_backward(const int32_t* tokens, const float* dout, float* dwte, int64_t N, int64_t C,
                          int64_t v_begin, int64_t V) override {
    cpu::embedding_backward(tokens, dout, dwte, N, C, v_begin, V);
  }
  void add_positions(float* x, const float* wpe, int64_t R, int64_t C, int64_t T, int64_t row0) override {
    for (int64_t r = 0; r < R; ++r) cpu::add_inplace(x + r * C, wpe + ((row0 + r) % T) * C, C);
  }
  void positions_backward(const float* dx, float* dwpe, int64_t R, int64_t C, int64_t T, int64_t row0) override {
    for (int64_t r = 0; r < R; ++r) cpu::add_inplace(dwpe + ((row0 + r) % T) * C, dx + r * C, C);
  }
  void fill_columns(float* x, int64_t R, int64_t ld, int64_t c_begin, int64_t c_end, float value) override {
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = c_begin; c < c_end; ++c) x[r * ld + c] = value;
  }
  void xent_row_max(const float* logits, float* row_max, int64_t N, int64_t V) override {
    cpu::xent_row_max(logits, row_max, N, V);
  }
  void xent_sumexp_and_target(const float* logits, const int32_t* targets, const float* row_max, float* row_sumexp,
                              float* target_logit, int64_t N, int64_t V, int64_t v_begin) override {
    cpu::xent_sumexp_and_target(logits, targets, row_max, row_sumexp, target_logit, N, V, v_begin);
  }
  void xent_loss(const float* row_max, const float* row_sumexp, const float* target_logit, float* loss,
                 int64_t N) override {
    cpu::xent_loss(row_max, row_sumexp, target_logit, loss, N);
  }
  void xent_backward(const float* logits, const int32_t* targets, const float* row_max, const float* row_sumexp,
                     float* dlogits, int64_t N, int64_t V, int64_t v_begin, float scale) override {
    cpu::xent_backward(logits, targets, row_max, row_sumexp, dlogits, N, V, v_begin, scale);
  }
  void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int64_t step) override {
    cpu::adamw_update(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step);
  }
  void add_inplace(float* y, const float* x, int64_t n) override { cpu::add_inplace(y, x, n); }
  void add_bias(float* y, const float* bias, int64_t N, int64_t C) override { cpu::add_bias(y, bias, N, C); }
  void bias_backward(const float* dy, float* dbias, int64_t N, int64_t C) override {
    cpu::bias_backward(dy, dbias, N, C);
  }
  void scale_inplace(float* y, float s, int64_t n) override { cpu::scale_inplace(y, s, n); }
  double sum(const float* x, int64_t n) override {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i];
    return s;
  }
  // bf16, round to nearest even; NaN stays NaN (cpu_kernels.cc).
  void to_16bit(const float* x, uint16_t* y, int64_t n) override;
  void from_16bit(const uint16_t* x, float* y, int64_t n) override;
  void add_sum_squares(const float* x, int64_t n) override { pending_sq_ += cpu::sum_squares(x, n); }
  double take_sum_squares() override {
    double s = pending_sq_;
    pending_sq_ = 0;
    return s;
  }

 private:
  double pending_sq_ = 0;
};

}  // namespace loom::exec
