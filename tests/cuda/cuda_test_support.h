// Helpers of the CUDA kernel-table tests at production shapes
// (cuda_production_test.cc, cuda_table_coverage_test.cc: one program):
// seeded inputs, a CUDA backend, device buffers, tolerances and the
// max / L2 comparison against the CPU table.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "exec/backend/compute_backend.h"
#include "exec/backend/cuda/cuda_backend.h"
#include "exec/backend/cuda/cuda_gemm_lt.h"
#include "exec/backend/cuda/cuda_ops.h"
#include "exec/backend/cuda/cudnn_sdpa.h"
#include "exec/backend/kernel_profile.h"
#include "tests/support/close.h"



#define SKIP_WITHOUT_GPU()                                                                                  \
  if (cuda::device_count() == 0)                                                                            \
  GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0): the test compiled and linked; the "     \
                  "comparison of the CUDA kernel table with the CPU table runs on a machine with an NVIDIA GPU"


namespace loom::exec::cuda_test {

using test::expect_close;
using test::kExact;
using test::nans;
using test::random_vec;
using test::splitmix;
using test::Tol;
using test::unit;
constexpr Tol kAttentionFp32 = test::kAttentionFp32;
constexpr Tol kAttentionBf16{3e-2, 2e-2, 0};

// ---------------------------------------------------------------------------
// Helpers

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Sets an environment variable for a scope (the CUDA backend reads
// LOOM_CUDA_ATTENTION and LOOM_CUDA_SYNC_DEBUG when it is made).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A CUDA backend on device 0; attention through the cuBLAS path or the fused
// reference kernel.
// `attention`: LOOM_CUDA_ATTENTION's value for the backend (gemm, cudnn, fused).
// `epilogue`: LOOM_GEMM_EPILOGUE's (separate, cublaslt).
inline std::unique_ptr<ComputeBackend> cuda_backend(Precision precision, const char* attention = "gemm",
                                                    const char* epilogue = "separate") {
  ScopedEnv path("LOOM_CUDA_ATTENTION", attention);
  ScopedEnv epi("LOOM_GEMM_EPILOGUE", epilogue);
  auto be = make_cuda_backend(0, precision);
  LOOM_CHECK(be.is_ok(), be.status().to_string());
  return std::move(be).value();
}

// Whether cuDNN's fused attention can run here (cudnn_sdpa.h): ok, or why
// not. With LOOM_REQUIRE_CUDNN=1 (gpu-validate on a node whose Python
// environment has the nvidia-cudnn-cu13 wheel) a test that would skip its
// cuDNN part fails instead.
inline Status cudnn_usable() {
  auto made = cuda::make_cudnn_sdpa(nullptr);
  return made.is_ok() ? Status::ok() : made.status();
}
inline bool cudnn_required() {
  const char* e = std::getenv("LOOM_REQUIRE_CUDNN");
  return e && std::string(e) == "1";
}

// An array in a backend's memory (its allocator: cudaMalloc behind a cache),
// released at scope end: declare it after the backend.
template <typename T>
class Dev {
 public:
  Dev(ComputeBackend& be, size_t n)
      : be_(&be), n_(n), buf_(DeviceBuffer::uninitialized(&be, std::max<size_t>(n, 1) * sizeof(T))) {}
  Dev(ComputeBackend& be, const std::vector<T>& h) : Dev(be, h.size()) { set(h); }
  void set(const std::vector<T>& h) {
    EXPECT_EQ(h.size(), n_);
    be_->copy_to_device(buf_.f32(), h.data(), std::min(h.size(), n_) * sizeof(T));
  }
  std::vector<T> get() const {
    std::vector<T> h(n_);
    be_->copy_to_host(h.data(), buf_.f32(), n_ * sizeof(T));
    return h;
  }
  T* p() const { return reinterpret_cast<T*>(buf_.f32()); }
  size_t size() const { return n_; }

 private:
  ComputeBackend* be_;
  size_t n_;
  DeviceBuffer buf_;
};

}  // namespace loom::exec::cuda_test
