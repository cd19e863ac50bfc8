#include "exec/runtime/token_source.h"

#include "core/json_util.h"
#include "core/mix.h"

namespace loom::exec {

namespace {

class ByteText final : public TokenSource {
 public:
  ByteText(std::string path, std::string bytes, uint64_t seed)
      : path_(std::move(path)), bytes_(std::move(bytes)), seed_(seed) {}
  Status read(int64_t first, int64_t n, int64_t T, int32_t* tokens, int32_t* targets) override {
    if (int64_t(bytes_.size()) < T + 1)
      return invalid_argument("data " + path_ + ": " + std::to_string(bytes_.size()) +
                              " bytes is shorter than one sample (seq + 1 = " + std::to_string(T + 1) +
                              "); use a larger file or a shorter --seq");
    const uint64_t span = bytes_.size() - uint64_t(T) - 1;
    for (int64_t i = 0; i < n; ++i) {
      uint64_t off = span == 0 ? 0 : splitmix64(seed_ ^ splitmix64(uint64_t(first + i))) % (span + 1);
      for (int64_t t = 0; t < T; ++t) {
        tokens[i * T + t] = static_cast<unsigned char>(bytes_[off + t]);
        targets[i * T + t] = static_cast<unsigned char>(bytes_[off + t + 1]);
      }
    }
    return Status::ok();
  }
  int64_t vocab_size() const override { return 256; }
  std::string describe() const override {
    return path_ + " (" + std::to_string(bytes_.size()) + " bytes, byte-level tokens)";
  }

 private:
  std::string path_;
  std::string bytes_;
  uint64_t seed_;
};

}  // namespace

Result<std::unique_ptr<TokenSource>> open_byte_text(const std::string& path, uint64_t seed) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  if (text.empty()) return invalid_argument("data " + path + " is empty; give a text file with training data");
  return std::unique_ptr<TokenSource>(new ByteText(path, std::move(text), seed));
}

}  // namespace loom::exec
