// cuDNN's fused attention (exec/backend/cuda/cudnn_sdpa.h), the
// LOOM_CUDA_ATTENTION=cudnn path of the CUDA kernel table:
//
//   CudnnLoad.*   loading cuDNN at run time fails with a message that names
//                 the library and the fix, never an exception or a crash
//                 (these run without a GPU; the first must run first in its
//                 process, before any load succeeds)
//   CudnnSdpa.*   forward (out and the row log-sum-exp) and backward (dq,
//                 dk, dv) through the kernel table against the CPU table:
//                 causal and unmasked, grouped KV heads, bf16 and fp16, a
//                 length that is not a multiple of the engines' tiles
//
// Tolerance: kAttentionBf16 (max 3e-2, L2 2e-2 of the largest / the L2 of
// the reference), the cuBLAS bf16 path's: inputs and outputs are rounded to
// 16 bits at the boundary (2^-9 relative for bf16), softmax and accumulation
// in fp32 inside cuDNN.
#include <cstdlib>
#include <string>

#include "tests/cuda/cuda_test_support.h"

namespace loom::exec {
namespace {

using namespace cuda_test;

TEST(CudnnLoad, AMissingLibraryIsNamedWithTheFix) {
  if (cuda::cudnn_loaded()) GTEST_SKIP() << "cuDNN already loaded in this process (a test ran before this one)";
  ScopedEnv lib("LOOM_CUDNN_LIBRARY", "/nonexistent/libcudnn.so.9");
  auto made = cuda::make_cudnn_sdpa(nullptr);
  ASSERT_FALSE(made.is_ok());
  const std::string m = made.status().message();
  if (!cuda::cudnn_sdpa_built()) {
    EXPECT_NE(m.find("cudnn-frontend headers"), std::string::npos) << m;
    return;
  }
  EXPECT_EQ(made.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(m.find("/nonexistent/libcudnn.so.9"), std::string::npos) << m;
  EXPECT_NE(m.find("LD_LIBRARY_PATH"), std::string::npos) << m;
  EXPECT_NE(m.find("LOOM_CUDNN_LIBRARY"), std::string::npos) << m;
}

// Without a GPU, whether or not libcudnn.so.9 is on the library path: a
// clean failure (cuDNN's handle needs a device), and the kernel table's
// cudnn path falls back instead of failing the run.
TEST(CudnnLoad, WithoutAGpuItFailsCleanly) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a GPU is visible: CudnnSdpa.* cover this machine";
  auto made = cuda::make_cudnn_sdpa(nullptr);
  ASSERT_FALSE(made.is_ok());
  EXPECT_FALSE(made.status().message().empty());
  std::printf("without a GPU: %s\n", made.status().to_string().c_str());
}

TEST(CudnnLoad, AnUnknownAttentionPathIsRefusedByName) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "making a CUDA backend needs a GPU";
  ScopedEnv path("LOOM_CUDA_ATTENTION", "flash");
  auto be = make_cuda_backend(0, Precision::kBf16);
  ASSERT_FALSE(be.is_ok());
  EXPECT_NE(be.status().message().find("LOOM_CUDA_ATTENTION='flash'"), std::string::npos) << be.status().to_string();
}

struct Case {
  int64_t B, T, Hq, Hk, D;
  bool causal;
  Precision precision;
};

void check(const Case& c) {
  const Status usable = cudnn_usable();
  if (!usable.is_ok()) {
    if (cudnn_required()) FAIL() << "LOOM_REQUIRE_CUDNN=1 but " << usable.to_string();
    GTEST_SKIP() << usable.message();
  }
  const int64_t B = c.B, T = c.T, Hq = c.Hq, Hk = c.Hk, D = c.D;
  const bool bf16 = c.precision == Precision::kBf16;
  // The table falls back to cuBLAS where cuDNN refuses a shape: make sure it
  // does not, so that what is compared below is cuDNN's.
  {
    auto sdpa = cuda::make_cudnn_sdpa(nullptr);
    ASSERT_TRUE(sdpa.is_ok()) << sdpa.status().to_string();
    const cuda::SdpaShape s{B, T, Hq, Hk, D, c.causal, bf16};
    for (bool backward : {false, true}) {
      auto ws = sdpa.value()->prepare(s, backward);
      ASSERT_TRUE(ws.is_ok()) << ws.status().to_string();
      std::printf("%s %s: workspace %zu bytes\n", s.to_string().c_str(), backward ? "backward" : "forward",
                  ws.value());
    }
  }
  const size_t nq = size_t(B * T * Hq * D), nk = size_t(B * T * Hk * D), nl = size_t(B * Hq * T);
  const auto q = random_vec(nq, 21, -2, 2), k = random_vec(nk, 22, -2, 2), v = random_vec(nk, 23),
             dout = random_vec(nq, 24);
  std::vector<float> out(nq), lse(nl), dq(nq), dk(nk), dv(nk);
  auto cpu = make_cpu_kernels();
  cpu->attention_forward({q.data(), k.data(), v.data(), out.data(), lse.data(), B, T, Hq, Hk, D, c.causal});
  cpu->attention_backward({dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), dq.data(), dk.data(),
                          dv.data(), B, T, Hq, Hk, D, c.causal});

  auto be = cuda_backend(c.precision, "cudnn");
  Kernels& kt = be->kernels();
  Dev<float> q_(*be, q), k_(*be, k), v_(*be, v), do_(*be, dout), o_(*be, nans(nq)), l_(*be, nans(nl)),
      gq(*be, nans(nq)), gk(*be, nans(nk)), gv(*be, nans(nk));
  const int64_t ran = cuda::cudnn_sdpa_executions();
  kt.attention_forward({q_.p(), k_.p(), v_.p(), o_.p(), l_.p(), B, T, Hq, Hk, D, c.causal});
  kt.attention_backward(
      {do_.p(), q_.p(), k_.p(), v_.p(), o_.p(), l_.p(), gq.p(), gk.p(), gv.p(), B, T, Hq, Hk, D, c.causal});
  be->synchronize();
  ASSERT_TRUE(kt.status().is_ok()) << kt.status().to_string();
  ASSERT_EQ(cuda::cudnn_sdpa_executions() - ran, 2) << "the table's attention did not go through cuDNN";
  expect_close(o_.get(), out, kAttentionBf16, "out");
  expect_close(l_.get(), lse, kAttentionBf16, "lse");
  expect_close(gq.get(), dq, kAttentionBf16, "dq");
  expect_close(gk.get(), dk, kAttentionBf16, "dk");
  expect_close(gv.get(), dv, kAttentionBf16, "dv");
}

TEST(CudnnSdpa, CausalGqaBf16) {
  SKIP_WITHOUT_GPU();
  check({2, 256, 8, 2, 64, true, Precision::kBf16});
}

// Context parallelism's blocks of keys wholly in the queries' past.
TEST(CudnnSdpa, UnmaskedFp16D128) {
  SKIP_WITHOUT_GPU();
  check({1, 384, 4, 4, 128, false, Precision::kFp16});
}

// T = 200: not a multiple of the engines' 64- or 128-row tiles.
TEST(CudnnSdpa, RaggedLengthCausalBf16) {
  SKIP_WITHOUT_GPU();
  check({3, 200, 6, 3, 64, true, Precision::kBf16});
}

}  // namespace
}  // namespace loom::exec
