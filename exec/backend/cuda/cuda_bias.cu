// Bias add over rows and its backward (column sums, cuda_colsum.h).
#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_colsum.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

__global__ void add_bias_kernel(float* y, const float* bias, int64_t N, int64_t C) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N * C; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += bias[i % C];
}

struct BiasGrad {
  const float* dy;
  int64_t C;
  __device__ void operator()(int64_t n, int64_t c, double* v) const { v[0] = dy[n * C + c]; }
};

}  // namespace

Status add_bias(float* y, const float* bias, int64_t N, int64_t C, cudaStream_t stream) {
  if (N * C <= 0) return Status::ok();
  add_bias_kernel<<<grid_for(N * C), kThreads, 0, stream>>>(y, bias, N, C);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status bias_backward(const float* dy, float* dbias, int64_t N, int64_t C, cudaStream_t stream) {
  return column_sums<1>(BiasGrad{dy, C}, N, C, dbias, nullptr, stream);
}

}  // namespace loom::cuda
