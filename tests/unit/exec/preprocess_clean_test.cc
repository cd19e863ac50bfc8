// Cleaning inside `preprocess`: on a corpus with planted duplicates, near
// duplicates and junk (tests/support/planted_corpus.h) the counts are exactly
// those planted, the documents written are exactly the originals in input
// order, the manifest records the counts, and all of it is the same for any
// worker count and batch size.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "exec/data/preprocess.h"
#include "tests/support/planted_corpus.h"

namespace loom::data {
namespace {

namespace fs = std::filesystem;
using namespace loom::data::testing;  // NOLINT: the planted corpus

class PreprocessCleanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_icu()) GTEST_SKIP() << "built without ICU (normalization and near-dedup)";
    dir_ = fs::temp_directory_path() / ("loom_preprocess_clean_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    corpus_ = make_corpus();
    std::ofstream out(dir_ / "corpus.jsonl", std::ios::binary);
    for (const Doc& d : corpus_.docs) {
      json j = d.record;
      j["text"] = d.text;
      out << j.dump() << "\n";
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  PreprocessOptions opts(const std::string& out) {
    PreprocessOptions o;
    o.inputs = {(dir_ / "corpus.jsonl").string()};
    o.output_prefix = (dir_ / out).string();
    o.clean = corpus_options();
    return o;
  }
  std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  // The documents of a byte-tokenized dataset, as text (EOD dropped).
  std::vector<std::string> documents(const std::string& prefix) {
    std::vector<std::string> out;
    auto ds = IndexedDataset::open(prefix);
    EXPECT_TRUE(ds.is_ok()) << ds.status().to_string();
    if (!ds.is_ok()) return out;
    for (int64_t i = 0; i < (*ds)->sequence_count(); ++i) {
      std::vector<int32_t> t((*ds)->sequence_length(i));
      EXPECT_TRUE((*ds)->read(i, 0, static_cast<int64_t>(t.size()), t.data()).is_ok());
      std::string s;
      for (int32_t id : t)
        if (id < 256) s.push_back(static_cast<char>(id));
      out.push_back(std::move(s));
    }
    return out;
  }
  fs::path dir_;
  Planted corpus_;
};

TEST_F(PreprocessCleanTest, PlantedCountsAndTheOriginalsInInputOrder) {
  auto s = preprocess(opts("one"));
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  ASSERT_TRUE(s->cleaned);
  expect_planted_counts(s->clean, corpus_);
  EXPECT_EQ(s->documents, corpus_.unique);
  // What was written: every unique document, in input order, unchanged
  // (they are NFC already and have no control characters).
  std::vector<std::string> expected;
  for (const Doc& d : corpus_.docs)
    if (d.kind == Kind::kUnique) expected.push_back(d.text);
  EXPECT_EQ(documents((dir_ / "one").string()), expected);
  // The manifest records the same counts and the options.
  json m = json::parse(read(dir_ / "one.manifest.json"));
  ASSERT_TRUE(m.contains("cleaning"));
  EXPECT_EQ(m["cleaning"], s->clean.to_json());
  EXPECT_EQ(m["cleaning"]["options"]["normalization"], "nfc");
  EXPECT_EQ(m["documents"], corpus_.unique);
}

TEST_F(PreprocessCleanTest, SameOutputAndCountsForAnyWorkersAndBatches) {
  auto one = preprocess(opts("one"));
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  for (auto [workers, batch] : {std::pair{3, 1024}, std::pair{2, 7}, std::pair{4, 1}}) {
    auto o = opts("w" + std::to_string(workers));
    o.workers = workers;
    o.batch_lines = batch;
    auto s = preprocess(o);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    EXPECT_EQ(s->clean.to_json(), one->clean.to_json()) << workers << " workers";
    EXPECT_TRUE(read(dir_ / ("w" + std::to_string(workers) + ".bin")) == read(dir_ / "one.bin")) << workers;
    EXPECT_TRUE(read(dir_ / ("w" + std::to_string(workers) + ".idx")) == read(dir_ / "one.idx")) << workers;
  }
}

TEST_F(PreprocessCleanTest, EachStepAloneAndNothingAskedMeansNoCleaning) {
  auto o = opts("exact");
  o.clean = CleanOptions{};
  o.clean.exact_dedup = true;
  auto exact = preprocess(o);
  ASSERT_TRUE(exact.is_ok()) << exact.status().to_string();
  // Without normalization and stripping only the byte-identical copies go.
  EXPECT_EQ(exact->clean.exact_duplicates, corpus_.exact / 2);
  EXPECT_EQ(exact->clean.near_duplicates, 0);
  EXPECT_EQ(exact->clean.too_short, 0);

  o = opts("plain");
  o.clean = CleanOptions{};
  auto plain = preprocess(o);
  ASSERT_TRUE(plain.is_ok());
  EXPECT_FALSE(plain->cleaned);
  EXPECT_EQ(plain->documents, static_cast<int64_t>(corpus_.docs.size()));
  EXPECT_FALSE(json::parse(read(dir_ / "plain.manifest.json")).contains("cleaning"));
}

TEST_F(PreprocessCleanTest, BadOptionsAreRefusedBeforeReading) {
  auto o = opts("bad");
  o.clean.min_chars = 500;
  o.clean.max_chars = 100;
  auto s = preprocess(o);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  o = opts("bad");
  o.clean.field_filters = {"lang~en"};
  s = preprocess(o);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir_ / "bad.bin"));
  // Everything removed: refused, naming the cleaning.
  o = opts("none");
  o.clean = CleanOptions{};
  o.clean.min_chars = 1000000;
  s = preprocess(o);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("removed by cleaning"), std::string::npos) << s.status().message();
}

}  // namespace
}  // namespace loom::data
