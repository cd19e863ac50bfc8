// Every CUDA kernel against the CPU reference (exec/backend/cpu_ops.h) on
// random inputs, forward and backward. Skips, saying why, without a GPU.
// Tolerances: fp32 kernels 1e-5 relative (different summation order);
// bf16 GEMM against the CPU GEMM of the same bf16-rounded inputs, 2e-3
// relative to the row's magnitude (fp32 accumulation in another order).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "exec/backend/compute_backend.h"
#include "exec/backend/cpu_ops.h"
#include "exec/backend/cuda/cuda_backend.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom {
namespace {

#define SKIP_WITHOUT_GPU()                                                                                  \
  if (cuda::device_count() == 0)                                                                            \
  GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0): the CUDA kernels compiled and linked; " \
                  "their comparison with the CPU reference runs on a machine with an NVIDIA GPU"

std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Device copy of a host vector, freed at scope end.
template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<T>& h) : n(h.size()) {
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit Dev(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0, n * sizeof(T)), cudaSuccess);
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0;
  for (float w : want) scale = std::max(scale, double(std::fabs(w)));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * std::max(1.0, scale)) << what << " at " << i;
}

TEST(CudaOps, DeviceQueryNeverFails) {
  const int n = cuda::device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(cuda::device_description(n), "");  // one past the last device
  if (n > 0) {
    EXPECT_NE(cuda::device_description(0), "");
  }
}

TEST(CudaOps, LayerNormForwardBackwardMatchCpu) {
  SKIP_WITHOUT_GPU();
  // The last shape spans several 256-row chunks of the column sums.
  for (auto [N, C] : {std::pair<int64_t, int64_t>{7, 33}, {64, 768}, {5, 4096}, {1100, 70}}) {
    auto x = random_vec(size_t(N * C), 1, -2, 3), w = random_vec(static_cast<size_t>(C), 2), b = random_vec(static_cast<size_t>(C), 3);
    auto dy = random_vec(size_t(N * C), 4);
    std::vector<float> y(x.size()), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N)), dx(x.size()), dw(static_cast<size_t>(C), 0.5f),
        db(static_cast<size_t>(C), -0.25f);
    cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, 1e-5f);
    std::vector<float> dw0 = dw, db0 = db;
    cpu::layernorm_backward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(), db.data(),
                            N, C);
    Dev<float> dx_(x), dw_(w), db_(b), dy_(y.size()), dmean(static_cast<size_t>(N)), drstd(static_cast<size_t>(N)), ddy(dy), ddx(x.size()),
        ddw(dw0), ddb(db0);
    ASSERT_TRUE(cuda::layernorm_forward(dx_.p, dw_.p, db_.p, dy_.p, dmean.p, drstd.p, N, C, 1e-5f, nullptr).is_ok());
    expect_close(dy_.host(), y, 1e-5, "y");
    expect_close(dmean.host(), mean, 1e-6, "mean");
    expect_close(drstd.host(), rstd, 1e-5, "rstd");
    ASSERT_TRUE(cuda::layernorm_backward(ddy.p, dx_.p, dw_.p, dmean.p, drstd.p, ddx.p, ddw.p, ddb.p, N, C, nullptr)
                    .is_ok());
    expect_close(ddx.host(), dx, 1e-5, "dx");
    // Summed in double over chunks here, in float row by row on the CPU.
    const double sum_tol = N > 256 ? 1e-4 : 1e-5;
    expect_close(ddw.host(), dw, sum_tol, "dw (accumulated)");
    expect_close(ddb.host(), db, sum_tol, "db (accumulated)");
  }
}

TEST(CudaOps, GeluForwardBackwardMatchCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 100003;
  auto x = random_vec(static_cast<size_t>(n), 5, -6, 6), dy = random_vec(static_cast<size_t>(n), 6);
  std::vector<float> y(x.size()), dx(x.size());
  cpu::gelu_forward(x.data(), y.data(), n);
  cpu::gelu_backward(dy.data(), x.data(), dx.data(), n);
  Dev<float> dx_(x), dy_(y.size()), ddy(dy), ddx(x.size());
  ASSERT_TRUE(cuda::gelu_forward(dx_.p, dy_.p, n, nullptr).is_ok());
  ASSERT_TRUE(cuda::gelu_backward(ddy.p, dx_.p, ddx.p, n, nullptr).is_ok());
  expect_close(dy_.host(), y, 1e-5, "gelu");
  expect_close(ddx.host(), dx, 1e-5, "gelu'");
}

TEST(CudaOps, AdamWMatchesCpuOverSteps) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 50001;
  auto p = random_vec(static_cast<size_t>(n), 7), m = std::vector<float>(static_cast<size_t>(n), 0.f), v = m;
  Dev<float> dp(p), dm(m), dv(v);
  for (int64_t step = 1; step <= 5; ++step) {
    auto g = random_vec(static_cast<size_t>(n), uint32_t(10 + step));
    Dev<float> dg(g);
    // The last step folds a clipping factor into the gradient.
    const float gs = step == 3 ? 0.37f : 1.0f;
    cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step, gs);
    ASSERT_TRUE(
        cuda::adamw_update(dp.p, dg.p, dm.p, dv.p, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step, gs, nullptr).is_ok());
  }
  expect_close(dp.host(), p, 1e-6, "param");
  expect_close(dm.host(), m, 1e-6, "m");
  expect_close(dv.host(), v, 1e-6, "v");
  EXPECT_FALSE(cuda::adamw_update(dp.p, dp.p, dm.p, dv.p, n, 1, 0.9f, 0.95f, 1e-8f, 0, 0, 1.0f, nullptr).is_ok());
}

TEST(CudaOps, SumSquaresAddAndTriadMatchCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1 << 20;
  auto x = random_vec(static_cast<size_t>(n), 20), y = random_vec(static_cast<size_t>(n), 21);
  Dev<float> dx(x), dy(y), dz(static_cast<size_t>(n));
  Dev<double> dsum(size_t(1));
  ASSERT_TRUE(cuda::sum_squares(dx.p, n, dsum.p, nullptr).is_ok());
  const double want = cpu::sum_squares(x.data(), n);
  EXPECT_NEAR(dsum.host()[0], want, 1e-9 * want);
  ASSERT_TRUE(cuda::triad(dz.p, dx.p, dy.p, 0.5f, n, nullptr).is_ok());
  std::vector<float> z(x.size());
  for (size_t i = 0; i < z.size(); ++i) z[i] = x[i] + 0.5f * y[i];
  expect_close(dz.host(), z, 1e-7, "triad");
  ASSERT_TRUE(cuda::add_inplace(dy.p, dx.p, n, nullptr).is_ok());
  cpu::add_inplace(y.data(), x.data(), n);
  expect_close(dy.host(), y, 1e-7, "add");
}

TEST(CudaOps, RmsNormForwardBackwardMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (auto [N, C] : {std::pair<int64_t, int64_t>{37, 1000}, {777, 96}}) {
    auto x = random_vec(static_cast<size_t>(N * C), 40, -2, 2), w = random_vec(static_cast<size_t>(C), 41),
         dy = random_vec(static_cast<size_t>(N * C), 42);
    std::vector<float> y(x.size()), rstd(static_cast<size_t>(N)), dx(x.size()), dw(static_cast<size_t>(C), 0.5f);
    const std::vector<float> dw0 = dw;
    cpu::rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), N, C, 1e-6f);
    cpu::rmsnorm_backward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), N, C);
    Dev<float> dx_(x), dw_(w), dy_(y.size()), drstd(static_cast<size_t>(N)), ddy(dy), ddx(x.size()), ddw(dw0);
    ASSERT_TRUE(cuda::rmsnorm_forward(dx_.p, dw_.p, dy_.p, drstd.p, N, C, 1e-6f, nullptr).is_ok());
    ASSERT_TRUE(cuda::rmsnorm_backward(ddy.p, dx_.p, dw_.p, drstd.p, ddx.p, ddw.p, N, C, nullptr).is_ok());
    expect_close(dy_.host(), y, 1e-5, "y");
    expect_close(ddx.host(), dx, 1e-5, "dx");
    expect_close(ddw.host(), dw, N > 256 ? 1e-4 : 1e-5, "dw");
  }
}

TEST(CudaOps, SwigluAndBiasMatchCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t N = 33, C = 517, n = N * C;
  auto g = random_vec(static_cast<size_t>(n), 50, -5, 5), u = random_vec(static_cast<size_t>(n), 51),
       dy = random_vec(static_cast<size_t>(n), 52), bias = random_vec(static_cast<size_t>(C), 53);
  std::vector<float> y(g.size()), dg(g.size()), du(g.size()), yb = g, db(static_cast<size_t>(C), 1.f);
  cpu::swiglu_forward(g.data(), u.data(), y.data(), n);
  cpu::swiglu_backward(dy.data(), g.data(), u.data(), dg.data(), du.data(), n);
  Dev<float> dg_(g), du_(u), dy_(y.size()), ddy(dy), ddg(g.size()), ddu(g.size());
  ASSERT_TRUE(cuda::swiglu_forward(dg_.p, du_.p, dy_.p, n, nullptr).is_ok());
  ASSERT_TRUE(cuda::swiglu_backward(ddy.p, dg_.p, du_.p, ddg.p, ddu.p, n, nullptr).is_ok());
  expect_close(dy_.host(), y, 1e-5, "swiglu");
  expect_close(ddg.host(), dg, 1e-5, "dgate");
  expect_close(ddu.host(), du, 1e-5, "dup");
  Dev<float> dyb(yb), dbias(bias), ddb(db);
  cpu::add_bias(yb.data(), bias.data(), N, C);
  cpu::bias_backward(dy.data(), db.data(), N, C);
  ASSERT_TRUE(cuda::add_bias(dyb.p, dbias.p, N, C, nullptr).is_ok());
  ASSERT_TRUE(cuda::bias_backward(ddy.p, ddb.p, N, C, nullptr).is_ok());
  expect_close(dyb.host(), yb, 1e-6, "add_bias");
  expect_close(ddb.host(), db, 1e-5, "bias_backward");
  // Many rows: several chunks of the column sums, combined in order.
  const int64_t Nb = 3000, Cb = 45;
  auto big = random_vec(size_t(Nb * Cb), 54);
  std::vector<float> dbb(size_t(Cb), 0.25f);
  Dev<float> dbig(big), ddbb(dbb);
  cpu::bias_backward(big.data(), dbb.data(), Nb, Cb);
  ASSERT_TRUE(cuda::bias_backward(dbig.p, ddbb.p, Nb, Cb, nullptr).is_ok());
  expect_close(ddbb.host(), dbb, 1e-4, "bias_backward over 3000 rows");
}

TEST(CudaOps, RopeRoundTripsAndMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t B = 2, T = 300, H = 3, D = 64;
  auto x = random_vec(static_cast<size_t>(B * T * H * D), 60);
  std::vector<float> ref = x;
  cpu::rope_forward(ref.data(), B, T, H, D, 500000.f, 7);
  Dev<float> dx(x);
  ASSERT_TRUE(cuda::rope_forward(dx.p, B, T, H, D, 500000.f, 7, nullptr).is_ok());
  expect_close(dx.host(), ref, 1e-5, "rope");
  ASSERT_TRUE(cuda::rope_backward(dx.p, B, T, H, D, 500000.f, 7, nullptr).is_ok());
  expect_close(dx.host(), x, 1e-5, "rope then its inverse");
  EXPECT_FALSE(cuda::rope_forward(dx.p, B, T, H, 63, 1e4f, 0, nullptr).is_ok());
}

TEST(CudaOps, RopeFrequencyTableMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t B = 2, T = 300, H = 3, D = 128;
  std::vector<double> freqs(size_t(D / 2));  // a Llama-3.1-like table: some divided by 8, a band between
  for (int64_t i = 0; i < D / 2; ++i)
    freqs[size_t(i)] = std::pow(500000.0, -2.0 * double(i) / double(D)) * (i < 29 ? 1.0 : i > 34 ? 0.125 : 0.4);
  auto x = random_vec(static_cast<size_t>(B * T * H * D), 61);
  std::vector<float> ref = x;
  cpu::rope_freqs_forward(ref.data(), B, T, H, D, freqs.data(), 7);
  Dev<float> dx(x);
  ASSERT_TRUE(cuda::rope_freqs_forward(dx.p, B, T, H, D, freqs.data(), 7, nullptr).is_ok());
  expect_close(dx.host(), ref, 1e-5, "rope_freqs");
  ASSERT_TRUE(cuda::rope_freqs_backward(dx.p, B, T, H, D, freqs.data(), 7, nullptr).is_ok());
  expect_close(dx.host(), x, 1e-5, "rope_freqs then its inverse");
  EXPECT_FALSE(cuda::rope_freqs_forward(dx.p, B, T, H, 63, freqs.data(), 0, nullptr).is_ok());
  EXPECT_FALSE(cuda::rope_freqs_forward(dx.p, 1, 1, 1, 2 * cuda::kRopeMaxHalf + 2, freqs.data(), 0, nullptr).is_ok());
}

TEST(CudaOps, AttentionForwardBackwardMatchCpuWithGqa) {
  SKIP_WITHOUT_GPU();
  const int64_t B = 2, T = 77, Hq = 4, Hk = 2, D = 32;
  const size_t nq = static_cast<size_t>(B * T * Hq * D), nk = static_cast<size_t>(B * T * Hk * D);
  auto q = random_vec(nq, 70), k = random_vec(nk, 71), v = random_vec(nk, 72), dout = random_vec(nq, 73);
  std::vector<float> out(nq), lse(static_cast<size_t>(B * Hq * T)), dq(nq), dk(nk), dv(nk);
  cpu::attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), B, T, Hq, Hk, D);
  cpu::attention_backward(dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), dq.data(), dk.data(),
                          dv.data(), B, T, Hq, Hk, D);
  Dev<float> dq_(q), dk_(k), dv_(v), dout_(dout), dout2(nq), dlse(lse.size()), ddq(nq), ddk(nk), ddv(nk);
  ASSERT_TRUE(cuda::attention_forward(dq_.p, dk_.p, dv_.p, dout2.p, dlse.p, B, T, Hq, Hk, D, true, nullptr).is_ok());
  expect_close(dout2.host(), out, 1e-5, "out");
  expect_close(dlse.host(), lse, 1e-5, "lse");
  ASSERT_TRUE(cuda::attention_backward(dout_.p, dq_.p, dk_.p, dv_.p, dout2.p, dlse.p, ddq.p, ddk.p, ddv.p, B, T, Hq, Hk,
                                       D, true, nullptr)
                  .is_ok());
  expect_close(ddq.host(), dq, 1e-4, "dq");
  expect_close(ddk.host(), dk, 1e-4, "dk");
  expect_close(ddv.host(), dv, 1e-4, "dv");
}

// The cuBLAS attention path (what training uses) against the CPU reference:
// fp32 within 1e-4, bf16 operands within 3e-2 of the largest value; GQA
// groups adding into their KV head, and head slices of one head at a time
// (the long-sequence workspace bound) as well as all heads at once.
TEST(CudaOps, AttentionGemmPathMatchesCpuInFp32AndBf16) {
  SKIP_WITHOUT_GPU();
  const int64_t B = 2, T = 77, Hq = 4, Hk = 2, D = 32;
  const size_t nq = static_cast<size_t>(B * T * Hq * D), nk = static_cast<size_t>(B * T * Hk * D);
  auto q = random_vec(nq, 90), k = random_vec(nk, 91), v = random_vec(nk, 92), dout = random_vec(nq, 93);
  std::vector<float> out(nq), lse(static_cast<size_t>(B * Hq * T)), dq(nq), dk(nk), dv(nk);
  cpu::attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), B, T, Hq, Hk, D);
  cpu::attention_backward(dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), dq.data(), dk.data(),
                          dv.data(), B, T, Hq, Hk, D);
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  const size_t ws = size_t(cuda::attention_gemm_workspace_floats(T, Hk));
  Dev<float> scores(ws), dscores(ws);
  Dev<uint16_t> s16(ws), q16(nq), do16(nq), k16(nk), v16(nk);
  for (bool bf16 : {false, true}) {
    for (int64_t slice : {int64_t(0), int64_t(1)}) {
      cuda::AttentionGemmScratch w;
      w.scores = scores.p, w.dscores = dscores.p, w.scores16 = s16.p, w.heads_per_slice = slice;
      if (bf16) w.q16 = q16.p, w.do16 = do16.p, w.k16 = k16.p, w.v16 = v16.p;
      Dev<float> dq_(q), dk_(k), dv_(v), dout_(dout), o(nq), dlse(lse.size()), gq(nq), gk(nk), gv(nk);
      const cuda::GemmInput in = bf16 ? cuda::GemmInput::kBf16 : cuda::GemmInput::kF32;
      ASSERT_TRUE(cuda::attention_forward_gemm(h, in, dq_.p, dk_.p, dv_.p, o.p, dlse.p, B, T, Hq, Hk, D, w, true, nullptr)
                      .is_ok());
      ASSERT_TRUE(cuda::attention_backward_gemm(h, in, dout_.p, dq_.p, dk_.p, dv_.p, o.p, dlse.p, gq.p, gk.p, gv.p, B,
                                                T, Hq, Hk, D, w, true, nullptr)
                      .is_ok());
      const double tol = bf16 ? 3e-2 : 1e-4;
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "fp32") + (slice ? ", one head per slice" : ", all heads"));
      expect_close(o.host(), out, tol, "out");
      expect_close(dlse.host(), lse, tol, "lse");
      expect_close(gq.host(), dq, tol, "dq");
      expect_close(gk.host(), dk, tol, "dk");
      expect_close(gv.host(), dv, tol, "dv");
    }
  }
  cublasDestroy(h);
}

TEST(CudaOps, EmbeddingAndVocabParallelCrossEntropyMatchCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t N = 64, C = 48, V = 500, v_begin = 250;  // the slice [250, 750) of a 750-token vocabulary
  std::vector<int32_t> tok(static_cast<size_t>(N));
  std::mt19937 rng(80);
  for (auto& t : tok) t = int32_t(rng() % 750);
  auto wte = random_vec(static_cast<size_t>(V * C), 81), dout = random_vec(static_cast<size_t>(N * C), 82);
  std::vector<float> emb(static_cast<size_t>(N * C)), dwte(wte.size(), 0.25f);
  const std::vector<float> dwte0 = dwte;
  cpu::embedding_forward(tok.data(), wte.data(), emb.data(), N, C, v_begin, V);
  cpu::embedding_backward(tok.data(), dout.data(), dwte.data(), N, C, v_begin, V);
  Dev<int32_t> dtok(tok);
  Dev<float> dwte_(wte), demb(emb.size()), ddout(dout), ddwte(dwte0);
  ASSERT_TRUE(cuda::embedding_forward(dtok.p, dwte_.p, demb.p, N, C, v_begin, V, nullptr).is_ok());
  ASSERT_TRUE(cuda::embedding_backward(dtok.p, ddout.p, ddwte.p, N, C, v_begin, V, nullptr).is_ok());
  expect_close(demb.host(), emb, 0, "embedding");
  expect_close(ddwte.host(), dwte, 1e-6, "embedding backward");
  {
    // Many rows and few distinct tokens: long runs per vocabulary row, summed
    // in row order (bit-equal to the CPU), tokens outside the slice skipped.
    const int64_t Nb = 5000;
    std::vector<int32_t> tb(static_cast<size_t>(Nb));
    for (auto& t : tb) t = int32_t(240 + rng() % 30);  // [240, 270): ten below the slice
    auto db = random_vec(static_cast<size_t>(Nb * C), 84);
    std::vector<float> gw(wte.size(), -0.5f);
    Dev<int32_t> dtb(tb);
    Dev<float> ddb(db), dgw(gw);
    cpu::embedding_backward(tb.data(), db.data(), gw.data(), Nb, C, v_begin, V);
    ASSERT_TRUE(cuda::embedding_backward(dtb.p, ddb.p, dgw.p, Nb, C, v_begin, V, nullptr).is_ok());
    expect_close(dgw.host(), gw, 0, "embedding backward, long runs");
  }
  // Cross-entropy over this slice of the vocabulary.
  auto logits = random_vec(static_cast<size_t>(N * V), 83, -8, 8);
  std::vector<float> mx(static_cast<size_t>(N)), se(mx.size()), tl(mx.size()), loss(mx.size()), dl(logits.size());
  cpu::xent_row_max(logits.data(), mx.data(), N, V);
  cpu::xent_sumexp_and_target(logits.data(), tok.data(), mx.data(), se.data(), tl.data(), N, V, v_begin);
  cpu::xent_loss(mx.data(), se.data(), tl.data(), loss.data(), N);
  cpu::xent_backward(logits.data(), tok.data(), mx.data(), se.data(), dl.data(), N, V, v_begin, 1.f / 64);
  Dev<float> dlog(logits), dmx(mx.size()), dse(mx.size()), dtl(mx.size()), dloss(mx.size()), ddl(dl.size());
  ASSERT_TRUE(cuda::xent_row_max(dlog.p, dmx.p, N, V, nullptr).is_ok());
  ASSERT_TRUE(cuda::xent_sumexp_and_target(dlog.p, dtok.p, dmx.p, dse.p, dtl.p, N, V, v_begin, nullptr).is_ok());
  ASSERT_TRUE(cuda::xent_loss(dmx.p, dse.p, dtl.p, dloss.p, N, nullptr).is_ok());
  ASSERT_TRUE(cuda::xent_backward(dlog.p, dtok.p, dmx.p, dse.p, ddl.p, N, V, v_begin, 1.f / 64, nullptr).is_ok());
  expect_close(dmx.host(), mx, 0, "row max");
  expect_close(dse.host(), se, 1e-6, "sum exp");
  expect_close(dtl.host(), tl, 0, "target logit");
  expect_close(dloss.host(), loss, 1e-6, "loss");
  expect_close(ddl.host(), dl, 1e-6, "dlogits");
}

// bf16 of a float, round to nearest even (what __float2bfloat16 does).
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float from_bf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(CudaOps, Bf16CastsRoundToNearestEven) {
  SKIP_WITHOUT_GPU();
  auto x = random_vec(100000, 90, -1e3f, 1e3f);
  x[0] = 1.00390625f;  // halfway between two bf16 values: ties to even (1.0)
  x[1] = 1.01171875f;  // halfway: ties to even (1.015625)
  std::vector<uint16_t> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = to_bf16(x[i]);
  Dev<float> dx(x), dback(x.size());
  Dev<uint16_t> dh(x.size());
  ASSERT_TRUE(cuda::cast_to_bf16(dx.p, dh.p, int64_t(x.size()), nullptr).is_ok());
  EXPECT_EQ(dh.host(), want);
  EXPECT_EQ(from_bf16(want[0]), 1.0f);
  EXPECT_EQ(from_bf16(want[1]), 1.015625f);
  ASSERT_TRUE(cuda::cast_from_bf16(dh.p, dback.p, int64_t(x.size()), nullptr).is_ok());
  std::vector<float> back = dback.host();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(back[i], from_bf16(want[i])) << i;
}

TEST(CudaOps, GemmsMatchCpuInEveryTransposeMode) {
  SKIP_WITHOUT_GPU();
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t M = 67, N = 129, K = 96;
      auto a = random_vec(size_t(M * K), 30), b = random_vec(size_t(K * N), 31), c0 = random_vec(size_t(M * N), 32);
      // fp32
      std::vector<float> c = c0;
      cpu::gemm(ta, tb, M, N, K, 0.75f, a.data(), b.data(), 0.5f, c.data());
      Dev<float> da(a), db(b), dc(c0);
      ASSERT_TRUE(cuda::gemm_f32(h, ta, tb, M, N, K, 0.75f, da.p, db.p, 0.5f, dc.p, nullptr).is_ok());
      expect_close(dc.host(), c, 1e-5, ta ? (tb ? "f32 TT" : "f32 TN") : (tb ? "f32 NT" : "f32 NN"));
      // bf16 inputs, fp32 accumulate: against the CPU on the rounded inputs.
      std::vector<uint16_t> ah(a.size()), bh(b.size());
      std::vector<float> ar(a.size()), br(b.size());
      for (size_t i = 0; i < a.size(); ++i) ah[i] = to_bf16(a[i]), ar[i] = from_bf16(ah[i]);
      for (size_t i = 0; i < b.size(); ++i) bh[i] = to_bf16(b[i]), br[i] = from_bf16(bh[i]);
      std::vector<float> cr = c0;
      cpu::gemm(ta, tb, M, N, K, 1.f, ar.data(), br.data(), 0.f, cr.data());
      Dev<uint16_t> dah(ah), dbh(bh);
      Dev<float> dcr(c0);
      ASSERT_TRUE(cuda::gemm_bf16(h, ta, tb, M, N, K, 1.f, dah.p, dbh.p, 0.f, dcr.p, nullptr).is_ok());
      expect_close(dcr.host(), cr, 2e-3, "bf16");
    }
  cublasDestroy(h);
}

// fp16 casts against the host's IEEE binary16 conversion (round to nearest
// even, overflow to inf beyond 65504: what loss scaling detects), and the
// fp16 GEMM against the CPU GEMM of the rounded inputs.
uint16_t to_fp16(float x) {
  _Float16 h = static_cast<_Float16>(x);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
float from_fp16(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

TEST(CudaOps, Fp16CastsAndGemmMatchIeeeHalf) {
  SKIP_WITHOUT_GPU();
  auto x = random_vec(100000, 95, -7e4f, 7e4f);
  x[0] = 1.00048828125f;  // halfway between 1 and the next half: ties to even (1.0)
  x[1] = 65520.f;         // rounds past the largest half: inf
  x[2] = 1e-8f;           // below the smallest subnormal's half: 0
  std::vector<uint16_t> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = to_fp16(x[i]);
  Dev<float> dx(x), dback(x.size());
  Dev<uint16_t> dh(x.size());
  ASSERT_TRUE(cuda::cast_to_fp16(dx.p, dh.p, int64_t(x.size()), nullptr).is_ok());
  EXPECT_EQ(dh.host(), want);
  EXPECT_EQ(from_fp16(want[0]), 1.0f);
  EXPECT_TRUE(std::isinf(from_fp16(want[1])));
  ASSERT_TRUE(cuda::cast_from_fp16(dh.p, dback.p, int64_t(x.size()), nullptr).is_ok());
  std::vector<float> back = dback.host();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(back[i], from_fp16(want[i])) << i;

  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t M = 67, N = 129, K = 96;
      auto a = random_vec(size_t(M * K), 33), b = random_vec(size_t(K * N), 34), c0 = random_vec(size_t(M * N), 35);
      std::vector<uint16_t> ah(a.size()), bh(b.size());
      std::vector<float> ar(a.size()), br(b.size());
      for (size_t i = 0; i < a.size(); ++i) ah[i] = to_fp16(a[i]), ar[i] = from_fp16(ah[i]);
      for (size_t i = 0; i < b.size(); ++i) bh[i] = to_fp16(b[i]), br[i] = from_fp16(bh[i]);
      std::vector<float> c = c0;
      cpu::gemm(ta, tb, M, N, K, 1.f, ar.data(), br.data(), 0.5f, c.data());
      Dev<uint16_t> dah(ah), dbh(bh);
      Dev<float> dc(c0);
      ASSERT_TRUE(cuda::gemm_fp16(h, ta, tb, M, N, K, 1.f, dah.p, dbh.p, 0.5f, dc.p, nullptr).is_ok());
      expect_close(dc.host(), c, 2e-3, "fp16");
    }
  cublasDestroy(h);
}

// The helpers the kernel table adds (learned positions forward and backward
// with rows wrapping over T and an SP row offset, padded-vocabulary masks,
// scaling, plain sums) against the CPU kernel table.
TEST(CudaOps, PositionsMaskScaleAndSumMatchCpu) {
  SKIP_WITHOUT_GPU();
  auto cpu = exec::make_cpu_kernels();
  const int64_t R = 3 * 16 + 5, C = 24, T = 16, row0 = 7;
  auto x = random_vec(size_t(R * C), 1), wpe = random_vec(size_t(T * C), 2), dwpe0 = random_vec(size_t(T * C), 3);
  Dev<float> dx(x), dw(wpe), ddw(dwpe0);
  ASSERT_TRUE(cuda::add_positions(dx.p, dw.p, R, C, T, row0, nullptr).is_ok());
  ASSERT_TRUE(cuda::positions_backward(dx.p, ddw.p, R, C, T, row0, nullptr).is_ok());
  auto want_x = x, want_dw = dwpe0;
  cpu->add_positions({want_x.data(), wpe.data(), R, C, T, row0});
  cpu->positions_backward({want_x.data(), want_dw.data(), R, C, T, row0});
  expect_close(dx.host(), want_x, 1e-6, "add_positions");
  expect_close(ddw.host(), want_dw, 1e-5, "positions_backward");

  const int64_t N = 9, V = 70;
  auto logits = random_vec(size_t(N * V), 4);
  Dev<float> dl(logits);
  ASSERT_TRUE(cuda::fill_columns(dl.p, N, V, 50, V, -1e30f, nullptr).is_ok());
  ASSERT_TRUE(cuda::scale_inplace(dl.p, 0.5f, N * 50, nullptr).is_ok());
  cpu->fill_columns({logits.data(), N, V, 50, V, -1e30f});
  cpu->scale_inplace({logits.data(), 0.5f, N * 50});
  EXPECT_EQ(dl.host(), logits);

  auto v = random_vec(100003, 5);
  Dev<float> dv(v);
  Dev<double> out(size_t(2));
  ASSERT_TRUE(cuda::sum(dv.p, int64_t(v.size()), out.p, nullptr).is_ok());
  ASSERT_TRUE(cuda::sum_squares(dv.p, int64_t(v.size()), out.p + 1, nullptr).is_ok());
  auto got = out.host();
  EXPECT_NEAR(got[0], cpu->sum({v.data(), int64_t(v.size())}), 1e-9 * v.size());
  EXPECT_NEAR(got[1], cpu::sum_squares(v.data(), int64_t(v.size())), 1e-9 * v.size());
}

}  // namespace
}  // namespace loom

namespace loom::exec {
namespace {

TEST(CudaBackend, AllocatesZeroedMemoryCachesAndCopies) {
  auto be = make_cuda_backend(0);
  if (cuda::device_count() == 0) {
    ASSERT_FALSE(be.is_ok());
    EXPECT_EQ(be.status().code(), StatusCode::kUnsupported);
    GTEST_SKIP() << "no CUDA device visible: checked the refusal only";
  }
  ASSERT_TRUE(be.is_ok()) << be.status().to_string();
  ComputeBackend& b = **be;
  EXPECT_FALSE(b.host_visible());
  std::vector<float> h(1000, 7.f), back(1000, -1.f);
  void* first = nullptr;
  {
    DeviceBuffer d(&b, 4000);
    first = d.f32();
    b.copy_to_host(back.data(), d.f32(), 4000);
    EXPECT_EQ(back, std::vector<float>(1000, 0.f)) << "allocate() is zero-filled";
    b.copy_to_device(d.f32(), h.data(), 4000);
    b.copy_to_host(back.data(), d.f32(), 4000);
    EXPECT_EQ(back, h);
    EXPECT_EQ(b.allocated_bytes(), 4000u);
  }
  EXPECT_EQ(b.allocated_bytes(), 0u);
  EXPECT_EQ(b.peak_allocated_bytes(), 4000u);
  DeviceBuffer again(&b, 4000);
  EXPECT_EQ(again.f32(), first) << "a freed block of the same size is reused";
  b.copy_to_host(back.data(), again.f32(), 4000);
  EXPECT_EQ(back, std::vector<float>(1000, 0.f)) << "reused blocks are zeroed again";
}

// Pinned, copy-stream transfers: the source may be overwritten as soon as the
// call returns, and kernels queued after it see the data.
TEST(CudaBackend, AsyncCopiesAreStagedAndOrderedBeforeKernels) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  auto be = make_cuda_backend(0);
  ASSERT_TRUE(be.is_ok()) << be.status().to_string();
  ComputeBackend& b = **be;
  DeviceBuffer x(&b, 4 * 100000), y(&b, 4 * 100000);
  std::vector<float> h(100000), back(100000);
  for (int round = 0; round < 5; ++round) {
    for (size_t i = 0; i < h.size(); ++i) h[i] = float(i % 97) + round;
    b.copy_to_device_async(x.f32(), h.data(), 4 * h.size());
    std::fill(h.begin(), h.end(), -1.f);  // the staging copy was taken already
    b.fill_zero(y.f32(), y.bytes());
    b.kernels().add_inplace({y.f32(), x.f32(), 100000});
    b.copy_to_host(back.data(), y.f32(), 4 * back.size());
    for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], float(i % 97) + round) << "round " << round;
  }
}

}  // namespace
}  // namespace loom::exec
