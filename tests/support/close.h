// Seeded test inputs and the tolerance comparison of a result with its
// reference (max error relative to the reference's largest element, L2 error
// relative to its norm, and per element), shared by the kernel-table tests on
// every backend (tests/support/kernel_cases.h, tests/cuda/).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#if defined(_OPENMP)
#define PRAGMA_(x) _Pragma(#x)
#define PARALLEL_FOR PRAGMA_(omp parallel for schedule(static))
#define PARALLEL_FOR_SUM(var) PRAGMA_(omp parallel for schedule(static) reduction(+ : var))
#else
#define PARALLEL_FOR
#define PARALLEL_FOR_SUM(var)
#endif

namespace loom::test {

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

struct Tol {
  double max_rel = 0;   // |err| <= max_rel * max|ref| (+ elem_rel * |ref_i|)
  double l2_rel = 0;    // ||err|| <= l2_rel * ||ref||
  double elem_rel = 0;  // per element, relative to the element
};
constexpr Tol kExact{0, 0, 0};
constexpr Tol kAttentionFp32{1e-4, 2e-5, 0};  // fp32 attention, another summation order

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


}  // namespace loom::test
