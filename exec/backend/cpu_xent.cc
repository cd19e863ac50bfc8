// Vocab-parallel softmax cross-entropy (Megatron's scheme), split in passes so
// a communicator can combine the vocabulary slices in between:
//   row_max   -- all-reduce MAX --> sumexp, target_logit -- all-reduce SUM -->
//   loss, backward.
// With one slice (v_begin = 0, V = full vocabulary) no communication is
// needed and the passes are the ordinary stable log-softmax.
#include <cmath>
#include <limits>

#include "exec/backend/cpu_ops.h"
#include "exec/backend/cpu_parallel.h"

namespace loom::cpu {

// logits(N,V) -> row_max(N), over the local slice only.
void xent_row_max(const float* logits, float* row_max, int64_t N, int64_t V) {
  LOOM_OMP_FOR_IF(N * V)
  for (int64_t n = 0; n < N; ++n) {
    const float* ln = logits + n * V;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < V; ++j) m = ln[j] > m ? ln[j] : m;
    row_max[n] = m;
  }
}

// logits(N,V), targets(N), row_max(N) (global) -> row_sumexp(N), target_logit(N).
// The exponentials are summed in double: V is ~50k and the sum feeds a log.
void xent_sumexp_and_target(const float* logits, const int32_t* targets, const float* row_max, float* row_sumexp,
                            float* target_logit, int64_t N, int64_t V, int64_t v_begin) {
  LOOM_OMP_FOR_IF(N * V)
  for (int64_t n = 0; n < N; ++n) {
    const float* ln = logits + n * V;
    const float m = row_max[n];
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(ln[j] - m);
    row_sumexp[n] = static_cast<float>(sum);
    const int64_t t = static_cast<int64_t>(targets[n]) - v_begin;
    target_logit[n] = (t >= 0 && t < V) ? ln[t] : 0.0f;
  }
}

// loss(n) = log(row_sumexp) + row_max - target_logit = -log softmax(target).
void xent_loss(const float* row_max, const float* row_sumexp, const float* target_logit, float* loss, int64_t N) {
  for (int64_t n = 0; n < N; ++n) {
    loss[n] = static_cast<float>(std::log(static_cast<double>(row_sumexp[n])) + row_max[n] - target_logit[n]);
  }
}

// dlogits(N,V) = scale * (softmax(logits) - onehot(target)), over the local
// slice, with the global row_max and row_sumexp.
void xent_backward(const float* logits, const int32_t* targets, const float* row_max, const float* row_sumexp,
                   float* dlogits, int64_t N, int64_t V, int64_t v_begin, float scale) {
  LOOM_OMP_FOR_IF(N * V)
  for (int64_t n = 0; n < N; ++n) {
    const float* ln = logits + n * V;
    float* dn = dlogits + n * V;
    const float m = row_max[n];
    const float p_scale = scale / row_sumexp[n];
    for (int64_t j = 0; j < V; ++j) dn[j] = p_scale * std::exp(ln[j] - m);
    const int64_t t = static_cast<int64_t>(targets[n]) - v_begin;
    if (t >= 0 && t < V) dn[t] -= scale;
  }
}

}  // namespace loom::cpu
