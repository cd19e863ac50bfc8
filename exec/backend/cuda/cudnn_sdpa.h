// Fused scaled-dot-product attention through cuDNN's graph API (the
// cudnn-frontend headers, NVIDIA's flash-attention engines for sm_80+):
// causal or unmasked, grouped KV heads, the (B,T,H,D) layout by strides,
// the row log-sum-exp saved for backward. One of LOOM_CUDA_ATTENTION's
// paths (cuda_kernels.cc): it replaces the cuBLAS path's materialized T x T
// scores in bf16 / fp16 runs.
//
// cuDNN is loaded at run time (the frontend's dynamic loading): libcudnn.so.9
// from the library path (a CUDA toolkit's cuDNN, or the nvidia-cudnn-cu13
// wheel of a Python ML environment; the bundle's launcher adds its folder),
// or $LOOM_CUDNN_LIBRARY. A build or a node without cuDNN still works: the
// caller falls back to the cuBLAS path with a one-line notice. A build
// without the cudnn-frontend headers (scripts/setup.sh installs them from
// the nvidia-cudnn-frontend wheel) has make_cudnn_sdpa() fail the same way.
//
// Tensors: q, out, dq (B,T,Hq,D); k, v, dk, dv (B,T,Hk,D), 16-bit (bf16 or
// fp16 as the shape says, stored as uint16); lse (B,Hq,T) fp32, natural log
// of the row's sum of exp(scale * q.k), scale 1/sqrt(D) (the same contract
// as kernel_ops.h AttentionForward, so ring attention's merge applies).
// Each shape's plan is built once (heuristics mode A; a refused forward is
// retried through cuDNN's composite SDPA node) and cached; workspace is the
// caller's. The backward is cuDNN's default (dQ accumulated with atomics:
// not bit-reproducible); LOOM_CUDNN_DETERMINISTIC=1 asks for its
// deterministic algorithm. The frontend is pointed at this process's CUDA
// runtime (CUDNN_FRONTEND_CUDART_LIB_NAME, unless set).
// Not thread-safe: one per stream, like the kernel table.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>

#include "core/status.h"

namespace loom::cuda {

struct SdpaShape {
  int64_t B = 0, T = 0, Hq = 0, Hk = 0, D = 0;
  bool causal = true;
  bool bf16 = true;  // false: fp16
  bool operator<(const SdpaShape& o) const {
    return std::tie(B, T, Hq, Hk, D, causal, bf16) < std::tie(o.B, o.T, o.Hq, o.Hk, o.D, o.causal, o.bf16);
  }
  // "B=8 T=1024 Hq=12 Hk=12 D=64 causal bf16"
  std::string to_string() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " Hq=" + std::to_string(Hq) +
           " Hk=" + std::to_string(Hk) + " D=" + std::to_string(D) + (causal ? " causal" : " unmasked") +
           (bf16 ? " bf16" : " fp16");
  }
};

class CudnnSdpa {
 public:
  virtual ~CudnnSdpa() = default;
  // Builds (once) and returns the workspace bytes of the shape's forward or
  // backward plan; kUnsupported, naming the shape and cuDNN's reason, when
  // no engine takes it (head dim, alignment, GPU generation).
  virtual Result<size_t> prepare(const SdpaShape& s, bool backward) = 0;
  // Both enqueue on the stream; prepare(s, ...) must have succeeded.
  virtual Status forward(const SdpaShape& s, const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* out,
                         float* lse, void* workspace) = 0;
  virtual Status backward(const SdpaShape& s, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                          const uint16_t* out, const uint16_t* dout, const float* lse, uint16_t* dq, uint16_t* dk,
                          uint16_t* dv, void* workspace) = 0;
  // "cuDNN 9.19.0 (frontend 1.32.0)".
  virtual std::string version() const = 0;
};

// Loads cuDNN (once per process) and makes a handle on `stream`. Fails with
// a message naming what is missing and how to provide it; never throws.
Result<std::unique_ptr<CudnnSdpa>> make_cudnn_sdpa(cudaStream_t stream);

// Whether this build has the cuDNN path (the cudnn-frontend headers were found).
bool cudnn_sdpa_built();
// Whether libcudnn has been loaded in this process (it then stays).
bool cudnn_loaded();
// forward() and backward() calls that ran, in this process (tests: proof
// that a kernel table's attention went through cuDNN, not its fallback).
int64_t cudnn_sdpa_executions();

}  // namespace loom::cuda
