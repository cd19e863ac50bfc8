// Loader throughput on this machine (prints, does not assert): writes SHARDS
// indexed-dataset shards of random uint16 tokens (TOKENS each) into DIR, opens
// them (the read path LOOM_DATA_READ selects: mmap by default, or pread), and
// times the prefetching loader over BATCHES global batches of BATCH x SEQ
// tokens (one rank). Files are in the page cache after writing, so the figure
// is the loader's CPU cost per sample (sample lookup, token decode, copies),
// not the disk's or the network's.
// usage: loom_loader_bench DIR [shards=64] [tokens_per_shard=4000000] [seq=2048] [batch=32] [batches=200]
//        (an existing DIR with shard_00000.idx is reused as it is)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "exec/data/indexed_dataset.h"
#include "exec/data/loader.h"

using namespace loom;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [shards] [tokens_per_shard] [seq] [batch] [batches]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int shards = argc > 2 ? std::atoi(argv[2]) : 64;
  const int64_t tokens = argc > 3 ? std::atoll(argv[3]) : 4000000;
  const int64_t seq = argc > 4 ? std::atoll(argv[4]) : 2048;
  const int64_t batch = argc > 5 ? std::atoll(argv[5]) : 32;
  const int batches = argc > 6 ? std::atoi(argv[6]) : 200;
  std::filesystem::create_directories(dir);
  auto prefix = [&](int s) {
    char name[32];
    std::snprintf(name, sizeof name, "/shard_%05d", s);
    return dir + name;
  };
  if (!std::filesystem::exists(prefix(shards - 1) + ".idx")) {
    std::mt19937 rng(7);
    std::vector<int32_t> doc;
    for (int s = 0; s < shards; ++s) {
      auto w = data::IndexedDatasetWriter::create(prefix(s), data::TokenDtype::kUint16);
      if (!w.is_ok()) return std::fprintf(stderr, "%s\n", w.status().to_string().c_str()), 1;
      for (int64_t done = 0; done < tokens;) {
        const int64_t n = std::min<int64_t>(tokens - done, 200 + int64_t(rng() % 3000));  // documents of 200..3200
        doc.resize(size_t(n));
        for (auto& t : doc) t = int32_t(rng() % 50000);
        if (auto st = (*w)->add_document(doc.data(), doc.size()); !st.is_ok()) return 1;
        done += n;
      }
      if (auto st = (*w)->finalize(); !st.is_ok()) return std::fprintf(stderr, "%s\n", st.to_string().c_str()), 1;
    }
  }
  const char* mode = std::getenv("LOOM_DATA_READ");
  auto t_open = Clock::now();
  std::vector<std::shared_ptr<data::IndexedDataset>> ds;
  for (int s = 0; s < shards; ++s) {
    auto d = data::IndexedDataset::open(prefix(s));
    if (!d.is_ok()) return std::fprintf(stderr, "%s\n", d.status().to_string().c_str()), 1;
    ds.push_back(std::move(*d));
  }
  const double open_s = std::chrono::duration<double>(Clock::now() - t_open).count();
  auto loader = data::Loader::create(ds, {}, seq, batch, 0, 1, 1234, 2);
  if (!loader.is_ok()) return std::fprintf(stderr, "%s\n", loader.status().to_string().c_str()), 1;
  std::vector<int32_t> x(size_t(batch * seq)), y(size_t(batch * seq));
  for (int i = 0; i < 3; ++i) (void)(*loader)->next(x.data(), y.data());  // warm-up
  auto t0 = Clock::now();
  for (int i = 0; i < batches; ++i) {
    auto r = (*loader)->next(x.data(), y.data());
    if (!r.is_ok()) return std::fprintf(stderr, "%s\n", r.status().to_string().c_str()), 1;
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double samples = double(batches) * double(batch);
  std::printf("read=%s shards=%d tokens/shard=%lld seq=%lld batch=%lld: open %.3f s, %.0f samples/s, %.1f Mtokens/s\n",
              mode ? mode : "mmap(default)", shards, (long long)tokens, (long long)seq, (long long)batch, open_s,
              samples / s, samples * double(seq) / s / 1e6);
  return 0;
}
