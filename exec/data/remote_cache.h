// Remote shard cache: turns s3:// and http(s):// dataset URLs into local files.
//
// Every rank on a node asks for the same shards at start-up, so a fetch is
// made safe against concurrent threads and processes sharing one cache_dir:
//   1. a published file (the cache path) is returned at once;
//   2. otherwise the fetcher takes an exclusive flock() on "<cache path>.lock"
//      (released by the kernel if the process dies; other callers for the
//      same object wait on it), looks again, removes
//      temp files left by interrupted downloads, and downloads to a fresh
//      temp file "<cache path>.tmp.<pid>.<n>" opened with O_EXCL;
//   3. the temp file is verified (bytes == Content-Length; S3 single-part
//      ETag == MD5; xxHash64 when the caller gives one), fsync'ed and
//      published with rename(), which is atomic within a file system.
// Readers therefore see either no file or a complete one; a temp file is
// never read, and a failed or corrupt download is deleted. The small
// ".lock" files stay in cache_dir (deleting them would race with waiters).
//
// S3 access: credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
// AWS_SESSION_TOKEN (none: anonymous requests), region from AWS_REGION or
// AWS_DEFAULT_REGION (default us-east-1), and AWS_ENDPOINT_URL for an
// S3-compatible server (then path-style http(s)://endpoint/bucket/key;
// otherwise virtual-hosted https://bucket.s3.<region>.amazonaws.com/key).
// Requests are signed with SigV4 (s3_sign.h).
//
// Needs libcurl + OpenSSL (LOOM_HAVE_CURL); without them remote URLs give
// kUnsupported and local paths still work. Thread-safe.
#pragma once

#include <string>

#include "core/status.h"

namespace loom::data {

struct RemoteCacheOptions {
  std::string cache_dir;  // created if missing; share it between the ranks of a node
  double timeout_s = 60;  // per attempt, connect + transfer
  int retries = 3;        // extra attempts after a transient failure (unreachable, 5xx, cut-off transfer)
};

// Returns a local path for `url`: the path itself for a local path or file://
// URL, the published cache copy for s3://bucket/key and http(s)://host/path
// (downloading it first if missing). `expected_xxh64` is 16 hex digits of
// XXH64(seed 0) of the whole object, or empty for no check; a copy already in
// the cache is trusted and not re-hashed.
// Errors: kNotFound (local file or remote object missing; names the URL),
// kIoError ("cannot reach ..." naming the URL; an interrupted transfer; a
// size/ETag/checksum mismatch; cache_dir not writable), kRemoteError (401/403
// "unauthorized", naming the credential variables; other HTTP errors),
// kTimeout, kInvalidArgument (malformed URL, empty cache_dir), kUnsupported.
Result<std::string> fetch_to_cache(const std::string& url, const RemoteCacheOptions& opts,
                                   const std::string& expected_xxh64 = "");

// Where fetch_to_cache publishes `url`:
// "<cache_dir>/<16 hex of XXH64(url)>-<last path component>".
std::string cache_path_for(const std::string& url, const std::string& cache_dir);

// Uploads `body` with a PUT to s3://bucket/key or http(s)://host/path (for
// checkpoints, test fixtures). "s3://bucket/" with an empty key creates the
// bucket (S3 CreateBucket; a region other than us-east-1 is not supported
// here). Retries transient failures like fetch_to_cache; same error codes.
Status put_to_remote(const std::string& url, const std::string& body, const RemoteCacheOptions& opts);

}  // namespace loom::data
