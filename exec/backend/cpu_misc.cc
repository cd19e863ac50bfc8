// Small elementwise helpers used between the ops (residual adds, biases,
// gradient scaling, gradient-norm accumulation).
#include <algorithm>

#include "exec/backend/cpu_ops.h"
#include "exec/backend/cpu_parallel.h"

#if defined(_OPENMP)
#define LOOM_OMP_FOR_SUM_IF(var, work) \
  LOOM_PRAGMA_(omp parallel for schedule(static) reduction(+ : var) if ((work) >= kMinParallelWork))
#else
#define LOOM_OMP_FOR_SUM_IF(var, work)
#endif

namespace loom::cpu {
namespace {

constexpr int64_t kColumnChunk = 64;

}  // namespace

// y(n) += x(n).
void add_inplace(float* y, const float* x, int64_t n) {
  LOOM_OMP_FOR_IF(n)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

// y(N,C) += bias(C), broadcast over rows.
void add_bias(float* y, const float* bias, int64_t N, int64_t C) {
  LOOM_OMP_FOR_IF(N * C)
  for (int64_t r = 0; r < N; ++r) {
    float* yr = y + r * C;
    for (int64_t c = 0; c < C; ++c) yr[c] += bias[c];
  }
}

// dbias(C) += sum over rows of dy(N,C). Parallel over column chunks, rows in
// order: no races, and the sums do not depend on the thread count.
void bias_backward(const float* dy, float* dbias, int64_t N, int64_t C) {
  const int64_t chunks = (C + kColumnChunk - 1) / kColumnChunk;
  LOOM_OMP_FOR_IF(N * C)
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t c0 = k * kColumnChunk, c1 = std::min(C, c0 + kColumnChunk);
    for (int64_t r = 0; r < N; ++r) {
      const float* dr = dy + r * C;
      for (int64_t c = c0; c < c1; ++c) dbias[c] += dr[c];
    }
  }
}

// y(n) *= s.
void scale_inplace(float* y, float s, int64_t n) {
  LOOM_OMP_FOR_IF(n)
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

// Sum of x(n)^2, accumulated in double (the gradient norm of a whole model is
// a sum of ~1e9 squares). With OpenMP the partial sums are combined in an
// order that depends on the thread count (differences ~1e-16 relative).
double sum_squares(const float* x, int64_t n) {
  double sum = 0.0;
  LOOM_OMP_FOR_SUM_IF(sum, n)
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

}  // namespace loom::cpu
