// SimOptions: modelling choices that are neither the model, the hardware, the
// training spec nor the layout. Each default is stated and documented in
// docs/simulator.md; none is fitted to published training runs.
#pragma once

#include <cstdint>

#include "core/program.h"

namespace loom {

struct SimOptions {
  // Attention kernel: true = a fused flash-style kernel (no s*s activations
  // kept, causal blocks skipped); false = materialized scores + fused
  // scale-mask-softmax as in Megatron-LM 2021.
  bool flash_attention = true;
  // Dropout masks kept for backward (1 byte per element). nullopt-like: -1 =
  // from the model (GPT-2 family: on; Llama-style: off), 0 off, 1 on.
  int dropout = -1;
  // Megatron's fp32 main-gradient convention (4-byte grads) instead of the
  // ZeRO paper's 2-byte grads for 16-bit training.
  bool fp32_main_grads = false;
  // Memory the runtime takes before any tensor: CUDA context, cuBLAS
  // workspaces, NCCL channels (bytes per rank).
  double runtime_reserve_bytes = 1.5e9;
  // Allocator fragmentation allowance, as a fraction of the tensor bytes.
  double fragmentation_fraction = 0.05;
  // DP gradient buckets per model chunk (buckets overlap backward).
  int grad_buckets = kDefaultGradBuckets;
  // Overlap of TP collectives with GEMMs (userbuffers-style); 0 = exposed.
  double tp_comm_overlap_fraction = 0.0;
  // Megatron-core's asynchronous TP collectives in backward
  // (tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication):
  // a column-parallel linear's input-gradient all-reduce (SP: reduce-scatter)
  // runs behind its weight-gradient GEMM, and with SP its input is re-gathered
  // behind the data-gradient GEMM. Off: the collectives run synchronously, as
  // in Loom's executor and in Megatron-LM of 2021.
  bool tp_async_backward = false;
  // Per-kernel launch/dispatch overhead (s) for each op the model counts.
  double kernel_overhead_s = 4e-6;
};

}  // namespace loom
