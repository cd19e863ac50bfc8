// The CUDA ComputeBackend (device memory, caching allocator, copies on the
// backend's stream). kUnsupported without a visible GPU.
#pragma once

#include <memory>

#include "core/status.h"
#include "exec/backend/compute_backend.h"

namespace loom::exec {

Result<std::unique_ptr<ComputeBackend>> make_cuda_backend(int device);

}  // namespace loom::exec
