// The mixture-of-experts ops of the CPU table (exec/backend/kernel_ops.h):
// the router's softmax and top-k, and the row permutations of the dispatch.
// Every output element is a fixed-order sum, so results do not depend on the
// thread count.
#include <cmath>
#include <cstring>

#include "exec/backend/cpu_kernels.h"
#include "exec/backend/cpu_parallel.h"
#include "exec/backend/moe_router.h"

namespace loom::exec {

void CpuKernels::moe_router_forward(const MoeRouterForward& a) {
  LOOM_OMP_FOR_IF(a.N * a.E)
  for (int64_t t = 0; t < a.N; ++t)
    moe_router::route_token(a.logits + t * a.E, a.probs + t * a.E, a.lse + t, a.topk_idx + t * a.k,
                            a.topk_w + t * a.k, a.E, a.k, a.normalize);
}

void CpuKernels::moe_router_backward(const MoeRouterBackward& a) {
  LOOM_OMP_FOR_IF(a.N * a.E)
  for (int64_t t = 0; t < a.N; ++t)
    moe_router::route_token_backward(a.probs + t * a.E, a.lse[t], a.topk_idx + t * a.k, a.topk_w + t * a.k,
                                     a.dw ? a.dw + t * a.k : nullptr, a.aux_grad, a.z_grad, a.dlogits + t * a.E, a.E,
                                     a.k, a.normalize);
}

void CpuKernels::moe_gather(const MoeGather& a) {
  const int64_t C = a.C;
  LOOM_OMP_FOR_IF(a.M * C)
  for (int64_t r = 0; r < a.M; ++r) std::memcpy(a.y + r * C, a.x + int64_t(a.rows[r]) * C, size_t(C) * sizeof(float));
}

void CpuKernels::moe_unpermute(const MoeUnpermute& a) {
  const int64_t C = a.C, K = a.k;
  LOOM_OMP_FOR_IF(a.N * K * C)
  for (int64_t t = 0; t < a.N; ++t) {
    float* o = a.out + t * C;
    if (!a.accumulate) std::memset(o, 0, size_t(C) * sizeof(float));
    for (int64_t j = 0; j < K; ++j) {
      const int32_t r = a.slot_rows[t * K + j];
      if (r < 0) continue;
      const float* y = a.y + int64_t(r) * C;
      const float w = a.w ? a.w[t * K + j] : 1.f;
      for (int64_t c = 0; c < C; ++c) o[c] += w * y[c];
    }
  }
}

void CpuKernels::moe_unpermute_backward(const MoeUnpermuteBackward& a) {
  const int64_t C = a.C, K = a.k;
  LOOM_OMP_FOR_IF(a.N * K * C)
  for (int64_t t = 0; t < a.N; ++t) {
    const float* d = a.dout + t * C;
    for (int64_t j = 0; j < K; ++j) {
      const int32_t r = a.slot_rows[t * K + j];
      if (r < 0) {
        a.dw[t * K + j] = 0.f;
        continue;
      }
      const float* y = a.y + int64_t(r) * C;
      float* dy = a.dy + int64_t(r) * C;
      const float w = a.w[t * K + j];
      double dot = 0;
      for (int64_t c = 0; c < C; ++c) {
        dot += double(d[c]) * y[c];
        dy[c] = w * d[c];
      }
      a.dw[t * K + j] = float(dot);
    }
  }
}

void CpuKernels::sigmoid_gate_forward(const SigmoidGateForward& a) {
  const int64_t C = a.C;
  LOOM_OMP_FOR_IF(a.N * C)
  for (int64_t t = 0; t < a.N; ++t) {
    const float s = float(1.0 / (1.0 + std::exp(-double(a.g[t]))));
    for (int64_t c = 0; c < C; ++c) a.out[t * C + c] += s * a.y[t * C + c];
  }
}

void CpuKernels::sigmoid_gate_backward(const SigmoidGateBackward& a) {
  const int64_t C = a.C;
  LOOM_OMP_FOR_IF(a.N * C)
  for (int64_t t = 0; t < a.N; ++t) {
    const double s = 1.0 / (1.0 + std::exp(-double(a.g[t])));
    double dot = 0;
    for (int64_t c = 0; c < C; ++c) {
      dot += double(a.dout[t * C + c]) * a.y[t * C + c];
      a.dy[t * C + c] = float(s * a.dout[t * C + c]);
    }
    a.dg[t] = float(s * (1 - s) * dot);
  }
}

}  // namespace loom::exec
