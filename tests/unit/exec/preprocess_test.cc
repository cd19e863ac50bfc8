// preprocess: JSONL (plain/gz/zst) -> indexed dataset, read back with the
// IndexedDataset reader and checked against the tokenizer run directly.
#include "exec/data/preprocess.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "exec/data/tokenizer.h"

#if __has_include(<zlib.h>)
#include <zlib.h>
#define LOOM_TEST_HAVE_ZLIB 1
#endif
#if __has_include(<zstd.h>)
#include <zstd.h>
#define LOOM_TEST_HAVE_ZSTD 1
#endif

namespace loom::data {
namespace {

namespace fs = std::filesystem;

class PreprocessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("loom_preprocess_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // Documents with newlines, quotes, non-ASCII and one empty text.
    for (int i = 0; i < 150; ++i) {
      std::string t = "doc " + std::to_string(i) + ": \"to be\" or not\n";
      for (int r = 0; r < i % 7; ++r) t += "caf\xc3\xa9 \xe6\x97\xa5 ";
      docs_.push_back(t);
    }
    docs_[10] = "";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string jsonl_text(const std::vector<std::string>& docs) {
    std::string s;
    for (size_t i = 0; i < docs.size(); ++i) s += nlohmann::json{{"id", i}, {"text", docs[i]}}.dump() + "\n";
    return s;
  }
  std::string write(const std::string& name, const std::string& bytes) {
    std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  PreprocessOptions opts(std::vector<std::string> inputs, const std::string& out) {
    PreprocessOptions o;
    o.inputs = std::move(inputs);
    o.output_prefix = (dir_ / out).string();
    return o;
  }
  // Every sequence of dataset `prefix`, in order.
  std::vector<std::vector<int32_t>> sequences(const std::string& prefix) {
    auto ds = IndexedDataset::open(prefix);
    EXPECT_TRUE(ds.is_ok()) << ds.status().to_string();
    std::vector<std::vector<int32_t>> out;
    if (!ds.is_ok()) return out;
    EXPECT_EQ((*ds)->document_count(), (*ds)->sequence_count());
    for (int64_t i = 0; i < (*ds)->sequence_count(); ++i) {
      std::vector<int32_t> seq((*ds)->sequence_length(i));
      EXPECT_TRUE((*ds)->read(i, 0, static_cast<int64_t>(seq.size()), seq.data()).is_ok());
      out.push_back(std::move(seq));
    }
    return out;
  }
  std::vector<int32_t> expected(const Tokenizer& tok, const std::string& text, bool eod = true) {
    std::vector<int32_t> ids = tok.encode(text).value();
    if (eod) ids.push_back(tok.eod_id());
    return ids;
  }

  fs::path dir_;
  std::vector<std::string> docs_;
};

TEST_F(PreprocessTest, ByteTokensAndEodPerDocument) {
  auto s = preprocess(opts({write("in.jsonl", jsonl_text(docs_))}, "out"));
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  ByteTokenizer tok;
  auto seqs = sequences((dir_ / "out").string());
  ASSERT_EQ(seqs.size(), docs_.size());
  int64_t tokens = 0;
  for (size_t i = 0; i < docs_.size(); ++i) {
    EXPECT_EQ(seqs[i], expected(tok, docs_[i])) << "document " << i;
    EXPECT_EQ(seqs[i].back(), 256);
    tokens += static_cast<int64_t>(docs_[i].size()) + 1;
  }
  EXPECT_EQ(s->tokens, tokens);
  EXPECT_EQ(s->documents, 150);
  EXPECT_EQ(s->dtype, TokenDtype::kUint16);
  EXPECT_EQ(s->bytes_read, static_cast<int64_t>(jsonl_text(docs_).size()));
}

TEST_F(PreprocessTest, NoEodDropsEmptyDocuments) {
  auto o = opts({write("in.jsonl", jsonl_text(docs_))}, "out");
  o.append_eod = false;
  auto s = preprocess(o);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->empty_documents, 1);
  auto seqs = sequences((dir_ / "out").string());
  ASSERT_EQ(seqs.size(), docs_.size() - 1);
  ByteTokenizer tok;
  EXPECT_EQ(seqs[10], expected(tok, docs_[11], false));  // docs_[10] is empty
}

#if defined(LOOM_TEST_HAVE_ZLIB) && defined(LOOM_TEST_HAVE_ZSTD)
TEST_F(PreprocessTest, PlainGzipZstdGiveIdenticalDatasets) {
  std::string text = jsonl_text(docs_);
  write("a.jsonl", text);
  gzFile gz = gzopen((dir_ / "a.jsonl.gz").c_str(), "wb");
  ASSERT_EQ(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  gzclose(gz);
  std::string zst(ZSTD_compressBound(text.size()), '\0');
  zst.resize(ZSTD_compress(zst.data(), zst.size(), text.data(), text.size(), 3));
  write("a.jsonl.zst", zst);
  for (const char* in : {"a.jsonl", "a.jsonl.gz", "a.jsonl.zst"}) {
    auto s = preprocess(opts({(dir_ / in).string()}, std::string("out_") + in));
    ASSERT_TRUE(s.is_ok()) << in << ": " << s.status().to_string();
    EXPECT_EQ(s->bytes_read, static_cast<int64_t>(text.size())) << in;
  }
  for (const char* in : {"a.jsonl.gz", "a.jsonl.zst"}) {
    EXPECT_EQ(read((dir_ / (std::string("out_") + in + ".bin")).string()), read((dir_ / "out_a.jsonl.bin").string()));
    EXPECT_EQ(read((dir_ / (std::string("out_") + in + ".idx")).string()), read((dir_ / "out_a.jsonl.idx").string()));
  }
  // Truncated compressed input is an error, not a short dataset.
  write("cut.jsonl.zst", zst.substr(0, zst.size() / 2));
  EXPECT_FALSE(preprocess(opts({(dir_ / "cut.jsonl.zst").string()}, "cut_zst")).is_ok());
  write("cut.jsonl.gz", read((dir_ / "a.jsonl.gz").string()).substr(0, 200));
  EXPECT_FALSE(preprocess(opts({(dir_ / "cut.jsonl.gz").string()}, "cut_gz")).is_ok());
}
#endif

TEST_F(PreprocessTest, MislabelledCompressionIsRefused) {
  auto s = preprocess(opts({write("plain.jsonl.gz", jsonl_text(docs_))}, "out"));
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kParseError);
  EXPECT_NE(s.status().message().find("plain.jsonl.gz"), std::string::npos);
}

// Issue #14: --shards 5 on 2 documents wrote 3 empty shards that `loom
// execute` then refused as "weight[2]=0"; an empty corpus published a
// manifest of nothing ("weight[0]=-nan").
TEST_F(PreprocessTest, NoEmptyShardsAndNoEmptyDataset) {
  auto o = opts({write("two.jsonl", jsonl_text({"first document", "second document"}))}, "out");
  o.shards = 5;
  auto s = preprocess(o);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  ASSERT_EQ(s->shards.size(), 2u);
  EXPECT_EQ(s->empty_shards, 3);
  for (const auto& sh : s->shards) EXPECT_GT(sh.tokens, 0);
  EXPECT_TRUE(fs::exists(dir_ / "out_00001.bin"));
  EXPECT_FALSE(fs::exists(dir_ / "out_00002.bin"));
  EXPECT_FALSE(fs::exists(dir_ / "out_00004.idx"));
  auto m = nlohmann::json::parse(read((dir_ / "out.manifest.json").string()));
  EXPECT_EQ(m["shards"].size(), 2u);

  auto none = preprocess(opts({write("none.jsonl", "\n\n")}, "none"));
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("no documents"), std::string::npos) << none.status().message();
  EXPECT_FALSE(fs::exists(dir_ / "none.manifest.json"));
  EXPECT_FALSE(fs::exists(dir_ / "none.bin"));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
}

TEST_F(PreprocessTest, ShardsPartitionDocumentsRoundRobin) {
  auto o = opts({write("in.jsonl", jsonl_text(docs_))}, "out");
  o.shards = 3;
  auto s = preprocess(o);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  ASSERT_EQ(s->shards.size(), 3u);
  EXPECT_FALSE(fs::exists(dir_ / "out.bin"));
  ByteTokenizer tok;
  int64_t total = 0;
  for (int k = 0; k < 3; ++k) {
    auto seqs = sequences((dir_ / ("out_0000" + std::to_string(k))).string());
    EXPECT_EQ(static_cast<int64_t>(seqs.size()), s->shards[k].documents);
    for (size_t j = 0; j < seqs.size(); ++j) EXPECT_EQ(seqs[j], expected(tok, docs_[j * 3 + k]));
    total += static_cast<int64_t>(seqs.size());
  }
  EXPECT_EQ(total, static_cast<int64_t>(docs_.size()));
}

TEST_F(PreprocessTest, OutputIndependentOfWorkerCount) {
  fs::create_directories(dir_ / "in");
  // Written out of name order: the directory is read sorted (b before c).
  std::vector<std::string> first(docs_.begin(), docs_.begin() + 60), second(docs_.begin() + 60, docs_.end());
  write("in/c.jsonl", jsonl_text(second));
  write("in/b.jsonl", jsonl_text(first));
  write("in/ignored.txt", "not jsonl");
  std::string ref_bin, ref_idx;
  for (int workers : {1, 2, 4}) {
    auto o = opts({(dir_ / "in").string()}, "w" + std::to_string(workers));
    o.workers = workers;
    o.batch_lines = 7;  // many batches, so workers finish out of order
    o.shards = 2;
    auto s = preprocess(o);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    ASSERT_EQ(s->input_files.size(), 2u);
    EXPECT_NE(s->input_files[0].find("b.jsonl"), std::string::npos);
    std::string bin = read(s->shards[0].bin_path) + read(s->shards[1].bin_path);
    std::string idx = read(s->shards[0].idx_path) + read(s->shards[1].idx_path);
    if (workers == 1) {
      ref_bin = bin, ref_idx = idx;
    } else {
      EXPECT_EQ(bin, ref_bin) << workers << " workers";
      EXPECT_EQ(idx, ref_idx) << workers << " workers";
    }
  }
  ByteTokenizer tok;
  EXPECT_EQ(sequences((dir_ / "w4_00000").string())[1], expected(tok, docs_[2]));
}

TEST_F(PreprocessTest, ManifestChecksumsMatchFiles) {
  auto o = opts({write("in.jsonl", jsonl_text(docs_))}, "out");
  o.shards = 2;
  bool saw_final = false;
  o.progress = [&](const PreprocessProgress& p) { saw_final |= p.final; };
  auto s = preprocess(o);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_TRUE(saw_final);
  auto m = nlohmann::json::parse(read((dir_ / "out.manifest.json").string()));
  EXPECT_EQ(m["tokenizer"]["name"], "byte");
  EXPECT_EQ(m["tokenizer"]["vocab_size"], 257);
  EXPECT_EQ(m["dtype"], "uint16");
  ASSERT_EQ(m["shards"].size(), 2u);
  int64_t docs = 0;
  for (const auto& sh : m["shards"]) {
    for (const char* kind : {"bin", "idx"}) {
      std::string bytes = read((dir_ / sh[kind].get<std::string>()).string());
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH64(bytes.data(), bytes.size(), 0)));
      EXPECT_EQ(sh[std::string(kind) + "_xxh64"], hex) << sh[kind];
      EXPECT_EQ(sh[std::string(kind) + "_bytes"], bytes.size());
    }
    docs += sh["documents"].get<int64_t>();
  }
  EXPECT_EQ(docs, 150);
}

TEST_F(PreprocessTest, BadLinesNameFileAndLine) {
  std::string good = nlohmann::json{{"text", "fine"}}.dump() + "\n";
  struct Case {
    std::string bad_line, must_mention;
  } cases[] = {{"{\"text\": \"unterminated\n", "malformed JSON"},
               {"{\"body\": \"no text field\"}\n", "no field \"text\""},
               {"{\"text\": 42}\n", "not a string"},
               {"{\"text\": \"bad \xff\xfe bytes\"}\n", "UTF-8"}};
  int n = 0;
  for (const Case& c : cases) {
    std::string name = "bad" + std::to_string(n++) + ".jsonl";
    auto s = preprocess(opts({write(name, good + "\n" + c.bad_line + good)}, "out"));
    ASSERT_FALSE(s.is_ok()) << c.must_mention;
    EXPECT_EQ(s.status().code(), StatusCode::kParseError);
    EXPECT_NE(s.status().message().find(name + ":3:"), std::string::npos) << s.status().message();
    EXPECT_NE(s.status().message().find(c.must_mention), std::string::npos) << s.status().message();
    EXPECT_FALSE(fs::exists(dir_ / "out.bin"));
    EXPECT_FALSE(fs::exists(dir_ / "out.manifest.json"));
  }
}

TEST_F(PreprocessTest, SkipModeCountsBadLines) {
  std::string in = jsonl_text({"one", "two"}) + "{broken\n" + "{\"body\": 1}\n" + "{\"text\": \"\xc0\xaf\"}\n" +
                   jsonl_text({"three"});
  auto o = opts({write("in.jsonl", in)}, "out");
  o.on_error = OnError::kSkip;
  o.workers = 2;
  auto s = preprocess(o);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->lines.skipped_malformed, 1);
  EXPECT_EQ(s->lines.skipped_missing_field, 1);
  EXPECT_EQ(s->lines.skipped_invalid_utf8, 1);  // \xc0\xaf is an overlong '/'
  EXPECT_EQ(s->documents, 3);
  ByteTokenizer tok;
  EXPECT_EQ(sequences((dir_ / "out").string())[2], expected(tok, "three"));
}

TEST_F(PreprocessTest, InputErrors) {
  fs::create_directories(dir_ / "empty");
  auto empty = preprocess(opts({(dir_ / "empty").string()}, "out"));
  ASSERT_FALSE(empty.is_ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("no *.jsonl"), std::string::npos);
  EXPECT_EQ(preprocess(opts({(dir_ / "missing.jsonl").string()}, "out")).status().code(), StatusCode::kNotFound);
  auto o = opts({write("in.jsonl", jsonl_text(docs_))}, "out");
  o.shards = 0;
  EXPECT_EQ(preprocess(o).status().code(), StatusCode::kInvalidArgument);
  o.shards = 1;
  o.tokenizer = (dir_ / "none.model").string();
  EXPECT_FALSE(preprocess(o).is_ok());
}

TEST_F(PreprocessTest, SentencePieceTokensMatchTokenizer) {
  std::string model = std::string(LOOM_SOURCE_DIR) + "/data/tokenizer/shakespeare_bpe.model";
  auto tok = load_tokenizer(model);
  if (!tok.is_ok()) GTEST_SKIP() << tok.status().to_string();
  auto o = opts({write("in.jsonl", jsonl_text(docs_))}, "out");
  o.tokenizer = model;
  o.workers = 2;
  auto s = preprocess(o);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->vocab_size, (*tok)->vocab_size());
  auto seqs = sequences((dir_ / "out").string());
  ASSERT_EQ(seqs.size(), docs_.size());
  int64_t tokens = 0;
  for (size_t i = 0; i < docs_.size(); ++i) {
    EXPECT_EQ(seqs[i], expected(**tok, docs_[i])) << "document " << i;
    tokens += static_cast<int64_t>(seqs[i].size());
  }
  EXPECT_EQ(s->tokens, tokens);
  EXPECT_EQ((*tok)->decode(seqs[5]), docs_[5]);
}

}  // namespace
}  // namespace loom::data
