#include "exec/data/s3_sign.h"

#include <cstdlib>

#ifdef LOOM_HAVE_CURL
#include <openssl/evp.h>
#include <openssl/hmac.h>
#endif

namespace loom::data {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? std::string(v) : fallback;
}

std::string to_hex(const unsigned char* bytes, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return out;
}

[[maybe_unused]] Status no_openssl() {
  return unsupported("s3: this build has no OpenSSL/libcurl; install libcurl4-openssl-dev libssl-dev and reconfigure");
}

#ifdef LOOM_HAVE_CURL
// HMAC-SHA256(key, data) as raw bytes (32 of them).
Result<std::string> hmac_sha256(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int out_len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &out_len) == nullptr) {
    return internal_error("s3: OpenSSL HMAC-SHA256 failed");
  }
  return std::string(reinterpret_cast<const char*>(out), out_len);
}
#endif

}  // namespace

S3Credentials s3_credentials_from_env() {
  S3Credentials c;
  c.access_key_id = env_or("AWS_ACCESS_KEY_ID", "");
  c.secret_access_key = env_or("AWS_SECRET_ACCESS_KEY", "");
  c.session_token = env_or("AWS_SESSION_TOKEN", "");
  c.region = env_or("AWS_REGION", env_or("AWS_DEFAULT_REGION", "us-east-1"));
  return c;
}

Result<std::string> sha256_hex(const std::string& data) {
#ifdef LOOM_HAVE_CURL
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &md_len, EVP_sha256(), nullptr) != 1) {
    return internal_error("s3: OpenSSL SHA-256 failed");
  }
  return to_hex(md, md_len);
#else
  return no_openssl();
#endif
}

std::string amz_date(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string s3_uri_encode(const std::string& s, bool keep_slash) {
  static const char* kDigits = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                      c == '.' || c == '_' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 0xf]);
    }
  }
  return out;
}

Result<SigV4Signature> sign_v4(const SigV4Request& request, const S3Credentials& creds) {
  auto date_it = request.headers.find("x-amz-date");
  if (request.headers.find("host") == request.headers.end() || date_it == request.headers.end()) {
    return invalid_argument("s3: a SigV4 request needs the 'host' and 'x-amz-date' headers");
  }
  const std::string& timestamp = date_it->second;  // 20130524T000000Z
  if (timestamp.size() != 16) {
    return invalid_argument("s3: x-amz-date '" + timestamp + "' is not YYYYMMDDTHHMMSSZ");
  }
  const std::string date = timestamp.substr(0, 8);

  // Canonical request: method, path, query, "name:value\n" per header, the
  // signed-header list, payload hash; newline separated.
  SigV4Signature sig;
  std::string canonical_headers;
  std::string signed_headers;
  for (const auto& [name, value] : request.headers) {
    canonical_headers += name + ":" + value + "\n";
    if (!signed_headers.empty()) signed_headers += ";";
    signed_headers += name;
  }
  sig.canonical_request = request.method + "\n" + request.canonical_uri + "\n" + request.canonical_query + "\n" +
                          canonical_headers + "\n" + signed_headers + "\n" + request.payload_sha256_hex;

  const std::string scope = date + "/" + creds.region + "/" + request.service + "/aws4_request";
  LOOM_ASSIGN_OR_RETURN(std::string request_hash, sha256_hex(sig.canonical_request));
  sig.string_to_sign = "AWS4-HMAC-SHA256\n" + timestamp + "\n" + scope + "\n" + request_hash;

#ifdef LOOM_HAVE_CURL
  // Signing key: HMAC chain over date, region, service, "aws4_request".
  LOOM_ASSIGN_OR_RETURN(std::string k_date, hmac_sha256("AWS4" + creds.secret_access_key, date));
  LOOM_ASSIGN_OR_RETURN(std::string k_region, hmac_sha256(k_date, creds.region));
  LOOM_ASSIGN_OR_RETURN(std::string k_service, hmac_sha256(k_region, request.service));
  LOOM_ASSIGN_OR_RETURN(std::string k_signing, hmac_sha256(k_service, "aws4_request"));
  LOOM_ASSIGN_OR_RETURN(std::string raw_sig, hmac_sha256(k_signing, sig.string_to_sign));
  sig.signature = to_hex(reinterpret_cast<const unsigned char*>(raw_sig.data()), raw_sig.size());
  sig.authorization = "AWS4-HMAC-SHA256 Credential=" + creds.access_key_id + "/" + scope +
                      ",SignedHeaders=" + signed_headers + ",Signature=" + sig.signature;
  return sig;
#else
  return no_openssl();
#endif
}

Result<std::vector<std::string>> s3_request_headers(const std::string& method, const std::string& host,
                                                    const std::string& canonical_uri,
                                                    const std::string& payload_sha256_hex,
                                                    const S3Credentials& creds, std::time_t now) {
  std::vector<std::string> out;
  out.push_back("x-amz-content-sha256: " + payload_sha256_hex);
  if (creds.access_key_id.empty()) return out;  // anonymous: public objects only

  SigV4Request req;
  req.method = method;
  req.canonical_uri = canonical_uri;
  req.payload_sha256_hex = payload_sha256_hex;
  req.headers["host"] = host;
  req.headers["x-amz-date"] = amz_date(now);
  req.headers["x-amz-content-sha256"] = payload_sha256_hex;
  if (!creds.session_token.empty()) req.headers["x-amz-security-token"] = creds.session_token;
  LOOM_ASSIGN_OR_RETURN(SigV4Signature sig, sign_v4(req, creds));

  out.push_back("x-amz-date: " + req.headers["x-amz-date"]);
  if (!creds.session_token.empty()) out.push_back("x-amz-security-token: " + creds.session_token);
  out.push_back("Authorization: " + sig.authorization);
  return out;
}

}  // namespace loom::data
