// AWS Signature Version 4 for S3 requests (GET of shards, PUT of uploads).
//
// Follows "Authenticating Requests: Using the Authorization Header (AWS
// Signature Version 4)" from the S3 API reference: a canonical request is
// hashed into a string to sign, which is signed with a key derived from the
// secret by four chained HMAC-SHA256 steps (date, region, service,
// "aws4_request"). The published example ("GET /test.txt" with
// AKIAIOSFODNN7EXAMPLE, 20130524, us-east-1) is the unit test's truth.
//
// Needs OpenSSL; in a build without it (LOOM_HAVE_CURL unset) every function
// that hashes returns kUnsupported. All functions are thread-safe (no state).
#pragma once

#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace loom::data {

// SHA-256 of the empty payload, the x-amz-content-sha256 of every GET.
inline constexpr const char* kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct S3Credentials {
  std::string access_key_id;      // AWS_ACCESS_KEY_ID; empty = anonymous (unsigned) requests
  std::string secret_access_key;  // AWS_SECRET_ACCESS_KEY
  std::string session_token;      // AWS_SESSION_TOKEN; empty when not using temporary credentials
  std::string region = "us-east-1";
};

// Reads credentials and region from the environment: AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION or AWS_DEFAULT_REGION
// (default us-east-1). Not thread-safe against concurrent setenv().
S3Credentials s3_credentials_from_env();

struct SigV4Request {
  std::string method;           // "GET", "PUT"
  std::string canonical_uri;    // the URI-encoded path, e.g. "/test.txt" or "/bucket/a%20b"
  std::string canonical_query;  // sorted, encoded "k=v&k2=v2"; empty when none
  // Headers to sign: lowercase name -> value. Must hold "host" and
  // "x-amz-date"; S3 also wants "x-amz-content-sha256". The map keeps them
  // sorted, as the canonical request requires.
  std::map<std::string, std::string> headers;
  std::string payload_sha256_hex;  // hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
  std::string service = "s3";
};

// Every intermediate of the signature, so a test can compare each step with
// the published example.
struct SigV4Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;      // 64 hex digits
  std::string authorization;  // the full Authorization header value
};

// Signs `request` at the date in its "x-amz-date" header (YYYYMMDD'T'HHMMSS'Z').
// Errors: kInvalidArgument when host or x-amz-date is missing; kUnsupported
// without OpenSSL.
Result<SigV4Signature> sign_v4(const SigV4Request& request, const S3Credentials& creds);

// The headers for one S3 request to `host` (with ":port" when not default) at
// `canonical_uri`, signed at time `now`: "Name: value" strings ready for curl.
// Anonymous credentials give only the x-amz-content-sha256 header.
Result<std::vector<std::string>> s3_request_headers(const std::string& method, const std::string& host,
                                                    const std::string& canonical_uri,
                                                    const std::string& payload_sha256_hex,
                                                    const S3Credentials& creds, std::time_t now);

// Lowercase hex SHA-256 of `data`; kUnsupported without OpenSSL.
Result<std::string> sha256_hex(const std::string& data);

// "20130524T000000Z" for `t` in UTC.
std::string amz_date(std::time_t t);

// S3 URI encoding: every byte but A-Z a-z 0-9 - . _ ~ becomes %XX (uppercase
// hex); '/' is kept when `keep_slash` (object key paths) and encoded otherwise.
std::string s3_uri_encode(const std::string& s, bool keep_slash);

}  // namespace loom::data
