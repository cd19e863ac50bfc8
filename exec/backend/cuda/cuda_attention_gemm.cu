// Causal attention on tensor cores through cuBLAS strided-batched GEMMs, the
// contract of cpu::attention_forward / attention_backward (grouped KV heads,
// lse saved, dq dk dv overwritten). The scores of a slice of heads are
// materialized in a workspace (Megatron's unfused path): S = scale Q K^T,
// a causal softmax that saves the row's log-sum-exp, O = P V. Backward
// recomputes P from lse, then dP = dO V^T, dV = P^T dO, dS = P (dP - rowsum(dO O)),
// dQ = scale dS K, dK = scale dS^T Q; a GQA group's heads add into their KV
// head's dK, dV (beta = 1 after the first). With 16-bit `input` the GEMM
// operands are rounded to bf16 / fp16 (scores, outputs and accumulation stay
// fp32).
//
// The workspace holds `heads_per_slice` heads of T x T scores at a time, so
// memory stays bounded for long sequences: see attention_gemm_workspace().
#include <cublas_v2.h>

#include <cmath>

#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

// One block per score row: P = softmax over j <= t of S (masked beyond), lse.
__global__ void causal_softmax_kernel(float* s, float* lse, int64_t T, int64_t lse_stride_head) {
  __shared__ double dscratch[kThreads / 32];
  __shared__ float fscratch[kThreads / 32];
  const int64_t t = blockIdx.x, slice_head = blockIdx.y;
  float* row = s + (slice_head * T + t) * T;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) m = fmaxf(m, row[j]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) fscratch[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float mm = fscratch[0];
    for (int w = 1; w < int(blockDim.x + 31) / 32; ++w) mm = fmaxf(mm, fscratch[w]);
    fscratch[0] = mm;
  }
  __syncthreads();
  m = fscratch[0];
  double sum = 0;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) sum += expf(row[j] - m);
  sum = block_sum(sum, dscratch);
  const float l = m + float(log(sum));
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) row[j] = j <= t ? expf(row[j] - l) : 0.f;
  if (threadIdx.x == 0) lse[slice_head * lse_stride_head + t] = l;
}

// P from the saved lse (the backward's recomputation), masked.
__global__ void probs_from_lse_kernel(float* s, const float* lse, int64_t T, int64_t lse_stride_head) {
  const int64_t t = blockIdx.x, slice_head = blockIdx.y;
  float* row = s + (slice_head * T + t) * T;
  const float l = lse[slice_head * lse_stride_head + t];
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) row[j] = j <= t ? expf(row[j] - l) : 0.f;
}

// dS = P (dP - delta) in place of dP; delta(t) = sum_d dO(t,d) O(t,d) of the
// row's head, read with the (B,T,Hq,D) layout.
__global__ void softmax_backward_kernel(float* dp, const float* p, const float* dout, const float* out, int64_t T,
                                        int64_t Hq, int64_t D, int64_t head0, int64_t head_step) {
  __shared__ double dscratch[kThreads / 32];
  const int64_t t = blockIdx.x, slice_head = blockIdx.y;
  const int64_t h = head0 + slice_head * head_step;
  const float* o = out + (t * Hq + h) * D;
  const float* g = dout + (t * Hq + h) * D;
  double delta = 0;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) delta += double(o[d]) * double(g[d]);
  delta = block_sum(delta, dscratch);
  float* row = dp + (slice_head * T + t) * T;
  const float* prow = p + (slice_head * T + t) * T;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) row[j] = j <= t ? prow[j] * (row[j] - float(delta)) : 0.f;
}

// Row-major C = alpha op(A) op(B) + beta C over `batch` matrices at fixed
// strides (elements), as cuBLAS column-major C^T = op(B)^T op(A)^T.
Status gemm_batched(cublasHandle_t h, GemmInput input, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const void* A, int64_t lda, int64_t sa, const void* B, int64_t ldb, int64_t sb, float beta,
                    float* C, int64_t ldc, int64_t sc, int64_t batch) {
  const cudaDataType t = input == GemmInput::kBf16 ? CUDA_R_16BF : input == GemmInput::kF16 ? CUDA_R_16F : CUDA_R_32F;
  LOOM_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                               int(N), int(M), int(K), &alpha, B, t, int(ldb), sb, A, t, int(lda), sa,
                                               &beta, C, CUDA_R_32F, int(ldc), sc, int(batch), CUBLAS_COMPUTE_32F,
                                               CUBLAS_GEMM_DEFAULT));
  return Status::ok();
}

// An operand pointer at element offset `off` of fp32 `x` or of its bf16 copy.
const void* at(const float* x, const uint16_t* x16, int64_t off) {
  return x16 ? static_cast<const void*>(x16 + off) : static_cast<const void*>(x + off);
}

struct Shape {
  int64_t B, T, Hq, Hk, D, G;
};

}  // namespace

int64_t attention_gemm_heads_per_slice(int64_t T, int64_t Hk) {
  // At most ~256 MB of fp32 scores per workspace buffer, at least one head.
  const int64_t per_head = T * T;
  int64_t n = (int64_t(1) << 26) / std::max<int64_t>(per_head, 1);
  return std::max<int64_t>(1, std::min<int64_t>(Hk, n));
}

int64_t attention_gemm_workspace_floats(int64_t T, int64_t Hk) {
  return attention_gemm_heads_per_slice(T, Hk) * T * T;
}

Status attention_forward_gemm(cublasContext* handle, GemmInput input, const float* q, const float* k, const float* v,
                              float* out, float* lse, int64_t B, int64_t T, int64_t Hq, int64_t Hk, int64_t D,
                              const AttentionGemmScratch& w, cudaStream_t stream) {
  if (B * T * Hq * D == 0) return Status::ok();
  if (Hk <= 0 || Hq % Hk) return invalid_argument("attention: query heads must be a multiple of KV heads");
  LOOM_CUBLAS_CHECK(cublasSetStream(handle, stream));
  const Shape s{B, T, Hq, Hk, D, Hq / Hk};
  const float scale = 1.f / std::sqrt(float(D));
  const bool half = input != GemmInput::kF32;
  const uint16_t *q16 = nullptr, *k16 = nullptr, *v16 = nullptr;
  if (half) {
    LOOM_RETURN_IF_ERROR(cast_to_16(input, q, w.q16, B * T * Hq * D, stream));
    LOOM_RETURN_IF_ERROR(cast_to_16(input, k, w.k16, B * T * Hk * D, stream));
    LOOM_RETURN_IF_ERROR(cast_to_16(input, v, w.v16, B * T * Hk * D, stream));
    q16 = w.q16, k16 = w.k16, v16 = w.v16;
  }
  const int64_t slice = w.heads_per_slice > 0 ? std::min(w.heads_per_slice, attention_gemm_heads_per_slice(T, Hk))
                                              : attention_gemm_heads_per_slice(T, Hk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < s.G; ++g)
      for (int64_t hk0 = 0; hk0 < Hk; hk0 += slice) {
        const int64_t n = std::min(slice, Hk - hk0), h0 = hk0 * s.G + g;
        const int64_t qo = b * T * Hq * D + h0 * D, ko = b * T * Hk * D + hk0 * D;
        // S(head i of the slice) = scale Q_h K_hk^T, h = (hk0 + i) G + g.
        LOOM_RETURN_IF_ERROR(gemm_batched(handle, input, false, true, T, T, D, scale, at(q, q16, qo), Hq * D, s.G * D,
                                          at(k, k16, ko), Hk * D, D, 0.f, w.scores, T, T * T, n));
        causal_softmax_kernel<<<dim3(unsigned(T), unsigned(n)), kThreads, 0, stream>>>(
            w.scores, lse + (b * Hq + h0) * T, T, s.G * T);
        LOOM_CUDA_CHECK_LAUNCH();
        const void* p = w.scores;
        if (half) {
          LOOM_RETURN_IF_ERROR(cast_to_16(input, w.scores, w.scores16, n * T * T, stream));
          p = w.scores16;
        }
        // O_h = P V_hk.
        LOOM_RETURN_IF_ERROR(gemm_batched(handle, input, false, false, T, D, T, 1.f, p, T, T * T, at(v, v16, ko),
                                          Hk * D, D, 0.f, out + qo, Hq * D, s.G * D, n));
      }
  return Status::ok();
}

Status attention_backward_gemm(cublasContext* handle, GemmInput input, const float* dout, const float* q, const float* k,
                               const float* v, const float* out, const float* lse, float* dq, float* dk, float* dv,
                               int64_t B, int64_t T, int64_t Hq, int64_t Hk, int64_t D, const AttentionGemmScratch& w,
                               cudaStream_t stream) {
  if (B * T * Hq * D == 0) return Status::ok();
  if (Hk <= 0 || Hq % Hk) return invalid_argument("attention: query heads must be a multiple of KV heads");
  LOOM_CUBLAS_CHECK(cublasSetStream(handle, stream));
  const Shape s{B, T, Hq, Hk, D, Hq / Hk};
  const float scale = 1.f / std::sqrt(float(D));
  const bool half = input != GemmInput::kF32;
  const uint16_t *q16 = nullptr, *k16 = nullptr, *v16 = nullptr, *do16 = nullptr;
  if (half) {
    LOOM_RETURN_IF_ERROR(cast_to_16(input, q, w.q16, B * T * Hq * D, stream));
    LOOM_RETURN_IF_ERROR(cast_to_16(input, k, w.k16, B * T * Hk * D, stream));
    LOOM_RETURN_IF_ERROR(cast_to_16(input, v, w.v16, B * T * Hk * D, stream));
    LOOM_RETURN_IF_ERROR(cast_to_16(input, dout, w.do16, B * T * Hq * D, stream));
    q16 = w.q16, k16 = w.k16, v16 = w.v16, do16 = w.do16;
  }
  const int64_t slice = w.heads_per_slice > 0 ? std::min(w.heads_per_slice, attention_gemm_heads_per_slice(T, Hk))
                                              : attention_gemm_heads_per_slice(T, Hk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < s.G; ++g)
      for (int64_t hk0 = 0; hk0 < Hk; hk0 += slice) {
        const int64_t n = std::min(slice, Hk - hk0), h0 = hk0 * s.G + g;
        const int64_t qo = b * T * Hq * D + h0 * D, ko = b * T * Hk * D + hk0 * D;
        const float beta_kv = g == 0 ? 0.f : 1.f;  // the group's first head writes, the others add
        // P again, from the saved lse.
        LOOM_RETURN_IF_ERROR(gemm_batched(handle, input, false, true, T, T, D, scale, at(q, q16, qo), Hq * D, s.G * D,
                                          at(k, k16, ko), Hk * D, D, 0.f, w.scores, T, T * T, n));
        probs_from_lse_kernel<<<dim3(unsigned(T), unsigned(n)), kThreads, 0, stream>>>(
            w.scores, lse + (b * Hq + h0) * T, T, s.G * T);
        LOOM_CUDA_CHECK_LAUNCH();
        const void* p = w.scores;
        if (half) {
          LOOM_RETURN_IF_ERROR(cast_to_16(input, w.scores, w.scores16, n * T * T, stream));
          p = w.scores16;
        }
        // dV_hk (+)= P^T dO_h.
        LOOM_RETURN_IF_ERROR(gemm_batched(handle, input, true, false, T, D, T, 1.f, p, T, T * T, at(dout, do16, qo),
                                          Hq * D, s.G * D, beta_kv, dv + ko, Hk * D, D, n));
        // dP = dO_h V_hk^T, then dS = P (dP - delta) in place.
        LOOM_RETURN_IF_ERROR(gemm_batched(handle, input, false, true, T, T, D, 1.f, at(dout, do16, qo), Hq * D,
                                          s.G * D, at(v, v16, ko), Hk * D, D, 0.f, w.dscores, T, T * T, n));
        softmax_backward_kernel<<<dim3(unsigned(T), unsigned(n)), kThreads, 0, stream>>>(
            w.dscores, w.scores, dout + b * T * Hq * D, out + b * T * Hq * D, T, Hq, D, h0, s.G);
        LOOM_CUDA_CHECK_LAUNCH();
        const void* ds = w.dscores;
        if (half) {
          LOOM_RETURN_IF_ERROR(cast_to_16(input, w.dscores, w.scores16, n * T * T, stream));
          ds = w.scores16;
        }
        // dQ_h = scale dS K_hk; dK_hk (+)= scale dS^T Q_h.
        LOOM_RETURN_IF_ERROR(gemm_batched(handle, input, false, false, T, D, T, scale, ds, T, T * T, at(k, k16, ko),
                                          Hk * D, D, 0.f, dq + qo, Hq * D, s.G * D, n));
        LOOM_RETURN_IF_ERROR(gemm_batched(handle, input, true, false, T, D, T, scale, ds, T, T * T, at(q, q16, qo),
                                          Hq * D, s.G * D, beta_kv, dk + ko, Hk * D, D, n));
      }
  return Status::ok();
}

}  // namespace loom::cuda
