// GELU (tanh approximation, GPT-2), forward and backward.
#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

constexpr float kScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kCube = 0.044715f;

__global__ void gelu_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(kScale * (v + kCube * v * v * v)));
  }
}

__global__ void gelu_backward_kernel(const float* dy, const float* x, float* dx, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const float t = tanhf(kScale * (v + kCube * v * v * v));
    const float du = kScale * (1.0f + 3.0f * kCube * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

}  // namespace

Status gelu_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  gelu_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status gelu_backward(const float* dy, const float* x, float* dx, int64_t n, cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  gelu_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(dy, x, dx, n);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace loom::cuda
