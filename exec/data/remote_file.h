// A remote shard read while it downloads: training starts on a shard's first
// blocks instead of waiting for the whole object.
//
// The object is cut into fixed blocks (RemoteCacheOptions::block_bytes, 8 MiB).
// Reads fetch the blocks they touch with HTTP Range requests, on demand; a
// background thread fetches the rest in order (at most
// RemoteCacheOptions::prefetch_streams such threads download at once per
// process). In the cache directory, next to where fetch_to_cache publishes
// the object ("<cache path>"):
//   <cache path>.part   the object's bytes, block i at offset i * block_bytes
//   <cache path>.map    a header (size, block size, ETag) and one byte per
//                       block, set to 1 only after the block's bytes were all
//                       received (exactly the range's length), written and
//                       fdatasync'ed: a restart keeps the blocks that are
//                       marked and fetches the others (resume); a header whose
//                       size or ETag differs from the object's now (it was
//                       replaced) starts over.
// Checks: the size and ETag come from the first answer (a 1-byte range); every
// later range carries If-Match: ETag, so a replaced object fails (HTTP 412)
// instead of mixing versions. The ranks of a node share one cache: a block is
// fetched under an OFD lock on its map byte (one fetch per block per node);
// the process holding "<cache path>.lock" (the lock fetch_to_cache uses) is
// the node's downloader: once every block is there it hashes the file
// (XXH64 against the manifest's, the ETag's MD5 for single-part objects), and
// only if both match renames .part to the cache path (published: later runs
// map it as a complete file) and removes the map. A mismatch is an error
// naming the URL: every later read of this file fails with it (so training
// stops), and .part and .map are deleted. Bytes already served from blocks
// were exactly what the server sent for those ranges; only the whole-object
// checksum comes at the end.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "exec/data/byte_source.h"
#include "exec/data/remote_cache.h"

namespace loom::data {

// A remote file still arriving (what open_remote_source returns when the
// object is not yet published in the cache).
class RemoteFile : public ByteSource {
 public:
  virtual int64_t blocks() const = 0;
  virtual int64_t blocks_present() const = 0;  // in this process's view
  // Verified and published (then reads are served from a mapping).
  virtual bool complete() const = 0;
  // Waits until complete() or a failure, up to timeout_s; kTimeout, or the
  // failure (a checksum mismatch naming the URL).
  virtual Status wait_complete(double timeout_s) const = 0;
};

// A ByteSource for the remote object `url`: the published cache copy (mmap or
// pread per `mode`) when it is there, else a RemoteFile. `expected_xxh64`: as
// fetch_to_cache's. An empty object, or a server that ignores Range, is
// downloaded whole first (fetch_to_cache). `prefetch` false: blocks arrive
// only as they are read (tests). Errors: fetch_to_cache's.
Result<std::shared_ptr<ByteSource>> open_remote_source(const std::string& url, const RemoteCacheOptions& opts,
                                                       const std::string& expected_xxh64 = "",
                                                       ReadMode mode = ReadMode::kMmap, bool prefetch = true);

}  // namespace loom::data
