#include "core/memory_class.h"

namespace loom {

std::string_view memory_class_name(MemoryClass c) {
  switch (c) {
    case MemoryClass::kWeights: return "weights";
    case MemoryClass::kGrads: return "grads";
    case MemoryClass::kOptimizer: return "optimizer";
    case MemoryClass::kActivations: return "activations";
    case MemoryClass::kCommBuffers: return "comm_buffers";
    case MemoryClass::kWorkspace: return "workspace";
    case MemoryClass::kInputs: return "inputs";
    case MemoryClass::kOther: return "other";
  }
  return "other";
}

}  // namespace loom
