// RMSNorm forward and backward (as cpu::rmsnorm_*): row statistics in double
// by one block per row, dw by deterministic column sums (cuda_colsum.h).
#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_colsum.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

// With `res`: the row is x + res, written to `sum` first (each thread reads
// back only what it wrote).
__global__ void rmsnorm_forward_kernel(const float* x, const float* w, float* y, float* rstd, int64_t C, float eps,
                                       const float* res, float* sum) {
  __shared__ double scratch[kThreads / 32];
  const int64_t n = blockIdx.x;
  double sq = 0;
  const float* xn = residual_row(x, res, sum, n, C, [&](float v) { sq += double(v) * v; });
  const float s = float(1.0 / sqrt(block_sum(sq, scratch) / double(C) + double(eps)));
  float* yn = y + n * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yn[c] = xn[c] * s * w[c];
  if (threadIdx.x == 0) rstd[n] = s;
}

__global__ void rmsnorm_dx_kernel(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                                  int64_t C, const float* dx_add) {
  __shared__ double scratch[kThreads / 32];
  const int64_t n = blockIdx.x;
  const float* dyn = dy + n * C;
  const float* xn = x + n * C;
  const float s = rstd[n];
  double gx = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) gx += double(dyn[c] * w[c]) * (xn[c] * s);
  const float gx_mean = float(block_sum(gx, scratch) / double(C));
  float* dxn = dx + n * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float g = s * (dyn[c] * w[c] - (xn[c] * s) * gx_mean);
    dxn[c] = dx_add ? __fadd_rn(g, dx_add[n * C + c]) : g;  // _rn: no FMA contraction, add_inplace's bits
  }
}

// dw += sum_n dy * x * rstd.
struct RmsNormGrad {
  const float *dy, *x, *rstd;
  int64_t C;
  __device__ void operator()(int64_t n, int64_t c, double* v) const {
    v[0] = double(dy[n * C + c]) * double(x[n * C + c] * rstd[n]);
  }
};

}  // namespace

Status rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t C, float eps,
                       cudaStream_t stream, const float* residual, float* sum) {
  if (N <= 0 || C <= 0) return Status::ok();
  rmsnorm_forward_kernel<<<unsigned(N), kThreads, 0, stream>>>(x, w, y, rstd, C, eps, residual, sum);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status rmsnorm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                        int64_t N, int64_t C, cudaStream_t stream, const float* dx_add) {
  if (N <= 0 || C <= 0) return Status::ok();
  rmsnorm_dx_kernel<<<unsigned(N), kThreads, 0, stream>>>(dy, x, w, rstd, dx, C, dx_add);
  LOOM_CUDA_CHECK_LAUNCH();
  return column_sums<1>(RmsNormGrad{dy, x, rstd, C}, N, C, dw, nullptr, stream);
}

}  // namespace loom::cuda
