// --data specs over preprocess manifests (exec/runtime/dataset_source.h).
#include "exec/runtime/dataset_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "exec/data/indexed_dataset.h"
#include "exec/data/preprocess.h"

namespace loom::exec {
namespace {

namespace fs = std::filesystem;

// A manifest listing an empty shard (written by a `loom preprocess` with more
// --shards than documents before it dropped such shards, or by hand): its
// blend weight was 0 and the loader refused the whole manifest
// ("weight[1]=0.000000").
TEST(DatasetSource, ManifestWithAnEmptyShardTrains) {
  const fs::path dir = fs::temp_directory_path() / ("loom_dataset_source_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "in.jsonl") << "{\"text\": \"one document only, long enough for a few samples\"}\n";
  data::PreprocessOptions o;
  o.inputs = {(dir / "in.jsonl").string()};
  o.output_prefix = (dir / "out").string();
  auto st = data::preprocess(o);
  ASSERT_TRUE(st.is_ok()) << st.status().to_string();
  auto empty = data::IndexedDatasetWriter::create((dir / "empty").string(), data::TokenDtype::kUint16);
  ASSERT_TRUE(empty.is_ok());
  ASSERT_TRUE((*empty)->finalize().is_ok());
  const std::string manifest = (dir / "two.manifest.json").string();
  std::ofstream(manifest) << R"({"tokenizer": {"vocab_size": 257}, "shards": [{"bin": "out.bin", "tokens": )"
                          << st->tokens << R"(}, {"bin": "empty.bin", "tokens": 0}]})";
  DataSpecOptions d;
  d.seq_len = 8;
  d.global_batch = 2;
  d.model_vocab = 512;
  auto src = open_training_data(manifest, d);
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  std::vector<int32_t> tokens(16), targets(16);
  Status r = (*src)->read(0, 2, 8, tokens.data(), targets.data());
  EXPECT_TRUE(r.is_ok()) << r.to_string();
  // The cursor a checkpoint stores restores (and a damaged one is refused, not thrown).
  EXPECT_TRUE((*src)->restore_state(R"({"consumed_samples": 2, "per_dataset": [2]})", 2).is_ok());
  EXPECT_FALSE((*src)->restore_state(R"({"per_dataset": ["x"]})", 2).is_ok());
  // The cursor names the data it counts: restored over the same data, no
  // notice; over other data (another spec, other token counts), a notice
  // naming both, since the samples from here on are not the ones the
  // checkpoint's run would have read.
  const std::string state = (*src)->state_json();
  EXPECT_NE(state.find("\"datasets\""), std::string::npos) << state;
  auto same = open_training_data(manifest, d);
  ASSERT_TRUE(same.is_ok());
  ASSERT_TRUE((*same)->restore_state(state, 2).is_ok());
  EXPECT_EQ((*same)->resume_notice(), "");
  auto other = open_training_data((dir / "out").string(), d);
  ASSERT_TRUE(other.is_ok()) << other.status().to_string();
  ASSERT_TRUE((*other)->restore_state(R"({"consumed_samples": 2, "per_dataset": [2], "datasets": {"spec": "elsewhere",
    "parts": [{"tokens": 5, "weight": 1.0}]}})", 2).is_ok());
  EXPECT_NE((*other)->resume_notice().find("elsewhere"), std::string::npos) << (*other)->resume_notice();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace loom::exec
