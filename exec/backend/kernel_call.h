// KernelCall: one call of the kernel table (exec/backend/kernels.h) as the
// decorators that watch the table see it (exec/backend/observed_kernels.h):
// which op, its shape (for messages), and the work it does (for rates).
//
// Work, computed from the call's arguments:
//   flops  the math as written: GEMM 2MNK; causal attention counts the
//          visible half of the scores (forward 2 GEMMs of 2*B*Hq*T*T*D/2
//          each, backward 5: the recomputed scores, dV, dP, dQ, dK), as
//          FlashAttention reports it. 0 for the memory-bound ops, which are
//          rated by bytes instead.
//   bytes  what the op must read and write at least (fp32 = 4 bytes; GEMM
//          operands 2 bytes when the table runs 16-bit GEMMs); accumulated
//          outputs (dw += ...) count a read and a write.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace loom::exec {

// The op enum, generated from the op list (exec/backend/kernel_ops.h).
enum class KernelOp : uint8_t;

struct KernelCall {
  struct Dim {
    const char* name = nullptr;
    int64_t value = 0;
  };
  KernelOp op{};
  double flops = 0;
  double bytes = 0;
  std::array<Dim, 6> dims{};  // the shape arguments, in the virtual's order
  int num_dims = 0;

  // "attention_backward (B=2, T=1024, Hq=32, Hk=8, D=128)"
  std::string to_string() const;
};

}  // namespace loom::exec
