// Kernels: the executor's math, one virtual per op of exec/backend/kernel_ops.h
// (read that header for each op's arguments, shapes and accumulate /
// overwrite rules; the virtuals are generated from its op list). Every
// ComputeBackend returns one (ComputeBackend::kernels()); the model and the
// runtime call nothing else, so the same ModelChunk and Trainer run on the CPU
// backend (cpu_kernels.h: forwards to cpu::, bit for bit) and on the CUDA
// backend (cuda:: on the backend's stream). A backend is a table that fills
// every virtual; a decorator (observed_kernels.h) forwards them all.
//
// Pointers are the backend's memory. Calls are asynchronous on device
// backends: a failed launch is remembered and returned by status() (the first
// failure wins, like CUDA's sticky errors), which the model checks after each
// micro-batch. sum() and take_sum_squares() return host values and so wait for the
// work before them.
//
// Precision: GEMM operands may be rounded to bf16 / fp16 (fp32 accumulate)
// when the backend runs mixed precision; everything else is fp32.
// set_weights() names the flat fp32 parameter buffer, so such a backend keeps
// one 16-bit copy of it instead of casting the weights at every GEMM; after
// weights_changed(begin, n) (an optimizer step, a completed parameter gather)
// the range is cast again when a GEMM first reads it, never earlier, so a
// range another stream is still writing is not read.
// Thread-safety: used by one thread at a time, like the backend.
#pragma once

#include <cstdint>

#include "core/hw_profile.h"  // loom::Precision
#include "core/status.h"
#include "exec/backend/kernel_ops.h"

namespace loom::exec {

class Kernels {
 public:
  virtual ~Kernels() = default;
  virtual Precision precision() const = 0;
  // First failure since construction (ok on the CPU backend).
  virtual Status status() = 0;

  virtual void set_weights(const float* params, int64_t n) = 0;
  virtual void weights_changed(const float* begin, int64_t n) = 0;

  // One virtual per op: `virtual Gemm::Result gemm(const Gemm& a) = 0;` ...
#define LOOM_KERNEL_VIRTUAL(Type, name) virtual Type::Result name(const Type& a) = 0;
  LOOM_KERNEL_OPS(LOOM_KERNEL_VIRTUAL)
#undef LOOM_KERNEL_VIRTUAL
};

// Runs an op given by its struct: run_op(k, a) is k.gemm(a) for a Gemm (code
// generic over ops, such as the test of every op of every backend).
#define LOOM_KERNEL_RUN(Type, name) \
  inline Type::Result run_op(Kernels& k, const Type& a) { return k.name(a); }
LOOM_KERNEL_OPS(LOOM_KERNEL_RUN)
#undef LOOM_KERNEL_RUN

}  // namespace loom::exec
