// The compressed gradient reduction's pack and unpack (exec/backend/
// grad_format.h): the same conversions as the CPU kernels, bit for bit.
// fp8 first reduces the block's amax into the packed header (atomicMax on the
// bits of |x|: NaN above infinity above every finite value), then packs.
#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"
#include "exec/backend/grad_format.h"

namespace loom::cuda {

namespace {

using namespace exec::grad_format;

__global__ void pack_bf16_kernel(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = to_bf16(x[i]);
}

__global__ void amax_kernel(const float* x, unsigned int* amax_bits, int64_t n) {
  unsigned int m = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    m = max(m, bits(x[i]) & 0x7fffffffu);
  for (int off = 16; off > 0; off /= 2) m = max(m, __shfl_down_sync(0xffffffffu, m, off));
  if ((threadIdx.x & 31) == 0) atomicMax(amax_bits, m);
}

__global__ void pack_fp8_kernel(const float* x, uint8_t* y, int64_t n) {
  const uint32_t amax_bits = *reinterpret_cast<const unsigned int*>(y);
  const float s = fp8_pack_factor(from_bits(amax_bits));
  const bool finite = amax_bits <= 0x7f7fffffu;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[4 + i] = finite ? to_e4m3(x[i] * s) : uint8_t(0x7fu);
}

__global__ void unpack_bf16_kernel(const uint16_t* x, float* y, int64_t n, bool accumulate) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = from_bf16(x[i]);
    y[i] = accumulate ? y[i] + v : v;
  }
}

__global__ void unpack_fp8_kernel(const uint8_t* x, float* y, int64_t n, bool accumulate) {
  const float s = fp8_unpack_factor(from_bits(*reinterpret_cast<const unsigned int*>(x)));
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = from_e4m3(x[4 + i]) * s;
    y[i] = accumulate ? y[i] + v : v;
  }
}

}  // namespace

Status grad_pack(const float* x, uint8_t* y, int64_t n, exec::GradFormat format, cudaStream_t stream) {
  if (format == exec::GradFormat::kBf16) {
    if (n <= 0) return Status::ok();
    pack_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, reinterpret_cast<uint16_t*>(y), n);
    LOOM_CUDA_CHECK_LAUNCH();
    return Status::ok();
  }
  LOOM_CUDA_CHECK(cudaMemsetAsync(y, 0, 4, stream));
  if (n <= 0) return Status::ok();
  amax_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, reinterpret_cast<unsigned int*>(y), n);
  LOOM_CUDA_CHECK_LAUNCH();
  pack_fp8_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status grad_unpack(const uint8_t* x, float* y, int64_t n, exec::GradFormat format, bool accumulate,
                   cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  if (format == exec::GradFormat::kBf16)
    unpack_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(reinterpret_cast<const uint16_t*>(x), y, n, accumulate);
  else
    unpack_fp8_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n, accumulate);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace loom::cuda
