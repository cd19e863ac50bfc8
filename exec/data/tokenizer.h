// Tokenizers for preprocessing: text -> int32 token ids.
//
//   ByteTokenizer           ids 0..255 are the UTF-8 bytes themselves, 256 is
//                           EOD; vocab_size 257. No model file, no unknown
//                           tokens, exact round trip for any byte string. EOD
//                           sits just past the byte range (not 0, not 255) so
//                           no byte of real text can ever be mistaken for it.
//   SentencePieceTokenizer  any SentencePiece .model (BPE or unigram); EOD is
//                           the model's </s> (eos) id.
//   Gpt2BpeTokenizer        GPT-2's byte-level BPE from vocab.json + merges.txt
//                           (exec/data/gpt2_bpe.h); EOD is <|endoftext|>.
//
// Thread-safety: encode/decode/accessors are const and may be called from
// several threads at once on one instance (the preprocessor does).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace loom::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of `text` (no EOD: the caller appends eod_id() per document).
  virtual Result<std::vector<int32_t>> encode(std::string_view text) const = 0;
  // Text of `ids`; EOD and ids outside [0, vocab_size) decode to nothing.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int64_t vocab_size() const = 0;  // every id is in [0, vocab_size)
  virtual int32_t eod_id() const = 0;
  // "byte", "sentencepiece:<model file name>" or "gpt2-bpe:<dir or vocab
  // file name>", recorded in manifests.
  virtual std::string name() const = 0;
};

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kEod = 256;
  static constexpr int64_t kVocabSize = 257;
  Result<std::vector<int32_t>> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return kVocabSize; }
  int32_t eod_id() const override { return kEod; }
  std::string name() const override { return "byte"; }
};

// Loads a SentencePiece model. Errors: not_found (no file), parse_error (not a
// model), invalid_argument (the model has no eos piece, so no EOD), and
// unsupported when Loom was built without libsentencepiece.
class SentencePieceTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<SentencePieceTokenizer>> load(const std::string& model_path);
  ~SentencePieceTokenizer() override;
  Result<std::vector<int32_t>> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t eod_id() const override { return eod_id_; }
  std::string name() const override { return name_; }

 private:
  struct Impl;
  explicit SentencePieceTokenizer(std::unique_ptr<Impl> impl, int64_t vocab, int32_t eod, std::string name);
  std::unique_ptr<Impl> impl_;
  int64_t vocab_size_;
  int32_t eod_id_;
  std::string name_;
};

// `spec` is "byte", a path to a SentencePiece .model file, or a GPT-2 BPE
// tokenizer: "gpt2:DIR", a directory holding vocab.json and merges.txt, or a
// file NAMEvocab.json with NAMEmerges.txt beside it.
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& spec);

// Trains a SentencePiece model and writes MODEL_PREFIX.model / .vocab.
// `input_files` are plain text (one sentence per line) or JSONL
// (.jsonl/.jsonl.gz/.jsonl.zst), whose `text_field` is first extracted to a
// temporary text file. model_type is "bpe" or "unigram". The model is trained
// for exact round trips: identity normalization, whitespace kept as is, byte
// fallback for characters outside the vocabulary, eos = </s> (the EOD).
struct TrainOptions {
  std::string text_field = "text";
  int64_t max_sentences = 2'000'000;  // sampled (shuffled) when the corpus has more lines
  int threads = 2;
};
Status train_sentencepiece(const std::vector<std::string>& input_files, const std::string& model_prefix,
                           int vocab_size, const std::string& model_type, const TrainOptions& options = {});

}  // namespace loom::data
