// fp16 dynamic loss scaling: the scaler's rule (PyTorch GradScaler /
// Megatron DynamicGradScaler), and the trainer running it end to end on the
// CPU through a kernel table that rounds every GEMM operand to IEEE fp16 the
// way the GPU's fp16 GEMMs see them (overflow to inf included), so skipped
// steps, back-off and growth happen for real without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "exec/backend/cpu_kernels.h"
#include "exec/comm/self_communicator.h"
#include "exec/runtime/loss_scaler.h"
#include "exec/runtime/trainer.h"
#include "tests/support/emulated_16bit_backend.h"
#include "tests/support/tiny_training.h"

namespace loom::exec {
namespace {

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheWindow) {
  LossScaler s({.initial_scale = 1024, .growth = 2, .backoff = 0.5, .growth_interval = 3, .min_scale = 1});
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_TRUE(s.update(true));  // third finite step in a row
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_TRUE(s.update(true));
  EXPECT_FALSE(s.update(false));  // an overflow resets the run of good steps
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.good_steps(), 0);
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 1) << "never below min_scale";
}

// The CPU kernels with fp16 GEMM operands and fp16 saved activations.
class Fp16CpuBackend final : public test_support::Emulated16BitBackend {
 public:
  Fp16CpuBackend() : Emulated16BitBackend(Precision::kFp16) {}
};

TrainerConfig tiny(int64_t steps) { return test_support::tiny_config(true, "dp=1,tp=1,pp=1,micro=4", steps); }

std::vector<StepResult> run(TrainerConfig cfg, ComputeBackend* backend) {
  cfg.backend = backend;
  auto world = make_self_communicator("world");
  auto data = open_byte_text(test_support::corpus_path(), cfg.train.seed);
  LOOM_CHECK(data.is_ok(), data.status().to_string());
  auto t = Trainer::create(world.get(), cfg, data->get());
  LOOM_CHECK(t.is_ok(), t.status().to_string());
  std::vector<StepResult> out;
  for (int64_t s = 0; s < cfg.train.steps; ++s) {
    auto r = (*t)->step(s);
    LOOM_CHECK(r.is_ok(), r.status().to_string());
    out.push_back(*r);
  }
  return out;
}

// With the default scale 2^16 nothing overflows on this model: fp16 operands
// and saved activations track the fp32 run closely (11 significant bits), the
// reported loss and gradient norm carry no trace of the scale, and the 16-bit
// saved activations lower the peak memory.
TEST(LossScaling, Fp16TracksFp32WithoutOverflow) {
  TrainerConfig cfg = tiny(20);
  Fp16CpuBackend fp16;
  auto half = run(cfg, &fp16);
  auto full = run(cfg, nullptr);
  for (size_t i = 0; i < half.size(); ++i) {
    EXPECT_FALSE(half[i].skipped) << "step " << i + 1;
    EXPECT_EQ(half[i].loss_scale, 65536.0);
    EXPECT_NEAR(half[i].loss, full[i].loss, 5e-3 * full[i].loss) << "step " << i + 1;
    EXPECT_NEAR(half[i].grad_norm, full[i].grad_norm, 2e-2 * full[i].grad_norm) << "step " << i + 1;
  }
  EXPECT_LT(half.back().loss, half.front().loss - 0.5);
  // Saved activations are held in 16 bits between forward and backward.
  EXPECT_LT(half.back().peak_memory_bytes, full.back().peak_memory_bytes);
}

// A scale far too large overflows fp16 in the backward GEMMs: those steps
// are skipped (no update, an infinite norm reported) and the scale halves
// until the gradients fit; after `growth_interval` good steps it doubles.
TEST(LossScaling, OverflowSkipsStepsBacksOffAndGrows) {
  TrainerConfig cfg = tiny(40);
  cfg.loss_scaling.initial_scale = std::ldexp(1.0, 40);
  cfg.loss_scaling.growth_interval = 10;
  Fp16CpuBackend fp16;
  auto r = run(cfg, &fp16);
  int skipped = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i].skipped) {
      ++skipped;
      EXPECT_TRUE(std::isinf(r[i].grad_norm));
      if (i + 1 < r.size()) {
        EXPECT_EQ(r[i + 1].loss_scale, r[i].loss_scale / 2) << "step " << i + 1;
      }
    } else if (i > 0 && !r[i - 1].skipped) {
      EXPECT_TRUE(std::isfinite(r[i].grad_norm));
    }
  }
  ASSERT_GT(skipped, 0) << "2^40 must overflow fp16";
  EXPECT_TRUE(r[0].skipped);
  EXPECT_LT(r.back().loss_scale, cfg.loss_scaling.initial_scale);
  // Growth: some step runs at twice the scale of the step before it.
  bool grew = false;
  for (size_t i = 1; i < r.size(); ++i) grew |= r[i].loss_scale == 2 * r[i - 1].loss_scale;
  EXPECT_TRUE(grew) << "no growth after " << cfg.loss_scaling.growth_interval << " good steps";
  // Training still learns once the scale fits.
  EXPECT_LT(r.back().loss, r.front().loss - 0.5);
}

// Overflow with the scale already at its floor cannot be cured by backing
// off: the run ends with an error naming the fix instead of skipping every
// step silently.
TEST(LossScaling, OverflowAtTheMinimumScaleEndsTheRun) {
  TrainerConfig cfg = tiny(3);
  cfg.loss_scaling.initial_scale = std::ldexp(1.0, 40);
  cfg.loss_scaling.min_scale = cfg.loss_scaling.initial_scale;
  Fp16CpuBackend fp16;
  cfg.backend = &fp16;
  auto world = make_self_communicator("world");
  auto data = open_byte_text(test_support::corpus_path(), cfg.train.seed);
  ASSERT_TRUE(data.is_ok());
  auto t = Trainer::create(world.get(), cfg, data->get());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  auto r = (*t)->step(0);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("--precision bf16"), std::string::npos) << r.status().to_string();
}

}  // namespace
}  // namespace loom::exec
