// Adam's state a parameter (SimOptions::optimizer_master_bytes,
// optimizer_moment_bytes): fp32 master weights and moments by default, the
// 16-bit remainder of the master beside bf16 weights (Apex's
// DistributedFusedAdam and Transformer Engine's FusedAdam
// store_param_remainders), bf16 moments (DeepSeek-V3, Megatron-core's
// --exp-avg-dtype bf16); in memory and in the optimizer step's traffic.
#include <gtest/gtest.h>

#include "core/hw_profile.h"
#include "sim/compute_model.h"
#include "sim/framework.h"
#include "sim/memory_model.h"
#include "sim/plan_request.h"
#include "sim/report.h"
#include "sim/validation.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

SimOptions states(double master, double moment) {
  SimOptions o;
  o.framework = "megatron-core";  // a stack's optimizer, not Loom's executor
  o.optimizer_master_bytes = master;
  o.optimizer_moment_bytes = moment;
  return o;
}

// By hand: fp32 master + m + v = 12 bytes; the remainder 2 + 4 + 4 = 10
// (NeMo's DistributedFusedAdam on a bf16 model); DeepSeek-V3's fp32 master
// and bf16 moments 4 + 2 + 2 = 8; fp32 training keeps only the moments
// (the weights are the master): 8, or 4 in bf16. Loom's own executor keeps
// fp32 states whatever the options say.
TEST(OptimizerState, BytesAParameterByHand) {
  EXPECT_DOUBLE_EQ(state_bytes_per_param(Precision::kBf16, states(4, 4)).optimizer, 12);
  EXPECT_DOUBLE_EQ(state_bytes_per_param(Precision::kBf16, states(2, 4)).optimizer, 10);
  EXPECT_DOUBLE_EQ(state_bytes_per_param(Precision::kFp8, states(4, 2)).optimizer, 8);
  EXPECT_DOUBLE_EQ(state_bytes_per_param(Precision::kFp32, states(4, 4)).optimizer, 8);
  EXPECT_DOUBLE_EQ(state_bytes_per_param(Precision::kFp32, states(4, 2)).optimizer, 4);
  SimOptions executor = states(2, 2);
  executor.framework.clear();
  executor.loom_executor = true;
  EXPECT_DOUBLE_EQ(state_bytes_per_param(Precision::kFp32, executor).optimizer, 8);
}

// The update streams the states it keeps: read and write the master, m and
// v, read the gradient (twice, with the norm's read) and write the 16-bit
// weights. bf16, fp32 main gradients: 2 x 12 + 2 x 4 + 2 = 34 bytes a
// parameter; with bf16 moments 2 x 8 + 8 + 2 = 26.
TEST(OptimizerState, TheUpdateStreamsWhatItKeeps) {
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  SimOptions fp32 = states(4, 4), bf16 = states(4, 2);
  fp32.fp32_main_grads = bf16.fp32_main_grads = true;
  fp32.kernel_overhead_s = bf16.kernel_overhead_s = 0;
  const double n = 1e9;
  EXPECT_NEAR(optimizer_time_s(hw, bf16, Precision::kBf16, n) / optimizer_time_s(hw, fp32, Precision::kBf16, n),
              26.0 / 34.0, 1e-12);
}

TEST(OptimizerState, TheFrameworkStatesItWithItsSource) {
  Result<Framework> ds = load_framework("deepseek-v3");
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_DOUBLE_EQ(ds->optimizer_moment_bytes, 2);
  EXPECT_DOUBLE_EQ(ds->optimizer_master_bytes, 4);
  SimOptions o;
  apply_framework(*ds, &o);
  EXPECT_DOUBLE_EQ(o.optimizer_moment_bytes, 2);
  Result<Framework> mc = load_framework("megatron-core");
  ASSERT_TRUE(mc.is_ok());
  EXPECT_DOUBLE_EQ(mc->optimizer_moment_bytes, 4);

  const std::string base = R"({"version": "1", "export": "megatron",
    "gradients": {"fp32_main_grads": true, "source": "s"},
    "overlap": {"grad_reduce_zero_stages": [0, 1], "source": "s"},
    "pipeline": {"blocking_p2p": true, "overlap_p2p_comm": true, "source": "s"},
    "layouts": {"zero_stages": [0, 1], "schedules": ["1f1b"], "recompute": ["none"], "sequence_parallel": "optional", "source": "s"},
    "fp8": {"scaling": "delayed", "source": "s"}, "optimizer": {"moment_bytes": 2, "source": "s"}, "source": "s"})";
  ASSERT_TRUE(parse_framework(base, "t").is_ok()) << parse_framework(base, "t").status().to_string();
  std::string no_source = base;
  const std::string sourced = R"("moment_bytes": 2, "source": "s")";
  no_source.replace(no_source.find(sourced), sourced.size(), R"("moment_bytes": 2)");
  Result<Framework> a = parse_framework(no_source, "t");
  ASSERT_FALSE(a.is_ok());
  EXPECT_NE(a.status().message().find("optimizer.source is missing"), std::string::npos) << a.status().to_string();
  std::string three = base;
  const std::string two = R"("moment_bytes": 2)";
  three.replace(three.find(two), two.size(), R"("moment_bytes": 3)");
  Result<Framework> b = parse_framework(three, "t");
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find("4 (fp32) or 2 (bf16), got 3"), std::string::npos) << b.status().to_string();
}

// A plan keeps them (loom execute's memory check reads the plan's options);
// a plan that says 3 is refused.
TEST(OptimizerState, APlanKeepsThem) {
  const SimOptions o = states(2, 2);
  Result<SimOptions> back = parse_sim_options(sim_options_json(o));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_DOUBLE_EQ(back->optimizer_master_bytes, 2);
  EXPECT_DOUBLE_EQ(back->optimizer_moment_bytes, 2);
  std::string bad = sim_options_json(o);
  const std::string key = "\"optimizer_moment_bytes\":2";
  const size_t at = bad.find(key);
  ASSERT_NE(at, std::string::npos) << bad;
  bad.replace(at, key.size(), "\"optimizer_moment_bytes\":3");
  EXPECT_FALSE(parse_sim_options(bad).is_ok());
}

// loom plan's --optimizer-master-bytes / --optimizer-moment-bytes override
// the framework's; another value than 4 or 2 is refused before the search.
TEST(OptimizerState, ThePlanRequestSetsAndChecksThem) {
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  PlanRequest req;
  req.framework = "deepseek-v3";
  Result<Framework> f = load_framework(req.framework);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_DOUBLE_EQ(make_sim_options(req, hw, &*f).optimizer_moment_bytes, 2);
  req.optimizer_moment_bytes = 4;
  req.optimizer_master_bytes = 2;
  EXPECT_TRUE(make_train_spec(req, hw).is_ok());
  const SimOptions o = make_sim_options(req, hw, &*f);
  EXPECT_DOUBLE_EQ(o.optimizer_moment_bytes, 4);
  EXPECT_DOUBLE_EQ(o.optimizer_master_bytes, 2);
  req.optimizer_moment_bytes = 1;
  const Result<TrainSpec> bad = make_train_spec(req, hw);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("--optimizer-moment-bytes"), std::string::npos);
  EXPECT_NE(bad.status().message().find("got 1"), std::string::npos);
}

// A validation row that sets them names its source; a NeMo 1.x row's
// remainder takes 2 bytes a parameter of the optimizer's shard off its peak.
TEST(OptimizerState, ARowNamesItsSource) {
  const std::string row = R"({"runs": [{"id": "X", "gpu": "H100", "model": "llama-2-7b", "hw": "dgx-h100",
    "gpus": 4, "global_batch": 64, "seq": 4096, "precision": "fp8", "framework": "megatron-core",
    "layout": "dp=4,zero=1,recompute=full", "metric": "step_time_s", "published": 1.0, "tolerance": 0.1,
    "source": "s", "optimizer_master_bytes": 2, "optimizer_source": "s"}]})";
  Result<std::vector<PublishedRun>> runs = parse_published_runs(row, ".");
  ASSERT_TRUE(runs.is_ok()) << runs.status().to_string();
  std::string unsourced = row;
  const std::string source_key = R"(, "optimizer_source": "s")";
  unsourced.replace(unsourced.find(source_key), source_key.size(), "");
  Result<std::vector<PublishedRun>> bad = parse_published_runs(unsourced, ".");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("optimizer_source is missing"), std::string::npos);
  const RunPrediction with = predict_run((*runs)[0]);
  PublishedRun plain = (*runs)[0];
  plain.optimizer_master_bytes = 0;
  const RunPrediction without = predict_run(plain);
  ASSERT_TRUE(with.ok && without.ok) << with.error << without.error;
  // Llama-2-7B's 6.74e9 parameters, ZeRO-1 over 4 ranks: 2 bytes each of a quarter.
  EXPECT_NEAR(without.peak_memory_bytes - with.peak_memory_bytes, 2 * 6.738e9 / 4, 0.01e9);
}

}  // namespace
}  // namespace loom
