// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization"):
//   m = b1 m + (1 - b1) g
//   v = b2 v + (1 - b2) g^2
//   p = p - lr * ( (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd p )
// The decay acts on the parameter directly and never enters the moments
// (that is what "decoupled" means; Adam + L2 would add wd p to g). Same
// update as PyTorch's AdamW and llm.c's adamw_kernel.
#include <cmath>

#include "exec/backend/cpu_ops.h"
#include "exec/backend/cpu_parallel.h"

namespace loom::cpu {

// param(n), grad(n), m(n), v(n); step counts from 1; the gradient is grad * grad_scale.
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t step, float grad_scale) {
  // Bias corrections in double: 1 - 0.999^t is ~1e-3 at t = 1.
  const double t = static_cast<double>(step);
  const float m_corr = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), t)));
  const float v_corr = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta2), t)));
  LOOM_OMP_FOR_IF(n)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi * m_corr) / (std::sqrt(vi * v_corr) + eps);
    param[i] -= lr * (update + weight_decay * param[i]);
  }
}

}  // namespace loom::cpu
