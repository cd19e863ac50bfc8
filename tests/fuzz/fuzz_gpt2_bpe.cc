// GPT-2 byte-level BPE (exec/data/gpt2_bpe.h): its two user files and its
// encoder. The bytes are (1) text for GPT-2's own vocabulary: valid UTF-8
// without the end-of-text token must round-trip exactly and every id lie in
// the vocabulary; and (2), split at the first NUL, a vocab.json and a
// merges.txt: a file pair that loads must encode a sample into valid ids that
// decode back to it, one that does not must say why.
#include "exec/data/gpt2_bpe.h"
#include "exec/data/jsonl_reader.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;
using namespace loom::data;

namespace {

const Gpt2BpeTokenizer* gpt2() {
  static std::unique_ptr<Gpt2BpeTokenizer> tok = [] {
    const std::string dir = std::string(LOOM_SOURCE_DIR) + "/data/tokenizer/gpt2";
    auto t = Gpt2BpeTokenizer::load(dir + "/vocab.json", dir + "/merges.txt", "fuzz");
    if (!t.is_ok()) {
      std::fprintf(stderr, "fuzz_gpt2_bpe: %s\n", t.status().to_string().c_str());
      std::abort();
    }
    return std::move(t).value();
  }();
  return tok.get();
}

void check_round_trip(const Tokenizer& tok, std::string_view text) {
  auto ids = tok.encode(text);
  FUZZ_CHECK(ids.is_ok(), "encode failed on valid input");
  for (int32_t id : *ids) FUZZ_CHECK(id >= 0 && id < tok.vocab_size(), "an id outside the vocabulary");
  if (is_valid_utf8(text) && text.find("<|endoftext|>") == std::string_view::npos)
    FUZZ_CHECK(tok.decode(*ids) == text, "decode(encode(text)) != text");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  gpt2();
  if (loom::fuzz::seed_dir()) {
    loom::fuzz::write_seed("prose", "Hello world! It's 2024 -- caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac   spaces\n\n\ttabs");
    loom::fuzz::write_seed("pair", std::string("{\"a\": 0, \"b\": 1, \"ab\": 2, \"<|endoftext|>\": 3}") + '\0' +
                                       "#version: 0.2\na b\n");
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  check_round_trip(*gpt2(), bytes);

  const size_t nul = bytes.find('\0');
  if (nul == std::string_view::npos) return 0;
  const std::string dir = loom::fuzz::scratch_dir();
  loom::fuzz::write_file(dir + "/vocab.json", bytes.substr(0, nul).data(), nul);
  loom::fuzz::write_file(dir + "/merges.txt", bytes.substr(nul + 1).data(), size - nul - 1);
  auto tok = Gpt2BpeTokenizer::load(dir + "/vocab.json", dir + "/merges.txt", "fuzz");
  if (!tok.is_ok()) {
    FUZZ_CHECK(!tok.status().message().empty(), "a refused vocabulary without a reason");
    return 0;
  }
  FUZZ_CHECK((*tok)->eod_id() >= 0 && (*tok)->eod_id() < (*tok)->vocab_size(), "EOD outside the vocabulary");
  // A loaded vocabulary has every byte token, so any text encodes.
  check_round_trip(**tok, "ab ba, caf\xc3\xa9!");
  return 0;
}
