// Rotary position embedding in place (HF "rotate_half" pairs (i, i + D/2)),
// as cpu::rope_*: angles pos * theta^(-2i/D) evaluated in double.
#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

__global__ void rope_kernel(float* x, int64_t B, int64_t T, int64_t H, int64_t D, double log_theta, int64_t pos_offset,
                            float direction) {
  const int64_t half = D / 2, total = B * T * H * half;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half, bth = idx / half, t = (bth / H) % T;
    const double freq = exp(-2.0 * double(i) / double(D) * log_theta);
    const double angle = double(t + pos_offset) * freq;
    const float c = float(cos(angle)), s = direction * float(sin(angle));
    float* xh = x + bth * D;
    const float x1 = xh[i], x2 = xh[i + half];
    xh[i] = x1 * c - x2 * s;
    xh[i + half] = x2 * c + x1 * s;
  }
}

Status rope(float* x, int64_t B, int64_t T, int64_t H, int64_t D, float theta, int64_t pos_offset, float direction,
            cudaStream_t stream) {
  if (D <= 0 || D % 2 != 0) return invalid_argument("rope: head dim D=" + std::to_string(D) + " must be positive and even");
  const int64_t total = B * T * H * (D / 2);
  if (total <= 0) return Status::ok();
  rope_kernel<<<grid_for(total), kThreads, 0, stream>>>(x, B, T, H, D, std::log(double(theta)), pos_offset, direction);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

// Inverse frequencies by value (the kernel parameter space holds them; no
// device allocation or copy per call).
struct RopeFreqs {
  double f[kRopeMaxHalf];
};

__global__ void rope_freqs_kernel(float* x, int64_t B, int64_t T, int64_t H, int64_t D, RopeFreqs freqs,
                                  int64_t pos_offset, float direction) {
  const int64_t half = D / 2, total = B * T * H * half;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half, bth = idx / half, t = (bth / H) % T;
    const double angle = double(t + pos_offset) * freqs.f[i];
    const float c = float(cos(angle)), s = direction * float(sin(angle));
    float* xh = x + bth * D;
    const float x1 = xh[i], x2 = xh[i + half];
    xh[i] = x1 * c - x2 * s;
    xh[i + half] = x2 * c + x1 * s;
  }
}

Status rope_freqs(float* x, int64_t B, int64_t T, int64_t H, int64_t D, const double* inv_freq, int64_t pos_offset,
                  float direction, cudaStream_t stream) {
  if (D <= 0 || D % 2 != 0) return invalid_argument("rope: head dim D=" + std::to_string(D) + " must be positive and even");
  if (D / 2 > kRopeMaxHalf)
    return unsupported("rope with a frequency table: head dim D=" + std::to_string(D) + " is above " +
                       std::to_string(2 * kRopeMaxHalf));
  const int64_t total = B * T * H * (D / 2);
  if (total <= 0) return Status::ok();
  RopeFreqs freqs{};
  for (int64_t i = 0; i < D / 2; ++i) freqs.f[i] = inv_freq[i];
  rope_freqs_kernel<<<grid_for(total), kThreads, 0, stream>>>(x, B, T, H, D, freqs, pos_offset, direction);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace

Status rope_freqs_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, const double* inv_freq,
                          int64_t pos_offset, cudaStream_t stream) {
  return rope_freqs(x, B, T, H, D, inv_freq, pos_offset, +1.0f, stream);
}

Status rope_freqs_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D, const double* inv_freq,
                           int64_t pos_offset, cudaStream_t stream) {
  return rope_freqs(dx, B, T, H, D, inv_freq, pos_offset, -1.0f, stream);
}

Status rope_forward(float* x, int64_t B, int64_t T, int64_t H, int64_t D, float theta, int64_t pos_offset,
                    cudaStream_t stream) {
  return rope(x, B, T, H, D, theta, pos_offset, +1.0f, stream);
}

Status rope_backward(float* dx, int64_t B, int64_t T, int64_t H, int64_t D, float theta, int64_t pos_offset,
                     cudaStream_t stream) {
  return rope(dx, B, T, H, D, theta, pos_offset, -1.0f, stream);
}

}  // namespace loom::cuda
