// Tokenizers: byte round trip, SentencePiece train/load/encode/decode, and the
// errors a user sees for a missing or corrupt model.
#include "exec/data/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <atomic>
#include <unistd.h>

#if __has_include(<sentencepiece_trainer.h>)
#include <sentencepiece_trainer.h>
#define LOOM_TEST_HAVE_SPM 1
#endif

namespace loom::data {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("loom_tokenizer_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

std::string read_head(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  std::string s(bytes, '\0');
  in.read(s.data(), static_cast<std::streamsize>(bytes));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

TEST(ByteTokenizer, IdsAreBytesAndEodIsPastThem) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 257);
  EXPECT_EQ(tok.eod_id(), 256);
  std::string text("A\0\xff\xc3\xa9 \n", 7);  // NUL, a byte that is not UTF-8, é
  auto ids = tok.encode(text);
  ASSERT_TRUE(ids.is_ok());
  ASSERT_EQ(ids->size(), 7u);
  EXPECT_EQ((*ids)[0], 'A');
  EXPECT_EQ((*ids)[1], 0);
  EXPECT_EQ((*ids)[2], 255);
  EXPECT_EQ((*ids)[3], 0xc3);
  std::vector<int32_t> with_eod = *ids;
  with_eod.push_back(tok.eod_id());
  EXPECT_EQ(tok.decode(with_eod), text);  // EOD decodes to nothing
}

TEST(LoadTokenizer, ByteSpecAndErrors) {
  auto byte = load_tokenizer("byte");
  ASSERT_TRUE(byte.is_ok());
  EXPECT_EQ((*byte)->name(), "byte");

  auto missing = load_tokenizer("/nonexistent/dir/model.model");
  ASSERT_FALSE(missing.is_ok());
#ifdef LOOM_TEST_HAVE_SPM
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/model.model"), std::string::npos);

  fs::path bad = temp_dir() / "corrupt.model";
  std::ofstream(bad) << "this is not a protobuf model file at all \x01\x02\x03";
  auto corrupt = load_tokenizer(bad.string());
  ASSERT_FALSE(corrupt.is_ok());
  EXPECT_EQ(corrupt.status().code(), StatusCode::kParseError);
  EXPECT_NE(corrupt.status().message().find("corrupt.model"), std::string::npos);
#endif
}

#ifdef LOOM_TEST_HAVE_SPM

// One tiny BPE model for the whole suite, trained on the first 200 KB of tiny
// Shakespeare.
class SentencePieceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(temp_dir());
    fs::path corpus = *dir_ / "corpus.txt";
    std::ofstream(corpus) << read_head(std::string(LOOM_SOURCE_DIR) + "/data/tinyshakespeare.txt", 200'000);
    std::string prefix = (*dir_ / "bpe").string();
    Status s = train_sentencepiece({corpus.string()}, prefix, 512, "bpe");
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    model_ = new std::string(prefix + ".model");
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete model_;
  }
  static fs::path* dir_;
  static std::string* model_;
};
fs::path* SentencePieceTest::dir_ = nullptr;
std::string* SentencePieceTest::model_ = nullptr;

TEST_F(SentencePieceTest, RoundTripAndEosIsEod) {
  auto tok = load_tokenizer(*model_);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->vocab_size(), 512);
  EXPECT_EQ((*tok)->eod_id(), 2);  // SentencePiece's default </s>
  EXPECT_EQ((*tok)->name(), "sentencepiece:bpe.model");
  // Double spaces, newline, characters never seen in training (byte fallback).
  const std::string text = "ROMEO:\nWhat light  through yonder window breaks? caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac";
  auto ids = (*tok)->encode(text);
  ASSERT_TRUE(ids.is_ok());
  EXPECT_LT(ids->size(), text.size());  // merges learned something
  for (int32_t id : *ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, (*tok)->vocab_size());
    EXPECT_NE(id, (*tok)->eod_id());
  }
  std::vector<int32_t> with_eod = *ids;
  with_eod.push_back((*tok)->eod_id());
  EXPECT_EQ((*tok)->decode(with_eod), text);
}

TEST_F(SentencePieceTest, ThreadSafeEncode) {
  auto tok = load_tokenizer(*model_);
  ASSERT_TRUE(tok.is_ok());
  const std::string text = "Now is the winter of our discontent";
  auto expect = (*tok)->encode(text);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        if ((*tok)->encode(text).value() != *expect) ++mismatches;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(SentencePieceTest, TrainsUnigramFromJsonl) {
  fs::path jsonl = *dir_ / "corpus.jsonl";
  {
    std::ofstream out(jsonl);
    std::istringstream lines(read_head(std::string(LOOM_SOURCE_DIR) + "/data/tinyshakespeare.txt", 100'000));
    std::string line;
    while (std::getline(lines, line)) {
      std::string esc;
      for (char c : line) {
        if (c == '"' || c == '\\') esc.push_back('\\');
        esc.push_back(c);
      }
      out << "{\"id\": 1, \"content\": \"" << esc << "\"}\n";
    }
  }
  std::string prefix = (*dir_ / "uni").string();
  TrainOptions opt;
  opt.text_field = "content";
  Status s = train_sentencepiece({jsonl.string()}, prefix, 400, "unigram", opt);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  auto tok = load_tokenizer(prefix + ".model");
  ASSERT_TRUE(tok.is_ok());
  auto ids = (*tok)->encode("To be, or not to be");
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ((*tok)->decode(*ids), "To be, or not to be");

  // The wrong text field is an error naming the file and line.
  Status bad = train_sentencepiece({jsonl.string()}, prefix + "_bad", 400, "unigram");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("corpus.jsonl:1"), std::string::npos) << bad.message();
}

TEST_F(SentencePieceTest, BadTrainArguments) {
  fs::path corpus = *dir_ / "corpus.txt";
  EXPECT_EQ(train_sentencepiece({corpus.string()}, (*dir_ / "x").string(), 512, "wordpiece").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(train_sentencepiece({corpus.string()}, (*dir_ / "x").string(), 100, "bpe").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(train_sentencepiece({(*dir_ / "nope.txt").string()}, (*dir_ / "x").string(), 512, "bpe").code(),
            StatusCode::kNotFound);
}

TEST_F(SentencePieceTest, ModelWithoutEosIsRefused) {
  std::string prefix = (*dir_ / "noeos").string();
  auto st = sentencepiece::SentencePieceTrainer::Train("--input=" + (*dir_ / "corpus.txt").string() +
                                                       " --model_prefix=" + prefix +
                                                       " --vocab_size=300 --model_type=bpe --eos_id=-1");
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto tok = load_tokenizer(prefix + ".model");
  ASSERT_FALSE(tok.is_ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tok.status().message().find("eos"), std::string::npos);
}

#endif  // LOOM_TEST_HAVE_SPM

}  // namespace
}  // namespace loom::data
