// Rotary position embedding (RoPE), HF/Llama "rotate_half" convention:
// element i of a head is paired with element i + D/2 and the pair is rotated
// by the angle pos * theta^(-2i/D), i in [0, D/2).
//
// The angles are evaluated in double: pos * freq for pos ~ 1e5 has an
// absolute error of ~1e-2 rad in float, and this is the reference.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "exec/backend/cpu_ops.h"
#include "exec/backend/cpu_parallel.h"

namespace loom::cpu {
namespace {

// The kernels return void (see cpu_ops.h), so a broken shape invariant is a
// caller bug: report it and stop, in every build type.
void check_head_dim(int64_t D) {
  if (D <= 0 || D % 2 != 0) {
    std::fprintf(stderr, "loom::cpu rope: head dim D=%lld must be positive and even\n", static_cast<long long>(D));
    std::abort();
  }
}

// The frequencies theta^(-2i/D), i in [0, D/2).
std::vector<double> theta_freqs(int64_t D, float theta) {
  std::vector<double> freq(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) {
    freq[i] = std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / static_cast<double>(D));
  }
  return freq;
}

// cos/sin tables (T, D/2) for positions t + pos_offset.
void rope_tables(int64_t T, int64_t D, const double* freq, int64_t pos_offset, std::vector<float>& cos_t,
                 std::vector<float>& sin_t) {
  const int64_t half = D / 2;
  cos_t.resize(static_cast<size_t>(T * half));
  sin_t.resize(static_cast<size_t>(T * half));
  for (int64_t t = 0; t < T; ++t) {
    const double pos = static_cast<double>(t + pos_offset);
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * freq[i];
      cos_t[t * half + i] = static_cast<float>(std::cos(angle));
      sin_t[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

// Rotates every (i, i + D/2) pair of x(B,T,H,D) by +angle (direction = +1) or
// -angle (direction = -1). The rotation is orthogonal, so the backward of the
// forward rotation is the rotation by -angle.
void rope_rotate(float* x, int64_t B, int64_t T, int64_t H, int64_t D, const double* freq, int64_t pos_offset,
                 float direction) {
  std::vector<float> cos_t, sin_t;
  rope_tables(T, D, freq, pos_offset, cos_t, sin_t);
  const int64_t half = D / 2;
  LOOM_OMP_FOR_IF(B * T * H * D)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t t = bt % T;
    const float* c = cos_t.data() + t * half;  // (D/2)
    const float* s = sin_t.data() + t * half;  // (D/2)
    for (int64_t h = 0; h < H; ++h) {
      float* xh = x + (bt * H + h) * D;  // (D)
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = xh[i], x2 = xh[i + half];
        const float si = direction * s[i];
        xh[i] = x1 * c[i] - x2 * si;
        xh[i + half] = x2 * c[i] + x1 * si;
      }
    }
  }
}

}  // namespace

void rope_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, float theta, int64_t pos_offset) {
  check_head_dim(D);
  rope_rotate(x, B, T, H, D, theta_freqs(D, theta).data(), pos_offset, +1.0f);
}

void rope_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D, float theta, int64_t pos_offset) {
  check_head_dim(D);
  rope_rotate(dx, B, T, H, D, theta_freqs(D, theta).data(), pos_offset, -1.0f);
}

void rope_freqs_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, const double* inv_freq,
                        int64_t pos_offset) {
  check_head_dim(D);
  rope_rotate(x, B, T, H, D, inv_freq, pos_offset, +1.0f);
}

void rope_freqs_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D, const double* inv_freq,
                         int64_t pos_offset) {
  check_head_dim(D);
  rope_rotate(dx, B, T, H, D, inv_freq, pos_offset, -1.0f);
}

}  // namespace loom::cpu
