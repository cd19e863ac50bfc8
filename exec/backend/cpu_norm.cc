// LayerNorm and RMSNorm, forward and backward (llm.c's layernorm_* shape).
//
// Row statistics are accumulated in double: the reference should be the most
// accurate of the backends, and for C in the thousands a float running sum
// loses ~3 digits. Parameter gradients (dw, db) are reductions over rows; they
// are computed in a second pass parallel over column chunks, so every column
// is summed in row order by one thread: the result does not depend on the
// thread count and there are no write races.
#include <algorithm>
#include <cmath>

#include "exec/backend/cpu_ops.h"
#include "exec/backend/cpu_parallel.h"

namespace loom::cpu {
namespace {

// Columns per chunk in the dw/db pass: 64 floats = 4 cache lines per row.
constexpr int64_t kColumnChunk = 64;

}  // namespace

// x(N,C), w(C), b(C) -> y(N,C), mean(N), rstd(N).
void layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                       int64_t N, int64_t C, float eps) {
  LOOM_OMP_FOR_IF(N * C)
  for (int64_t n = 0; n < N; ++n) {
    const float* xn = x + n * C;  // (C)
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += xn[c];
    const double mu = sum / static_cast<double>(C);
    // Two-pass (centered) variance: no cancellation when |mean| >> std.
    double sq = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double d = xn[c] - mu;
      sq += d * d;
    }
    const double var = sq / static_cast<double>(C);  // biased, as in PyTorch
    const float s = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    const float m = static_cast<float>(mu);
    float* yn = y + n * C;
    for (int64_t c = 0; c < C; ++c) yn[c] = (xn[c] - m) * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

// dy(N,C), x(N,C), w(C), mean(N), rstd(N) -> dx(N,C) (overwritten),
// dw(C), db(C) (accumulated).
//   xhat = (x - mean) * rstd, g = dy * w
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
void layernorm_backward(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                        float* dx, float* dw, float* db, int64_t N, int64_t C) {
  LOOM_OMP_FOR_IF(N * C)
  for (int64_t n = 0; n < N; ++n) {
    const float* dyn = dy + n * C;
    const float* xn = x + n * C;
    const float m = mean[n];
    const float s = rstd[n];
    double g_sum = 0.0, g_xhat_sum = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const float g = dyn[c] * w[c];
      g_sum += g;
      g_xhat_sum += static_cast<double>(g) * ((xn[c] - m) * s);
    }
    const float g_mean = static_cast<float>(g_sum / static_cast<double>(C));
    const float g_xhat_mean = static_cast<float>(g_xhat_sum / static_cast<double>(C));
    float* dxn = dx + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (xn[c] - m) * s;
      dxn[c] = s * (dyn[c] * w[c] - g_mean - xhat * g_xhat_mean);
    }
  }
  const int64_t chunks = (C + kColumnChunk - 1) / kColumnChunk;
  LOOM_OMP_FOR_IF(N * C)
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t c0 = k * kColumnChunk, c1 = std::min(C, c0 + kColumnChunk);
    for (int64_t n = 0; n < N; ++n) {
      const float* dyn = dy + n * C;
      const float* xn = x + n * C;
      const float m = mean[n];
      const float s = rstd[n];
      for (int64_t c = c0; c < c1; ++c) {
        dw[c] += dyn[c] * ((xn[c] - m) * s);
        db[c] += dyn[c];
      }
    }
  }
}

// x(N,C), w(C) -> y(N,C), rstd(N).
void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t N, int64_t C, float eps) {
  LOOM_OMP_FOR_IF(N * C)
  for (int64_t n = 0; n < N; ++n) {
    const float* xn = x + n * C;
    double sq = 0.0;
    for (int64_t c = 0; c < C; ++c) sq += static_cast<double>(xn[c]) * xn[c];
    const float s = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(C) + static_cast<double>(eps)));
    float* yn = y + n * C;
    for (int64_t c = 0; c < C; ++c) yn[c] = xn[c] * s * w[c];
    rstd[n] = s;
  }
}

// dy(N,C), x(N,C), w(C), rstd(N) -> dx(N,C) (overwritten), dw(C) (accumulated).
//   xhat = x * rstd, g = dy * w
//   dx = rstd * (g - xhat * mean(g * xhat))
void rmsnorm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                      int64_t N, int64_t C) {
  LOOM_OMP_FOR_IF(N * C)
  for (int64_t n = 0; n < N; ++n) {
    const float* dyn = dy + n * C;
    const float* xn = x + n * C;
    const float s = rstd[n];
    double g_xhat_sum = 0.0;
    for (int64_t c = 0; c < C; ++c) g_xhat_sum += static_cast<double>(dyn[c] * w[c]) * (xn[c] * s);
    const float g_xhat_mean = static_cast<float>(g_xhat_sum / static_cast<double>(C));
    float* dxn = dx + n * C;
    for (int64_t c = 0; c < C; ++c) dxn[c] = s * (dyn[c] * w[c] - (xn[c] * s) * g_xhat_mean);
  }
  const int64_t chunks = (C + kColumnChunk - 1) / kColumnChunk;
  LOOM_OMP_FOR_IF(N * C)
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t c0 = k * kColumnChunk, c1 = std::min(C, c0 + kColumnChunk);
    for (int64_t n = 0; n < N; ++n) {
      const float* dyn = dy + n * C;
      const float* xn = x + n * C;
      const float s = rstd[n];
      for (int64_t c = c0; c < c1; ++c) dw[c] += dyn[c] * (xn[c] * s);
    }
  }
}

}  // namespace loom::cpu
