// SwiGLU: y = silu(gate) * up, and its backward (as cpu::swiglu_*).
#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

__global__ void swiglu_forward_kernel(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    y[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void swiglu_backward_kernel(const float* dy, const float* gate, const float* up, float* dgate, float* dup,
                                       int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i], s = 1.0f / (1.0f + expf(-g)), d = dy[i];
    dup[i] = d * g * s;
    dgate[i] = d * up[i] * s * (1.0f + g * (1.0f - s));
  }
}

}  // namespace

Status swiglu_forward(const float* gate, const float* up, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  swiglu_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(gate, up, y, n);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status swiglu_backward(const float* dy, const float* gate, const float* up, float* dgate, float* dup, int64_t n,
                       cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  swiglu_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(dy, gate, up, dgate, dup, n);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace loom::cuda
