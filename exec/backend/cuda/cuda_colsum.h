// Column sums over many rows, for the weight and bias gradients of norms and
// biases (out_k[c] += sum over n of f_k(n, c)), spread over the whole GPU and
// deterministic: blocks of 32 columns x 256 rows write partial sums (double)
// in a fixed order, then one thread per column adds its partials in chunk
// order. A one-thread-per-column loop over all N rows would use C / 256
// blocks: a handful of SMs for a whole layer's tokens.
#pragma once

#include <cstdint>

#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"

namespace loom::cuda {

constexpr int kColTile = 32;        // columns per block: one warp, coalesced rows
constexpr int kRowLanes = 8;        // rows a block reads at once
constexpr int64_t kRowChunk = 256;  // rows per block

// f(n, c, v) writes the K summands of row n, column c into v[0..K).
// Block (column tile x, y) sums the row chunks y, y + gridDim.y, ... each
// into its own partial (chunks may outnumber the grid's 65535 rows of blocks).
template <int K, typename F>
__global__ void colsum_partial_kernel(F f, int64_t N, int64_t C, int64_t chunks, double* partial) {
  __shared__ double s[K][kRowLanes][kColTile];
  const int tx = int(threadIdx.x) % kColTile, ty = int(threadIdx.x) / kColTile;
  const int64_t c = int64_t(blockIdx.x) * kColTile + tx;
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int64_t r0 = chunk * kRowChunk, r1 = r0 + kRowChunk < N ? r0 + kRowChunk : N;
    double acc[K];
    for (int k = 0; k < K; ++k) acc[k] = 0;
    if (c < C)
      for (int64_t n = r0 + ty; n < r1; n += kRowLanes) {
        double v[K];
        f(n, c, v);
        for (int k = 0; k < K; ++k) acc[k] += v[k];
      }
    for (int k = 0; k < K; ++k) s[k][ty][tx] = acc[k];
    __syncthreads();
    if (ty == 0 && c < C)
      for (int k = 0; k < K; ++k) {
        double t = 0;
        for (int l = 0; l < kRowLanes; ++l) t += s[k][l][tx];
        partial[(int64_t(k) * chunks + chunk) * C + c] = t;
      }
    __syncthreads();
  }
}

template <int K>
__global__ void colsum_combine_kernel(const double* partial, int64_t chunks, int64_t C, float* out0, float* out1) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int k = 0; k < K; ++k) {
    double t = 0;
    for (int64_t j = 0; j < chunks; ++j) t += partial[(k * chunks + j) * C + c];
    float* out = k == 0 ? out0 : out1;
    out[c] += float(t);
  }
}

// out0[c] (and out1[c] when K == 2) += the column sums of f over N rows.
template <int K, typename F>
Status column_sums(F f, int64_t N, int64_t C, float* out0, float* out1, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return Status::ok();
  const int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
  StreamScratch scratch(size_t(K * chunks * C) * sizeof(double), stream);
  LOOM_RETURN_IF_ERROR(scratch.status());
  auto* partial = reinterpret_cast<double*>(scratch.get());
  const dim3 grid(unsigned((C + kColTile - 1) / kColTile), unsigned(chunks < 65535 ? chunks : 65535));
  colsum_partial_kernel<K><<<grid, kColTile * kRowLanes, 0, stream>>>(f, N, C, chunks, partial);
  LOOM_CUDA_CHECK_LAUNCH();
  colsum_combine_kernel<K><<<unsigned((C + kThreads - 1) / kThreads), kThreads, 0, stream>>>(partial, chunks, C, out0,
                                                                                            out1);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace loom::cuda
