// The mixture-of-experts ops of the CPU table (exec/backend/kernel_ops.h):
// the router's softmax and top-k, and the row permutations of the dispatch.
// Every output element is a fixed-order sum, so results do not depend on the
// thread count.
#include <cmath>
#include <cstring>

#include "exec/backend/cpu_kernels.h"
#include "exec/backend/cpu_parallel.h"

namespace loom::exec {

void CpuKernels::moe_router_forward(const MoeRouterForward& a) {
  const int64_t E = a.E, K = a.k;
  LOOM_OMP_FOR_IF(a.N * E)
  for (int64_t t = 0; t < a.N; ++t) {
    const float* z = a.logits + t * E;
    float* p = a.probs + t * E;
    float mx = z[0];
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, z[e]);
    double s = 0;
    for (int64_t e = 0; e < E; ++e) s += std::exp(double(z[e]) - mx);
    a.lse[t] = float(mx + std::log(s));
    for (int64_t e = 0; e < E; ++e) p[e] = float(std::exp(double(z[e]) - mx) / s);
    int32_t* idx = a.topk_idx + t * K;
    float* w = a.topk_w + t * K;
    // Selection by repeated arg-max: strict '>' keeps the lower index on ties.
    double sel = 0;
    for (int64_t j = 0; j < K; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken |= idx[i] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      idx[j] = int32_t(best);
      w[j] = p[best];
      sel += p[best];
    }
    if (a.normalize)
      for (int64_t j = 0; j < K; ++j) w[j] = float(w[j] / sel);
  }
}

void CpuKernels::moe_router_backward(const MoeRouterBackward& a) {
  const int64_t E = a.E, K = a.k;
  LOOM_OMP_FOR_IF(a.N * E)
  for (int64_t t = 0; t < a.N; ++t) {
    const float* p = a.probs + t * E;
    const int32_t* idx = a.topk_idx + t * K;
    const float* w = a.topk_w + t * K;
    const float* dw = a.dw ? a.dw + t * K : nullptr;
    float* dz = a.dlogits + t * E;
    // dprobs into dz first.
    for (int64_t e = 0; e < E; ++e) dz[e] = a.aux_grad ? a.aux_grad[e] : 0.f;
    if (dw) {
      if (a.normalize) {
        // w_j = p_j / S over the selected: dp_i = (dw_i - sum_j dw_j w_j) / S.
        double S = 0, dot = 0;
        for (int64_t j = 0; j < K; ++j) {
          S += p[idx[j]];
          dot += double(dw[j]) * w[j];
        }
        for (int64_t j = 0; j < K; ++j) dz[idx[j]] += float((dw[j] - dot) / S);
      } else {
        for (int64_t j = 0; j < K; ++j) dz[idx[j]] += dw[j];
      }
    }
    double pd = 0;
    for (int64_t e = 0; e < E; ++e) pd += double(p[e]) * dz[e];
    const double zg = double(a.z_grad) * a.lse[t];
    for (int64_t e = 0; e < E; ++e) dz[e] = float(p[e] * (double(dz[e]) - pd + zg));
  }
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

}  // namespace loom::exec
