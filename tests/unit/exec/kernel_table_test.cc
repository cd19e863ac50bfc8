// Every op of the kernel table through the generic cases
// (tests/support/kernel_cases.h) on the tables this machine has: the CPU
// backend's, and the decorators that wrap a backend's table (the per-op
// profiler, the synchronizing error check), which must forward every op
// unchanged. The CUDA tables run the same cases in
// tests/cuda/cuda_table_coverage_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "exec/backend/kernel_profile.h"
#include "exec/backend/kernel_sync_check.h"
#include "tests/support/close.h"
#include "tests/support/emulated_16bit_backend.h"
#include "tests/support/kernel_cases.h"

namespace loom::exec {
namespace {

using kernel_cases::all_cases;
using kernel_cases::Case;
using kernel_cases::expect_match;
using kernel_cases::run_on;
using kernel_cases::run_reference;

TEST(KernelTable, EveryOpOfTheListHasACase) {
  std::set<int> ops;
  for (const Case& c : all_cases()) ops.insert(int(c.op));
  for (int i = 0; i < kNumKernelOps; ++i)
    EXPECT_TRUE(ops.count(i)) << kernel_op_name(KernelOp(i)) << " has no case in tests/support/kernel_cases.cc";
  EXPECT_EQ(int(ops.size()), kNumKernelOps);
}

// The reference keeps its own contract: what a case marks overwritten has no
// element left unwritten (checked inside expect_match), and two runs agree.
TEST(KernelTable, TheReferenceWritesEveryOutputAndIsDeterministic) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.label);
    expect_match(c, run_reference(c), run_reference(c), /*exact=*/true);
  }
}

TEST(KernelTable, CpuBackendMatchesTheReferenceBitForBit) {
  auto be = make_cpu_backend();
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.label);
    expect_match(c, run_on(c, *be, be->kernels()), run_reference(c), /*exact=*/true);
  }
}

// The profiler in front of the backend's table: every op forwarded bit for
// bit, every op of the list seen under its name with its work counted.
TEST(KernelTable, TheProfilerForwardsEveryOpAndCountsIt) {
  auto be = make_cpu_backend();
  auto prof = install_kernel_profiler(*be);
  ASSERT_TRUE(prof.is_ok()) << prof.status().to_string();
  const auto cases = all_cases();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    expect_match(c, run_on(c, *be, be->kernels()), run_reference(c), /*exact=*/true);
  }
  const auto rows = (*prof)->report();
  for (int i = 0; i < kNumKernelOps; ++i) {
    const std::string op = kernel_op_name(KernelOp(i));
    const auto it = std::find_if(rows.begin(), rows.end(), [&](const OpProfileRow& r) { return r.op == op; });
    ASSERT_NE(it, rows.end()) << op << " was never called through the table";
    int64_t calls = 0;  // the calls the cases make (AdamW: 3 steps; take_sum_squares: 3)
    for (const Case& c : cases) calls += c.op == KernelOp(i) ? 1 : 0;
    EXPECT_GE(it->calls, calls) << op;
    if (KernelOp(i) != KernelOp::kTakeSumSquares) EXPECT_GT(it->bytes, 0) << op << ": no work described";
  }
}

TEST(KernelTable, TheSyncCheckForwardsEveryOp) {
  auto be = make_cpu_backend();
  int waits = 0;
  SyncCheckKernels check(be->kernels(), [&] { ++waits; return Status::ok(); }, "test");
  int ops = 0;
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.label);
    expect_match(c, run_on(c, *be, check), run_reference(c), /*exact=*/true);
    ++ops;
  }
  EXPECT_GE(waits, ops) << "a wait after every op";
  EXPECT_TRUE(check.status().is_ok());
}

// The multi-tensor ops are their per-segment calls in one launch: on the CPU
// AdamwMulti is bit for bit one AdamwUpdate per segment (each segment with
// its own weight decay), and AddSumSquaresMulti the same pieces as one
// AddSumSquares per segment, added in table order.
TEST(KernelTable, MultiTensorOpsEqualTheirPerSegmentCallsBitForBit) {
  auto be = make_cpu_backend();
  Kernels& k = be->kernels();
  const std::vector<int64_t> table = {0, 5, 1000, 1, 1007, 2000, 30000, 0, 50000, 32001, 7999, 1, 40000, 40000, 1, 1};
  const std::vector<float> p0 = test::random_vec(60000, 61), g = test::random_vec(50001, 62, -3.f, 3.f);
  std::vector<float> pa = p0, ma(50001, 0.f), va(50001, 0.f), pb = p0, mb = ma, vb = va;
  for (int64_t step = 1; step <= 4; ++step) {
    const float lr = 1e-3f * float(step), gs = step == 4 ? 0.25f : 1.0f;
    k.adamw_multi({pa.data(), g.data(), ma.data(), va.data(), table.data(), 4, 30000, 39000 + 1000 + 1, lr, 0.9f,
                   0.95f, 1e-8f, 0.1f, step, gs});
    for (size_t i = 0; i < table.size(); i += 4)
      k.adamw_update({pb.data() + table[i], g.data() + table[i + 1], mb.data() + table[i + 1],
                      vb.data() + table[i + 1], table[i + 2], lr, 0.9f, 0.95f, 1e-8f, table[i + 3] ? 0.1f : 0.f, step,
                      gs});
  }
  EXPECT_EQ(0, std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(ma.data(), mb.data(), ma.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)));
  EXPECT_NE(pa[3], p0[3]) << "the update ran";
  EXPECT_EQ(pa[35000], p0[35000]) << "elements outside every segment are untouched";

  const std::vector<int64_t> norm = {1007, 30000, 0, 1000, 40000, 1};
  k.add_sum_squares_multi({g.data(), norm.data(), 3, 30000, 31001});
  const double multi = k.take_sum_squares({});
  for (size_t i = 0; i < norm.size(); i += 2) k.add_sum_squares({g.data() + norm[i], norm[i + 1]});
  EXPECT_EQ(multi, k.take_sum_squares({}));
  double by_hand = 0;  // and the squares themselves, summed here
  for (size_t i = 0; i < norm.size(); i += 2)
    for (int64_t j = norm[i]; j < norm[i] + norm[i + 1]; ++j) by_hand += double(g[size_t(j)]) * g[size_t(j)];
  EXPECT_NEAR(multi, by_hand, 1e-12 * by_hand);
}

// The norms' fused residual add (forward: normalize x + r, writing the sum;
// backward: dx plus the residual branch's gradient) are the add and the norm
// they replace, bit for bit: the model's CPU path does not move.
TEST(KernelTable, FusedResidualNormsEqualTheAddAndTheNormBitForBit) {
  auto be = make_cpu_backend();
  Kernels& k = be->kernels();
  const int64_t N = 37, C = 96;
  const size_t n = size_t(N * C);
  const auto x = test::random_vec(n, 71, -2.f, 2.f), r = test::random_vec(n, 72, -1.f, 1.f),
             w = test::random_vec(size_t(C), 73), b = test::random_vec(size_t(C), 74),
             dy = test::random_vec(n, 75), dres = test::random_vec(n, 76);
  auto same = [](const std::vector<float>& a, const std::vector<float>& c) {
    return a.size() == c.size() && std::memcmp(a.data(), c.data(), a.size() * sizeof(float)) == 0;
  };
  for (bool layernorm : {true, false}) {
    SCOPED_TRACE(layernorm ? "layernorm" : "rmsnorm");
    std::vector<float> s1 = x, y1(n), m1(static_cast<size_t>(N)), r1(static_cast<size_t>(N)), s2(n), y2(n),
        m2(static_cast<size_t>(N)), r2(static_cast<size_t>(N));
    k.add_inplace({s1.data(), r.data(), int64_t(n)});
    if (layernorm) {
      k.layernorm_forward({s1.data(), w.data(), b.data(), y1.data(), m1.data(), r1.data(), N, C, 1e-5f});
      k.layernorm_forward({x.data(), w.data(), b.data(), y2.data(), m2.data(), r2.data(), N, C, 1e-5f, r.data(),
                           s2.data()});
    } else {
      k.rmsnorm_forward({s1.data(), w.data(), y1.data(), r1.data(), N, C, 1e-6f});
      k.rmsnorm_forward({x.data(), w.data(), y2.data(), r2.data(), N, C, 1e-6f, r.data(), s2.data()});
    }
    EXPECT_TRUE(same(s1, s2) && same(y1, y2) && same(r1, r2) && same(m1, m2));
    std::vector<float> dx1(n), dx2(n), dw1(size_t(C), 0.f), dw2 = dw1, db1 = dw1, db2 = dw1;
    if (layernorm) {
      k.layernorm_backward({dy.data(), s1.data(), w.data(), m1.data(), r1.data(), dx1.data(), dw1.data(), db1.data(),
                            N, C});
      k.layernorm_backward({dy.data(), s1.data(), w.data(), m1.data(), r1.data(), dx2.data(), dw2.data(), db2.data(),
                            N, C, dres.data()});
    } else {
      k.rmsnorm_backward({dy.data(), s1.data(), w.data(), r1.data(), dx1.data(), dw1.data(), N, C});
      k.rmsnorm_backward({dy.data(), s1.data(), w.data(), r1.data(), dx2.data(), dw2.data(), N, C, dres.data()});
    }
    k.add_inplace({dx1.data(), dres.data(), int64_t(n)});
    EXPECT_TRUE(same(dx1, dx2) && same(dw1, dw2) && same(db1, db2));
  }
}

// The GEMM's epilogue (Gemm::bias, Gemm::gelu_out) on the CPU tables is the
// GEMM, add_bias and gelu_forward in that order, bit for bit: on the CPU
// table and on the GPU-emulating 16-bit one (whose operands are rounded
// first), for the model's linear (N, T) and another operand order.
TEST(KernelTable, GemmEpilogueEqualsTheGemmThenTheBiasThenGeluBitForBit) {
  auto be = make_cpu_backend();
  test_support::Emulated16BitKernels bf16(Precision::kBf16);
  const int64_t M = 37, N = 72, K = 40;
  const auto A = test::random_vec(size_t(M * K), 81), B = test::random_vec(size_t(K * N), 82),
             bias = test::random_vec(size_t(N), 83, -2.f, 2.f);
  auto same = [](const std::vector<float>& a, const std::vector<float>& c) {
    return a.size() == c.size() && std::memcmp(a.data(), c.data(), a.size() * sizeof(float)) == 0;
  };
  for (Kernels* k : {&be->kernels(), static_cast<Kernels*>(&bf16)})
    for (bool ta : {false, true}) {
      SCOPED_TRACE(std::string(k == &bf16 ? "emulated bf16" : "cpu") + (ta ? ", T" : ", N"));
      std::vector<float> c1(size_t(M * N)), g1(c1.size()), c2(c1.size()), g2(c1.size()), c3(c1.size());
      k->gemm({ta, true, M, N, K, 1.f, A.data(), B.data(), 0.f, c1.data()});
      k->add_bias({c1.data(), bias.data(), M, N});
      k->gelu_forward({c1.data(), g1.data(), M * N});
      k->gemm({ta, true, M, N, K, 1.f, A.data(), B.data(), 0.f, c2.data(), nullptr, nullptr, bias.data(), g2.data()});
      EXPECT_TRUE(same(c1, c2)) << "the pre-activation";
      EXPECT_TRUE(same(g1, g2)) << "GELU's output";
      k->gemm({ta, true, M, N, K, 1.f, A.data(), B.data(), 0.f, c3.data(), nullptr, nullptr, bias.data()});
      EXPECT_TRUE(same(c1, c3)) << "bias only";
      // GELU's backward in the GEMM that makes its incoming gradient: the
      // GEMM, then gelu_backward with that pre-activation (c1).
      std::vector<float> d1(c1.size()), d2(c1.size()), d3(c1.size());
      k->gemm({ta, true, M, N, K, 1.f, A.data(), B.data(), 0.f, d1.data()});
      k->gelu_backward({d1.data(), c1.data(), d2.data(), M * N});
      k->gemm({ta, true, M, N, K, 1.f, A.data(), B.data(), 0.f, d3.data(), nullptr, nullptr, nullptr, nullptr, c1.data()});
      EXPECT_TRUE(same(d2, d3)) << "dGELU";
      // And the bias gradient of the layer behind GELU summed in that GEMM
      // too (Gemm::dbias): bias_backward's adds on the dGELU output, added
      // to what the gradient held.
      std::vector<float> db1(size_t(N), 0.25f), db2 = db1, d4(c1.size());
      k->bias_backward({d2.data(), db1.data(), M, N});
      k->gemm({ta, true, M, N, K, 1.f, A.data(), B.data(), 0.f, d4.data(), nullptr, nullptr, nullptr, nullptr, c1.data(),
               db2.data()});
      EXPECT_TRUE(same(d2, d4)) << "dGELU with the bias gradient";
      EXPECT_TRUE(same(db1, db2)) << "the bias gradient";
    }
  const Gemm plain{false, true, 3, 5, 7, 1.f, nullptr, nullptr, 0.f, nullptr};
  std::vector<float> out(15);
  Gemm fused = plain;
  fused.bias = bias.data();
  fused.gelu_out = out.data();
  EXPECT_EQ(fused.describe(Precision::kBf16).to_string(), "gemm (M=3, N=5, K=7, trans_a=0, trans_b=1, epilogue=3)");
  EXPECT_DOUBLE_EQ(fused.describe(Precision::kBf16).bytes - plain.describe(Precision::kBf16).bytes, 4.0 * (5 + 3 * 5))
      << "the bias read and GELU's output written";
  Gemm backward = plain;
  backward.dgelu_pre = out.data();
  EXPECT_EQ(backward.describe(Precision::kBf16).to_string(), "gemm (M=3, N=5, K=7, trans_a=0, trans_b=1, epilogue=4)");
  EXPECT_DOUBLE_EQ(backward.describe(Precision::kBf16).bytes - plain.describe(Precision::kBf16).bytes, 4.0 * 3 * 5)
      << "the pre-activation read";
  std::vector<float> db(5);
  backward.dbias = db.data();
  EXPECT_EQ(backward.describe(Precision::kBf16).to_string(), "gemm (M=3, N=5, K=7, trans_a=0, trans_b=1, epilogue=12)");
  EXPECT_DOUBLE_EQ(backward.describe(Precision::kBf16).bytes - plain.describe(Precision::kBf16).bytes,
                   4.0 * 3 * 5 + 2 * 4.0 * 5)
      << "the pre-activation read, the bias gradient read and written";
}

// Each op's description names its shape: the dims of a call are the op's
// own size arguments (the profiler's rows and the sync check's messages).
TEST(KernelTable, DescriptionsNameTheShape) {
  const Gemm g{true, false, 3, 5, 7, 1.f, nullptr, nullptr, 0.f, nullptr};
  const KernelCall c = g.describe(Precision::kFp32);
  EXPECT_EQ(c.to_string(), "gemm (M=3, N=5, K=7, trans_a=1, trans_b=0)");
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 3 * 5 * 7);
  EXPECT_DOUBLE_EQ(c.bytes, 4.0 * (3 * 7 + 7 * 5) + 4.0 * 3 * 5);
  EXPECT_DOUBLE_EQ(g.describe(Precision::kBf16).bytes, 2.0 * (3 * 7 + 7 * 5) + 4.0 * 3 * 5) << "16-bit operands";
  const AttentionForward a{nullptr, nullptr, nullptr, nullptr, nullptr, 2, 1024, 32, 8, 128};
  EXPECT_EQ(a.describe(Precision::kFp32).to_string(), "attention_forward (B=2, T=1024, Hq=32, Hk=8, D=128)");
  EXPECT_EQ(TakeSumSquares{}.describe(Precision::kFp32).to_string(), "take_sum_squares");
  for (int i = 0; i < kNumKernelOps; ++i) EXPECT_STRNE(kernel_op_name(KernelOp(i)), "?");
}

}  // namespace
}  // namespace loom::exec
