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
__global__ void causal_softmax_kernel(float* s, float* lse, int64_t T, int64_t lse_stride_head, bool causal) {
  __shared__ double dscratch[kThreads / 32];
  __shared__ float fscratch[kThreads / 32];
  const int64_t t = blockIdx.x, slice_head = blockIdx.y;
  float* row = s + (slice_head * T + t) * T;
  const int64_t last = causal ? t : T - 1;  // keys 0..last are visible
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) m = fmaxf(m, row[j]);
  m = block_max(m, fscratch);
  double sum = 0;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) sum += expf(row[j] - m);
  sum = block_sum(sum, dscratch);
  const float l = m + float(log(sum));
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) row[j] = j <= last ? expf(row[j] - l) : 0.f;
  if (threadIdx.x == 0) lse[slice_head * lse_stride_head + t] = l;
}

// P from the saved lse (the backward's recomputation), masked.
__global__ void probs_from_lse_kernel(float* s, const float* lse, int64_t T, int64_t lse_stride_head, bool causal) {
  const int64_t t = blockIdx.x, slice_head = blockIdx.y, last = causal ? t : T - 1;
  float* row = s + (slice_head * T + t) * T;
  const float l = lse[slice_head * lse_stride_head + t];
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) row[j] = j <= last ? expf(row[j] - l) : 0.f;
}

// dS = P (dP - delta) in place of dP; delta(t) = sum_d dO(t,d) O(t,d) of the
// row's head, read with the (B,T,Hq,D) layout.
__global__ void softmax_backward_kernel(float* dp, const float* p, const float* dout, const float* out, int64_t T,
                                        int64_t Hq, int64_t D, int64_t head0, int64_t head_step, bool causal) {
  __shared__ double dscratch[kThreads / 32];
  const int64_t t = blockIdx.x, slice_head = blockIdx.y, last = causal ? t : T - 1;
  const int64_t h = head0 + slice_head * head_step;
  const float* o = out + (t * Hq + h) * D;
  const float* g = dout + (t * Hq + h) * D;
  double delta = 0;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) delta += double(o[d]) * double(g[d]);
  delta = block_sum(delta, dscratch);
  float* row = dp + (slice_head * T + t) * T;
  const float* prow = p + (slice_head * T + t) * T;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) row[j] = j <= last ? prow[j] * (row[j] - float(delta)) : 0.f;
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

// One call's shape, operands and workspace: casts the operands to 16 bits
// once, walks the (batch, group member, head slice) pieces, and computes a
// piece's scores S = scale Q_h K_hk^T (h = (hk0 + i) G + g for head i).
class Run {
 public:
  Run(cublasHandle_t h, GemmInput in, const AttentionGemmScratch& w, cudaStream_t st, int64_t B, int64_t T,
      int64_t Hq, int64_t Hk, int64_t D)
      : h_(h), in_(in), w_(w), st_(st), B(B), T(T), Hq(Hq), Hk(Hk), D(D), G(Hk > 0 ? Hq / Hk : 0),
        scale(1.f / std::sqrt(float(D))) {}

  // Shape checks, the cuBLAS stream, and the 16-bit copies of q, k, v (and dout).
  Status start(const float* q, const float* k, const float* v, const float* dout) {
    if (Hk <= 0 || Hq % Hk) return invalid_argument("attention: query heads must be a multiple of KV heads");
    LOOM_CUBLAS_CHECK(cublasSetStream(h_, st_));
    q_ = q, k_ = k, v_ = v, do_ = dout;
    if (in_ == GemmInput::kF32) return Status::ok();
    LOOM_RETURN_IF_ERROR(cast_to_16(in_, q, w_.q16, B * T * Hq * D, st_));
    LOOM_RETURN_IF_ERROR(cast_to_16(in_, k, w_.k16, B * T * Hk * D, st_));
    LOOM_RETURN_IF_ERROR(cast_to_16(in_, v, w_.v16, B * T * Hk * D, st_));
    if (dout) LOOM_RETURN_IF_ERROR(cast_to_16(in_, dout, w_.do16, B * T * Hq * D, st_));
    q16_ = w_.q16, k16_ = w_.k16, v16_ = w_.v16, do16_ = dout ? w_.do16 : nullptr;
    return Status::ok();
  }

  struct Piece {
    int64_t b, g, n, h0, qo, ko;  // n heads from h0 (step G); offsets of Q_h0 / dO_h0 and K_hk0 / V_hk0
  };
  template <typename F>
  Status for_each_piece(F&& f) const {
    const int64_t best = attention_gemm_heads_per_slice(T, Hk);
    const int64_t slice = w_.heads_per_slice > 0 ? std::min(w_.heads_per_slice, best) : best;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t hk0 = 0; hk0 < Hk; hk0 += slice) {
          const int64_t h0 = hk0 * G + g;
          LOOM_RETURN_IF_ERROR(
              f(Piece{b, g, std::min(slice, Hk - hk0), h0, b * T * Hq * D + h0 * D, b * T * Hk * D + hk0 * D}));
        }
    return Status::ok();
  }

  // w.scores = scale Q K^T for the piece's heads.
  Status scores(const Piece& p) const {
    return gemm(false, true, T, T, D, scale, q(p), Hq * D, G * D, k(p), Hk * D, D, 0.f, w_.scores, T, T * T, p.n);
  }
  // `x` (n T x T matrices) as a GEMM operand: itself, or its 16-bit copy.
  Result<const void*> operand(const float* x, int64_t n) const {
    if (in_ == GemmInput::kF32) return static_cast<const void*>(x);
    LOOM_RETURN_IF_ERROR(cast_to_16(in_, x, w_.scores16, n * T * T, st_));
    return static_cast<const void*>(w_.scores16);
  }
  Status gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A, int64_t lda, int64_t sa,
              const void* Bm, int64_t ldb, int64_t sb, float beta, float* C, int64_t ldc, int64_t sc, int64_t n) const {
    return gemm_batched(h_, in_, ta, tb, M, N, K, alpha, A, lda, sa, Bm, ldb, sb, beta, C, ldc, sc, n);
  }
  const void* q(const Piece& p) const { return at(q_, q16_, p.qo); }
  const void* k(const Piece& p) const { return at(k_, k16_, p.ko); }
  const void* v(const Piece& p) const { return at(v_, v16_, p.ko); }
  const void* dout(const Piece& p) const { return at(do_, do16_, p.qo); }

 private:
  cublasHandle_t h_;
  GemmInput in_;
  const AttentionGemmScratch& w_;
  cudaStream_t st_;
  const float *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *do_ = nullptr;
  const uint16_t *q16_ = nullptr, *k16_ = nullptr, *v16_ = nullptr, *do16_ = nullptr;

 public:
  const int64_t B, T, Hq, Hk, D, G;
  const float scale;
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
                              const AttentionGemmScratch& w, bool causal, cudaStream_t stream) {
  if (B * T * Hq * D == 0) return Status::ok();
  Run r(handle, input, w, stream, B, T, Hq, Hk, D);
  LOOM_RETURN_IF_ERROR(r.start(q, k, v, nullptr));
  return r.for_each_piece([&](const Run::Piece& p) -> Status {
    LOOM_RETURN_IF_ERROR(r.scores(p));
    causal_softmax_kernel<<<dim3(unsigned(T), unsigned(p.n)), kThreads, 0, stream>>>(
        w.scores, lse + (p.b * Hq + p.h0) * T, T, r.G * T, causal);
    LOOM_CUDA_CHECK_LAUNCH();
    // O_h = P V_hk.
    LOOM_ASSIGN_OR_RETURN(const void* prob, r.operand(w.scores, p.n));
    return r.gemm(false, false, T, D, T, 1.f, prob, T, T * T, r.v(p), Hk * D, D, 0.f, out + p.qo, Hq * D, r.G * D,
                  p.n);
  });
}

Status attention_backward_gemm(cublasContext* handle, GemmInput input, const float* dout, const float* q, const float* k,
                               const float* v, const float* out, const float* lse, float* dq, float* dk, float* dv,
                               int64_t B, int64_t T, int64_t Hq, int64_t Hk, int64_t D, const AttentionGemmScratch& w,
                               bool causal, cudaStream_t stream) {
  if (B * T * Hq * D == 0) return Status::ok();
  Run r(handle, input, w, stream, B, T, Hq, Hk, D);
  LOOM_RETURN_IF_ERROR(r.start(q, k, v, dout));
  return r.for_each_piece([&](const Run::Piece& p) -> Status {
    const float beta_kv = p.g == 0 ? 0.f : 1.f;  // the group's first head writes dK, dV, the others add
    // P again, from the saved lse.
    LOOM_RETURN_IF_ERROR(r.scores(p));
    probs_from_lse_kernel<<<dim3(unsigned(T), unsigned(p.n)), kThreads, 0, stream>>>(
        w.scores, lse + (p.b * Hq + p.h0) * T, T, r.G * T, causal);
    LOOM_CUDA_CHECK_LAUNCH();
    // dV_hk (+)= P^T dO_h.
    LOOM_ASSIGN_OR_RETURN(const void* prob, r.operand(w.scores, p.n));
    LOOM_RETURN_IF_ERROR(r.gemm(true, false, T, D, T, 1.f, prob, T, T * T, r.dout(p), Hq * D, r.G * D, beta_kv,
                                dv + p.ko, Hk * D, D, p.n));
    // dP = dO_h V_hk^T, then dS = P (dP - delta) in place.
    LOOM_RETURN_IF_ERROR(r.gemm(false, true, T, T, D, 1.f, r.dout(p), Hq * D, r.G * D, r.v(p), Hk * D, D, 0.f,
                                w.dscores, T, T * T, p.n));
    softmax_backward_kernel<<<dim3(unsigned(T), unsigned(p.n)), kThreads, 0, stream>>>(
        w.dscores, w.scores, dout + p.b * T * Hq * D, out + p.b * T * Hq * D, T, Hq, D, p.h0, r.G, causal);
    LOOM_CUDA_CHECK_LAUNCH();
    // dQ_h = scale dS K_hk; dK_hk (+)= scale dS^T Q_h.
    LOOM_ASSIGN_OR_RETURN(const void* ds, r.operand(w.dscores, p.n));
    LOOM_RETURN_IF_ERROR(r.gemm(false, false, T, D, T, r.scale, ds, T, T * T, r.k(p), Hk * D, D, 0.f, dq + p.qo,
                                Hq * D, r.G * D, p.n));
    return r.gemm(true, false, T, D, T, r.scale, ds, T, T * T, r.q(p), Hq * D, r.G * D, beta_kv, dk + p.ko, Hk * D, D,
                  p.n);
  });
}

}  // namespace loom::cuda
