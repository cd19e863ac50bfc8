// The training data a run reads, named by one `--data` spec:
//   FILE.txt (any file that is neither an index nor a manifest)
//                    byte-level tokens of a text file (exec/runtime/token_source.h)
//   PREFIX           a Megatron indexed dataset PREFIX.bin / PREFIX.idx
//   X.manifest.json  every shard `loom preprocess` listed there, verified
//                    against the manifest's sizes and checksums when fetched
//   W1:SPEC1,W2:SPEC2  a weighted blend of the above (weights > 0)
// Any path may be s3://bucket/key or http(s)://host/path: files are fetched
// once into the cache directory (exec/data/remote_cache.h) and read from there;
// a remote .bin is read while it downloads (exec/data/remote_file.h).
// LOOM_DATA_READ=mmap|pread picks how local shards are read (byte_source.h).
// Indexed data goes through the prefetching loader (exec/data/loader.h): each
// DP rank reads only its rows of each global batch, in a global order that
// depends only on the seed.
#pragma once

#include <memory>
#include <string>

#include "exec/data/s3_config.h"
#include "exec/runtime/token_source.h"

namespace loom::exec {

struct DataSpecOptions {
  int64_t seq_len = 0;
  int64_t global_batch = 0;
  int dp_rank = 0, dp_size = 1;
  uint64_t seed = 1234;
  int64_t model_vocab = 0;  // token ids must be below it
  std::string cache_dir;    // for remote data
  data::S3Options s3;       // endpoint, profile, addressing of s3:// URLs
  int prefetch_batches = 2;
};

Result<std::unique_ptr<TokenSource>> open_training_data(const std::string& spec, const DataSpecOptions& opts);

}  // namespace loom::exec
