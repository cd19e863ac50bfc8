// The attention ops' cases (kernel_cases.h): causal and unmasked attention
// forward and backward, and ring attention's log-sum-exp merge.
#include <cmath>

#include "exec/backend/cpu_ops.h"
#include "tests/support/kernel_cases.h"

namespace loom::exec::kernel_cases {

using test::random_vec;

// Attention: GQA (2 query heads per KV head), T not a multiple of any tile.
constexpr int64_t kAttB = 2, kAttT = 77, kAttHq = 4, kAttHk = 2, kAttD = 32;
constexpr size_t kAttQ = size_t(kAttB * kAttT * kAttHq * kAttD), kAttK = size_t(kAttB * kAttT * kAttHk * kAttD),
                 kAttL = size_t(kAttB * kAttHq * kAttT);

// Each attention case also runs unmasked (context parallelism's blocks of
// keys wholly in the queries' past).
template <>
std::vector<Case> cases<AttentionForward>() {
  std::vector<Case> out_cases;
  for (bool causal : {true, false}) {
    Case c = make(KernelOp::kAttentionForward, causal ? "attention_forward" : "attention_forward unmasked");
    const int q = c.in("q", random_vec(kAttQ, 19)), k_ = c.in("k", random_vec(kAttK, 20)),
              v = c.in("v", random_vec(kAttK, 21));
    const int out = c.out("out", kAttQ, test::kAttentionFp32), lse = c.out("lse", kAttL, test::kAttentionFp32);
    c.run = [=](Kernels& k, const Bound& p) {
      k.attention_forward({p.f(q), p.f(k_), p.f(v), p.f(out), p.f(lse), kAttB, kAttT, kAttHq, kAttHk, kAttD, causal});
      return std::vector<double>{};
    };
    out_cases.push_back(std::move(c));
  }
  return out_cases;
}

template <>
std::vector<Case> cases<AttentionBackward>() {
  std::vector<Case> out_cases;
  for (bool causal : {true, false}) {
    auto qv = random_vec(kAttQ, 19), kv = random_vec(kAttK, 20), vv = random_vec(kAttK, 21);
    std::vector<float> outv(kAttQ), lsev(kAttL);
    cpu::attention_forward(qv.data(), kv.data(), vv.data(), outv.data(), lsev.data(), kAttB, kAttT, kAttHq, kAttHk,
                           kAttD, causal);
    Case c = make(KernelOp::kAttentionBackward, causal ? "attention_backward" : "attention_backward unmasked");
    const int dout = c.in("dout", random_vec(kAttQ, 22)), q = c.in("q", qv), k_ = c.in("k", kv), v = c.in("v", vv),
              out = c.in("out", outv), lse = c.in("lse", lsev);
    const int dq = c.out("dq", kAttQ, test::kAttentionFp32), dk = c.out("dk", kAttK, test::kAttentionFp32),
              dv = c.out("dv", kAttK, test::kAttentionFp32);
    c.run = [=](Kernels& k, const Bound& p) {
      k.attention_backward({p.f(dout), p.f(q), p.f(k_), p.f(v), p.f(out), p.f(lse), p.f(dq), p.f(dk), p.f(dv), kAttB,
                            kAttT, kAttHq, kAttHk, kAttD, causal});
      return std::vector<double>{};
    };
    out_cases.push_back(std::move(c));
  }
  return out_cases;
}

// The merge, with some rows empty on one side (lse = -inf) as ring
// attention's fully masked blocks leave them.
template <>
std::vector<Case> cases<AttentionMerge>() {
  Case c = make(KernelOp::kAttentionMerge, "attention_merge");
  auto lse_a = random_vec(kAttL, 23), lse_b = random_vec(kAttL, 24);
  for (size_t i = 0; i < kAttL; i += 7) lse_a[i] = -INFINITY;
  for (size_t i = 3; i < kAttL; i += 11) lse_b[i] = -INFINITY;
  const int out = c.inout("out", random_vec(kAttQ, 25), kF32), lse = c.inout("lse", lse_a, kF32),
            out_b = c.in("out_b", random_vec(kAttQ, 26)), lb = c.in("lse_b", lse_b);
  c.run = [=](Kernels& k, const Bound& p) {
    k.attention_merge({p.f(out), p.f(lse), p.f(out_b), p.f(lb), kAttB, kAttT, kAttHq, kAttD});
    return std::vector<double>{};
  };
  return {c};
}

}  // namespace loom::exec::kernel_cases
