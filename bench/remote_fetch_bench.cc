// Remote shard fetch figures (prints, does not assert): for one object URL
// (s3:// with the usual AWS_* / --endpoint settings, or http(s)://), the time
// to download it whole (fetch_to_cache, what training waited for before
// ranged reads), and with ranged reads the time until the first 8 KiB can be
// read (open_remote_source + read) and until the file is verified and
// published. Each measurement uses a fresh cache directory under DIR.
// usage: loom_remote_fetch_bench URL DIR [block_mb=8]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "exec/data/remote_cache.h"
#include "exec/data/remote_file.h"

using namespace loom;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 3) return std::fprintf(stderr, "usage: %s URL DIR [block_mb]\n", argv[0]), 2;
  const std::string url = argv[1], dir = argv[2];
  data::RemoteCacheOptions o;
  o.block_bytes = (argc > 3 ? std::atoll(argv[3]) : 8) << 20;
  o.timeout_s = 600;
  auto secs = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  std::filesystem::remove_all(dir);

  o.cache_dir = dir + "/whole";
  auto t0 = Clock::now();
  auto path = data::fetch_to_cache(url, o);
  if (!path.is_ok()) return std::fprintf(stderr, "%s\n", path.status().to_string().c_str()), 1;
  const double whole = secs(t0);
  const double mb = double(std::filesystem::file_size(*path)) / 1e6;

  o.cache_dir = dir + "/ranged";
  t0 = Clock::now();
  auto src = data::open_remote_source(url, o);
  if (!src.is_ok()) return std::fprintf(stderr, "%s\n", src.status().to_string().c_str()), 1;
  std::vector<uint8_t> buf(8192);
  if (auto st = (*src)->read(0, 8192, buf.data()); !st.is_ok()) return std::fprintf(stderr, "%s\n", st.to_string().c_str()), 1;
  const double first = secs(t0);
  auto rf = std::dynamic_pointer_cast<data::RemoteFile>(*src);
  if (rf) {
    if (auto st = rf->wait_complete(600); !st.is_ok()) return std::fprintf(stderr, "%s\n", st.to_string().c_str()), 1;
  }
  const double done = secs(t0);
  std::printf("%.0f MB: whole download %.2f s (%.0f MB/s); ranged, block %lld MiB: first 8 KiB after %.3f s, "
              "verified and published after %.2f s (%.0f MB/s)\n",
              mb, whole, mb / whole, (long long)(o.block_bytes >> 20), first, done, mb / done);
  std::filesystem::remove_all(dir);
  return 0;
}
