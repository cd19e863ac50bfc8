// Bias add over rows and its backward (column sums in row order).
#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

__global__ void add_bias_kernel(float* y, const float* bias, int64_t N, int64_t C) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N * C; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += bias[i % C];
}

__global__ void bias_backward_kernel(const float* dy, float* dbias, int64_t N, int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = dbias[c];  // accumulated in float, rows in order, as the CPU reference
  for (int64_t n = 0; n < N; ++n) acc += dy[n * C + c];
  dbias[c] = acc;
}

}  // namespace

Status add_bias(float* y, const float* bias, int64_t N, int64_t C, cudaStream_t stream) {
  if (N * C <= 0) return Status::ok();
  add_bias_kernel<<<grid_for(N * C), kThreads, 0, stream>>>(y, bias, N, C);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status bias_backward(const float* dy, float* dbias, int64_t N, int64_t C, cudaStream_t stream) {
  if (N * C <= 0) return Status::ok();
  bias_backward_kernel<<<unsigned((C + kThreads - 1) / kThreads), kThreads, 0, stream>>>(dy, dbias, N, C);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace loom::cuda
