// IndexedDataset writer/reader against the spec (docs/reference/indexed_dataset.md):
// the §5 test vector byte-for-byte both ways, a file pair written by an
// independent fwrite-based writer in this test, dtypes, multi-sequence
// documents, every corruption the reader must refuse, and atomic finalize.
#include "exec/data/indexed_dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace loom::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

// §5 of the spec: doc0 = [10, 11, 12], doc1 = [20, 21], uint16.
const Bytes kSpecBin = {0x0a, 0x00, 0x0b, 0x00, 0x0c, 0x00, 0x14, 0x00, 0x15, 0x00};
const Bytes kSpecIdx = {
    0x4d, 0x4d, 0x49, 0x44, 0x49, 0x44, 0x58, 0x00, 0x00,                          // magic
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                                // version
    0x08,                                                                          // uint16
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                                // N
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                                // D
    0x03, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,                                // lengths
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x00,  // pointers
    0x00, 0x00, 0x00,                                                              //
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,  // doc indices
    0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};

class IndexedDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom_idx_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string prefix(const std::string& name) const { return (dir_ / name).string(); }

  static Bytes read_all(const std::string& path) {
    Bytes b;
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return b;
    int c;
    while ((c = std::fgetc(f)) != EOF) b.push_back(static_cast<uint8_t>(c));
    std::fclose(f);
    return b;
  }
  static void write_all(const std::string& path, const Bytes& b) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    if (!b.empty()) {
      ASSERT_EQ(std::fwrite(b.data(), 1, b.size(), f), b.size());
    }
    std::fclose(f);
  }
  // Writes the spec vector, patches the .idx with `mutate`, and expects open() to
  // fail with a parse error whose message contains the file name and `reason`.
  template <typename F>
  void expect_refused(F mutate, const std::string& reason, bool mutate_bin = false) {
    const std::string p = prefix("corrupt");
    Bytes idx = kSpecIdx, bin = kSpecBin;
    mutate(mutate_bin ? bin : idx);
    write_all(p + ".idx", idx);
    write_all(p + ".bin", bin);
    auto ds = IndexedDataset::open(p);
    ASSERT_FALSE(ds.is_ok()) << "accepted a file corrupted for: " << reason;
    EXPECT_EQ(ds.status().code(), StatusCode::kParseError);
    EXPECT_NE(ds.status().message().find(mutate_bin ? p + ".bin" : p + ".idx"), std::string::npos)
        << ds.status().message();
    EXPECT_NE(ds.status().message().find(reason), std::string::npos) << ds.status().message();
  }

  fs::path dir_;
};

std::vector<int32_t> read_seq(const IndexedDataset& ds, int64_t i) {
  std::vector<int32_t> out(static_cast<size_t>(ds.sequence_length(i)));
  EXPECT_TRUE(ds.read(i, 0, ds.sequence_length(i), out.data()).is_ok());
  return out;
}

TEST_F(IndexedDatasetTest, WriterProducesSpecVectorByteForByte) {
  const std::string p = prefix("spec");
  auto w = IndexedDatasetWriter::create(p, TokenDtype::kUint16);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  const int32_t d0[] = {10, 11, 12}, d1[] = {20, 21};
  ASSERT_TRUE((*w)->add_document(d0, 3).is_ok());
  ASSERT_TRUE((*w)->add_document(d1, 2).is_ok());
  EXPECT_EQ((*w)->tokens(), 5);
  EXPECT_EQ((*w)->documents(), 2);
  EXPECT_EQ((*w)->bytes(), 10);
  ASSERT_TRUE((*w)->finalize().is_ok());
  EXPECT_EQ(read_all(p + ".bin"), kSpecBin);
  EXPECT_EQ(read_all(p + ".idx"), kSpecIdx);
  EXPECT_FALSE(fs::exists(p + ".bin.tmp"));
  EXPECT_FALSE(fs::exists(p + ".idx.tmp"));
}

TEST_F(IndexedDatasetTest, ReaderReadsSpecVector) {
  const std::string p = prefix("spec");
  write_all(p + ".bin", kSpecBin);
  write_all(p + ".idx", kSpecIdx);
  auto ds = IndexedDataset::open(p);
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_EQ((*ds)->dtype(), TokenDtype::kUint16);
  EXPECT_EQ((*ds)->sequence_count(), 2);
  EXPECT_EQ((*ds)->document_count(), 2);
  EXPECT_EQ((*ds)->sequence_length(0), 3);
  EXPECT_EQ((*ds)->sequence_pointer(1), 6);
  EXPECT_EQ(read_seq(**ds, 0), (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(read_seq(**ds, 1), (std::vector<int32_t>{20, 21}));
  int32_t t[2];
  ASSERT_TRUE((*ds)->read(0, 1, 2, t).is_ok());
  EXPECT_EQ(t[0], 11);
  EXPECT_EQ(t[1], 12);
  EXPECT_FALSE((*ds)->read(1, 1, 2, t).is_ok());  // past the sequence end
  EXPECT_FALSE((*ds)->read(2, 0, 1, t).is_ok());  // no sequence 2
}

// An independent writer straight from spec §2: fwrite of header and arrays.
void spec_write(const std::string& p, uint8_t code, size_t item, const std::vector<std::vector<int64_t>>& seqs,
                const std::vector<int64_t>& docs) {
  std::FILE* b = std::fopen((p + ".bin").c_str(), "wb");
  std::vector<int32_t> lens;
  std::vector<int64_t> ptrs;
  int64_t off = 0;
  for (const auto& s : seqs) {
    for (int64_t v : s) std::fwrite(&v, item, 1, b);  // little-endian host: low bytes first
    lens.push_back(static_cast<int32_t>(s.size()));
    ptrs.push_back(off);
    off += static_cast<int64_t>(s.size() * item);
  }
  std::fclose(b);
  std::FILE* f = std::fopen((p + ".idx").c_str(), "wb");
  std::fwrite("MMIDIDX\0\0", 1, 9, f);
  const uint64_t version = 1, n = seqs.size(), d = docs.size();
  std::fwrite(&version, 8, 1, f);
  std::fwrite(&code, 1, 1, f);
  std::fwrite(&n, 8, 1, f);
  std::fwrite(&d, 8, 1, f);
  std::fwrite(lens.data(), 4, lens.size(), f);
  std::fwrite(ptrs.data(), 8, ptrs.size(), f);
  std::fwrite(docs.data(), 8, docs.size(), f);
  std::fclose(f);
}

TEST_F(IndexedDatasetTest, ReadsIndependentlyWrittenInt32MultiSequenceDocs) {
  const std::string p = prefix("indep");
  // Three documents: [s0, s1], [s2], [s3, s4, s5] with ids above 65535.
  std::vector<std::vector<int64_t>> seqs = {{100000, 1}, {2, 3, 4}, {70000}, {5}, {}, {6, 7}};
  spec_write(p, 4, 4, seqs, {0, 2, 3, 6});
  auto ds = IndexedDataset::open(p);
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_EQ((*ds)->dtype(), TokenDtype::kInt32);
  EXPECT_EQ((*ds)->sequence_count(), 6);
  EXPECT_EQ((*ds)->document_count(), 3);
  EXPECT_EQ((*ds)->total_tokens(), 9);
  for (size_t i = 0; i < seqs.size(); ++i) {
    std::vector<int32_t> want(seqs[i].begin(), seqs[i].end());
    EXPECT_EQ(read_seq(**ds, static_cast<int64_t>(i)), want) << "sequence " << i;
  }
  EXPECT_EQ((*ds)->document_first_token(2), 6);
  EXPECT_EQ((*ds)->document_num_tokens(0), 5);
  EXPECT_EQ((*ds)->document_num_tokens(2), 3);
}

TEST_F(IndexedDatasetTest, WriterMultiSequenceDocumentsMatchIndependentWriter) {
  std::vector<std::vector<int64_t>> seqs = {{1, 2}, {3}, {4, 5, 6}, {7}};
  spec_write(prefix("ref"), 8, 2, seqs, {0, 2, 3, 4});
  auto w = IndexedDatasetWriter::create(prefix("mine"), dtype_for_vocab(50257));
  ASSERT_TRUE(w.is_ok());
  const int32_t a[] = {1, 2}, b[] = {3}, c[] = {4, 5, 6}, d[] = {7};
  ASSERT_TRUE((*w)->add_sequence(a, 2).is_ok());
  ASSERT_TRUE((*w)->add_sequence(b, 1).is_ok());
  ASSERT_TRUE((*w)->end_document().is_ok());
  ASSERT_TRUE((*w)->add_document(c, 3).is_ok());
  ASSERT_TRUE((*w)->add_sequence(d, 1).is_ok());  // finalize closes the open document
  ASSERT_TRUE((*w)->finalize().is_ok());
  EXPECT_EQ(read_all(prefix("mine") + ".idx"), read_all(prefix("ref") + ".idx"));
  EXPECT_EQ(read_all(prefix("mine") + ".bin"), read_all(prefix("ref") + ".bin"));
}

TEST_F(IndexedDatasetTest, DtypesRoundTripAndRangeChecks) {
  EXPECT_EQ(dtype_for_vocab(50257), TokenDtype::kUint16);
  EXPECT_EQ(dtype_for_vocab(65499), TokenDtype::kUint16);
  EXPECT_EQ(dtype_for_vocab(65500), TokenDtype::kInt32);
  EXPECT_EQ(dtype_for_vocab(128256), TokenDtype::kInt32);
  const std::vector<int32_t> toks = {0, 1, 65535, 127, 42};
  for (TokenDtype dt : {TokenDtype::kUint16, TokenDtype::kInt32, TokenDtype::kInt64, TokenDtype::kFloat32,
                        TokenDtype::kFloat64}) {
    const std::string p = prefix(std::string("dt_") + dtype_name(dt));
    auto w = IndexedDatasetWriter::create(p, dt);
    ASSERT_TRUE(w.is_ok());
    ASSERT_TRUE((*w)->add_document(toks.data(), toks.size()).is_ok());
    ASSERT_TRUE((*w)->finalize().is_ok());
    EXPECT_EQ(static_cast<size_t>(fs::file_size(p + ".bin")), toks.size() * dtype_size_bytes(dt));
    auto ds = IndexedDataset::open(p);
    ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
    EXPECT_EQ((*ds)->dtype(), dt);
    EXPECT_EQ(read_seq(**ds, 0), toks) << dtype_name(dt);
  }
  auto w = IndexedDatasetWriter::create(prefix("narrow"), TokenDtype::kUint16);
  ASSERT_TRUE(w.is_ok());
  const int32_t too_big[] = {65536};
  Status s = (*w)->add_document(too_big, 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("does not fit dtype uint16"), std::string::npos) << s.message();
}

TEST_F(IndexedDatasetTest, RefusesEveryCorruption) {
  expect_refused([](Bytes& b) { b[3] = 'X'; }, "bad magic");
  expect_refused([](Bytes& b) { b[9] = 2; }, "unsupported version 2");
  expect_refused([](Bytes& b) { b[17] = 9; }, "unknown dtype code 9");
  expect_refused([](Bytes& b) { b[17] = 0; }, "unknown dtype code 0");
  expect_refused([](Bytes& b) { b.pop_back(); }, "!= 34+12N+8D");
  expect_refused([](Bytes& b) { b.push_back(0); }, "!= 34+12N+8D");
  expect_refused([](Bytes& b) { b.resize(20); }, "shorter than the 34-byte header");
  expect_refused([](Bytes& b) { b[26] = 4; }, "!= 34+12N+8D");  // D=4 without the bytes
  expect_refused([](Bytes& b) { b[50] = 8; }, "not the running byte sum");   // ptr[1] = 8, want 6
  expect_refused([](Bytes& b) { b[74] = 1; }, "document_indices[D-1] = 1 != N = 2");
  expect_refused([](Bytes& b) { b[58] = 1; }, "document_indices[0] = 1");
  expect_refused([](Bytes& b) { b.pop_back(); }, "(truncated)", /*mutate_bin=*/true);
  expect_refused([](Bytes& b) { b.push_back(0); }, "(trailing bytes)", /*mutate_bin=*/true);
  // With the lengths and pointers consistent, a shorter .bin is still a truncation.
  expect_refused([](Bytes& b) { b.clear(); }, "size 0 bytes != 10 bytes", /*mutate_bin=*/true);
}

TEST_F(IndexedDatasetTest, MissingFilesAreNotFound) {
  auto ds = IndexedDataset::open(prefix("absent"));
  ASSERT_FALSE(ds.is_ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ds.status().message().find("absent.idx"), std::string::npos);
  write_all(prefix("nobin") + ".idx", kSpecIdx);
  ds = IndexedDataset::open(prefix("nobin"));
  ASSERT_FALSE(ds.is_ok());
  EXPECT_NE(ds.status().message().find("nobin.bin"), std::string::npos);
}

TEST_F(IndexedDatasetTest, MultimodalModesArrayChangesExpectedSize) {
  const std::string p = prefix("mm");
  Bytes idx = kSpecIdx;
  idx.push_back(0);
  idx.push_back(1);  // modes [0, 1]
  write_all(p + ".idx", idx);
  write_all(p + ".bin", kSpecBin);
  auto plain = IndexedDataset::open(p);
  ASSERT_FALSE(plain.is_ok());
  // Names the multimodal layout, and no option that does not exist (issue #14).
  EXPECT_NE(plain.status().message().find("multimodal index"), std::string::npos) << plain.status().message();
  EXPECT_EQ(plain.status().message().find("multimodal=true"), std::string::npos) << plain.status().message();
  auto mm = IndexedDataset::open(p, /*multimodal=*/true);
  ASSERT_TRUE(mm.is_ok()) << mm.status().to_string();
  EXPECT_EQ((*mm)->sequence_mode(1), 1);
}

TEST_F(IndexedDatasetTest, FinalizeIsAtomic) {
  const std::string p = prefix("atomic");
  // The temporaries are PREFIX.bin.tmp.* next to the target (core/output_file.h).
  auto has_tmp = [](const std::string& pre) {
    const fs::path path(pre + ".bin.tmp");
    for (const auto& e : fs::directory_iterator(path.parent_path()))
      if (e.path().filename().string().rfind(path.filename().string(), 0) == 0) return true;
    return false;
  };
  {
    auto w = IndexedDatasetWriter::create(p, TokenDtype::kUint16);
    ASSERT_TRUE(w.is_ok());
    const int32_t t[] = {1, 2, 3};
    ASSERT_TRUE((*w)->add_document(t, 3).is_ok());
    EXPECT_TRUE(has_tmp(p));
    EXPECT_FALSE(fs::exists(p + ".idx"));
    EXPECT_FALSE(fs::exists(p + ".bin"));
    EXPECT_FALSE(IndexedDataset::open(p).is_ok());
    ASSERT_TRUE((*w)->finalize().is_ok());
    EXPECT_TRUE(fs::exists(p + ".idx"));
    EXPECT_FALSE((*w)->add_document(t, 3).is_ok());  // closed
    EXPECT_FALSE((*w)->finalize().is_ok());
  }
  EXPECT_TRUE(IndexedDataset::open(p).is_ok());
  {  // abandoned without finalize: temporaries removed, nothing published
    auto w = IndexedDatasetWriter::create(prefix("abandoned"), TokenDtype::kInt32);
    ASSERT_TRUE(w.is_ok());
    const int32_t t[] = {1};
    ASSERT_TRUE((*w)->add_document(t, 1).is_ok());
  }
  EXPECT_FALSE(has_tmp(prefix("abandoned")));
  EXPECT_FALSE(fs::exists(prefix("abandoned") + ".idx"));
}

TEST_F(IndexedDatasetTest, EmptyDatasetOpens) {
  auto w = IndexedDatasetWriter::create(prefix("empty"), TokenDtype::kUint16);
  ASSERT_TRUE(w.is_ok());
  ASSERT_TRUE((*w)->finalize().is_ok());
  EXPECT_EQ(fs::file_size(prefix("empty") + ".idx"), 34u + 8u);
  auto ds = IndexedDataset::open(prefix("empty"));
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_EQ((*ds)->sequence_count(), 0);
  EXPECT_EQ((*ds)->document_count(), 0);
}

// The pread reader (aligned blocks through the LRU caches) reads what the
// mmap reader reads, for every dtype and for ranges across block boundaries.
TEST_F(IndexedDatasetTest, PreadReaderMatchesMmapForEveryDtype) {
  PreadConfig cfg;
  cfg.block_bytes = 4096;
  cfg.cache_bytes = 3 * 4096;
  set_pread_config(cfg);
  for (TokenDtype dt : {TokenDtype::kUint8, TokenDtype::kUint16, TokenDtype::kInt32, TokenDtype::kInt64,
                        TokenDtype::kFloat32}) {
    const std::string p = prefix(std::string("d") + dtype_name(dt));
    auto w = IndexedDatasetWriter::create(p, dt);
    ASSERT_TRUE(w.is_ok());
    std::vector<int32_t> toks(20000);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 7919) % 251);
    for (size_t at = 0; at < toks.size(); at += 997) {
      ASSERT_TRUE((*w)->add_document(toks.data() + at, std::min<size_t>(997, toks.size() - at)).is_ok());
    }
    ASSERT_TRUE((*w)->finalize().is_ok());
    auto m = IndexedDataset::open(p, ReadMode::kMmap);
    auto r = IndexedDataset::open(p, ReadMode::kPread);
    ASSERT_TRUE(m.is_ok() && r.is_ok()) << r.status().to_string();
    ASSERT_EQ((*r)->total_tokens(), 20000);
    for (int64_t first : {int64_t{0}, int64_t{1}, int64_t{4095}, int64_t{12345}, int64_t{19990}}) {
      const int64_t n = std::min<int64_t>(5000, 20000 - first);
      std::vector<int32_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      ASSERT_TRUE((*m)->read_tokens(first, n, a.data()).is_ok());
      ASSERT_TRUE((*r)->read_tokens(first, n, b.data()).is_ok());
      EXPECT_EQ(a, b) << dtype_name(dt) << " at " << first;
      EXPECT_TRUE(std::equal(a.begin(), a.end(), toks.begin() + first));
    }
  }
  set_pread_config(PreadConfig{});
}

}  // namespace
}  // namespace loom::data
