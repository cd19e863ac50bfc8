// Single-rank training through the Trainer: the program walk, optimizer and
// data path on one process (layouts with several ranks are tested under
// mpirun in tests/mpi/).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "exec/backend/backend_error.h"
#include "exec/comm/self_communicator.h"
#include "exec/runtime/trainer.h"
#include "tests/support/tiny_training.h"

namespace loom::exec {
namespace {

using test_support::corpus_path;
using test_support::tiny_model;

TrainerConfig config(bool gpt2, const std::string& layout, int64_t steps) {
  return test_support::tiny_config(gpt2, layout, steps);
}

std::vector<double> run(const TrainerConfig& cfg, int64_t steps) {
  auto world = make_self_communicator("world");
  auto data = open_byte_text(corpus_path(), cfg.train.seed);
  LOOM_CHECK(data.is_ok(), data.status().to_string());
  auto t = Trainer::create(world.get(), cfg, data->get());
  LOOM_CHECK(t.is_ok(), t.status().to_string());
  std::vector<double> losses;
  for (int64_t s = 0; s < steps; ++s) {
    auto r = (*t)->step(s);
    LOOM_CHECK(r.is_ok(), r.status().to_string());
    losses.push_back(r->loss);
  }
  return losses;
}

TEST(Trainer, FirstLossIsNearUniform) {
  auto losses = run(config(true, "dp=1", 1), 1);
  EXPECT_NEAR(losses[0], std::log(256.0), 0.3);
}

TEST(Trainer, LossFallsOnText) {
  for (bool gpt2 : {true, false}) {
    auto losses = run(config(gpt2, "dp=1", 200), 200);
    double first = losses[0], last = 0;
    for (int i = 190; i < 200; ++i) last += losses[size_t(i)] / 10;
    // From ~log(256) = 5.55 nats per byte at init to below 3.0 after 200 steps:
    // under the corpus' byte unigram entropy (3.31 nats, counted from the file),
    // so the model uses context, not just byte frequencies.
    EXPECT_NEAR(first, std::log(256.0), 0.3);
    EXPECT_LT(last, 3.0) << (gpt2 ? "gpt2" : "llama") << ": " << first << " -> " << last;
    std::printf("%s: loss %.3f at step 1, %.3f over steps 191-200\n", gpt2 ? "gpt2" : "llama", first, last);
  }
}

TEST(Trainer, GradientAccumulationMatchesOneBigMicroBatch) {
  // B = 8 as one micro-batch of 8 or as 8 micro-batches of 1: same losses.
  auto big = run(config(true, "dp=1,micro=8", 5), 5);
  auto acc = run(config(true, "dp=1,micro=1", 5), 5);
  for (size_t i = 0; i < big.size(); ++i) EXPECT_NEAR(acc[i], big[i], 1e-5 * big[i]) << "step " << i;
}

TEST(Trainer, RecomputeDoesNotChangeLosses) {
  auto base = run(config(false, "dp=1,micro=2", 4), 4);
  auto full = run(config(false, "dp=1,micro=2,recompute=full", 4), 4);
  auto sel = run(config(false, "dp=1,micro=2,recompute=selective", 4), 4);
  // Partial: the first of the two layers recomputes, the second keeps its activations.
  auto part = run(config(false, "dp=1,micro=2,recompute=full,recompute_layers=1", 4), 4);
  for (size_t i = 0; i < base.size(); ++i) {
    EXPECT_DOUBLE_EQ(full[i], base[i]);
    EXPECT_DOUBLE_EQ(sel[i], base[i]);
    EXPECT_DOUBLE_EQ(part[i], base[i]);
  }
}

// The fused head (core/executor_head.h) against the unfused one: with every
// row in one block its ops are the unfused head's backward GEMMs moved into
// the forward, so the losses agree bit for bit; in blocks of 48 rows (3
// blocks of a 128-row micro-batch, the last one short) the weight gradient
// is summed block by block, so they agree to rounding.
TEST(Trainer, FusedHeadMatchesTheUnfusedHead) {
  struct Env {
    const char* name;
    Env(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
    ~Env() { unsetenv(name); }
  };
  for (bool gpt2 : {true, false}) {  // a tied head and an untied one
    const TrainerConfig cfg = config(gpt2, "dp=1,micro=4", 4);
    const int64_t rows = cfg.layout.micro_batch * cfg.train.seq_len;
    ASSERT_EQ(rows, 128) << "the block split below assumes 128 rows";
    std::vector<double> unfused, fused, blocks;
    {
      Env off("LOOM_HEAD_IN_FORWARD", "0");
      unfused = run(cfg, 4);
    }
    fused = run(cfg, 4);
    {
      Env split("LOOM_HEAD_BLOCK_ROWS", "48");
      blocks = run(cfg, 4);
    }
    for (size_t i = 0; i < unfused.size(); ++i) {
      EXPECT_EQ(fused[i], unfused[i]) << (gpt2 ? "gpt2" : "llama") << " step " << i;
      EXPECT_NEAR(blocks[i], unfused[i], 1e-6 * unfused[i]) << (gpt2 ? "gpt2" : "llama") << " step " << i;
    }
    EXPECT_LT(unfused.back(), unfused.front()) << "training moved";
  }
}

TEST(Trainer, LearningRateSchedule) {
  TrainSpec t;
  t.lr = 1.0;
  t.min_lr = 0.1;
  t.warmup_steps = 10;
  t.steps = 110;
  EXPECT_DOUBLE_EQ(lr_schedule(t, 0), 0.1);
  EXPECT_DOUBLE_EQ(lr_schedule(t, 9), 1.0);
  EXPECT_NEAR(lr_schedule(t, 60), 0.55, 1e-12);  // half-way down the cosine
  EXPECT_NEAR(lr_schedule(t, 110), 0.1, 1e-12);
}

TEST(Trainer, WrongWorldSizeIsRefusedBeforeAllocating) {
  auto world = make_self_communicator("world");
  auto data = open_byte_text(corpus_path(), 1);
  ASSERT_TRUE(data.is_ok());
  auto t = Trainer::create(world.get(), config(true, "dp=2", 1), data->get());
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("but the run has 1 ranks"), std::string::npos) << t.status().message();
}

#if defined(__SANITIZE_ADDRESS__)
#define LOOM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOOM_ASAN 1
#endif
#endif

// A backend's failed allocation (DeviceBuffer cannot return a Status) becomes
// a kResourceExhausted Status at the executor's entry points, naming the size
// and where it happened, instead of an uncaught bad_alloc.
TEST(Trainer, OutOfMemoryIsAStatusNamingTheSize) {
#ifdef LOOM_ASAN
  GTEST_SKIP() << "ASan aborts on a 1 PiB allocation instead of returning null";
#else
  auto backend = make_cpu_backend();
  const Status s = guard_backend(
      [&] {
        DeviceBuffer huge(backend.get(), size_t(1) << 50);
        return Status::ok();
      },
      "step 3 in fwd s0 c0 mb1");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("step 3 in fwd s0 c0 mb1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("out of host memory: allocating 1073741824 MiB"), std::string::npos) << s.message();
#endif
}

}  // namespace
}  // namespace loom::exec
