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
// S3 access: credentials, region, endpoint and addressing as the AWS CLI
// finds them (environment, ~/.aws/credentials and ~/.aws/config profiles,
// RemoteCacheOptions::s3 above both; s3_config.h has the precedence).
// Requests are signed with AWS Signature V4 by libcurl itself
// (CURLOPT_AWS_SIGV4 "aws:amz:REGION:s3"); loom adds the headers S3 wants
// that curl 7.88 does not: x-amz-content-sha256 (the payload's SHA-256) and
// x-amz-security-token (temporary credentials), which curl then signs.
//
// Needs libcurl + OpenSSL (LOOM_HAVE_CURL); without them remote URLs give
// kUnsupported and local paths still work. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/data/s3_config.h"

namespace loom::data {

struct RemoteCacheOptions {
  std::string cache_dir;  // created if missing; share it between the ranks of a node
  double timeout_s = 60;  // per attempt, connect + transfer
  int retries = 3;        // extra attempts after a transient failure (unreachable, 5xx, cut-off transfer)
  S3Options s3;           // --endpoint etc.; empty fields: environment and AWS config files
  // Ranged reads of shards still downloading (remote_file.h).
  int64_t block_bytes = int64_t{8} << 20;  // Range request size, and the resume granularity
  int prefetch_streams = 4;                // background downloads at once per process
  // curl CONNECT_TO entries "HOST:PORT:CONNECT-HOST:CONNECT-PORT" (tests:
  // send a request for examplebucket.s3.amazonaws.com to a loopback server).
  std::vector<std::string> connect_to;
  // fetch_to_cache downloads even where a copy is cached and replaces it (a
  // manifest, which no checksum pins: the dataset may have been re-published
  // at its URL); where the server cannot be reached (kIoError, kTimeout: not
  // a refusal such as 401/403) and a copy is cached, that copy, after
  // `notice` (if set) is told so.
  bool refresh = false;
  std::function<void(const std::string&)> notice;
};

// Returns a local path for `url`: the path itself for a local path or file://
// URL, the published cache copy for s3://bucket/key and http(s)://host/path
// (downloading it first if missing). `expected_xxh64` is 16 hex digits of
// XXH64(seed 0) of the whole object, or empty for no check; a copy already in
// the cache is used when it is that object (cached_copy_is), else fetched
// again; with `refresh`, fetched again in any case.
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

// Whether the published copy at `path` is the object whose XXH64 is
// `expected_xxh64` (16 hex digits; empty: any copy is). The checksum verified
// at publication is kept beside the copy ("<path>.xxh64"); a copy without one
// (published before, or without an expected checksum) is hashed once and the
// result kept. False for a missing copy: a manifest re-published with new
// checksums at the same URLs then fetches the new objects instead of training
// on the old ones.
bool cached_copy_is(const std::string& path, const std::string& expected_xxh64);
// Records that the copy at `path` was verified against `xxh64` (best effort).
void note_cached_checksum(const std::string& path, const std::string& xxh64);

// Uploads `body` with a PUT to s3://bucket/key or http(s)://host/path (for
// checkpoints, test fixtures). "s3://bucket/" with an empty key creates the
// bucket (S3 CreateBucket; a region other than us-east-1 is not supported
// here). Retries transient failures like fetch_to_cache; same error codes.
Status put_to_remote(const std::string& url, const std::string& body, const RemoteCacheOptions& opts);

// Bytes [offset, offset+length) of a remote object by an HTTP Range request,
// into `out` (resized). With `if_match` non-empty the request carries
// If-Match: an object replaced since (another ETag) answers 412, an error.
// `object_size` / `etag` (either may be null) receive the whole object's size
// (from Content-Range) and its ETag. Exactly `length` bytes or an error
// (a short or cut-off answer is retried like fetch_to_cache; a server that
// ignores Range and answers 200 with the whole object is accepted when the
// object is that range). Errors as fetch_to_cache, plus kInvalidArgument for
// a range past the end (HTTP 416). `etag_is_md5`: the ETag is the object's
// MD5 (an S3 single-part object without SSE-KMS / SSE-C).
Status fetch_range(const std::string& url, int64_t offset, int64_t length, const RemoteCacheOptions& opts,
                   std::string* out, int64_t* object_size = nullptr, std::string* etag = nullptr,
                   const std::string& if_match = "", bool* etag_is_md5 = nullptr);

// One answer of s3_call: the status and body as they came, lowercase header names.
struct HttpReply {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;
};
// One request to s3://bucket/key exactly as loom sends its own (addressing,
// x-amz-content-sha256, x-amz-security-token, libcurl's SigV4), no retries, any
// HTTP status returned as is: for tests and tools. `raw_query` goes after '?'
// unchanged (build it with s3_query); `headers` are extra "Name: value" lines
// (signed by curl too; an "x-amz-date" one fixes the signing time).
Result<HttpReply> s3_call(const std::string& method, const std::string& s3_url, const std::string& raw_query,
                          const std::vector<std::string>& headers, const std::string& body,
                          const RemoteCacheOptions& opts);

// The objects an s3:// URL names as a set: "s3://bucket/dir/" its direct
// children (not deeper keys, as a local directory), "s3://bucket/dir/*.parquet"
// the keys matching the glob pattern (* ? [..], per path segment as a shell
// matches). Listed with ListObjectsV2 (paginated, with the prefix before the
// first wildcard), returned as s3:// URLs sorted by key. Errors: not_found
// when nothing matches, those of the request otherwise (naming the URL).
Result<std::vector<std::string>> list_s3_objects(const std::string& url, const RemoteCacheOptions& opts);

// Lowercase hex SHA-256 of `data` (kUnsupported without OpenSSL).
Result<std::string> sha256_hex(const std::string& data);

}  // namespace loom::data
