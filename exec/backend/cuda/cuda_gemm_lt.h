// GEMMs with a fused epilogue on cuBLASLt: the bias add, GELU with the
// pre-activation kept (CUBLASLT_EPILOGUE_BIAS / GELU_AUX / GELU_AUX_BIAS),
// and GELU's backward from that pre-activation (CUBLASLT_EPILOGUE_DGELU, with
// the bias gradient DGELU_BGRAD),
// row-major as cuda_gemm.cc computes them (cuBLASLt gets (B, A)).
//
// One LtGemm per kernel table: its cuBLASLt handle and the heuristic's
// algorithm per shape (and per alignment of each operand and vector), asked
// once. The caller passes the workspace (kLtWorkspaceBytes, the size NVIDIA
// recommends for Hopper, from its allocator). What cuBLASLt refuses — no
// handle, no algorithm, an attribute or launch it rejects — comes back as
// kUnsupported with nothing enqueued, and a refused shape is remembered, so
// the caller runs the separate ops for it from then on.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

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
  const float* dgelu_pre = nullptr;  // C = product * GELU'(dgelu_pre(M,N)); alone, or null
  float* dbias = nullptr;  // with dgelu_pre: written with the sum of C's rows (DGELU_BGRAD), N values; or null
};

enum class LtOutcome { kDone, kUnsupported };

inline constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;

// cuBLASLt epilogue GEMMs launched by this process (tests: proof that the
// fused path ran, not a silent fallback).
int64_t lt_gemm_executions();

class LtGemm {
 public:
  // A failure to create the handle makes every run() kUnsupported, naming it.
  LtGemm();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // kUnsupported: cuBLASLt cannot run this shape and epilogue (or a vector
  // is not 16-byte aligned); nothing was enqueued. An error Status: a call
  // failed that cuBLASLt had accepted.
  Result<LtOutcome> run(const LtGemmArgs& a, void* workspace, size_t workspace_bytes, cudaStream_t stream);

  // Why the last kUnsupported was refused, for the table's one-line notice.
  const std::string& last_refusal() const { return refusal_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string refusal_;
};

}  // namespace loom::cuda
