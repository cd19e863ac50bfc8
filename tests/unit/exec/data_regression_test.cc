// Regression tests for what fuzzing the data and checkpoint readers found
// (tests/fuzz/, docs/fuzzing.md): preprocess manifests, the data cursor and
// training state a resume reads, checkpoint metadata.json and rank files.
// Inputs that used to throw out of the reader (std::terminate), read outside
// the checkpoint, or divide by zero are refused with a message naming the
// field. Reproducers are also kept under tests/fuzz/corpus/<harness>/.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "exec/checkpoint/checkpoint.h"
#include "exec/checkpoint/training_state.h"
#include "exec/data/jsonl_reader.h"
#include "exec/data/loader.h"
#include "exec/data/manifest.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

::testing::AssertionResult refused_with(const Status& s, const std::string& needle) {
  if (s.is_ok()) return ::testing::AssertionFailure() << "accepted; expected an error containing '" << needle << "'";
  if (s.message().find(needle) == std::string::npos)
    return ::testing::AssertionFailure() << "error '" << s.message() << "' does not contain '" << needle << "'";
  return ::testing::AssertionSuccess();
}

const char* kManifest = R"({"format": "loom-preprocess-manifest", "version": 1,
  "tokenizer": {"spec": "byte", "name": "byte", "vocab_size": 257},
  "shards": [{"bin": "out_00000.bin", "idx": "out_00000.idx", "tokens": 10, "bin_xxh64": "0011223344556677"},
             {"bin": "out_00001.bin", "idx": "out_00001.idx", "tokens": 0}]})";

// A JSONL line with a number beyond a double's range threw out of
// extract_text and ended `loom preprocess`; it is a malformed line.
TEST(DataRegression, JsonlNumberOverflowIsAMalformedLine) {
  std::string text, why;
  EXPECT_EQ(data::extract_text(R"({"text": "hello", "score": 1e400})", "text", &text, &why),
            data::LineError::kMalformedJson);
  EXPECT_NE(why.find("number overflow"), std::string::npos) << why;
  EXPECT_EQ(data::extract_text(R"({"text": "hello", "score": 1e300})", "text", &text, &why), data::LineError::kNone);
  EXPECT_EQ(text, "hello");
  // The same through the training-state reader (the reproducer fuzzing kept).
  std::ifstream in(std::string(LOOM_SOURCE_DIR) +
                   "/tests/fuzz/corpus/fuzz_ckpt_training_state/crash-number-overflow.json");
  std::string repro((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(repro.empty());
  EXPECT_EQ(ckpt::parse_training_state(repro, "ts").status().code(), StatusCode::kParseError);
}

TEST(DataRegression, ManifestParses) {
  auto m = data::parse_manifest(kManifest, "m.manifest.json");
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->vocab_size, 257);
  EXPECT_EQ(m->tokens, 10);
  ASSERT_EQ(m->shards.size(), 2u);
  EXPECT_EQ(m->shards[0].prefix, "out_00000");
  EXPECT_EQ(m->shards[0].bin_xxh64, "0011223344556677");
}

// tokenizer.vocab_size as a string threw nlohmann::type_error out of
// open_training_data (std::terminate).
TEST(DataRegression, ManifestVocabOfTheWrongTypeIsRefused) {
  json j = json::parse(kManifest);
  j["tokenizer"]["vocab_size"] = "257";
  EXPECT_TRUE(refused_with(data::parse_manifest(j.dump(), "m").status(), "tokenizer.vocab_size must be an integer"));
  j["tokenizer"] = "byte";
  EXPECT_TRUE(refused_with(data::parse_manifest(j.dump(), "m").status(), "tokenizer must be an object"));
  j["tokenizer"] = {{"vocab_size", 0}};
  EXPECT_TRUE(refused_with(data::parse_manifest(j.dump(), "m").status(), "vocab_size must be a positive integer"));
}

// Shard names were used as given: "../x.bin" or "/etc/x.bin" opened files
// outside the manifest's directory, "ab" lost its last characters to
// substr(size() - 4).
TEST(DataRegression, ManifestShardNamesStayNextToTheManifest) {
  for (const char* bad : {"../secret.bin", "a/../../b.bin", "/etc/passwd.bin", "..", "ab", "shard.idx", ".bin"}) {
    json j = json::parse(kManifest);
    j["shards"][0]["bin"] = bad;
    auto m = data::parse_manifest(j.dump(), "m");
    EXPECT_FALSE(m.is_ok()) << bad;
    if (!m.is_ok()) EXPECT_NE(m.status().message().find("shards[0].bin"), std::string::npos) << m.status().message();
  }
  json j = json::parse(kManifest);
  j["shards"][0]["bin"] = "sub/dir/shard..v2.bin";  // a sub directory and dots in a name are fine
  EXPECT_TRUE(data::parse_manifest(j.dump(), "m").is_ok());
}

// Every shard empty: the blend weights were 0/0 = NaN.
TEST(DataRegression, ManifestWithoutTokensIsRefused) {
  json j = json::parse(kManifest);
  j["shards"][0]["tokens"] = 0;
  EXPECT_TRUE(refused_with(data::parse_manifest(j.dump(), "m").status(), "every shard is empty"));
  j["shards"][0]["tokens"] = -5;
  EXPECT_TRUE(refused_with(data::parse_manifest(j.dump(), "m").status(), "tokens must be >= 0"));
  j["shards"] = json::array({"out.bin"});
  EXPECT_TRUE(refused_with(data::parse_manifest(j.dump(), "m").status(), "shards[0] must be an object"));
  EXPECT_TRUE(refused_with(data::parse_manifest("[1]", "m").status(), "not a JSON object"));
}

// per_dataset of strings threw out of LoaderSource::restore_state; counts near
// INT64_MAX overflowed the sum (UBSan).
TEST(DataRegression, DataCursorIsChecked) {
  auto c = data::parse_loader_cursor(R"({"consumed_samples": 96, "per_dataset": [60, 36]})", 0, "cursor");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->consumed_samples, 96);
  EXPECT_EQ(c->per_dataset, (std::vector<int64_t>{60, 36}));
  auto d = data::parse_loader_cursor("{}", 24, "cursor");
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->consumed_samples, 24);
  EXPECT_TRUE(refused_with(data::parse_loader_cursor(R"({"per_dataset": ["a"]})", 0, "cursor").status(),
                           "per_dataset[0] must be an integer"));
  EXPECT_TRUE(refused_with(
      data::parse_loader_cursor(R"({"consumed_samples": 1, "per_dataset": [9223372036854775807, 9223372036854775807]})",
                                0, "cursor")
          .status(),
      "per_dataset[1] = 9223372036854775807 is out of range"));
  EXPECT_TRUE(refused_with(data::parse_loader_cursor(R"({"consumed_samples": 5, "per_dataset": [1, 2]})", 0, "c").status(),
                           "per_dataset sums to 3 != consumed_samples 5"));
  EXPECT_TRUE(refused_with(data::parse_loader_cursor("[]", 0, "cursor").status(), "must be an object"));
  EXPECT_TRUE(refused_with(data::parse_loader_cursor(R"({"consumed_samples": "x"})", 0, "cursor").status(),
                           "consumed_samples must be an integer"));
}

// A training state that is not an object, or whose step is a string, threw
// out of Trainer::restore (nlohmann::json::value on the wrong type).
TEST(DataRegression, TrainingStateIsChecked) {
  auto s = ckpt::parse_training_state(
      R"({"step": 12, "adam_step": 11, "precision": "fp16", "loss_scale": 1024, "loss_scale_good_steps": 3,
          "data": {"consumed_samples": 96}})",
      "ts");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->step, 12);
  EXPECT_EQ(s->adam_step, 11);
  EXPECT_TRUE(s->has_loss_scale);
  EXPECT_EQ(s->loss_scale, 1024);
  EXPECT_EQ(json::parse(s->data_json)["consumed_samples"], 96);
  EXPECT_TRUE(refused_with(ckpt::parse_training_state("[]", "ts").status(), "not a JSON object"));
  EXPECT_TRUE(refused_with(ckpt::parse_training_state(R"({"step": "12"})", "ts").status(), "step must be an integer"));
  EXPECT_TRUE(refused_with(ckpt::parse_training_state(R"({"adam_step": 1})", "ts").status(), "has no step"));
  EXPECT_TRUE(refused_with(ckpt::parse_training_state(R"({"step": -1})", "ts").status(), "out of range"));
  EXPECT_TRUE(refused_with(ckpt::parse_training_state(R"({"step": 1e18})", "ts").status(), "out of range"));
  EXPECT_TRUE(refused_with(ckpt::parse_training_state(R"({"step": 1, "loss_scale": 0})", "ts").status(),
                           "loss_scale must be a finite number > 0"));
  EXPECT_TRUE(refused_with(ckpt::parse_training_state(R"({"step": 1, "data": 3})", "ts").status(),
                           "data must be an object"));
}

class CheckpointMetadata : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("loom_data_regression_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    ckpt::CheckpointOptions o;
    o.dir = dir_;
    o.async = false;
    auto c = ckpt::Checkpointer::create(o, 0, 1, "{}");
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    ckpt::SaveRequest r;
    r.step = 3;
    r.model.push_back({"w", {2, 2}, {0, 0}, {2, 2}, {1, 2, 3, 4}});
    r.optimizer.push_back({"exp_avg/w", {2, 2}, {0, 0}, {2, 2}, {0, 0, 0, 0}});
    r.training_state_json = R"({"step": 3})";
    ASSERT_TRUE((*c)->save(std::move(r)).is_ok());
    auto step = ckpt::resolve_checkpoint(dir_);
    ASSERT_TRUE(step.is_ok());
    step_ = *step;
    std::ifstream in(step_ + "/metadata.json");
    meta_ = json::parse(in);
    std::ofstream(dir_ + "/outside.txt") << "not part of the checkpoint";
  }
  void TearDown() override { fs::remove_all(dir_); }
  Status open_with(const json& meta) {
    std::ofstream(step_ + "/metadata.json", std::ios::trunc) << meta.dump();
    return ckpt::CheckpointReader::open(step_).status();
  }
  std::string dir_, step_;
  json meta_;
};

TEST_F(CheckpointMetadata, OpensAsWritten) { EXPECT_TRUE(open_with(meta_).is_ok()); }

// A files[] path climbing out of the step directory was opened and hashed.
TEST_F(CheckpointMetadata, FilesOutsideTheCheckpointAreRefused) {
  for (const char* bad : {"../outside.txt", "/etc/passwd", "model_weights/../../outside.txt", "", "./x"}) {
    json m = meta_;
    m["files"][0]["path"] = bad;
    EXPECT_TRUE(refused_with(open_with(m), "files[] path")) << bad;
  }
}

// world_size 0 or 4294967297 (narrowed to 1), a negative step or size.
TEST_F(CheckpointMetadata, CountsAreRangeChecked) {
  json m = meta_;
  m["world_size"] = 0;
  EXPECT_TRUE(refused_with(open_with(m), "world_size 0 is out of range"));
  m["world_size"] = int64_t{4294967297};
  EXPECT_TRUE(refused_with(open_with(m), "world_size 4294967297 is out of range"));
  m = meta_;
  m["step"] = -3;
  EXPECT_TRUE(refused_with(open_with(m), "step -3 is negative"));
  m = meta_;
  m["files"][0]["size_bytes"] = -1;
  EXPECT_TRUE(refused_with(open_with(m), "size_bytes -1 is negative"));
}

}  // namespace
}  // namespace loom
