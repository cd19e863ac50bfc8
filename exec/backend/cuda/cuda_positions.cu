// Learned position embeddings (GPT-2's wpe): x row r += wpe((row0 + r) % T),
// and the gradient dwpe(t) += the sum of the dx rows at position t. The
// backward gives each (t, c) one thread that walks its rows in order: no
// atomics, and the sum order is the CPU reference's.
#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

__global__ void add_positions_kernel(float* x, const float* wpe, int64_t R, int64_t C, int64_t T, int64_t row0) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < R * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / C, c = i % C;
    x[i] += wpe[((row0 + r) % T) * C + c];
  }
}

__global__ void positions_backward_kernel(const float* dx, float* dwpe, int64_t R, int64_t C, int64_t T,
                                          int64_t row0) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < T * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / C, c = i % C;
    // First local row at position t: (row0 + r) % T == t.
    int64_t r = ((t - row0) % T + T) % T;
    float acc = dwpe[i];
    for (; r < R; r += T) acc += dx[r * C + c];
    dwpe[i] = acc;
  }
}

}  // namespace

Status add_positions(float* x, const float* wpe, int64_t R, int64_t C, int64_t T, int64_t row0, cudaStream_t stream) {
  if (R * C <= 0) return Status::ok();
  add_positions_kernel<<<grid_for(R * C), kThreads, 0, stream>>>(x, wpe, R, C, T, row0);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status positions_backward(const float* dx, float* dwpe, int64_t R, int64_t C, int64_t T, int64_t row0,
                          cudaStream_t stream) {
  if (R * C <= 0 || T <= 0) return Status::ok();
  positions_backward_kernel<<<grid_for(T * C), kThreads, 0, stream>>>(dx, dwpe, R, C, T, row0);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace loom::cuda
