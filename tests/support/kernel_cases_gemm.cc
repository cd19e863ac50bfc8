// The GEMM ops' cases (kernel_cases.h): every operand order with and
// without beta, the bias / GELU epilogues, K = 0, and grouped GEMMs with an
// empty group.
#include <algorithm>

#include "tests/support/kernel_cases.h"

namespace loom::exec::kernel_cases {

using test::kExact;
using test::random_vec;

template <>
std::vector<Case> cases<Gemm>() {
  std::vector<Case> all;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.f, 0.5f}) {
        const int64_t M = 67, N = 129, K = 96;
        Case c = make(KernelOp::kGemm, std::string("gemm (") + (ta ? "T" : "N") + (tb ? "T" : "N") +
                                           (beta != 0 ? ", beta 0.5)" : ")"));
        const int a = c.in("A", random_vec(size_t(M * K), 1)), b = c.in("B", random_vec(size_t(K * N), 2));
        const int o = beta != 0 ? c.inout("C", random_vec(size_t(M * N), 3), kF32) : c.out("C", size_t(M * N), kF32);
        c.run = [=](Kernels& k, const Bound& p) {
          k.gemm({ta, tb, M, N, K, 0.75f, p.f(a), p.f(b), beta, p.f(o)});
          return std::vector<double>{};
        };
        all.push_back(std::move(c));
      }
  // The epilogues (Gemm::bias, Gemm::gelu_out) as the model's linears use
  // them, N a multiple of 8 (cuBLASLt's fused path) and not (its fallback).
  // GELU's output has its own tolerance: a fused epilogue may compute tanh
  // another way than the CPU's tanhf (CUTLASS's GELU epilogue uses
  // tanh.approx.f32, relative error up to 2^-11: about 2.6e-4 of the largest
  // value and 3.4e-4 in L2 on these cases).
  constexpr Tol kGelu{6e-4, 4e-4, 0};
  struct Epi {
    bool ta, tb, bias, gelu;
    int64_t N;
  };
  for (const Epi e : {Epi{false, true, true, false, 136}, Epi{false, true, true, true, 136},
                      Epi{false, false, false, true, 136}, Epi{true, true, true, true, 136},
                      Epi{false, true, true, true, 129}}) {
    const int64_t M = 67, N = e.N, K = 96;
    Case c = make(KernelOp::kGemm, std::string("gemm (") + (e.ta ? "T" : "N") + (e.tb ? "T" : "N") + ", N " +
                                       std::to_string(N) + ")" + (e.bias ? " + bias" : "") +
                                       (e.gelu ? " + GELU" : ""));
    const int a = c.in("A", random_vec(size_t(M * K), 11)), b = c.in("B", random_vec(size_t(K * N), 12));
    const int bias = e.bias ? c.in("bias", random_vec(size_t(N), 13, -2, 2)) : -1;
    const int o = c.out("C", size_t(M * N), kF32), g = e.gelu ? c.out("gelu", size_t(M * N), kGelu) : -1;
    c.run = [=](Kernels& k, const Bound& p) {
      k.gemm({e.ta, e.tb, M, N, K, 1.f, p.f(a), p.f(b), 0.f, p.f(o), nullptr, nullptr, bias >= 0 ? p.f(bias) : nullptr,
              g >= 0 ? p.f(g) : nullptr});
      return std::vector<double>{};
    };
    all.push_back(std::move(c));
  }
  // GELU's backward fused into the GEMM (Gemm::dgelu_pre), as fc2's input
  // gradient uses it, alone and with fc1's bias gradient summed in it
  // (Gemm::dbias, added to what it held); N a multiple of 8 (cuBLASLt's
  // DGELU / DGELU_BGRAD) and not.
  for (const bool with_db : {false, true})
    for (const int64_t N : {int64_t(136), int64_t(129)}) {
      const int64_t M = 67, K = 96;
      Case c = make(KernelOp::kGemm,
                    "gemm (NN, N " + std::to_string(N) + ") + dGELU" + (with_db ? " + bias gradient" : ""));
      const int a = c.in("A", random_vec(size_t(M * K), 15)), b = c.in("B", random_vec(size_t(K * N), 16));
      const int pre = c.in("pre", random_vec(size_t(M * N), 17, -3, 3));
      const int o = c.out("C", size_t(M * N), kGelu);
      const int db = with_db ? c.inout("dbias", random_vec(size_t(N), 18), kGelu) : -1;
      c.run = [=](Kernels& k, const Bound& p) {
        k.gemm({false, false, M, N, K, 1.f, p.f(a), p.f(b), 0.f, p.f(o), nullptr, nullptr, nullptr, nullptr, p.f(pre),
                db >= 0 ? p.f(db) : nullptr});
        return std::vector<double>{};
      };
      all.push_back(std::move(c));
    }
  {  // K = 0 with the epilogue: C = bias, gelu = GELU(bias)
    Case c = make(KernelOp::kGemm, "gemm (K = 0) + bias + GELU");
    const int bias = c.in("bias", random_vec(10, 14, -2, 2));
    const int o = c.out("C", 50, kExact), g = c.out("gelu", 50, kGelu);
    c.run = [=](Kernels& k, const Bound& p) {
      k.gemm({false, false, 5, 10, 0, 1.f, nullptr, nullptr, 0.f, p.f(o), nullptr, nullptr, p.f(bias), p.f(g)});
      return std::vector<double>{};
    };
    all.push_back(std::move(c));
  }
  for (float beta : {0.f, 0.5f}) {  // K = 0: C = beta C (C = 0 for beta 0, even over NaN)
    Case c = make(KernelOp::kGemm, beta != 0 ? "gemm (K = 0: C = beta C)" : "gemm (K = 0, beta 0: C = 0)");
    const int o = beta != 0 ? c.inout("C", random_vec(50, 4), kExact) : c.out("C", 50, kExact);
    c.run = [=](Kernels& k, const Bound& p) {
      k.gemm({false, false, 5, 10, 0, 1.f, nullptr, nullptr, beta, p.f(o)});
      return std::vector<double>{};
    };
    all.push_back(std::move(c));
  }
  return all;
}

// Three experts' worth of GEMMs of different row counts (one empty), for
// both operand orders the MoE layer uses.
template <>
std::vector<Case> cases<GroupedGemm>() {
  std::vector<Case> all;
  for (bool ta : {false, true})
    for (float beta : {0.f, 1.f}) {
      const int64_t rows[3] = {37, 0, 70}, N = 48, K = 40;
      Case c = make(KernelOp::kGroupedGemm, std::string("grouped_gemm (") + (ta ? "T" : "N") + "N" +
                                                (beta != 0 ? ", beta 1)" : ")"));
      int a[3], b[3], o[3];
      for (int g = 0; g < 3; ++g) {
        // ta: op(A) = A^T with A (K, M); M = rows[g] (the MoE weight gradient's shape, K the rows)
        const int64_t M = ta ? N : rows[g], KK = ta ? rows[g] : K, NN = ta ? K : N;
        a[g] = c.in("A" + std::to_string(g), random_vec(size_t(std::max<int64_t>(1, M * KK)), 40 + g));
        b[g] = c.in("B" + std::to_string(g), random_vec(size_t(std::max<int64_t>(1, KK * NN)), 50 + g));
        const std::string name = "C" + std::to_string(g);
        const size_t n = size_t(std::max<int64_t>(1, M * NN));
        // The empty group is left out of the call (as the MoE layer leaves an
        // expert without rows out): its C is no output.
        o[g] = rows[g] == 0 ? c.in(name, random_vec(n, 60 + g))
               : beta != 0  ? c.inout(name, random_vec(n, 60 + g), kF32)
                            : c.out(name, n, kF32);
      }
      c.run = [=](Kernels& k, const Bound& p) {
        std::vector<GemmGroup> groups;
        for (int g = 0; g < 3; ++g) {
          if (rows[g] == 0) continue;
          const int64_t M = ta ? N : rows[g], KK = ta ? rows[g] : K, NN = ta ? K : N;
          groups.push_back({M, NN, KK, p.f(a[g]), p.f(b[g]), p.f(o[g])});
        }
        k.grouped_gemm({ta, false, 0.5f, beta, groups.data(), int64_t(groups.size())});
        return std::vector<double>{};
      };
      all.push_back(std::move(c));
    }
  return all;
}

}  // namespace loom::exec::kernel_cases
