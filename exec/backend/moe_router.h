// The MoE router's arithmetic for one token, shared by the CPU table
// (cpu_moe.cc) and the CUDA kernels (cuda/cuda_moe.cu) so both compute the
// same thing (contracts: MoeRouterForward / MoeRouterBackward in kernel_ops.h).
#pragma once

#include <math.h>
#include <stdint.h>

#include "exec/backend/grad_format.h"  // LOOM_HD

namespace loom::exec::moe_router {

// probs(E), lse, and the top-k (ties: the lower index) of one token's logits.
LOOM_HD void route_token(const float* z, float* p, float* lse, int32_t* idx, float* w, int64_t E, int64_t K,
                         bool normalize) {
  float mx = z[0];
  for (int64_t e = 1; e < E; ++e) mx = z[e] > mx ? z[e] : mx;
  double s = 0;
  for (int64_t e = 0; e < E; ++e) s += exp(double(z[e]) - mx);
  *lse = float(mx + log(s));
  for (int64_t e = 0; e < E; ++e) p[e] = float(exp(double(z[e]) - mx) / s);
  // Repeated arg-max: strict '>' keeps the lower index on ties.
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
  if (normalize)
    for (int64_t j = 0; j < K; ++j) w[j] = float(w[j] / sel);
}

// dlogits(E) of one token (dw: null for none; aux_grad: null for none).
LOOM_HD void route_token_backward(const float* p, float lse, const int32_t* idx, const float* w, const float* dw,
                                  const float* aux_grad, float z_grad, float* dz, int64_t E, int64_t K,
                                  bool normalize) {
  for (int64_t e = 0; e < E; ++e) dz[e] = aux_grad ? aux_grad[e] : 0.f;
  if (dw) {
    if (normalize) {
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
  const double zg = double(z_grad) * lse;
  for (int64_t e = 0; e < E; ++e) dz[e] = float(p[e] * (double(dz[e]) - pd + zg));
}

}  // namespace loom::exec::moe_router
