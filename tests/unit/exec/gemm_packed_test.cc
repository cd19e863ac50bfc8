// GEMMs reading a 16-bit operand as it is (Gemm::A16 / B16), and the model's
// use of it (ChunkConfig::gemm_reads_packed): in mixed precision, the saved
// activations that backward reads only as a weight-gradient GEMM's operand
// stay packed in 16 bits instead of being restored to fp32 and cast back.
//
// The independent truth is the unpacked path itself: the packed bits are
// exactly the rounding of the fp32 value the GEMM would otherwise round, so
// every product, loss, gradient norm and parameter must be the same BIT FOR
// BIT, on the CPU table that computes as the GPU's 16-bit path does
// (tests/support/emulated_16bit_backend.h), in bf16 and fp16; and the peak
// memory must drop by the fp32 copies no longer made.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "exec/comm/self_communicator.h"
#include "exec/runtime/trainer.h"
#include "tests/support/emulated_16bit_backend.h"
#include "tests/support/tiny_training.h"

namespace loom::exec {
namespace {

std::vector<float> random_values(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    v[i] = float(int64_t(seed >> 40) % 2001 - 1000) / 137.f;
  }
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every transpose mode, A and B packed in turn and together: the same bits
// as the GEMM that rounds the fp32 operands itself.
TEST(GemmPacked, A16AndB16GiveTheProductOfTheRoundedOperandsBitForBit) {
  for (Precision p : {Precision::kBf16, Precision::kFp16}) {
    test_support::Emulated16BitKernels k(p);
    const int64_t M = 13, N = 7, K = 29;
    const auto A = random_values(size_t(M * K), 1), B = random_values(size_t(K * N), 2),
               C0 = random_values(size_t(M * N), 3);
    std::vector<uint16_t> a16(A.size()), b16(B.size());
    k.to_16bit({A.data(), a16.data(), int64_t(A.size())});
    k.to_16bit({B.data(), b16.data(), int64_t(B.size())});
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int which : {1, 2, 3}) {
          SCOPED_TRACE(std::string(precision_name(p)) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                       " packed=" + std::to_string(which));
          std::vector<float> ref = C0, got = C0;
          k.gemm({ta, tb, M, N, K, 0.5f, A.data(), B.data(), 1.f, ref.data()});
          Gemm g{ta, tb, M, N, K, 0.5f, A.data(), B.data(), 1.f, got.data()};
          if (which & 1) g.A = nullptr, g.A16 = a16.data();
          if (which & 2) g.B = nullptr, g.B16 = b16.data();
          k.gemm(g);
          EXPECT_TRUE(same_bits(ref, got));
        }
  }
}

struct Trained {
  std::vector<StepResult> steps;
  std::vector<float> params;
};

Trained train(const TrainerConfig& base, Precision p, bool packed) {
  if (packed) unsetenv("LOOM_GEMM_PACKED");
  else setenv("LOOM_GEMM_PACKED", "0", 1);
  test_support::Emulated16BitBackend backend(p);
  TrainerConfig cfg = base;
  cfg.backend = &backend;
  auto world = make_self_communicator("world");
  auto data = open_byte_text(test_support::corpus_path(), cfg.train.seed);
  LOOM_CHECK(data.is_ok(), data.status().to_string());
  auto t = Trainer::create(world.get(), cfg, data->get());
  LOOM_CHECK(t.is_ok(), t.status().to_string());
  Trained r;
  for (int64_t s = 0; s < cfg.train.steps; ++s) {
    auto st = (*t)->step(s);
    LOOM_CHECK(st.is_ok(), st.status().to_string());
    r.steps.push_back(*st);
  }
  const ParamStore& P = (*t)->params();
  r.params.assign(P.params(), P.params() + P.numel());
  unsetenv("LOOM_GEMM_PACKED");
  return r;
}

// GPT-2 (GELU: h1, h2 and the GELU output packed) and Llama (SwiGLU: h1,
// h2 and the product packed), bf16 and fp16; no recompute, selective
// recompute, and full recompute (the layer re-run in backward rounds them
// once too). Forward: each is rounded once and its GEMMs read the 16 bits;
// backward: their weight-gradient GEMMs read them, never restored.
TEST(GemmPacked, TrainingIsBitIdenticalAndPeakMemoryDrops) {
  for (bool gpt2 : {true, false})
    for (Precision p : {Precision::kBf16, Precision::kFp16})
      for (const char* layout : {"dp=1,micro=4", "dp=1,micro=4,recompute=selective", "dp=1,micro=4,recompute=full"}) {
        SCOPED_TRACE(std::string(gpt2 ? "gpt2 " : "llama ") + precision_name(p) + " " + layout);
        const TrainerConfig cfg = test_support::tiny_config(gpt2, layout, 3);
        const Trained off = train(cfg, p, false), on = train(cfg, p, true);
        ASSERT_EQ(off.steps.size(), on.steps.size());
        for (size_t i = 0; i < on.steps.size(); ++i) {
          EXPECT_EQ(on.steps[i].loss, off.steps[i].loss) << "step " << i + 1;
          EXPECT_EQ(on.steps[i].grad_norm, off.steps[i].grad_norm) << "step " << i + 1;
        }
        EXPECT_TRUE(same_bits(on.params, off.params)) << "the parameters after 3 steps differ";
        EXPECT_LT(on.steps.back().peak_memory_bytes, off.steps.back().peak_memory_bytes);
        std::printf("%s %s %s: peak %zu bytes, %zu with LOOM_GEMM_PACKED=0\n", gpt2 ? "gpt2" : "llama",
                    precision_name(p), layout, size_t(on.steps.back().peak_memory_bytes),
                    size_t(off.steps.back().peak_memory_bytes));
      }
}

}  // namespace
}  // namespace loom::exec
