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
#include "exec/backend/cuda/cuda_ops.h"
#include "exec/backend/kernel_profile.h"

#if defined(_OPENMP)
#define PRAGMA_(x) _Pragma(#x)
#define PARALLEL_FOR PRAGMA_(omp parallel for schedule(static))
#define PARALLEL_FOR_SUM(var) PRAGMA_(omp parallel for schedule(static) reduction(+ : var))
#else
#define PARALLEL_FOR
#define PARALLEL_FOR_SUM(var)
#endif


#define SKIP_WITHOUT_GPU()                                                                                  \
  if (cuda::device_count() == 0)                                                                            \
  GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0): the test compiled and linked; the "     \
                  "comparison of the CUDA kernel table with the CPU table runs on a machine with an NVIDIA GPU"


namespace loom::exec::cuda_test {

// ---------------------------------------------------------------------------
// Helpers

inline uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// Uniform in [0, 1), a pure function of (seed, i): arrays fill in parallel.
inline double unit(uint64_t seed, uint64_t i) { return double(splitmix(splitmix(seed) ^ i) >> 11) * 0x1.0p-53; }

inline std::vector<float> random_vec(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::vector<float> v(n);
  PARALLEL_FOR
  for (int64_t i = 0; i < int64_t(n); ++i) v[size_t(i)] = lo + (hi - lo) * float(unit(seed, uint64_t(i)));
  return v;
}

inline std::vector<float> nans(size_t n) { return std::vector<float>(n, std::nanf("")); }

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
inline std::unique_ptr<ComputeBackend> cuda_backend(Precision precision, bool fused_attention = false) {
  ScopedEnv attention("LOOM_CUDA_ATTENTION", fused_attention ? "fused" : "gemm");
  auto be = make_cuda_backend(0, precision);
  LOOM_CHECK(be.is_ok(), be.status().to_string());
  return std::move(be).value();
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

struct Tol {
  double max_rel = 0;   // |err| <= max_rel * max|ref| (+ elem_rel * |ref_i|)
  double l2_rel = 0;    // ||err|| <= l2_rel * ||ref||
  double elem_rel = 0;  // per element, relative to the element
};
constexpr Tol kExact{0, 0, 0};
constexpr Tol kAttentionFp32{1e-4, 2e-5, 0};
constexpr Tol kAttentionBf16{3e-2, 2e-2, 0};

// Compares got with want; prints the errors; fails naming the first element
// out of tolerance. Non-finite values must match in kind.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, Tol tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const int64_t n = int64_t(want.size());
  double max_ref = 0, max_err = 0;
  double l2_err = 0, l2_ref = 0;
  int64_t kind_mismatch = 0;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) reduction(max : max_ref, max_err) reduction(+ : l2_err, l2_ref, kind_mismatch)
#endif
  for (int64_t i = 0; i < n; ++i) {
    const double w = want[size_t(i)], g = got[size_t(i)];
    if (!std::isfinite(w) || !std::isfinite(g)) {
      const bool same = (std::isnan(w) && std::isnan(g)) || w == g;
      kind_mismatch += same ? 0 : 1;
      continue;
    }
    const double e = std::fabs(g - w);
    max_ref = std::max(max_ref, std::fabs(w));
    max_err = std::max(max_err, e);
    l2_err += e * e;
    l2_ref += w * w;
  }
  const double l2 = l2_ref > 0 ? std::sqrt(l2_err / l2_ref) : std::sqrt(l2_err);
  std::printf("  %-44s max|err| %.3e (%.2e of max|ref| %.3g)  L2 %.3e\n", what.c_str(), max_err,
              max_ref > 0 ? max_err / max_ref : max_err, max_ref, l2);
  EXPECT_EQ(kind_mismatch, 0) << what << ": non-finite values where the reference has others (or the reverse)";
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; ++i) {
    const double w = want[size_t(i)], g = got[size_t(i)];
    if (!std::isfinite(w) || !std::isfinite(g)) continue;
    if (std::fabs(g - w) > tol.max_rel * max_ref + tol.elem_rel * std::fabs(w)) bad = i;
  }
  EXPECT_LT(bad, 0) << what << ": element " << bad << " is " << (bad >= 0 ? got[size_t(bad)] : 0.f) << ", want "
                    << (bad >= 0 ? want[size_t(bad)] : 0.f) << " (max rel " << tol.max_rel << " of " << max_ref
                    << ", elem rel " << tol.elem_rel << ")";
  EXPECT_LE(std::sqrt(l2_err), tol.l2_rel * std::sqrt(l2_ref)) << what << ": L2 error " << l2;
}


}  // namespace loom::exec::cuda_test
