// Vocab-parallel token embedding and its backward (as cpu::embedding_*).
// The backward groups the rows by token with a stable radix sort (CUB), so
// each vocabulary row's gradient rows are added in row order, as on the CPU:
// deterministic, no atomics, and every (token, column) pair in parallel.
#include <algorithm>
#include <cub/device/device_radix_sort.cuh>

#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

__global__ void embedding_forward_kernel(const int32_t* tokens, const float* wte, float* out, int64_t N, int64_t C,
                                         int64_t v_begin, int64_t V) {
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < N * C;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = idx / C, c = idx % C, row = int64_t(tokens[n]) - v_begin;
    out[idx] = (row >= 0 && row < V) ? wte[row * C + c] : 0.0f;
  }
}

// Key of row n: its row of the local slice, or V for tokens outside it.
__global__ void embedding_keys_kernel(const int32_t* tokens, uint32_t* keys, uint32_t* rows, int64_t N,
                                      int64_t v_begin, int64_t V) {
  for (int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; n < N; n += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = int64_t(tokens[n]) - v_begin;
    keys[n] = uint32_t(row >= 0 && row < V ? row : V);
    rows[n] = uint32_t(n);
  }
}

// Thread (column c, sorted position i): when i starts a run of one token,
// add the run's gradient rows (in row order) to that vocabulary row.
__global__ void embedding_runs_kernel(const uint32_t* keys, const uint32_t* rows, const float* dout, float* dwte,
                                      int64_t N, int64_t C, int64_t V) {
  const int64_t c = int64_t(blockIdx.x) * 32 + (threadIdx.x % 32);
  if (c >= C) return;
  const int64_t per_block = blockDim.x / 32;
  for (int64_t i = int64_t(blockIdx.y) * per_block + threadIdx.x / 32; i < N; i += int64_t(gridDim.y) * per_block) {
    const uint32_t key = keys[i];
    if (key == uint32_t(V) || (i > 0 && keys[i - 1] == key)) continue;
    float acc = dwte[int64_t(key) * C + c];
    for (int64_t j = i; j < N && keys[j] == key; ++j) acc += dout[int64_t(rows[j]) * C + c];
    dwte[int64_t(key) * C + c] = acc;
  }
}

}  // namespace

Status embedding_forward(const int32_t* tokens, const float* wte, float* out, int64_t N, int64_t C, int64_t v_begin,
                         int64_t V, cudaStream_t stream) {
  if (N * C <= 0) return Status::ok();
  embedding_forward_kernel<<<grid_for(N * C), kThreads, 0, stream>>>(tokens, wte, out, N, C, v_begin, V);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status embedding_backward(const int32_t* tokens, const float* dout, float* dwte, int64_t N, int64_t C, int64_t v_begin,
                          int64_t V, cudaStream_t stream) {
  if (N * C <= 0) return Status::ok();
  if (N > int64_t(INT32_MAX) || V >= int64_t(UINT32_MAX)) return unsupported("embedding backward: too many rows");
  int end_bit = 1;  // keys are 0..V (V: outside the slice)
  while (end_bit < 32 && (uint64_t(1) << end_bit) <= uint64_t(V)) ++end_bit;
  size_t scratch = 0;
  LOOM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, scratch, static_cast<const uint32_t*>(nullptr),
                                                  static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                                  static_cast<uint32_t*>(nullptr), int(N), 0, end_bit, stream));
  // keys, rows, sorted keys, sorted rows (each 256-byte aligned), then CUB's
  // scratch, in one stream-ordered block freed on every path.
  const size_t n4 = (size_t(N) * sizeof(uint32_t) + 255) / 256 * 256;
  StreamScratch mem(4 * n4 + scratch, stream);
  LOOM_RETURN_IF_ERROR(mem.status());
  auto* keys = reinterpret_cast<uint32_t*>(mem.get());
  auto* rows = reinterpret_cast<uint32_t*>(mem.get() + n4);
  auto* skeys = reinterpret_cast<uint32_t*>(mem.get() + 2 * n4);
  auto* srows = reinterpret_cast<uint32_t*>(mem.get() + 3 * n4);
  embedding_keys_kernel<<<grid_for(N), kThreads, 0, stream>>>(tokens, keys, rows, N, v_begin, V);
  LOOM_CUDA_CHECK_LAUNCH();
  // Stable: rows of one token keep their order.
  LOOM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(mem.get() + 4 * n4, scratch, keys, skeys, rows, srows, int(N), 0,
                                                  end_bit, stream));
  const int64_t positions_per_block = kThreads / 32;
  const dim3 grid(unsigned((C + 31) / 32),
                  unsigned(std::min<int64_t>(65535, (N + positions_per_block - 1) / positions_per_block)));
  embedding_runs_kernel<<<grid, kThreads, 0, stream>>>(skeys, srows, dout, dwte, N, C, V);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace loom::cuda
