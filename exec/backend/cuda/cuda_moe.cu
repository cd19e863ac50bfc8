// The mixture-of-experts ops (exec/backend/kernel_ops.h) on the GPU: the same
// arithmetic as cpu_moe.cc. The router runs a thread per token (E and k are
// small: tens to hundreds of experts); the permutations run a thread per
// element, each output element a fixed-order sum.
#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::cuda {

namespace {

__global__ void router_forward_kernel(const float* logits, float* probs, float* lse, int32_t* topk_idx, float* topk_w,
                                      int64_t N, int64_t E, int64_t K, bool normalize) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < N; t += int64_t(gridDim.x) * blockDim.x) {
    const float* z = logits + t * E;
    float* p = probs + t * E;
    float mx = z[0];
    for (int64_t e = 1; e < E; ++e) mx = fmaxf(mx, z[e]);
    double s = 0;
    for (int64_t e = 0; e < E; ++e) s += exp(double(z[e]) - mx);
    lse[t] = float(mx + log(s));
    for (int64_t e = 0; e < E; ++e) p[e] = float(exp(double(z[e]) - mx) / s);
    int32_t* idx = topk_idx + t * K;
    float* w = topk_w + t * K;
    double sel = 0;
    for (int64_t j = 0; j < K; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken |= idx[i] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      idx[j] = int32_t(best);
      w[j] = p[best];
      sel += p[best];
    }
    if (normalize)
      for (int64_t j = 0; j < K; ++j) w[j] = float(w[j] / sel);
  }
}

__global__ void router_backward_kernel(const float* probs, const float* lse, const int32_t* topk_idx,
                                       const float* topk_w, const float* dw_all, const float* aux_grad, float z_grad,
                                       float* dlogits, int64_t N, int64_t E, int64_t K, bool normalize) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < N; t += int64_t(gridDim.x) * blockDim.x) {
    const float* p = probs + t * E;
    const int32_t* idx = topk_idx + t * K;
    const float* w = topk_w + t * K;
    const float* dw = dw_all ? dw_all + t * K : nullptr;
    float* dz = dlogits + t * E;
    for (int64_t e = 0; e < E; ++e) dz[e] = aux_grad ? aux_grad[e] : 0.f;
    if (dw) {
      if (normalize) {
        double S = 0, dot = 0;
        for (int64_t j = 0; j < K; ++j) {
          S += p[idx[j]];
          dot += double(dw[j]) * w[j];
        }
        for (int64_t j = 0; j < K; ++j) dz[idx[j]] += float((dw[j] - dot) / S);
      } else {
        for (int64_t j = 0; j < K; ++j) dz[idx[j]] += dw[j];
      }
    }
    double pd = 0;
    for (int64_t e = 0; e < E; ++e) pd += double(p[e]) * dz[e];
    const double zg = double(z_grad) * lse[t];
    for (int64_t e = 0; e < E; ++e) dz[e] = float(p[e] * (double(dz[e]) - pd + zg));
  }
}

__global__ void gather_kernel(const float* x, const int32_t* rows, float* y, int64_t M, int64_t C) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < M * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / C, c = i % C;
    y[i] = x[int64_t(rows[r]) * C + c];
  }
}

__global__ void unpermute_kernel(const float* y, const int32_t* slot_rows, const float* w, float* out, int64_t N,
                                 int64_t K, int64_t C, bool accumulate) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / C, c = i % C;
    float acc = accumulate ? out[i] : 0.f;
    for (int64_t j = 0; j < K; ++j) {
      const int32_t r = slot_rows[t * K + j];
      if (r < 0) continue;
      acc += (w ? w[t * K + j] : 1.f) * y[int64_t(r) * C + c];
    }
    out[i] = acc;
  }
}

// One block per slot: dy's row, and dw as a block reduction of dout . y.
__global__ void unpermute_backward_kernel(const float* dout, const float* y, const int32_t* slot_rows, const float* w,
                                          float* dy, float* dw, int64_t N, int64_t K, int64_t C) {
  __shared__ double part[kThreads];
  for (int64_t s = blockIdx.x; s < N * K; s += gridDim.x) {
    const int64_t t = s / K;
    const int32_t r = slot_rows[s];
    double dot = 0;
    if (r >= 0) {
      const float* d = dout + t * C;
      const float* yr = y + int64_t(r) * C;
      float* dyr = dy + int64_t(r) * C;
      const float ws = w[s];
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        dot += double(d[c]) * yr[c];
        dyr[c] = ws * d[c];
      }
    }
    part[threadIdx.x] = dot;
    __syncthreads();
    for (int off = blockDim.x / 2; off > 0; off /= 2) {
      if (int(threadIdx.x) < off) part[threadIdx.x] += part[threadIdx.x + off];
      __syncthreads();
    }
    if (threadIdx.x == 0) dw[s] = r >= 0 ? float(part[0]) : 0.f;
    __syncthreads();
  }
}

}  // namespace

Status moe_router_forward(const float* logits, float* probs, float* lse, int32_t* topk_idx, float* topk_w, int64_t N,
                          int64_t E, int64_t k, bool normalize, cudaStream_t stream) {
  if (N <= 0) return Status::ok();
  router_forward_kernel<<<grid_for(N), kThreads, 0, stream>>>(logits, probs, lse, topk_idx, topk_w, N, E, k, normalize);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status moe_router_backward(const float* probs, const float* lse, const int32_t* topk_idx, const float* topk_w,
                           const float* dw, const float* aux_grad, float z_grad, float* dlogits, int64_t N, int64_t E,
                           int64_t k, bool normalize, cudaStream_t stream) {
  if (N <= 0) return Status::ok();
  router_backward_kernel<<<grid_for(N), kThreads, 0, stream>>>(probs, lse, topk_idx, topk_w, dw, aux_grad, z_grad,
                                                               dlogits, N, E, k, normalize);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status moe_gather(const float* x, const int32_t* rows, float* y, int64_t M, int64_t C, cudaStream_t stream) {
  if (M * C <= 0) return Status::ok();
  gather_kernel<<<grid_for(M * C), kThreads, 0, stream>>>(x, rows, y, M, C);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status moe_unpermute(const float* y, const int32_t* slot_rows, const float* w, float* out, int64_t N, int64_t k,
                     int64_t C, bool accumulate, cudaStream_t stream) {
  if (N * C <= 0) return Status::ok();
  unpermute_kernel<<<grid_for(N * C), kThreads, 0, stream>>>(y, slot_rows, w, out, N, k, C, accumulate);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status moe_unpermute_backward(const float* dout, const float* y, const int32_t* slot_rows, const float* w, float* dy,
                              float* dw, int64_t N, int64_t k, int64_t C, cudaStream_t stream) {
  if (N * k <= 0) return Status::ok();
  const int64_t slots = N * k;
  const unsigned blocks = unsigned(slots < 65535 ? slots : 65535);
  unpermute_backward_kernel<<<blocks, kThreads, 0, stream>>>(dout, y, slot_rows, w, dy, dw, N, k, C);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace loom::cuda
