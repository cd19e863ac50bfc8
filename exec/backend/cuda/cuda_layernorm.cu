// LayerNorm forward and backward: one block per row for the row statistics
// (accumulated in double, two-pass variance, as the CPU reference), and a
// column pass for dw / db so every column is summed in row order by one
// thread (deterministic, no atomics).
#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

__global__ void layernorm_forward_kernel(const float* x, const float* w, const float* b, float* y, float* mean,
                                         float* rstd, int64_t C, float eps) {
  __shared__ double scratch[kThreads / 32];
  const int64_t n = blockIdx.x;
  const float* xn = x + n * C;
  double s = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += xn[c];
  const double mu = block_sum(s, scratch) / double(C);
  double sq = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const double d = xn[c] - mu;
    sq += d * d;
  }
  const double var = block_sum(sq, scratch) / double(C);
  const float r = float(1.0 / sqrt(var + double(eps)));
  const float m = float(mu);
  float* yn = y + n * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yn[c] = (xn[c] - m) * r * w[c] + b[c];
  if (threadIdx.x == 0) mean[n] = m, rstd[n] = r;
}

__global__ void layernorm_dx_kernel(const float* dy, const float* x, const float* w, const float* mean,
                                    const float* rstd, float* dx, int64_t C) {
  __shared__ double scratch[kThreads / 32];
  const int64_t n = blockIdx.x;
  const float* dyn = dy + n * C;
  const float* xn = x + n * C;
  const float m = mean[n], r = rstd[n];
  double gs = 0, gx = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float g = dyn[c] * w[c];
    gs += g;
    gx += double(g) * ((xn[c] - m) * r);
  }
  const float g_mean = float(block_sum(gs, scratch) / double(C));
  const float gx_mean = float(block_sum(gx, scratch) / double(C));
  float* dxn = dx + n * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float xhat = (xn[c] - m) * r;
    dxn[c] = r * (dyn[c] * w[c] - g_mean - xhat * gx_mean);
  }
}

__global__ void layernorm_dwdb_kernel(const float* dy, const float* x, const float* mean, const float* rstd,
                                      float* dw, float* db, int64_t N, int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double sw = 0, sb = 0;
  for (int64_t n = 0; n < N; ++n) {
    const float g = dy[n * C + c];
    sw += double(g) * ((x[n * C + c] - mean[n]) * rstd[n]);
    sb += g;
  }
  dw[c] += float(sw);
  db[c] += float(sb);
}

}  // namespace

Status layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                         int64_t N, int64_t C, float eps, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return Status::ok();
  layernorm_forward_kernel<<<unsigned(N), kThreads, 0, stream>>>(x, w, b, y, mean, rstd, C, eps);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status layernorm_backward(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                          float* dx, float* dw, float* db, int64_t N, int64_t C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return Status::ok();
  layernorm_dx_kernel<<<unsigned(N), kThreads, 0, stream>>>(dy, x, w, mean, rstd, dx, C);
  LOOM_CUDA_CHECK_LAUNCH();
  layernorm_dwdb_kernel<<<unsigned((C + kThreads - 1) / kThreads), kThreads, 0, stream>>>(dy, x, mean, rstd, dw, db,
                                                                                          N, C);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace loom::cuda
