// Launch helpers shared by the kernel files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace loom::cuda {

// Scratch memory ordered on a stream (cudaMallocAsync from the device's pool,
// which the CUDA backend keeps cached), freed on the stream when it goes out
// of scope, on every path.
class StreamScratch {
 public:
  StreamScratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    err_ = cudaMallocAsync(reinterpret_cast<void**>(&p_), bytes, stream);
  }
  ~StreamScratch() {
    if (p_) cudaFreeAsync(p_, stream_);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  char* get() const { return p_; }
  Status status() const {
    if (err_ == cudaSuccess) return Status::ok();
    return internal_error(std::string("cudaMallocAsync (scratch) failed: ") + cudaGetErrorString(err_));
  }

 private:
  char* p_ = nullptr;
  cudaStream_t stream_;
  cudaError_t err_ = cudaSuccess;
};

constexpr int kThreads = 256;
// Blocks for a grid-stride loop over n elements (capped: the loop covers the rest).
inline unsigned grid_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : b > 65535 * 16 ? 65535 * 16 : b);
}

// The multi-tensor kernels: one grid row per table segment (gridDim.y is at
// most 65535, so longer tables take several launches), and per row the blocks
// the largest segment needs at four elements a thread.
constexpr int64_t kMaxGridY = 65535;
inline unsigned multi_blocks_for(int64_t max_n) {
  const int64_t per_block = int64_t(kThreads) * 4;
  const int64_t b = (max_n + per_block - 1) / per_block;
  return unsigned(b < 1 ? 1 : b > 1024 ? 1024 : b);
}

// Sum over a block of kThreads threads (shared scratch of kThreads doubles).
__device__ inline double block_sum(double v, double* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double total = 0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < int(blockDim.x + 31) / 32; ++w) total += scratch[w];
    scratch[0] = total;
  }
  __syncthreads();
  total = scratch[0];
  __syncthreads();
  return total;
}

// Max over a block (shared scratch of kThreads / 32 floats).
__device__ inline float block_max(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = scratch[0];
    for (int w = 1; w < int(blockDim.x + 31) / 32; ++w) m = fmaxf(m, scratch[w]);
    scratch[0] = m;
  }
  __syncthreads();
  const float m = scratch[0];
  __syncthreads();
  return m;
}

// A norm's fused residual add over row n of (., C): this thread's elements
// of x + res, written to sum and passed to f; returns the row to read back
// (each thread reads back only what it wrote: the norms' loops share this
// stride). Without res, f sees the row of x, which is returned.
template <typename F>
__device__ inline const float* residual_row(const float* x, const float* res, float* sum, int64_t n, int64_t C, F&& f) {
  const float* xn = x + n * C;
  if (!res) {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) f(xn[c]);
    return xn;
  }
  const float* rn = res + n * C;
  float* sn = sum + n * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = xn[c] + rn[c];
    sn[c] = v;
    f(v);
  }
  return sn;
}

}  // namespace loom::cuda
