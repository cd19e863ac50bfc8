// Regression tests for what fuzzing the parsers of user files found
// (tests/fuzz/, docs/fuzzing.md): each input that crashed, tripped a
// sanitizer or was silently misread is refused with a message naming the
// field (or, where the input is legitimate, read correctly). The reproducers
// are also kept under tests/fuzz/corpus/<harness>/.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/regress.h"
#include "core/hw_profile.h"
#include "core/layout.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/run_record.h"

namespace loom {
namespace {

using nlohmann::json;

std::string read_source_file(const std::string& rel) {
  std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/" + rel);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A valid plan made in core alone (prediction opaque), as JSON to edit.
json plan_json() {
  Plan p;
  auto m = load_model_spec("gpt2-124m");
  auto hw = load_hw_profile("cpu-local");
  LOOM_CHECK(m.is_ok() && hw.is_ok(), "shipped model/profile");
  p.model = *m;
  p.hw = *hw;
  p.layout = *parse_layout("dp=2");
  p.world_size = 2;
  p.train.global_batch = 8;
  p.train.seq_len = 128;
  return json::parse(plan_to_json(p));
}

::testing::AssertionResult refused_with(const Status& s, const std::string& needle) {
  if (s.is_ok()) return ::testing::AssertionFailure() << "accepted; expected an error containing '" << needle << "'";
  if (s.message().find(needle) == std::string::npos)
    return ::testing::AssertionFailure() << "error '" << s.message() << "' does not contain '" << needle << "'";
  return ::testing::AssertionSuccess();
}

// A number beyond a double's range threw nlohmann's out_of_range (406), which
// parse_json did not catch: every JSON reader ended the process (std::terminate).
TEST(ParserRegression, NumberOverflowIsAParseError) {
  const std::string config = read_source_file("tests/fuzz/corpus/fuzz_model_spec/crash-number-overflow-1e505.json");
  ASSERT_FALSE(config.empty());
  auto m = parse_model_spec(config, "cfg");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kParseError);
  EXPECT_NE(m.status().message().find("cfg: malformed JSON: number overflow parsing '1e505'"), std::string::npos)
      << m.status().message();
  EXPECT_FALSE(parse_run_record("33333333333330000008461573783842333e33333000").is_ok());
  EXPECT_FALSE(parse_plan(R"({"schema_version": 1e400})").is_ok());
  EXPECT_FALSE(parse_hw_profile(R"({"accelerator": {"memory_gib": -1e999}})", "h").is_ok());
  EXPECT_FALSE(cli::parse_results(
      read_source_file("tests/fuzz/corpus/fuzz_regress_results/crash-number-overflow.json"), "r").is_ok());
}

// scale_model gave GPT-2 grouped-query attention (kv_heads=4), which its
// config.json cannot express: the plan embedded an MHA config while the
// prediction was for GQA (the parameter count changed on re-reading).
TEST(ParserRegression, Gpt2ScaleRefusesKvHeads) {
  auto m = load_model_spec("gpt2-124m");
  ASSERT_TRUE(m.is_ok());
  auto scale = parse_model_scale("layers=4,hidden=256,heads=8,kv_heads=4,ffn=512,vocab=256");
  ASSERT_TRUE(scale.is_ok());
  EXPECT_TRUE(refused_with(scale_model(*m, *scale).status(), "kv_heads=4 does not apply to gpt2 models"));
  scale = parse_model_scale("layers=4,hidden=256,heads=8,kv_heads=8,ffn=512,vocab=256");
  auto ok = scale_model(*m, *scale);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  auto back = parse_model_spec(model_spec_to_json(*ok), "scaled");
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->total_params(), ok->total_params());
  // The Llama family keeps its KV heads through the config.
  auto llama = load_model_spec("llama-3-8b");
  ASSERT_TRUE(llama.is_ok());
  auto gqa = scale_model(*llama, *parse_model_scale("layers=4,hidden=256,heads=8,kv_heads=4,ffn=512,vocab=256"));
  ASSERT_TRUE(gqa.is_ok()) << gqa.status().to_string();
  auto gqa_back = parse_model_spec(model_spec_to_json(*gqa), "scaled");
  ASSERT_TRUE(gqa_back.is_ok());
  EXPECT_EQ(gqa_back->total_params(), gqa->total_params());
}

TEST(ParserRegression, PlanRoundTripStillWorks) {
  auto p = parse_plan(plan_json().dump());
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->world_size, 2);
}

// An integer field above INT64_MAX was read through a wrapping conversion.
TEST(ParserRegression, UnsignedAboveInt64MaxIsRefused) {
  json j = plan_json();
  j["world_size"] = uint64_t{18446744073709551615u};
  j.erase("plan_hash");
  EXPECT_TRUE(refused_with(parse_plan(j.dump()).status(), "world_size = 18446744073709551615 is out of range"));
}

// 1e300 as an integer: the float-to-int64 conversion was undefined behaviour
// (UBSan: "1e+300 is outside the range of representable values").
TEST(ParserRegression, HugeFloatAsIntegerIsRefused) {
  json j = plan_json();
  j["train"]["global_batch"] = 1e300;
  EXPECT_TRUE(refused_with(parse_plan(j.dump()).status(), "global_batch = 1e+300 is out of range"));
  j["train"]["global_batch"] = 8.5;
  EXPECT_TRUE(refused_with(parse_plan(j.dump()).status(), "global_batch must be an integer"));
}

// world_size 4294967298 was narrowed to 2 and the plan (without its hash) accepted.
TEST(ParserRegression, PlanWorldSizeIsNotNarrowed) {
  json j = plan_json();
  j.erase("plan_hash");
  j["world_size"] = int64_t{4294967298};
  EXPECT_TRUE(refused_with(parse_plan(j.dump()).status(), "world_size = 4294967298 is out of range"));
}

// Layout sizes in a plan were narrowed the same way (dp 4294967298 read as 2).
TEST(ParserRegression, PlanLayoutSizesAreNotNarrowed) {
  json j = plan_json();
  j.erase("plan_hash");
  j["layout"]["dp"] = int64_t{4294967298};
  EXPECT_TRUE(refused_with(parse_plan(j.dump()).status(), "plan: layout.dp = 4294967298 is out of range"));
}

// dp*tp*pp*cp overflowed int in Layout::world() (UBSan: signed overflow).
TEST(ParserRegression, LayoutWorldOverflowIsRefused) {
  EXPECT_TRUE(refused_with(parse_layout("dp=65536,tp=65536").status(), "dp*tp*pp*cp = 65536*65536*1*1 ranks is too large"));
  // The first version of that check multiplied all four sizes in int64 and
  // overflowed itself (fuzz_layout, UBSan): every factor near 2^24.
  EXPECT_TRUE(refused_with(parse_layout("pp=529010,tp=5202402,dp=5404804,cp=16777216").status(), "is too large"));
  // A NUL inside a value ended strtol's view of it: "tp=2\0junk" was tp=2.
  EXPECT_TRUE(refused_with(parse_layout(std::string("tp=2\0junk", 10)).status(), "is not an integer"));
  EXPECT_TRUE(refused_with(parse_layout("tp= 2").status(), "is not an integer"));
  Layout l;
  l.dp = 1 << 24;
  l.tp = 1 << 24;
  TrainSpec t;
  t.global_batch = 8;
  t.seq_len = 128;
  auto m = load_model_spec("gpt2-124m");
  ASSERT_TRUE(m.is_ok());
  EXPECT_TRUE(refused_with(validate_layout(l, *m, t, 0), "too large"));
}

// A diverged run writes NaN losses as null; the record could not be read back.
TEST(ParserRegression, RunRecordWithNanLossRoundTrips) {
  RunRecord r;
  r.plan_hash = "0123456789abcdef";
  r.world_size = 1;
  r.steps = 2;
  r.step_time_s = 0.5;
  r.losses = {4.5, std::numeric_limits<double>::quiet_NaN()};
  auto back = parse_run_record(run_record_to_json(r));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_EQ(back->losses.size(), 2u);
  EXPECT_EQ(back->losses[0], 4.5);
  EXPECT_TRUE(std::isnan(back->losses[1]));
  EXPECT_EQ(run_record_to_json(*back), run_record_to_json(r));
  json j = json::parse(run_record_to_json(r));
  j["losses"] = json::array({1.0, "x"});
  EXPECT_TRUE(refused_with(parse_run_record(j.dump()).status(), "losses must be an array of numbers"));
  j = json::parse(run_record_to_json(r));
  j["world_size"] = int64_t{4294967297};
  EXPECT_TRUE(refused_with(parse_run_record(j.dump()).status(), "world_size = 4294967297 is out of range"));
}

// gemm_tile was narrowed to int: [4294967552, 128] became [256, 128].
TEST(ParserRegression, HwProfileGemmTileIsNotNarrowed) {
  json j = json::parse(read_source_file("hwprofiles/dgx-h100.json"));
  j["accelerator"]["gemm_tile"] = json::array({int64_t{4294967552}, 128});
  EXPECT_TRUE(refused_with(parse_hw_profile(j.dump(), "h").status(), "gemm_tile must be [tile_m, tile_n]"));
}

// mlp_only_layers [4294967296] was narrowed to layer 0 and accepted.
TEST(ParserRegression, MlpOnlyLayersAreNotNarrowed) {
  json j = json::parse(read_source_file("models/qwen3-30b-a3b.json"));
  j["mlp_only_layers"] = json::array({int64_t{4294967296}});
  EXPECT_TRUE(refused_with(parse_model_spec(j.dump(), "q").status(), "mlp_only_layers holds 4294967296"));
  j["mlp_only_layers"] = json::array({1});
  auto m = parse_model_spec(j.dump(), "q");
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_FALSE(m->is_moe_layer(1));
}

TEST(ParserRegression, RegressSuitesParseAndRefuseHugeRanks) {
  for (const char* name : {"bench/suites/ci.json", "bench/suites/bench.json"}) {
    auto s = cli::parse_suite(read_source_file(name), name);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    EXPECT_FALSE(s->cases.empty());
  }
  json j = json::parse(read_source_file("bench/suites/ci.json"));
  j["cases"][0]["ranks"] = int64_t{4294967298};
  EXPECT_TRUE(refused_with(cli::parse_suite(j.dump(), "suite").status(), "ranks = 4294967298 is out of range"));
  j = json::parse(read_source_file("bench/suites/ci.json"));
  j["cases"][0]["name"] = "..";
  EXPECT_TRUE(refused_with(cli::parse_suite(j.dump(), "suite").status(), "must not contain"));
}

TEST(ParserRegression, RegressResultsRefuseHugeRanks) {
  json j = json::parse(read_source_file("docs/regress/ci.json"));
  ASSERT_TRUE(cli::parse_results(j.dump(), "r").is_ok());
  j["cases"][0]["ranks"] = int64_t{4294967298};
  EXPECT_TRUE(refused_with(cli::parse_results(j.dump(), "r").status(), "ranks = 4294967298 is out of range"));
}

}  // namespace
}  // namespace loom
