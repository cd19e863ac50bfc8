// Megatron .bin/.idx writer and reader; format in docs/reference/indexed_dataset.md.
#include "exec/data/indexed_dataset.h"

#include "core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

namespace loom::data {

static_assert(std::endian::native == std::endian::little, "the .bin/.idx format is little-endian; add byte swaps");

namespace {

constexpr uint8_t kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr uint64_t kVersion = 1;
constexpr size_t kHeaderBytes = 34;  // magic 9 + version 8 + dtype 1 + N 8 + D 8

template <typename T>
T load(const uint8_t* p) {  // unaligned-safe read from the mmap
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string errno_text() { return std::strerror(errno); }

// Narrows one int32 token into `dtype`; false when it does not fit exactly.
bool encode_token(int32_t t, TokenDtype dtype, uint8_t* dst) {
  switch (dtype) {
    case TokenDtype::kUint8: {
      if (t < 0 || t > 255) return false;
      uint8_t v = static_cast<uint8_t>(t);
      std::memcpy(dst, &v, 1);
      return true;
    }
    case TokenDtype::kInt8: {
      if (t < -128 || t > 127) return false;
      int8_t v = static_cast<int8_t>(t);
      std::memcpy(dst, &v, 1);
      return true;
    }
    case TokenDtype::kInt16: {
      if (t < -32768 || t > 32767) return false;
      int16_t v = static_cast<int16_t>(t);
      std::memcpy(dst, &v, 2);
      return true;
    }
    case TokenDtype::kUint16: {
      if (t < 0 || t > 65535) return false;
      uint16_t v = static_cast<uint16_t>(t);
      std::memcpy(dst, &v, 2);
      return true;
    }
    case TokenDtype::kInt32: std::memcpy(dst, &t, 4); return true;
    case TokenDtype::kInt64: {
      int64_t v = t;
      std::memcpy(dst, &v, 8);
      return true;
    }
    case TokenDtype::kFloat32: {
      if (t > (1 << 24) || t < -(1 << 24)) return false;  // float32 is exact only up to 2^24
      float v = static_cast<float>(t);
      std::memcpy(dst, &v, 4);
      return true;
    }
    case TokenDtype::kFloat64: {
      double v = t;
      std::memcpy(dst, &v, 8);
      return true;
    }
  }
  return false;
}

// Widens the element at `src` to int32; false when it is not an int32 integer.
bool decode_token(const uint8_t* src, TokenDtype dtype, int32_t* out) {
  switch (dtype) {
    case TokenDtype::kUint8: *out = load<uint8_t>(src); return true;
    case TokenDtype::kInt8: *out = load<int8_t>(src); return true;
    case TokenDtype::kInt16: *out = load<int16_t>(src); return true;
    case TokenDtype::kUint16: *out = load<uint16_t>(src); return true;
    case TokenDtype::kInt32: *out = load<int32_t>(src); return true;
    case TokenDtype::kInt64: {
      int64_t v = load<int64_t>(src);
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) return false;
      *out = static_cast<int32_t>(v);
      return true;
    }
    case TokenDtype::kFloat32:
    case TokenDtype::kFloat64: {
      double v = dtype == TokenDtype::kFloat32 ? load<float>(src) : load<double>(src);
      if (!(v >= -2147483648.0 && v <= 2147483647.0) || v != std::floor(v)) return false;
      *out = static_cast<int32_t>(v);
      return true;
    }
  }
  return false;
}

}  // namespace

size_t dtype_size_bytes(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kUint8:
    case TokenDtype::kInt8: return 1;
    case TokenDtype::kInt16:
    case TokenDtype::kUint16: return 2;
    case TokenDtype::kInt32:
    case TokenDtype::kFloat32: return 4;
    case TokenDtype::kInt64:
    case TokenDtype::kFloat64: return 8;
  }
  return 0;
}

const char* dtype_name(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kUint8: return "uint8";
    case TokenDtype::kInt8: return "int8";
    case TokenDtype::kInt16: return "int16";
    case TokenDtype::kInt32: return "int32";
    case TokenDtype::kInt64: return "int64";
    case TokenDtype::kFloat64: return "float64";
    case TokenDtype::kFloat32: return "float32";
    case TokenDtype::kUint16: return "uint16";
  }
  return "unknown";
}

TokenDtype dtype_for_vocab(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDtype::kUint16 : TokenDtype::kInt32;
}

// ---------------------------------------------------------------- writer

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, TokenDtype dtype, std::FILE* bin)
    : prefix_(std::move(prefix)), dtype_(dtype), item_bytes_(dtype_size_bytes(dtype)), bin_(bin), doc_indices_{0} {}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (!finalized_) remove_temporaries();
}

void IndexedDatasetWriter::remove_temporaries() {
  if (bin_ != nullptr) std::fclose(bin_);
  bin_ = nullptr;
  if (!bin_tmp_.empty()) std::remove(bin_tmp_.c_str());
  if (!idx_tmp_.empty()) std::remove(idx_tmp_.c_str());
}

Result<std::unique_ptr<IndexedDatasetWriter>> IndexedDatasetWriter::create(const std::string& prefix,
                                                                           TokenDtype dtype) {
  if (dtype_size_bytes(dtype) == 0) {
    return invalid_argument("indexed dataset writer " + prefix + ": unknown dtype code " +
                            std::to_string(static_cast<int>(dtype)) + "; use 1..8");
  }
  LOOM_ASSIGN_OR_RETURN(OutputTarget bin, begin_output(prefix + ".bin", "output"));
  LOOM_ASSIGN_OR_RETURN(OutputTarget idx, begin_output(prefix + ".idx", "output"));
  LOOM_RETURN_IF_ERROR(check_output_path(bin.path, "output", false));
  LOOM_RETURN_IF_ERROR(check_output_path(idx.path, "output", false));
  std::FILE* f = std::fopen(bin.tmp.c_str(), "wb");
  if (f == nullptr) return write_error("create", bin.tmp, errno);
  std::unique_ptr<IndexedDatasetWriter> w(new IndexedDatasetWriter(prefix, dtype, f));
  w->bin_target_ = bin.target;
  w->bin_tmp_ = bin.tmp;
  w->idx_target_ = idx.target;
  w->idx_tmp_ = idx.tmp;
  return w;
}

Status IndexedDatasetWriter::add_sequence(const int32_t* tokens, size_t n) {
  if (finalized_ || bin_ == nullptr) return invalid_argument(prefix_ + ": add after finalize()");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return invalid_argument(prefix_ + ": sequence of " + std::to_string(n) + " tokens exceeds the i32 length field");
  }
  scratch_.resize(n * item_bytes_);
  for (size_t i = 0; i < n; ++i) {
    if (!encode_token(tokens[i], dtype_, scratch_.data() + i * item_bytes_)) {
      return invalid_argument(prefix_ + ": token " + std::to_string(tokens[i]) + " does not fit dtype " +
                              dtype_name(dtype_) + "; use a wider dtype (dtype_for_vocab)");
    }
  }
  if (n > 0 && std::fwrite(scratch_.data(), 1, scratch_.size(), bin_) != scratch_.size()) {
    return write_error("write", bin_target_, errno);
  }
  lengths_.push_back(static_cast<int32_t>(n));
  tokens_ += static_cast<int64_t>(n);
  return Status::ok();
}

Status IndexedDatasetWriter::end_document() {
  if (finalized_) return invalid_argument(prefix_ + ": end_document() after finalize()");
  doc_indices_.push_back(static_cast<int64_t>(lengths_.size()));
  return Status::ok();
}

Status IndexedDatasetWriter::add_document(const int32_t* tokens, size_t n) {
  LOOM_RETURN_IF_ERROR(add_sequence(tokens, n));
  return end_document();
}

Status IndexedDatasetWriter::finalize() {
  if (finalized_) return invalid_argument(prefix_ + ": finalize() called twice");
  if (doc_indices_.back() != static_cast<int64_t>(lengths_.size())) LOOM_RETURN_IF_ERROR(end_document());
  const std::string& bin_tmp = bin_tmp_;
  const std::string& idx_tmp = idx_tmp_;
  if (std::fflush(bin_) != 0 || ::fsync(fileno(bin_)) != 0) return write_error("write", bin_target_, errno);
  std::fclose(bin_);
  bin_ = nullptr;

  const uint64_t n = lengths_.size(), d = doc_indices_.size();
  std::vector<uint8_t> idx(kHeaderBytes + 12 * n + 8 * d);
  uint8_t* p = idx.data();
  auto put = [&p](const void* src, size_t bytes) {
    if (bytes > 0) std::memcpy(p, src, bytes);  // src may be null when empty
    p += bytes;
  };
  const uint8_t code = static_cast<uint8_t>(dtype_);
  put(kMagic, sizeof(kMagic));
  put(&kVersion, 8);
  put(&code, 1);
  put(&n, 8);
  put(&d, 8);
  put(lengths_.data(), 4 * n);
  int64_t ptr = 0;  // the running byte sum
  for (int32_t len : lengths_) {
    put(&ptr, 8);
    ptr += static_cast<int64_t>(len) * static_cast<int64_t>(item_bytes_);
  }
  put(doc_indices_.data(), 8 * d);
  LOOM_CHECK(p == idx.data() + idx.size(), "idx size bookkeeping");

  std::FILE* f = std::fopen(idx_tmp.c_str(), "wb");
  if (f == nullptr) return write_error("create", idx_tmp, errno);
  bool ok = std::fwrite(idx.data(), 1, idx.size(), f) == idx.size() && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return write_error("write", idx_target_, err);
  // .bin first, .idx last: a reader that finds the .idx finds a complete .bin.
  if (std::rename(bin_tmp.c_str(), bin_target_.c_str()) != 0) {
    return io_error(bin_tmp + ": rename to " + bin_target_ + " failed: " + errno_text());
  }
  if (std::rename(idx_tmp.c_str(), idx_target_.c_str()) != 0) {
    return io_error(idx_tmp + ": rename to " + idx_target_ + " failed: " + errno_text());
  }
  finalized_ = true;
  return Status::ok();
}

// ---------------------------------------------------------------- reader

IndexedDataset::~IndexedDataset() = default;

Result<std::unique_ptr<IndexedDataset>> IndexedDataset::open(const std::string& prefix, bool multimodal) {
  LOOM_ASSIGN_OR_RETURN(ReadMode mode, read_mode_from_env());
  return open(prefix, mode, multimodal);
}

Result<std::unique_ptr<IndexedDataset>> IndexedDataset::open(const std::string& prefix, ReadMode mode,
                                                             bool multimodal) {
  // pread: the .idx once into memory (no file kept open); mmap: mapped.
  auto idx = mode == ReadMode::kPread ? open_memory_source(prefix + ".idx") : open_mmap_source(prefix + ".idx");
  if (!idx.is_ok()) return idx.status();
  // The .bin only once the index is valid (a bad .idx is reported as such).
  std::unique_ptr<IndexedDataset> ds;
  LOOM_ASSIGN_OR_RETURN(ds, open_sources(prefix, std::move(*idx), nullptr, multimodal));
  LOOM_ASSIGN_OR_RETURN(auto bin, open_local_source(prefix + ".bin", mode, /*random_access=*/true));
  LOOM_RETURN_IF_ERROR(ds->attach_bin(std::move(bin)));
  return ds;
}

Result<std::unique_ptr<IndexedDataset>> IndexedDataset::open_sources(const std::string& name,
                                                                     std::shared_ptr<ByteSource> idx,
                                                                     std::shared_ptr<ByteSource> bin,
                                                                     bool multimodal) {
  std::unique_ptr<IndexedDataset> ds(new IndexedDataset());
  ds->prefix_ = name;
  ds->multimodal_ = multimodal;
  const std::string idx_path = idx->name();
  ds->idx_src_ = std::move(idx);
  ds->idx_ = ds->idx_src_->data();
  ds->idx_bytes_ = static_cast<size_t>(ds->idx_src_->size());
  const uint8_t* h = ds->idx_;
  auto bad = [&idx_path](const std::string& why) { return parse_error(idx_path + ": " + why); };

  if (ds->idx_bytes_ < kHeaderBytes) {
    return bad("file is " + std::to_string(ds->idx_bytes_) + " bytes, shorter than the 34-byte header; truncated");
  }
  if (std::memcmp(h, kMagic, sizeof(kMagic)) != 0) {
    return bad("bad magic (expected \"MMIDIDX\\0\\0\"); not a Megatron indexed dataset index");
  }
  const uint64_t version = load<uint64_t>(h + 9);
  if (version != kVersion) return bad("unsupported version " + std::to_string(version) + " (only version 1 is read)");
  const uint8_t code = h[17];
  if (code < 1 || code > 8) return bad("unknown dtype code " + std::to_string(code) + " (valid codes are 1..8)");
  ds->dtype_ = static_cast<TokenDtype>(code);
  ds->item_bytes_ = dtype_size_bytes(ds->dtype_);
  const uint64_t n = load<uint64_t>(h + 18), d = load<uint64_t>(h + 26);
  constexpr uint64_t kMaxCount = uint64_t{1} << 48;  // keeps 34+13N+8D from overflowing
  if (n > kMaxCount || d > kMaxCount) return bad("implausible counts N=" + std::to_string(n) + " D=" + std::to_string(d));
  const uint64_t expected = kHeaderBytes + 12 * n + 8 * d + (multimodal ? n : 0);
  if (ds->idx_bytes_ != expected) {
    return bad("size " + std::to_string(ds->idx_bytes_) + " bytes != 34+12N+8D" + (multimodal ? "+N" : "") + " = " +
               std::to_string(expected) + " for N=" + std::to_string(n) + " D=" + std::to_string(d) +
               (!multimodal && ds->idx_bytes_ == expected + n
                    ? "; it has N more bytes, the layout of a multimodal index, which loom does not train on"
                    : "; the index is truncated or corrupt, or belongs to another .bin: re-run `loom preprocess`"));
  }
  if (d < 1) return bad("D=0: document_indices must hold at least the leading 0");
  ds->n_ = static_cast<int64_t>(n);
  ds->d_ = static_cast<int64_t>(d);

  if (ds->document_index(0) != 0) return bad("document_indices[0] = " + std::to_string(ds->document_index(0)) + ", must be 0");
  for (int64_t j = 1; j < ds->d_; ++j) {
    if (ds->document_index(j) < ds->document_index(j - 1)) {
      return bad("document_indices not monotone at " + std::to_string(j));
    }
  }
  if (ds->document_index(ds->d_ - 1) != ds->n_) {
    return bad("document_indices[D-1] = " + std::to_string(ds->document_index(ds->d_ - 1)) +
               " != N = " + std::to_string(ds->n_) + "; the index is inconsistent");
  }
  int64_t running = 0;  // bytes
  for (int64_t i = 0; i < ds->n_; ++i) {
    const int64_t len = ds->sequence_length(i);
    if (len < 0) return bad("sequence_lengths[" + std::to_string(i) + "] = " + std::to_string(len) + " is negative");
    if (ds->sequence_pointer(i) != running) {
      return bad("sequence_pointers[" + std::to_string(i) + "] = " + std::to_string(ds->sequence_pointer(i)) +
                 " is not the running byte sum " + std::to_string(running));
    }
    running += len * static_cast<int64_t>(ds->item_bytes_);
  }
  ds->total_tokens_ = running / static_cast<int64_t>(ds->item_bytes_);
  if (bin != nullptr) LOOM_RETURN_IF_ERROR(ds->attach_bin(std::move(bin)));
  return ds;
}

Status IndexedDataset::attach_bin(std::shared_ptr<ByteSource> bin) {
  const int64_t expected = total_tokens_ * static_cast<int64_t>(item_bytes_);
  if (bin->size() != expected) {
    return parse_error(bin->name() + ": size " + std::to_string(bin->size()) + " bytes != " +
                       std::to_string(expected) + " bytes that " + idx_src_->name() + " describes" +
                       (bin->size() < expected ? " (truncated)" : " (trailing bytes)"));
  }
  bin_src_ = std::move(bin);
  bin_ = bin_src_->data();
  bin_bytes_ = static_cast<size_t>(bin_src_->size());
  return Status::ok();
}

int64_t IndexedDataset::sequence_length(int64_t i) const {
  LOOM_CHECK(i >= 0 && i < n_, "sequence index out of range");
  return load<int32_t>(idx_ + kHeaderBytes + 4 * i);
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  LOOM_CHECK(i >= 0 && i < n_, "sequence index out of range");
  return load<int64_t>(idx_ + kHeaderBytes + 4 * n_ + 8 * i);
}

int64_t IndexedDataset::document_index(int64_t j) const {
  LOOM_CHECK(j >= 0 && j < d_, "document_indices index out of range");
  return load<int64_t>(idx_ + kHeaderBytes + 12 * n_ + 8 * j);
}

int8_t IndexedDataset::sequence_mode(int64_t i) const {
  LOOM_CHECK(multimodal_, "sequence_mode() on a dataset not opened as multimodal");
  LOOM_CHECK(i >= 0 && i < n_, "sequence index out of range");
  return load<int8_t>(idx_ + kHeaderBytes + 12 * n_ + 8 * d_ + i);
}

int64_t IndexedDataset::token_at_sequence(int64_t seq) const {
  if (seq == n_) return total_tokens_;
  return sequence_pointer(seq) / static_cast<int64_t>(item_bytes_);
}

int64_t IndexedDataset::document_first_token(int64_t d) const {
  LOOM_CHECK(d >= 0 && d < d_ - 1, "document index out of range");
  return token_at_sequence(document_index(d));
}

int64_t IndexedDataset::document_num_tokens(int64_t d) const {
  LOOM_CHECK(d >= 0 && d < d_ - 1, "document index out of range");
  return token_at_sequence(document_index(d + 1)) - token_at_sequence(document_index(d));
}

Status IndexedDataset::read_tokens(int64_t first, int64_t count, int32_t* out) const {
  if (first < 0 || count < 0 || first + count > total_tokens_) {
    return invalid_argument(prefix_ + ".bin: token range [" + std::to_string(first) + ", " +
                            std::to_string(first + count) + ") outside [0, " + std::to_string(total_tokens_) + ")");
  }
  LOOM_CHECK(bin_src_ != nullptr, "IndexedDataset: read before the .bin was attached");
  if (bin_ != nullptr) return decode(bin_ + first * static_cast<int64_t>(item_bytes_), first, count, out);
  // Not mapped (pread, a remote file): the bytes through the source. A
  // thread's scratch buffer: the loader reads from one thread.
  thread_local std::vector<uint8_t> scratch;
  const int64_t bytes = count * static_cast<int64_t>(item_bytes_);
  scratch.resize(static_cast<size_t>(bytes));
  LOOM_RETURN_IF_ERROR(bin_src_->read(first * static_cast<int64_t>(item_bytes_), bytes, scratch.data()));
  return decode(scratch.data(), first, count, out);
}

Status IndexedDataset::decode(const uint8_t* src, int64_t first, int64_t count, int32_t* out) const {
  if (dtype_ == TokenDtype::kInt32) {
    if (count > 0) std::memcpy(out, src, static_cast<size_t>(count) * 4);
    return Status::ok();
  }
  if (dtype_ == TokenDtype::kUint16) {  // the common GPT case: a tight loop
    for (int64_t i = 0; i < count; ++i) out[i] = load<uint16_t>(src + 2 * i);
    return Status::ok();
  }
  for (int64_t i = 0; i < count; ++i) {
    if (!decode_token(src + i * static_cast<int64_t>(item_bytes_), dtype_, &out[i])) {
      return parse_error(prefix_ + ".bin: token " + std::to_string(first + i) + " (dtype " + dtype_name(dtype_) +
                         ") is not an int32 token id");
    }
  }
  return Status::ok();
}

Status IndexedDataset::read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const {
  if (seq < 0 || seq >= n_) {
    return invalid_argument(prefix_ + ": sequence " + std::to_string(seq) + " outside [0, " + std::to_string(n_) + ")");
  }
  const int64_t len = sequence_length(seq);
  if (offset < 0 || count < 0 || offset + count > len) {
    return invalid_argument(prefix_ + ": tokens [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                            ") outside sequence " + std::to_string(seq) + " of length " + std::to_string(len));
  }
  return read_tokens(token_at_sequence(seq) + offset, count, out);
}

}  // namespace loom::data
