// GptDataset packing/epochs and the Loader: determinism, DP slicing, blending,
// cursor restore (also across dp sizes), prefetch shutdown, error propagation,
// and a throughput micro-benchmark (seq_len 1024).
//
// Independent truths used: documents are recognisable (doc d holds
// 1000*(d+1)+1, +2, ..., then EOD=0), so the stream stitched back from the
// samples can be parsed into documents and checked against the originals;
// a dp=1 loader's rows are the global batch that dp>1 ranks must tile.
#include "exec/data/loader.h"
#include "exec/data/byte_source.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

namespace loom::data {
namespace {

namespace fs = std::filesystem;
constexpr int32_t kEod = 0;
using Rows = std::vector<std::vector<int32_t>>;

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom_loader_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Documents of the given lengths (EOD included); token base shifts the ids.
  std::shared_ptr<IndexedDataset> make(const std::string& name, const std::vector<int>& lens, int32_t base = 0) {
    docs_[name].clear();
    const std::string p = (dir_ / name).string();
    auto w = IndexedDatasetWriter::create(p, TokenDtype::kInt32);
    EXPECT_TRUE(w.is_ok());
    for (size_t d = 0; d < lens.size(); ++d) {
      std::vector<int32_t> t;
      for (int j = 1; j < lens[d]; ++j) t.push_back(base + 1000 * static_cast<int32_t>(d + 1) + j);
      t.push_back(kEod);
      EXPECT_TRUE((*w)->add_document(t.data(), t.size()).is_ok());
      docs_[name].push_back(t);
    }
    EXPECT_TRUE((*w)->finalize().is_ok());
    auto ds = IndexedDataset::open(p);
    EXPECT_TRUE(ds.is_ok()) << ds.status().to_string();
    return std::shared_ptr<IndexedDataset>(std::move(ds).value());
  }

  // The first error `next` returns within `batches` batches of 8 tokens (ok: none).
  static Status first_error(Loader& l, int batches) {
    std::vector<int32_t> tok(8), tgt(8);
    for (int i = 0; i < batches; ++i) {
      auto r = l.next(tok.data(), tgt.data());
      if (!r.is_ok()) return r.status();
    }
    return Status::ok();
  }

  fs::path dir_;
  std::map<std::string, Rows> docs_;
};

std::unique_ptr<Loader> make_loader(std::vector<std::shared_ptr<IndexedDataset>> ds, std::vector<double> w,
                                    int64_t seq_len, int64_t gb, int rank, int dp, uint64_t seed, int prefetch = 2) {
  auto l = Loader::create(std::move(ds), std::move(w), seq_len, gb, rank, dp, seed, prefetch);
  EXPECT_TRUE(l.is_ok()) << l.status().to_string();
  return l.is_ok() ? std::move(l).value() : nullptr;
}

// `steps` batches; each row is inputs followed by the last target (seq_len+1 tokens).
Rows pull(Loader& l, int steps) {
  const size_t n = static_cast<size_t>(l.rows_per_rank() * l.seq_len());
  std::vector<int32_t> tok(n), tgt(n);
  Rows rows;
  for (int s = 0; s < steps; ++s) {
    auto r = l.next(tok.data(), tgt.data());
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    if (!r.is_ok()) return rows;
    for (int64_t i = 0; i < l.rows_per_rank(); ++i) {
      const int32_t* a = tok.data() + i * l.seq_len();
      const int32_t* b = tgt.data() + i * l.seq_len();
      for (int64_t j = 0; j + 1 < l.seq_len(); ++j) EXPECT_EQ(a[j + 1], b[j]) << "targets must be inputs shifted by one";
      std::vector<int32_t> row(a, a + l.seq_len());
      row.push_back(b[l.seq_len() - 1]);
      rows.push_back(row);
    }
  }
  return rows;
}

// Splits a token stream into documents at each EOD (a trailing partial is dropped).
Rows split_docs(const std::vector<int32_t>& stream, size_t begin, size_t end) {
  Rows out;
  std::vector<int32_t> cur;
  for (size_t i = begin; i < end; ++i) {
    cur.push_back(stream[i]);
    if (stream[i] == kEod) out.push_back(std::move(cur)), cur.clear();
  }
  return out;
}

// Stitches stream samples 0..S-1 of one GptDataset back into the token stream.
std::vector<int32_t> stitch(GptDataset& g, int64_t samples) {
  std::vector<Rows::value_type> by_stream(static_cast<size_t>(samples));
  std::vector<int32_t> buf(static_cast<size_t>(g.seq_len() + 1));
  for (int64_t i = 0; i < samples; ++i) {
    const int64_t s = g.stream_sample(i);
    EXPECT_TRUE(s >= 0 && s < samples) << "sample shuffle escaped its block";
    EXPECT_TRUE(by_stream[static_cast<size_t>(s)].empty()) << "stream sample " << s << " served twice";
    EXPECT_TRUE(g.sample(i, buf.data()).is_ok());
    by_stream[static_cast<size_t>(s)] = buf;
  }
  std::vector<int32_t> stream = by_stream[0];
  for (int64_t s = 1; s < samples; ++s) {
    const auto& row = by_stream[static_cast<size_t>(s)];
    EXPECT_EQ(row.front(), stream.back()) << "consecutive samples overlap by one token";
    stream.insert(stream.end(), row.begin() + 1, row.end());
  }
  return stream;
}

TEST_F(LoaderTest, PacksShuffledDocumentsAcrossBoundariesWithEod) {
  auto ds = make("a", {5, 9, 3, 12, 7, 4, 8, 6});  // T = 54 tokens
  auto g = GptDataset::create(ds, 8, 7);
  ASSERT_TRUE(g.is_ok());
  const int64_t w = (*g)->samples_per_block();
  EXPECT_EQ(w, 54 / 8);
  const std::vector<int32_t> stream = stitch(**g, w);  // covers tokens [0, 6*8+1) of epoch 0
  Rows got = split_docs(stream, 0, stream.size());
  ASSERT_GE(got.size(), 5u);
  Rows want = docs_["a"], seen;
  for (const auto& d : got) {
    EXPECT_NE(std::find(want.begin(), want.end(), d), want.end()) << "a packed document was altered";
    EXPECT_EQ(std::find(seen.begin(), seen.end(), d), seen.end()) << "a document repeated inside one epoch";
    seen.push_back(d);
  }
  EXPECT_NE(seen, Rows(want.begin(), want.begin() + static_cast<long>(seen.size()))) << "documents not shuffled";
}

TEST_F(LoaderTest, EpochsRepeatEveryDocumentInANewOrder) {
  auto ds = make("a", {5, 9, 3, 12, 7, 4, 8, 6});
  auto g = GptDataset::create(ds, 8, 11);
  ASSERT_TRUE(g.is_ok());
  const int64_t t = (*g)->tokens_per_epoch(), samples = 6 * 20;  // ~17 epochs' worth of samples
  const std::vector<int32_t> stream = stitch(**g, samples);
  ASSERT_EQ(stream.size(), static_cast<size_t>(samples * 8 + 1));
  Rows want = docs_["a"];
  std::sort(want.begin(), want.end());
  Rows first_order;
  int different_orders = 0;
  for (int64_t e = 0; (e + 1) * t <= static_cast<int64_t>(stream.size()); ++e) {
    Rows epoch = split_docs(stream, static_cast<size_t>(e * t), static_cast<size_t>((e + 1) * t));
    if (e == 0) first_order = epoch;
    different_orders += epoch != first_order;
    std::sort(epoch.begin(), epoch.end());
    EXPECT_EQ(epoch, want) << "epoch " << e << " is not a permutation of the documents";
  }
  EXPECT_GT(different_orders, 10);
}

TEST_F(LoaderTest, DeterministicPerSeedAndRanksTileTheGlobalBatch) {
  auto ds = make("a", {50, 90, 30, 120, 70, 40, 80, 60, 33, 21});
  const Rows global = pull(*make_loader({ds}, {}, 16, 8, 0, 1, 42), 6);
  EXPECT_EQ(pull(*make_loader({ds}, {}, 16, 8, 0, 1, 42), 6), global);
  EXPECT_NE(pull(*make_loader({ds}, {}, 16, 8, 0, 1, 43), 6), global);
  for (int dp : {2, 4, 8}) {
    std::vector<Rows> per_rank;
    for (int r = 0; r < dp; ++r) per_rank.push_back(pull(*make_loader({ds}, {}, 16, 8, r, dp, 42), 6));
    Rows tiled;
    for (int step = 0; step < 6; ++step) {
      for (int r = 0; r < dp; ++r) {
        const int rows = 8 / dp;
        tiled.insert(tiled.end(), per_rank[r].begin() + step * rows, per_rank[r].begin() + (step + 1) * rows);
      }
    }
    EXPECT_EQ(tiled, global) << "dp=" << dp;
  }
}

TEST_F(LoaderTest, BlendFollowsWeightsWithinOneSample) {
  const std::vector<double> w = {0.5, 0.3, 0.2};
  std::vector<int64_t> taken(3, 0);
  for (int64_t g = 0; g < 1000; ++g) {
    ++taken[static_cast<size_t>(blend_pick(w, taken, g))];
    for (size_t k = 0; k < 3; ++k) EXPECT_LE(std::abs(taken[k] - w[k] * (g + 1)), 1.0) << "k=" << k << " g=" << g;
  }
  // Through the loader: dataset k's tokens are >= 100000*k, so each row names its source.
  auto a = make("a", {40, 50, 60}, 0), b = make("b", {45, 55}, 100000), c = make("c", {70, 30}, 200000);
  auto l = make_loader({a, b, c}, {5, 3, 2}, 8, 10, 0, 1, 3);
  const Rows rows = pull(*l, 100);
  std::vector<int64_t> count(3, 0);
  for (const auto& r : rows) {
    const int32_t top = *std::max_element(r.begin(), r.end());
    ++count[static_cast<size_t>(top / 100000)];
  }
  for (size_t k = 0; k < 3; ++k) EXPECT_LE(std::abs(count[k] - w[k] * 1000), 1.0) << "dataset " << k;
  EXPECT_EQ(l->cursor().consumed_samples, 1000);
  EXPECT_EQ(l->cursor().per_dataset, count);
}

TEST_F(LoaderTest, CursorRestoreContinuesExactly) {
  auto a = make("a", {40, 50, 60, 17}), b = make("b", {45, 55, 9}, 100000);
  auto l = make_loader({a, b}, {0.7, 0.3}, 12, 6, 1, 2, 5, 3);
  pull(*l, 4);
  const LoaderCursor saved = l->cursor();
  EXPECT_EQ(saved.consumed_samples, 24);
  const Rows after = pull(*l, 5);
  auto fresh = make_loader({a, b}, {0.7, 0.3}, 12, 6, 1, 2, 5, 3);
  ASSERT_TRUE(fresh->restore(saved).is_ok());
  EXPECT_EQ(pull(*fresh, 5), after);
  // Rewinding the same loader (its prefetch is ahead) and a counts-free cursor.
  ASSERT_TRUE(l->restore(LoaderCursor{24, {}}).is_ok());
  EXPECT_EQ(l->cursor().per_dataset, saved.per_dataset);
  EXPECT_EQ(pull(*l, 5), after);
}

TEST_F(LoaderTest, RestoreFromDp4ToDp2ContinuesTheGlobalStream) {
  auto a = make("a", {40, 50, 60, 17, 80}), b = make("b", {45, 55, 9}, 100000);
  const Rows global = pull(*make_loader({a, b}, {2, 1}, 10, 8, 0, 1, 9), 7);
  LoaderCursor saved;
  for (int r = 0; r < 4; ++r) {
    auto l = make_loader({a, b}, {2, 1}, 10, 8, r, 4, 9);
    pull(*l, 3);
    if (r > 0) {
      EXPECT_EQ(l->cursor().per_dataset, saved.per_dataset) << "cursors must agree across ranks";
    }
    saved = l->cursor();
  }
  std::vector<Rows> halves;
  for (int r = 0; r < 2; ++r) {
    auto l = make_loader({a, b}, {2, 1}, 10, 8, r, 2, 9);
    ASSERT_TRUE(l->restore(saved).is_ok());
    halves.push_back(pull(*l, 4));
  }
  for (int step = 0; step < 4; ++step) {
    for (int r = 0; r < 2; ++r) {
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(halves[r][step * 4 + i], global[(3 + step) * 8 + r * 4 + i]) << "step " << step << " rank " << r;
      }
    }
  }
}

TEST_F(LoaderTest, DestroyMidStreamJoinsPrefetchThread) {
  auto a = make("a", {400, 500, 600});
  for (int i = 0; i < 50; ++i) {
    auto l = make_loader({a}, {}, 64, 16, 0, 1, static_cast<uint64_t>(i), 1 + i % 4);
    if (i % 2 == 0) pull(*l, 1 + i % 3);
    // destroyed here with the queue full and the producer blocked on it
  }
  SUCCEED();
}

TEST_F(LoaderTest, VocabGuardTracksLargestTokenServed) {
  auto a = make("a", {40, 50}, 0);
  auto l = make_loader({a}, {}, 8, 2, 0, 1, 1);
  EXPECT_EQ(l->vocab_guard_max_token(), -1);
  const Rows rows = pull(*l, 3);
  int32_t top = -1;
  for (const auto& r : rows) top = std::max(top, *std::max_element(r.begin(), r.end()));
  EXPECT_EQ(l->vocab_guard_max_token(), top);
}

// A negative id (a signed shard written by something other than a tokenizer)
// is no vocabulary's: refused with the sample named, never served as a zero
// embedding. The vocab guard alone tracks only the largest id.
TEST_F(LoaderTest, NegativeTokenIdIsRefused) {
  const std::string p = (dir_ / "neg").string();
  auto w = IndexedDatasetWriter::create(p, TokenDtype::kInt32);
  ASSERT_TRUE(w.is_ok());
  std::vector<int32_t> t(40, 5);
  t[17] = -1;
  t.back() = kEod;
  ASSERT_TRUE((*w)->add_document(t.data(), t.size()).is_ok());
  ASSERT_TRUE((*w)->finalize().is_ok());
  auto ds = IndexedDataset::open(p);
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  auto l = make_loader({std::shared_ptr<IndexedDataset>(std::move(ds).value())}, {}, 8, 1, 0, 1, 2);
  const Status err = first_error(*l, 20);
  ASSERT_FALSE(err.is_ok()) << "the negative id was served";
  EXPECT_NE(err.message().find("token id -1"), std::string::npos) << err.message();
  EXPECT_NE(err.message().find("negative"), std::string::npos) << err.message();
}

TEST_F(LoaderTest, RefusesBadArguments) {
  auto a = make("a", {40, 50});
  auto bad = [&](std::vector<std::shared_ptr<IndexedDataset>> ds, std::vector<double> w, int64_t seq, int64_t gb,
                 int rank, int dp, int prefetch, const std::string& why) {
    auto l = Loader::create(std::move(ds), std::move(w), seq, gb, rank, dp, 1, prefetch);
    ASSERT_FALSE(l.is_ok()) << why;
    EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(l.status().message().find(why), std::string::npos) << l.status().message();
  };
  bad({}, {}, 8, 4, 0, 1, 2, "no datasets");
  bad({a}, {1, 2}, 8, 4, 0, 1, 2, "2 weights for 1 datasets");
  bad({a}, {0}, 8, 4, 0, 1, 2, "must be finite and > 0");
  bad({a}, {}, 0, 4, 0, 1, 2, "seq_len=0");
  bad({a}, {}, 8, 6, 0, 4, 2, "not divisible by dp=4");
  bad({a}, {}, 8, 4, 4, 4, 2, "dp_rank=4");
  bad({a}, {}, 8, 4, 0, 1, 0, "prefetch_batches");
  bad({nullptr}, {}, 8, 4, 0, 1, 2, "null");
  auto l = make_loader({a}, {}, 8, 4, 0, 1, 1);
  EXPECT_FALSE(l->restore(LoaderCursor{4, {1, 3}}).is_ok());  // 2 counts for 1 dataset
  EXPECT_FALSE(l->restore(LoaderCursor{4, {3}}).is_ok());     // counts do not sum
}

TEST_F(LoaderTest, PrefetchErrorSurfacesInNext) {
  // int64 tokens written directly (the writer API takes int32): 2^40 is no int32 id.
  const std::string p = (dir_ / "wide").string();
  std::vector<int64_t> toks(64, 7);
  toks[40] = int64_t{1} << 40;
  std::FILE* f = std::fopen((p + ".bin").c_str(), "wb");
  std::fwrite(toks.data(), 8, toks.size(), f);
  std::fclose(f);
  f = std::fopen((p + ".idx").c_str(), "wb");
  const uint64_t version = 1, n = 1, d = 2;
  const uint8_t code = 5;
  const int32_t len = 64;
  const int64_t arrays[3] = {0, 0, 1};  // pointer, doc indices
  std::fwrite("MMIDIDX\0\0", 1, 9, f);
  std::fwrite(&version, 8, 1, f);
  std::fwrite(&code, 1, 1, f);
  std::fwrite(&n, 8, 1, f);
  std::fwrite(&d, 8, 1, f);
  std::fwrite(&len, 4, 1, f);
  std::fwrite(arrays, 8, 3, f);
  std::fclose(f);
  auto ds = IndexedDataset::open(p);
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  auto l = make_loader({std::shared_ptr<IndexedDataset>(std::move(ds).value())}, {}, 8, 1, 0, 1, 3);
  std::vector<int32_t> tok(8), tgt(8);
  const Status err = first_error(*l, 20);
  ASSERT_FALSE(err.is_ok()) << "the bad token was never reached";
  EXPECT_NE(err.message().find("is not an int32 token id"), std::string::npos) << err.message();
  EXPECT_NE(err.message().find("wide.bin"), std::string::npos) << err.message();
  EXPECT_FALSE(l->next(tok.data(), tgt.data()).is_ok()) << "errors are sticky";
}

TEST_F(LoaderTest, BenchmarkSeqLen1024) {
  const std::string p = (dir_ / "bench").string();
  auto w = IndexedDatasetWriter::create(p, TokenDtype::kUint16);
  ASSERT_TRUE(w.is_ok());
  std::mt19937 rng(1);
  std::vector<int32_t> doc;
  for (int d = 0; d < 4000; ++d) {  // ~4M tokens, docs of 100..2000 tokens
    doc.resize(100 + rng() % 1900);
    for (auto& t : doc) t = static_cast<int32_t>(rng() % 50257);
    ASSERT_TRUE((*w)->add_document(doc.data(), doc.size()).is_ok());
  }
  ASSERT_TRUE((*w)->finalize().is_ok());
  auto ds = IndexedDataset::open(p);
  ASSERT_TRUE(ds.is_ok());
  auto l = make_loader({std::shared_ptr<IndexedDataset>(std::move(ds).value())}, {}, 1024, 32, 0, 1, 1, 4);
  std::vector<int32_t> tok(32 * 1024), tgt(32 * 1024);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t samples = 0;
  double waited_s = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 1.0) {
    auto r = l->next(tok.data(), tgt.data());
    ASSERT_TRUE(r.is_ok());
    waited_s += *r;
    samples += 32;
  }
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[bench] loader seq_len=1024 global_batch=32 dp=1: %.0f samples/s (%.1f M tokens/s), waited %.0f%%\n",
              samples / elapsed_s, samples * 1024 / elapsed_s / 1e6, 100 * waited_s / elapsed_s);
  EXPECT_GT(samples, 0);
}

// ---- the pread reader (parallel file systems) ---------------------------------------

// Many small shards under a low open-file limit: the pread reader keeps at most
// max_open_files of them open (an LRU closes the others) and serves exactly the
// samples the mmap reader serves.
TEST_F(LoaderTest, PreadReaderBoundsOpenFilesAndMatchesMmap) {
  constexpr int kShards = 300;
  std::mt19937 rng(11);
  std::vector<std::string> prefixes;
  for (int s = 0; s < kShards; ++s) {
    const std::string p = (dir_ / ("shard_" + std::to_string(s))).string();
    auto w = IndexedDatasetWriter::create(p, TokenDtype::kUint16);
    ASSERT_TRUE(w.is_ok());
    for (int d = 0; d < 6; ++d) {
      std::vector<int32_t> t(50 + rng() % 900);
      for (auto& x : t) x = 1 + static_cast<int32_t>(rng() % 60000);
      t.back() = kEod;
      ASSERT_TRUE((*w)->add_document(t.data(), t.size()).is_ok());
    }
    ASSERT_TRUE((*w)->finalize().is_ok());
    prefixes.push_back(p);
  }
  // Lower RLIMIT_NOFILE to 64 for this process (restored at the end): 300
  // shards opened the old way (two files each, kept open) could not fit.
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = 64;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  PreadConfig cfg;
  cfg.max_open_files = 32;
  cfg.block_bytes = 512;  // blocks smaller than a sample: reads straddle blocks, short ones go direct
  cfg.cache_bytes = 64 * 1024;  // and the LRU evicts
  set_pread_config(cfg);
  reset_pread_stats();

  std::vector<std::shared_ptr<IndexedDataset>> mm, pr;
  for (const std::string& p : prefixes) {
    auto a = IndexedDataset::open(p, ReadMode::kMmap);
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    mm.push_back(std::move(a).value());
    auto b = IndexedDataset::open(p, ReadMode::kPread);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    pr.push_back(std::move(b).value());
  }
  auto lm = make_loader(mm, {}, 128, 16, 0, 1, 5);
  auto lp = make_loader(pr, {}, 128, 16, 0, 1, 5);
  ASSERT_TRUE(lm && lp);
  const Rows a = pull(*lm, 40), b = pull(*lp, 40);
  const PreadStats st = pread_stats();
  ::setrlimit(RLIMIT_NOFILE, &old);
  set_pread_config(PreadConfig{});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 40u * 16u);
  EXPECT_LE(st.peak_open_files, 32);
  EXPECT_GT(st.opens, 32);  // files were closed and opened again
  EXPECT_GT(st.preads, 0);
  EXPECT_GT(st.cache_hits, 0);
}

// The pread reader reopens a file by name after its open-file bound closed
// it: a file replaced meanwhile (loom preprocess renames its outputs into
// place) is refused, never read with the old file's index.
TEST_F(LoaderTest, PreadReaderRefusesAFileReplacedWhileClosed) {
  const std::string a = (dir_ / "a.bin").string(), b = (dir_ / "b.bin").string();
  std::ofstream(a) << std::string(8192, 'a');
  std::ofstream(b) << std::string(8192, 'b');
  PreadConfig cfg;
  cfg.max_open_files = 1;
  cfg.cache_bytes = 0;
  set_pread_config(cfg);
  auto sa = open_pread_source(a), sb = open_pread_source(b);
  ASSERT_TRUE(sa.is_ok() && sb.is_ok());
  uint8_t buf[16];
  ASSERT_TRUE((*sa)->read(0, 16, buf).is_ok());
  ASSERT_TRUE((*sb)->read(0, 16, buf).is_ok());  // closes a
  ASSERT_TRUE((*sb)->read(100, 16, buf).is_ok());
  const std::string fresh = (dir_ / "a.new").string();
  std::ofstream(fresh) << std::string(8192, 'z');
  ASSERT_EQ(std::rename(fresh.c_str(), a.c_str()), 0);
  Status st = (*sa)->read(0, 16, buf);
  set_pread_config(PreadConfig{});
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.to_string();
  EXPECT_NE(st.message().find("replaced"), std::string::npos) << st.message();
}

TEST_F(LoaderTest, ReadModeFromEnvironment) {
  ::setenv("LOOM_DATA_READ", "pread", 1);
  EXPECT_EQ(*read_mode_from_env(), ReadMode::kPread);
  ::setenv("LOOM_DATA_READ", "mmap", 1);
  EXPECT_EQ(*read_mode_from_env(), ReadMode::kMmap);
  ::setenv("LOOM_DATA_READ", "direct", 1);
  auto bad = read_mode_from_env();
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(IndexedDataset::open((dir_ / "x").string()).status().code(), StatusCode::kInvalidArgument);
  ::unsetenv("LOOM_DATA_READ");
  EXPECT_EQ(*read_mode_from_env(), ReadMode::kMmap);
}

}  // namespace
}  // namespace loom::data
