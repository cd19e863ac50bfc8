// The CUDA ComputeBackend (device memory, caching allocator, copies and the
// kernel table on the backend's stream). kUnsupported without a visible GPU.
// `precision` kBf16 / kFp16: GEMMs take 16-bit operands (fp32 master
// weights, fp32 accumulation, fp32 gradients and optimizer states; fp16 with
// the trainer's dynamic loss scaling); kFp32: fp32 GEMMs with TF32 off (the
// reference path). kFp8 is refused.
#pragma once

#include <memory>

#include "core/status.h"
#include "exec/backend/compute_backend.h"

namespace loom::exec {

Result<std::unique_ptr<ComputeBackend>> make_cuda_backend(int device, Precision precision = Precision::kFp32);

}  // namespace loom::exec
