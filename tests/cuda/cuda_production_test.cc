// The CUDA kernel table at production shapes, against the CPU table
// (make_cpu_kernels()), every call made THROUGH ComputeBackend::kernels() of a
// CUDA backend (as the model makes them), on memory the backend allocated:
//
//   CudaProductionAttention.*   causal GQA attention forward + backward at
//                               T = 1024 and 4096, D = 64 and 128 (GPT-2 and
//                               Llama-3 8B head layouts), cuBLAS path in fp32
//                               and bf16, the fused reference kernel in fp32
//                               (LOOM_CUDA_ATTENTION=fused selects it)
//   CudaProductionXent.*        the four cross-entropy passes at vocabularies
//                               50304 (padded, masked) and 128256 (whole, and
//                               a TP=2 slice), a few hundred rows
//   CudaProductionCasts.*       fp32 <-> bf16 / fp16 over 2^28 + 2^20 + 7 elements
//   CudaProductionColumnSums.*  bias and LayerNorm / RMSNorm weight gradients
//                               (the deterministic column sums) over 65600 x
//                               4096 > 2^28 elements
//   CudaTableCoverage.*         every op of the table at moderate sizes (the
//                               per-op profiler counts them: none is missed),
//                               and the bf16 weight copy of set_weights /
//                               weights_changed
//   CudaSyncDebug.*             LOOM_CUDA_SYNC_DEBUG=1 names the failing op
//
// Tolerances. Each comparison checks the largest error against the largest
// reference magnitude (max) and the error's L2 norm against the reference's
// (L2); numbers printed for every comparison.
//   fp32 attention (cuBLAS with TF32 off, or fused): max 1e-4, L2 2e-5 — the
//     sums run in another order over up to 4096 keys x 4 heads, and the GPU
//     recomputes P as exp(s - lse) where lse ~ 9 carries ~1e-6 absolute
//     rounding: ~1e-6 relative expected.
//   bf16 attention (cuBLAS, operands and P / dS rounded to 8 bits of mantissa,
//     fp32 accumulation): max 3e-2, L2 2e-2 — each rounding is <= 2^-9
//     relative, a handful compound to ~0.3-0.5% in L2; the max bound is the one
//     cuda_ops_test uses at T=77.
//   cross-entropy: row max and target logit exact, sum of exponentials 1e-6
//     per row (double sums of float exps), loss 1e-6 of the largest,
//     gradients 1e-6 (expf vs the host's exp: a few ulp).
//   casts: bit-exact against the CPU table's bf16 round-to-nearest-even and
//     the host's IEEE binary16 (NaN only has to stay NaN: CUDA returns its
//     canonical NaN).
//   column sums: max 1e-4, L2 1e-4 — the GPU adds double partials, the CPU
//     adds floats row by row over 65600 rows (~1e-5 relative of its own);
//     LayerNorm / RMSNorm outputs and input gradients 1e-5 (statistics in
//     double on both).
//
// The CPU reference takes a few seconds on a 16-core node (OpenMP over heads
// and rows); the whole program well under two minutes with a GPU. Without a
// GPU every test skips, saying why.
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

namespace loom::exec {
namespace {

#define SKIP_WITHOUT_GPU()                                                                                  \
  if (cuda::device_count() == 0)                                                                            \
  GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0): the test compiled and linked; the "     \
                  "comparison of the CUDA kernel table with the CPU table runs on a machine with an NVIDIA GPU"

// ---------------------------------------------------------------------------
// Helpers

uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// Uniform in [0, 1), a pure function of (seed, i): arrays fill in parallel.
double unit(uint64_t seed, uint64_t i) { return double(splitmix(splitmix(seed) ^ i) >> 11) * 0x1.0p-53; }

std::vector<float> random_vec(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::vector<float> v(n);
  PARALLEL_FOR
  for (int64_t i = 0; i < int64_t(n); ++i) v[size_t(i)] = lo + (hi - lo) * float(unit(seed, uint64_t(i)));
  return v;
}

std::vector<float> nans(size_t n) { return std::vector<float>(n, std::nanf("")); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
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
std::unique_ptr<ComputeBackend> cuda_backend(Precision precision, bool fused_attention = false) {
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
void expect_close(const std::vector<float>& got, const std::vector<float>& want, Tol tol, const std::string& what) {
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

// ---------------------------------------------------------------------------
// Attention

struct AttentionCase {
  int64_t B, T, Hq, Hk, D;
  bool fused;  // also through the fused reference kernel
};

void check_attention(const AttentionCase& c) {
  const int64_t B = c.B, T = c.T, Hq = c.Hq, Hk = c.Hk, D = c.D;
  const size_t nq = size_t(B * T * Hq * D), nk = size_t(B * T * Hk * D), nl = size_t(B * Hq * T);
  // q, k in [-2, 2]: scores of standard deviation ~1.3, rows neither flat nor one-hot.
  const auto q = random_vec(nq, 11, -2, 2), k = random_vec(nk, 12, -2, 2), v = random_vec(nk, 13),
             dout = random_vec(nq, 14);
  std::vector<float> out(nq), lse(nl), dq(nq), dk(nk), dv(nk);
  auto cpu = make_cpu_kernels();
  auto t0 = std::chrono::steady_clock::now();
  cpu->attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), B, T, Hq, Hk, D);
  cpu->attention_backward(dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), dq.data(), dk.data(),
                          dv.data(), B, T, Hq, Hk, D);
  std::printf("attention B=%lld T=%lld Hq=%lld Hk=%lld D=%lld: CPU reference %.2f s\n", (long long)B, (long long)T,
              (long long)Hq, (long long)Hk, (long long)D, seconds_since(t0));

  struct Variant {
    const char* name;
    Precision precision;
    bool fused;
    Tol tol;
  };
  std::vector<Variant> variants = {{"fp32 cuBLAS", Precision::kFp32, false, kAttentionFp32},
                                   {"bf16 cuBLAS", Precision::kBf16, false, kAttentionBf16}};
  if (c.fused) variants.push_back({"fp32 fused", Precision::kFp32, true, kAttentionFp32});
  for (const Variant& var : variants) {
    SCOPED_TRACE(var.name);
    auto be = cuda_backend(var.precision, var.fused);
    Kernels& kt = be->kernels();
    // Outputs start as NaN: "overwritten" must mean every element.
    Dev<float> q_(*be, q), k_(*be, k), v_(*be, v), do_(*be, dout), o_(*be, nans(nq)), l_(*be, nans(nl)),
        gq(*be, nans(nq)), gk(*be, nans(nk)), gv(*be, nans(nk));
    be->synchronize();
    t0 = std::chrono::steady_clock::now();
    kt.attention_forward(q_.p(), k_.p(), v_.p(), o_.p(), l_.p(), B, T, Hq, Hk, D);
    kt.attention_backward(do_.p(), q_.p(), k_.p(), v_.p(), o_.p(), l_.p(), gq.p(), gk.p(), gv.p(), B, T, Hq, Hk, D);
    be->synchronize();
    std::printf(" %s: GPU forward + backward %.1f ms\n", var.name, 1e3 * seconds_since(t0));
    ASSERT_TRUE(kt.status().is_ok()) << kt.status().to_string();
    const std::string at = std::string(var.name) + " ";
    expect_close(o_.get(), out, var.tol, at + "out");
    expect_close(l_.get(), lse, var.tol, at + "lse");
    expect_close(gq.get(), dq, var.tol, at + "dq");
    expect_close(gk.get(), dk, var.tol, at + "dk");
    expect_close(gv.get(), dv, var.tol, at + "dv");
  }
}

// GPT-2 (124M) heads at its training length, batch 2; fused too.
TEST(CudaProductionAttention, Gpt2HeadsT1024D64) {
  SKIP_WITHOUT_GPU();
  check_attention({2, 1024, 12, 12, 64, true});
}

// Llama-3 8B heads (32 query heads over 8 KV heads, D=128) at T=1024; fused too.
TEST(CudaProductionAttention, Llama8bGqaT1024D128) {
  SKIP_WITHOUT_GPU();
  check_attention({1, 1024, 32, 8, 128, true});
}

TEST(CudaProductionAttention, Gpt2HeadsT4096D64) {
  SKIP_WITHOUT_GPU();
  check_attention({1, 4096, 12, 12, 64, false});
}

// Llama-3 8B at T=4096: the cuBLAS path slices the heads (4 KV heads of
// 4096 x 4096 scores at a time).
TEST(CudaProductionAttention, Llama8bGqaT4096D128) {
  SKIP_WITHOUT_GPU();
  check_attention({1, 4096, 32, 8, 128, false});
}

// The fused kernel at T=4096, D=128, a group of 4 query heads on one KV head
// (its dK / dV atomics from every row and head of the group): few heads keep
// its ~1e10 atomics to seconds.
TEST(CudaProductionAttention, GroupOf4T4096D128AlsoFused) {
  SKIP_WITHOUT_GPU();
  check_attention({1, 4096, 4, 1, 128, true});
}

// ---------------------------------------------------------------------------
// Cross-entropy

// N rows of logits over the vocabulary slice [v_begin, v_begin + V) of a
// vocabulary whose first `real_vocab` entries are tokens (the rest padding,
// masked as the model does with fill_columns).
void check_xent(int64_t N, int64_t real_vocab, int64_t v_begin, int64_t V) {
  auto logits = random_vec(size_t(N * V), 21, -12, 12);
  for (int64_t j = 0; j < V; ++j) logits[size_t(j)] = 0.5f;  // row 0 flat: sum exp = its width exactly
  logits[size_t(V + 17)] = 80.f;                            // row 1 one spike: exp(80) would overflow unshifted
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (size_t n = 0; n < targets.size(); ++n) targets[n] = int32_t(splitmix(n + 99) % uint64_t(real_vocab));
  targets[2] = int32_t(v_begin);                                     // the slice's first column
  targets[3] = int32_t(std::min(v_begin + V, real_vocab) - 1);      // its last real column
  const int64_t mask_from = std::max<int64_t>(0, real_vocab - v_begin);  // local column of the first padding entry
  const bool masked = mask_from < V;
  const float scale = 1.f / float(N);

  auto cpu = make_cpu_kernels();
  std::vector<float> ref = logits, mx(static_cast<size_t>(N)), se(static_cast<size_t>(N)), tl(static_cast<size_t>(N)), loss(static_cast<size_t>(N));
  auto t0 = std::chrono::steady_clock::now();
  if (masked) cpu->fill_columns(ref.data(), N, V, mask_from, V, -1e30f);
  const std::vector<float> masked_ref = ref;
  cpu->xent_row_max(ref.data(), mx.data(), N, V);
  cpu->xent_sumexp_and_target(ref.data(), targets.data(), mx.data(), se.data(), tl.data(), N, V, v_begin);
  cpu->xent_loss(mx.data(), se.data(), tl.data(), loss.data(), N);
  cpu->xent_backward(ref.data(), targets.data(), mx.data(), se.data(), ref.data(), N, V, v_begin, scale);  // in place
  std::printf("cross-entropy N=%lld V=%lld (v_begin %lld, real vocabulary %lld): CPU reference %.2f s\n",
              (long long)N, (long long)V, (long long)v_begin, (long long)real_vocab, seconds_since(t0));

  auto be = cuda_backend(Precision::kBf16);  // the training precision; these passes are fp32 in every precision
  Kernels& k = be->kernels();
  Dev<float> lg(*be, logits), dmx(*be, nans(static_cast<size_t>(N))), dse(*be, nans(static_cast<size_t>(N))), dtl(*be, nans(static_cast<size_t>(N))),
      dloss(*be, nans(static_cast<size_t>(N)));
  Dev<int32_t> dt(*be, targets);
  if (masked) k.fill_columns(lg.p(), N, V, mask_from, V, -1e30f);
  if (masked) expect_close(lg.get(), masked_ref, kExact, "masked logits");
  k.xent_row_max(lg.p(), dmx.p(), N, V);
  k.xent_sumexp_and_target(lg.p(), dt.p(), dmx.p(), dse.p(), dtl.p(), N, V, v_begin);
  k.xent_loss(dmx.p(), dse.p(), dtl.p(), dloss.p(), N);
  k.xent_backward(lg.p(), dt.p(), dmx.p(), dse.p(), lg.p(), N, V, v_begin, scale);
  be->synchronize();
  ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();
  expect_close(dmx.get(), mx, kExact, "row max");
  expect_close(dse.get(), se, Tol{0, 1e-6, 1e-6}, "sum of exponentials");
  expect_close(dtl.get(), tl, kExact, "target logit");
  expect_close(dloss.get(), loss, Tol{1e-6, 1e-6, 0}, "loss");
  expect_close(lg.get(), ref, Tol{1e-6, 1e-6, 0}, "dlogits (in place)");
  const std::vector<float> se_host = dse.get();
  EXPECT_EQ(se_host[0], float(std::min(V, mask_from))) << "a flat row sums exp(0) once per unmasked column";
}

// GPT-2's vocabulary padded to 50304 (a multiple of 128): 47 masked columns.
TEST(CudaProductionXent, Gpt2PaddedVocab50304) {
  SKIP_WITHOUT_GPU();
  check_xent(320, 50257, 0, 50304);
}

TEST(CudaProductionXent, Llama3Vocab128256) {
  SKIP_WITHOUT_GPU();
  check_xent(256, 128256, 0, 128256);
}

// The second half of Llama-3's vocabulary under TP=2: half the targets lie
// outside the slice (target logit 0 there).
TEST(CudaProductionXent, Llama3Vocab128256SecondTpSlice) {
  SKIP_WITHOUT_GPU();
  check_xent(256, 128256, 64128, 64128);
}

// ---------------------------------------------------------------------------
// Casts over more than 2^28 elements (past one grid of 65535 * 16 blocks of
// 256 threads: the grid-stride loops go round more than once)

constexpr int64_t kHuge = (int64_t(1) << 28) + (int64_t(1) << 20) + 7;

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
bool bf16_is_nan(uint16_t h) { return (h & 0x7fffu) > 0x7f80u; }
bool fp16_is_nan(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }

// Random floats with exponents in [e_lo, e_hi] (biased), any sign and
// mantissa (round-to-nearest-even ties included, ~1 in 2^16 for bf16), and
// the special values first.
std::vector<float> cast_inputs(int64_t n, uint64_t seed, uint32_t e_lo, uint32_t e_hi) {
  std::vector<float> x(static_cast<size_t>(n));
  PARALLEL_FOR
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = splitmix(splitmix(seed) ^ uint64_t(i));
    const uint32_t sign = uint32_t(r >> 63), mant = uint32_t(r) & 0x7fffffu;
    const uint32_t e = e_lo + uint32_t((r >> 23) % (e_hi - e_lo + 1));
    x[size_t(i)] = float_of(sign << 31 | e << 23 | mant);
  }
  const float specials[] = {0.f, -0.f, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 1.00390625f, 1.01171875f,
                            -1.00390625f, 65504.f, 65520.f, 1.00048828125f, std::nanf("")};
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i) x[i] = specials[i];
  return x;
}

// Mismatches of got against want (NaN only has to stay NaN); prints the first.
template <typename T, typename Same>
int64_t count_mismatches(const std::vector<T>& got, const std::vector<T>& want, Same same, const char* what) {
  const int64_t n = int64_t(want.size());
  int64_t bad = 0;
  PARALLEL_FOR_SUM(bad)
  for (int64_t i = 0; i < n; ++i) bad += same(got[size_t(i)], want[size_t(i)], i) ? 0 : 1;
  for (int64_t i = 0; i < n && bad > 0; ++i)
    if (!same(got[size_t(i)], want[size_t(i)], i)) {
      ADD_FAILURE() << what << ": " << bad << " mismatches, the first at " << i;
      break;
    }
  std::printf("  %-44s %lld elements, %lld mismatches\n", what, (long long)n, (long long)bad);
  return bad;
}

TEST(CudaProductionCasts, Bf16RoundTripOver2To28ElementsMatchesTheCpuTable) {
  SKIP_WITHOUT_GPU();
  const auto x = cast_inputs(kHuge, 31, 1, 254);  // every normal exponent: overflow to inf included
  auto cpu = make_cpu_kernels();
  std::vector<uint16_t> want16(x.size());
  std::vector<float> want_back(x.size());
  cpu->to_16bit(x.data(), want16.data(), kHuge);
  cpu->from_16bit(want16.data(), want_back.data(), kHuge);

  auto be = cuda_backend(Precision::kBf16);
  Kernels& k = be->kernels();
  Dev<float> dx(*be, x), dback(*be, size_t(kHuge));
  Dev<uint16_t> dh(*be, size_t(kHuge));
  k.to_16bit(dx.p(), dh.p(), kHuge);
  k.from_16bit(dh.p(), dback.p(), kHuge);
  be->synchronize();
  ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();
  const std::vector<uint16_t> got16 = dh.get();
  count_mismatches(got16, want16,
                   [&](uint16_t g, uint16_t w, int64_t i) { return std::isnan(x[size_t(i)]) ? bf16_is_nan(g) : g == w; },
                   "to_16bit (bf16)");
  const std::vector<float> back = dback.get();
  count_mismatches(back, want_back,
                   [&](float g, float w, int64_t i) {
                     return std::isnan(x[size_t(i)]) ? std::isnan(g) : std::memcmp(&g, &w, 4) == 0;
                   },
                   "from_16bit (bf16)");
}

uint16_t host_fp16(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
float host_from_fp16(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

TEST(CudaProductionCasts, Fp16RoundTripOver2To28ElementsMatchesIeeeHalf) {
  SKIP_WITHOUT_GPU();
  // Exponents from below fp16's smallest subnormal (2^-24) to past its
  // largest value (65504): underflow to 0, subnormals, overflow to inf.
  const auto x = cast_inputs(kHuge, 32, 127 - 27, 127 + 17);
  std::vector<uint16_t> want16(x.size());
  PARALLEL_FOR
  for (int64_t i = 0; i < kHuge; ++i) want16[size_t(i)] = host_fp16(x[size_t(i)]);

  auto be = cuda_backend(Precision::kFp16);
  Kernels& k = be->kernels();
  Dev<float> dx(*be, x), dback(*be, size_t(kHuge));
  Dev<uint16_t> dh(*be, size_t(kHuge));
  k.to_16bit(dx.p(), dh.p(), kHuge);
  k.from_16bit(dh.p(), dback.p(), kHuge);
  be->synchronize();
  ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();
  const std::vector<uint16_t> got16 = dh.get();
  count_mismatches(got16, want16,
                   [&](uint16_t g, uint16_t w, int64_t i) { return std::isnan(x[size_t(i)]) ? fp16_is_nan(g) : g == w; },
                   "to_16bit (fp16)");
  const std::vector<float> back = dback.get();
  count_mismatches(back, back,  // want: the host's conversion of the device's 16 bits
                   [&](float g, float, int64_t i) {
                     const float w = host_from_fp16(got16[size_t(i)]);
                     return std::isnan(w) ? std::isnan(g) : std::memcmp(&g, &w, 4) == 0;
                   },
                   "from_16bit (fp16)");
}

// ---------------------------------------------------------------------------
// Column sums over more than 2^28 elements

TEST(CudaProductionColumnSums, BiasAndNormWeightGradientsOver2To28Elements) {
  SKIP_WITHOUT_GPU();
  const int64_t N = 65600, C = 4096;  // 268,697,600 elements; 257 chunks of 256 rows
  const size_t nc = size_t(N * C);
  ASSERT_GT(int64_t(nc), int64_t(1) << 28);
  const auto x = random_vec(nc, 41, -2, 3), dy = random_vec(nc, 42), w = random_vec(size_t(C), 43),
             b = random_vec(size_t(C), 44), acc0 = random_vec(size_t(C), 45), acc1 = random_vec(size_t(C), 46);
  auto cpu = make_cpu_kernels();
  auto be = cuda_backend(Precision::kBf16);
  Kernels& k = be->kernels();
  Dev<float> dx_(*be, x), ddy(*be, dy), dw_(*be, w), db_(*be, b), out(*be, nc), dmean(*be, size_t(N)),
      drstd(*be, size_t(N)), g0(*be, size_t(C)), g1(*be, size_t(C));

  {  // bias
    std::vector<float> dbias = acc0;
    auto t0 = std::chrono::steady_clock::now();
    cpu->bias_backward(dy.data(), dbias.data(), N, C);
    std::printf("bias_backward N=%lld C=%lld: CPU reference %.2f s\n", (long long)N, (long long)C, seconds_since(t0));
    g0.set(acc0);
    k.bias_backward(ddy.p(), g0.p(), N, C);
    be->synchronize();
    ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();
    expect_close(g0.get(), dbias, Tol{1e-4, 1e-4, 0}, "bias_backward dbias (accumulated)");
  }
  {  // LayerNorm
    std::vector<float> y(nc), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N)), dxr(nc), gw = acc0, gb = acc1;
    auto t0 = std::chrono::steady_clock::now();
    cpu->layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, 1e-5f);
    cpu->layernorm_backward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dxr.data(), gw.data(), gb.data(),
                            N, C);
    std::printf("layernorm N=%lld C=%lld: CPU reference %.2f s\n", (long long)N, (long long)C, seconds_since(t0));
    k.layernorm_forward(dx_.p(), dw_.p(), db_.p(), out.p(), dmean.p(), drstd.p(), N, C, 1e-5f);
    be->synchronize();
    ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();
    expect_close(out.get(), y, Tol{1e-5, 1e-5, 0}, "layernorm y");
    expect_close(dmean.get(), mean, Tol{1e-6, 1e-6, 0}, "layernorm mean");
    expect_close(drstd.get(), rstd, Tol{1e-5, 1e-5, 0}, "layernorm rstd");
    g0.set(acc0);
    g1.set(acc1);
    k.layernorm_backward(ddy.p(), dx_.p(), dw_.p(), dmean.p(), drstd.p(), out.p(), g0.p(), g1.p(), N, C);
    be->synchronize();
    ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();
    expect_close(out.get(), dxr, Tol{1e-5, 1e-5, 0}, "layernorm dx");
    expect_close(g0.get(), gw, Tol{1e-4, 1e-4, 0}, "layernorm dw (accumulated)");
    expect_close(g1.get(), gb, Tol{1e-4, 1e-4, 0}, "layernorm db (accumulated)");
  }
  {  // RMSNorm
    std::vector<float> y(nc), rstd(static_cast<size_t>(N)), dxr(nc), gw = acc1;
    auto t0 = std::chrono::steady_clock::now();
    cpu->rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), N, C, 1e-6f);
    cpu->rmsnorm_backward(dy.data(), x.data(), w.data(), rstd.data(), dxr.data(), gw.data(), N, C);
    std::printf("rmsnorm N=%lld C=%lld: CPU reference %.2f s\n", (long long)N, (long long)C, seconds_since(t0));
    k.rmsnorm_forward(dx_.p(), dw_.p(), out.p(), drstd.p(), N, C, 1e-6f);
    be->synchronize();
    ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();
    expect_close(out.get(), y, Tol{1e-5, 1e-5, 0}, "rmsnorm y");
    expect_close(drstd.get(), rstd, Tol{1e-5, 1e-5, 0}, "rmsnorm rstd");
    g0.set(acc1);
    k.rmsnorm_backward(ddy.p(), dx_.p(), dw_.p(), drstd.p(), out.p(), g0.p(), N, C);
    be->synchronize();
    ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();
    expect_close(out.get(), dxr, Tol{1e-5, 1e-5, 0}, "rmsnorm dx");
    expect_close(g0.get(), gw, Tol{1e-4, 1e-4, 0}, "rmsnorm dw (accumulated)");
  }
}

// ---------------------------------------------------------------------------
// Every op of the table

// bf16 of a float, round to nearest even (finite inputs).
float round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

// Each virtual of Kernels on the CUDA table (fp32, so the CPU table is the
// reference up to summation order) at moderate sizes; the profiler in front
// of the table counts the calls, and every op must have been called.
TEST(CudaTableCoverage, EveryOpMatchesTheCpuTable) {
  SKIP_WITHOUT_GPU();
  auto be = cuda_backend(Precision::kFp32);
  auto prof = install_kernel_profiler(*be);
  ASSERT_TRUE(prof.is_ok()) << prof.status().to_string();
  Kernels& k = be->kernels();
  auto cpu = make_cpu_kernels();
  EXPECT_EQ(k.precision(), Precision::kFp32);
  const Tol f32{1e-5, 1e-5, 0};

  // GEMM, every transpose mode, beta 0 and not; K = 0 (C = beta C).
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.f, 0.5f}) {
        const int64_t M = 67, N = 129, K = 96;
        auto a = random_vec(size_t(M * K), 1), bm = random_vec(size_t(K * N), 2), c = random_vec(size_t(M * N), 3);
        Dev<float> da(*be, a), db(*be, bm), dc(*be, c);
        cpu->gemm(ta, tb, M, N, K, 0.75f, a.data(), bm.data(), beta, c.data());
        k.gemm(ta, tb, M, N, K, 0.75f, da.p(), db.p(), beta, dc.p());
        expect_close(dc.get(), c, f32,
                     std::string("gemm ") + (ta ? "T" : "N") + (tb ? "T" : "N") + (beta != 0 ? " beta .5" : ""));
      }
  for (float beta : {0.f, 0.5f}) {
    auto c = random_vec(50, 4);
    Dev<float> dc(*be, c);
    cpu->gemm(false, false, 5, 10, 0, 1.f, nullptr, nullptr, beta, c.data());
    k.gemm(false, false, 5, 10, 0, 1.f, nullptr, nullptr, beta, dc.p());
    expect_close(dc.get(), c, kExact, beta != 0 ? "gemm K=0 (C = beta C)" : "gemm K=0 beta 0 (C = 0)");
  }

  {  // LayerNorm over two 256-row chunks of the column sums
    const int64_t N = 300, C = 768;
    auto x = random_vec(size_t(N * C), 5, -2, 3), w = random_vec(size_t(C), 6), b = random_vec(size_t(C), 7),
         dy = random_vec(size_t(N * C), 8);
    std::vector<float> y(x.size()), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N)), dx(x.size()), dw(size_t(C), 0.5f),
        db(size_t(C), -0.25f);
    Dev<float> dx_(*be, x), dw_(*be, w), db_(*be, b), dy_(*be, dy), gy(*be, x.size()), gm(*be, size_t(N)),
        gr(*be, size_t(N)), gx(*be, x.size()), gw(*be, dw), gb(*be, db);
    cpu->layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, 1e-5f);
    cpu->layernorm_backward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(), db.data(),
                            N, C);
    k.layernorm_forward(dx_.p(), dw_.p(), db_.p(), gy.p(), gm.p(), gr.p(), N, C, 1e-5f);
    k.layernorm_backward(dy_.p(), dx_.p(), dw_.p(), gm.p(), gr.p(), gx.p(), gw.p(), gb.p(), N, C);
    expect_close(gy.get(), y, f32, "layernorm_forward y");
    expect_close(gr.get(), rstd, f32, "layernorm_forward rstd");
    expect_close(gx.get(), dx, f32, "layernorm_backward dx");
    expect_close(gw.get(), dw, Tol{1e-4, 1e-5, 0}, "layernorm_backward dw");
    expect_close(gb.get(), db, Tol{1e-4, 1e-5, 0}, "layernorm_backward db");
  }
  {  // RMSNorm
    const int64_t N = 300, C = 1000;
    auto x = random_vec(size_t(N * C), 9, -2, 2), w = random_vec(size_t(C), 10), dy = random_vec(size_t(N * C), 11);
    std::vector<float> y(x.size()), rstd(static_cast<size_t>(N)), dx(x.size()), dw(size_t(C), 0.5f);
    Dev<float> dx_(*be, x), dw_(*be, w), dy_(*be, dy), gy(*be, x.size()), gr(*be, size_t(N)), gx(*be, x.size()),
        gw(*be, dw);
    cpu->rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), N, C, 1e-6f);
    cpu->rmsnorm_backward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), N, C);
    k.rmsnorm_forward(dx_.p(), dw_.p(), gy.p(), gr.p(), N, C, 1e-6f);
    k.rmsnorm_backward(dy_.p(), dx_.p(), dw_.p(), gr.p(), gx.p(), gw.p(), N, C);
    expect_close(gy.get(), y, f32, "rmsnorm_forward y");
    expect_close(gx.get(), dx, f32, "rmsnorm_backward dx");
    expect_close(gw.get(), dw, Tol{1e-4, 1e-5, 0}, "rmsnorm_backward dw");
  }
  {  // GELU, SwiGLU
    const int64_t n = 100003;
    auto x = random_vec(size_t(n), 12, -6, 6), u = random_vec(size_t(n), 13), dy = random_vec(size_t(n), 14);
    std::vector<float> y(x.size()), dx(x.size()), s(x.size()), dg(x.size()), du(x.size());
    Dev<float> dx_(*be, x), du_(*be, u), ddy(*be, dy), gy(*be, x.size()), gx(*be, x.size()), gs(*be, x.size()),
        gg(*be, x.size()), gu(*be, x.size());
    cpu->gelu_forward(x.data(), y.data(), n);
    cpu->gelu_backward(dy.data(), x.data(), dx.data(), n);
    cpu->swiglu_forward(x.data(), u.data(), s.data(), n);
    cpu->swiglu_backward(dy.data(), x.data(), u.data(), dg.data(), du.data(), n);
    k.gelu_forward(dx_.p(), gy.p(), n);
    k.gelu_backward(ddy.p(), dx_.p(), gx.p(), n);
    k.swiglu_forward(dx_.p(), du_.p(), gs.p(), n);
    k.swiglu_backward(ddy.p(), dx_.p(), du_.p(), gg.p(), gu.p(), n);
    expect_close(gy.get(), y, f32, "gelu_forward");
    expect_close(gx.get(), dx, f32, "gelu_backward");
    expect_close(gs.get(), s, f32, "swiglu_forward");
    expect_close(gg.get(), dg, f32, "swiglu_backward dgate");
    expect_close(gu.get(), du, f32, "swiglu_backward dup");
  }
  {  // RoPE, forward on x and backward on a gradient
    const int64_t B = 2, T = 300, H = 3, D = 64;
    auto x = random_vec(size_t(B * T * H * D), 15), g = random_vec(size_t(B * T * H * D), 16);
    Dev<float> dx_(*be, x), dg_(*be, g);
    cpu->rope_forward(x.data(), B, T, H, D, 500000.f, 7);
    cpu->rope_backward(g.data(), B, T, H, D, 500000.f, 7);
    k.rope_forward(dx_.p(), B, T, H, D, 500000.f, 7);
    k.rope_backward(dg_.p(), B, T, H, D, 500000.f, 7);
    expect_close(dx_.get(), x, f32, "rope_forward");
    expect_close(dg_.get(), g, f32, "rope_backward");
    // The frequency-table form (Llama-3.1 rope scaling) on theta's own
    // frequencies: the GPU against the CPU, and the CPU against rope_forward.
    std::vector<double> inv_freq(size_t(D / 2));
    for (int64_t i = 0; i < D / 2; ++i) inv_freq[size_t(i)] = std::pow(500000.0, -2.0 * double(i) / double(D));
    auto x2 = random_vec(size_t(B * T * H * D), 15), g2 = random_vec(size_t(B * T * H * D), 16);
    Dev<float> dx2(*be, x2), dg2(*be, g2);
    cpu->rope_freqs_forward(x2.data(), B, T, H, D, inv_freq.data(), 7);
    cpu->rope_freqs_backward(g2.data(), B, T, H, D, inv_freq.data(), 7);
    k.rope_freqs_forward(dx2.p(), B, T, H, D, inv_freq.data(), 7);
    k.rope_freqs_backward(dg2.p(), B, T, H, D, inv_freq.data(), 7);
    expect_close(dx2.get(), x2, f32, "rope_freqs_forward");
    expect_close(dg2.get(), g2, f32, "rope_freqs_backward");
    expect_close(x2, x, f32, "rope_freqs_forward (CPU) = rope_forward (CPU)");
  }
  {  // attention (the cuBLAS path of this backend), small
    const int64_t B = 2, T = 77, Hq = 4, Hk = 2, D = 32;
    const size_t nq = size_t(B * T * Hq * D), nk = size_t(B * T * Hk * D), nl = size_t(B * Hq * T);
    auto q = random_vec(nq, 17), kk = random_vec(nk, 18), v = random_vec(nk, 19), dout = random_vec(nq, 20);
    std::vector<float> out(nq), lse(nl), dq(nq), dk(nk), dv(nk);
    cpu->attention_forward(q.data(), kk.data(), v.data(), out.data(), lse.data(), B, T, Hq, Hk, D);
    cpu->attention_backward(dout.data(), q.data(), kk.data(), v.data(), out.data(), lse.data(), dq.data(), dk.data(),
                            dv.data(), B, T, Hq, Hk, D);
    Dev<float> q_(*be, q), k_(*be, kk), v_(*be, v), do_(*be, dout), o_(*be, nans(nq)), l_(*be, nans(nl)),
        gq(*be, nans(nq)), gk(*be, nans(nk)), gv(*be, nans(nk));
    k.attention_forward(q_.p(), k_.p(), v_.p(), o_.p(), l_.p(), B, T, Hq, Hk, D);
    k.attention_backward(do_.p(), q_.p(), k_.p(), v_.p(), o_.p(), l_.p(), gq.p(), gk.p(), gv.p(), B, T, Hq, Hk, D);
    expect_close(o_.get(), out, kAttentionFp32, "attention_forward out");
    expect_close(l_.get(), lse, kAttentionFp32, "attention_forward lse");
    expect_close(gq.get(), dq, kAttentionFp32, "attention_backward dq");
    expect_close(gk.get(), dk, kAttentionFp32, "attention_backward dk");
    expect_close(gv.get(), dv, kAttentionFp32, "attention_backward dv");
  }
  {  // embedding over a vocabulary slice, learned positions
    const int64_t N = 640, C = 48, V = 500, v_begin = 250;
    std::vector<int32_t> tok(static_cast<size_t>(N));
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t(splitmix(i + 7) % 750);  // a third outside the slice
    auto wte = random_vec(size_t(V * C), 21), dout = random_vec(size_t(N * C), 22);
    std::vector<float> emb(size_t(N * C)), dwte(wte.size(), 0.25f);
    Dev<int32_t> dt(*be, tok);
    Dev<float> dw_(*be, wte), de(*be, emb.size()), ddo(*be, dout), dd(*be, dwte);
    cpu->embedding_forward(tok.data(), wte.data(), emb.data(), N, C, v_begin, V);
    cpu->embedding_backward(tok.data(), dout.data(), dwte.data(), N, C, v_begin, V);
    k.embedding_forward(dt.p(), dw_.p(), de.p(), N, C, v_begin, V);
    k.embedding_backward(dt.p(), ddo.p(), dd.p(), N, C, v_begin, V);
    expect_close(de.get(), emb, kExact, "embedding_forward");
    expect_close(dd.get(), dwte, kExact, "embedding_backward (rows in order, as the CPU)");

    const int64_t R = 3 * 16 + 5, T = 16, row0 = 7;
    auto x = random_vec(size_t(R * C), 23), wpe = random_vec(size_t(T * C), 24), dwpe = random_vec(size_t(T * C), 25);
    Dev<float> dx_(*be, x), dp(*be, wpe), ddp(*be, dwpe);
    cpu->add_positions(x.data(), wpe.data(), R, C, T, row0);
    cpu->positions_backward(x.data(), dwpe.data(), R, C, T, row0);
    k.add_positions(dx_.p(), dp.p(), R, C, T, row0);
    k.positions_backward(dx_.p(), ddp.p(), R, C, T, row0);
    expect_close(dx_.get(), x, kExact, "add_positions");
    expect_close(ddp.get(), dwpe, f32, "positions_backward");
  }
  {  // cross-entropy over a padded vocabulary slice
    const int64_t N = 64, V = 500, v_begin = 250, real = 700;
    auto logits = random_vec(size_t(N * V), 26, -8, 8);
    std::vector<int32_t> tok(static_cast<size_t>(N));
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t(splitmix(i + 8) % uint64_t(real));
    std::vector<float> mx(static_cast<size_t>(N)), se(static_cast<size_t>(N)), tl(static_cast<size_t>(N)), loss(static_cast<size_t>(N)), dl(logits.size());
    Dev<float> dl_(*be, logits), dmx(*be, size_t(N)), dse(*be, size_t(N)), dtl(*be, size_t(N)), dls(*be, size_t(N)),
        dd(*be, logits.size());
    Dev<int32_t> dt(*be, tok);
    cpu->fill_columns(logits.data(), N, V, real - v_begin, V, -1e30f);
    cpu->xent_row_max(logits.data(), mx.data(), N, V);
    cpu->xent_sumexp_and_target(logits.data(), tok.data(), mx.data(), se.data(), tl.data(), N, V, v_begin);
    cpu->xent_loss(mx.data(), se.data(), tl.data(), loss.data(), N);
    cpu->xent_backward(logits.data(), tok.data(), mx.data(), se.data(), dl.data(), N, V, v_begin, 1.f / 64);
    k.fill_columns(dl_.p(), N, V, real - v_begin, V, -1e30f);
    k.xent_row_max(dl_.p(), dmx.p(), N, V);
    k.xent_sumexp_and_target(dl_.p(), dt.p(), dmx.p(), dse.p(), dtl.p(), N, V, v_begin);
    k.xent_loss(dmx.p(), dse.p(), dtl.p(), dls.p(), N);
    k.xent_backward(dl_.p(), dt.p(), dmx.p(), dse.p(), dd.p(), N, V, v_begin, 1.f / 64);
    expect_close(dl_.get(), logits, kExact, "fill_columns");
    expect_close(dmx.get(), mx, kExact, "xent_row_max");
    expect_close(dse.get(), se, Tol{0, 1e-6, 1e-6}, "xent_sumexp_and_target sum");
    expect_close(dtl.get(), tl, kExact, "xent_sumexp_and_target target");
    expect_close(dls.get(), loss, Tol{1e-6, 1e-6, 0}, "xent_loss");
    expect_close(dd.get(), dl, Tol{1e-6, 1e-6, 0}, "xent_backward");
  }
  {  // AdamW over steps
    const int64_t n = 50001;
    auto p = random_vec(size_t(n), 27);
    std::vector<float> m(size_t(n), 0.f), v(size_t(n), 0.f);
    Dev<float> dp(*be, p), dm(*be, m), dv(*be, v);
    for (int64_t step = 1; step <= 3; ++step) {
      auto g = random_vec(size_t(n), uint64_t(27 + step));
      Dev<float> dg(*be, g);
      cpu->adamw_update(p.data(), g.data(), m.data(), v.data(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
      k.adamw_update(dp.p(), dg.p(), dm.p(), dv.p(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
    }
    expect_close(dp.get(), p, Tol{1e-6, 1e-6, 0}, "adamw_update param");
    expect_close(dm.get(), m, Tol{1e-6, 1e-6, 0}, "adamw_update m");
    expect_close(dv.get(), v, Tol{1e-6, 1e-6, 0}, "adamw_update v");
  }
  {  // add, bias, bias gradient over 3000 rows, scale
    const int64_t N = 3000, C = 45, n = N * C;
    auto y = random_vec(size_t(n), 30), x = random_vec(size_t(n), 31), bias = random_vec(size_t(C), 32);
    std::vector<float> db(size_t(C), 0.25f);
    Dev<float> dy(*be, y), dx_(*be, x), dbias(*be, bias), ddb(*be, db);
    cpu->add_inplace(y.data(), x.data(), n);
    cpu->add_bias(y.data(), bias.data(), N, C);
    cpu->scale_inplace(y.data(), 0.375f, n);
    cpu->bias_backward(y.data(), db.data(), N, C);
    k.add_inplace(dy.p(), dx_.p(), n);
    k.add_bias(dy.p(), dbias.p(), N, C);
    k.scale_inplace(dy.p(), 0.375f, n);
    k.bias_backward(dy.p(), ddb.p(), N, C);
    expect_close(dy.get(), y, kExact, "add_inplace, add_bias, scale_inplace");
    expect_close(ddb.get(), db, Tol{1e-4, 1e-5, 0}, "bias_backward");
  }
  {  // 16-bit copies (bf16 on the fp32 table), sums
    const int64_t n = 100003;
    auto x = random_vec(size_t(n), 33, -1e3f, 1e3f);
    std::vector<uint16_t> h(static_cast<size_t>(n));
    std::vector<float> back(static_cast<size_t>(n));
    cpu->to_16bit(x.data(), h.data(), n);
    cpu->from_16bit(h.data(), back.data(), n);
    Dev<float> dx_(*be, x), dback(*be, size_t(n));
    Dev<uint16_t> dh(*be, size_t(n));
    k.to_16bit(dx_.p(), dh.p(), n);
    k.from_16bit(dh.p(), dback.p(), n);
    EXPECT_EQ(dh.get(), h) << "to_16bit";
    expect_close(dback.get(), back, kExact, "from_16bit");

    double abs_sum = 0;
    for (float v : x) abs_sum += std::fabs(v);
    EXPECT_NEAR(k.sum(dx_.p(), n), cpu->sum(x.data(), n), 1e-12 * abs_sum) << "sum";
    for (int64_t piece : {int64_t(1000), int64_t(50000), n - 51000}) {
      const int64_t at = piece == 1000 ? 0 : piece == 50000 ? 1000 : 51000;
      k.add_sum_squares(dx_.p() + at, piece);
      cpu->add_sum_squares(x.data() + at, piece);
    }
    const double want = cpu->take_sum_squares();
    EXPECT_NEAR(k.take_sum_squares(), want, 1e-12 * want) << "add_sum_squares / take_sum_squares";
    EXPECT_EQ(k.take_sum_squares(), 0.0) << "taken: nothing pending";
  }
  be->synchronize();
  ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();

  // The profiler saw every op, and timed them on the GPU.
  const auto rows = (*prof)->report();
  std::printf("%s", format_op_profile(rows, 1).c_str());
  for (int i = 0; i < kNumKernelOps; ++i) {
    const std::string op = kernel_op_name(KernelOp(i));
    const auto it = std::find_if(rows.begin(), rows.end(), [&](const OpProfileRow& r) { return r.op == op; });
    ASSERT_NE(it, rows.end()) << op << " was never called through the table";
    EXPECT_GT(it->calls, 0) << op;
    EXPECT_GE(it->seconds, 0) << op;
  }
  double total = 0;
  for (const OpProfileRow& r : rows) total += r.seconds;
  EXPECT_GT(total, 0) << "CUDA events timed the ops";
}

// Under bf16 the table keeps one bf16 copy of the parameters named by
// set_weights() and casts a range again only after weights_changed().
TEST(CudaTableCoverage, Bf16GemmReadsTheWeightCopyAndRecastsChangedRanges) {
  SKIP_WITHOUT_GPU();
  auto be = cuda_backend(Precision::kBf16);
  Kernels& k = be->kernels();
  EXPECT_EQ(k.precision(), Precision::kBf16);
  auto cpu = make_cpu_kernels();
  const int64_t M = 64, N = 96, K = 128, off = 1000, nparams = off + K * N + 17;
  auto params = random_vec(size_t(nparams), 50), a = random_vec(size_t(M * K), 51);
  Dev<float> dparams(*be, params), da(*be, a), dc(*be, size_t(M * N));
  k.set_weights(dparams.p(), nparams);
  auto reference = [&](const std::vector<float>& p) {
    std::vector<float> ar(a.size()), br(size_t(K * N)), c(size_t(M * N));
    for (size_t i = 0; i < ar.size(); ++i) ar[i] = round_bf16(a[i]);
    for (size_t i = 0; i < br.size(); ++i) br[i] = round_bf16(p[size_t(off) + i]);
    cpu->gemm(false, false, M, N, K, 1.f, ar.data(), br.data(), 0.f, c.data());
    return c;
  };
  k.gemm(false, false, M, N, K, 1.f, da.p(), dparams.p() + off, 0.f, dc.p());
  expect_close(dc.get(), reference(params), Tol{2e-3, 2e-3, 0}, "bf16 gemm on the weight copy");
  // An optimizer step changes the weights: the next GEMM sees the new ones.
  auto updated = random_vec(size_t(nparams), 52);
  dparams.set(updated);
  k.weights_changed(dparams.p(), nparams);
  k.gemm(false, false, M, N, K, 1.f, da.p(), dparams.p() + off, 0.f, dc.p());
  expect_close(dc.get(), reference(updated), Tol{2e-3, 2e-3, 0}, "bf16 gemm after weights_changed");
  be->synchronize();
  EXPECT_TRUE(k.status().is_ok()) << k.status().to_string();
}

// ---------------------------------------------------------------------------
// LOOM_CUDA_SYNC_DEBUG

// A shape the fused kernel refuses is reported naming the op and its shape;
// the ops before it ran as usual.
TEST(CudaSyncDebug, NamesTheOpOfARefusedShape) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<ComputeBackend> be;
  {
    ScopedEnv debug("LOOM_CUDA_SYNC_DEBUG", "1");
    be = cuda_backend(Precision::kFp32, /*fused_attention=*/true);
  }
  Kernels& k = be->kernels();
  auto cpu = make_cpu_kernels();
  auto x = random_vec(4096, 60), y = random_vec(4096, 61);
  Dev<float> dx(*be, x), dy(*be, y);
  cpu->add_inplace(y.data(), x.data(), 4096);
  k.add_inplace(dy.p(), dx.p(), 4096);
  EXPECT_TRUE(k.status().is_ok()) << k.status().to_string();
  expect_close(dy.get(), y, kExact, "add_inplace under sync debug");

  const int64_t T = 12161, D = 64;  // one row past the fused kernel's shared memory
  Dev<float> q(*be, size_t(T * D)), o(*be, size_t(T * D)), lse(*be, size_t(T));
  testing::internal::CaptureStderr();
  k.attention_forward(q.p(), q.p(), q.p(), o.p(), lse.p(), 1, T, 1, 1, D);
  const std::string err = testing::internal::GetCapturedStderr();
  const Status s = k.status();
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.to_string();
  EXPECT_NE(s.message().find("in attention_forward (B=1, T=12161, Hq=1, Hk=1, D=64)"), std::string::npos)
      << s.to_string();
  EXPECT_NE(err.find("LOOM_CUDA_SYNC_DEBUG"), std::string::npos) << err;
  EXPECT_NE(err.find("attention_forward (B=1, T=12161"), std::string::npos) << err;
}

// A kernel that faults (an unmapped device address) is named with the CUDA
// error. The fault ends the CUDA context, so it runs in a child process.
TEST(CudaSyncDebug, NamesTheKernelThatFaulted) {
  SKIP_WITHOUT_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("LOOM_CUDA_SYNC_DEBUG", "1", 1);
        auto be = make_cuda_backend(0, Precision::kFp32);
        if (!be.is_ok()) std::_Exit(2);
        Kernels& k = (*be)->kernels();
        // 16 KB from 4 KB: below the lowest address Linux ever maps
        // (vm.mmap_min_addr, 64 KB), so not reachable through HMM either.
        float* unmapped = reinterpret_cast<float*>(uintptr_t(4096));
        k.add_inplace(unmapped, unmapped, 4096);
        const Status s = k.status();
        std::fprintf(stderr, "status: %s\n", s.to_string().c_str());
        std::_Exit(s.is_ok() ? 0 : 3);
      },
      testing::ExitedWithCode(3), "CUDA error '.+' \\(cuda[A-Za-z]+\\) in add_inplace \\(n=4096\\)");
}

}  // namespace
}  // namespace loom::exec
