// The classes of memory the executor's buffers belong to, as its memory
// ledger (exec/backend/memory_ledger.h) charges them and a run record reports
// them at each rank's peak; the simulator's memory model has a term for each
// (sim/memory_model.h, the Loom-executor form). Names are the JSON keys.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace loom {

enum class MemoryClass : int {
  kWeights = 0,    // parameters (ZeRO-3: the owned shards plus a chunk gathered in place)
  kGrads,          // gradients (and ZeRO's owned-shard gradient)
  kOptimizer,      // Adam m and v
  kActivations,    // what forward keeps for backward, the logits, stage boundary tensors
  kCommBuffers,    // packed collective buffers, pipeline send / receive buffers
  kWorkspace,      // kernel scratch freed within the op (weight-gradient temporaries, bf16 copies)
  kInputs,         // the micro-batch's token ids and targets on the device
  kOther,          // anything allocated outside a tagged scope (should stay 0)
};
inline constexpr int kNumMemoryClasses = 8;

using MemoryBreakdown = std::array<double, kNumMemoryClasses>;  // bytes per class

// "weights", "grads", "optimizer", "activations", "comm_buffers", "workspace", "inputs", "other".
std::string_view memory_class_name(MemoryClass c);
inline std::string_view memory_class_name(int c) { return memory_class_name(static_cast<MemoryClass>(c)); }

}  // namespace loom
