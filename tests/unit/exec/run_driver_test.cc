// The run driver in-process, on one rank: what it records against the
// trainer's own steps, a planned stop, and an error from the per-step
// callback ending the run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/throughput.h"
#include "exec/comm/self_communicator.h"
#include "exec/runtime/run_driver.h"
#include "tests/support/tiny_training.h"

namespace loom::exec {
namespace {

using test_support::corpus_path;

struct TinyRun {
  std::unique_ptr<Communicator> world = make_self_communicator("world");
  std::unique_ptr<TokenSource> data;
  std::unique_ptr<Trainer> trainer;
  TrainerConfig cfg;

  explicit TinyRun(int64_t steps) : cfg(test_support::tiny_config(false, "dp=1,micro=2", steps)) {
    auto d = open_byte_text(corpus_path(), cfg.train.seed);
    LOOM_CHECK(d.is_ok(), d.status().to_string());
    data = std::move(d).value();
    auto t = Trainer::create(world.get(), cfg, data.get());
    LOOM_CHECK(t.is_ok(), t.status().to_string());
    trainer = std::move(t).value();
  }
};

TEST(RunDriver, RecordsTheStepsItRan) {
  TinyRun run(6);
  const double palm = run.cfg.model.model_flops_per_token_palm(run.cfg.train.seq_len), peak = 1e12;
  RunControl c;
  std::vector<StepFigures> seen;
  std::vector<double> losses;
  c.on_step = [&](const StepFigures& f) {
    seen.push_back(f);
    losses.push_back(f.result->loss);
    return Status::ok();
  };
  RunRecord rec;
  auto out = drive_run(*run.world, *run.trainer, run.cfg.train, palm, peak, c, &rec);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(out->end, RunEnd::kCompleted);
  EXPECT_EQ(out->steps_done, 6);
  ASSERT_EQ(seen.size(), 6u);
  EXPECT_EQ(seen.front().step, 1);
  EXPECT_EQ(seen.back().step, 6);
  EXPECT_EQ(rec.losses, losses);
  EXPECT_EQ(rec.steps, 6);
  EXPECT_EQ(rec.warmup_steps, 2);
  ASSERT_EQ(rec.step_times_s.size(), 6u);
  // Mean and median of the steps after warm-up.
  std::vector<double> after(rec.step_times_s.begin() + 2, rec.step_times_s.end());
  double mean = 0;
  for (double t : after) mean += t / double(after.size());
  EXPECT_DOUBLE_EQ(rec.step_time_s, mean);
  std::sort(after.begin(), after.end());
  EXPECT_DOUBLE_EQ(rec.step_time_median_s, 0.5 * (after[1] + after[2]));
  // Throughput from the one formula, and the phases the trainer measured.
  const Throughput t = throughput(double(run.cfg.train.tokens_per_step()), rec.step_time_s, palm, 1, peak);
  EXPECT_DOUBLE_EQ(rec.tokens_per_s, t.tokens_per_s);
  EXPECT_DOUBLE_EQ(rec.mfu, t.mfu);
  EXPECT_EQ(rec.mfu_formula, kMfuFormula);
  EXPECT_GT(rec.phases.forward_s, 0);
  EXPECT_GT(rec.phases.backward_s, 0);
  EXPECT_GT(rec.phases.optimizer_s, 0);
  EXPECT_TRUE(std::isnan(rec.phases.tp_comm_exposed_s));  // not measured, not 0
  EXPECT_LE(rec.phases.forward_s + rec.phases.backward_s, rec.step_time_s * 1.05);
  ASSERT_EQ(rec.peak_memory_bytes.size(), 1u);
  EXPECT_GT(rec.peak_memory_bytes[0], 0);
}

TEST(RunDriver, StopsWhenAskedAndWhenTheCallbackFails) {
  {
    TinyRun run(8);
    RunControl c;
    c.stop_after = 3;
    RunRecord rec;
    auto out = drive_run(*run.world, *run.trainer, run.cfg.train, 1, 1, c, &rec);
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    EXPECT_EQ(out->end, RunEnd::kStoppedAsAsked);
    EXPECT_EQ(out->steps_done, 3);
    EXPECT_EQ(rec.losses.size(), 3u);
  }
  {
    TinyRun run(8);
    volatile std::sig_atomic_t signal = 0;
    RunControl c;
    c.stop_requested = &signal;
    c.on_step = [&](const StepFigures& f) {
      if (f.step == 2) signal = 1;  // as a SIGTERM handler would
      return Status::ok();
    };
    RunRecord rec;
    auto out = drive_run(*run.world, *run.trainer, run.cfg.train, 1, 1, c, &rec);
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    EXPECT_EQ(out->end, RunEnd::kStoppedBySignal);
    EXPECT_EQ(out->steps_done, 2);
  }
  {
    TinyRun run(8);
    RunControl c;
    c.on_step = [](const StepFigures& f) {
      return f.step == 4 ? io_error("metrics.jsonl: no space left on device") : Status::ok();
    };
    RunRecord rec;
    auto out = drive_run(*run.world, *run.trainer, run.cfg.train, 1, 1, c, &rec);
    ASSERT_FALSE(out.is_ok());
    EXPECT_NE(out.status().message().find("no space left"), std::string::npos);
    EXPECT_EQ(rec.losses.size(), 4u);
  }
}

}  // namespace
}  // namespace loom::exec
