#include "exec/data/jsonl_reader.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#ifdef LOOM_HAVE_ZLIB
#include <zlib.h>
#endif
#ifdef LOOM_HAVE_ZSTD
#include <zstd.h>
#endif

namespace loom::data {

namespace {

constexpr size_t kChunkBytes = 1 << 20;  // decompressed bytes per refill

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class PlainReader : public LineReader {
 public:
  PlainReader(std::string path, std::FILE* f) : LineReader(std::move(path), Compression::kNone), f_(f) {}
  ~PlainReader() override { std::fclose(f_); }

 protected:
  Result<size_t> read_some(char* buf, size_t cap) override {
    size_t n = std::fread(buf, 1, cap, f_);
    if (n == 0 && std::ferror(f_)) return io_error(path() + ": read failed: " + std::strerror(errno));
    read_ += static_cast<int64_t>(n);
    return n;
  }
  int64_t file_bytes_read() const override { return read_; }

 private:
  std::FILE* f_;
  int64_t read_ = 0;
};

#ifdef LOOM_HAVE_ZLIB
class GzipReader : public LineReader {
 public:
  GzipReader(std::string path, gzFile f) : LineReader(std::move(path), Compression::kGzip), f_(f) {}
  ~GzipReader() override { gzclose(f_); }

 protected:
  Result<size_t> read_some(char* buf, size_t cap) override {
    int n = gzread(f_, buf, static_cast<unsigned>(cap));
    int err = Z_OK;
    const char* msg = gzerror(f_, &err);
    // zlib reports a truncated stream as Z_BUF_ERROR once the data runs out.
    if (n < 0 || (err != Z_OK && err != Z_STREAM_END))
      return parse_error(path() + ": gzip stream is corrupt or truncated (" + msg + ")");
    return static_cast<size_t>(n);
  }
  int64_t file_bytes_read() const override { return static_cast<int64_t>(gzoffset(f_)); }

 private:
  gzFile f_;
};
#endif

#ifdef LOOM_HAVE_ZSTD
class ZstdReader : public LineReader {
 public:
  ZstdReader(std::string path, std::FILE* f)
      : LineReader(std::move(path), Compression::kZstd), f_(f), dctx_(ZSTD_createDCtx()), in_(ZSTD_DStreamInSize()) {}
  ~ZstdReader() override {
    ZSTD_freeDCtx(dctx_);
    std::fclose(f_);
  }

 protected:
  Result<size_t> read_some(char* buf, size_t cap) override {
    ZSTD_outBuffer out{buf, cap, 0};
    while (out.pos == 0) {
      if (in_pos_ == in_size_) {
        in_size_ = std::fread(in_.data(), 1, in_.size(), f_);
        in_pos_ = 0;
        read_ += static_cast<int64_t>(in_size_);
        if (in_size_ == 0) {
          if (std::ferror(f_)) return io_error(path() + ": read failed: " + std::strerror(errno));
          // A frame still open at end of file means the file was cut short.
          if (frame_open_) return parse_error(path() + ": zstd stream is truncated (file ends inside a frame)");
          return size_t{0};
        }
      }
      ZSTD_inBuffer in{in_.data(), in_size_, in_pos_};
      size_t ret = ZSTD_decompressStream(dctx_, &out, &in);
      in_pos_ = in.pos;
      if (ZSTD_isError(ret)) return parse_error(path() + ": zstd stream is corrupt (" + ZSTD_getErrorName(ret) + ")");
      frame_open_ = ret != 0;
    }
    return out.pos;
  }
  int64_t file_bytes_read() const override { return read_; }

 private:
  std::FILE* f_;
  int64_t read_ = 0;
  ZSTD_DCtx* dctx_;
  std::vector<char> in_;
  size_t in_size_ = 0, in_pos_ = 0;
  bool frame_open_ = false;
};
#endif

// Reads a UTF-8 code point starting at s[i]; returns its length or 0 if ill-formed.
size_t utf8_len(const unsigned char* s, size_t n, size_t i) {
  unsigned char c = s[i];
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
  else return 0;
  if (i + len > n) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((s[i + k] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i + k] & 0x3F);
  }
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;  // overlong, range, surrogate
  return len;
}

}  // namespace

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::kNone: return "none";
    case Compression::kGzip: return "gzip";
    case Compression::kZstd: return "zstd";
  }
  return "?";
}

Result<OnError> parse_on_error(const std::string& text) {
  if (text == "fail") return OnError::kFail;
  if (text == "skip") return OnError::kSkip;
  return invalid_argument("--on-error '" + text + "' is unknown; use fail or skip");
}

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    size_t len = utf8_len(p, s.size(), i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

bool is_blank_line(std::string_view line) {
  for (char c : line)
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
  return true;
}

bool is_jsonl_name(const std::string& path) {
  return ends_with(path, ".jsonl") || ends_with(path, ".jsonl.gz") || ends_with(path, ".jsonl.zst");
}

LineError extract_text(std::string_view line, const std::string& field, std::string* text, std::string* why,
                       nlohmann::json* record) {
  if (!is_valid_utf8(line)) {
    const auto* p = reinterpret_cast<const unsigned char*>(line.data());
    size_t i = 0;
    while (i < line.size() && utf8_len(p, line.size(), i) != 0) i += utf8_len(p, line.size(), i);
    *why = "line is not valid UTF-8 (bad byte 0x" + [&] {
      char hex[3];
      std::snprintf(hex, sizeof hex, "%02x", p[i]);
      return std::string(hex);
    }() + " at byte " + std::to_string(i + 1) + "); re-encode the file as UTF-8";
    return LineError::kInvalidUtf8;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line.begin(), line.end());
  } catch (const nlohmann::json::parse_error& e) {
    *why = std::string("malformed JSON: ") + e.what();
    return LineError::kMalformedJson;
  } catch (const nlohmann::json::exception& e) {
    // A number beyond a double's range ("1e400"): found by fuzzing, it ended
    // `loom preprocess` instead of being a bad line.
    *why = std::string("malformed JSON: ") + e.what();
    return LineError::kMalformedJson;
  }
  if (!j.is_object()) {
    *why = std::string("malformed JSONL: the line is a JSON ") + j.type_name() + ", not an object";
    return LineError::kMalformedJson;
  }
  auto it = j.find(field);
  if (it == j.end()) {
    std::string keys;
    for (auto& [k, v] : j.items()) keys += (keys.empty() ? "" : ", ") + k;
    *why = "no field \"" + field + "\" (fields: " + (keys.empty() ? "none" : keys) + "); pick one with --text-field";
    return LineError::kMissingField;
  }
  if (!it->is_string()) {
    *why = "field \"" + field + "\" is a " + it->type_name() + ", not a string";
    return LineError::kMissingField;
  }
  *text = it->get_ref<const std::string&>();
  if (record) *record = std::move(j);
  return LineError::kNone;
}

Result<std::unique_ptr<LineReader>> LineReader::open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return not_found(path + ": cannot open (" + std::strerror(errno) + ")");
  unsigned char magic[4] = {0, 0, 0, 0};
  size_t got = std::fread(magic, 1, 4, f);
  std::rewind(f);
  Compression c = Compression::kNone;
  if (got >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) c = Compression::kGzip;
  else if (got == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd)
    c = Compression::kZstd;
  // The name promises a compression the bytes do not have (an empty file is
  // allowed: it has no lines under any compression).
  if (got > 0 && ((ends_with(path, ".gz") && c != Compression::kGzip) ||
                  (ends_with(path, ".zst") && c != Compression::kZstd))) {
    std::fclose(f);
    return parse_error(path + ": the name ends in " + path.substr(path.rfind('.')) +
                       " but the file does not start with that format's magic bytes; rename or recompress it");
  }
  switch (c) {
    case Compression::kNone: return std::unique_ptr<LineReader>(new PlainReader(path, f));
    case Compression::kGzip: {
#ifdef LOOM_HAVE_ZLIB
      std::fclose(f);
      gzFile gz = gzopen(path.c_str(), "rb");
      if (!gz) return io_error(path + ": gzopen failed");
      gzbuffer(gz, 256 * 1024);
      return std::unique_ptr<LineReader>(new GzipReader(path, gz));
#else
      std::fclose(f);
      return unsupported(path + ": gzip input needs zlib; rebuild Loom with zlib1g-dev installed");
#endif
    }
    case Compression::kZstd: {
#ifdef LOOM_HAVE_ZSTD
      return std::unique_ptr<LineReader>(new ZstdReader(path, f));
#else
      std::fclose(f);
      return unsupported(path + ": zstd input needs libzstd; rebuild Loom with libzstd-dev installed");
#endif
    }
  }
  std::fclose(f);
  return internal_error("unreachable compression");
}

Result<bool> LineReader::next_line(std::string* line) {
  size_t scan = pos_;
  for (;;) {
    const char* base = buf_.data();
    const void* nl = scan < buf_.size() ? std::memchr(base + scan, '\n', buf_.size() - scan) : nullptr;
    if (nl) {
      size_t end = static_cast<const char*>(nl) - base;
      size_t len = end - pos_;
      bytes_out_ += static_cast<int64_t>(len + 1);
      if (len > 0 && base[end - 1] == '\r') --len;
      line->assign(base + pos_, len);
      pos_ = end + 1;
      ++line_no_;
      return true;
    }
    if (eof_) {
      if (pos_ == buf_.size()) return false;
      line->assign(buf_.data() + pos_, buf_.size() - pos_);  // last line without '\n'
      bytes_out_ += static_cast<int64_t>(buf_.size() - pos_);
      if (!line->empty() && line->back() == '\r') line->pop_back();
      pos_ = buf_.size();
      ++line_no_;
      return true;
    }
    // Keep the unfinished line, then append the next chunk after it.
    buf_.erase(0, pos_);
    scan = buf_.size();
    pos_ = 0;
    size_t old = buf_.size();
    buf_.resize(old + kChunkBytes);
    Result<size_t> n = read_some(buf_.data() + old, kChunkBytes);
    if (!n.is_ok()) return n.status();
    buf_.resize(old + *n);
    if (*n == 0) eof_ = true;
  }
}

Result<std::unique_ptr<JsonlReader>> JsonlReader::open(const std::string& path, JsonlOptions options) {
  LOOM_ASSIGN_OR_RETURN(auto lines, LineReader::open(path));
  return std::unique_ptr<JsonlReader>(new JsonlReader(std::move(lines), std::move(options)));
}

Result<bool> JsonlReader::next(std::string* text) {
  std::string why;
  for (;;) {
    LOOM_ASSIGN_OR_RETURN(bool more, lines_->next_line(&line_));
    if (!more) return false;
    if (is_blank_line(line_)) continue;
    ++stats_.lines;
    LineError e = extract_text(line_, options_.text_field, text, &why);
    if (e == LineError::kNone) {
      ++stats_.documents;
      return true;
    }
    if (options_.on_error == OnError::kFail)
      return parse_error(lines_->path() + ":" + std::to_string(lines_->line_number()) + ": " + why);
    if (e == LineError::kMalformedJson) ++stats_.skipped_malformed;
    else if (e == LineError::kMissingField) ++stats_.skipped_missing_field;
    else ++stats_.skipped_invalid_utf8;
  }
}

}  // namespace loom::data
