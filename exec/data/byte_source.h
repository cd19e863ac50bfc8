// Where an indexed dataset's bytes come from: a small reader interface with
// three implementations.
//   mmap   the whole file mapped (the default: page-cache speed on a local
//          disk; no file descriptor kept open).
//   pread  large aligned reads (4 MiB blocks, offsets multiples of 4 MiB)
//          into a small process-wide LRU block cache, through a process-wide
//          cache of open files that closes the least recently used one past a
//          bound (64 by default). For parallel file systems (Lustre, 3FS,
//          GPFS, BeeGFS): a page fault there is a small synchronous RPC and
//          each open file costs a client lock and metadata; big sequential
//          reads and few open files are what they serve well.
//   remote a file still arriving from S3 / HTTP (remote_file.h).
// LOOM_DATA_READ=mmap|pread picks the local reader (default mmap);
// LOOM_DATA_MAX_OPEN_FILES (default 64) bounds the pread reader's open files
// per process, LOOM_DATA_PREAD_CACHE_MB (default 64) its block cache.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace loom::data {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual int64_t size() const = 0;
  // The whole file in memory (mmap), or null: then use read().
  virtual const uint8_t* data() const { return nullptr; }
  // Bytes [offset, offset+length) into `out`. Thread-safe. A remote source
  // blocks until those bytes have arrived (and fails if they cannot).
  virtual Status read(int64_t offset, int64_t length, uint8_t* out) const = 0;
  virtual const std::string& name() const = 0;  // the path or URL, for messages
};

enum class ReadMode { kMmap, kPread };

// LOOM_DATA_READ: "mmap" (default, also when unset or empty) or "pread";
// anything else is kInvalidArgument.
Result<ReadMode> read_mode_from_env();

// A file mapped whole; `random_access` advises the kernel against readahead
// (MADV_RANDOM, as for .bin files read sample by sample).
Result<std::shared_ptr<ByteSource>> open_mmap_source(const std::string& path, bool random_access = false);
// A file read whole into memory (small files: a pread-mode .idx).
Result<std::shared_ptr<ByteSource>> open_memory_source(const std::string& path);
// A file read with aligned block preads through the process-wide caches.
Result<std::shared_ptr<ByteSource>> open_pread_source(const std::string& path);
// mmap or pread for `mode`.
Result<std::shared_ptr<ByteSource>> open_local_source(const std::string& path, ReadMode mode, bool random_access);

struct PreadConfig {
  int max_open_files = 64;               // per process, over every pread source
  int64_t block_bytes = int64_t{4} << 20;  // read size and alignment
  int64_t cache_bytes = int64_t{64} << 20;  // LRU block cache, per process
};
// The configuration in force: the defaults above overridden by
// LOOM_DATA_MAX_OPEN_FILES and LOOM_DATA_PREAD_CACHE_MB when first used, or
// set_pread_config's.
PreadConfig pread_config();
// For tests and tools; call before opening pread sources (an open-file bound
// lowered later is reached as files are released).
void set_pread_config(const PreadConfig& c);

struct PreadStats {
  int64_t open_files = 0;       // now
  int64_t peak_open_files = 0;  // since the process started (or reset)
  int64_t opens = 0, preads = 0, cache_hits = 0;
};
PreadStats pread_stats();
void reset_pread_stats();

}  // namespace loom::data
