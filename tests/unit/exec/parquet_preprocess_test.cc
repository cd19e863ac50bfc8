// Parquet input to preprocess: the same documents as JSONL must give
// byte-identical shards, whatever the row groups, record batch size, worker
// count or text column type; bad files and rows are refused with the file,
// row and fix. Parquet files are written here with Arrow's own writer.
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "exec/data/parquet_reader.h"
#include "exec/data/preprocess.h"
#include "tests/support/planted_corpus.h"

namespace loom::data {
namespace {

namespace fs = std::filesystem;

class ParquetPreprocessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom_parquet_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (int i = 0; i < 157; ++i) {
      std::string t = "doc " + std::to_string(i) + ": \"to be\" or not\n";
      for (int r = 0; r < i % 9; ++r) t += "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80 ";
      docs_.push_back(t);
    }
    docs_[10] = "";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) { return (dir_ / name).string(); }
  std::string write_jsonl(const std::string& name, const std::vector<std::string>& docs) {
    std::ofstream out(path(name), std::ios::binary);
    for (const auto& d : docs) out << nlohmann::json{{"text", d}}.dump() << "\n";
    return path(name);
  }
  // Writes `table` as Parquet with row groups of `group_rows` rows.
  std::string write_parquet(const std::string& name, const std::shared_ptr<arrow::Table>& table, int64_t group_rows) {
    auto out = arrow::io::FileOutputStream::Open(path(name)).ValueOrDie();
    auto st = parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), out, group_rows);
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(out->Close().ok());
    return path(name);
  }
  template <typename Builder>
  std::shared_ptr<arrow::Array> strings(const std::vector<std::string>& docs, const std::vector<int>& nulls = {}) {
    Builder b;
    for (size_t i = 0; i < docs.size(); ++i) {
      if (std::find(nulls.begin(), nulls.end(), static_cast<int>(i)) != nulls.end()) EXPECT_TRUE(b.AppendNull().ok());
      else EXPECT_TRUE(b.Append(docs[i]).ok());
    }
    return b.Finish().ValueOrDie();
  }
  std::shared_ptr<arrow::Table> table(std::shared_ptr<arrow::Array> text, const std::string& name = "text") {
    arrow::Int64Builder ids;
    for (int64_t i = 0; i < text->length(); ++i) EXPECT_TRUE(ids.Append(i).ok());
    auto schema = arrow::schema({arrow::field("id", arrow::int64()), arrow::field(name, text->type())});
    return arrow::Table::Make(schema, {ids.Finish().ValueOrDie(), text});
  }
  PreprocessOptions opts(std::vector<std::string> inputs, const std::string& out) {
    PreprocessOptions o;
    o.inputs = std::move(inputs);
    o.output_prefix = path(out);
    return o;
  }
  std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  // The shard files of prefix `a` and `b` are byte-identical.
  void expect_same_shards(const std::string& a, const std::string& b, int shards) {
    for (int i = 0; i < shards; ++i)
      for (const char* ext : {".bin", ".idx"}) {
        std::string pa = shard_prefix(path(a), i, shards) + ext, pb = shard_prefix(path(b), i, shards) + ext;
        ASSERT_TRUE(fs::exists(pa) && fs::exists(pb)) << pa << " " << pb;
        EXPECT_TRUE(read(pa) == read(pb)) << pa << " differs from " << pb;
      }
  }
  fs::path dir_;
  std::vector<std::string> docs_;
};

TEST_F(ParquetPreprocessTest, SameTokensAsJsonlForAnyRowGroupsBatchesAndWorkers) {
  ASSERT_TRUE(parquet_available().is_ok()) << parquet_available().to_string();
  auto jsonl = write_jsonl("c.jsonl", docs_);
  auto j = opts({jsonl}, "j");
  j.shards = 3;
  ASSERT_TRUE(preprocess(j).is_ok());
  int k = 0;
  for (int64_t group_rows : {int64_t{1000}, int64_t{7}, int64_t{1}})
    for (int batch : {1024, 5})
      for (int workers : {1, 4}) {
        std::string name = "c" + std::to_string(k++);
        auto pq = write_parquet(name + ".parquet", table(strings<arrow::StringBuilder>(docs_)), group_rows);
        auto o = opts({pq}, name);
        o.shards = 3;
        o.batch_lines = batch;
        o.workers = workers;
        auto s = preprocess(o);
        ASSERT_TRUE(s.is_ok()) << s.status().to_string();
        EXPECT_EQ(s->documents, static_cast<int64_t>(docs_.size()));
        EXPECT_EQ(s->lines.lines, static_cast<int64_t>(docs_.size()));
        EXPECT_GT(s->input_bytes_done, 0);  // the row groups' compressed bytes: the file less its footer
        EXPECT_LE(s->input_bytes_done, s->input_bytes);
        SCOPED_TRACE("group_rows " + std::to_string(group_rows) + " batch " + std::to_string(batch) + " workers " +
                     std::to_string(workers));
        expect_same_shards("j", name, 3);
      }
}

TEST_F(ParquetPreprocessTest, TextColumnTypes) {
  auto j = opts({write_jsonl("c.jsonl", docs_)}, "j");
  ASSERT_TRUE(preprocess(j).is_ok());
  std::vector<std::pair<std::string, std::shared_ptr<arrow::Array>>> arrays = {
      {"large_string", strings<arrow::LargeStringBuilder>(docs_)},
      {"string_view", strings<arrow::StringViewBuilder>(docs_)},
      {"binary", strings<arrow::BinaryBuilder>(docs_)},
  };
  arrow::StringDictionaryBuilder dict;
  for (const auto& d : docs_) ASSERT_TRUE(dict.Append(d).ok());
  arrays.emplace_back("dictionary", dict.Finish().ValueOrDie());
  for (auto& [name, array] : arrays) {
    SCOPED_TRACE(name);
    auto o = opts({write_parquet(name + ".parquet", table(array), 50)}, name);
    auto s = preprocess(o);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    expect_same_shards("j", name, 1);
  }
}

TEST_F(ParquetPreprocessTest, TextKeyNamesTheColumn) {
  auto j = opts({write_jsonl("c.jsonl", docs_)}, "j");
  ASSERT_TRUE(preprocess(j).is_ok());
  auto o = opts({write_parquet("c.parquet", table(strings<arrow::StringBuilder>(docs_), "content"), 40)}, "p");
  auto missing = preprocess(o);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("no column \"text\""), std::string::npos) << missing.status().message();
  EXPECT_NE(missing.status().message().find("content (string)"), std::string::npos) << missing.status().message();
  EXPECT_NE(missing.status().message().find("--text-key"), std::string::npos);
  o.text_field = "content";
  ASSERT_TRUE(preprocess(o).is_ok());
  expect_same_shards("j", "p", 1);

  o.text_field = "id";  // an int64 column
  auto wrong = preprocess(o);
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("column \"id\" is int64"), std::string::npos) << wrong.status().message();
}

TEST_F(ParquetPreprocessTest, NullAndInvalidRowsFailNamingTheRowOrAreCounted) {
  auto pq = write_parquet("n.parquet", table(strings<arrow::StringBuilder>(docs_, {3, 90})), 40);
  auto fail = preprocess(opts({pq}, "f"));
  ASSERT_FALSE(fail.is_ok());
  EXPECT_EQ(fail.status().code(), StatusCode::kParseError);
  EXPECT_NE(fail.status().message().find("n.parquet: row 3: column \"text\" is null"), std::string::npos)
      << fail.status().message();
  EXPECT_NE(fail.status().message().find("--on-error skip"), std::string::npos);
  EXPECT_FALSE(fs::exists(path("f.bin")));
  EXPECT_FALSE(fs::exists(path("f.manifest.json")));

  auto o = opts({pq}, "s");
  o.on_error = OnError::kSkip;
  auto s = preprocess(o);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->lines.skipped_missing_field, 2);
  EXPECT_EQ(s->documents, static_cast<int64_t>(docs_.size()) - 2);

  std::vector<std::string> bad = docs_;
  bad[100] = std::string("ok \xff\xfe bytes");
  auto bin = write_parquet("b.parquet", table(strings<arrow::BinaryBuilder>(bad)), 40);
  auto invalid = preprocess(opts({bin}, "b"));
  ASSERT_FALSE(invalid.is_ok());
  EXPECT_NE(invalid.status().message().find("b.parquet: row 100: the text is not valid UTF-8"), std::string::npos)
      << invalid.status().message();
}

TEST_F(ParquetPreprocessTest, CorruptAndMislabelledFilesAreRefused) {
  auto pq = write_parquet("c.parquet", table(strings<arrow::StringBuilder>(docs_)), 40);
  std::string bytes = read(pq);
  // Cut off the footer: the file still starts with PAR1.
  std::ofstream(path("cut.parquet"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  auto cut = preprocess(opts({path("cut.parquet")}, "x"));
  ASSERT_FALSE(cut.is_ok());
  EXPECT_EQ(cut.status().code(), StatusCode::kParseError);
  EXPECT_NE(cut.status().message().find("cut.parquet: not a readable Parquet file"), std::string::npos)
      << cut.status().message();
  // Damage the data pages, keeping the footer: found while reading.
  std::string damaged = bytes;
  for (size_t i = 64; i < damaged.size() / 2; i += 7) damaged[i] = static_cast<char>(damaged[i] ^ 0x5a);
  std::ofstream(path("damaged.parquet"), std::ios::binary) << damaged;
  auto dmg = preprocess(opts({path("damaged.parquet")}, "y"));
  ASSERT_FALSE(dmg.is_ok());
  EXPECT_NE(dmg.status().message().find("damaged.parquet"), std::string::npos) << dmg.status().message();
  EXPECT_FALSE(fs::exists(path("y.bin")));
  // JSONL named .parquet.
  write_jsonl("fake.parquet", docs_);
  auto fake = preprocess(opts({path("fake.parquet")}, "z"));
  ASSERT_FALSE(fake.is_ok());
  EXPECT_NE(fake.status().message().find("does not start with PAR1"), std::string::npos) << fake.status().message();
}

TEST_F(ParquetPreprocessTest, DirectoriesAndGlobsMixJsonlAndParquetInNameOrder) {
  std::vector<std::string> a(docs_.begin(), docs_.begin() + 60), b(docs_.begin() + 60, docs_.end());
  fs::create_directories(dir_ / "in");
  write_jsonl("all.jsonl", docs_);
  write_jsonl("in/a.jsonl", a);
  write_parquet("in/b.parquet", table(strings<arrow::StringBuilder>(b)), 16);
  std::ofstream(path("in/notes.txt")) << "not an input";
  ASSERT_TRUE(preprocess(opts({path("all.jsonl")}, "j")).is_ok());
  auto d = preprocess(opts({path("in")}, "d"));
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->input_files.size(), 2u);
  expect_same_shards("j", "d", 1);
  auto g = preprocess(opts({path("in") + "/*.*"}, "g"));
  ASSERT_FALSE(g.is_ok());  // the glob also matches notes.txt, which is not JSON
  auto g2 = preprocess(opts({path("in") + "/[ab].*"}, "g2"));
  ASSERT_TRUE(g2.is_ok()) << g2.status().to_string();
  expect_same_shards("j", "g2", 1);
  auto none = preprocess(opts({path("in") + "/*.zzz"}, "n"));
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("matches no file"), std::string::npos);
}

// Cleaning reads its field filters from Parquet columns: the planted corpus
// as Parquet (a `lang` string column, null where the JSONL record has no
// string lang) gives the JSONL run's counts and shards.
TEST_F(ParquetPreprocessTest, CleaningWithFilterColumnsMatchesJsonl) {
  if (!have_icu()) GTEST_SKIP() << "built without ICU";
  using namespace loom::data::testing;  // NOLINT
  Planted corpus = make_corpus();
  std::vector<std::string> texts;
  arrow::StringBuilder lang;
  {
    std::ofstream out(path("c.jsonl"), std::ios::binary);
    for (const Doc& d : corpus.docs) {
      json j = d.record;
      j["text"] = d.text;
      out << j.dump() << "\n";
      texts.push_back(d.text);
      auto it = d.record.find("lang");
      if (it != d.record.end() && it->is_string()) ASSERT_TRUE(lang.Append(it->get<std::string>()).ok());
      else ASSERT_TRUE(lang.AppendNull().ok());
    }
  }
  auto schema = arrow::schema({arrow::field("text", arrow::utf8()), arrow::field("lang", arrow::utf8())});
  auto t = arrow::Table::Make(schema, {strings<arrow::StringBuilder>(texts), lang.Finish().ValueOrDie()});
  auto pq = write_parquet("c.parquet", t, 97);
  auto j = opts({path("c.jsonl")}, "j");
  j.clean = corpus_options();
  auto sj = preprocess(j);
  ASSERT_TRUE(sj.is_ok()) << sj.status().to_string();
  auto p = opts({pq}, "p");
  p.clean = corpus_options();
  p.workers = 3;
  p.batch_lines = 16;
  auto sp = preprocess(p);
  ASSERT_TRUE(sp.is_ok()) << sp.status().to_string();
  EXPECT_EQ(sp->clean.to_json(), sj->clean.to_json());
  EXPECT_EQ(sp->clean.kept, corpus.unique);
  EXPECT_EQ(sp->clean.filter_field_missing, corpus.no_lang);
  expect_same_shards("j", "p", 1);
  // A filter on a column the file lacks is an error naming the columns.
  p.clean.field_filters = {"quality>=0.5"};
  auto missing = preprocess(p);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("no column \"quality\""), std::string::npos) << missing.status().message();
}

}  // namespace
}  // namespace loom::data
