// Causal softmax attention with grouped KV heads (as cpu::attention_*).
// A first, straightforward fused kernel: one block per (query row, head,
// batch) keeps the row's scores in shared memory (so T <= kMaxT), computes
// the softmax and P V without a T x T buffer in global memory, and saves the
// row's log-sum-exp; the backward recomputes P from it. dK and dV sum over
// query rows (and a GQA group's heads) with atomics. Flash-style tiling
// (K/V blocks through shared memory, tensor cores) is the next step for speed;
// the numbers are the reference's.
#include <cmath>

#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

constexpr int64_t kMaxT = 12160;  // one row of scores plus the static scratch in 48 KB of shared memory

__global__ void attention_forward_kernel(const float* q, const float* k, const float* v, float* out, float* lse,
                                         int64_t T, int64_t Hq, int64_t Hk, int64_t D, float scale, bool causal) {
  extern __shared__ float p[];  // (last + 1) scores, then probabilities
  __shared__ double dscratch[kThreads / 32];
  __shared__ float fscratch[kThreads / 32];
  const int64_t t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, hk = h / (Hq / Hk);
  const int64_t last = causal ? t : T - 1;  // keys 0..last are visible
  const float* qr = q + ((b * T + t) * Hq + h) * D;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) {
    const float* kr = k + ((b * T + j) * Hk + hk) * D;
    float s = 0;
    for (int64_t d = 0; d < D; ++d) s += qr[d] * kr[d];
    p[j] = scale * s;
  }
  __syncthreads();
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) m = fmaxf(m, p[j]);
  m = block_max(m, fscratch);
  double sum = 0;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) {
    const float e = expf(p[j] - m);
    p[j] = e;
    sum += e;
  }
  sum = block_sum(sum, dscratch);
  const float inv = float(1.0 / sum);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0;
    for (int64_t j = 0; j <= last; ++j) acc += p[j] * v[((b * T + j) * Hk + hk) * D + d];
    out[((b * T + t) * Hq + h) * D + d] = acc * inv;
  }
  if (threadIdx.x == 0) lse[(b * Hq + h) * T + t] = m + float(log(sum));
}

__global__ void attention_backward_kernel(const float* dout, const float* q, const float* k, const float* v,
                                          const float* out, const float* lse, float* dq, float* dk, float* dv,
                                          int64_t T, int64_t Hq, int64_t Hk, int64_t D, float scale, bool causal) {
  extern __shared__ float ds[];  // (last + 1) score gradients
  __shared__ double dscratch[kThreads / 32];
  const int64_t t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, hk = h / (Hq / Hk);
  const int64_t last = causal ? t : T - 1;
  const int64_t row = (b * T + t) * Hq + h;
  const float* qr = q + row * D;
  const float* dor = dout + row * D;
  const float* orow = out + row * D;
  const float l = lse[(b * Hq + h) * T + t];
  // rowsum(dO * O)
  double dd = 0;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) dd += double(dor[d]) * orow[d];
  const float delta = float(block_sum(dd, dscratch));
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) {
    const float* kr = k + ((b * T + j) * Hk + hk) * D;
    const float* vr = v + ((b * T + j) * Hk + hk) * D;
    float s = 0, dp = 0;
    for (int64_t d = 0; d < D; ++d) s += qr[d] * kr[d], dp += dor[d] * vr[d];
    const float pj = expf(scale * s - l);
    ds[j] = pj * (dp - delta);
    // dV_j += p_j dO, dK_j += scale dS_j q
    float* dvr = dv + ((b * T + j) * Hk + hk) * D;
    float* dkr = dk + ((b * T + j) * Hk + hk) * D;
    for (int64_t d = 0; d < D; ++d) {
      atomicAdd(dvr + d, pj * dor[d]);
      atomicAdd(dkr + d, scale * ds[j] * qr[d]);
    }
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0;
    for (int64_t j = 0; j <= last; ++j) acc += ds[j] * k[((b * T + j) * Hk + hk) * D + d];
    dq[row * D + d] = scale * acc;
  }
}

Status check_shape(int64_t B, int64_t T, int64_t Hq, int64_t Hk, int64_t D) {
  if (B <= 0 || T <= 0 || Hq <= 0 || Hk <= 0 || D <= 0 || Hq % Hk != 0)
    return invalid_argument("attention: need positive B, T, Hq, Hk, D with Hq % Hk == 0");
  if (T > kMaxT)
    return unsupported("attention: sequence length " + std::to_string(T) + " > " + std::to_string(kMaxT) +
                       " needs the tiled kernel, which the CUDA backend does not have yet");
  if (Hq > 65535 || B > 65535) return unsupported("attention: more than 65535 heads or batch rows per launch");
  return Status::ok();
}

// One thread per (b, h, t) row: the log-sum-exp merge (kernel_ops.h AttentionMerge).
__global__ void attention_merge_kernel(float* out, float* lse, const float* out_b, const float* lse_b, int64_t B,
                                       int64_t T, int64_t H, int64_t D) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // (b, h, t)
  if (i >= B * H * T) return;
  const int64_t t = i % T, bh = i / T, h = bh % H, b = bh / H;
  const float l = lse[i], lb = lse_b[i], m = fmaxf(l, lb);
  if (m == -INFINITY) return;
  const float w = expf(l - m), wb = expf(lb - m), inv = 1.f / (w + wb);
  float* o = out + ((b * T + t) * H + h) * D;
  const float* ob = out_b + ((b * T + t) * H + h) * D;
  for (int64_t d = 0; d < D; ++d) o[d] = (w * o[d] + wb * ob[d]) * inv;
  lse[i] = m + logf(w + wb);
}

}  // namespace

Status attention_merge(float* out, float* lse, const float* out_b, const float* lse_b, int64_t B, int64_t T, int64_t H,
                       int64_t D, cudaStream_t stream) {
  const int64_t rows = B * H * T;
  if (rows == 0) return Status::ok();
  attention_merge_kernel<<<unsigned((rows + kThreads - 1) / kThreads), kThreads, 0, stream>>>(out, lse, out_b, lse_b,
                                                                                             B, T, H, D);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status attention_forward(const float* q, const float* k, const float* v, float* out, float* lse, int64_t B, int64_t T,
                         int64_t Hq, int64_t Hk, int64_t D, bool causal, cudaStream_t stream) {
  LOOM_RETURN_IF_ERROR(check_shape(B, T, Hq, Hk, D));
  const dim3 grid{static_cast<unsigned>(T), static_cast<unsigned>(Hq), static_cast<unsigned>(B)};
  attention_forward_kernel<<<grid, kThreads, size_t(T) * sizeof(float), stream>>>(q, k, v, out, lse, T, Hq, Hk, D,
                                                                                  1.0f / std::sqrt(float(D)), causal);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status attention_backward(const float* dout, const float* q, const float* k, const float* v, const float* out,
                          const float* lse, float* dq, float* dk, float* dv, int64_t B, int64_t T, int64_t Hq,
                          int64_t Hk, int64_t D, bool causal, cudaStream_t stream) {
  LOOM_RETURN_IF_ERROR(check_shape(B, T, Hq, Hk, D));
  const size_t kv_bytes = size_t(B * T * Hk * D) * sizeof(float);
  LOOM_CUDA_CHECK(cudaMemsetAsync(dk, 0, kv_bytes, stream));  // overwritten: accumulate from zero
  LOOM_CUDA_CHECK(cudaMemsetAsync(dv, 0, kv_bytes, stream));
  const dim3 grid{static_cast<unsigned>(T), static_cast<unsigned>(Hq), static_cast<unsigned>(B)};
  attention_backward_kernel<<<grid, kThreads, size_t(T) * sizeof(float), stream>>>(
      dout, q, k, v, out, lse, dq, dk, dv, T, Hq, Hk, D, 1.0f / std::sqrt(float(D)), causal);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace loom::cuda
