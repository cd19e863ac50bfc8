// Megatron .idx index files (exec/data/indexed_dataset.h IndexedDataset::open).
//
// Input layout: bytes [0, 4) = size of the .bin to pair it with (little-endian,
// modulo 1 MiB), byte 4 bit 0 = open as multimodal, the rest = the .idx file.
// The .bin is a fixed byte pattern of that size. An index that opens is read
// through every accessor and sampled with GptDataset, as training does.
#include <algorithm>
#include <vector>

#include "exec/data/gpt_dataset.h"
#include "exec/data/indexed_dataset.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;
using namespace loom::data;

namespace {

constexpr size_t kPrefixBytes = 5;

std::string frame(uint32_t bin_bytes, bool multimodal, const std::string& idx) {
  std::string s(kPrefixBytes, '\0');
  for (int i = 0; i < 4; ++i) s[i] = char((bin_bytes >> (8 * i)) & 0xff);
  s[4] = multimodal ? 1 : 0;
  return s + idx;
}

void write_seeds() {
  const std::string dir = loom::fuzz::scratch_dir();
  struct S {
    TokenDtype dtype;
    std::vector<std::vector<int32_t>> docs;
    bool split;  // two sequences per document
  };
  const std::vector<S> seeds = {
      {TokenDtype::kUint16, {{1, 2, 3}, {4, 5}, {6}}, false},
      {TokenDtype::kInt32, {{100000, 7, 8, 9}, {10}}, false},
      {TokenDtype::kUint8, {{1, 2}, {3, 4, 5, 6}, {7}, {8, 9}}, true},
      {TokenDtype::kInt64, {{1}}, false},
      {TokenDtype::kUint16, {{}}, false},
  };
  int i = 0;
  for (const S& s : seeds) {
    const std::string prefix = dir + "/seed" + std::to_string(i);
    auto w = IndexedDatasetWriter::create(prefix, s.dtype);
    if (!w.is_ok()) std::abort();
    for (const auto& d : s.docs) {
      if (s.split && d.size() > 1) {
        const size_t half = d.size() / 2;
        if (!(*w)->add_sequence(d.data(), half).is_ok()) std::abort();
        if (!(*w)->add_sequence(d.data() + half, d.size() - half).is_ok()) std::abort();
        if (!(*w)->end_document().is_ok()) std::abort();
      } else if (!(*w)->add_document(d.data(), d.size()).is_ok()) {
        std::abort();
      }
    }
    const int64_t bin_bytes = (*w)->bytes();
    if (!(*w)->finalize().is_ok()) std::abort();
    loom::fuzz::write_seed("idx_" + std::to_string(i++), frame(uint32_t(bin_bytes), false,
                                                              loom::fuzz::read_file(prefix + ".idx")));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (loom::fuzz::seed_dir()) {
    write_seeds();
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kPrefixBytes) return 0;
  uint32_t bin_bytes = 0;
  for (int i = 0; i < 4; ++i) bin_bytes |= uint32_t(data[i]) << (8 * i);
  bin_bytes &= (1u << 20) - 1;
  const bool multimodal = data[4] & 1;
  const std::string prefix = loom::fuzz::scratch_dir() + "/ds";
  loom::fuzz::write_file(prefix + ".idx", data + kPrefixBytes, size - kPrefixBytes);
  std::string bin(bin_bytes, '\0');
  for (size_t i = 0; i < bin.size(); ++i) bin[i] = char((i * 131 + 7) & 0x7f);
  loom::fuzz::write_file(prefix + ".bin", bin);

  auto opened = IndexedDataset::open(prefix, multimodal);
  if (!opened.is_ok()) {
    FUZZ_CHECK(!opened.status().message().empty(), "an error without a message");
    return 0;
  }
  std::shared_ptr<const IndexedDataset> ds(std::move(*opened));
  const int64_t n = ds->sequence_count(), docs = ds->document_count();
  FUZZ_CHECK(n >= 0 && docs >= 0 && ds->total_tokens() >= 0, "negative counts");
  FUZZ_CHECK(ds->total_tokens() * int64_t(dtype_size_bytes(ds->dtype())) == int64_t(bin_bytes),
             "tokens do not cover the .bin");
  std::vector<int32_t> buf(4096);
  int64_t sum = 0;
  for (int64_t i = 0; i < n && i < 1000; ++i) {
    const int64_t len = ds->sequence_length(i);
    FUZZ_CHECK(len >= 0, "negative sequence length");
    sum += len;
    const int64_t take = std::min<int64_t>(len, int64_t(buf.size()));
    (void)ds->read(i, 0, take, buf.data());  // may refuse out-of-range token values
    FUZZ_CHECK(!ds->read(i, len, 1, buf.data()).is_ok(), "read past the end of a sequence accepted");
    if (multimodal) (void)ds->sequence_mode(i);
  }
  if (n <= 1000) FUZZ_CHECK(sum == ds->total_tokens(), "sequence lengths do not add up to the tokens");
  for (int64_t d = 0; d < docs && d < 1000; ++d) {
    const int64_t first = ds->document_first_token(d), count = ds->document_num_tokens(d);
    FUZZ_CHECK(first >= 0 && count >= 0 && first + count <= ds->total_tokens(), "document outside the tokens");
  }
  (void)ds->read_tokens(0, std::min<int64_t>(ds->total_tokens(), int64_t(buf.size())), buf.data());
  FUZZ_CHECK(!ds->read_tokens(ds->total_tokens(), 1, buf.data()).is_ok(), "read past the last token accepted");
  FUZZ_CHECK(!ds->read_tokens(-1, 1, buf.data()).is_ok(), "read at a negative token accepted");

  auto g = GptDataset::create(ds, 7, 1234);
  if (g.is_ok()) {
    std::vector<int32_t> sample(8);
    for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1000}}) (void)(*g)->sample(i, sample.data());
  }
  return 0;
}
