// Vocab-parallel token embedding and its backward (as cpu::embedding_*).
// The backward sums each vocabulary row's tokens in token order, one thread
// per column (deterministic, no atomics).
#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

__global__ void embedding_forward_kernel(const int32_t* tokens, const float* wte, float* out, int64_t N, int64_t C,
                                         int64_t v_begin, int64_t V) {
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < N * C;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = idx / C, c = idx % C, row = int64_t(tokens[n]) - v_begin;
    out[idx] = (row >= 0 && row < V) ? wte[row * C + c] : 0.0f;
  }
}

__global__ void embedding_backward_kernel(const int32_t* tokens, const float* dout, float* dwte, int64_t N, int64_t C,
                                          int64_t v_begin, int64_t V) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = int64_t(tokens[n]) - v_begin;
    if (row >= 0 && row < V) dwte[row * C + c] += dout[n * C + c];
  }
}

}  // namespace

Status embedding_forward(const int32_t* tokens, const float* wte, float* out, int64_t N, int64_t C, int64_t v_begin,
                         int64_t V, cudaStream_t stream) {
  if (N * C <= 0) return Status::ok();
  embedding_forward_kernel<<<grid_for(N * C), kThreads, 0, stream>>>(tokens, wte, out, N, C, v_begin, V);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status embedding_backward(const int32_t* tokens, const float* dout, float* dwte, int64_t N, int64_t C, int64_t v_begin,
                          int64_t V, cudaStream_t stream) {
  if (N * C <= 0) return Status::ok();
  embedding_backward_kernel<<<unsigned((C + kThreads - 1) / kThreads), kThreads, 0, stream>>>(tokens, dout, dwte, N, C,
                                                                                              v_begin, V);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace loom::cuda
