#include "exec/data/remote_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#ifdef LOOM_HAVE_CURL
#include <openssl/evp.h>
#endif

namespace loom::data {
namespace fs = std::filesystem;

#ifdef LOOM_HAVE_CURL
namespace {

constexpr int64_t kHeaderBytes = 4096;  // of the .map file; block i's byte is at kHeaderBytes + i

std::string errno_text() { return std::strerror(errno); }

Status pwrite_full(int fd, const char* data, size_t n, int64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::pwrite(fd, data + done, n - done, offset + static_cast<int64_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return io_error(path + ": write failed: " + errno_text());
    done += static_cast<size_t>(w);
  }
  return Status::ok();
}

Status pread_full(int fd, uint8_t* out, int64_t n, int64_t offset, const std::string& path) {
  int64_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, out + done, static_cast<size_t>(n - done), offset + done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return io_error(path + ": read failed at byte " + std::to_string(offset + done));
    done += r;
  }
  return Status::ok();
}

// An OFD lock on [start, start+len) of fd (per open file description: it
// excludes other processes and other descriptions, not this one's threads).
int ofd_lock(int fd, short type, int64_t start, int64_t len) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = start;
  fl.l_len = len;
  int rc;
  do rc = ::fcntl(fd, F_OFD_SETLKW, &fl);
  while (rc != 0 && errno == EINTR);
  return rc;
}

std::string header_text(int64_t size, int64_t block, const std::string& etag) {
  return "loom-remote-blocks 1\nsize " + std::to_string(size) + "\nblock " + std::to_string(block) + "\netag " +
         etag + "\n";
}

// Process-wide bound on background downloads.
class Slots {
 public:
  void acquire(int limit) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return used_ < std::max(1, limit); });
    ++used_;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --used_;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int used_ = 0;
};
Slots& slots() {
  static Slots* s = new Slots();
  return *s;
}

bool same_file(const std::string& path, int fd) {
  struct stat a {}, b {};
  return ::stat(path.c_str(), &a) == 0 && ::fstat(fd, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

class RemoteBlockFile final : public RemoteFile {
 public:
  ~RemoteBlockFile() override {
    stop_ = true;
    if (prefetch_.joinable()) prefetch_.join();
    if (const uint8_t* m = mapped_.load(); m != nullptr) ::munmap(const_cast<uint8_t*>(m), static_cast<size_t>(size_));
    if (part_fd_ >= 0) ::close(part_fd_);
    if (map_fd_ >= 0) ::close(map_fd_);
    if (lock_fd_ >= 0) ::close(lock_fd_);
  }

  // Sets up .part/.map for an object of `size` bytes with `etag` (resuming
  // what a matching map holds). Returns false in *published when another
  // process published the object meanwhile (then the caller maps it).
  Status init(const std::string& url, const RemoteCacheOptions& opts, const std::string& expected_xxh64,
              int64_t size, const std::string& etag, bool* published) {
    url_ = url;
    opts_ = opts;
    expected_ = expected_xxh64;
    size_ = size;
    block_ = std::max<int64_t>(4096, opts.block_bytes);
    etag_ = etag;
    nblocks_ = (size_ + block_ - 1) / block_;
    final_ = cache_path_for(url, opts.cache_dir);
    part_path_ = final_ + ".part";
    map_path_ = final_ + ".map";
    lock_path_ = final_ + ".lock";
    map_fd_ = ::open(map_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (map_fd_ < 0) return io_error(map_path_ + ": cannot open the block map: " + errno_text());
    if (ofd_lock(map_fd_, F_WRLCK, 0, kHeaderBytes) != 0) return io_error(map_path_ + ": lock failed: " + errno_text());
    Status st = init_locked(published);
    ofd_lock(map_fd_, F_UNLCK, 0, kHeaderBytes);
    return st;
  }

  void start_prefetch() {
    prefetch_ = std::thread([this] { run_prefetch(); });
  }

  int64_t size() const override { return size_; }
  const std::string& name() const override { return url_; }
  int64_t blocks() const override { return nblocks_; }
  int64_t blocks_present() const override { return present_.load(); }
  bool complete() const override { return mapped_.load() != nullptr; }

  Status wait_complete(double timeout_s) const override {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      if (Status f = failure(); !f.is_ok()) return f;
      if (complete()) return Status::ok();
      if (std::chrono::steady_clock::now() > end)
        return {StatusCode::kTimeout, url_ + ": not complete after " + std::to_string(timeout_s) + " s"};
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  Status read(int64_t offset, int64_t length, uint8_t* out) const override {
    if (offset < 0 || length < 0 || offset + length > size_) return invalid_argument(url_ + ": read past the end");
    if (Status f = failure(); !f.is_ok()) return f;
    if (const uint8_t* m = mapped_.load(std::memory_order_acquire); m != nullptr) {
      if (length > 0) std::memcpy(out, m + offset, static_cast<size_t>(length));
      return Status::ok();
    }
    if (length == 0) return Status::ok();
    for (int64_t b = offset / block_; b <= (offset + length - 1) / block_; ++b) {
      LOOM_RETURN_IF_ERROR(const_cast<RemoteBlockFile*>(this)->ensure_block(b));
    }
    return pread_full(part_fd_, out, length, offset, part_path_);
  }

 private:
  Status init_locked(bool* published) {
    *published = false;
    if (::access(final_.c_str(), F_OK) == 0) {
      // Published by another process (it renamed .part and removed the map
      // after init opened the path, which created it again): the map is
      // ours and empty, and nothing needs it. Without this a rank that
      // starts while its node's downloader publishes leaves a stray .map.
      if (same_file(map_path_, map_fd_)) ::unlink(map_path_.c_str());
      *published = true;
      return Status::ok();
    }
    std::string header(static_cast<size_t>(kHeaderBytes), '\0');
    ssize_t got = ::pread(map_fd_, header.data(), header.size(), 0);
    const std::string want = header_text(size_, block_, etag_);
    bool resume = got == kHeaderBytes && header.compare(0, want.size(), want) == 0 && header[want.size()] == '\0';
    part_fd_ = ::open(part_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (part_fd_ < 0) return io_error(part_path_ + ": cannot open: " + errno_text());
    struct stat st {};
    if (::fstat(part_fd_, &st) != 0 || st.st_size != size_) resume = false;  // a lost or foreign .part
    if (!resume) {
      // A new object, or one replaced since the map was written: start over.
      if (::ftruncate(map_fd_, 0) != 0 || ::ftruncate(map_fd_, kHeaderBytes + nblocks_) != 0 ||
          ::ftruncate(part_fd_, 0) != 0 || ::ftruncate(part_fd_, size_) != 0)
        return io_error(map_path_ + ": cannot size the block map or the .part file: " + errno_text());
      LOOM_RETURN_IF_ERROR(pwrite_full(map_fd_, want.data(), want.size(), 0, map_path_));
      if (::fdatasync(map_fd_) != 0) return io_error(map_path_ + ": fdatasync failed: " + errno_text());
    }
    have_.reset(new std::atomic<uint8_t>[static_cast<size_t>(std::max<int64_t>(nblocks_, 1))]);
    std::vector<uint8_t> map(static_cast<size_t>(nblocks_));
    if (nblocks_ > 0) LOOM_RETURN_IF_ERROR(pread_full(map_fd_, map.data(), nblocks_, kHeaderBytes, map_path_));
    int64_t present = 0;
    for (int64_t i = 0; i < nblocks_; ++i) {
      have_[i] = map[static_cast<size_t>(i)] == 1;
      present += map[static_cast<size_t>(i)] == 1;
    }
    present_ = present;
    return Status::ok();
  }

  Status failure() const {
    std::lock_guard<std::mutex> lock(fail_mu_);
    return failed_;
  }

  // Block b present in .part: fetched here unless this or another process has it.
  Status ensure_block(int64_t b) {
    if (have_[b].load(std::memory_order_acquire)) return Status::ok();
    std::lock_guard<std::mutex> lock(stripes_[b % kStripes]);
    if (have_[b].load(std::memory_order_acquire)) return Status::ok();
    const int64_t at = kHeaderBytes + b;
    if (ofd_lock(map_fd_, F_WRLCK, at, 1) != 0) return io_error(map_path_ + ": lock failed: " + errno_text());
    Status st;
    uint8_t mark = 0;
    if (::pread(map_fd_, &mark, 1, at) != 1) mark = 0;
    if (mark != 1) {
      const int64_t offset = b * block_, length = std::min(block_, size_ - offset);
      std::string bytes;
      st = fetch_range(url_, offset, length, opts_, &bytes, nullptr, nullptr, etag_);
      if (st.is_ok()) st = pwrite_full(part_fd_, bytes.data(), bytes.size(), offset, part_path_);
      if (st.is_ok() && ::fdatasync(part_fd_) != 0) st = io_error(part_path_ + ": fdatasync failed: " + errno_text());
      mark = 1;
      if (st.is_ok()) st = pwrite_full(map_fd_, reinterpret_cast<const char*>(&mark), 1, at, map_path_);
    }
    ofd_lock(map_fd_, F_UNLCK, at, 1);
    if (!st.is_ok()) return st;
    have_[b].store(1, std::memory_order_release);
    ++present_;
    return Status::ok();
  }

  // After a publish (ours or another process's): serve from a mapping of our
  // .part descriptor when it is the published file.
  void map_complete() {
    if (size_ == 0) return;
    void* m = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_SHARED, part_fd_, 0);
    if (m == MAP_FAILED) return;  // reads go on through pread
    ::madvise(m, static_cast<size_t>(size_), MADV_RANDOM);
    mapped_.store(static_cast<const uint8_t*>(m), std::memory_order_release);
  }

  void fail(Status st) {
    std::lock_guard<std::mutex> lock(fail_mu_);
    failed_ = std::move(st);
  }

  // Hashes .part: XXH64 and MD5, both over the whole object.
  Status verify() {
    XXH64_state_t* xxh = XXH64_createState();
    XXH64_reset(xxh, 0);
    EVP_MD_CTX* md5 = EVP_MD_CTX_new();
    EVP_DigestInit_ex(md5, EVP_md5(), nullptr);
    std::vector<uint8_t> buf(static_cast<size_t>(std::min<int64_t>(block_, int64_t{8} << 20)));
    Status st;
    for (int64_t off = 0; off < size_ && st.is_ok();) {
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(buf.size()), size_ - off);
      st = pread_full(part_fd_, buf.data(), n, off, part_path_);
      XXH64_update(xxh, buf.data(), static_cast<size_t>(n));
      EVP_DigestUpdate(md5, buf.data(), static_cast<size_t>(n));
      off += n;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    EVP_DigestFinal_ex(md5, md, &md_len);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH64_digest(xxh)));
    XXH64_freeState(xxh);
    EVP_MD_CTX_free(md5);
    if (!st.is_ok()) return st;
    std::string md5_hex;
    for (unsigned int i = 0; i < md_len; ++i) {
      char h[3];
      std::snprintf(h, sizeof h, "%02x", md[i]);
      md5_hex += h;
    }
    std::string etag = etag_;
    if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
    for (char& c : etag) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    // Only S3's single-part ETags are MD5s (multipart: "<md5>-<parts>"; SSE-KMS
    // ETags are not, and such objects need the manifest's XXH64).
    if (etag_is_md5_ && etag != md5_hex) {
      return io_error(url_ + ": corrupt download: MD5 " + md5_hex + " of the assembled blocks does not match the ETag " +
                      etag + "; the cached blocks were deleted, restart to fetch them again");
    }
    std::string expected = expected_;
    for (char& c : expected) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!expected.empty() && expected != hex) {
      return io_error(url_ + ": checksum mismatch: xxHash64 " + std::string(hex) + ", expected " + expected_ +
                      "; the object changed or the manifest's checksum is stale (training read blocks of it "
                      "already: they are suspect)");
    }
    return Status::ok();
  }

  // The node's downloader (the holder of the object's .lock) fetches every
  // block in order, verifies and publishes; any other process waits for it
  // and then maps the published file.
  void run_prefetch() {
    lock_fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd_ < 0) return;  // no background download; reads still fetch what they need
    while (!stop_) {
      if (::flock(lock_fd_, LOCK_EX | LOCK_NB) == 0) break;
      if (same_file(final_, part_fd_)) {  // published by another process while we waited
        map_complete();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (stop_) return;
    if (same_file(final_, part_fd_)) {
      map_complete();
      return;
    }
    for (int64_t b = 0; b < nblocks_ && !stop_;) {
      slots().acquire(opts_.prefetch_streams);
      Status st = ensure_block(b);
      slots().release();
      if (st.is_ok()) {
        ++b;
        continue;
      }
      if (st.code() == StatusCode::kIoError && st.message().find("HTTP 412") != std::string::npos) {
        fail(st);  // the object was replaced: reads must not mix versions
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // transient: try again (reads surface errors)
    }
    // Stopped early (the reader is going away): an object whose blocks are all
    // here is still verified and published, so the next run maps it even with
    // the server gone; otherwise the next run resumes from the map.
    if (present_.load() < nblocks_) {
      ::flock(lock_fd_, LOCK_UN);
      return;
    }
    Status st = verify();
    if (!st.is_ok()) {
      fail(st);
      if (same_file(part_path_, part_fd_)) ::unlink(part_path_.c_str());
      ::unlink(map_path_.c_str());
      ::flock(lock_fd_, LOCK_UN);
      return;
    }
    if (::fsync(part_fd_) == 0 && same_file(part_path_, part_fd_) &&
        std::rename(part_path_.c_str(), final_.c_str()) == 0) {
      ::unlink(map_path_.c_str());
      if (expected_.empty()) ::unlink((final_ + ".xxh64").c_str());  // an earlier version's record
      note_cached_checksum(final_, expected_);
    }
    map_complete();
    ::flock(lock_fd_, LOCK_UN);
  }

 public:
  bool etag_is_md5_ = false;

 private:
  static constexpr int kStripes = 16;
  std::string url_, final_, part_path_, map_path_, lock_path_, expected_, etag_;
  RemoteCacheOptions opts_;
  int64_t size_ = 0, block_ = 0, nblocks_ = 0;
  int part_fd_ = -1, map_fd_ = -1, lock_fd_ = -1;
  std::unique_ptr<std::atomic<uint8_t>[]> have_;
  std::atomic<int64_t> present_{0};
  std::mutex stripes_[kStripes];
  std::atomic<const uint8_t*> mapped_{nullptr};
  mutable std::mutex fail_mu_;
  Status failed_;
  std::atomic<bool> stop_{false};
  std::thread prefetch_;
};

}  // namespace
#endif  // LOOM_HAVE_CURL

Result<std::shared_ptr<ByteSource>> open_remote_source(const std::string& url, const RemoteCacheOptions& opts,
                                                       const std::string& expected_xxh64, ReadMode mode,
                                                       bool prefetch) {
  auto whole = [&]() -> Result<std::shared_ptr<ByteSource>> {
    LOOM_ASSIGN_OR_RETURN(std::string path, fetch_to_cache(url, opts, expected_xxh64));
    return open_local_source(path, mode, /*random_access=*/true);
  };
#ifdef LOOM_HAVE_CURL
  const bool remote = url.rfind("s3://", 0) == 0 || url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0;
  if (!remote || opts.cache_dir.empty()) return whole();
  if (!expected_xxh64.empty() &&
      (expected_xxh64.size() != 16 || expected_xxh64.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)) {
    return invalid_argument("remote_cache: expected checksum '" + expected_xxh64 + "' is not 16 hex digits (xxHash64)");
  }
  const std::string final_path = cache_path_for(url, opts.cache_dir);
  if (cached_copy_is(final_path, expected_xxh64)) return open_local_source(final_path, mode, true);
  if (::access(final_path.c_str(), F_OK) == 0) {
    // A copy of another version (the manifest's checksum differs): fetched
    // again whole, replacing it under the object's lock.
    LOOM_ASSIGN_OR_RETURN(std::string path, fetch_to_cache(url, opts, expected_xxh64));
    return open_local_source(path, mode, true);
  }
  std::error_code ec;
  fs::create_directories(opts.cache_dir, ec);
  if (ec) return io_error(opts.cache_dir + ": cannot create the cache directory: " + ec.message());
  // The object's size and ETag from a 1-byte range.
  std::string first;
  int64_t size = -1;
  std::string etag;
  bool etag_is_md5 = false;
  Status probe = fetch_range(url, 0, 1, opts, &first, &size, &etag, "", &etag_is_md5);
  if (!probe.is_ok()) {
    // Not there, or not ours to read: say so. An empty object (416) or a
    // server that ignores Range: download it whole.
    if (probe.code() == StatusCode::kNotFound || probe.code() == StatusCode::kRemoteError ||
        probe.code() == StatusCode::kTimeout || probe.message().find("cannot reach") != std::string::npos)
      return probe;
    return whole();
  }
  auto file = std::make_shared<RemoteBlockFile>();
  file->etag_is_md5_ = etag_is_md5;
  bool published = false;
  LOOM_RETURN_IF_ERROR(file->init(url, opts, expected_xxh64, size, etag, &published));
  if (published) return open_local_source(final_path, mode, true);
  if (prefetch) file->start_prefetch();
  return std::shared_ptr<ByteSource>(std::move(file));
#else
  (void)prefetch;
  return whole();
#endif
}

}  // namespace loom::data
