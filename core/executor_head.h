// Loom's executor's LM head (exec/model/chunk.cc) and the simulator's model of
// it (sim/compute_model.cc head_cost, sim/memory_model.cc) share these rules.
//
// The fused linear cross-entropy (Liger-Kernel's FusedLinearCrossEntropy,
// Apple's Cut Cross-Entropy): the head's forward takes the loss and, while
// the logits of a block of rows are at hand, their gradient and both of the
// head's gradient GEMMs (weight and input), so no micro-batch's logits
// outlive its forward; backward starts from the saved input gradient. It
// writes the head's weight gradient during the forward, which ZeRO-2/3
// cannot allow (a micro-batch's full gradient is given back after its
// reduce-scatter until its next backward): there the head keeps its logits
// from forward to backward as before.
#pragma once

#include <algorithm>
#include <cstdint>

namespace loom {

inline bool executor_head_grad_in_forward(int zero) { return zero <= 1; }

// fp32 logits per block of rows: at most 256 MiB (2^26 floats), rows a
// multiple of 64 (a GEMM-friendly M), all rows when they fit.
constexpr int64_t kExecutorHeadBlockFloats = int64_t(1) << 26;

inline int64_t executor_head_block_rows(int64_t rows, int64_t vocab_local) {
  if (rows <= 0 || vocab_local <= 0) return std::max<int64_t>(rows, 1);
  int64_t r = kExecutorHeadBlockFloats / vocab_local / 64 * 64;
  return std::clamp<int64_t>(r, std::min<int64_t>(64, rows), rows);
}

}  // namespace loom
