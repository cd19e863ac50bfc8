// Elementwise helpers: y += x, y *= s, the triad, column fills, and the sums
// (of squares: the gradient norm; plain: the loss), block partial sums in
// double, then one block adds them.
#include <algorithm>

#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

constexpr unsigned kSumBlocks = 512;

__global__ void add_kernel(float* y, const float* x, int64_t n, const float* base) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = (base ? base[i] : y[i]) + x[i];
}

__global__ void triad_kernel(float* z, const float* x, const float* y, float a, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    z[i] = x[i] + a * y[i];
}

__global__ void scale_kernel(float* y, float s, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] *= s;
}

__global__ void fill_columns_kernel(float* x, int64_t R, int64_t ld, int64_t c_begin, int64_t width, float value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < R * width;
       i += int64_t(gridDim.x) * blockDim.x)
    x[(i / width) * ld + c_begin + i % width] = value;
}

template <bool kSquare>
__global__ void sum_partial(const float* x, int64_t n, double* partial) {
  __shared__ double scratch[kThreads / 32];
  double s = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    s += kSquare ? double(x[i]) * double(x[i]) : double(x[i]);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_partials(const double* partial, unsigned count, double* out) {
  __shared__ double scratch[kThreads / 32];
  double s = 0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) *out = s;
}

__global__ void accumulate_scaled(const double* sum, double scale, double* acc) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *acc += *sum * scale;
}

// The multi-tensor sum of squares: block (x, y) sums its stride of segment
// first + y into partial[y * gridDim.x + x]; then one block per segment adds
// its row into out[y].
__global__ void sum_squares_multi_partial(const float* x, const int64_t* table, int64_t first, double* partial) {
  __shared__ double scratch[kThreads / 32];
  const int64_t* e = table + 2 * (first + int64_t(blockIdx.y));
  const float* xs = x + e[0];
  const int64_t n = e[1];
  double s = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    s += double(xs[i]) * double(xs[i]);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) partial[int64_t(blockIdx.y) * gridDim.x + blockIdx.x] = s;
}

__global__ void sum_rows(const double* partial, unsigned width, double* out) {
  __shared__ double scratch[kThreads / 32];
  const double* row = partial + int64_t(blockIdx.x) * width;
  double s = 0;
  for (unsigned i = threadIdx.x; i < width; i += blockDim.x) s += row[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}

}  // namespace

Status add_inplace(float* y, const float* x, int64_t n, cudaStream_t stream, const float* base) {
  if (n <= 0) return Status::ok();
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(y, x, n, base);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status triad(float* z, const float* x, const float* y, float a, int64_t n, cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  triad_kernel<<<grid_for(n), kThreads, 0, stream>>>(z, x, y, a, n);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status scale_inplace(float* y, float s, int64_t n, cudaStream_t stream) {
  if (n <= 0) return Status::ok();
  scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(y, s, n);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status fill_columns(float* x, int64_t R, int64_t ld, int64_t c_begin, int64_t c_end, float value,
                    cudaStream_t stream) {
  const int64_t width = c_end - c_begin;
  if (R <= 0 || width <= 0) return Status::ok();
  fill_columns_kernel<<<grid_for(R * width), kThreads, 0, stream>>>(x, R, ld, c_begin, width, value);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

namespace {

// Block partial sums into scratch allocated on the stream, then one block adds them.
template <bool kSquare>
Status launch_sum(const float* x, int64_t n, double* out, cudaStream_t stream) {
  StreamScratch scratch(kSumBlocks * sizeof(double), stream);
  LOOM_RETURN_IF_ERROR(scratch.status());
  auto* partial = reinterpret_cast<double*>(scratch.get());
  const unsigned blocks = n > 0 ? unsigned(std::min<int64_t>(kSumBlocks, (n + kThreads - 1) / kThreads)) : 1;
  sum_partial<kSquare><<<blocks, kThreads, 0, stream>>>(x, n, partial);
  LOOM_CUDA_CHECK_LAUNCH();
  sum_partials<<<1, kThreads, 0, stream>>>(partial, blocks, out);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace

Status sum(const float* x, int64_t n, double* out, cudaStream_t stream) { return launch_sum<false>(x, n, out, stream); }

Status sum_squares(const float* x, int64_t n, double* out, cudaStream_t stream) {
  return launch_sum<true>(x, n, out, stream);
}

Status accumulate_sum(const float* x, int64_t n, double scale, double* acc, cudaStream_t stream) {
  StreamScratch total(sizeof(double), stream);
  LOOM_RETURN_IF_ERROR(total.status());
  auto* t = reinterpret_cast<double*>(total.get());
  LOOM_RETURN_IF_ERROR(launch_sum<false>(x, n, t, stream));
  accumulate_scaled<<<1, 1, 0, stream>>>(t, scale, acc);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status sum_squares_multi(const float* x, const int64_t* table, int64_t count, int64_t max_n, double* out,
                         cudaStream_t stream) {
  if (count <= 0) return Status::ok();
  const unsigned width = multi_blocks_for(max_n);
  for (int64_t first = 0; first < count; first += kMaxGridY) {
    const unsigned rows = unsigned(std::min<int64_t>(kMaxGridY, count - first));
    StreamScratch scratch(size_t(rows) * width * sizeof(double), stream);
    LOOM_RETURN_IF_ERROR(scratch.status());
    auto* partial = reinterpret_cast<double*>(scratch.get());
    sum_squares_multi_partial<<<dim3(width, rows), kThreads, 0, stream>>>(x, table, first, partial);
    LOOM_CUDA_CHECK_LAUNCH();
    sum_rows<<<rows, kThreads, 0, stream>>>(partial, width, out + first);
    LOOM_CUDA_CHECK_LAUNCH();
  }
  return Status::ok();
}

}  // namespace loom::cuda
