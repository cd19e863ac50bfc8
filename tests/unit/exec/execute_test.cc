// Executing a plan in-process (exec/runtime/execute.h), the path `loom
// execute` and the GUI share: one rank on this thread, and ranks as threads
// over loopback TCP (execute_local), whose losses must match the single rank's
// (data parallelism is exact up to summation order); a bad plan fails every
// rank together with one message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/json_util.h"
#include "exec/comm/self_communicator.h"
#include "exec/runtime/execute.h"
#include "sim/report.h"
#include "sim/simulate.h"
#include "tests/support/test_models.h"
#include "tests/support/tiny_training.h"

namespace loom::exec {
namespace {

namespace fs = std::filesystem;

// A plan of the tiny GPT-2 for `ranks` ranks under `layout`, written to a file.
std::string write_plan(const std::string& layout, int ranks, const std::string& name) {
  TrainSpec t;
  t.global_batch = 8;
  t.seq_len = 32;
  t.steps = 4;
  t.lr = 3e-3;
  t.min_lr = 3e-4;
  t.warmup_steps = 2;
  Evaluator eval(test_support::tiny_model(true), testing::load_hw_or_die("dgx-h100"), t, SimOptions{});
  auto l = parse_layout(layout);
  LOOM_CHECK(l.is_ok(), l.status().to_string());
  auto r = simulate_layout(eval, *l);
  LOOM_CHECK(r.is_ok(), r.status().to_string());
  const std::string path = (fs::temp_directory_path() / ("loom_execute_test_" + name + ".plan.json")).string();
  LOOM_CHECK(write_text_file(path, plan_to_json(make_plan(eval, *r, ranks))).is_ok(), path);
  return path;
}

ExecuteOptions quiet_options(const std::string& plan) {
  ExecuteOptions o;
  o.plan_path = plan;
  o.threads = 1;
  o.quiet = true;
  o.print = [](const std::string&) {};
  return o;
}

TEST(Execute, OneRankInProcess) {
  auto world = make_self_communicator("world");
  auto r = execute_plan(*world, quiet_options(write_plan("dp=1,micro=2", 1, "one")));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->end, RunEnd::kCompleted);
  EXPECT_EQ(r->steps_done, 4);
  ASSERT_EQ(r->record.losses.size(), 4u);
  EXPECT_EQ(r->record.world_size, 1);
  EXPECT_EQ(r->record.plan_hash, r->plan.plan_hash());
  EXPECT_LT(r->record.losses.back(), r->record.losses.front());
}

TEST(Execute, RanksAsThreadsMatchOneRank) {
  auto one = execute_local(1, quiet_options(write_plan("dp=1,micro=2", 1, "dp1")));
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  std::vector<std::string> lines;
  ExecuteOptions o = quiet_options(write_plan("dp=2,micro=2", 2, "dp2"));
  o.quiet = false;
  o.print = [&](const std::string& s) { lines.push_back(s); };
  auto two = execute_local(2, o);
  ASSERT_TRUE(two.is_ok()) << two.status().to_string();
  EXPECT_EQ(two->record.world_size, 2);
  ASSERT_EQ(two->record.losses.size(), one->record.losses.size());
  for (size_t i = 0; i < one->record.losses.size(); ++i)
    EXPECT_NEAR(two->record.losses[i], one->record.losses[i], 1e-5 * std::fabs(one->record.losses[i])) << "step " << i;
  // Rank 0's lines only, through the callback: a step line per step.
  int steps = 0;
  for (const std::string& s : lines) steps += s.rfind("step ", 0) == 0 ? 1 : 0;
  EXPECT_EQ(steps, 4);
}

// The plan is for 2 ranks, 3 are started: every rank fails before allocating,
// with the same code.
TEST(Execute, ALaunchThatDoesNotMatchThePlanFailsEveryRank) {
  auto r = execute_local(3, quiet_options(write_plan("dp=2,micro=2", 2, "mismatch")));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("the plan is for 2 ranks but 3 were launched"), std::string::npos)
      << r.status().message();
}

TEST(Execute, AMissingPlanIsNamed) {
  auto world = make_self_communicator("world");
  ExecuteFailure how;
  auto r = execute_plan(*world, quiet_options("/nonexistent/plan.json"), &how);
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(how.together);
  EXPECT_TRUE(how.report);
  EXPECT_NE(r.status().message().find("/nonexistent/plan.json"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace loom::exec
