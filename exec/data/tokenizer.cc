#include "exec/data/tokenizer.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <unordered_map>

#include "exec/data/gpt2_bpe.h"
#include "exec/data/jsonl_reader.h"

#ifdef LOOM_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#endif

namespace loom::data {

namespace fs = std::filesystem;

Result<std::vector<int32_t>> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int32_t id : ids)
    if (id >= 0 && id < 256) out.push_back(static_cast<char>(id));
  return out;
}

#ifdef LOOM_HAVE_SENTENCEPIECE

struct SentencePieceTokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<Impl> impl, int64_t vocab, int32_t eod, std::string name)
    : impl_(std::move(impl)), vocab_size_(vocab), eod_id_(eod), name_(std::move(name)) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

Result<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::load(const std::string& model_path) {
  std::error_code ec;
  if (!fs::is_regular_file(model_path, ec))
    return not_found(model_path + ": no such SentencePiece model; train one with `loom tokenizer train` or pass --tokenizer byte");
  auto impl = std::make_unique<Impl>();
  auto st = impl->sp.Load(model_path);
  if (!st.ok())
    return parse_error(model_path + ": not a SentencePiece model (" + st.ToString() + ")");
  int32_t eos = impl->sp.eos_id();
  if (eos < 0)
    return invalid_argument(model_path + ": the model has no eos piece (trained with --eos_id=-1), so there is no EOD "
                            "token; retrain it with an eos id or pass --no-eod");
  int64_t vocab = impl->sp.GetPieceSize();
  std::string name = "sentencepiece:" + fs::path(model_path).filename().string();
  return std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer(std::move(impl), vocab, eos, name));
}

Result<std::vector<int32_t>> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  auto st = impl_->sp.Encode(text, &ids);
  if (!st.ok()) return internal_error(name_ + ": encode failed (" + st.ToString() + ")");
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<int> keep;
  keep.reserve(ids.size());
  for (int32_t id : ids)
    if (id >= 0 && id < vocab_size_ && id != eod_id_) keep.push_back(id);
  std::string out;
  if (!impl_->sp.Decode(keep, &out).ok()) return {};
  return out;
}

#else  // !LOOM_HAVE_SENTENCEPIECE

struct SentencePieceTokenizer::Impl {};
SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<Impl> impl, int64_t vocab, int32_t eod, std::string name)
    : impl_(std::move(impl)), vocab_size_(vocab), eod_id_(eod), name_(std::move(name)) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;
Result<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::load(const std::string& model_path) {
  return unsupported(model_path + ": this Loom was built without SentencePiece; install libsentencepiece-dev and rebuild");
}
Result<std::vector<int32_t>> SentencePieceTokenizer::encode(std::string_view) const {
  return unsupported("SentencePiece support not built");
}
std::string SentencePieceTokenizer::decode(std::span<const int32_t>) const { return {}; }

#endif

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::unique_ptr<Tokenizer>(new ByteTokenizer());
  if (spec.empty())
    return invalid_argument("tokenizer: empty spec; use byte, a SentencePiece .model, or a GPT-2 BPE directory "
                            "(vocab.json + merges.txt)");
  // GPT-2 BPE: "gpt2:DIR", a directory, or a file named *vocab.json whose
  // merges sit beside it (vocab.json -> merges.txt, gpt2-vocab.json ->
  // gpt2-merges.txt as Megatron names them).
  const bool gpt2_prefix = spec.starts_with("gpt2:");
  const std::string path = gpt2_prefix ? spec.substr(5) : spec;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    fs::path dir = fs::absolute(path, ec).lexically_normal();
    if (dir.filename().empty()) dir = dir.parent_path();  // "gpt2/" and "." have a name too
    const std::string dir_name = dir.filename().string();
    LOOM_ASSIGN_OR_RETURN(auto bpe, Gpt2BpeTokenizer::load((fs::path(path) / "vocab.json").string(),
                                                           (fs::path(path) / "merges.txt").string(),
                                                           "gpt2-bpe:" + dir_name));
    return std::unique_ptr<Tokenizer>(std::move(bpe));
  }
  const std::string file = fs::path(path).filename().string();
  if (file.ends_with("vocab.json")) {
    const std::string merges = file.substr(0, file.size() - 10) + "merges.txt";
    LOOM_ASSIGN_OR_RETURN(auto bpe, Gpt2BpeTokenizer::load(path, (fs::path(path).parent_path() / merges).string(),
                                                           "gpt2-bpe:" + file));
    return std::unique_ptr<Tokenizer>(std::move(bpe));
  }
  if (gpt2_prefix)
    return not_found("tokenizer: " + spec + ": " +
                     (path.empty() ? std::string("no directory given") : path + " is not a directory") +
                     "; gpt2:DIR names a directory holding vocab.json and merges.txt (e.g. gpt2:data/tokenizer/gpt2)");
  LOOM_ASSIGN_OR_RETURN(auto sp, SentencePieceTokenizer::load(spec));
  return std::unique_ptr<Tokenizer>(std::move(sp));
}

namespace {

// Extracts the text of every document of a JSONL file into `out` (one line per
// line of text; SentencePiece trains on lines).
Status append_jsonl_text(const std::string& path, const std::string& field, std::FILE* out) {
  JsonlOptions opt;
  opt.text_field = field;
  LOOM_ASSIGN_OR_RETURN(auto reader, JsonlReader::open(path, opt));
  std::string text;
  for (;;) {
    LOOM_ASSIGN_OR_RETURN(bool more, reader->next(&text));
    if (!more) return Status::ok();
    text.push_back('\n');
    if (std::fwrite(text.data(), 1, text.size(), out) != text.size())
      return io_error("tokenizer train: writing the temporary corpus failed (disk full?)");
  }
}

}  // namespace

Status train_sentencepiece(const std::vector<std::string>& input_files, const std::string& model_prefix,
                           int vocab_size, const std::string& model_type, const TrainOptions& options) {
#ifndef LOOM_HAVE_SENTENCEPIECE
  return unsupported("tokenizer train: this Loom was built without SentencePiece; install libsentencepiece-dev");
#else
  if (input_files.empty()) return invalid_argument("tokenizer train: no input files; pass --input FILE");
  if (model_type != "bpe" && model_type != "unigram")
    return invalid_argument("tokenizer train: --model-type '" + model_type + "' is unknown; use bpe or unigram");
  if (vocab_size < 300)
    return invalid_argument("tokenizer train: --vocab-size " + std::to_string(vocab_size) +
                            " is too small; byte fallback alone needs 259 pieces, use >= 300");
  if (model_prefix.empty()) return invalid_argument("tokenizer train: empty --output prefix");

  std::string plain_inputs;
  std::string tmp_path;
  std::FILE* tmp = nullptr;
  auto cleanup = [&] {
    if (tmp) std::fclose(tmp);
    tmp = nullptr;
    if (!tmp_path.empty()) std::remove(tmp_path.c_str());
  };
  for (const std::string& f : input_files) {
    std::error_code ec;
    if (!fs::is_regular_file(f, ec)) {
      cleanup();
      return not_found("tokenizer train: " + f + ": no such file");
    }
    if (is_jsonl_name(f)) {
      if (!tmp) {
        std::string pattern = (fs::temp_directory_path() / "loom_spm_corpus_XXXXXX").string();
        int fd = mkstemp(pattern.data());
        if (fd < 0) return io_error("tokenizer train: cannot create a temporary file in " +
                                    fs::temp_directory_path().string());
        tmp = fdopen(fd, "wb");
        tmp_path = pattern;
      }
      if (Status s = append_jsonl_text(f, options.text_field, tmp); !s.is_ok()) {
        cleanup();
        return s;
      }
    } else {
      // SentencePiece splits --input on commas.
      if (f.find(',') != std::string::npos) {
        cleanup();
        return invalid_argument("tokenizer train: " + f + ": SentencePiece cannot read a path with a comma; rename it");
      }
      plain_inputs += (plain_inputs.empty() ? "" : ",") + f;
    }
  }
  if (tmp) {
    std::fclose(tmp);
    tmp = nullptr;
    plain_inputs += (plain_inputs.empty() ? "" : ",") + tmp_path;
  }
  std::unordered_map<std::string, std::string> kw = {
      {"input", plain_inputs},
      {"model_prefix", model_prefix},
      {"vocab_size", std::to_string(vocab_size)},
      {"model_type", model_type},
      // Exact round trips: no NFKC, keep every space, bytes for unseen characters.
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"byte_fallback", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"input_sentence_size", std::to_string(options.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(options.threads)},
      {"hard_vocab_limit", "false"},
  };
  auto st = sentencepiece::SentencePieceTrainer::Train(kw);
  cleanup();
  if (!st.ok()) return invalid_argument("tokenizer train: SentencePiece refused: " + st.ToString());
  return Status::ok();
#endif
}

}  // namespace loom::data
