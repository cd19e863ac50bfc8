#include "exec/data/byte_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace loom::data {
namespace {

std::string errno_text() { return std::strerror(errno); }

Status open_error(const std::string& path) {
  if (errno == ENOENT) return not_found(path + ": no such file");
  if (errno == EMFILE || errno == ENFILE)
    return io_error(path + ": cannot open: " + errno_text() +
                              "; raise `ulimit -n`, or read with LOOM_DATA_READ=pread, which keeps at most "
                              "LOOM_DATA_MAX_OPEN_FILES open");
  return io_error(path + ": cannot open: " + errno_text());
}

class MmapSource final : public ByteSource {
 public:
  ~MmapSource() override {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
  }
  static Result<std::shared_ptr<ByteSource>> open(const std::string& path, bool random_access) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return open_error(path);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      return io_error(path + ": fstat failed: " + errno_text());
    }
    auto s = std::make_shared<MmapSource>();
    s->name_ = path;
    s->size_ = st.st_size;
    if (s->size_ > 0) {
      void* m = ::mmap(nullptr, static_cast<size_t>(s->size_), PROT_READ, MAP_SHARED, fd, 0);
      if (m == MAP_FAILED) {
        ::close(fd);
        return io_error(path + ": mmap failed: " + errno_text());
      }
      s->data_ = static_cast<const uint8_t*>(m);
      if (random_access) ::madvise(m, static_cast<size_t>(s->size_), MADV_RANDOM);
    }
    ::close(fd);  // the mapping keeps the file alive
    return std::shared_ptr<ByteSource>(std::move(s));
  }
  int64_t size() const override { return size_; }
  const uint8_t* data() const override { return data_; }
  Status read(int64_t offset, int64_t length, uint8_t* out) const override {
    if (offset < 0 || length < 0 || offset + length > size_) return invalid_argument(name_ + ": read past the end");
    if (length > 0) std::memcpy(out, data_ + offset, static_cast<size_t>(length));
    return Status::ok();
  }
  const std::string& name() const override { return name_; }

 private:
  std::string name_;
  int64_t size_ = 0;
  const uint8_t* data_ = nullptr;
};

class MemorySource final : public ByteSource {
 public:
  std::string name_;
  std::vector<uint8_t> bytes_;
  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }
  const uint8_t* data() const override { return bytes_.empty() ? nullptr : bytes_.data(); }
  Status read(int64_t offset, int64_t length, uint8_t* out) const override {
    if (offset < 0 || length < 0 || offset + length > size()) return invalid_argument(name_ + ": read past the end");
    if (length > 0) std::memcpy(out, bytes_.data() + offset, static_cast<size_t>(length));
    return Status::ok();
  }
  const std::string& name() const override { return name_; }
};

// Reads [0, n) of fd from `offset` fully; returns bytes read (short only at EOF).
Result<int64_t> pread_full(int fd, uint8_t* out, int64_t n, int64_t offset, const std::string& path) {
  int64_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, out + done, static_cast<size_t>(n - done), offset + done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return io_error(path + ": read failed at byte " + std::to_string(offset + done) + ": " + errno_text());
    if (r == 0) break;
    done += r;
  }
  return done;
}

// ---- the pread reader's process-wide caches ----------------------------------------

struct PreadState {
  std::mutex mu;
  std::condition_variable cv;  // an fd was released (for a caller at the open-file bound)
  PreadConfig config;
  bool configured = false;
  PreadStats stats;
  // Open files: id -> entry; LRU order of the unpinned ones (front = oldest).
  struct OpenFile {
    int fd = -1;
    int pins = 0;
    std::list<uint64_t>::iterator lru;
    bool in_lru = false;
  };
  std::unordered_map<uint64_t, OpenFile> files;
  std::list<uint64_t> file_lru;
  // Blocks: (id, block) -> bytes; LRU (front = oldest).
  struct Block {
    std::shared_ptr<const std::vector<uint8_t>> bytes;
    std::list<std::pair<uint64_t, int64_t>>::iterator lru;
  };
  std::map<std::pair<uint64_t, int64_t>, Block> blocks;
  std::list<std::pair<uint64_t, int64_t>> block_lru;
  int64_t cached_bytes = 0;
  uint64_t next_id = 1;

  void configure_locked() {
    if (configured) return;
    configured = true;
    if (const char* v = std::getenv("LOOM_DATA_MAX_OPEN_FILES"); v != nullptr && std::atoi(v) > 0)
      config.max_open_files = std::atoi(v);
    if (const char* v = std::getenv("LOOM_DATA_PREAD_CACHE_MB"); v != nullptr && std::atoll(v) >= 0)
      config.cache_bytes = std::atoll(v) << 20;
    config.max_open_files = fit_rlimit(config.max_open_files);
  }
  // At most half of the soft RLIMIT_NOFILE (the rest is the process's: MPI,
  // sockets, logs), so `ulimit -n 64` gives 32.
  static int fit_rlimit(int n) {
    rlimit r{};
    if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
      n = std::min<int64_t>(n, std::max<int64_t>(1, static_cast<int64_t>(r.rlim_cur) / 2));
    return std::max(1, n);
  }
};

PreadState& state() {
  static PreadState* s = new PreadState();  // never destroyed: sources may outlive static destruction
  return *s;
}

class PreadSource final : public ByteSource {
 public:
  PreadSource(std::string path, const struct stat& st, uint64_t id)
      : path_(std::move(path)), size_(st.st_size), id_(id), dev_(st.st_dev), ino_(st.st_ino),
        mtime_ns_(int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec) {}
  ~PreadSource() override {
    PreadState& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.files.find(id_);
    if (it != s.files.end()) {
      ::close(it->second.fd);
      if (it->second.in_lru) s.file_lru.erase(it->second.lru);
      s.files.erase(it);
      --s.stats.open_files;
      s.cv.notify_all();
    }
    for (auto b = s.blocks.lower_bound({id_, 0}); b != s.blocks.end() && b->first.first == id_;) {
      s.cached_bytes -= static_cast<int64_t>(b->second.bytes->size());
      s.block_lru.erase(b->second.lru);
      b = s.blocks.erase(b);
    }
  }
  int64_t size() const override { return size_; }
  const std::string& name() const override { return path_; }

  Status read(int64_t offset, int64_t length, uint8_t* out) const override {
    if (offset < 0 || length < 0 || offset + length > size_) return invalid_argument(path_ + ": read past the end");
    PreadState& s = state();
    const int64_t bsz = block_bytes_;
    // A short read whose block is not cached (a shuffled sample: no locality
    // to exploit) is one pread of just its pages (4 KiB-aligned), not cached:
    // a whole block per sample would read ~1000x the bytes it uses.
    if (length > 0 && length < bsz / 4 && !cached(s, offset / bsz) && !cached(s, (offset + length - 1) / bsz)) {
      return read_direct(s, offset, length, out);
    }
    while (length > 0) {
      const int64_t block = offset / bsz, in_block = offset - block * bsz;
      const int64_t n = std::min(length, bsz - in_block);
      LOOM_ASSIGN_OR_RETURN(auto bytes, get_block(s, block));
      if (in_block + n > static_cast<int64_t>(bytes->size()))
        return io_error(path_ + ": the file shrank while it was read (short read at byte " + std::to_string(offset) +
                        ")");
      std::memcpy(out, bytes->data() + in_block, static_cast<size_t>(n));
      out += n;
      offset += n;
      length -= n;
    }
    return Status::ok();
  }

  int64_t block_bytes_ = int64_t{4} << 20;

 private:
  bool cached(PreadState& s, int64_t block) const {
    std::lock_guard<std::mutex> lock(s.mu);
    return s.blocks.count({id_, block}) != 0;
  }
  Status read_direct(PreadState& s, int64_t offset, int64_t length, uint8_t* out) const {
    constexpr int64_t kPage = 4096;
    const int64_t begin = offset / kPage * kPage;
    const int64_t end = std::min(size_, (offset + length + kPage - 1) / kPage * kPage);
    thread_local std::vector<uint8_t> buf;
    buf.resize(static_cast<size_t>(end - begin));
    LOOM_ASSIGN_OR_RETURN(int fd, acquire_fd(s));
    auto got = pread_full(fd, buf.data(), end - begin, begin, path_);
    release_fd(s);
    if (!got.is_ok()) return got.status();
    if (*got < offset + length - begin)
      return io_error(path_ + ": the file shrank while it was read (short read at byte " + std::to_string(offset) + ")");
    {
      std::lock_guard<std::mutex> lock(s.mu);
      ++s.stats.preads;
    }
    std::memcpy(out, buf.data() + (offset - begin), static_cast<size_t>(length));
    return Status::ok();
  }

  Result<std::shared_ptr<const std::vector<uint8_t>>> get_block(PreadState& s, int64_t block) const {
    {
      std::lock_guard<std::mutex> lock(s.mu);
      auto it = s.blocks.find({id_, block});
      if (it != s.blocks.end()) {
        s.block_lru.splice(s.block_lru.end(), s.block_lru, it->second.lru);
        ++s.stats.cache_hits;
        return it->second.bytes;
      }
    }
    LOOM_ASSIGN_OR_RETURN(int fd, acquire_fd(s));
    auto bytes = std::make_shared<std::vector<uint8_t>>(
        static_cast<size_t>(std::min(block_bytes_, size_ - block * block_bytes_)));
    auto got = pread_full(fd, bytes->data(), static_cast<int64_t>(bytes->size()), block * block_bytes_, path_);
    release_fd(s);
    if (!got.is_ok()) return got.status();
    bytes->resize(static_cast<size_t>(*got));
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.stats.preads;
    auto [it, inserted] = s.blocks.try_emplace({id_, block});
    if (!inserted) return it->second.bytes;  // another thread read it meanwhile
    it->second.bytes = bytes;
    it->second.lru = s.block_lru.insert(s.block_lru.end(), {id_, block});
    s.cached_bytes += static_cast<int64_t>(bytes->size());
    // Evict the oldest blocks past the budget (the one just read stays).
    while (s.cached_bytes > s.config.cache_bytes && s.block_lru.size() > 1) {
      auto victim = s.blocks.find(s.block_lru.front());
      s.cached_bytes -= static_cast<int64_t>(victim->second.bytes->size());
      s.block_lru.pop_front();
      s.blocks.erase(victim);
    }
    return std::shared_ptr<const std::vector<uint8_t>>(bytes);
  }

  // The open fd of this file, pinned; opens it (closing the least recently
  // used unpinned file at the bound, or waiting for one to be released).
  Result<int> acquire_fd(PreadState& s) const {
    std::unique_lock<std::mutex> lock(s.mu);
    for (;;) {
      auto it = s.files.find(id_);
      if (it != s.files.end()) {
        if (it->second.in_lru) {
          s.file_lru.erase(it->second.lru);
          it->second.in_lru = false;
        }
        ++it->second.pins;
        return it->second.fd;
      }
      if (s.stats.open_files < s.config.max_open_files) break;
      if (!s.file_lru.empty()) {
        const uint64_t victim = s.file_lru.front();
        s.file_lru.pop_front();
        auto v = s.files.find(victim);
        ::close(v->second.fd);
        s.files.erase(v);
        --s.stats.open_files;
        break;
      }
      s.cv.wait(lock);  // every open file is being read right now
    }
    int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    // The process ran out of descriptors elsewhere: give back our least
    // recently used ones and try again.
    while (fd < 0 && errno == EMFILE && !s.file_lru.empty()) {
      auto v = s.files.find(s.file_lru.front());
      s.file_lru.pop_front();
      ::close(v->second.fd);
      s.files.erase(v);
      --s.stats.open_files;
      fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) return open_error(path_);
    // Reopened by name (after the open-file bound closed it): it must still be
    // the file the index was read with. `loom preprocess` replaces its outputs
    // by rename, so a re-run to the same prefix would otherwise switch the
    // data under a running job.
    struct stat now {};
    if (::fstat(fd, &now) != 0 || now.st_dev != dev_ || now.st_ino != ino_ || now.st_size != size_ ||
        int64_t(now.st_mtim.tv_sec) * 1000000000 + now.st_mtim.tv_nsec != mtime_ns_) {
      ::close(fd);
      s.cv.notify_all();
      return io_error(path_ + ": the file was replaced or changed since the run opened it; its index describes the "
                      "old one. Restart the run to read the new data (or keep shards in place while a job reads them)");
    }
    ++s.stats.opens;
    ++s.stats.open_files;
    s.stats.peak_open_files = std::max(s.stats.peak_open_files, s.stats.open_files);
    auto& f = s.files[id_];
    f.fd = fd;
    f.pins = 1;
    return fd;
  }
  void release_fd(PreadState& s) const {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.files.find(id_);
    if (it == s.files.end()) return;
    if (--it->second.pins == 0) {
      it->second.lru = s.file_lru.insert(s.file_lru.end(), id_);
      it->second.in_lru = true;
      s.cv.notify_all();
    }
  }

  std::string path_;
  int64_t size_;
  uint64_t id_;
  dev_t dev_;
  ino_t ino_;
  int64_t mtime_ns_;
};

}  // namespace

Result<ReadMode> read_mode_from_env() {
  const char* v = std::getenv("LOOM_DATA_READ");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "mmap") == 0) return ReadMode::kMmap;
  if (std::strcmp(v, "pread") == 0) return ReadMode::kPread;
  return invalid_argument(std::string("LOOM_DATA_READ=") + v + ": use mmap (local disks, the default) or pread "
                          "(parallel file systems: Lustre, 3FS, GPFS)");
}

Result<std::shared_ptr<ByteSource>> open_mmap_source(const std::string& path, bool random_access) {
  return MmapSource::open(path, random_access);
}

Result<std::shared_ptr<ByteSource>> open_memory_source(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return open_error(path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return io_error(path + ": fstat failed: " + errno_text());
  }
  auto s = std::make_shared<MemorySource>();
  s->name_ = path;
  s->bytes_.resize(static_cast<size_t>(st.st_size));
  auto got = pread_full(fd, s->bytes_.data(), st.st_size, 0, path);
  ::close(fd);
  if (!got.is_ok()) return got.status();
  s->bytes_.resize(static_cast<size_t>(*got));
  return std::shared_ptr<ByteSource>(std::move(s));
}

Result<std::shared_ptr<ByteSource>> open_pread_source(const std::string& path) {
  // The size now, without keeping the file open.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return not_found(path + ": no such file");
    return io_error(path + ": cannot stat: " + errno_text());
  }
  PreadState& s = state();
  uint64_t id;
  int64_t block;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.configure_locked();
    id = s.next_id++;
    block = s.config.block_bytes;
  }
  auto src = std::make_shared<PreadSource>(path, st, id);
  src->block_bytes_ = block;
  return std::shared_ptr<ByteSource>(std::move(src));
}

Result<std::shared_ptr<ByteSource>> open_local_source(const std::string& path, ReadMode mode, bool random_access) {
  return mode == ReadMode::kPread ? open_pread_source(path) : open_mmap_source(path, random_access);
}

PreadConfig pread_config() {
  PreadState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.configure_locked();
  return s.config;
}

void set_pread_config(const PreadConfig& c) {
  PreadState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.configured = true;
  s.config = c;
  s.config.max_open_files = std::max(1, c.max_open_files);
  s.config.block_bytes = std::max<int64_t>(512, c.block_bytes);
}

PreadStats pread_stats() {
  PreadState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.stats;
}

void reset_pread_stats() {
  PreadState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const int64_t open = s.stats.open_files;
  s.stats = PreadStats{};
  s.stats.open_files = open;
  s.stats.peak_open_files = open;
}

}  // namespace loom::data
