// CPU reference kernels against independent truths: naive double-precision
// formulas for every forward, central finite differences of
// L = sum(dy * forward(x)) for every backward, and algebraic identities
// (rope's inverse and relative-position property, vocab-slice combination).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "exec/backend/compute_backend.h"
#include "exec/backend/cpu_ops.h"

namespace loom::cpu {
namespace {

using Vec = std::vector<float>;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

Vec random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Vec v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Compares analytic[i] with the central difference of loss() in x[i]
// (perturbed in place, float forward, loss summed in double). The step is the
// float difference actually applied, so rounding of x +- eps does not bias it.
// `stride` > 1 checks every stride-th element (large inputs).
::testing::AssertionResult matches_finite_differences(const std::string& what, Vec& x, const Vec& analytic,
                                                      const std::function<double()>& loss, float eps = 1e-2f,
                                                      double rtol = 1e-2, double atol = 1e-3, size_t stride = 1) {
  if (x.size() != analytic.size()) return ::testing::AssertionFailure() << what << ": size mismatch";
  // The kernel under test ran with the default threads; the hundreds of
  // reference forwards run on one, so a loaded machine does not stall them at
  // OpenMP barriers.
  set_num_threads(1);
  int bad = 0;
  std::string first;
  for (size_t i = 0; i < x.size(); i += stride) {
    const float orig = x[i];
    x[i] = orig + eps;
    const double h_plus = x[i];
    const double l_plus = loss();
    x[i] = orig - eps;
    const double h_minus = x[i];
    const double l_minus = loss();
    x[i] = orig;
    const double fd = (l_plus - l_minus) / (h_plus - h_minus);
    if (!(std::abs(analytic[i] - fd) <= atol + rtol * std::abs(fd))) {
      if (bad++ == 0) first = " first at [" + std::to_string(i) + "]: analytic " + std::to_string(analytic[i]) +
                              " vs finite difference " + std::to_string(fd);
    }
  }
  set_num_threads(0);
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " mismatches," << first;
}

void expect_all_near(const Vec& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << what << " [" << i << "]";
}

// ---------------------------------------------------------------- gemm

TEST(CpuGemm, MatchesTripleLoopForAllTransposesAlphaBeta) {
  struct Shape { int64_t M, N, K; };
  for (Shape s : {Shape{1, 1, 1}, Shape{7, 5, 9}, Shape{67, 45, 33}}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        for (float beta : {0.0f, 0.3f, 1.0f}) {
          const float alpha = 0.7f;
          const Vec A = random_vec(s.M * s.K, 1), B = random_vec(s.K * s.N, 2), C0 = random_vec(s.M * s.N, 3);
          // beta == 0: C is write-only, even when it holds NaN.
          Vec C = beta == 0.0f ? Vec(s.M * s.N, kNaN) : C0;
          gemm(ta, tb, s.M, s.N, s.K, alpha, A.data(), B.data(), beta, C.data());
          std::vector<double> want(s.M * s.N);
          for (int64_t i = 0; i < s.M; ++i) {
            for (int64_t j = 0; j < s.N; ++j) {
              double acc = 0.0;
              for (int64_t p = 0; p < s.K; ++p) {
                const double a = ta ? A[p * s.M + i] : A[i * s.K + p];  // stored (K,M) or (M,K)
                const double b = tb ? B[j * s.K + p] : B[p * s.N + j];  // stored (N,K) or (K,N)
                acc += a * b;
              }
              want[i * s.N + j] = alpha * acc + (beta == 0.0f ? 0.0 : beta * C0[i * s.N + j]);
            }
          }
          expect_all_near(C, want, 1e-4, "gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                                              " beta=" + std::to_string(beta) + " M=" + std::to_string(s.M));
        }
      }
    }
  }
}

TEST(CpuGemm, EmptyInnerDimensionOnlyScalesC) {
  Vec C = {1.0f, 2.0f, 3.0f, 4.0f};
  gemm(false, false, 2, 2, 0, 1.0f, nullptr, nullptr, 0.5f, C.data());
  expect_all_near(C, {0.5, 1.0, 1.5, 2.0}, 0.0, "K=0");
}

// A linear layer y(N,O) = x(N,I) W(O,I)^T with its backward written with the
// other transpose combinations: dx = dy W, dW += dy^T x.
TEST(CpuGemm, LinearLayerBackwardMatchesFiniteDifferences) {
  const int64_t N = 5, I = 6, O = 4;
  Vec x = random_vec(N * I, 10), W = random_vec(O * I, 11);
  const Vec dy = random_vec(N * O, 12);
  auto loss = [&] {
    Vec y(N * O);
    gemm(false, true, N, O, I, 1.0f, x.data(), W.data(), 0.0f, y.data());
    return dot(dy, y);
  };
  Vec dx(N * I), dW(O * I, 0.0f);
  gemm(false, false, N, I, O, 1.0f, dy.data(), W.data(), 0.0f, dx.data());
  gemm(true, false, O, I, N, 1.0f, dy.data(), x.data(), 1.0f, dW.data());
  EXPECT_TRUE(matches_finite_differences("dx", x, dx, loss));
  EXPECT_TRUE(matches_finite_differences("dW", W, dW, loss));
}

TEST(CpuGemm, ThreadCountDoesNotChangeTheResultBeyondRounding) {
  const int64_t M = 96, N = 130, K = 200;
  const Vec A = random_vec(M * K, 4), B = random_vec(K * N, 5);
  Vec C1(M * N), C2(M * N);
  set_num_threads(1);
  gemm(false, false, M, N, K, 1.0f, A.data(), B.data(), 0.0f, C1.data());
  set_num_threads(2);
  gemm(false, false, M, N, K, 1.0f, A.data(), B.data(), 0.0f, C2.data());
  set_num_threads(0);
  for (int64_t i = 0; i < M * N; ++i) ASSERT_NEAR(C1[i], C2[i], 1e-4);
}

// ---------------------------------------------------------------- norms

TEST(CpuNorm, LayerNormForwardMatchesFormulaAndBackwardMatchesFiniteDifferences) {
  const int64_t N = 4, C = 16;
  const float eps = 1e-5f;
  Vec x = random_vec(N * C, 20, -2.0f, 3.0f), w = random_vec(C, 21, 0.5f, 1.5f), b = random_vec(C, 22);
  Vec y(N * C), mean(N), rstd(N);
  layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, eps);
  std::vector<double> want(N * C);
  for (int64_t n = 0; n < N; ++n) {
    double mu = 0.0, var = 0.0;
    for (int64_t c = 0; c < C; ++c) mu += x[n * C + c] / static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) var += std::pow(x[n * C + c] - mu, 2) / static_cast<double>(C);
    EXPECT_NEAR(mean[n], mu, 1e-6);
    EXPECT_NEAR(rstd[n], 1.0 / std::sqrt(var + eps), 1e-5);
    for (int64_t c = 0; c < C; ++c) want[n * C + c] = (x[n * C + c] - mu) / std::sqrt(var + eps) * w[c] + b[c];
  }
  expect_all_near(y, want, 1e-5, "layernorm y");

  const Vec dy = random_vec(N * C, 23);
  auto loss = [&] {
    Vec yy(N * C), m(N), r(N);
    layernorm_forward(x.data(), w.data(), b.data(), yy.data(), m.data(), r.data(), N, C, eps);
    return dot(dy, yy);
  };
  Vec dx(N * C, kNaN);                              // overwritten
  const Vec dw0 = random_vec(C, 24), db0 = random_vec(C, 25);  // accumulated into
  Vec dw = dw0, db = db0;
  layernorm_backward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(), db.data(), N, C);
  for (int64_t c = 0; c < C; ++c) dw[c] -= dw0[c], db[c] -= db0[c];
  EXPECT_TRUE(matches_finite_differences("layernorm dx", x, dx, loss));
  EXPECT_TRUE(matches_finite_differences("layernorm dw", w, dw, loss));
  EXPECT_TRUE(matches_finite_differences("layernorm db", b, db, loss));
}

TEST(CpuNorm, RmsNormForwardMatchesFormulaAndBackwardMatchesFiniteDifferences) {
  const int64_t N = 4, C = 16;
  const float eps = 1e-6f;
  Vec x = random_vec(N * C, 30, -2.0f, 3.0f), w = random_vec(C, 31, 0.5f, 1.5f);
  Vec y(N * C), rstd(N);
  rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), N, C, eps);
  std::vector<double> want(N * C);
  for (int64_t n = 0; n < N; ++n) {
    double ms = 0.0;
    for (int64_t c = 0; c < C; ++c) ms += std::pow(x[n * C + c], 2) / static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) want[n * C + c] = x[n * C + c] / std::sqrt(ms + eps) * w[c];
  }
  expect_all_near(y, want, 1e-5, "rmsnorm y");

  const Vec dy = random_vec(N * C, 33);
  auto loss = [&] {
    Vec yy(N * C), r(N);
    rmsnorm_forward(x.data(), w.data(), yy.data(), r.data(), N, C, eps);
    return dot(dy, yy);
  };
  Vec dx(N * C, kNaN);
  const Vec dw0 = random_vec(C, 34);
  Vec dw = dw0;
  rmsnorm_backward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), N, C);
  for (int64_t c = 0; c < C; ++c) dw[c] -= dw0[c];
  EXPECT_TRUE(matches_finite_differences("rmsnorm dx", x, dx, loss));
  EXPECT_TRUE(matches_finite_differences("rmsnorm dw", w, dw, loss));
}

// ---------------------------------------------------------------- activations

TEST(CpuActivation, GeluMatchesGpt2TanhFormula) {
  Vec x = {1.0f, -2.0f, 0.5f}, y(3);
  gelu_forward(x.data(), y.data(), 3);
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated in double.
  expect_all_near(y, {0.8411919906082768, -0.04540230591222494, 0.34571400982514394}, 1e-6, "gelu");
  // Within the approximation's known distance (< 5e-4) of the exact erf GELU.
  Vec xs = random_vec(1000, 40, -6.0f, 6.0f), ys(1000);
  gelu_forward(xs.data(), ys.data(), 1000);
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_NEAR(ys[i], 0.5 * xs[i] * (1.0 + std::erf(xs[i] / std::sqrt(2.0))), 5e-4);
  }
}

TEST(CpuActivation, GeluBackwardMatchesFiniteDifferences) {
  const int64_t n = 64;
  Vec x = random_vec(n, 41, -4.0f, 4.0f);
  const Vec dy = random_vec(n, 42);
  auto loss = [&] {
    Vec y(n);
    gelu_forward(x.data(), y.data(), n);
    return dot(dy, y);
  };
  Vec dx(n, kNaN);
  gelu_backward(dy.data(), x.data(), dx.data(), n);
  EXPECT_TRUE(matches_finite_differences("gelu dx", x, dx, loss, 1e-3f));
}

TEST(CpuActivation, SwigluForwardMatchesFormulaAndBackwardMatchesFiniteDifferences) {
  const int64_t n = 64;
  Vec gate = random_vec(n, 50, -5.0f, 5.0f), up = random_vec(n, 51, -2.0f, 2.0f), y(n);
  swiglu_forward(gate.data(), up.data(), y.data(), n);
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = gate[i] / (1.0 + std::exp(-static_cast<double>(gate[i]))) * up[i];
  expect_all_near(y, want, 1e-5, "swiglu y");

  const Vec dy = random_vec(n, 52);
  auto loss = [&] {
    Vec yy(n);
    swiglu_forward(gate.data(), up.data(), yy.data(), n);
    return dot(dy, yy);
  };
  Vec dgate(n, kNaN), dup(n, kNaN);
  swiglu_backward(dy.data(), gate.data(), up.data(), dgate.data(), dup.data(), n);
  EXPECT_TRUE(matches_finite_differences("swiglu dgate", gate, dgate, loss, 1e-3f));
  EXPECT_TRUE(matches_finite_differences("swiglu dup", up, dup, loss, 1e-3f));
}

// ---------------------------------------------------------------- rope

TEST(CpuRope, RotatesHalfPairsByPositionTimesFrequency) {
  const int64_t B = 1, T = 3, H = 2, D = 8, offset = 5;
  const float theta = 10000.0f;
  const Vec x0 = random_vec(B * T * H * D, 60);
  Vec x = x0;
  rope_forward(x.data(), B, T, H, D, theta, offset);
  std::vector<double> want(x0.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float* xh = x0.data() + (t * H + h) * D;
      double* wh = want.data() + (t * H + h) * D;
      for (int64_t i = 0; i < D / 2; ++i) {
        const double a = static_cast<double>(t + offset) * std::pow(10000.0, -2.0 * i / D);
        wh[i] = xh[i] * std::cos(a) - xh[i + D / 2] * std::sin(a);
        wh[i + D / 2] = xh[i + D / 2] * std::cos(a) + xh[i] * std::sin(a);
      }
    }
  }
  expect_all_near(x, want, 1e-6, "rope");
  rope_backward(x.data(), B, T, H, D, theta, offset);  // the inverse rotation
  expect_all_near(x, std::vector<double>(x0.begin(), x0.end()), 1e-6, "rope inverse");
}

TEST(CpuRope, ScoreDependsOnlyOnPositionDifference) {
  const int64_t D = 16;
  const Vec q0 = random_vec(D, 61), k0 = random_vec(D, 62);
  auto score = [&](int64_t q_pos, int64_t k_pos) {
    Vec q = q0, k = k0;
    rope_forward(q.data(), 1, 1, 1, D, 10000.0f, q_pos);
    rope_forward(k.data(), 1, 1, 1, D, 10000.0f, k_pos);
    return dot(q, k);
  };
  const double s4 = score(4, 0);
  EXPECT_NEAR(score(7, 3), s4, 1e-5);
  EXPECT_NEAR(score(104, 100), s4, 1e-5);
  EXPECT_NEAR(score(1004, 1000), s4, 1e-4);
  EXPECT_GT(std::abs(score(7, 4) - s4), 1e-3);  // a different offset does change it
}

TEST(CpuRope, BackwardMatchesFiniteDifferences) {
  const int64_t B = 2, T = 4, H = 3, D = 6;
  Vec x = random_vec(B * T * H * D, 63);
  const Vec dy = random_vec(x.size(), 64);
  auto loss = [&] {
    Vec y = x;
    rope_forward(y.data(), B, T, H, D, 500.0f, 2);
    return dot(dy, y);
  };
  Vec dx = dy;
  rope_backward(dx.data(), B, T, H, D, 500.0f, 2);
  EXPECT_TRUE(matches_finite_differences("rope dx", x, dx, loss));
}

TEST(CpuRope, FrequencyTableRotatesByPositionTimesEachFrequency) {
  // rope_freqs_*: the rotation of rope_* with the frequencies given per pair.
  const int64_t B = 2, T = 3, H = 2, D = 8, offset = 4;
  const std::vector<double> freqs = {1.0, 0.3, 0.0125, 7.5e-5};
  const Vec x0 = random_vec(B * T * H * D, 65);
  Vec x = x0;
  rope_freqs_forward(x.data(), B, T, H, D, freqs.data(), offset);
  std::vector<double> want(x0.size());
  for (int64_t bt = 0; bt < B * T; ++bt) {
    for (int64_t h = 0; h < H; ++h) {
      const float* xh = x0.data() + (bt * H + h) * D;
      double* wh = want.data() + (bt * H + h) * D;
      for (int64_t i = 0; i < D / 2; ++i) {
        const double a = double(bt % T + offset) * freqs[size_t(i)];
        wh[i] = xh[i] * std::cos(a) - xh[i + D / 2] * std::sin(a);
        wh[i + D / 2] = xh[i + D / 2] * std::cos(a) + xh[i] * std::sin(a);
      }
    }
  }
  expect_all_near(x, want, 1e-6, "rope_freqs");
  rope_freqs_backward(x.data(), B, T, H, D, freqs.data(), offset);
  expect_all_near(x, std::vector<double>(x0.begin(), x0.end()), 1e-6, "rope_freqs inverse");
  // The table theta^(-2i/D) is exactly rope_forward's rotation.
  std::vector<double> plain(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) plain[size_t(i)] = std::pow(double(500000.0f), -2.0 * double(i) / double(D));
  Vec a = x0, b = x0;
  rope_forward(a.data(), B, T, H, D, 500000.0f, offset);
  rope_freqs_forward(b.data(), B, T, H, D, plain.data(), offset);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
}

TEST(CpuRope, FrequencyTableBackwardMatchesFiniteDifferences) {
  const int64_t B = 2, T = 4, H = 3, D = 6;
  const std::vector<double> freqs = {0.9, 0.05, 0.0031};
  Vec x = random_vec(B * T * H * D, 66);
  const Vec dy = random_vec(x.size(), 67);
  auto loss = [&] {
    Vec y = x;
    rope_freqs_forward(y.data(), B, T, H, D, freqs.data(), 3);
    return dot(dy, y);
  };
  Vec dx = dy;
  rope_freqs_backward(dx.data(), B, T, H, D, freqs.data(), 3);
  EXPECT_TRUE(matches_finite_differences("rope_freqs dx", x, dx, loss));
}

// ---------------------------------------------------------------- attention

struct AttnShape { int64_t B, T, Hq, Hk, D; };

// softmax(q k^T / sqrt(D) + causal mask) v in double, GQA head h -> h / (Hq/Hk).
void naive_attention(const AttnShape& s, const Vec& q, const Vec& k, const Vec& v, std::vector<double>& out,
                     std::vector<double>& lse) {
  out.assign(s.B * s.T * s.Hq * s.D, 0.0);
  lse.assign(s.B * s.Hq * s.T, 0.0);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.Hq; ++h) {
      const int64_t kh = h / (s.Hq / s.Hk);
      for (int64_t t = 0; t < s.T; ++t) {
        std::vector<double> sc(t + 1);
        double m = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double acc = 0.0;
          for (int64_t d = 0; d < s.D; ++d) {
            acc += static_cast<double>(q[((b * s.T + t) * s.Hq + h) * s.D + d]) * k[((b * s.T + j) * s.Hk + kh) * s.D + d];
          }
          sc[j] = acc / std::sqrt(static_cast<double>(s.D));
          m = std::max(m, sc[j]);
        }
        double sum = 0.0;
        for (double& x : sc) sum += (x = std::exp(x - m));
        lse[(b * s.Hq + h) * s.T + t] = m + std::log(sum);
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t d = 0; d < s.D; ++d) {
            out[((b * s.T + t) * s.Hq + h) * s.D + d] += sc[j] / sum * v[((b * s.T + j) * s.Hk + kh) * s.D + d];
          }
        }
      }
    }
  }
}

// (B,T,Hq,Hk,D): GQA, T=1, and T past the 64-row block of the kernel.
const AttnShape kAttnShapes[] = {{2, 7, 4, 2, 8}, {1, 1, 4, 2, 8}, {2, 70, 2, 1, 16}, {1, 130, 3, 3, 4}};

TEST(CpuAttention, ForwardMatchesNaiveCausalSoftmaxInDouble) {
  for (const AttnShape& s : kAttnShapes) {
    const Vec q = random_vec(s.B * s.T * s.Hq * s.D, 70, -2.0f, 2.0f);
    const Vec k = random_vec(s.B * s.T * s.Hk * s.D, 71, -2.0f, 2.0f);
    const Vec v = random_vec(s.B * s.T * s.Hk * s.D, 72);
    Vec out(q.size(), kNaN), lse(s.B * s.Hq * s.T, kNaN);
    attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), s.B, s.T, s.Hq, s.Hk, s.D);
    std::vector<double> want_out, want_lse;
    naive_attention(s, q, k, v, want_out, want_lse);
    const std::string tag = " T=" + std::to_string(s.T) + " Hq=" + std::to_string(s.Hq);
    expect_all_near(out, want_out, 1e-5, "attention out" + tag);
    expect_all_near(lse, want_lse, 1e-5, "attention lse" + tag);
  }
}

TEST(CpuAttention, BackwardMatchesFiniteDifferences) {
  for (const AttnShape& s : kAttnShapes) {
    if (s.T > 100) continue;  // the 70-row case already crosses a row block
    Vec q = random_vec(s.B * s.T * s.Hq * s.D, 80), k = random_vec(s.B * s.T * s.Hk * s.D, 81);
    Vec v = random_vec(k.size(), 82);
    const Vec dout = random_vec(q.size(), 83);
    Vec out(q.size()), lse(s.B * s.Hq * s.T);
    auto loss = [&] {
      attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), s.B, s.T, s.Hq, s.Hk, s.D);
      return dot(dout, out);
    };
    loss();
    Vec dq(q.size(), kNaN), dk(k.size(), kNaN), dv(v.size(), kNaN);  // overwritten
    attention_backward(dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), dq.data(), dk.data(),
                       dv.data(), s.B, s.T, s.Hq, s.Hk, s.D);
    const size_t stride = s.T > 10 ? 7 : 1;
    const std::string tag = " T=" + std::to_string(s.T);
    EXPECT_TRUE(matches_finite_differences("attention dq" + tag, q, dq, loss, 1e-2f, 1e-2, 1e-3, stride));
    EXPECT_TRUE(matches_finite_differences("attention dk" + tag, k, dk, loss, 1e-2f, 1e-2, 1e-3, stride));
    EXPECT_TRUE(matches_finite_differences("attention dv" + tag, v, dv, loss, 1e-2f, 1e-2, 1e-3, stride));
  }
}

// ---------------------------------------------------------------- embedding

TEST(CpuEmbedding, VocabSlicesSumToTheFullLookupAndBackwardAccumulates) {
  const int64_t vocab = 12, C = 5, N = 6, split = 7;
  const Vec wte = random_vec(vocab * C, 90);  // (vocab, C)
  const std::vector<int32_t> tokens = {3, 9, 3, 11, 0, 7};
  Vec lo(N * C, kNaN), hi(N * C, kNaN);
  embedding_forward(tokens.data(), wte.data(), lo.data(), N, C, 0, split);
  embedding_forward(tokens.data(), wte.data() + split * C, hi.data(), N, C, split, vocab - split);
  for (int64_t n = 0; n < N; ++n) {
    const bool in_lo = tokens[n] < split;
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_EQ(lo[n * C + c], in_lo ? wte[tokens[n] * C + c] : 0.0f);
      EXPECT_EQ(hi[n * C + c], in_lo ? 0.0f : wte[tokens[n] * C + c]);
    }
  }

  // Backward of the high slice: L = sum(dout * out) is linear in wte.
  Vec whi(wte.begin() + split * C, wte.end());
  const Vec dout = random_vec(N * C, 91), dw0 = random_vec(whi.size(), 92);
  Vec dw = dw0;
  embedding_backward(tokens.data(), dout.data(), dw.data(), N, C, split, vocab - split);
  for (size_t i = 0; i < dw.size(); ++i) dw[i] -= dw0[i];
  auto loss = [&] {
    Vec out(N * C);
    embedding_forward(tokens.data(), whi.data(), out.data(), N, C, split, vocab - split);
    return dot(dout, out);
  };
  EXPECT_TRUE(matches_finite_differences("embedding dwte", whi, dw, loss));
  // Low slice: token 3 occurs twice, its row gets both; unused rows stay put.
  Vec dlo(split * C, 0.0f);
  embedding_backward(tokens.data(), dout.data(), dlo.data(), N, C, 0, split);
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_FLOAT_EQ(dlo[3 * C + c], dout[0 * C + c] + dout[2 * C + c]);
    EXPECT_EQ(dlo[5 * C + c], 0.0f);
  }
}

// ---------------------------------------------------------------- cross-entropy

struct XentCase {
  static constexpr int64_t N = 5, V = 11, split = 6;
  Vec logits = random_vec(N * V, 100, -4.0f, 4.0f);  // (N, V)
  std::vector<int32_t> targets = {0, 10, 5, 6, 3};
  // Columns [v0, v1) of logits as a contiguous (N, v1 - v0) slice.
  Vec slice(int64_t v0, int64_t v1) const {
    Vec s;
    for (int64_t n = 0; n < N; ++n) s.insert(s.end(), logits.begin() + n * V + v0, logits.begin() + n * V + v1);
    return s;
  }
};

// loss(N) through the three passes on one unsplit slice.
Vec xent_unsplit(const XentCase& x, Vec* row_max = nullptr, Vec* sumexp = nullptr) {
  const int64_t N = XentCase::N, V = XentCase::V;
  Vec m(N), se(N), tl(N), loss(N);
  xent_row_max(x.logits.data(), m.data(), N, V);
  xent_sumexp_and_target(x.logits.data(), x.targets.data(), m.data(), se.data(), tl.data(), N, V, 0);
  xent_loss(m.data(), se.data(), tl.data(), loss.data(), N);
  if (row_max) *row_max = m;
  if (sumexp) *sumexp = se;
  return loss;
}

TEST(CpuXent, SplitVocabularyCombinesToTheNaiveLoss) {
  XentCase x;
  const int64_t N = XentCase::N, V = XentCase::V, S = XentCase::split;
  const Vec loss = xent_unsplit(x);
  for (int64_t n = 0; n < N; ++n) {  // -log softmax(target), naive, double
    double z = 0.0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(static_cast<double>(x.logits[n * V + j]));
    EXPECT_NEAR(loss[n], std::log(z) - x.logits[n * V + x.targets[n]], 1e-5);
  }
  // Two ranks: slices [0, S) and [S, V); combine MAX then SUM by hand.
  const Vec a = x.slice(0, S), b = x.slice(S, V);
  Vec ma(N), mb(N), m(N), sa(N), sb(N), ta(N), tb(N), se(N), tl(N), split_loss(N);
  xent_row_max(a.data(), ma.data(), N, S);
  xent_row_max(b.data(), mb.data(), N, V - S);
  for (int64_t n = 0; n < N; ++n) m[n] = std::max(ma[n], mb[n]);
  xent_sumexp_and_target(a.data(), x.targets.data(), m.data(), sa.data(), ta.data(), N, S, 0);
  xent_sumexp_and_target(b.data(), x.targets.data(), m.data(), sb.data(), tb.data(), N, V - S, S);
  for (int64_t n = 0; n < N; ++n) se[n] = sa[n] + sb[n], tl[n] = ta[n] + tb[n];
  xent_loss(m.data(), se.data(), tl.data(), split_loss.data(), N);
  for (int64_t n = 0; n < N; ++n) EXPECT_NEAR(split_loss[n], loss[n], 1e-6);

  // Backward per slice with the combined statistics = columns of the unsplit one.
  Vec full(N * V), da(N * S), db(N * (V - S));
  const float scale = 1.0f / N;
  xent_backward(x.logits.data(), x.targets.data(), m.data(), se.data(), full.data(), N, V, 0, scale);
  xent_backward(a.data(), x.targets.data(), m.data(), se.data(), da.data(), N, S, 0, scale);
  xent_backward(b.data(), x.targets.data(), m.data(), se.data(), db.data(), N, V - S, S, scale);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < V; ++j) {
      EXPECT_NEAR(full[n * V + j], j < S ? da[n * S + j] : db[n * (V - S) + j - S], 1e-7);
    }
  }
}

TEST(CpuXent, BackwardRowsSumToZeroAndMatchFiniteDifferencesOfTheMeanLoss) {
  XentCase x;
  const int64_t N = XentCase::N, V = XentCase::V;
  Vec m, se;
  xent_unsplit(x, &m, &se);
  Vec d(N * V, kNaN);
  xent_backward(x.logits.data(), x.targets.data(), m.data(), se.data(), d.data(), N, V, 0, 1.0f / N);
  for (int64_t n = 0; n < N; ++n) {
    double row = 0.0;
    for (int64_t j = 0; j < V; ++j) row += d[n * V + j];
    EXPECT_NEAR(row, 0.0, 1e-6);
    EXPECT_LT(d[n * V + x.targets[n]], 0.0f);
  }
  auto mean_loss = [&] {
    double s = 0.0;
    for (float l : xent_unsplit(x)) s += l;
    return s / N;
  };
  EXPECT_TRUE(matches_finite_differences("xent dlogits", x.logits, d, mean_loss, 1e-2f, 1e-2, 1e-4));
}

TEST(CpuXent, LargeLogitsStayFinite) {
  XentCase x;
  const Vec ref = xent_unsplit(x);
  for (float& l : x.logits) l += 1000.0f;  // exp(1000) overflows without the max shift
  const Vec shifted = xent_unsplit(x);
  for (int64_t n = 0; n < XentCase::N; ++n) EXPECT_NEAR(shifted[n], ref[n], 1e-3);
}

// ---------------------------------------------------------------- adamw

TEST(CpuAdamW, OneStepMatchesHandComputedValues) {
  // Element 0, step 1 from zero moments: m = 0.05, v = 0.00025, m_hat = 0.5,
  // v_hat = 0.25, update = 0.5 / (0.5 + 1e-8), p = 1 - 0.1 (update + 0.1 * 1).
  Vec p = {1.0f}, g = {0.5f}, m = {0.0f}, v = {0.0f};
  adamw_update(p.data(), g.data(), m.data(), v.data(), 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 1);
  EXPECT_NEAR(m[0], 0.05, 1e-7);  // float: 1 - 0.9f, 1 - 0.999f round
  EXPECT_NEAR(v[0], 0.00025, 1e-8);
  EXPECT_NEAR(p[0], 0.89, 1e-6);
  // Step 3 from m = 0.2, v = 0.04, g = -0.3, lr = 1e-2, wd = 0.1:
  // m = 0.15, v = 0.04005, bias corrections 1/(1-0.9^3), 1/(1-0.999^3).
  p = {0.5f}, g = {-0.3f}, m = {0.2f}, v = {0.04f};
  adamw_update(p.data(), g.data(), m.data(), v.data(), 1, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 3);
  EXPECT_NEAR(m[0], 0.15, 1e-7);
  EXPECT_NEAR(v[0], 0.04005, 1e-8);
  EXPECT_NEAR(p[0], 0.497985866561207, 2e-7);
}

// The folded gradient scale (clipping, the loss scale) is exactly a pass that
// multiplies the gradient first: the same float products, the same update.
TEST(CpuAdamW, GradScaleIsTheGradientMultipliedFirst) {
  const int64_t n = 257;
  const Vec p0 = random_vec(n, 120), g = random_vec(n, 121), m0 = random_vec(n, 122, -0.1f, 0.1f);
  const Vec v0 = random_vec(n, 123, 0.0f, 0.01f);
  Vec p_a = p0, m_a = m0, v_a = v0, p_b = p0, m_b = m0, v_b = v0, scaled = g;
  const float s = 0.2371f;
  for (float& x : scaled) x *= s;
  adamw_update(p_a.data(), g.data(), m_a.data(), v_a.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 5, s);
  adamw_update(p_b.data(), scaled.data(), m_b.data(), v_b.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 5);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(p_a[i], p_b[i]) << i;
    EXPECT_EQ(m_a[i], m_b[i]) << i;
    EXPECT_EQ(v_a[i], v_b[i]) << i;
  }
}

TEST(CpuAdamW, WeightDecayIsDecoupledFromTheMoments) {
  const int64_t n = 64;
  const Vec p0 = random_vec(n, 110), g = random_vec(n, 111), m0 = random_vec(n, 112, -0.1f, 0.1f);
  const Vec v0 = random_vec(n, 113, 0.0f, 0.01f);
  Vec p_a = p0, m_a = m0, v_a = v0, p_b = p0, m_b = m0, v_b = v0;
  const float lr = 1e-3f, wd = 0.3f;
  adamw_update(p_a.data(), g.data(), m_a.data(), v_a.data(), n, lr, 0.9f, 0.95f, 1e-8f, 0.0f, 7);
  adamw_update(p_b.data(), g.data(), m_b.data(), v_b.data(), n, lr, 0.9f, 0.95f, 1e-8f, wd, 7);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(m_a[i], m_b[i]);
    EXPECT_EQ(v_a[i], v_b[i]);
    EXPECT_NEAR(p_b[i], p_a[i] - lr * wd * p0[i], 1e-7);
  }
  // Zero gradient and moments: only the decay acts, p *= (1 - lr wd). (Adam
  // with an L2 term would feed wd p through the moments and move p by ~lr.)
  Vec p = {2.0f}, z = {0.0f}, m = {0.0f}, v = {0.0f};
  adamw_update(p.data(), z.data(), m.data(), v.data(), 1, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 1);
  EXPECT_NEAR(p[0], 2.0 * (1.0 - 0.01 * 0.1), 1e-7);
  EXPECT_EQ(m[0], 0.0f);
  EXPECT_EQ(v[0], 0.0f);
}

// ---------------------------------------------------------------- helpers

TEST(CpuMisc, ElementwiseHelpersAndBiasBackward) {
  const int64_t N = 3, C = 4;
  Vec y = random_vec(N * C, 120);
  const Vec y0 = y, x = random_vec(N * C, 121);
  Vec bias = random_vec(C, 122);
  add_inplace(y.data(), x.data(), N * C);
  scale_inplace(y.data(), -2.0f, N * C);
  add_bias(y.data(), bias.data(), N, C);
  for (int64_t i = 0; i < N * C; ++i) EXPECT_FLOAT_EQ(y[i], -2.0f * (y0[i] + x[i]) + bias[i % C]);

  const Vec dy = random_vec(N * C, 123), db0 = random_vec(C, 124);
  Vec db = db0;
  bias_backward(dy.data(), db.data(), N, C);
  for (int64_t c = 0; c < C; ++c) db[c] -= db0[c];
  auto loss = [&] {
    Vec yy = y0;
    add_bias(yy.data(), bias.data(), N, C);
    return dot(dy, yy);
  };
  EXPECT_TRUE(matches_finite_differences("bias dbias", bias, db, loss));

  const Vec big = random_vec(100000, 125);  // past the parallel threshold
  double want = 0.0;
  for (float f : big) want += static_cast<double>(f) * f;
  EXPECT_NEAR(sum_squares(big.data(), static_cast<int64_t>(big.size())), want, 1e-9 * want);
}

}  // namespace
}  // namespace loom::cpu

namespace loom::exec {
namespace {

// The CPU kernel table's 16-bit format (bf16): round to nearest even, ties
// to even, NaN kept, and exact round trips for values bf16 holds.
TEST(CpuKernels, Bf16StorageRoundsToNearestEven) {
  auto k = make_cpu_kernels();
  const std::vector<float> x = {1.0f, 1.00390625f, 1.01171875f, 1.0078125f, -3.5f, 65504.f, 1e-40f,
                                std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  std::vector<uint16_t> h(x.size());
  std::vector<float> back(x.size());
  k->to_16bit({x.data(), h.data(), int64_t(x.size())});
  k->from_16bit({h.data(), back.data(), int64_t(x.size())});
  EXPECT_EQ(h[0], 0x3f80);
  EXPECT_EQ(back[1], 1.0f) << "halfway: ties to even (down)";
  EXPECT_EQ(back[2], 1.015625f) << "halfway: ties to even (up)";
  EXPECT_EQ(back[3], 1.0078125f) << "representable: exact";
  EXPECT_EQ(back[4], -3.5f);
  EXPECT_EQ(back[5], 65536.f) << "65504 rounds to the nearest bf16";
  EXPECT_TRUE(std::isinf(back[7]));
  EXPECT_TRUE(std::isnan(back[8]));
}

}  // namespace
}  // namespace loom::exec
