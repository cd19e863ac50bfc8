// GPT-2 byte-level BPE: byte-exact with Hugging Face tokenizers on
// tests/data/gpt2_bpe_reference.jsonl (made by tests/data/make_gpt2_reference.py
// from data/tokenizer/gpt2/), round trips, concurrent encoding, the errors of
// malformed vocab.json/merges.txt, and the load_tokenizer specs.
#include "exec/data/gpt2_bpe.h"
#include "exec/data/indexed_dataset.h"
#include "exec/data/preprocess.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace loom::data {
namespace {

namespace fs = std::filesystem;

const std::string kGpt2Dir = std::string(LOOM_SOURCE_DIR) + "/data/tokenizer/gpt2";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

fs::path temp_root() { return fs::temp_directory_path() / ("loom_gpt2_bpe_test_" + std::to_string(::getpid())); }

struct RemoveTempRoot {
  ~RemoveTempRoot() {
    std::error_code ec;
    fs::remove_all(temp_root(), ec);
  }
} remove_temp_root_at_exit;

fs::path temp_dir(const std::string& name) {
  fs::path d = temp_root() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

const Gpt2BpeTokenizer& gpt2() {
  static const std::unique_ptr<Gpt2BpeTokenizer> tok = [] {
    auto t = Gpt2BpeTokenizer::load(kGpt2Dir + "/vocab.json", kGpt2Dir + "/merges.txt", "gpt2-bpe:gpt2");
    if (!t.is_ok()) ADD_FAILURE() << t.status().to_string();
    return t.is_ok() ? std::move(t).value() : nullptr;
  }();
  return *tok;
}

std::string without_eot(std::string s) {
  for (size_t p; (p = s.find(Gpt2BpeTokenizer::kEndOfText)) != std::string::npos;)
    s.erase(p, Gpt2BpeTokenizer::kEndOfText.size());
  return s;
}

TEST(Gpt2Bpe, Gpt2Files) {
  const auto& tok = gpt2();
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.eod_id(), 50256);
  auto ids = tok.encode("Hello world");
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{15496, 995}));
}

// Every case the reference produced, ids equal and decode(encode(x)) == x (a
// literal <|endoftext|> became the EOD id, which decodes to nothing).
TEST(Gpt2Bpe, MatchesHuggingFaceReference) {
  const auto& tok = gpt2();
  std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/tests/data/gpt2_bpe_reference.jsonl");
  ASSERT_TRUE(in) << "tests/data/gpt2_bpe_reference.jsonl missing";
  std::string line;
  int cases = 0, with_eot = 0;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    auto j = nlohmann::json::parse(line);
    const std::string text = j.at("text").get<std::string>();
    const std::vector<int32_t> want = j.at("ids").get<std::vector<int32_t>>();
    auto got = tok.encode(text);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(*got, want) << "reference line " << line_no << ": " << nlohmann::json(text).dump();
    EXPECT_EQ(tok.decode(*got), without_eot(text)) << "reference line " << line_no;
    with_eot += text.find(Gpt2BpeTokenizer::kEndOfText) != std::string::npos;
    ++cases;
  }
  EXPECT_GE(cases, 400);
  EXPECT_GE(with_eot, 10);
}

TEST(Gpt2Bpe, PreTokenizer) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(gpt2_pretokenize(""), V{});
  EXPECT_EQ(gpt2_pretokenize("a   b"), (V{"a", "  ", " b"}));  // \s+(?!\S) leaves one space for " b"
  EXPECT_EQ(gpt2_pretokenize("end  \n"), (V{"end", "  \n"}));  // a run that ends the text is whole
  EXPECT_EQ(gpt2_pretokenize("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(gpt2_pretokenize("it's IT'S"), (V{"it", "'s", " IT", "'", "S"}));  // contractions are lowercase only
  EXPECT_EQ(gpt2_pretokenize("we'll've"), (V{"we", "'ll", "'ve"}));
  EXPECT_EQ(gpt2_pretokenize("!'s  12ab"), (V{"!'", "s", " ", " 12", "ab"}));
  EXPECT_EQ(gpt2_pretokenize("x\u00a0 y"), (V{"x", "\u00a0", " y"}));  // NBSP is \s
  EXPECT_EQ(gpt2_pretokenize("a\x1c\x1f b"), (V{"a", "\x1c\x1f", " b"}));  // \x1c-\x1f are not \s
  EXPECT_EQ(gpt2_pretokenize("caf\u00e9 \u4e2d\u6587"), (V{"caf\u00e9", " \u4e2d\u6587"}));
  EXPECT_EQ(gpt2_pretokenize("\u0661\u0662 \u00bd"), (V{"\u0661\u0662", " \u00bd"}));  // \p{N}: Nd and No
}

// Bytes that are not UTF-8 never reach encode through the preprocessor, but
// encode must still be defined: each is an "other" character, its byte token.
TEST(Gpt2Bpe, InvalidUtf8IsBytesAndRoundTrips) {
  const auto& tok = gpt2();
  for (std::string text : {std::string("\xff"), std::string("a\xc3"), std::string("\xe4\xb8 x"),
                           std::string("\xed\xa0\x80"), std::string("\xc0\xaf"), std::string("ok \x80\x80 ok"),
                           std::string("\xf4\x90\x80\x80")}) {
    auto ids = tok.encode(text);
    ASSERT_TRUE(ids.is_ok());
    EXPECT_EQ(tok.decode(*ids), text);
  }
  // Byte 0xFF's symbol is "\u00ff", id 187 in GPT-2's vocabulary.
  EXPECT_EQ(tok.encode("\xff").value(), (std::vector<int32_t>{187}));
  EXPECT_EQ(tok.encode("a\xff\xff").value(), (std::vector<int32_t>{64, 187, 187}));
  EXPECT_EQ(gpt2_pretokenize("a\xff\xfe b"), (std::vector<std::string_view>{"a", "\xff\xfe", " b"}));
}

TEST(Gpt2Bpe, RoundTripsShakespeareAndDecodesEodToNothing) {
  const auto& tok = gpt2();
  const std::string text = slurp(std::string(LOOM_SOURCE_DIR) + "/data/tinyshakespeare.txt");
  ASSERT_GT(text.size(), 1'000'000u);
  auto ids = tok.encode(text);
  ASSERT_TRUE(ids.is_ok());
  EXPECT_LT(ids->size(), text.size() / 3);
  EXPECT_EQ(tok.decode(*ids), text);
  std::vector<int32_t> noisy = {tok.eod_id(), -1, 15496, 50257, 1 << 30, tok.eod_id()};
  EXPECT_EQ(tok.decode(noisy), "Hello");
}

TEST(Gpt2Bpe, ConcurrentEncodesAgree) {
  // A fresh instance, so the threads fill its cache together.
  auto fresh = Gpt2BpeTokenizer::load(kGpt2Dir + "/vocab.json", kGpt2Dir + "/merges.txt", "gpt2-bpe:gpt2");
  ASSERT_TRUE(fresh.is_ok());
  const std::string text = slurp(std::string(LOOM_SOURCE_DIR) + "/data/tinyshakespeare.txt");
  std::vector<std::string> docs;
  for (size_t pos = 0; pos < text.size(); pos += 20'000)
    docs.push_back(text.substr(pos, 20'000) + " caf\u00e9 \U0001f600");
  std::vector<std::vector<int32_t>> want;
  for (const auto& d : docs) want.push_back(*gpt2().encode(d));
  constexpr int kThreads = 6;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 2; ++round)
        for (size_t k = 0; k < docs.size(); ++k) {
          const size_t i = (k + static_cast<size_t>(t) * 7) % docs.size();  // different orders per thread
          auto ids = (*fresh)->encode(docs[i]);
          if (!ids.is_ok() || *ids != want[i]) ++mismatches[t];
        }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

// ---- A tiny vocabulary written by the test: the 256 byte symbols of GPT-2's
// vocab.json (ids 0..255 there too) plus a few merges. ----

nlohmann::json byte_vocab() {
  nlohmann::json full = nlohmann::json::parse(slurp(kGpt2Dir + "/vocab.json"));
  nlohmann::json v = nlohmann::json::object();
  for (auto it = full.begin(); it != full.end(); ++it)
    if (it.value().get<int>() < 256) v[it.key()] = it.value();
  return v;
}

struct TinyFiles {
  nlohmann::json vocab = byte_vocab();
  std::string merges = "#version: 0.2\n\xc4\xa0 t\nh e\n\xc4\xa0t he\na a\n";  // "Ġ t", "h e", "Ġt he", "a a"
  TinyFiles() {
    vocab["\xc4\xa0t"] = 256;
    vocab["he"] = 257;
    vocab["\xc4\xa0the"] = 258;
    vocab["aa"] = 259;
    vocab["<|endoftext|>"] = 260;
  }
  Result<std::unique_ptr<Gpt2BpeTokenizer>> load(const std::string& name) const {
    fs::path d = temp_dir(name);
    write(d / "vocab.json", vocab.dump());
    write(d / "merges.txt", merges);
    return Gpt2BpeTokenizer::load((d / "vocab.json").string(), (d / "merges.txt").string(), "gpt2-bpe:" + name);
  }
};

TEST(Gpt2Bpe, TinyVocabularyMergesByRank) {
  auto tok = TinyFiles().load("tiny");
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->vocab_size(), 261);
  EXPECT_EQ((*tok)->eod_id(), 260);
  EXPECT_EQ((*tok)->encode(" the").value(), (std::vector<int32_t>{258}));
  EXPECT_EQ((*tok)->encode("the").value(), (std::vector<int32_t>{83, 257}));  // 't' is id 83
  EXPECT_EQ((*tok)->encode("aaa").value(), (std::vector<int32_t>{259, 64}));  // leftmost pair first
  EXPECT_EQ((*tok)->encode("a<|endoftext|>a").value(), (std::vector<int32_t>{64, 260, 64}));
  EXPECT_EQ((*tok)->decode(std::vector<int32_t>{258, 260, 259}), " theaa");
}

void expect_error(const Result<std::unique_ptr<Gpt2BpeTokenizer>>& r, StatusCode code,
                  const std::vector<std::string>& parts) {
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  for (const auto& p : parts)
    EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().to_string() << " lacks " << p;
}

TEST(Gpt2Bpe, MissingFilesAreNotFound) {
  fs::path d = temp_dir("missing");
  expect_error(Gpt2BpeTokenizer::load((d / "vocab.json").string(), (d / "merges.txt").string(), "x"),
               StatusCode::kNotFound, {(d / "vocab.json").string(), "no such file"});
  write(d / "vocab.json", "{}");
  expect_error(Gpt2BpeTokenizer::load((d / "vocab.json").string(), (d / "merges.txt").string(), "x"),
               StatusCode::kNotFound, {(d / "merges.txt").string()});
}

TEST(Gpt2Bpe, MalformedVocabularies) {
  {
    TinyFiles f;
    fs::path d = temp_dir("badjson");
    write(d / "vocab.json", "{\n\"a\": 1,\n\"b\": }\n");
    write(d / "merges.txt", "");
    expect_error(Gpt2BpeTokenizer::load((d / "vocab.json").string(), (d / "merges.txt").string(), "x"),
                 StatusCode::kParseError, {"vocab.json:3:", "not valid JSON"});
    // A number beyond a double's range is no syntax error to the parser
    // (out_of_range.406): found by fuzzing, it ended the process.
    write(d / "vocab.json", "{\"a\": 9999999e9999}");
    expect_error(Gpt2BpeTokenizer::load((d / "vocab.json").string(), (d / "merges.txt").string(), "x"),
                 StatusCode::kParseError, {"vocab.json", "not valid JSON"});
    write(d / "vocab.json", "[1, 2]");
    expect_error(Gpt2BpeTokenizer::load((d / "vocab.json").string(), (d / "merges.txt").string(), "x"),
                 StatusCode::kParseError, {"not a JSON object"});
  }
  {
    TinyFiles f;
    f.vocab["bad"] = "seven";
    expect_error(f.load("badid"), StatusCode::kParseError, {"\"bad\"", "ids must be integers"});
  }
  {
    TinyFiles f;
    f.vocab["dup"] = 257;
    expect_error(f.load("dupid"), StatusCode::kInvalidArgument, {"both have id 257"});
  }
  {
    TinyFiles f;
    f.vocab.erase("<|endoftext|>");
    expect_error(f.load("noeot"), StatusCode::kInvalidArgument, {"<|endoftext|>", "50256"});
  }
  {
    TinyFiles f;
    f.vocab.erase("\xc4\x80");  // byte 0x00's symbol, U+0100
    expect_error(f.load("nobyte"), StatusCode::kInvalidArgument, {"no token for byte 0x00"});
  }
}

TEST(Gpt2Bpe, MalformedMerges) {
  struct Case {
    std::string merges, line, message;
  };
  const std::vector<Case> cases = {
      {"#version: 0.2\nh e\nhe\n", "merges.txt:3:", "expected two tokens"},
      {"h e x\n", "merges.txt:1:", "expected two tokens"},
      {"h e\n\na a\n", "merges.txt:2:", "remove blank"},
      {"h  e\n", "merges.txt:1:", "expected two tokens"},
      {"h e\nq \xe2\x82\xac\n", "merges.txt:2:", "is not in vocab.json"},  // "€" is not a token
      {"h e\nt h\n", "merges.txt:2:", "token \"th\" is not in vocab.json"},  // the merged token is missing
      {"h e\na a\nh e\n", "merges.txt:3:", "repeats line 1"},
  };
  for (const auto& c : cases) {
    TinyFiles f;
    f.merges = c.merges;
    expect_error(f.load("merges"), StatusCode::kParseError, {c.line, c.message});
  }
  TinyFiles crlf;
  crlf.merges = "#version: 0.2\r\nh e\r\n";  // CRLF line ends are fine, as in HF
  EXPECT_TRUE(crlf.load("crlf").is_ok());
}

TEST(Gpt2Bpe, LoadTokenizerSpecs) {
  for (const std::string& spec : {kGpt2Dir, kGpt2Dir + "/", "gpt2:" + kGpt2Dir}) {
    auto tok = load_tokenizer(spec);
    ASSERT_TRUE(tok.is_ok()) << spec << ": " << tok.status().to_string();
    EXPECT_EQ((*tok)->name(), "gpt2-bpe:gpt2") << spec;
    EXPECT_EQ((*tok)->eod_id(), 50256);
  }
  {  // a relative directory, even ".", is named after the directory itself
    const fs::path cwd = fs::current_path();
    fs::current_path(kGpt2Dir);
    auto dot = load_tokenizer(".");
    fs::current_path(cwd);
    ASSERT_TRUE(dot.is_ok()) << dot.status().to_string();
    EXPECT_EQ((*dot)->name(), "gpt2-bpe:gpt2");
  }
  auto by_file = load_tokenizer(kGpt2Dir + "/vocab.json");
  ASSERT_TRUE(by_file.is_ok()) << by_file.status().to_string();
  EXPECT_EQ((*by_file)->name(), "gpt2-bpe:vocab.json");
  EXPECT_EQ((*by_file)->encode("Hello world").value(), (std::vector<int32_t>{15496, 995}));

  // Megatron's names: gpt2-vocab.json pairs with gpt2-merges.txt.
  TinyFiles f;
  fs::path d = temp_dir("megatron");
  write(d / "gpt2-vocab.json", f.vocab.dump());
  write(d / "gpt2-merges.txt", f.merges);
  auto megatron = load_tokenizer((d / "gpt2-vocab.json").string());
  ASSERT_TRUE(megatron.is_ok()) << megatron.status().to_string();
  EXPECT_EQ((*megatron)->name(), "gpt2-bpe:gpt2-vocab.json");
  EXPECT_EQ((*megatron)->vocab_size(), 261);

  auto empty_dir = load_tokenizer(temp_dir("empty").string());
  ASSERT_FALSE(empty_dir.is_ok());
  EXPECT_EQ(empty_dir.status().code(), StatusCode::kNotFound);
  EXPECT_NE(empty_dir.status().message().find("vocab.json: no such file"), std::string::npos);
  auto no_dir = load_tokenizer("gpt2:/nonexistent/gpt2");
  ASSERT_FALSE(no_dir.is_ok());
  EXPECT_EQ(no_dir.status().code(), StatusCode::kNotFound);
  EXPECT_NE(no_dir.status().message().find("is not a directory"), std::string::npos) << no_dir.status().to_string();
  auto no_file = load_tokenizer("/nonexistent/gpt2-vocab.json");
  ASSERT_FALSE(no_file.is_ok());
  EXPECT_EQ(no_file.status().code(), StatusCode::kNotFound);

  auto byte = load_tokenizer("byte");  // the other specs are unchanged
  ASSERT_TRUE(byte.is_ok());
  EXPECT_EQ((*byte)->name(), "byte");
}

// `loom preprocess --tokenizer gpt2:DIR`: documents as encode() gives them,
// EOD appended, uint16 tokens (vocabulary 50257), the same with 3 workers.
TEST(Gpt2Bpe, PreprocessWithGpt2Spec) {
  fs::path d = temp_dir("preprocess");
  std::vector<std::string> docs = {"Hello world", "It's 2024.\n\nNew paragraph  ", "caf\u00e9 \U0001f600",
                                   "a<|endoftext|>b"};
  for (int i = 0; i < 200; ++i) docs.push_back("document " + std::to_string(i) + " of the test corpus");
  std::string jsonl;
  for (const auto& t : docs) jsonl += nlohmann::json{{"text", t}}.dump() + "\n";
  write(d / "in.jsonl", jsonl);
  for (int workers : {1, 3}) {
    PreprocessOptions o;
    o.inputs = {(d / "in.jsonl").string()};
    o.output_prefix = (d / ("out" + std::to_string(workers))).string();
    o.tokenizer = "gpt2:" + kGpt2Dir;
    o.workers = workers;
    auto s = preprocess(o);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    EXPECT_EQ(s->dtype, TokenDtype::kUint16);
    EXPECT_EQ(s->tokenizer_name, "gpt2-bpe:gpt2");
    auto ds = IndexedDataset::open(o.output_prefix);
    ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
    ASSERT_EQ((*ds)->sequence_count(), static_cast<int64_t>(docs.size()));
    for (size_t i = 0; i < docs.size(); ++i) {
      std::vector<int32_t> want = gpt2().encode(docs[i]).value();
      want.push_back(50256);
      std::vector<int32_t> got(static_cast<size_t>((*ds)->sequence_length(static_cast<int64_t>(i))));
      ASSERT_TRUE((*ds)->read(static_cast<int64_t>(i), 0, static_cast<int64_t>(got.size()), got.data()).is_ok());
      EXPECT_EQ(got, want) << "document " << i << ", workers " << workers;
    }
  }
  EXPECT_EQ(gpt2().encode(docs[3]).value(), (std::vector<int32_t>{64, 50256, 65}));
}

}  // namespace
}  // namespace loom::data
