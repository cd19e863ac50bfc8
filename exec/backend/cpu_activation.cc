// Elementwise activations: GELU (tanh approximation, as GPT-2 and llm.c) and
// SwiGLU (Llama's MLP gate).
// GCC 12 reports false "may be used uninitialized" warnings inside its own
// AVX-512 intrinsics headers when Eigen's packet math is inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "exec/backend/cpu_ops.h"
#include "exec/backend/cpu_parallel.h"

namespace loom::cpu {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

}  // namespace

// The loops work on blocks with Eigen's vectorized tanh / exp (a scalar libm
// call per element made GELU the most expensive op of small models).
constexpr int64_t kBlock = 4096;
using Arr = Eigen::Array<float, Eigen::Dynamic, 1>;
using CMap = Eigen::Map<const Arr>;
using Map = Eigen::Map<Arr>;

// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); x(n) -> y(n).
void gelu_forward(const float* x, float* y, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  LOOM_OMP_FOR_IF(n)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t o = b * kBlock, len = std::min(kBlock, n - o);
    CMap xi(x + o, len);
    Map(y + o, len) = 0.5f * xi * (1.0f + (kGeluScale * (xi + kGeluCube * xi.cube())).tanh());
  }
}

// dx(n) = dy * gelu'(x), with
//   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx,
//   du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
// (1 - tanh^2) instead of llm.c's 1/cosh^2: same value, no overflow of cosh.
void gelu_backward(const float* dy, const float* x, float* dx, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  LOOM_OMP_FOR_IF(n)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t o = b * kBlock, len = std::min(kBlock, n - o);
    CMap xi(x + o, len), g(dy + o, len);
    const Arr t = (kGeluScale * (xi + kGeluCube * xi.cube())).tanh();
    const Arr du = kGeluScale * (1.0f + 3.0f * kGeluCube * xi.square());
    Map(dx + o, len) = g * (0.5f * (1.0f + t) + 0.5f * xi * (1.0f - t.square()) * du);
  }
}

// y = silu(gate) * up, silu(g) = g * sigmoid(g); all (n) = (N*F).
void swiglu_forward(const float* gate, const float* up, float* y, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  LOOM_OMP_FOR_IF(n)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t o = b * kBlock, len = std::min(kBlock, n - o);
    CMap g(gate + o, len), u(up + o, len);
    Map(y + o, len) = g / (1.0f + (-g).exp()) * u;
  }
}

// dup = dy * silu(gate);
// dgate = dy * up * silu'(gate), silu'(g) = s (1 + g (1 - s)), s = sigmoid(g).
void swiglu_backward(const float* dy, const float* gate, const float* up, float* dgate, float* dup, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  LOOM_OMP_FOR_IF(n)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t o = b * kBlock, len = std::min(kBlock, n - o);
    CMap g(gate + o, len), u(up + o, len), d(dy + o, len);
    const Arr sg = 1.0f / (1.0f + (-g).exp());
    Map(dup + o, len) = d * g * sg;
    Map(dgate + o, len) = d * u * sg * (1.0f + g * (1.0f - sg));
  }
}

}  // namespace loom::cpu
