// Plan JSON: written by the planner, read back identically; damaged or
// hand-edited plans are refused with a message naming the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/compare.h"
#include "core/plan.h"
#include "core/run_record.h"
#include "sim/export.h"
#include "sim/report.h"
#include "sim/simulate.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

Plan sample_plan() {
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 1024;
  t.steps = 10;
  Evaluator eval(testing::load_model_or_die("gpt2-124m"), testing::load_hw_or_die("dgx-h100"), t, SimOptions{});
  auto l = parse_layout("dp=2,tp=2,pp=2,zero=1,micro=2,schedule=interleaved,v=2,sp=1");
  auto r = simulate_layout(eval, *l);
  LOOM_CHECK(r.is_ok(), r.status().to_string());
  return make_plan(eval, *r, 8);
}

TEST(Plan, RoundTripsThroughJson) {
  Plan p = sample_plan();
  std::string text = plan_to_json(p);
  auto back = parse_plan(text);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->layout, p.layout);
  EXPECT_EQ(back->world_size, 8);
  EXPECT_EQ(back->train.global_batch, 64);
  EXPECT_EQ(back->train.steps, 10);
  EXPECT_EQ(back->model.total_params(), p.model.total_params());
  EXPECT_EQ(back->hw.accel.peak_bf16_flops, p.hw.accel.peak_bf16_flops);
  EXPECT_EQ(back->plan_hash(), p.plan_hash());
  EXPECT_EQ(plan_to_json(*back), text) << "writing what was read gives the same bytes";
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["schema_version"], kPlanSchemaVersion);
  EXPECT_GT(j["prediction"]["step_time_s"].get<double>(), 0);
  EXPECT_TRUE(j["prediction"]["memory_per_stage"].is_array());
}

TEST(Plan, CarriesWhatTheExecutorsMathNeedsAndRefusesVersionOne) {
  // Issue #14: the embedded config keeps rope_theta, the norm epsilon and rope_scaling
  // (version 1 dropped them: a Llama-3 plan then trained with RoPE base 10000).
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 1024;
  Evaluator eval(testing::load_model_or_die("llama-3.1-405b"), testing::load_hw_or_die("dgx-h100"), t, SimOptions{});
  auto l = parse_layout("dp=1,tp=8,pp=16,micro=1");
  auto r = simulate_layout(eval, *l);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const std::string text = plan_to_json(make_plan(eval, *r, 128));
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["model"]["config"]["rope_theta"], 500000.0);
  EXPECT_EQ(j["model"]["config"]["rms_norm_eps"], 1e-5);
  EXPECT_EQ(j["model"]["config"]["rope_scaling"]["rope_type"], "llama3");
  auto back = parse_plan(text);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->model.rope_theta, 500000.0);
  EXPECT_EQ(back->model.rope_scaling.factor, 8.0);
  j["schema_version"] = 1;
  auto old = parse_plan(j.dump());
  ASSERT_FALSE(old.is_ok());
  EXPECT_NE(old.status().message().find("schema_version 1 is not supported"), std::string::npos)
      << old.status().to_string();
}

TEST(Plan, HashChangesWithTheLayoutButNotThePrediction) {
  Plan p = sample_plan();
  std::string h = p.plan_hash();
  p.prediction_json = "{}";
  EXPECT_EQ(p.plan_hash(), h);
  p.layout.micro_batch = 1;
  EXPECT_NE(p.plan_hash(), h);
}

TEST(Plan, EditedInputsAreDetected) {
  auto j = nlohmann::json::parse(plan_to_json(sample_plan()));
  j["model"]["config"]["n_layer"] = 13;
  auto r = parse_plan(j.dump());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("model.hash"), std::string::npos) << r.status().message();
  j = nlohmann::json::parse(plan_to_json(sample_plan()));
  j["hardware"]["profile"]["accelerator"]["memory_gib"] = 40;
  r = parse_plan(j.dump());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("hardware.hash"), std::string::npos) << r.status().message();
}

// The plan carries the program the prediction timed: non-default buckets
// survive the round trip, enter the plan's hash and the program's.
TEST(Plan, CarriesTheProgramConfiguration) {
  Plan p = sample_plan();
  EXPECT_EQ(p.grad_buckets, kDefaultGradBuckets);
  const std::string default_hash = p.plan_hash();
  p.grad_buckets = 3;
  EXPECT_NE(p.plan_hash(), default_hash);
  auto j = nlohmann::json::parse(plan_to_json(p));
  EXPECT_EQ(j["program"]["grad_buckets"], 3);
  EXPECT_EQ(j["program"]["micro_batches"], p.program_config().micro_batches);
  EXPECT_EQ(j["program"]["hash"], program_hash(p.program_config()));
  auto back = parse_plan(plan_to_json(p));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->grad_buckets, 3);
  EXPECT_EQ(program_hash(back->program_config()), program_hash(p.program_config()));
  EXPECT_EQ(back->plan_hash(), p.plan_hash());
}

TEST(Plan, BadPlansAreRefusedWithTheField) {
  std::string good = plan_to_json(sample_plan());
  auto broken = parse_plan(good.substr(0, good.size() / 2), "p.json");
  ASSERT_FALSE(broken.is_ok());
  EXPECT_EQ(broken.status().code(), StatusCode::kParseError);
  EXPECT_NE(broken.status().message().find("line"), std::string::npos);
  EXPECT_NE(broken.status().message().find("column"), std::string::npos);

  struct Edit {
    const char* path;
    nlohmann::json value;
    const char* expect;
  };
  const Edit edits[] = {
      {"/schema_version", 99, "schema_version 99"},
      {"/world_size", 16, "but the run has 16 ranks"},
      {"/layout/tp", 5, "= 20 but the run has 8 ranks"},
      {"/layout/zero", 7, "zero=7"},
      {"/train/global_batch", -4, "global_batch"},
      {"/layout/schedule", "zigzag", "schedule"},
      {"/train/precision", "fp4", "precision"},
      {"/layout/micro_batch", 1, "plan_hash"},
      {"/train/seq_len", 512, "plan_hash"},
      // The program section: the buckets enter the plan's hash, the rest
      // must be what layout and train spec imply, and its own hash must hold.
      {"/program/grad_buckets", 3, "plan_hash"},
      {"/program/grad_buckets", 0, "program.grad_buckets = 0 is out of range"},
      {"/program/micro_batches", 5, "the program section disagrees with the layout and train spec (micro_batches 5 vs"},
      {"/program/schedule", "gpipe", "schedule \"gpipe\" vs \"interleaved\""},
      {"/program/hash", "0123456789abcdef", "program.hash 0123456789abcdef does not match"},
      {"/program/overlap_grad_reduce", "yes", "overlap_grad_reduce must be true or false"},
  };
  for (const Edit& e : edits) {
    auto j = nlohmann::json::parse(good);
    j[nlohmann::json::json_pointer(e.path)] = e.value;
    auto r = parse_plan(j.dump());
    ASSERT_FALSE(r.is_ok()) << e.path;
    EXPECT_NE(r.status().message().find(e.expect), std::string::npos) << e.path << ": " << r.status().message();
  }
  {
    auto j = nlohmann::json::parse(good);
    j.erase("program");
    auto r = parse_plan(j.dump());
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("'program' is missing"), std::string::npos) << r.status().message();
  }
  auto j = nlohmann::json::parse(good);
  j.erase("layout");
  auto r = parse_plan(j.dump());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'layout' is missing"), std::string::npos);
}

TEST(Plan, ExportsFollowTheLayout) {
  Plan p = sample_plan();
  auto meg = export_megatron_args(p);
  ASSERT_TRUE(meg.is_ok());
  EXPECT_NE(meg->find("--tensor-model-parallel-size 2"), std::string::npos);
  EXPECT_NE(meg->find("--pipeline-model-parallel-size 2"), std::string::npos);
  EXPECT_NE(meg->find("--num-layers-per-virtual-pipeline-stage 3"), std::string::npos);  // 12 / (2*2)
  EXPECT_NE(meg->find("--sequence-parallel"), std::string::npos);
  EXPECT_NE(meg->find("--use-distributed-optimizer"), std::string::npos);
  auto ds = export_deepspeed_config(p);
  ASSERT_TRUE(ds.is_ok());
  auto j = nlohmann::json::parse(*ds);
  EXPECT_EQ(j["train_batch_size"], 64);
  EXPECT_EQ(j["train_micro_batch_size_per_gpu"], 2);
  // DeepSpeed's identity: train_batch = micro * gas * dp.
  EXPECT_EQ(j["train_micro_batch_size_per_gpu"].get<int>() * j["gradient_accumulation_steps"].get<int>() * 2, 64);
  EXPECT_EQ(j["zero_optimization"]["stage"], 1);
  p.layout.zero = 2;
  EXPECT_EQ(export_megatron_args(p).status().code(), StatusCode::kUnsupported);
  // Uneven splits put the extra layers on the middle stages (core/stage_split.h).
  // Megatron-core states them with --decoder-first/last-pipeline-num-layers,
  // which needs equal middle stages: 14 layers over 4 stages = 3, 4, 4, 3;
  // 12 over 5 = 2, 3, 3, 2, 2 (middles 3, 3, 2) only with
  // --pipeline-model-parallel-layout (core_v0.13.0 and later).
  p.layout.zero = 1;
  p.layout.schedule = Schedule::k1F1B;
  p.layout.virtual_stages = 1;
  p.layout.pp = 4;
  p.model.num_layers = 14;
  auto uneven = export_megatron_args(p);
  ASSERT_TRUE(uneven.is_ok()) << uneven.status().to_string();
  EXPECT_NE(uneven->find("--decoder-first-pipeline-num-layers 3\n--decoder-last-pipeline-num-layers 3"),
            std::string::npos) << *uneven;
  p.layout.pp = 5;
  p.model.num_layers = 12;
  auto layout = export_megatron_args(p);
  ASSERT_TRUE(layout.is_ok()) << layout.status().to_string();
  EXPECT_NE(layout->find("--pipeline-model-parallel-layout \"Ett|(ttt|)*2,tt|ttL\"\n"), std::string::npos) << *layout;
  EXPECT_EQ(layout->find("--decoder-first"), std::string::npos) << *layout;
}

// --grad-reduce: recorded in the plan (and its hash) only when compressed,
// read back, refused when unknown, and exported as each framework's option or
// refused where the framework has none (fp8).
// The K/V exchange of context parallelism reaches the executor through the
// plan: written only when not the ring, read back, part of the hash; a
// plan naming an unknown one is refused with the field.
TEST(Plan, CpCommRoundTrips) {
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 1024;
  Evaluator eval(testing::load_model_or_die("gpt2-124m"), testing::load_hw_or_die("dgx-h100"), t, SimOptions{});
  auto plan_for = [&](const char* text) {
    auto r = simulate_layout(eval, parse_layout(text).value());
    LOOM_CHECK(r.is_ok(), r.status().to_string());
    return make_plan(eval, *r, 8);
  };
  const Plan ring = plan_for("dp=4,cp=2,zero=1"), ag = plan_for("dp=4,cp=2,zero=1,cp_comm=all_gather");
  EXPECT_EQ(plan_to_json(ring).find("\"cp_comm\""), std::string::npos);
  const std::string text = plan_to_json(ag);
  EXPECT_NE(text.find("\"cp_comm\": \"all_gather\""), std::string::npos);
  EXPECT_NE(ring.plan_hash(), ag.plan_hash());
  auto back = parse_plan(text);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->layout.cp_comm, CpComm::kAllGather);
  EXPECT_EQ(back->plan_hash(), ag.plan_hash());
  std::string bad = text;
  bad.replace(bad.find("\"all_gather\""), 12, "\"nvshmem\"");
  auto refused = parse_plan(bad);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("cp_comm"), std::string::npos) << refused.status().message();
}

TEST(Plan, GradReduceRoundTripsAndExports) {
  Plan p = sample_plan();
  const std::string fp32_hash = p.plan_hash();
  EXPECT_EQ(plan_to_json(p).find("\"grad_reduce\""), std::string::npos);
  p.train.grad_reduce = GradReduce::kBf16;
  EXPECT_NE(p.plan_hash(), fp32_hash);
  auto back = parse_plan(plan_to_json(p));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->train.grad_reduce, GradReduce::kBf16);
  EXPECT_EQ(back->plan_hash(), p.plan_hash());
  auto meg = export_megatron_args(p);
  ASSERT_TRUE(meg.is_ok());
  EXPECT_NE(meg->find("--grad-reduce-in-bf16\n"), std::string::npos);
  auto ds = export_deepspeed_config(p);
  ASSERT_TRUE(ds.is_ok());
  EXPECT_EQ(nlohmann::json::parse(*ds)["communication_data_type"], "bf16");
  p.train.grad_reduce = GradReduce::kFp8;
  EXPECT_EQ(export_megatron_args(p).status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(export_deepspeed_config(p).status().code(), StatusCode::kUnsupported);
  auto j = nlohmann::json::parse(plan_to_json(p));
  EXPECT_EQ(j["train"]["grad_reduce"], "fp8");
  j["train"]["grad_reduce"] = "int4";
  auto bad = parse_plan(j.dump());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("grad_reduce 'int4' is not one of fp32, bf16, fp8"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace loom

// Issue #14, finding 4: a run of another model (--scale on an unscaled plan)
// is refused by compare_rows naming both models, with or without
// --other-hardware; the record keeps the model's config through JSON.
namespace loom {
namespace {

TEST(Compare, RefusesARunOfAnotherModel) {
  Plan p = sample_plan();
  RunRecord rec;
  rec.plan_hash = p.plan_hash();
  rec.model_name = p.model.name;
  rec.model_config = model_spec_to_json(p.model);
  rec.layout = p.layout.to_string();
  rec.world_size = p.world_size;
  rec.tokens_per_step = int64_t(p.train.global_batch) * p.train.seq_len;
  rec.step_time_s = 1;
  ASSERT_TRUE(compare_rows(p, rec).is_ok());
  ASSERT_TRUE(compare_rows(p, rec, true).is_ok());

  auto scale = parse_model_scale("layers=2,hidden=256,heads=4");
  ASSERT_TRUE(scale.is_ok());
  auto scaled = scale_model(p.model, *scale);
  ASSERT_TRUE(scaled.is_ok()) << scaled.status().to_string();
  RunRecord other = rec;
  other.model_name = scaled->name;
  other.model_config = model_spec_to_json(*scaled);
  auto back = parse_run_record(run_record_to_json(other));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->model_config.empty(), false);
  for (bool other_hw : {false, true}) {
    auto rows = compare_rows(p, *back, other_hw);
    ASSERT_FALSE(rows.is_ok());
    EXPECT_EQ(rows.status().code(), StatusCode::kInvalidArgument);
    const std::string& m = rows.status().message();
    EXPECT_NE(m.find("different model"), std::string::npos) << m;
    EXPECT_NE(m.find(scaled->name), std::string::npos) << m;
    EXPECT_NE(m.find(p.model.name), std::string::npos) << m;
    EXPECT_NE(m.find("n_layer 2 vs 12"), std::string::npos) << m;
  }
  // Same name, other dimensions (a hand-made config): still refused.
  other.model_name = p.model.name;
  EXPECT_FALSE(compare_rows(p, other).is_ok());
}

}  // namespace
}  // namespace loom
