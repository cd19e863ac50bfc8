// The CUDA kernel table (exec/backend/kernels.h) over exec/backend/cuda/
// cuda_ops.h, on one stream with one cuBLAS handle. Under bf16 or fp16
// precision the GEMM operands (attention's too) are rounded to 16 bits (fp32
// accumulate, fp32 output): weights from one 16-bit copy of the flat
// parameter buffer, cast again lazily after weights_changed(); activations
// cast into scratch per GEMM. fp16 needs the trainer's loss scaling.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "exec/backend/compute_backend.h"

namespace loom::exec {

// `backend` allocates the scratch and the bf16 weight copy (so they count in
// its peak) and must outlive the result. Fails if cuBLAS cannot start.
Result<std::unique_ptr<Kernels>> make_cuda_kernels(ComputeBackend* backend, cudaStream_t stream, Precision precision);

}  // namespace loom::exec
