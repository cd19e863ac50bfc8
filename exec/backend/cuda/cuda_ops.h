// CUDA kernels of the transformer, the GPU counterparts of
// exec/backend/cpu_ops.h (same shapes, same accumulate / overwrite rules),
// one op per file. Pointers are device memory; every call is enqueued on
// `stream` and returns the launch status (synchronize to see completion).
// Tested against the CPU reference on random inputs (tests/cuda/).
//
// Precision: fp32 kernels here, bf16 GEMMs (bf16 in, fp32 accumulate) in
// cuda_gemm.cc.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>
#include <string>

#include "core/status.h"
#include "exec/backend/grad_format.h"

struct cublasContext;

namespace loom::cuda {

// The element type of GEMM operands: fp32, or 16-bit (stored as uint16).
enum class GemmInput { kF32, kBf16, kF16 };

// Devices the runtime sees; 0 without a driver or GPU (never fails).
int device_count();
// "NVIDIA H200 (sm_90, 141 GB)"; empty when `device` does not exist.
std::string device_description(int device);
// "CUDA runtime 13.0, driver supports CUDA 13.0, cuBLAS 13.1.0" (the
// libraries this process loaded), for `loom version` and start-up lines.
std::string runtime_versions();
// Free and total bytes of `device` (cudaMemGetInfo on it); false without one.
bool device_memory(int device, size_t* free_bytes, size_t* total_bytes);
// Compute capability as 10 * major + minor (90 = sm_90) and L2 cache bytes;
// 0 when `device` does not exist.
int device_sm_arch(int device);
size_t device_l2_bytes(int device);

// y(N,C) = LayerNorm(x) * w + b; saves mean(N), rstd(N). With `residual`:
// the row is x + residual, written to `sum` (the fused residual add,
// kernel_ops.h LayernormForward).
Status layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                         int64_t N, int64_t C, float eps, cudaStream_t stream, const float* residual = nullptr,
                         float* sum = nullptr);
// dx = ... (+ dx_add), dw += ..., db += ... (as cpu::layernorm_backward).
Status layernorm_backward(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                          float* dx, float* dw, float* db, int64_t N, int64_t C, cudaStream_t stream,
                          const float* dx_add = nullptr);
// y = x * rsqrt(mean(x^2) + eps) * w; saves rstd(N). Backward: dx = ..., dw += ...
// residual / sum and dx_add as for LayerNorm.
Status rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t C, float eps,
                       cudaStream_t stream, const float* residual = nullptr, float* sum = nullptr);
Status rmsnorm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                        int64_t N, int64_t C, cudaStream_t stream, const float* dx_add = nullptr);
// SwiGLU: y = silu(gate) * up; backward writes dgate, dup.
Status swiglu_forward(const float* gate, const float* up, float* y, int64_t n, cudaStream_t stream);
Status swiglu_backward(const float* dy, const float* gate, const float* up, float* dgate, float* dup, int64_t n,
                       cudaStream_t stream);
// Rotary embedding in place on x(B,T,H,D); the backward rotates back.
Status rope_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, float theta, int64_t pos_offset,
                    cudaStream_t stream);
Status rope_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D, float theta, int64_t pos_offset,
                     cudaStream_t stream);
// The same with explicit inverse frequencies inv_freq(D/2) in HOST memory
// (passed to the kernel by value: D <= 2 * kRopeMaxHalf, kUnsupported beyond).
inline constexpr int kRopeMaxHalf = 256;
Status rope_freqs_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, const double* inv_freq,
                          int64_t pos_offset, cudaStream_t stream);
Status rope_freqs_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D, const double* inv_freq,
                           int64_t pos_offset, cudaStream_t stream);
// Causal attention with grouped KV heads, lse(B,Hq,T) saved; dq, dk, dv
// overwritten. T <= 12160 (kUnsupported beyond). `causal` false: unmasked
// (kernel_ops.h AttentionForward).
Status attention_forward(const float* q, const float* k, const float* v, float* out, float* lse, int64_t B, int64_t T,
                         int64_t Hq, int64_t Hk, int64_t D, bool causal, cudaStream_t stream);
Status attention_backward(const float* dout, const float* q, const float* k, const float* v, const float* out,
                          const float* lse, float* dq, float* dk, float* dv, int64_t B, int64_t T, int64_t Hq,
                          int64_t Hk, int64_t D, bool causal, cudaStream_t stream);
// Ring attention's log-sum-exp merge (kernel_ops.h AttentionMerge).
Status attention_merge(float* out, float* lse, const float* out_b, const float* lse_b, int64_t B, int64_t T, int64_t H,
                       int64_t D, cudaStream_t stream);
// The same attention on tensor cores through cuBLAS strided-batched GEMMs,
// with the scores of a slice of heads materialized in a workspace (the fast
// path the CUDA backend trains with; the kernels above are its reference).
// `input`: GEMM operands in fp32, or rounded to bf16 / fp16 (fp32
// accumulation and outputs either way).
// Workspace: scores and dscores of attention_gemm_workspace_floats(T, Hk)
// floats, scores16 as many uint16; with 16-bit inputs also q16, do16
// (B*T*Hq*D) and k16, v16 (B*T*Hk*D) uint16 (null otherwise).
struct AttentionGemmScratch {
  float* scores = nullptr;
  float* dscores = nullptr;
  uint16_t* scores16 = nullptr;
  uint16_t *q16 = nullptr, *k16 = nullptr, *v16 = nullptr, *do16 = nullptr;
  int64_t heads_per_slice = 0;  // 0: attention_gemm_heads_per_slice(T, Hk); tests set fewer
};
int64_t attention_gemm_heads_per_slice(int64_t T, int64_t Hk);
int64_t attention_gemm_workspace_floats(int64_t T, int64_t Hk);
Status attention_forward_gemm(cublasContext* handle, GemmInput input, const float* q, const float* k, const float* v,
                              float* out, float* lse, int64_t B, int64_t T, int64_t Hq, int64_t Hk, int64_t D,
                              const AttentionGemmScratch& w, bool causal, cudaStream_t stream);
Status attention_backward_gemm(cublasContext* handle, GemmInput input, const float* dout, const float* q, const float* k,
                               const float* v, const float* out, const float* lse, float* dq, float* dk, float* dv,
                               int64_t B, int64_t T, int64_t Hq, int64_t Hk, int64_t D, const AttentionGemmScratch& w,
                               bool causal, cudaStream_t stream);

// Vocab-parallel token embedding (rows outside [v_begin, v_begin+V) are 0);
// backward accumulates into dwte.
Status embedding_forward(const int32_t* tokens, const float* wte, float* out, int64_t N, int64_t C, int64_t v_begin,
                         int64_t V, cudaStream_t stream);
Status embedding_backward(const int32_t* tokens, const float* dout, float* dwte, int64_t N, int64_t C, int64_t v_begin,
                          int64_t V, cudaStream_t stream);
// Vocab-parallel cross-entropy passes (see cpu_ops.h).
Status xent_row_max(const float* logits, float* row_max, int64_t N, int64_t V, cudaStream_t stream);
Status xent_sumexp_and_target(const float* logits, const int32_t* targets, const float* row_max, float* row_sumexp,
                              float* target_logit, int64_t N, int64_t V, int64_t v_begin, cudaStream_t stream);
Status xent_loss(const float* row_max, const float* row_sumexp, const float* target_logit, float* loss, int64_t N,
                 cudaStream_t stream);
Status xent_backward(const float* logits, const int32_t* targets, const float* row_max, const float* row_sumexp,
                     float* dlogits, int64_t N, int64_t V, int64_t v_begin, float scale, cudaStream_t stream);
// y(N,C) += bias(C); dbias(C) += column sums of dy(N,C).
Status add_bias(float* y, const float* bias, int64_t N, int64_t C, cudaStream_t stream);
Status bias_backward(const float* dy, float* dbias, int64_t N, int64_t C, cudaStream_t stream);
// GELU, tanh approximation.
Status gelu_forward(const float* x, float* y, int64_t n, cudaStream_t stream);
Status gelu_backward(const float* dy, const float* x, float* dx, int64_t n, cudaStream_t stream);
// AdamW with decoupled weight decay, bias-corrected; `step` counts from 1.
// AdamW over the {param offset, state offset, n, decay} entries of `table` (device memory).
Status adamw_multi(float* param, const float* grad, float* m, float* v, const int64_t* table, int64_t count,
                   int64_t max_n, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                   float grad_scale, cudaStream_t stream);
Status adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int64_t step, float grad_scale, cudaStream_t stream);
// *out (device, one double) = sum of x^2.
Status sum_squares(const float* x, int64_t n, double* out, cudaStream_t stream);
// One sum of squares per {offset, n} entry of `table` (device memory) into out[0..count).
Status sum_squares_multi(const float* x, const int64_t* table, int64_t count, int64_t max_n, double* out,
                         cudaStream_t stream);
// *out (device, one double) = sum of x.
Status sum(const float* x, int64_t n, double* out, cudaStream_t stream);
// acc[0] += scale * sum(x), stream-ordered (no host read).
Status accumulate_sum(const float* x, int64_t n, double scale, double* acc, cudaStream_t stream);
// y += x; y *= s.
// With `base`: y = base + x (y's old contents unread).
Status add_inplace(float* y, const float* x, int64_t n, cudaStream_t stream, const float* base = nullptr);
Status scale_inplace(float* y, float s, int64_t n, cudaStream_t stream);
// x(R, ld) columns [c_begin, c_end) = value.
Status fill_columns(float* x, int64_t R, int64_t ld, int64_t c_begin, int64_t c_end, float value,
                    cudaStream_t stream);
// Learned positions: x row r += wpe((row0 + r) % T); dwpe(t) += sum of the dx
// rows at position t (rows in order, no atomics).
Status add_positions(float* x, const float* wpe, int64_t R, int64_t C, int64_t T, int64_t row0, cudaStream_t stream);
Status positions_backward(const float* dx, float* dwpe, int64_t R, int64_t C, int64_t T, int64_t row0,
                          cudaStream_t stream);
// z = x + a * y (the calibration triad).
Status triad(float* z, const float* x, const float* y, float a, int64_t n, cudaStream_t stream);

// fp32 -> bf16 / fp16 (round to nearest even; fp16 overflows to inf) and
// back; 16-bit values stored as uint16.
Status cast_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream);
Status cast_from_bf16(const uint16_t* x, float* y, int64_t n, cudaStream_t stream);
Status cast_to_fp16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream);
Status cast_from_fp16(const uint16_t* x, float* y, int64_t n, cudaStream_t stream);
Status cast_to_16(GemmInput type, const float* x, uint16_t* y, int64_t n, cudaStream_t stream);

// The compressed gradient reduction's pack / unpack (exec/backend/grad_format.h;
// y / x 4-byte aligned).
Status grad_pack(const float* x, uint8_t* y, int64_t n, exec::GradFormat format, cudaStream_t stream);
Status grad_unpack(const uint8_t* x, float* y, int64_t n, exec::GradFormat format, bool accumulate,
                   cudaStream_t stream);

// Mixture-of-experts (cuda_moe.cu; contracts in exec/backend/kernel_ops.h).
Status moe_router_forward(const float* logits, float* probs, float* lse, int32_t* topk_idx, float* topk_w, int64_t N,
                          int64_t E, int64_t k, bool normalize, cudaStream_t stream);
Status moe_router_backward(const float* probs, const float* lse, const int32_t* topk_idx, const float* topk_w,
                           const float* dw, const float* aux_grad, float z_grad, float* dlogits, int64_t N, int64_t E,
                           int64_t k, bool normalize, cudaStream_t stream);
Status moe_gather(const float* x, const int32_t* rows, float* y, int64_t M, int64_t C, cudaStream_t stream);
Status moe_unpermute(const float* y, const int32_t* slot_rows, const float* w, float* out, int64_t N, int64_t k,
                     int64_t C, bool accumulate, cudaStream_t stream);
Status moe_unpermute_backward(const float* dout, const float* y, const int32_t* slot_rows, const float* w, float* dy,
                              float* dw, int64_t N, int64_t k, int64_t C, cudaStream_t stream);
Status sigmoid_gate_forward(const float* g, const float* y, float* out, int64_t N, int64_t C, cudaStream_t stream);
Status sigmoid_gate_backward(const float* dout, const float* g, const float* y, float* dy, float* dg, int64_t N,
                             int64_t C, cudaStream_t stream);

// C(M,N) = alpha op(A) op(B) + beta C, row-major like cpu::gemm, fp32
// (TF32 tensor cores off: the fp32 reference path).
Status gemm_f32(cublasContext* handle, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float* A, const float* B, float beta, float* C, cudaStream_t stream);
// The same with bf16 A, B (uint16 storage of __nv_bfloat16) and fp32 C,
// fp32 accumulation: the mixed-precision training GEMM.
Status gemm_bf16(cublasContext* handle, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const uint16_t* A, const uint16_t* B, float beta, float* C, cudaStream_t stream);
// fp16 A, B (uint16 storage of __half), fp32 C and accumulation.
Status gemm_fp16(cublasContext* handle, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const uint16_t* A, const uint16_t* B, float beta, float* C, cudaStream_t stream);

}  // namespace loom::cuda
