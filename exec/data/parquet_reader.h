// Parquet input for preprocessing: the text column (and any field-filter
// columns) of a Parquet file, read with Apache Arrow's C++ Parquet reader.
//
// The unit of work is a row group, and a row group is streamed, not loaded:
// the reader reads its pages through a bounded buffer (not the whole column
// chunk) and hands over record batches of `batch_rows` rows, so memory per
// reader is a page plus one batch whatever the row group's size. Several
// readers (one per worker thread, each with its own ParquetTextFile) read
// different row groups of one file at once.
//
// Column types: the text column may be string, large_string, string_view,
// binary / large_binary (checked as UTF-8 by the caller like any text) or a
// dictionary of those; field columns may also be boolean, integers or
// floating point. A null is reported as a missing value.
//
// Arrow lives in a run-time plugin, libloom_parquet.so (parquet_plugin.cc),
// next to libloom_mpi.so in <prefix>/lib/loom: `loom` itself never links
// Arrow's 60 MB of libraries, so it starts as fast without them, and a build
// or bundle without Arrow (Arrow C++ is not in Debian 12; gpu-bundle leaves
// it out) still runs everything else; open() then says how to get it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace loom::data {

// OK when the Parquet plugin loads; otherwise why not and how to fix it.
Status parquet_available();
// Where the plugin is looked for: $LOOM_PARQUET_PLUGIN, else
// <executable dir>/../lib/loom/libloom_parquet.so.
std::string parquet_plugin_path();

// True when `path` starts with Parquet's magic bytes "PAR1".
bool is_parquet_file(const std::string& path);
// True for names ending in .parquet or .pq.
bool is_parquet_name(const std::string& path);

// One value of a field column for one row.
struct FieldValue {
  enum class Kind : uint8_t { kMissing, kString, kNumber } kind = Kind::kMissing;
  std::string_view str;  // kString (valid until the callback returns)
  double num = 0;        // kNumber (booleans are 0/1)
};

// One row as the callback sees it.
struct ParquetRow {
  int64_t row = 0;                   // 0-based row number in the file
  const std::string_view* text;      // nullptr for a null text
  const std::vector<FieldValue>* fields;  // one per requested field column, in request order
};

class ParquetTextFile {
 public:
  virtual ~ParquetTextFile() = default;

  // Opens `path` and checks that `text_column` and every `field_columns`
  // entry are top-level columns of a usable type. Errors: not_found (no
  // file), parse_error (not a Parquet file, a corrupt footer), invalid_argument
  // (missing column: names the file's columns; a column of another type),
  // unsupported (built without Arrow).
  // (unsupported: the plugin is missing or does not load).
  static Result<std::unique_ptr<ParquetTextFile>> open(const std::string& path, const std::string& text_column,
                                                       const std::vector<std::string>& field_columns = {});

  virtual int row_groups() const = 0;
  virtual int64_t rows() const = 0;
  virtual int64_t row_group_rows(int g) const = 0;
  virtual int64_t row_group_first_row(int g) const = 0;         // rows in the groups before g
  virtual int64_t row_group_compressed_bytes(int g) const = 0;  // of its column chunks: its share of the file

  // Streams row group `g` in record batches of `batch_rows` rows: fn is
  // called for each row in order, and `batch_done` after each batch (so a
  // caller can hand off what it made of that batch). An error from fn or
  // batch_done stops the read and is returned; a decoding error is returned
  // as parse_error "FILE: row group G: ...".
  virtual Status read_row_group(int g, int64_t batch_rows, const std::function<Status(const ParquetRow&)>& fn,
                                const std::function<Status(bool last)>& batch_done) const = 0;

  virtual const std::string& path() const = 0;
};

// The plugin's table. It is built from this tree with the same compiler as
// `loom`, so it passes C++ types; kParquetPluginAbi guards against a stale file.
inline constexpr int kParquetPluginAbi = 1;
struct ParquetPlugin {
  int abi = kParquetPluginAbi;
  Result<std::unique_ptr<ParquetTextFile>> (*open)(const std::string& path, const std::string& text_column,
                                                   const std::vector<std::string>& field_columns) = nullptr;
};

}  // namespace loom::data

// The plugin's one exported symbol.
extern "C" const loom::data::ParquetPlugin* loom_parquet_plugin();
