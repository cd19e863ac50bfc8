// CPU reference kernels of the transformer, forward and backward, fp32.
//
// Every function works on contiguous row-major float arrays whose shapes are
// given in the comments with these letters:
//   N  rows (tokens: B * T), B micro-batch (sequences per micro-batch), T sequence length,
//   C  channels (hidden), F  MLP intermediate, V  (local) vocabulary,
//   Hq query heads, Hk key/value heads (GQA: Hq % Hk == 0), D head dim.
// Backward functions ACCUMULATE into parameter gradients (dw += ...) and
// OVERWRITE input gradients (dx = ...) unless stated otherwise, so gradient
// accumulation over micro-batches is free and activations never alias.
// These kernels are the numerical reference for every other backend (the
// CUDA backend is tested against them). Multi-threading: GEMMs use Eigen's
// thread pool; elementwise loops are OpenMP-parallel when built with OpenMP.
// Thread-safety: no shared state; callers own all buffers.
#pragma once

#include <cstdint>

namespace loom::cpu {

// C(M,N) = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T.
// A is (M,K) or, transposed, stored (K,M); B is (K,N) or stored (N,K).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C);
// Number of threads the GEMMs (Eigen's pool) and the OpenMP loops of these
// kernels use; 0 = hardware concurrency. Eigen's count is process-wide; the
// OpenMP count (omp_set_num_threads) is the calling thread's, so call this
// from the thread that runs the kernels.
void set_num_threads(int threads);

// y(N,C) = LayerNorm(x) * w + b; saves mean(N), rstd(N) for backward.
void layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                       int64_t N, int64_t C, float eps);
void layernorm_backward(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                        float* dx, float* dw, float* db, int64_t N, int64_t C);
// y = x * rsqrt(mean(x^2) + eps) * w; saves rstd(N).
void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t C, float eps);
void rmsnorm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                      int64_t N, int64_t C);

// GELU, tanh approximation (GPT-2): y(n) = gelu(x(n)).
void gelu_forward(const float* x, float* y, int64_t n);
void gelu_backward(const float* dy, const float* x, float* dx, int64_t n);
// SwiGLU: y(N,F) = silu(gate) * up.
void swiglu_forward(const float* gate, const float* up, float* y, int64_t n);
void swiglu_backward(const float* dy, const float* gate, const float* up, float* dgate, float* dup, int64_t n);

// Rotary embedding in place on x(B,T,H,D) (HF/Llama "rotate_half" convention:
// pairs (i, i + D/2)), positions t + pos_offset, frequencies theta^(-2i/D).
void rope_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, float theta, int64_t pos_offset);
// The inverse rotation applied to the gradient, in place.
void rope_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D, float theta, int64_t pos_offset);
// The same rotation with explicit inverse frequencies inv_freq(D/2) (host
// memory): pair i at position p is rotated by p * inv_freq[i] (scaled RoPE,
// e.g. Llama-3.1's rope_scaling).
void rope_freqs_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, const double* inv_freq,
                        int64_t pos_offset);
void rope_freqs_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D, const double* inv_freq,
                         int64_t pos_offset);

// Causal softmax attention with grouped KV heads.
// q(B,T,Hq,D), k(B,T,Hk,D), v(B,T,Hk,D) -> out(B,T,Hq,D); lse(B,Hq,T) saves
// the log-sum-exp of each score row (scale = 1/sqrt(D)) for backward, which
// recomputes the probabilities (no T*T buffer is kept between the calls).
// `causal` false: no mask (a key block wholly in the queries' past).
void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse, int64_t B,
                       int64_t T, int64_t Hq, int64_t Hk, int64_t D, bool causal = true);
// dq, dk, dv are overwritten; out and lse may be those of a larger attention
// this block belongs to (kernel_ops.h AttentionBackward).
void attention_backward(const float* dout, const float* q, const float* k, const float* v, const float* out,
                        const float* lse, float* dq, float* dk, float* dv, int64_t B, int64_t T, int64_t Hq,
                        int64_t Hk, int64_t D, bool causal = true);
// Ring attention's log-sum-exp merge (kernel_ops.h AttentionMerge).
void attention_merge(float* out, float* lse, const float* out_b, const float* lse_b, int64_t B, int64_t T, int64_t H,
                     int64_t D);

// Token embedding over a vocabulary slice [v_begin, v_begin + V): rows of
// out(N,C) for tokens outside the slice are set to zero (vocab-parallel: the
// TP all-reduce sums the slices).
void embedding_forward(const int32_t* tokens, const float* wte, float* out, int64_t N, int64_t C, int64_t v_begin,
                       int64_t V);
void embedding_backward(const int32_t* tokens, const float* dout, float* dwte, int64_t N, int64_t C,
                        int64_t v_begin, int64_t V);

// Vocab-parallel cross-entropy in three passes so a communicator can combine
// the slices between them (Megatron's vocab-parallel loss):
//   1. row_max(N)      = max over the local slice of logits(N,V)
//      (caller all-reduces with MAX)
//   2. row_sumexp(N)   = sum exp(logit - row_max); target_logit(N) = logit of
//      the target when it lies in [v_begin, v_begin+V), else 0
//      (caller all-reduces both with SUM)
//   3. loss(n) = log(row_sumexp) + row_max - target_logit.
void xent_row_max(const float* logits, float* row_max, int64_t N, int64_t V);
void xent_sumexp_and_target(const float* logits, const int32_t* targets, const float* row_max, float* row_sumexp,
                            float* target_logit, int64_t N, int64_t V, int64_t v_begin);
void xent_loss(const float* row_max, const float* row_sumexp, const float* target_logit, float* loss, int64_t N);
// dlogits(N,V) = scale * (softmax - onehot(target)), with the global row_max
// and row_sumexp; scale is usually 1 / (total tokens of the step).
void xent_backward(const float* logits, const int32_t* targets, const float* row_max, const float* row_sumexp,
                   float* dlogits, int64_t N, int64_t V, int64_t v_begin, float scale);

// AdamW with decoupled weight decay (Loshchilov & Hutter), bias-corrected
// moments; `step` counts from 1. Updates param, m, v in place.
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t step, float grad_scale = 1.0f);

// Small helpers.
void add_inplace(float* y, const float* x, int64_t n);            // y += x
void add_bias(float* y, const float* bias, int64_t N, int64_t C);  // y(N,C) += bias(C)
void bias_backward(const float* dy, float* dbias, int64_t N, int64_t C);  // dbias += sum_rows dy
void scale_inplace(float* y, float s, int64_t n);
double sum_squares(const float* x, int64_t n);

}  // namespace loom::cpu
