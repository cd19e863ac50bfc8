// JSONL -> Megatron indexed dataset (.bin/.idx), the C++ counterpart of
// Megatron's tools/preprocess_data.py.
//
// Pipeline (docs/reference/indexed_dataset.md for the output format):
//   reader thread   expands the inputs, decompresses, splits lines into
//                   batches (a batch never spans two files)
//   T workers       parse JSON, check UTF-8, tokenize, append EOD
//   calling thread  takes batches back in input order and writes documents
// Output is byte-identical whatever the worker count: documents are numbered
// in input order (files sorted within a directory, lines in file order) and
// written in that order.
//
// Sharding is round-robin: document k (0-based, counting only documents that
// were written) goes to shard k mod N. It needs no first pass to count
// documents, and every shard gets a near-equal share of every input file.
// Shards are PREFIX_00000.bin/.idx ... when N > 1, PREFIX.bin/.idx when N = 1.
//
// A document that tokenizes to zero tokens (empty text with --no-eod) is not
// written (a zero-length sequence only trips up samplers); it is counted.
//
// PREFIX.manifest.json records, per shard, the file names (relative to the
// manifest), documents, tokens, bytes and XXH64 checksums of both files, plus
// the tokenizer (name, vocab size, EOD id) and the token dtype.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/data/clean.h"
#include "exec/data/indexed_dataset.h"
#include "exec/data/jsonl_reader.h"
#include "exec/data/s3_config.h"

namespace loom::data {

// Reported from the calling thread about once per progress_interval_s, and
// once more with final = true.
struct PreprocessProgress {
  int64_t bytes_read = 0;  // decompressed JSONL bytes (Parquet: text bytes) consumed
  int64_t documents = 0;
  int64_t tokens = 0;
  double elapsed_s = 0;
  double mb_per_s = 0;  // bytes_read / elapsed_s / 1e6
  double docs_per_s = 0;
  int64_t input_bytes_done = 0;   // of the input files as stored (compressed, for .gz/.zst/Parquet)
  int64_t input_bytes_total = 0;
  double eta_s = -1;    // from input_bytes_done / input_bytes_total; -1 before there is an estimate
  bool final = false;
};

struct PreprocessOptions {
  // Files, directories (their *.jsonl, *.jsonl.gz, *.jsonl.zst, *.parquet,
  // sorted), glob patterns (matches sorted), or s3:// / http(s):// objects.
  // A file is JSONL or Parquet by its first bytes (Parquet: "PAR1").
  std::vector<std::string> inputs;
  std::string output_prefix;
  std::string text_field = "text";  // JSONL: the text's field; Parquet: the text column
  std::string cache_dir;            // where remote inputs are fetched (needed only for them)
  S3Options s3;                     // --endpoint, --aws-profile, --s3-addressing for s3:// inputs
  std::string tokenizer = "byte";  // a load_tokenizer() spec: "byte", a .model path, "gpt2:DIR"
  bool append_eod = true;
  int shards = 1;
  int workers = 1;  // tokenizer threads (the reader thread comes on top)
  OnError on_error = OnError::kFail;
  // Cleaning before tokenizing (exec/data/clean.h); every step off by
  // default. Field filters read JSONL fields or Parquet columns.
  CleanOptions clean;
  int batch_lines = 1024;  // lines per work item
  double progress_interval_s = 1.0;
  std::function<void(const PreprocessProgress&)> progress;  // optional
};

struct ShardStats {
  std::string bin_path, idx_path;
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t bin_bytes = 0, idx_bytes = 0;
  uint64_t bin_xxh64 = 0, idx_xxh64 = 0;
};

struct PreprocessStats {
  std::vector<std::string> inputs;       // after directory/glob expansion, in processing order (URLs as given)
  std::vector<std::string> input_files;  // the local files read (remote ones: their cache copies)
  int64_t input_bytes = 0;               // size of the input files as stored
  int64_t input_bytes_done = 0;
  JsonlStats lines;                      // documents here = documents parsed (Parquet: rows are lines)
  int64_t documents = 0;                 // written (sum over shards)
  int64_t empty_documents = 0;           // zero tokens, not written
  int64_t tokens = 0;                    // written, EOD included
  int64_t bytes_read = 0;                // decompressed input bytes
  double elapsed_s = 0;
  double mb_per_s = 0;
  std::string tokenizer_name;
  int64_t vocab_size = 0;
  TokenDtype dtype = TokenDtype::kInt32;
  bool cleaned = false;                  // some cleaning step was on
  CleanStats clean;                      // documents here = documents parsed; kept = past cleaning
  std::vector<ShardStats> shards;        // only shards that got documents
  int empty_shards = 0;                  // of --shards, not written: fewer documents than shards
  std::string manifest_path;
};

// Errors: invalid_argument (bad options, no JSONL files in the inputs, no
// document at all, an output that is a FIFO / device / directory),
// not_found (an input is missing), parse_error "FILE:LINE: ..." for a bad line
// under OnError::kFail, io_error writing outputs. An error while reading or
// tokenizing publishes no shard (unfinalized writers remove their .tmp files)
// and no manifest. Not reentrant-safe on one output prefix.
Result<PreprocessStats> preprocess(const PreprocessOptions& options);

// The input files named by `inputs`: files and URLs kept in the given order;
// each directory contributes its *.jsonl, *.jsonl.gz, *.jsonl.zst and
// *.parquet files sorted by name; a glob pattern (with * ? [) its matching
// files sorted by name. An s3:// folder ("s3://b/dir/") or pattern is listed
// with `remote` (list_s3_objects; refused without it); an http(s):// one is
// refused (HTTP has no listing).
struct RemoteCacheOptions;
Result<std::vector<std::string>> expand_inputs(const std::vector<std::string>& inputs,
                                               const RemoteCacheOptions* remote = nullptr);

// Output prefix of shard `i` of `n`: PREFIX when n == 1, else PREFIX_%05d.
std::string shard_prefix(const std::string& prefix, int i, int n);

// XXH64 (seed 0) of a whole file.
Result<uint64_t> xxh64_file(const std::string& path);

// The manifest of a finished run (s.manifest_path): tokenizer, dtype, inputs,
// counts, skipped lines, cleaning, and each shard's files, sizes and XXH64,
// written durably. io_error when it cannot be written.
Status write_preprocess_manifest(const PreprocessOptions& options, const PreprocessStats& stats);

}  // namespace loom::data
