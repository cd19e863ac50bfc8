// GEMMs with a fused epilogue on cuBLASLt: the bias add, and GELU with the
// pre-activation kept (CUBLASLT_EPILOGUE_BIAS / GELU_AUX / GELU_AUX_BIAS),
// row-major as cuda_gemm.cc computes them (cuBLASLt gets (B, A)).
//
// One LtGemm per kernel table: its cuBLASLt handle, a 32 MiB workspace (the
// size NVIDIA recommends for Hopper; like cuBLAS's own workspace it is
// outside the memory ledger, inside the simulator's runtime reserve), and the
// heuristic's algorithm per shape, asked once. A shape no algorithm takes is
// refused (kUnsupported) and remembered, so the caller runs the separate ops
// for it from then on.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "core/status.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

struct LtGemmArgs {
  GemmInput input;  // operand type: fp32, bf16 or fp16; C is fp32
  bool trans_a, trans_b;
  int64_t M, N, K;
  float alpha;
  const void* A;
  const void* B;
  float* C;               // beta 0: written, not read
  const float* bias;      // N values, or null
  float* gelu_out;        // (M,N) = GELU(C), C the pre-activation; or null
};

enum class LtOutcome { kDone, kUnsupported };

class LtGemm {
 public:
  // Made on first use: a failure to create the handle is kept and returned
  // by every run().
  LtGemm();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // kUnsupported: cuBLASLt has no algorithm for this shape and epilogue (or
  // a pointer is not 16-byte aligned); nothing was enqueued. An error
  // Status: a call failed after the heuristic accepted the shape.
  Result<LtOutcome> run(const LtGemmArgs& a, cudaStream_t stream);

  // Why the last kUnsupported was refused, for the table's one-line notice.
  const std::string& last_refusal() const { return refusal_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string refusal_;
};

}  // namespace loom::cuda
