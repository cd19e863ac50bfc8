// The CUDA backend's microbenchmarks for `loom calibrate --backend cuda`
// (kernel_bench.h): cuBLAS bf16 GEMMs (fp32 accumulate) and the CUDA kernels
// of cuda_ops.h on device buffers. Calls are asynchronous on one stream;
// synchronize() waits for them. Errors in a call are fatal for the
// measurement: they are printed and the process exits non-zero (a kernel
// that fails cannot be timed).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "exec/backend/cuda/cuda_ops.h"
#include "exec/backend/kernel_bench.h"

#include "exec/backend/backend_error.h"

namespace loom::exec {

namespace {

// A failed call throws a BackendError (exec/backend/backend_error.h) that
// the calibration's entry point returns as its Status.
void must(const Status& s) {
  if (!s.is_ok()) throw_backend_error(s.with_context("CUDA"));
}
void must(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  const Status s = e == cudaErrorMemoryAllocation ? resource_exhausted(std::string("CUDA: ") + what + ": out of device memory")
                                                  : internal_error(std::string("CUDA: ") + what + ": " +
                                                                   cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  throw_backend_error(s);
}

// A device allocation owned by the callables that use it.
struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) {
    must(cudaMalloc(&p, bytes), "cudaMalloc");
    must(cudaMemset(p, 0, bytes), "cudaMemset");
  }
  ~DevBuf() { cudaFree(p); }
  float* f() const { return static_cast<float*>(p); }
  uint16_t* h() const { return static_cast<uint16_t*>(p); }
};

class CudaKernelBench final : public KernelBench {
 public:
  explicit CudaKernelBench(int device) {
    must(cudaSetDevice(device), "cudaSetDevice");
    must(cudaStreamCreate(&stream_), "cudaStreamCreate");
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) must(cudaErrorInitializationError, "cublasCreate");
    handle_ = h;
    name_ = "cuda:" + std::to_string(device) + " " + cuda::device_description(device);
  }
  ~CudaKernelBench() override {
    cublasDestroy(handle_);
    cudaStreamDestroy(stream_);
  }
  std::string name() const override { return name_; }
  int sm_arch() const override {
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    return 10 * major + minor;
  }
  double memory_bytes() const override {
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    return double(total);
  }
  Run gemm_fp32(int64_t m, int64_t n, int64_t k) override {
    auto a = std::make_shared<DevBuf>(4 * size_t(m * k)), b = std::make_shared<DevBuf>(4 * size_t(n * k)),
         c = std::make_shared<DevBuf>(4 * size_t(m * n));
    auto h = handle_;
    auto st = stream_;
    return [=] { must(cuda::gemm_f32(h, false, true, m, n, k, 1.f, a->f(), b->f(), 0.f, c->f(), st)); };
  }
  size_t cold_set_bytes() const override {
    int dev = 0, l2 = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
    return std::max<size_t>(4 * size_t(l2), 64u << 20);
  }

  GemmRuns gemm(int64_t m, int64_t n, int64_t k, size_t cold_bytes) override {
    const GemmOperands ops = gemm_operands(m, n, k);
    const size_t copies = ops.copies(cold_bytes, 2, 4);  // bf16 B, fp32 C
    struct State {
      std::unique_ptr<DevBuf> a;
      std::vector<std::unique_ptr<DevBuf>> b, c;
      size_t next = 0;
    };
    auto s = std::make_shared<State>();
    s->a = std::make_unique<DevBuf>(2 * ops.a);
    for (size_t i = 0; i < copies; ++i) {
      s->b.push_back(std::make_unique<DevBuf>(2 * ops.b));
      s->c.push_back(std::make_unique<DevBuf>(4 * ops.c));
    }
    auto h = handle_;
    auto st = stream_;
    auto run = [=](bool ta, bool tb, int64_t M, int64_t N, int64_t K, float beta) {
      const size_t i = s->next++ % s->b.size();
      must(cuda::gemm_bf16(h, ta, tb, M, N, K, 1.f, s->a->h(), s->b[i]->h(), beta, s->c[i]->f(), st));
    };
    GemmRuns r;
    r.forward = [=] { run(false, true, m, n, k, 0.f); };
    r.dgrad = [=] { run(false, false, m, k, n, 0.f); };
    r.wgrad = [=] { run(true, false, n, k, m, 1.f); };
    return r;
  }

  Run triad(size_t elems) override {
    auto x = std::make_shared<DevBuf>(4 * elems), y = std::make_shared<DevBuf>(4 * elems),
         z = std::make_shared<DevBuf>(4 * elems);
    auto st = stream_;
    return [=] { must(cuda::triad(z->f(), x->f(), y->f(), 0.5f, int64_t(elems), st)); };
  }

  FwdBwd layer_elementwise(int64_t N, int64_t C, int64_t F) override {
    auto xa = std::make_shared<DevBuf>(4 * size_t(N * F)), xb = std::make_shared<DevBuf>(4 * size_t(N * F)),
         xc = std::make_shared<DevBuf>(4 * size_t(N * F)), w = std::make_shared<DevBuf>(4 * size_t(C)),
         b = std::make_shared<DevBuf>(4 * size_t(C)), stats = std::make_shared<DevBuf>(8 * size_t(N));
    auto st = stream_;
    FwdBwd r;
    r.forward = [=] {
      float* mean = stats->f();
      float* rstd = stats->f() + N;
      for (int i = 0; i < 2; ++i)
        must(cuda::layernorm_forward(xa->f(), w->f(), b->f(), xc->f(), mean, rstd, N, C, 1e-5f, st));
      for (int i = 0; i < 2; ++i) must(cuda::add_inplace(xc->f(), xb->f(), N * C, st));
      must(cuda::gelu_forward(xa->f(), xc->f(), N * F, st));
    };
    r.backward = [=] {
      float* mean = stats->f();
      float* rstd = stats->f() + N;
      for (int i = 0; i < 2; ++i)
        must(cuda::layernorm_backward(xb->f(), xa->f(), w->f(), mean, rstd, xc->f(), w->f(), b->f(), N, C, st));
      for (int i = 0; i < 2; ++i) must(cuda::add_inplace(xc->f(), xb->f(), N * C, st));
      must(cuda::gelu_backward(xb->f(), xa->f(), xc->f(), N * F, st));
    };
    return r;
  }

  Run optimizer_step(int64_t np) override {
    auto p = std::make_shared<DevBuf>(4 * size_t(np)), g = std::make_shared<DevBuf>(4 * size_t(np)),
         m = std::make_shared<DevBuf>(4 * size_t(np)), v = std::make_shared<DevBuf>(4 * size_t(np)),
         sq = std::make_shared<DevBuf>(8);
    auto step = std::make_shared<int64_t>(0);
    auto st = stream_;
    return [=] {
      must(cuda::sum_squares(g->f(), np, static_cast<double*>(sq->p), st));
      must(cuda::adamw_update(p->f(), g->f(), m->f(), v->f(), np, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++*step, st));
      must(cudaMemsetAsync(g->p, 0, 4 * size_t(np), st), "cudaMemsetAsync");
    };
  }

  // What training runs: the cuBLAS attention path with bf16 operands.
  FwdBwd attention(int64_t B, int64_t S, int64_t H, int64_t D) override {
    const size_t n = size_t(B * S * H * D);
    auto q = std::make_shared<DevBuf>(4 * n), k = std::make_shared<DevBuf>(4 * n), v = std::make_shared<DevBuf>(4 * n),
         o = std::make_shared<DevBuf>(4 * n), dout = std::make_shared<DevBuf>(4 * n), dq = std::make_shared<DevBuf>(4 * n),
         dk = std::make_shared<DevBuf>(4 * n), dv = std::make_shared<DevBuf>(4 * n),
         lse = std::make_shared<DevBuf>(4 * size_t(B * H * S));
    const size_t ws = size_t(cuda::attention_gemm_workspace_floats(S, H));
    auto scores = std::make_shared<DevBuf>(4 * ws), dscores = std::make_shared<DevBuf>(4 * ws),
         scores16 = std::make_shared<DevBuf>(2 * ws), q16 = std::make_shared<DevBuf>(2 * n),
         k16 = std::make_shared<DevBuf>(2 * n), v16 = std::make_shared<DevBuf>(2 * n),
         do16 = std::make_shared<DevBuf>(2 * n);
    cuda::AttentionGemmScratch w;
    w.scores = scores->f(), w.dscores = dscores->f(), w.scores16 = scores16->h();
    w.q16 = q16->h(), w.k16 = k16->h(), w.v16 = v16->h(), w.do16 = do16->h();
    auto st = stream_;
    auto h = handle_;
    // The lambdas keep the buffers alive.
    auto keep = std::make_shared<std::vector<std::shared_ptr<DevBuf>>>(
        std::vector<std::shared_ptr<DevBuf>>{scores, dscores, scores16, q16, k16, v16, do16});
    FwdBwd r;
    r.forward = [=] {
      (void)keep;
      must(cuda::attention_forward_gemm(h, cuda::GemmInput::kBf16, q->f(), k->f(), v->f(), o->f(), lse->f(), B, S, H,
                                        H, D, w, st));
    };
    r.backward = [=] {
      (void)keep;
      must(cuda::attention_backward_gemm(h, cuda::GemmInput::kBf16, dout->f(), q->f(), k->f(), v->f(), o->f(),
                                         lse->f(), dq->f(), dk->f(), dv->f(), B, S, H, H, D, w, st));
    };
    return r;
  }

  void synchronize() override { must(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t stream_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  std::string name_;
};

}  // namespace

Result<std::unique_ptr<KernelBench>> make_cuda_kernel_bench(int device) {
  const int n = cuda::device_count();
  if (n == 0)
    return unsupported("--backend cuda: no CUDA device is visible (no NVIDIA driver or GPU on this machine); "
                       "calibrate CPU ranks with --backend cpu");
  if (device < 0 || device >= n)
    return invalid_argument("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(n) +
                            " visible)");
  return std::unique_ptr<KernelBench>(std::make_unique<CudaKernelBench>(device));
}

}  // namespace loom::exec
