// ObservedKernels: a kernel table that forwards every call to another table
// unchanged (same arguments, same pointers, same order: results are
// bit-identical) and calls before() / after() around each op with the call's
// description (exec/backend/kernel_call.h). The base of the per-op profiler
// (kernel_profile.h) and of the synchronizing error check
// (kernel_sync_check.h).
//
// precision(), status(), set_weights() and weights_changed() are forwarded
// without hooks. The inner table must outlive this one; the decorator never
// calls it from its destructor.
// Thread-safety: used by one thread at a time, like the table it wraps.
#pragma once

#include <initializer_list>

#include "exec/backend/kernel_call.h"
#include "exec/backend/kernels.h"

namespace loom::exec {

class ObservedKernels : public Kernels {
 public:
  explicit ObservedKernels(Kernels& inner) : inner_(inner) {}

  Kernels& inner() { return inner_; }

  Precision precision() const override { return inner_.precision(); }
  Status status() override { return inner_.status(); }
  void set_weights(const float* params, int64_t n) override { inner_.set_weights(params, n); }
  void weights_changed(const float* begin, int64_t n) override { inner_.weights_changed(begin, n); }

  void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
            const float* B, float beta, float* C) override;
  void layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                         int64_t N, int64_t C, float eps) override;
  void layernorm_backward(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                          float* dx, float* dw, float* db, int64_t N, int64_t C) override;
  void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t C,
                       float eps) override;
  void rmsnorm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                        int64_t N, int64_t C) override;
  void gelu_forward(const float* x, float* y, int64_t n) override;
  void gelu_backward(const float* dy, const float* x, float* dx, int64_t n) override;
  void swiglu_forward(const float* gate, const float* up, float* y, int64_t n) override;
  void swiglu_backward(const float* dy, const float* gate, const float* up, float* dgate, float* dup,
                       int64_t n) override;
  void rope_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, float theta,
                    int64_t pos_offset) override;
  void rope_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D, float theta,
                     int64_t pos_offset) override;
  void rope_freqs_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, const double* inv_freq,
                          int64_t pos_offset) override;
  void rope_freqs_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D, const double* inv_freq,
                           int64_t pos_offset) override;
  void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse, int64_t B,
                         int64_t T, int64_t Hq, int64_t Hk, int64_t D) override;
  void attention_backward(const float* dout, const float* q, const float* k, const float* v, const float* out,
                          const float* lse, float* dq, float* dk, float* dv, int64_t B, int64_t T, int64_t Hq,
                          int64_t Hk, int64_t D) override;
  void embedding_forward(const int32_t* tokens, const float* wte, float* out, int64_t N, int64_t C,
                         int64_t v_begin, int64_t V) override;
  void embedding_backward(const int32_t* tokens, const float* dout, float* dwte, int64_t N, int64_t C,
                          int64_t v_begin, int64_t V) override;
  void add_positions(float* x, const float* wpe, int64_t R, int64_t C, int64_t T, int64_t row0) override;
  void positions_backward(const float* dx, float* dwpe, int64_t R, int64_t C, int64_t T, int64_t row0) override;
  void fill_columns(float* x, int64_t R, int64_t ld, int64_t c_begin, int64_t c_end, float value) override;
  void xent_row_max(const float* logits, float* row_max, int64_t N, int64_t V) override;
  void xent_sumexp_and_target(const float* logits, const int32_t* targets, const float* row_max,
                              float* row_sumexp, float* target_logit, int64_t N, int64_t V,
                              int64_t v_begin) override;
  void xent_loss(const float* row_max, const float* row_sumexp, const float* target_logit, float* loss,
                 int64_t N) override;
  void xent_backward(const float* logits, const int32_t* targets, const float* row_max, const float* row_sumexp,
                     float* dlogits, int64_t N, int64_t V, int64_t v_begin, float scale) override;
  void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int64_t step) override;
  void add_inplace(float* y, const float* x, int64_t n) override;
  void add_bias(float* y, const float* bias, int64_t N, int64_t C) override;
  void bias_backward(const float* dy, float* dbias, int64_t N, int64_t C) override;
  void scale_inplace(float* y, float s, int64_t n) override;
  void to_16bit(const float* x, uint16_t* y, int64_t n) override;
  void from_16bit(const uint16_t* x, float* y, int64_t n) override;
  double sum(const float* x, int64_t n) override;
  void add_sum_squares(const float* x, int64_t n) override;
  double take_sum_squares() override;

 protected:
  // Around every op call (not around the four forwarded without hooks).
  virtual void before(const KernelCall& call) {}
  virtual void after(const KernelCall& call) {}

 private:
  static KernelCall describe(KernelOp op, std::initializer_list<KernelCall::Dim> dims, double flops, double bytes);
  template <typename F>
  void observe(const KernelCall& call, F&& forward) {
    before(call);
    forward();
    after(call);
  }
  // Bytes of one GEMM operand element: 2 when the table rounds operands to 16 bits.
  double gemm_operand_bytes() const;

  Kernels& inner_;
};

}  // namespace loom::exec
