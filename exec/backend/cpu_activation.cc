// Elementwise activations: GELU (tanh approximation, as GPT-2 and llm.c) and
// SwiGLU (Llama's MLP gate).
#include <cmath>

#include "exec/backend/cpu_ops.h"
#include "exec/backend/cpu_parallel.h"

namespace loom::cpu {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); x(n) -> y(n).
void gelu_forward(const float* x, float* y, int64_t n) {
  LOOM_OMP_FOR_IF(n)
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float u = kGeluScale * (xi + kGeluCube * xi * xi * xi);
    y[i] = 0.5f * xi * (1.0f + std::tanh(u));
  }
}

// dx(n) = dy * gelu'(x), with
//   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx,
//   du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
// (1 - tanh^2) instead of llm.c's 1/cosh^2: same value, no overflow of cosh.
void gelu_backward(const float* dy, const float* x, float* dx, int64_t n) {
  LOOM_OMP_FOR_IF(n)
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float u = kGeluScale * (xi + kGeluCube * xi * xi * xi);
    const float t = std::tanh(u);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * xi * xi);
    const float grad = 0.5f * (1.0f + t) + 0.5f * xi * (1.0f - t * t) * du;
    dx[i] = dy[i] * grad;
  }
}

// y = silu(gate) * up, silu(g) = g * sigmoid(g); all (n) = (N*F).
void swiglu_forward(const float* gate, const float* up, float* y, int64_t n) {
  LOOM_OMP_FOR_IF(n)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    y[i] = g * sigmoid(g) * up[i];
  }
}

// dup = dy * silu(gate);
// dgate = dy * up * silu'(gate), silu'(g) = s (1 + g (1 - s)), s = sigmoid(g).
void swiglu_backward(const float* dy, const float* gate, const float* up, float* dgate, float* dup, int64_t n) {
  LOOM_OMP_FOR_IF(n)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float s = sigmoid(g);
    dup[i] = dy[i] * g * s;
    dgate[i] = dy[i] * up[i] * s * (1.0f + g * (1.0f - s));
  }
}

}  // namespace loom::cpu
