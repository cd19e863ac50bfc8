// Vocab-parallel cross-entropy passes (as cpu::xent_*): one block per row for
// the row max and the sum of exponentials (in double), elementwise loss and
// gradient.
#include <cfloat>

#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

__global__ void row_max_kernel(const float* logits, float* row_max, int64_t V) {
  __shared__ float scratch[kThreads];
  const float* ln = logits + int64_t(blockIdx.x) * V;
  float m = -FLT_MAX;
  bool any = false;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, ln[j]), any = true;
  scratch[threadIdx.x] = any ? m : -INFINITY;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) row_max[blockIdx.x] = scratch[0];
}

__global__ void sumexp_target_kernel(const float* logits, const int32_t* targets, const float* row_max,
                                     float* row_sumexp, float* target_logit, int64_t V, int64_t v_begin) {
  __shared__ double scratch[kThreads / 32];
  const int64_t n = blockIdx.x;
  const float* ln = logits + n * V;
  const float m = row_max[n];
  double s = 0;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += exp(double(ln[j] - m));
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) {
    row_sumexp[n] = float(s);
    const int64_t t = int64_t(targets[n]) - v_begin;
    target_logit[n] = (t >= 0 && t < V) ? ln[t] : 0.0f;
  }
}

__global__ void loss_kernel(const float* row_max, const float* row_sumexp, const float* target_logit, float* loss,
                            int64_t N) {
  for (int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; n < N; n += int64_t(gridDim.x) * blockDim.x)
    loss[n] = float(log(double(row_sumexp[n])) + row_max[n] - target_logit[n]);
}

__global__ void xent_backward_kernel(const float* logits, const int32_t* targets, const float* row_max,
                                     const float* row_sumexp, float* dlogits, int64_t N, int64_t V, int64_t v_begin,
                                     float scale) {
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < N * V;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = idx / V, j = idx % V;
    float d = scale / row_sumexp[n] * expf(logits[idx] - row_max[n]);
    if (int64_t(targets[n]) - v_begin == j) d -= scale;
    dlogits[idx] = d;
  }
}

}  // namespace

Status xent_row_max(const float* logits, float* row_max, int64_t N, int64_t V, cudaStream_t stream) {
  if (N <= 0) return Status::ok();
  row_max_kernel<<<unsigned(N), kThreads, 0, stream>>>(logits, row_max, V);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status xent_sumexp_and_target(const float* logits, const int32_t* targets, const float* row_max, float* row_sumexp,
                              float* target_logit, int64_t N, int64_t V, int64_t v_begin, cudaStream_t stream) {
  if (N <= 0) return Status::ok();
  sumexp_target_kernel<<<unsigned(N), kThreads, 0, stream>>>(logits, targets, row_max, row_sumexp, target_logit, V,
                                                              v_begin);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status xent_loss(const float* row_max, const float* row_sumexp, const float* target_logit, float* loss, int64_t N,
                 cudaStream_t stream) {
  if (N <= 0) return Status::ok();
  loss_kernel<<<grid_for(N), kThreads, 0, stream>>>(row_max, row_sumexp, target_logit, loss, N);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status xent_backward(const float* logits, const int32_t* targets, const float* row_max, const float* row_sumexp,
                     float* dlogits, int64_t N, int64_t V, int64_t v_begin, float scale, cudaStream_t stream) {
  if (N * V <= 0) return Status::ok();
  xent_backward_kernel<<<grid_for(N * V), kThreads, 0, stream>>>(logits, targets, row_max, row_sumexp, dlogits, N, V,
                                                                 v_begin, scale);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace loom::cuda
