// Token embedding over a vocabulary slice (vocab-parallel under TP): the rank
// holding rows [v_begin, v_begin + V) of the table writes those tokens' rows
// and zeros for the others, so summing the slices over TP ranks gives the
// full lookup.
#include <algorithm>
#include <cstring>

#include "exec/backend/cpu_ops.h"
#include "exec/backend/cpu_parallel.h"

namespace loom::cpu {
namespace {

// Columns per chunk in the backward: 64 floats = 4 cache lines per row.
constexpr int64_t kColumnChunk = 64;

}  // namespace

// tokens(N), wte(V,C) -> out(N,C).
void embedding_forward(const int32_t* tokens, const float* wte, float* out, int64_t N, int64_t C, int64_t v_begin,
                       int64_t V) {
  LOOM_OMP_FOR_IF(N * C)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = static_cast<int64_t>(tokens[n]) - v_begin;
    float* on = out + n * C;
    if (row >= 0 && row < V) {
      std::memcpy(on, wte + row * C, static_cast<size_t>(C) * sizeof(float));
    } else {
      std::fill(on, on + C, 0.0f);
    }
  }
}

// tokens(N), dout(N,C) -> dwte(V,C) (accumulated). A token that occurs several
// times adds all its rows. The loop is parallel over column chunks, each
// visiting tokens in order: no write races on repeated tokens, and the sums
// do not depend on the thread count.
void embedding_backward(const int32_t* tokens, const float* dout, float* dwte, int64_t N, int64_t C,
                        int64_t v_begin, int64_t V) {
  const int64_t chunks = (C + kColumnChunk - 1) / kColumnChunk;
  LOOM_OMP_FOR_IF(N * C)
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t c0 = k * kColumnChunk, c1 = std::min(C, c0 + kColumnChunk);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = static_cast<int64_t>(tokens[n]) - v_begin;
      if (row < 0 || row >= V) continue;
      const float* dn = dout + n * C;
      float* dw = dwte + row * C;
      for (int64_t c = c0; c < c1; ++c) dw[c] += dn[c];
    }
  }
}

}  // namespace loom::cpu
