// JSONL input for preprocessing: one JSON object per line, a text field per
// object. Files may be plain, gzip (.gz) or zstd (.zst). The compression is
// chosen by the file's magic bytes (1f 8b = gzip, 28 b5 2f fd = zstd); a file
// whose name says .gz/.zst but whose bytes do not is refused, so a mislabelled
// file is never tokenized as binary garbage.
//
// Two layers, so a parallel preprocessor can read on one thread and parse on
// many:
//   LineReader    decompression + line splitting (one thread)
//   extract_text  JSON parse + field lookup + UTF-8 check (any thread)
// JsonlReader combines them with an error policy for single-threaded callers.
//
// Lines that are empty or only whitespace are ignored (not documents, not
// errors): trailing blank lines are common in hand-made JSONL.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace loom::data {

enum class Compression : uint8_t { kNone, kGzip, kZstd };
const char* compression_name(Compression c);

// What to do with a bad line: stop with an error naming FILE:LINE (default),
// or skip it and count it.
enum class OnError : uint8_t { kFail, kSkip };
Result<OnError> parse_on_error(const std::string& text);  // "fail" | "skip"

// Why a line yielded no text.
enum class LineError : uint8_t { kNone, kMalformedJson, kMissingField, kInvalidUtf8 };

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view s);

// Parses one JSONL line and copies the string value of `field` into *text.
// On failure returns the reason and writes a one-line explanation to *why
// (without the FILE:LINE prefix, which the caller adds). A field that is
// present but not a string (number, null, object) counts as kMissingField.
// With `record`, the parsed object is moved there on success (for filters on
// other fields). Thread-safe (no shared state).
LineError extract_text(std::string_view line, const std::string& field, std::string* text, std::string* why,
                       nlohmann::json* record = nullptr);

// Streams the lines of one file, decompressing as it goes. Not thread-safe.
class LineReader {
 public:
  static Result<std::unique_ptr<LineReader>> open(const std::string& path);
  virtual ~LineReader() = default;

  // Reads the next line (without its '\n' or a trailing '\r') into *line.
  // Returns false at end of file; an error if the file is truncated or corrupt.
  Result<bool> next_line(std::string* line);

  const std::string& path() const { return path_; }
  Compression compression() const { return compression_; }
  int64_t line_number() const { return line_no_; }   // 1-based number of the last line returned
  int64_t bytes_out() const { return bytes_out_; }   // decompressed bytes returned so far (lines + '\n')
  // Bytes of the file itself (compressed, for .gz/.zst) consumed so far;
  // runs ahead of the lines returned by at most one read buffer.
  virtual int64_t file_bytes_read() const = 0;

 protected:
  LineReader(std::string path, Compression c) : path_(std::move(path)), compression_(c) {}
  // Fills buf with up to cap decompressed bytes; 0 means end of file.
  virtual Result<size_t> read_some(char* buf, size_t cap) = 0;

 private:
  std::string path_;
  Compression compression_;
  std::string buf_;      // decompressed bytes not yet returned
  size_t pos_ = 0;       // start of the unread part of buf_
  bool eof_ = false;
  int64_t line_no_ = 0;
  int64_t bytes_out_ = 0;
};

// Counts of what a reader saw; `documents` are lines that yielded text.
struct JsonlStats {
  int64_t lines = 0;            // non-blank lines
  int64_t documents = 0;
  int64_t skipped_malformed = 0;
  int64_t skipped_missing_field = 0;
  int64_t skipped_invalid_utf8 = 0;
  int64_t skipped() const { return skipped_malformed + skipped_missing_field + skipped_invalid_utf8; }
};

struct JsonlOptions {
  std::string text_field = "text";
  OnError on_error = OnError::kFail;
};

// One file's documents, in order, with the error policy applied.
// Errors: parse_error "FILE:LINE: <why>" under OnError::kFail. Not thread-safe.
class JsonlReader {
 public:
  static Result<std::unique_ptr<JsonlReader>> open(const std::string& path, JsonlOptions options = {});
  // Next document's text into *text; false at end of file.
  Result<bool> next(std::string* text);
  const JsonlStats& stats() const { return stats_; }

 private:
  JsonlReader(std::unique_ptr<LineReader> lines, JsonlOptions options)
      : lines_(std::move(lines)), options_(std::move(options)) {}
  std::unique_ptr<LineReader> lines_;
  JsonlOptions options_;
  JsonlStats stats_;
  std::string line_;
};

// True for names ending in .jsonl, .jsonl.gz or .jsonl.zst.
bool is_jsonl_name(const std::string& path);
// True for whitespace-only lines (which readers ignore).
bool is_blank_line(std::string_view line);

}  // namespace loom::data
