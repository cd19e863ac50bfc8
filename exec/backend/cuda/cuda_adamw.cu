// AdamW with decoupled weight decay and bias correction (as cpu::adamw_update).
#include <algorithm>
#include <cmath>

#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2,
                             float eps, float wd, float m_corr, float v_corr, float gs) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i] * gs;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi * m_corr) / (sqrtf(vi * v_corr) + eps);
    p[i] -= lr * (update + wd * p[i]);
  }
}

// One block row (blockIdx.y) per segment of the table, blockIdx.x striding
// inside it: {param offset, state offset, n, decay} per entry.
__global__ void adamw_multi_kernel(float* p, const float* g, float* m, float* v, const int64_t* table,
                                   int64_t first, float lr, float b1, float b2, float eps, float wd, float m_corr,
                                   float v_corr, float gs) {
  const int64_t* e = table + 4 * (first + int64_t(blockIdx.y));
  const int64_t po = e[0], so = e[1], n = e[2];
  const float decay = e[3] ? wd : 0.0f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[so + i] * gs;
    const float mi = b1 * m[so + i] + (1.0f - b1) * gi;
    const float vi = b2 * v[so + i] + (1.0f - b2) * gi * gi;
    m[so + i] = mi;
    v[so + i] = vi;
    const float update = (mi * m_corr) / (sqrtf(vi * v_corr) + eps);
    p[po + i] -= lr * (update + decay * p[po + i]);
  }
}

}  // namespace

Status adamw_multi(float* param, const float* grad, float* m, float* v, const int64_t* table, int64_t count,
                   int64_t max_n, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                   float grad_scale, cudaStream_t stream) {
  if (count <= 0 || max_n <= 0) return Status::ok();
  if (step < 1) return invalid_argument("adamw_multi: step must count from 1");
  const double t = double(step);
  const float m_corr = float(1.0 / (1.0 - std::pow(double(beta1), t)));
  const float v_corr = float(1.0 / (1.0 - std::pow(double(beta2), t)));
  // Blocks per segment for the largest one, four elements a thread.
  const unsigned per_segment = multi_blocks_for(max_n);
  for (int64_t first = 0; first < count; first += kMaxGridY) {
    const unsigned rows = unsigned(std::min<int64_t>(kMaxGridY, count - first));
    adamw_multi_kernel<<<dim3(per_segment, rows), kThreads, 0, stream>>>(
        param, grad, m, v, table, first, lr, beta1, beta2, eps, weight_decay, m_corr, v_corr, grad_scale);
    LOOM_CUDA_CHECK_LAUNCH();
  }
  return Status::ok();
}

Status adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int64_t step, float grad_scale, cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  if (step < 1) return invalid_argument("adamw_update: step must count from 1");
  // Bias corrections in double on the host, as the CPU reference.
  const double t = double(step);
  const float m_corr = float(1.0 / (1.0 - std::pow(double(beta1), t)));
  const float v_corr = float(1.0 / (1.0 - std::pow(double(beta2), t)));
  adamw_kernel<<<grid_for(n), kThreads, 0, stream>>>(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, m_corr,
                                                     v_corr, grad_scale);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace loom::cuda
