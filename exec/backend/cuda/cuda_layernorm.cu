// LayerNorm forward and backward: one block per row for the row statistics
// (accumulated in double, two-pass variance, as the CPU reference), and
// dw / db by deterministic column sums over the whole GPU (cuda_colsum.h).
#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_colsum.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

// With `res`: the row is x + res, written to `sum` first; each thread then
// reads back only the elements it wrote (the loops share their stride).
__global__ void layernorm_forward_kernel(const float* x, const float* w, const float* b, float* y, float* mean,
                                         float* rstd, int64_t C, float eps, const float* res, float* sum) {
  __shared__ double scratch[kThreads / 32];
  const int64_t n = blockIdx.x;
  double s = 0;
  const float* xn = residual_row(x, res, sum, n, C, [&](float v) { s += v; });
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
                                    const float* rstd, float* dx, int64_t C, const float* dx_add) {
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
    const float g = r * (dyn[c] * w[c] - g_mean - xhat * gx_mean);
    dxn[c] = dx_add ? __fadd_rn(g, dx_add[n * C + c]) : g;  // _rn: no FMA contraction, add_inplace's bits
  }
}

// dw += sum_n dy * xhat, db += sum_n dy.
struct LayerNormGrads {
  const float *dy, *x, *mean, *rstd;
  int64_t C;
  __device__ void operator()(int64_t n, int64_t c, double* v) const {
    const float g = dy[n * C + c];
    v[0] = double(g) * ((x[n * C + c] - mean[n]) * rstd[n]);
    v[1] = g;
  }
};

}  // namespace

Status layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                         int64_t N, int64_t C, float eps, cudaStream_t stream, const float* residual, float* sum) {
  if (N <= 0 || C <= 0) return Status::ok();
  layernorm_forward_kernel<<<unsigned(N), kThreads, 0, stream>>>(x, w, b, y, mean, rstd, C, eps, residual, sum);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status layernorm_backward(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                          float* dx, float* dw, float* db, int64_t N, int64_t C, cudaStream_t stream,
                          const float* dx_add) {
  if (N <= 0 || C <= 0) return Status::ok();
  layernorm_dx_kernel<<<unsigned(N), kThreads, 0, stream>>>(dy, x, w, mean, rstd, dx, C, dx_add);
  LOOM_CUDA_CHECK_LAUNCH();
  return column_sums<2>(LayerNormGrads{dy, x, mean, rstd, C}, N, C, dw, db, stream);
}

}  // namespace loom::cuda
