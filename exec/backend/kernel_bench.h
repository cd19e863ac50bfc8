// KernelBench: the microbenchmarks `loom calibrate` times, run through a
// compute backend's kernel table (table_kernel_bench.cc) so that what is
// measured is what the executor calls, on every backend. Collectives are
// timed through the Communicator interface.
//
// Each factory call allocates what its kernel needs and returns callables
// that run ONE call of it; they own their buffers. On an asynchronous device
// the calls only enqueue work: the caller runs synchronize() before reading
// the clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "exec/backend/compute_backend.h"

namespace loom::exec {

// Elements of the GEMM bench's operands, large enough for every mode of an
// m x n x k weight GEMM (A: x or dy, hot; B: W or x; C: y, dx or dW), and how
// many copies of B and C span `cold_bytes` (at least 1, at most 64).
struct GemmOperands {
  size_t a = 0, b = 0, c = 0;
  size_t copies(size_t cold_bytes, size_t b_elem_bytes, size_t c_elem_bytes) const {
    const size_t per_copy = b_elem_bytes * b + c_elem_bytes * c;
    const size_t n = cold_bytes / (per_copy ? per_copy : 1) + 1;
    return n < 1 ? 1 : n > 64 ? 64 : n;
  }
};
// A holds x (m x k) or dy (m x n); B holds W (n x k) or x (m x k); C holds
// y (m x n), dx (m x k) or dW (n x k). (Sizing B as max(m, n)^2 asked a
// 50,257-wide LM head GEMM for 10 GB per copy.)
inline GemmOperands gemm_operands(int64_t m, int64_t n, int64_t k) {
  auto mx = [](int64_t x, int64_t y) { return x > y ? x : y; };
  return {size_t(m * mx(k, n)), size_t(mx(n, m) * k), size_t(mx(mx(m * n, m * k), n * k))};
}

class KernelBench {
 public:
  using Run = std::function<void()>;
  // A weight GEMM the three ways a training step runs it: forward y = x W^T,
  // input gradient dx = dy W, weight gradient dW += dy^T x (same FLOPs).
  struct GemmRuns {
    Run forward, dgrad, wgrad;
  };
  struct FwdBwd {
    Run forward, backward;
  };

  virtual ~KernelBench() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda:0 NVIDIA H200 (...)"
  // GPU backends: the device's compute capability (90 = sm_90) and memory;
  // 0 on the CPU backend, whose profiles are "cpu rank" accelerators.
  virtual int sm_arch() const { return 0; }
  virtual double memory_bytes() const { return 0; }
  // GPU backends: one fp32 GEMM (the profile's fp32 peak; the table's GEMMs
  // are the training precision, bf16). Empty on the CPU backend.
  virtual Run gemm_fp32(int64_t /*m*/, int64_t /*n*/, int64_t /*k*/) { return {}; }
  // Bytes the cold operands rotate through so that they miss the caches, as
  // they do in a layer (CPU: the last-level cache, at least 4x L2).
  virtual size_t cold_set_bytes() const = 0;
  // m tokens x n outputs x k inputs. The operand a layer has just produced
  // (x forward, dy backward) stays hot; the other and the output rotate
  // through copies spanning `cold_bytes`.
  virtual GemmRuns gemm(int64_t m, int64_t n, int64_t k, size_t cold_bytes) = 0;
  // z = x + 0.5 y over `elems` floats (STREAM triad: 12 bytes per element).
  virtual Run triad(size_t elems) = 0;
  // A layer's elementwise kernels on `rows` tokens: two layernorms and two
  // residual adds of width `hidden`, the activation over `ffn` (forward), and
  // their backward.
  virtual FwdBwd layer_elementwise(int64_t rows, int64_t hidden, int64_t ffn) = 0;
  // The optimizer step over `params` fp32 parameters: gradient norm, AdamW,
  // gradient zeroing.
  virtual Run optimizer_step(int64_t params) = 0;
  // `bytes` of a buffer written again after the backend discarded them
  // (ZeRO-2/3 give a gradient's memory back after its reduce-scatter and the
  // next backward writes it: ComputeBackend::discard), and the same write
  // without the discard; the difference is what a discard costs (the CPU:
  // the pages the OS takes back and zero-fills on the next touch; a GPU: the
  // discard's memset).
  virtual Run discard_and_write(size_t bytes) = 0;
  virtual Run write(size_t bytes) = 0;
  // Causal attention (fused softmax) over batch x seq x heads x head_dim;
  // backends without an attention kernel yet say so (the profile then keeps
  // the GEMM table for attention).
  virtual bool has_attention() const { return true; }
  virtual FwdBwd attention(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) = 0;
  // The loss over `tokens` rows of `vocab` fp32 logits, as the executor runs
  // it (exec/model/chunk.cc): forward = row max, sum of exponentials and
  // target logit, loss; backward = the logits' gradient (softmax - one-hot).
  virtual FwdBwd cross_entropy(int64_t tokens, int64_t vocab) = 0;
  virtual void synchronize() = 0;
  // The first failure of the calls so far (a device's sticky error).
  virtual Status status() { return Status::ok(); }
};

// What the profile records of the device a bench runs on.
struct KernelBenchDevice {
  std::string name = "cpu";     // "cpu", "cuda:0 NVIDIA H200 (...)"
  int sm_arch = 0;              // GPU compute capability (90 = sm_90); 0 on the CPU
  double memory_bytes = 0;      // GPU memory; 0 on the CPU
  size_t cold_set_bytes = 0;    // see KernelBench::cold_set_bytes
};
// The CPU's: 4x L2, the L3, at least 8 MiB.
size_t host_cold_set_bytes();

// The bench over `backend`'s kernel table; `fp32_backend` (may be null) is
// the same device computing in fp32, for gemm_fp32 (a GPU's CUDA-core peak).
std::unique_ptr<KernelBench> make_table_kernel_bench(std::unique_ptr<ComputeBackend> backend,
                                                     const KernelBenchDevice& device,
                                                     std::unique_ptr<ComputeBackend> fp32_backend = nullptr);

}  // namespace loom::exec
