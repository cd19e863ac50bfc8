// GEMM on row-major fp32 matrices through Eigen's blocked kernels.
//
// Eigen is column-major by default; we Map the caller's buffers as row-major
// matrices so no copy or layout flip is visible to callers. A transposed
// operand is the stored matrix Mapped with its stored shape and then
// .transpose()d, which Eigen folds into the packing of its GEMM kernel (no
// temporary). Threads: Eigen parallelizes a GEMM with OpenMP when the library
// is built with it and the call is not already inside a parallel region.
// GCC 12 reports (maybe-)uninitialized values inside its own AVX-512
// intrinsics (`__m512 __Y = __Y;` in avx512fintrin.h) when Eigen's kernels are
// inlined with -march=native; a known false positive, silenced for this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <thread>

#include <Eigen/Core>

#include "exec/backend/cpu_ops.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace loom::cpu {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;

// C = alpha * a * b (+ C when accumulate), a and b any Eigen expressions.
// noalias: C never overlaps A or B (callers own distinct buffers).
template <typename OpA, typename OpB>
void gemm_into(const OpA& a, const OpB& b, float alpha, float beta, Map& c) {
  if (beta == 0.0f) {
    // BLAS semantics: with beta == 0, C is write-only (NaN/garbage in C
    // must not leak into the result).
    c.noalias() = alpha * (a * b);
  } else {
    if (beta != 1.0f) c *= beta;
    c.noalias() += alpha * (a * b);
  }
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C) {
  if (M == 0 || N == 0) return;
  Map c(C, M, N);  // (M, N)
  if (K == 0) {
    // op(A) op(B) is the zero matrix; only the beta scaling remains.
    if (beta == 0.0f) c.setZero(); else c *= beta;
    return;
  }
  // Stored shapes: A is (M,K), or (K,M) when transposed; B is (K,N) or (N,K).
  ConstMap a(A, trans_a ? K : M, trans_a ? M : K);
  ConstMap b(B, trans_b ? N : K, trans_b ? K : N);
  if (!trans_a && !trans_b) gemm_into(a, b, alpha, beta, c);
  else if (!trans_a && trans_b) gemm_into(a, b.transpose(), alpha, beta, c);
  else if (trans_a && !trans_b) gemm_into(a.transpose(), b, alpha, beta, c);
  else gemm_into(a.transpose(), b.transpose(), alpha, beta, c);
}

void set_num_threads(int threads) {
  if (threads <= 0) {
    unsigned hw = std::thread::hardware_concurrency();
    threads = hw == 0 ? 1 : static_cast<int>(hw);
  }
  // Eigen's GEMM pool and the OpenMP elementwise loops share one setting, so
  // "2 threads" means 2 threads for every op of this backend.
  Eigen::setNbThreads(threads);
#if defined(_OPENMP)
  omp_set_num_threads(threads);
#endif
}

}  // namespace loom::cpu
