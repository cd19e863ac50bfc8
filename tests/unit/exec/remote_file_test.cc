// Ranged reads of shards still downloading (exec/data/remote_file.h): a
// scripted S3-like server on loopback (held ranges, replaced objects, a
// publisher racing the open) and moto for checksummed ranged reads.
#include <gtest/gtest.h>

#include "tests/support/remote_test_support.h"

namespace loom::data {
namespace {
using namespace remote_test;

// ---- ranged reads of shards still downloading (remote_file.h) ----------------------

// "bytes=A-B" of a request head, or {-1, -1}.
std::pair<int64_t, int64_t> requested_range(const std::string& req) {
  size_t p = req.find("\r\nRange: bytes=");
  if (p == std::string::npos) return {-1, -1};
  long long a = -1, b = -1;
  std::sscanf(req.c_str() + p + 15, "%lld-%lld", &a, &b);
  return {a, b};
}

// An S3-like answer to a GET of `data` with ETag `etag`: 206 for a Range
// (416 past the end), 412 when If-Match names another ETag.
std::string serve_object(const std::string& req, const std::string& data, const std::string& etag) {
  if (size_t m = req.find("\r\nIf-Match: "); m != std::string::npos) {
    if (req.compare(m + 12, etag.size(), etag) != 0) return http_response("412 Precondition Failed", "", "");
  }
  auto [a, b] = requested_range(req);
  if (a < 0) return http_response("200 OK", "ETag: " + etag + "\r\n", data);
  if (a >= static_cast<int64_t>(data.size())) return http_response("416 Range Not Satisfiable", "", "");
  b = std::min<int64_t>(b, static_cast<int64_t>(data.size()) - 1);
  return http_response("206 Partial Content",
                       "ETag: " + etag + "\r\nContent-Range: bytes " + std::to_string(a) + "-" + std::to_string(b) +
                           "/" + std::to_string(data.size()) + "\r\n",
                       data.substr(static_cast<size_t>(a), static_cast<size_t>(b - a + 1)));
}

class RemoteFileTest : public RemoteCacheTest {
 protected:
  void SetUp() override {
    RemoteCacheTest::SetUp();
    if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
    opts_.block_bytes = 64 * 1024;
  }
  std::shared_ptr<RemoteFile> open_file(const std::string& url, bool prefetch, const std::string& xxh = "") {
    auto src = open_remote_source(url, opts_, xxh, ReadMode::kMmap, prefetch);
    EXPECT_TRUE(src.is_ok()) << src.status().to_string();
    if (!src.is_ok()) return nullptr;
    return std::dynamic_pointer_cast<RemoteFile>(*src);
  }
  std::string read_range(const ByteSource& f, int64_t off, int64_t n) {
    std::string out(static_cast<size_t>(n), '\0');
    Status st = f.read(off, n, reinterpret_cast<uint8_t*>(out.data()));
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    return out;
  }
};

// Deterministic "training starts before the shard has arrived": the server
// answers the first block and then holds every later range until released;
// the first read returns while the object is still incomplete.
TEST_F(RemoteFileTest, FirstReadReturnsBeforeTheObjectHasArrived) {
  const std::string data = random_bytes(5 * 64 * 1024 + 100, 21);
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool open_gate = false;
  std::atomic<int> held{0};
  FakeHttpServer server([&](const std::string& req) {
    if (requested_range(req).first >= 64 * 1024) {
      ++held;
      std::unique_lock<std::mutex> lock(gate_mu);
      gate_cv.wait(lock, [&] { return open_gate; });
    }
    return serve_object(req, data, "\"v1\"");
  });
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/shards/s.bin";
  auto release = [&] {
    std::lock_guard<std::mutex> lock(gate_mu);
    open_gate = true;
    gate_cv.notify_all();
  };
  {
    auto f = open_file(url, /*prefetch=*/true, xxh64_hex(data));
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->size(), static_cast<int64_t>(data.size()));
    EXPECT_EQ(f->blocks(), 6);
    EXPECT_TRUE(read_range(*f, 10, 1000) == data.substr(10, 1000));
    // The download is held at block 1: incomplete, nothing published.
    for (int i = 0; i < 200 && held == 0; ++i) std::this_thread::sleep_for(milliseconds(10));
    EXPECT_EQ(held.load(), 1);
    EXPECT_FALSE(f->complete());
    EXPECT_LT(f->blocks_present(), f->blocks());
    EXPECT_FALSE(fs::exists(cache_path_for(url, opts_.cache_dir)));
    release();
    Status st = f->wait_complete(20);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_TRUE(read_range(*f, 0, f->size()) == data);
  }
  release();
  const std::string published = cache_path_for(url, opts_.cache_dir);
  EXPECT_TRUE(read_file(published) == data);
  EXPECT_FALSE(fs::exists(published + ".part"));
  EXPECT_FALSE(fs::exists(published + ".map"));
  // A later open maps the published file: no RemoteFile, no request.
  const int before = server.requests();
  auto again = open_remote_source(url, opts_, xxh64_hex(data));
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(std::dynamic_pointer_cast<RemoteFile>(*again), nullptr);
  EXPECT_NE((*again)->data(), nullptr);
  EXPECT_EQ(server.requests(), before);
}

// Deterministic "another rank of the node publishes while this one opens":
// the object is absent when this open looks, and the node's downloader
// publishes it (the file in place, its .part renamed and its .map removed)
// while this open's size probe is in flight. The open then maps the published
// file and leaves no .map or .part of its own behind (it did before
// 3db5647: init opened the map path with O_CREAT after the other process had
// removed it, and kept the empty file).
TEST_F(RemoteFileTest, OpenRacingAnotherPublisherLeavesNoMapBehind) {
  const std::string data = random_bytes(3 * 64 * 1024 + 11, 25);
  std::string published;
  std::atomic<int> probes{0};
  FakeHttpServer server([&](const std::string& req) {
    if (probes++ == 0) {  // the other process publishes now
      std::ofstream(published, std::ios::binary) << data;
    }
    return serve_object(req, data, "\"v1\"");
  });
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/race/s.bin";
  published = cache_path_for(url, opts_.cache_dir);
  fs::create_directories(opts_.cache_dir);
  ASSERT_FALSE(fs::exists(published));
  auto src = open_remote_source(url, opts_, xxh64_hex(data), ReadMode::kMmap, /*prefetch=*/true);
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  EXPECT_EQ(std::dynamic_pointer_cast<RemoteFile>(*src), nullptr);  // the published file, mapped
  ASSERT_NE((*src)->data(), nullptr);
  EXPECT_TRUE(std::string(reinterpret_cast<const char*>((*src)->data()), data.size()) == data);
  EXPECT_EQ(server.requests(), 1);  // the probe only: nothing downloaded again
  EXPECT_FALSE(fs::exists(published + ".map"));
  EXPECT_FALSE(fs::exists(published + ".part"));
}

// An interrupted download resumes: blocks marked in the map are not fetched
// again; a replaced object (another ETag) starts over, and one replaced while
// being read fails (If-Match, HTTP 412) instead of mixing versions.
TEST_F(RemoteFileTest, ResumesAfterInterruptionAndNoticesAReplacedObject) {
  std::string data = random_bytes(4 * 64 * 1024 + 5, 22);
  std::string etag = "\"v1\"";
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  FakeHttpServer server([&](const std::string& req) {
    std::lock_guard<std::mutex> lock(mu);
    ranges.push_back(requested_range(req));
    return serve_object(req, data, etag);
  });
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/r.bin";
  auto block_fetches = [&](int64_t block) {
    std::lock_guard<std::mutex> lock(mu);
    return std::count(ranges.begin(), ranges.end(), std::make_pair(block * 65536, block * 65536 + 65535));
  };
  {
    auto f = open_file(url, /*prefetch=*/false);
    ASSERT_NE(f, nullptr);
    EXPECT_TRUE(read_range(*f, 65536 * 2 + 7, 100) == data.substr(65536 * 2 + 7, 100));
    EXPECT_TRUE(read_range(*f, 0, 10) == data.substr(0, 10));
    EXPECT_EQ(f->blocks_present(), 2);
  }  // "killed" here: .part and .map stay
  const std::string published = cache_path_for(url, opts_.cache_dir);
  EXPECT_TRUE(fs::exists(published + ".part"));
  {
    auto f = open_file(url, /*prefetch=*/true);
    ASSERT_NE(f, nullptr);
    ASSERT_TRUE(f->wait_complete(20).is_ok());
    EXPECT_TRUE(read_range(*f, 0, f->size()) == data);
  }
  for (int64_t b = 0; b < 4; ++b) EXPECT_EQ(block_fetches(b), 1) << "block " << b;
  EXPECT_TRUE(read_file(published) == data);

  // Replaced between runs: the old map's ETag no longer matches; all blocks anew.
  const std::string url2 = "http://127.0.0.1:" + std::to_string(server.port()) + "/r2.bin";
  {
    auto f = open_file(url2, false);
    ASSERT_NE(f, nullptr);
    read_range(*f, 0, 10);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    data = random_bytes(data.size(), 23);
    etag = "\"v2\"";
  }
  {
    auto f = open_file(url2, true);
    ASSERT_NE(f, nullptr);
    ASSERT_TRUE(f->wait_complete(20).is_ok());
    EXPECT_TRUE(read_range(*f, 0, f->size()) == data);
  }
  // Replaced while being read: the next block's If-Match fails.
  const std::string url3 = "http://127.0.0.1:" + std::to_string(server.port()) + "/r3.bin";
  auto f = open_file(url3, false);
  ASSERT_NE(f, nullptr);
  read_range(*f, 0, 10);
  {
    std::lock_guard<std::mutex> lock(mu);
    etag = "\"v3\"";
  }
  std::string out(100, '\0');
  Status st = f->read(65536, 100, reinterpret_cast<uint8_t*>(out.data()));
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.to_string();
  EXPECT_NE(st.message().find("changed"), std::string::npos) << st.message();
}

// Against moto: random ranged reads equal the object; the assembled file is
// verified (ETag MD5, manifest XXH64) and published; a wrong XXH64 is an
// error naming the URL, every later read fails with it, and nothing stays.
TEST_F(MotoTest, RangedReadsMatchTheObjectAndAChecksumMismatchFailsReads) {
  opts_.block_bytes = 64 * 1024;
  const std::string data = random_bytes(1024 * 1024 + 3, 24);
  const std::string url = "s3://loom-data/ranged/shard 0.bin";
  ASSERT_TRUE(put_to_remote(url, data, opts_).is_ok());
  {
    auto src = open_remote_source(url, opts_, xxh64_hex(data), ReadMode::kMmap, /*prefetch=*/false);
    ASSERT_TRUE(src.is_ok()) << src.status().to_string();
    auto f = std::dynamic_pointer_cast<RemoteFile>(*src);
    ASSERT_NE(f, nullptr);
    std::mt19937 rng(3);
    for (int i = 0; i < 100; ++i) {
      const int64_t off = rng() % data.size(), n = std::min<int64_t>(1 + rng() % 200000, data.size() - off);
      std::string out(static_cast<size_t>(n), '\0');
      ASSERT_TRUE(f->read(off, n, reinterpret_cast<uint8_t*>(out.data())).is_ok());
      ASSERT_TRUE(out == data.substr(static_cast<size_t>(off), static_cast<size_t>(n))) << "at " << off;
    }
    EXPECT_LT(f->blocks_present(), f->blocks() + 1);
  }
  {
    auto src = open_remote_source(url, opts_, xxh64_hex(data));
    ASSERT_TRUE(src.is_ok()) << src.status().to_string();
    auto f = std::dynamic_pointer_cast<RemoteFile>(*src);
    ASSERT_NE(f, nullptr);
    ASSERT_TRUE(f->wait_complete(30).is_ok());
  }
  EXPECT_TRUE(read_file(cache_path_for(url, opts_.cache_dir)) == data);
  // The object re-published under a new checksum: read anew, not the cached copy.
  {
    const std::string data2 = random_bytes(data.size(), 25);
    ASSERT_TRUE(put_to_remote(url, data2, opts_).is_ok());
    auto src = open_remote_source(url, opts_, xxh64_hex(data2));
    ASSERT_TRUE(src.is_ok()) << src.status().to_string();
    std::string out(100, '\0');
    ASSERT_TRUE((*src)->read(5000, 100, reinterpret_cast<uint8_t*>(out.data())).is_ok());
    EXPECT_TRUE(out == data2.substr(5000, 100)) << "read the cached old version";
  }

  const std::string bad_url = "s3://loom-data/ranged/shard 1.bin";
  ASSERT_TRUE(put_to_remote(bad_url, data, opts_).is_ok());
  auto src = open_remote_source(bad_url, opts_, "0123456789abcdef");
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  auto f = std::dynamic_pointer_cast<RemoteFile>(*src);
  ASSERT_NE(f, nullptr);
  Status st = f->wait_complete(30);
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.to_string();
  EXPECT_NE(st.message().find("checksum mismatch"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(bad_url), std::string::npos) << st.message();
  std::string out(10, '\0');
  EXPECT_EQ(f->read(0, 10, reinterpret_cast<uint8_t*>(out.data())).code(), StatusCode::kIoError);
  const std::string cached = cache_path_for(bad_url, opts_.cache_dir);
  EXPECT_FALSE(fs::exists(cached));
  EXPECT_FALSE(fs::exists(cached + ".part"));
  EXPECT_FALSE(fs::exists(cached + ".map"));
}

}  // namespace
}  // namespace loom::data
