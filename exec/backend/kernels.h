// Kernels: the executor's math, one virtual per op, in the shapes and with the
// accumulate / overwrite rules of exec/backend/cpu_ops.h (read that header for
// the letters N, C, F, V, B, T, Hq, Hk, D). Every ComputeBackend returns one
// (ComputeBackend::kernels()); the model and the runtime call nothing else, so
// the same ModelChunk and Trainer run on the CPU backend (these forward to
// cpu::, bit for bit) and on the CUDA backend (cuda:: on the backend's stream).
//
// Pointers are the backend's memory. Calls are asynchronous on device
// backends: a failed launch is remembered and returned by status() (the first
// failure wins, like CUDA's sticky errors), which the model checks after each
// micro-batch. sum() and take_sum_squares() return host values and so wait for the
// work before them.
//
// Precision: GEMM operands may be rounded to bf16 / fp16 (fp32 accumulate)
// when the backend runs mixed precision; everything else is fp32.
// set_weights() names the flat fp32 parameter buffer, so such a backend keeps
// one 16-bit copy of it instead of casting the weights at every GEMM; after
// weights_changed(begin, n) (an optimizer step, a completed parameter gather)
// the range is cast again when a GEMM first reads it, never earlier, so a
// range another stream is still writing is not read.
// Thread-safety: used by one thread at a time, like the backend.
#pragma once

#include <cstdint>

#include "core/hw_profile.h"  // loom::Precision
#include "core/status.h"

namespace loom::exec {

class Kernels {
 public:
  virtual ~Kernels() = default;
  virtual Precision precision() const = 0;
  // First failure since construction (ok on the CPU backend).
  virtual Status status() = 0;

  virtual void set_weights(const float* params, int64_t n) = 0;
  virtual void weights_changed(const float* begin, int64_t n) = 0;

  virtual void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    const float* B, float beta, float* C) = 0;
  virtual void layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                                 int64_t N, int64_t C, float eps) = 0;
  virtual void layernorm_backward(const float* dy, const float* x, const float* w, const float* mean,
                                  const float* rstd, float* dx, float* dw, float* db, int64_t N, int64_t C) = 0;
  virtual void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t C,
                               float eps) = 0;
  virtual void rmsnorm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                                float* dw, int64_t N, int64_t C) = 0;
  virtual void gelu_forward(const float* x, float* y, int64_t n) = 0;
  virtual void gelu_backward(const float* dy, const float* x, float* dx, int64_t n) = 0;
  virtual void swiglu_forward(const float* gate, const float* up, float* y, int64_t n) = 0;
  virtual void swiglu_backward(const float* dy, const float* gate, const float* up, float* dgate, float* dup,
                               int64_t n) = 0;
  virtual void rope_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, float theta,
                            int64_t pos_offset) = 0;
  virtual void rope_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D, float theta,
                             int64_t pos_offset) = 0;
  // RoPE with explicit per-dimension inverse frequencies (D/2 values in HOST
  // memory, read during the call): scaled RoPE such as Llama-3.1's.
  virtual void rope_freqs_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, const double* inv_freq,
                                  int64_t pos_offset) = 0;
  virtual void rope_freqs_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D, const double* inv_freq,
                                   int64_t pos_offset) = 0;
  virtual void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse, int64_t B,
                                 int64_t T, int64_t Hq, int64_t Hk, int64_t D) = 0;
  virtual void attention_backward(const float* dout, const float* q, const float* k, const float* v,
                                  const float* out, const float* lse, float* dq, float* dk, float* dv, int64_t B,
                                  int64_t T, int64_t Hq, int64_t Hk, int64_t D) = 0;
  virtual void embedding_forward(const int32_t* tokens, const float* wte, float* out, int64_t N, int64_t C,
                                 int64_t v_begin, int64_t V) = 0;
  virtual void embedding_backward(const int32_t* tokens, const float* dout, float* dwte, int64_t N, int64_t C,
                                  int64_t v_begin, int64_t V) = 0;
  // x(R,C) row r += wpe(((row0 + r) % T), :) (learned positions; rows are
  // (batch, time) flattened, row0 the first global row of x under SP).
  virtual void add_positions(float* x, const float* wpe, int64_t R, int64_t C, int64_t T, int64_t row0) = 0;
  // dwpe(t, :) += the sum of dx rows r with (row0 + r) % T == t, rows in order.
  virtual void positions_backward(const float* dx, float* dwpe, int64_t R, int64_t C, int64_t T, int64_t row0) = 0;
  // x(R, ld) columns [c_begin, c_end) = value (masks the padded vocabulary).
  virtual void fill_columns(float* x, int64_t R, int64_t ld, int64_t c_begin, int64_t c_end, float value) = 0;
  virtual void xent_row_max(const float* logits, float* row_max, int64_t N, int64_t V) = 0;
  virtual void xent_sumexp_and_target(const float* logits, const int32_t* targets, const float* row_max,
                                      float* row_sumexp, float* target_logit, int64_t N, int64_t V,
                                      int64_t v_begin) = 0;
  virtual void xent_loss(const float* row_max, const float* row_sumexp, const float* target_logit, float* loss,
                         int64_t N) = 0;
  // May be in place (dlogits == logits).
  virtual void xent_backward(const float* logits, const int32_t* targets, const float* row_max,
                             const float* row_sumexp, float* dlogits, int64_t N, int64_t V, int64_t v_begin,
                             float scale) = 0;
  virtual void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                            float beta2, float eps, float weight_decay, int64_t step) = 0;
  virtual void add_inplace(float* y, const float* x, int64_t n) = 0;
  virtual void add_bias(float* y, const float* bias, int64_t N, int64_t C) = 0;
  virtual void bias_backward(const float* dy, float* dbias, int64_t N, int64_t C) = 0;
  virtual void scale_inplace(float* y, float s, int64_t n) = 0;
  // Saved activations in the backend's 16-bit format (bf16 or fp16 by
  // precision(); bf16 on the fp32 CPU table), round to nearest even.
  virtual void to_16bit(const float* x, uint16_t* y, int64_t n) = 0;
  virtual void from_16bit(const uint16_t* x, float* y, int64_t n) = 0;
  // Host results (wait for the work queued before them).
  virtual double sum(const float* x, int64_t n) = 0;  // in double, rows in order on the CPU
  // The gradient norm's many pieces without a wait per piece: queue each
  // sum of squares, then take their total (added in call order) at once.
  virtual void add_sum_squares(const float* x, int64_t n) = 0;
  virtual double take_sum_squares() = 0;
};

}  // namespace loom::exec
