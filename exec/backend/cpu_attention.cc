// Causal softmax attention with grouped KV heads (GQA), forward and backward.
//
// Work is split per (batch, head) and, inside it, into blocks of kRowBlock
// query rows. A block of rows [r0, r1) only sees keys [0, r1) under the
// causal mask, so each block is three small GEMMs on (rows x D), (r1 x D)
// operands plus a row-wise softmax: about half the flops of the full T x T
// product and a (kRowBlock x T) scratch instead of (T x T).
//
// Forward keeps only lse(B,Hq,T) = log sum_j exp(s_tj); backward recomputes
// P = exp(S - lse) block by block (as FlashAttention does), so no T*T buffer
// lives between the calls.
//
// Backward math, per head, with S = scale Q K^T, P = softmax(S), O = P V:
//   dV = P^T dO
//   dP = dO V^T
//   dS = P * (dP - rowsum(dO * O))           (softmax backward)
//   dQ = scale dS K,  dK = scale dS^T Q
// Query heads h share KV head h / (Hq/Hk); the backward parallelizes over
// (batch, KV head) and sums the group's query heads in order, so dK/dV have no
// write races and the result does not depend on the thread count.
// GCC 12 reports (maybe-)uninitialized values inside its own AVX-512
// intrinsics (`__m512 __Y = __Y;` in avx512fintrin.h) when Eigen's kernels are
// inlined with -march=native; a known false positive, silenced for this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <Eigen/Core>

#include "exec/backend/cpu_ops.h"
#include "exec/backend/cpu_parallel.h"

namespace loom::cpu {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// A (T, D) head slice of a (B,T,H,D) tensor: rows are H*D floats apart.
using HeadView = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;
using ConstHeadView = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;

constexpr int64_t kRowBlock = 64;

void check_shapes(int64_t Hq, int64_t Hk, int64_t D) {
  // The kernels return void (see cpu_ops.h): a broken shape invariant is a
  // caller bug, reported and stopped in every build type.
  if (Hq <= 0 || Hk <= 0 || Hq % Hk != 0 || D <= 0) {
    std::fprintf(stderr, "loom::cpu attention: need Hq %% Hk == 0 and D > 0 (Hq=%lld Hk=%lld D=%lld)\n",
                 static_cast<long long>(Hq), static_cast<long long>(Hk), static_cast<long long>(D));
    std::abort();
  }
}

// Head h of batch b of x(B,T,H,D) as a (T, D) matrix.
ConstHeadView head(const float* x, int64_t b, int64_t h, int64_t T, int64_t H, int64_t D) {
  return ConstHeadView(x + (b * T * H + h) * D, T, D, Eigen::OuterStride<>(H * D));
}
HeadView head(float* x, int64_t b, int64_t h, int64_t T, int64_t H, int64_t D) {
  return HeadView(x + (b * T * H + h) * D, T, D, Eigen::OuterStride<>(H * D));
}

}  // namespace

// q(B,T,Hq,D), k(B,T,Hk,D), v(B,T,Hk,D) -> out(B,T,Hq,D), lse(B,Hq,T).
void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse, int64_t B,
                       int64_t T, int64_t Hq, int64_t Hk, int64_t D, bool causal) {
  check_shapes(Hq, Hk, D);
  const int64_t group = Hq / Hk;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  LOOM_OMP_FOR_IF(B * Hq * T * T * D)
  for (int64_t bh = 0; bh < B * Hq; ++bh) {
    const int64_t b = bh / Hq, h = bh % Hq, kh = h / group;
    ConstHeadView Q = head(q, b, h, T, Hq, D);   // (T, D)
    ConstHeadView K = head(k, b, kh, T, Hk, D);  // (T, D)
    ConstHeadView V = head(v, b, kh, T, Hk, D);  // (T, D)
    HeadView O = head(out, b, h, T, Hq, D);      // (T, D)
    float* lse_bh = lse + bh * T;                // (T)
    RowMatrix S;                                 // (rows, r1) scores, then probabilities
    for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
      const int64_t rows = std::min(T, r0 + kRowBlock) - r0;
      const int64_t r1 = causal ? r0 + rows : T;  // keys [0, r1) are seen by some row of the block
      S.resize(rows, r1);
      S.noalias() = scale * (Q.middleRows(r0, rows) * K.topRows(r1).transpose());
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t t = causal ? r0 + i : T - 1;  // keys 0..t are visible
        float* s = S.data() + i * r1;
        float m = s[0];
        for (int64_t j = 1; j <= t; ++j) m = std::max(m, s[j]);
        double sum = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          s[j] = std::exp(s[j] - m);
          sum += s[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j <= t; ++j) s[j] *= inv;
        for (int64_t j = t + 1; j < r1; ++j) s[j] = 0.0f;  // causal mask
        lse_bh[r0 + i] = m + static_cast<float>(std::log(sum));
      }
      O.middleRows(r0, rows).noalias() = S * V.topRows(r1);
    }
  }
}

// dout, out, q (B,T,Hq,D); k, v (B,T,Hk,D); lse(B,Hq,T)
//   -> dq(B,T,Hq,D), dk, dv (B,T,Hk,D), all overwritten.
void attention_backward(const float* dout, const float* q, const float* k, const float* v, const float* out,
                        const float* lse, float* dq, float* dk, float* dv, int64_t B, int64_t T, int64_t Hq,
                        int64_t Hk, int64_t D, bool causal) {
  check_shapes(Hq, Hk, D);
  const int64_t group = Hq / Hk;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  LOOM_OMP_FOR_IF(B * Hq * T * T * D)
  for (int64_t bk = 0; bk < B * Hk; ++bk) {
    const int64_t b = bk / Hk, kh = bk % Hk;
    ConstHeadView K = head(k, b, kh, T, Hk, D);  // (T, D)
    ConstHeadView V = head(v, b, kh, T, Hk, D);  // (T, D)
    HeadView dK = head(dk, b, kh, T, Hk, D);     // (T, D)
    HeadView dV = head(dv, b, kh, T, Hk, D);     // (T, D)
    dK.setZero();
    dV.setZero();
    RowMatrix P, dS;  // (rows, r1)
    Eigen::VectorXf delta;  // (rows) rowsum(dO * O)
    for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
      ConstHeadView Q = head(q, b, h, T, Hq, D);      // (T, D)
      ConstHeadView O = head(out, b, h, T, Hq, D);    // (T, D)
      ConstHeadView dO = head(dout, b, h, T, Hq, D);  // (T, D)
      HeadView dQ = head(dq, b, h, T, Hq, D);         // (T, D)
      const float* lse_bh = lse + (b * Hq + h) * T;   // (T)
      for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
        const int64_t rows = std::min(T, r0 + kRowBlock) - r0;
        const int64_t r1 = causal ? r0 + rows : T;
        auto Qb = Q.middleRows(r0, rows);    // (rows, D)
        auto dOb = dO.middleRows(r0, rows);  // (rows, D)
        // Recompute the probabilities of this block from the saved lse.
        P.resize(rows, r1);
        P.noalias() = scale * (Qb * K.topRows(r1).transpose());
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t t = causal ? r0 + i : T - 1;
          const float l = lse_bh[r0 + i];
          float* p = P.data() + i * r1;
          for (int64_t j = 0; j <= t; ++j) p[j] = std::exp(p[j] - l);
          for (int64_t j = t + 1; j < r1; ++j) p[j] = 0.0f;
        }
        delta = (dOb.cwiseProduct(O.middleRows(r0, rows))).rowwise().sum();
        dS.resize(rows, r1);
        dS.noalias() = dOb * V.topRows(r1).transpose();  // dP
        for (int64_t i = 0; i < rows; ++i) {
          float* ds = dS.data() + i * r1;
          const float* p = P.data() + i * r1;
          for (int64_t j = 0; j < r1; ++j) ds[j] = p[j] * (ds[j] - delta[i]);  // masked: p = 0
        }
        dV.topRows(r1).noalias() += P.transpose() * dOb;
        dQ.middleRows(r0, rows).noalias() = scale * (dS * K.topRows(r1));
        dK.topRows(r1).noalias() += scale * (dS.transpose() * Qb);
      }
    }
  }
}

void attention_merge(float* out, float* lse, const float* out_b, const float* lse_b, int64_t B, int64_t T, int64_t H,
                     int64_t D) {
  LOOM_OMP_FOR_IF(B * H * T * D)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    for (int64_t t = 0; t < T; ++t) {
      float& l = lse[bh * T + t];
      const float lb = lse_b[bh * T + t];
      const float m = std::max(l, lb);
      if (m == -INFINITY) continue;  // no visible key in either part
      const float w = std::exp(l - m), wb = std::exp(lb - m), inv = 1.0f / (w + wb);
      float* o = out + ((b * T + t) * H + h) * D;
      const float* ob = out_b + ((b * T + t) * H + h) * D;
      for (int64_t d = 0; d < D; ++d) o[d] = (w * o[d] + wb * ob[d]) * inv;
      l = m + std::log(w + wb);
    }
  }
}

}  // namespace loom::cpu
