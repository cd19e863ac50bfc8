// The linear layer as the model code calls it, over the backend's GEMM.
#pragma once

#include <cstdint>
#include <vector>

#include "exec/backend/kernels.h"

namespace loom::exec {

// y(N,out) = x(N,in) W(out,in)^T (+ b). x16: x in the table's 16-bit format
// (x then null), read as it is (Gemm::A16). The bias is the GEMM's epilogue,
// and so is GELU when gelu_out is given: gelu_out = GELU(y), y keeping the
// pre-activation.
inline void linear(Kernels& k, const float* x, const float* W, const float* b, float* y, int64_t N, int64_t in,
                   int64_t out, const uint16_t* x16 = nullptr, float* gelu_out = nullptr) {
  k.gemm({false, true, N, out, in, 1.f, x, W, 0.f, y, x16, nullptr, b, gelu_out});
}
// dW += dy^T x; db += colsum(dy); dx (=, or += when accumulate) dy W.
// x16: x held in the table's 16-bit format (a packed saved activation; x is
// then null), read by the weight-gradient GEMM as it is (Gemm::B16).
// dgelu_pre: the input gradient goes on through GELU's backward in the same
// GEMM (Gemm::dgelu_pre), dx = (dy W) * GELU'(dgelu_pre); not with accumulate.
// dgelu_db (with dgelu_pre): the previous layer's bias gradient, += the sum
// of dx's rows, in that GEMM too (Gemm::dbias): that layer's backward then
// takes no db of its own.
// defer: where the weight-gradient GEMM goes instead of running now (a
// zero-bubble schedule's later W, ModelChunk::weight_grad); the caller then
// keeps dy and x alive until it runs.
inline void linear_backward(Kernels& k, const float* dy, const float* x, const float* W, float* dW, float* db,
                            float* dx, int64_t N, int64_t in, int64_t out, bool accumulate_dx,
                            const uint16_t* x16 = nullptr, const float* dgelu_pre = nullptr,
                            float* dgelu_db = nullptr, std::vector<Gemm>* defer = nullptr) {
  const Gemm wgrad{true, false, out, in, N, 1.f, dy, x, 1.f, dW, nullptr, x16};
  if (defer)
    defer->push_back(wgrad);
  else
    k.gemm(wgrad);
  if (db) k.bias_backward({dy, db, N, out});
  LOOM_CHECK(!(accumulate_dx && dgelu_pre), "linear_backward: GELU's backward cannot fuse into an accumulating dx");
  LOOM_CHECK(!dgelu_db || (dgelu_pre && dx), "linear_backward: the fused bias gradient needs GELU's backward in dx");
  if (dx)
    k.gemm({false, false, N, in, out, 1.f, dy, W, accumulate_dx ? 1.f : 0.f, dx, nullptr, nullptr, nullptr, nullptr,
            dgelu_pre, dgelu_db});
}

}  // namespace loom::exec
