// The CUDA kernel table, every op through the generic cases of
// tests/support/kernel_cases.h against the CPU table (the per-op profiler
// proves none is missed), the bf16 weight copy, and LOOM_CUDA_SYNC_DEBUG naming the
// failing op. Part of the cuda_production_test program (tolerances and the
// other cases: cuda_production_test.cc).
#include "tests/cuda/cuda_test_support.h"
#include "tests/support/kernel_cases.h"

namespace loom::exec {
namespace {

using namespace cuda_test;

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

// Every case of every op (tests/support/kernel_cases.h) on the fp32 CUDA
// table, with attention through the cuBLAS path and through the fused kernel
// (the second run with the GEMM epilogues fused by cuBLASLt), against the CPU
// reference table; the profiler in front of the table counts the calls, and
// every op of the list must have been called and timed.
TEST(CudaTableCoverage, EveryOpMatchesTheCpuTable) {
  SKIP_WITHOUT_GPU();
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused attention, cuBLASLt epilogues" : "cuBLAS attention, separate epilogues");
    auto be = cuda_backend(Precision::kFp32, fused ? "fused" : "gemm", fused ? "cublaslt" : "separate");
    auto prof = install_kernel_profiler(*be);
    ASSERT_TRUE(prof.is_ok()) << prof.status().to_string();
    Kernels& k = be->kernels();
    EXPECT_EQ(k.precision(), Precision::kFp32);
    for (const kernel_cases::Case& c : kernel_cases::all_cases()) {
      SCOPED_TRACE(c.label);
      kernel_cases::expect_match(c, kernel_cases::run_on(c, *be, k), kernel_cases::run_reference(c),
                                 /*exact=*/false);
    }
    be->synchronize();
    ASSERT_TRUE(k.status().is_ok()) << k.status().to_string();

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
}

// The GEMM epilogue fused by cuBLASLt in bf16 (the model's linears: x
// (N, in) times W^T, bias, GELU) against the CPU table on the same bf16-rounded
// operands; and an unknown LOOM_GEMM_EPILOGUE refused by name.
TEST(CudaTableCoverage, Bf16CublasLtEpilogueMatchesTheSeparateOps) {
  SKIP_WITHOUT_GPU();
  {
    ScopedEnv bad("LOOM_GEMM_EPILOGUE", "fused");
    auto made = make_cuda_backend(0, Precision::kBf16);
    ASSERT_FALSE(made.is_ok());
    EXPECT_NE(made.status().message().find("LOOM_GEMM_EPILOGUE='fused'"), std::string::npos)
        << made.status().to_string();
  }
  auto cpu = make_cpu_kernels();
  const int64_t M = 1024, N = 3072, K = 768;  // GPT-2 124M's fc1 at 1,024 tokens
  auto x = random_vec(size_t(M * K), 61), w = random_vec(size_t(N * K), 62, -0.05f, 0.05f),
       bias = random_vec(size_t(N), 63, -1, 1);
  std::vector<float> xr(x.size()), wr(w.size());
  for (size_t i = 0; i < x.size(); ++i) xr[i] = round_bf16(x[i]);
  for (size_t i = 0; i < w.size(); ++i) wr[i] = round_bf16(w[i]);
  std::vector<float> pre(size_t(M * N)), gelu(pre.size());
  cpu->gemm({false, true, M, N, K, 1.f, xr.data(), wr.data(), 0.f, pre.data(), nullptr, nullptr, bias.data(),
             gelu.data()});
  // cuBLASLt's calls are counted: the fused path must have run (not fallen
  // back to the separate kernels, which pass the same checks).
  for (const char* epilogue : {"separate", "cublaslt"}) {
    SCOPED_TRACE(epilogue);
    const int64_t before = cuda::lt_gemm_executions();
    auto be = cuda_backend(Precision::kBf16, "gemm", epilogue);
    Dev<float> dx(*be, x), dw(*be, w), db(*be, bias), dpre(*be, pre.size()), dgelu(*be, pre.size());
    be->kernels().gemm(
        {false, true, M, N, K, 1.f, dx.p(), dw.p(), 0.f, dpre.p(), nullptr, nullptr, db.p(), dgelu.p()});
    be->synchronize();
    ASSERT_TRUE(be->kernels().status().is_ok()) << be->kernels().status().to_string();
    expect_close(dpre.get(), pre, Tol{1e-4, 1e-5, 0}, "pre-activation");
    expect_close(dgelu.get(), gelu, Tol{6e-4, 4e-4, 0}, "GELU");
    EXPECT_EQ(cuda::lt_gemm_executions() - before, std::string(epilogue) == "cublaslt" ? 1 : 0);
  }
  // GELU's backward in the GEMM that makes its incoming gradient
  // (Gemm::dgelu_pre, CUBLASLT_EPILOGUE_DGELU), that pre-activation as its
  // input: the CPU's GEMM, then gelu_backward.
  std::vector<float> dpre_ref(pre.size());
  cpu->gemm({false, true, M, N, K, 1.f, xr.data(), wr.data(), 0.f, dpre_ref.data()});
  cpu->gelu_backward({dpre_ref.data(), pre.data(), dpre_ref.data(), M * N});
  // With the bias gradient (Gemm::dbias, CUBLASLT_EPILOGUE_DGELU_BGRAD): the
  // column sums of that, added to what the gradient held.
  const auto db_held = random_vec(size_t(N), 64, -1, 1);
  std::vector<float> db_ref = db_held;
  cpu->bias_backward({dpre_ref.data(), db_ref.data(), M, N});
  for (const bool with_db : {false, true})
    for (const char* epilogue : {"separate", "cublaslt"}) {
      SCOPED_TRACE(std::string(with_db ? "dGELU + bias gradient, " : "dGELU, ") + epilogue);
      const int64_t before = cuda::lt_gemm_executions();
      auto be = cuda_backend(Precision::kBf16, "gemm", epilogue);
      Dev<float> dx(*be, x), dw(*be, w), dpre(*be, pre), dout(*be, pre.size()), ddb(*be, db_held);
      be->kernels().gemm({false, true, M, N, K, 1.f, dx.p(), dw.p(), 0.f, dout.p(), nullptr, nullptr, nullptr, nullptr,
                          dpre.p(), with_db ? ddb.p() : nullptr});
      be->synchronize();
      ASSERT_TRUE(be->kernels().status().is_ok()) << be->kernels().status().to_string();
      expect_close(dout.get(), dpre_ref, Tol{6e-4, 4e-4, 0}, "dGELU");
      // A sum of 1,024 bf16-product rows: its rounding grows with the rows.
      if (with_db) expect_close(ddb.get(), db_ref, Tol{2e-3, 2e-3, 0}, "the bias gradient");
      EXPECT_EQ(cuda::lt_gemm_executions() - before, std::string(epilogue) == "cublaslt" ? 1 : 0);
    }
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
    cpu->gemm({false, false, M, N, K, 1.f, ar.data(), br.data(), 0.f, c.data()});
    return c;
  };
  k.gemm({false, false, M, N, K, 1.f, da.p(), dparams.p() + off, 0.f, dc.p()});
  expect_close(dc.get(), reference(params), Tol{2e-3, 2e-3, 0}, "bf16 gemm on the weight copy");
  // An optimizer step changes the weights: the next GEMM sees the new ones.
  auto updated = random_vec(size_t(nparams), 52);
  dparams.set(updated);
  k.weights_changed(dparams.p(), nparams);
  k.gemm({false, false, M, N, K, 1.f, da.p(), dparams.p() + off, 0.f, dc.p()});
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
    be = cuda_backend(Precision::kFp32, "fused");
  }
  Kernels& k = be->kernels();
  auto cpu = make_cpu_kernels();
  auto x = random_vec(4096, 60), y = random_vec(4096, 61);
  Dev<float> dx(*be, x), dy(*be, y);
  cpu->add_inplace({y.data(), x.data(), 4096});
  k.add_inplace({dy.p(), dx.p(), 4096});
  EXPECT_TRUE(k.status().is_ok()) << k.status().to_string();
  expect_close(dy.get(), y, kExact, "add_inplace under sync debug");

  const int64_t T = 12161, D = 64;  // one row past the fused kernel's shared memory
  Dev<float> q(*be, size_t(T * D)), o(*be, size_t(T * D)), lse(*be, size_t(T));
  testing::internal::CaptureStderr();
  k.attention_forward({q.p(), q.p(), q.p(), o.p(), lse.p(), 1, T, 1, 1, D});
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
        k.add_inplace({unmapped, unmapped, 4096});
        const Status s = k.status();
        std::fprintf(stderr, "status: %s\n", s.to_string().c_str());
        std::_Exit(s.is_ok() ? 0 : 3);
      },
      testing::ExitedWithCode(3), "CUDA error '.+' \\(cuda[A-Za-z]+\\) in add_inplace \\(n=4096\\)");
}


}  // namespace
}  // namespace loom::exec
