// The mixture-of-experts ops (exec/backend/kernel_ops.h) on the GPU: the
// same arithmetic as cpu_moe.cc (the router's per-token code is shared,
// moe_router.h). The router runs a thread per token (E and k are small: tens
// to hundreds of experts); the permutations run a thread per element, each
// output element a fixed-order sum.
#include "exec/backend/cuda/cuda_check.h"
#include "exec/backend/cuda/cuda_launch.h"
#include "exec/backend/cuda/cuda_ops.h"
#include "exec/backend/moe_router.h"

namespace loom::cuda {

namespace {

__global__ void router_forward_kernel(const float* logits, float* probs, float* lse, int32_t* topk_idx, float* topk_w,
                                      int64_t N, int64_t E, int64_t K, bool normalize) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < N; t += int64_t(gridDim.x) * blockDim.x)
    exec::moe_router::route_token(logits + t * E, probs + t * E, lse + t, topk_idx + t * K, topk_w + t * K, E, K,
                                  normalize);
}

__global__ void router_backward_kernel(const float* probs, const float* lse, const int32_t* topk_idx,
                                       const float* topk_w, const float* dw, const float* aux_grad, float z_grad,
                                       float* dlogits, int64_t N, int64_t E, int64_t K, bool normalize) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < N; t += int64_t(gridDim.x) * blockDim.x)
    exec::moe_router::route_token_backward(probs + t * E, lse[t], topk_idx + t * K, topk_w + t * K,
                                           dw ? dw + t * K : nullptr, aux_grad, z_grad, dlogits + t * E, E, K,
                                           normalize);
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

__global__ void sigmoid_gate_forward_kernel(const float* g, const float* y, float* out, int64_t N, int64_t C) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N * C; i += int64_t(gridDim.x) * blockDim.x) {
    const float s = float(1.0 / (1.0 + exp(-double(g[i / C]))));
    out[i] += s * y[i];
  }
}

// One block per row: dy, and dg as a block reduction of dout . y.
__global__ void sigmoid_gate_backward_kernel(const float* dout, const float* g, const float* y, float* dy, float* dg,
                                             int64_t N, int64_t C) {
  __shared__ double part[kThreads];
  for (int64_t t = blockIdx.x; t < N; t += gridDim.x) {
    const double s = 1.0 / (1.0 + exp(-double(g[t])));
    double dot = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      dot += double(dout[t * C + c]) * y[t * C + c];
      dy[t * C + c] = float(s * dout[t * C + c]);
    }
    part[threadIdx.x] = dot;
    __syncthreads();
    for (int off = blockDim.x / 2; off > 0; off /= 2) {
      if (int(threadIdx.x) < off) part[threadIdx.x] += part[threadIdx.x + off];
      __syncthreads();
    }
    if (threadIdx.x == 0) dg[t] = float(s * (1 - s) * part[0]);
    __syncthreads();
  }
}

}  // namespace

Status sigmoid_gate_forward(const float* g, const float* y, float* out, int64_t N, int64_t C, cudaStream_t stream) {
  if (N * C <= 0) return Status::ok();
  sigmoid_gate_forward_kernel<<<grid_for(N * C), kThreads, 0, stream>>>(g, y, out, N, C);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status sigmoid_gate_backward(const float* dout, const float* g, const float* y, float* dy, float* dg, int64_t N,
                             int64_t C, cudaStream_t stream) {
  if (N <= 0) return Status::ok();
  const unsigned blocks = unsigned(N < 65535 ? N : 65535);
  sigmoid_gate_backward_kernel<<<blocks, kThreads, 0, stream>>>(dout, g, y, dy, dg, N, C);
  LOOM_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

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
