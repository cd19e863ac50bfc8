// fp32 <-> bf16 / fp16 casts for mixed precision: the 16-bit working copy of
// the fp32 master weights each step, GEMM operands, and 16-bit values back to
// fp32. Round to nearest even (__float2bfloat16_rn, __float2half_rn); fp16
// overflows to inf, which dynamic loss scaling detects.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

__global__ void to_bf16_kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void from_bf16_kernel(const __nv_bfloat16* x, float* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __bfloat162float(x[i]);
}

__global__ void to_fp16_kernel(const float* x, __half* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2half_rn(x[i]);
}

__global__ void from_fp16_kernel(const __half* x, float* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __half2float(x[i]);
}

}  // namespace

Status cast_to_fp16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  to_fp16_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, reinterpret_cast<__half*>(y), n);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status cast_from_fp16(const uint16_t* x, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  from_fp16_kernel<<<grid_for(n), kThreads, 0, stream>>>(reinterpret_cast<const __half*>(x), y, n);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status cast_to_16(GemmInput type, const float* x, uint16_t* y, int64_t n, cudaStream_t stream) {
  if (type == GemmInput::kF16) return cast_to_fp16(x, y, n, stream);
  if (type == GemmInput::kBf16) return cast_to_bf16(x, y, n, stream);
  return invalid_argument("cast_to_16: fp32 operands are not cast");
}

Status cast_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  to_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, reinterpret_cast<__nv_bfloat16*>(y), n);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status cast_from_bf16(const uint16_t* x, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  from_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(x), y, n);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace loom::cuda
