// Megatron-LM IndexedDataset (.bin/.idx): a streaming writer and a
// memory-mapped, validating reader. The byte format is written up in
// docs/reference/indexed_dataset.md; this file follows it exactly.
//
//   PREFIX.bin  flat tokens, element dtype, little-endian, no header
//   PREFIX.idx  34-byte header, i32 lengths[N], i64 pointers[N] (bytes),
//               i64 document_indices[D] (D = documents + 1, leading 0),
//               optional i8 modes[N] (multimodal only)
//
// Tokens cross this API as int32 whatever the on-disk dtype; conversion is
// done at the edge (write: range-checked narrowing; read: range-checked widening).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/data/byte_source.h"

namespace loom::data {

enum class TokenDtype : uint8_t {
  kUint8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUint16 = 8,
};

// Bytes per element of `dtype`; 0 for a code outside 1..8.
size_t dtype_size_bytes(TokenDtype dtype);
const char* dtype_name(TokenDtype dtype);
// Megatron's "optimal" dtype: uint16 when vocab_size < 65500, else int32.
TokenDtype dtype_for_vocab(int64_t vocab_size);

// Writes PREFIX.bin / PREFIX.idx. Tokens stream to a temporary next to
// PREFIX.bin as they are added; finalize() writes the .idx's temporary and then
// renames them over .bin and .idx (through symlinks, never over a FIFO or a
// device), so a crash never leaves a valid-looking but truncated pair
// (the .idx, which a reader opens first, appears last). A writer destroyed
// without finalize() removes its temporary files. Not thread-safe.
class IndexedDatasetWriter {
 public:
  static Result<std::unique_ptr<IndexedDatasetWriter>> create(const std::string& prefix, TokenDtype dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // One sequence, then a document boundary.
  Status add_document(const int32_t* tokens, size_t n);
  // One sequence without ending the document (sentence-split data).
  Status add_sequence(const int32_t* tokens, size_t n);
  // Pushes the current sequence count onto document_indices.
  Status end_document();
  // Writes the index and publishes both files. Sequences added after the last
  // end_document() are closed into a final document (Megatron would assert).
  Status finalize();

  int64_t tokens() const { return tokens_; }
  int64_t documents() const { return static_cast<int64_t>(doc_indices_.size()) - 1; }
  int64_t bytes() const { return tokens_ * static_cast<int64_t>(item_bytes_); }  // of .bin

 private:
  IndexedDatasetWriter(std::string prefix, TokenDtype dtype, std::FILE* bin);
  void remove_temporaries();

  std::string prefix_;
  TokenDtype dtype_;
  size_t item_bytes_;
  std::FILE* bin_ = nullptr;  // bin_tmp_ while open
  // Where PREFIX.bin / PREFIX.idx end up (a symlink's target; never a FIFO or
  // device: core/output_file.h) and the temporaries renamed over them.
  std::string bin_target_, idx_target_, bin_tmp_, idx_tmp_;
  bool finalized_ = false;
  int64_t tokens_ = 0;
  std::vector<int32_t> lengths_;      // (N)
  std::vector<int64_t> doc_indices_;  // (D), starts with 0
  std::vector<uint8_t> scratch_;      // conversion buffer
};

// A read-only view of PREFIX.bin / PREFIX.idx through byte sources
// (byte_source.h): both mmap'd by default; with ReadMode::kPread the .idx is
// read into memory once and the .bin read in large aligned blocks through a
// bounded set of open files; open_sources() takes any source for the .bin (a
// remote file still downloading, remote_file.h). open() validates
// the whole index (magic, version, dtype, size 34+12N+8D(+N), doc[0]==0,
// doc monotone, doc[D-1]==N, pointers == running byte sum, .bin size) and
// refuses a bad file with a parse_error naming it. After open() every
// accessor is const and safe to call from several threads at once.
class IndexedDataset {
 public:
  // The reader LOOM_DATA_READ selects (mmap unless it says pread).
  static Result<std::unique_ptr<IndexedDataset>> open(const std::string& prefix, bool multimodal = false);
  static Result<std::unique_ptr<IndexedDataset>> open(const std::string& prefix, ReadMode mode,
                                                      bool multimodal = false);
  // `name` (a path or URL prefix) names the dataset in messages.
  static Result<std::unique_ptr<IndexedDataset>> open_sources(const std::string& name,
                                                              std::shared_ptr<ByteSource> idx,
                                                              std::shared_ptr<ByteSource> bin,
                                                              bool multimodal = false);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  TokenDtype dtype() const { return dtype_; }
  int64_t sequence_count() const { return n_; }           // N
  int64_t document_count() const { return d_ - 1; }       // D - 1
  int64_t total_tokens() const { return total_tokens_; }  // all sequences

  // Accessors take indices the caller has bounds-checked (LOOM_CHECK on misuse).
  int64_t sequence_length(int64_t i) const;   // tokens
  int64_t sequence_pointer(int64_t i) const;  // byte offset into .bin
  int64_t document_index(int64_t j) const;    // doc[j], j in [0, D)
  int8_t sequence_mode(int64_t i) const;      // multimodal only
  // Document d as a contiguous token range of .bin: [first_token, first_token + num_tokens).
  int64_t document_first_token(int64_t d) const;
  int64_t document_num_tokens(int64_t d) const;

  // Tokens [offset, offset+count) of sequence `seq`; out has `count` entries.
  Status read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const;
  // Tokens [first, first+count) of the whole .bin token stream.
  Status read_tokens(int64_t first, int64_t count, int32_t* out) const;

 private:
  IndexedDataset() = default;
  Status decode(const uint8_t* src, int64_t first, int64_t count, int32_t* out) const;
  Status attach_bin(std::shared_ptr<ByteSource> bin);
  int64_t token_at_sequence(int64_t seq) const;  // first token of seq; total when seq == N

  std::string prefix_;
  TokenDtype dtype_ = TokenDtype::kInt32;
  size_t item_bytes_ = 4;
  bool multimodal_ = false;
  int64_t n_ = 0, d_ = 0, total_tokens_ = 0;
  std::shared_ptr<ByteSource> idx_src_, bin_src_;
  const uint8_t* idx_ = nullptr;  // idx_src_'s bytes (always in memory)
  size_t idx_bytes_ = 0;
  const uint8_t* bin_ = nullptr;  // bin_src_'s bytes when mapped; null: read through bin_src_
  size_t bin_bytes_ = 0;
};

}  // namespace loom::data
