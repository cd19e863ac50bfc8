// The manifest `loom preprocess` writes next to its shards (PREFIX.manifest.json,
// exec/data/preprocess.h): what a `--data X.manifest.json` run reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace loom::data {

struct ManifestShard {
  std::string bin;        // file name relative to the manifest's directory, ends in ".bin"
  std::string prefix;     // `bin` without ".bin" (the indexed dataset's prefix, relative)
  int64_t tokens = 0;     // >= 0; a shard may be empty (more shards than documents)
  std::string bin_xxh64;  // 16 hex digits, or empty when not recorded
  std::string idx_xxh64;
};

struct Manifest {
  int64_t vocab_size = 0;  // the tokenizer's; 0 when not recorded
  int64_t tokens = 0;      // sum over shards
  std::vector<ManifestShard> shards;
};

// Parses and checks a manifest's text. Errors (kParseError for malformed JSON,
// kInvalidArgument otherwise) name `what` and the field: no shards, a shard
// file name that is absolute, climbs out of the manifest's directory ("..") or
// does not end in ".bin", negative token counts, a vocabulary that is not a
// positive integer, or no tokens at all.
Result<Manifest> parse_manifest(const std::string& json_text, const std::string& what);

}  // namespace loom::data
