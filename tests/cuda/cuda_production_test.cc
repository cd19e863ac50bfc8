// The CUDA kernel table at production shapes, against the CPU table
// (make_cpu_kernels()), every call made THROUGH ComputeBackend::kernels() of a
// CUDA backend (as the model makes them), on memory the backend allocated:
//
//   CudaProductionAttention.*   causal GQA attention forward + backward at
//                               T = 1024 and 4096, D = 64 and 128 (GPT-2 and
//                               Llama-3 8B head layouts), cuBLAS path in fp32
//                               and bf16, the fused reference kernel in fp32
//                               (LOOM_CUDA_ATTENTION=fused selects it), and
//                               cuDNN's flash attention in bf16 where cuDNN
//                               loads (LOOM_CUDA_ATTENTION=cudnn)
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
//
// This file: attention, cross-entropy, casts and column sums; the coverage
// of every op and LOOM_CUDA_SYNC_DEBUG are in cuda_table_coverage_test.cc.
#include "tests/cuda/cuda_test_support.h"

namespace loom::exec {
namespace {

using namespace cuda_test;

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
  cpu->attention_forward({q.data(), k.data(), v.data(), out.data(), lse.data(), B, T, Hq, Hk, D});
  cpu->attention_backward({dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), dq.data(), dk.data(),
                          dv.data(), B, T, Hq, Hk, D});
  std::printf("attention B=%lld T=%lld Hq=%lld Hk=%lld D=%lld: CPU reference %.2f s\n", (long long)B, (long long)T,
              (long long)Hq, (long long)Hk, (long long)D, seconds_since(t0));

  struct Variant {
    const char* name;
    Precision precision;
    const char* attention;  // LOOM_CUDA_ATTENTION
    Tol tol;
  };
  std::vector<Variant> variants = {{"fp32 cuBLAS", Precision::kFp32, "gemm", kAttentionFp32},
                                   {"bf16 cuBLAS", Precision::kBf16, "gemm", kAttentionBf16}};
  if (c.fused) variants.push_back({"fp32 fused", Precision::kFp32, "fused", kAttentionFp32});
  // cuDNN's flash attention: bf16 in and out (q, k, v, out, dout and the
  // gradients rounded to bf16 at the boundary; fp32 softmax and accumulation),
  // within the cuBLAS bf16 path's bounds.
  if (const Status cudnn = cudnn_usable(); cudnn.is_ok())
    variants.push_back({"bf16 cuDNN", Precision::kBf16, "cudnn", kAttentionBf16});
  else if (cudnn_required())
    ADD_FAILURE() << "LOOM_REQUIRE_CUDNN=1 but " << cudnn.to_string();
  else
    std::printf(" (no cuDNN variant: %s)\n", cudnn.message().c_str());
  for (const Variant& var : variants) {
    SCOPED_TRACE(var.name);
    auto be = cuda_backend(var.precision, var.attention);
    Kernels& kt = be->kernels();
    // Outputs start as NaN: "overwritten" must mean every element.
    Dev<float> q_(*be, q), k_(*be, k), v_(*be, v), do_(*be, dout), o_(*be, nans(nq)), l_(*be, nans(nl)),
        gq(*be, nans(nq)), gk(*be, nans(nk)), gv(*be, nans(nk));
    be->synchronize();
    const int64_t cudnn_ran = cuda::cudnn_sdpa_executions();
    t0 = std::chrono::steady_clock::now();
    kt.attention_forward({q_.p(), k_.p(), v_.p(), o_.p(), l_.p(), B, T, Hq, Hk, D});
    kt.attention_backward({do_.p(), q_.p(), k_.p(), v_.p(), o_.p(), l_.p(), gq.p(), gk.p(), gv.p(), B, T, Hq, Hk, D});
    be->synchronize();
    std::printf(" %s: GPU forward + backward %.1f ms\n", var.name, 1e3 * seconds_since(t0));
    ASSERT_TRUE(kt.status().is_ok()) << kt.status().to_string();
    if (std::string(var.attention) == "cudnn")
      EXPECT_EQ(cuda::cudnn_sdpa_executions() - cudnn_ran, 2) << "cuDNN refused the shape: the cuBLAS fallback ran";
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
  if (masked) cpu->fill_columns({ref.data(), N, V, mask_from, V, -1e30f});
  const std::vector<float> masked_ref = ref;
  cpu->xent_row_max({ref.data(), mx.data(), N, V});
  cpu->xent_sumexp_and_target({ref.data(), targets.data(), mx.data(), se.data(), tl.data(), N, V, v_begin});
  cpu->xent_loss({mx.data(), se.data(), tl.data(), loss.data(), N});
  cpu->xent_backward({ref.data(), targets.data(), mx.data(), se.data(), ref.data(), N, V, v_begin, scale});  // in place
  std::printf("cross-entropy N=%lld V=%lld (v_begin %lld, real vocabulary %lld): CPU reference %.2f s\n",
              (long long)N, (long long)V, (long long)v_begin, (long long)real_vocab, seconds_since(t0));

  auto be = cuda_backend(Precision::kBf16);  // the training precision; these passes are fp32 in every precision
  Kernels& k = be->kernels();
  Dev<float> lg(*be, logits), dmx(*be, nans(static_cast<size_t>(N))), dse(*be, nans(static_cast<size_t>(N))), dtl(*be, nans(static_cast<size_t>(N))),
      dloss(*be, nans(static_cast<size_t>(N)));
  Dev<int32_t> dt(*be, targets);
  if (masked) k.fill_columns({lg.p(), N, V, mask_from, V, -1e30f});
  if (masked) expect_close(lg.get(), masked_ref, kExact, "masked logits");
  k.xent_row_max({lg.p(), dmx.p(), N, V});
  k.xent_sumexp_and_target({lg.p(), dt.p(), dmx.p(), dse.p(), dtl.p(), N, V, v_begin});
  k.xent_loss({dmx.p(), dse.p(), dtl.p(), dloss.p(), N});
  k.xent_backward({lg.p(), dt.p(), dmx.p(), dse.p(), lg.p(), N, V, v_begin, scale});
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
  cpu->to_16bit({x.data(), want16.data(), kHuge});
  cpu->from_16bit({want16.data(), want_back.data(), kHuge});

  auto be = cuda_backend(Precision::kBf16);
  Kernels& k = be->kernels();
  Dev<float> dx(*be, x), dback(*be, size_t(kHuge));
  Dev<uint16_t> dh(*be, size_t(kHuge));
  k.to_16bit({dx.p(), dh.p(), kHuge});
  k.from_16bit({dh.p(), dback.p(), kHuge});
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
  k.to_16bit({dx.p(), dh.p(), kHuge});
  k.from_16bit({dh.p(), dback.p(), kHuge});
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
    cpu->bias_backward({dy.data(), dbias.data(), N, C});
    std::printf("bias_backward N=%lld C=%lld: CPU reference %.2f s\n", (long long)N, (long long)C, seconds_since(t0));
    g0.set(acc0);
    k.bias_backward({ddy.p(), g0.p(), N, C});
    be->synchronize();
    ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();
    expect_close(g0.get(), dbias, Tol{1e-4, 1e-4, 0}, "bias_backward dbias (accumulated)");
  }
  {  // LayerNorm
    std::vector<float> y(nc), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N)), dxr(nc), gw = acc0, gb = acc1;
    auto t0 = std::chrono::steady_clock::now();
    cpu->layernorm_forward({x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, 1e-5f});
    cpu->layernorm_backward({dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dxr.data(), gw.data(), gb.data(),
                            N, C});
    std::printf("layernorm N=%lld C=%lld: CPU reference %.2f s\n", (long long)N, (long long)C, seconds_since(t0));
    k.layernorm_forward({dx_.p(), dw_.p(), db_.p(), out.p(), dmean.p(), drstd.p(), N, C, 1e-5f});
    be->synchronize();
    ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();
    expect_close(out.get(), y, Tol{1e-5, 1e-5, 0}, "layernorm y");
    expect_close(dmean.get(), mean, Tol{1e-6, 1e-6, 0}, "layernorm mean");
    expect_close(drstd.get(), rstd, Tol{1e-5, 1e-5, 0}, "layernorm rstd");
    g0.set(acc0);
    g1.set(acc1);
    k.layernorm_backward({ddy.p(), dx_.p(), dw_.p(), dmean.p(), drstd.p(), out.p(), g0.p(), g1.p(), N, C});
    be->synchronize();
    ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();
    expect_close(out.get(), dxr, Tol{1e-5, 1e-5, 0}, "layernorm dx");
    expect_close(g0.get(), gw, Tol{1e-4, 1e-4, 0}, "layernorm dw (accumulated)");
    expect_close(g1.get(), gb, Tol{1e-4, 1e-4, 0}, "layernorm db (accumulated)");
  }
  {  // RMSNorm
    std::vector<float> y(nc), rstd(static_cast<size_t>(N)), dxr(nc), gw = acc1;
    auto t0 = std::chrono::steady_clock::now();
    cpu->rmsnorm_forward({x.data(), w.data(), y.data(), rstd.data(), N, C, 1e-6f});
    cpu->rmsnorm_backward({dy.data(), x.data(), w.data(), rstd.data(), dxr.data(), gw.data(), N, C});
    std::printf("rmsnorm N=%lld C=%lld: CPU reference %.2f s\n", (long long)N, (long long)C, seconds_since(t0));
    k.rmsnorm_forward({dx_.p(), dw_.p(), out.p(), drstd.p(), N, C, 1e-6f});
    be->synchronize();
    ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();
    expect_close(out.get(), y, Tol{1e-5, 1e-5, 0}, "rmsnorm y");
    expect_close(drstd.get(), rstd, Tol{1e-5, 1e-5, 0}, "rmsnorm rstd");
    g0.set(acc1);
    k.rmsnorm_backward({ddy.p(), dx_.p(), dw_.p(), drstd.p(), out.p(), g0.p(), N, C});
    be->synchronize();
    ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();
    expect_close(out.get(), dxr, Tol{1e-5, 1e-5, 0}, "rmsnorm dx");
    expect_close(g0.get(), gw, Tol{1e-4, 1e-4, 0}, "rmsnorm dw (accumulated)");
  }
}


}  // namespace
}  // namespace loom::exec
