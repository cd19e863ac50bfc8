// GPT-2's byte-level BPE tokenizer, byte-exact with Hugging Face `tokenizers`
// (GPT2TokenizerFast) and OpenAI's encoder.py on the same vocab.json/merges.txt.
//
//   text --split on the literal "<|endoftext|>" (its id, as HF does)--> segments
//        --GPT-2 regex, by hand over code points--> pre-tokens
//        --bytes, each a vocabulary symbol--> BPE merges, lowest rank first --> ids
//
// The regex classes (\p{L}, \p{N}, \s) come from a table generated from the
// reference engine itself (gpt2_unicode_classes.inc), so every code point is
// classified as HF classifies it, whatever Unicode library the machine has.
// Bytes that are not valid UTF-8 (the preprocessor rejects them earlier) are
// not an error: each one is a code point of the "other" class, encodes as its
// byte token and decodes back to itself.
//
// Thread-safety: encode/decode are const and may run on several threads at
// once; the cache of encoded pre-tokens is sharded and locked inside.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "exec/data/tokenizer.h"

namespace loom::data {

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  static constexpr std::string_view kEndOfText = "<|endoftext|>";

  // Loads a Hugging Face/OpenAI vocab.json (token -> id) and merges.txt (one
  // "a b" merge per line, rank = order, an optional "#version" first line).
  // Errors: not_found (a file is missing), parse_error (malformed JSON or merge
  // line, a merge of tokens the vocabulary lacks), invalid_argument (duplicate
  // ids, a byte symbol or "<|endoftext|>" missing), each naming file[:line].
  static Result<std::unique_ptr<Gpt2BpeTokenizer>> load(const std::string& vocab_path, const std::string& merges_path,
                                                        const std::string& name);
  ~Gpt2BpeTokenizer() override;

  // A literal "<|endoftext|>" in `text` encodes as eod_id(), as HF does for GPT-2.
  Result<std::vector<int32_t>> encode(std::string_view text) const override;
  // The bytes of the tokens, not converted to valid UTF-8 (a slice that cuts a
  // character keeps its raw bytes; HF would show U+FFFD). EOD decodes to nothing.
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override;
  int32_t eod_id() const override;
  std::string name() const override;  // "gpt2-bpe:<dir or vocab file name>"

 private:
  struct Impl;
  explicit Gpt2BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// GPT-2's pre-tokenizer alone: the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// applied left to right; the pieces concatenate back to `text`.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace loom::data
