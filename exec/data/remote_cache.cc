#include "exec/data/remote_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "exec/data/s3_sign.h"

#ifdef LOOM_HAVE_CURL
#include <curl/curl.h>
#include <openssl/evp.h>
#endif

namespace loom::data {
namespace fs = std::filesystem;
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }
bool is_remote(const std::string& url) {
  return starts_with(url, "s3://") || starts_with(url, "http://") || starts_with(url, "https://");
}
std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

#ifdef LOOM_HAVE_CURL
// Where to send one request and which headers to add.
struct HttpTarget {
  std::string url;
  std::vector<std::string> headers;
  bool is_s3 = false;
};

// Splits "scheme://authority/path" of an endpoint; default ports dropped
// because curl leaves them out of the Host header it sends (and signs).
void split_endpoint(std::string endpoint, std::string* base, std::string* host, std::string* path) {
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  size_t scheme_end = endpoint.find("://");
  size_t auth_begin = scheme_end == std::string::npos ? 0 : scheme_end + 3;
  size_t path_begin = endpoint.find('/', auth_begin);
  *host = endpoint.substr(auth_begin, path_begin == std::string::npos ? std::string::npos : path_begin - auth_begin);
  *path = path_begin == std::string::npos ? "" : endpoint.substr(path_begin);
  bool https = starts_with(endpoint, "https://");
  const std::string default_port = https ? ":443" : ":80";
  if (host->size() > default_port.size() && host->ends_with(default_port)) {
    host->resize(host->size() - default_port.size());
  }
  *base = (https ? "https://" : "http://") + *host;
}

// Builds the request for `url`; s3:// requests are signed at the current time.
Result<HttpTarget> resolve(const std::string& url, const std::string& method, const std::string& payload_sha256,
                           bool allow_empty_key) {
  HttpTarget t;
  if (!starts_with(url, "s3://")) {
    t.url = url;
    return t;
  }
  t.is_s3 = true;
  std::string rest = url.substr(5);
  size_t slash = rest.find('/');
  std::string bucket = rest.substr(0, slash);
  std::string key = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (bucket.empty() || (key.empty() && !allow_empty_key)) {
    return invalid_argument("s3: '" + url + "' is not s3://bucket/key");
  }
  S3Credentials creds = s3_credentials_from_env();
  const char* endpoint = std::getenv("AWS_ENDPOINT_URL");
  std::string base, host, canonical_uri;
  // Path-style for an S3-compatible server, and for bucket names with dots
  // (a virtual host "a.b.s3..." would not match AWS's TLS certificate).
  const bool custom = endpoint != nullptr && *endpoint != '\0';
  if (custom || bucket.find('.') != std::string::npos) {
    std::string prefix;
    split_endpoint(custom ? endpoint : "https://s3." + creds.region + ".amazonaws.com", &base, &host, &prefix);
    canonical_uri = prefix;
    canonical_uri.append("/").append(s3_uri_encode(bucket, false));
    if (!key.empty()) canonical_uri.append("/").append(s3_uri_encode(key, true));
  } else {
    host = bucket + ".s3." + creds.region + ".amazonaws.com";
    base = std::string("https://").append(host);
    canonical_uri = std::string("/").append(s3_uri_encode(key, true));
  }
  t.url = base + canonical_uri;
  LOOM_ASSIGN_OR_RETURN(t.headers,
                        s3_request_headers(method, host, canonical_uri, payload_sha256, creds, std::time(nullptr)));
  return t;
}

// State of one transfer, filled by curl's callbacks.
struct Transfer {
  int fd = -1;  // the temp file (GET); -1 for PUT
  long status = 0;
  long long content_length = -1;
  std::string etag;
  bool sse_non_md5 = false;  // SSE-KMS / SSE-C objects: the ETag is not the MD5
  long long bytes = 0;
  int write_errno = 0;
  std::string error_body;  // body of a non-2xx response (first 2 KiB)
  EVP_MD_CTX* md5 = nullptr;
  XXH64_state_t* xxh = nullptr;
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string line(data, size * n);
  if (starts_with(line, "HTTP/")) {  // a new response (after 100-continue or a redirect)
    size_t sp = line.find(' ');
    t->status = sp == std::string::npos ? 0 : std::atol(line.c_str() + sp + 1);
    t->content_length = -1;
    t->etag.clear();
    t->sse_non_md5 = false;
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  std::string name = lower(trim(line.substr(0, colon)));
  std::string value = trim(line.substr(colon + 1));
  if (name == "content-length") t->content_length = std::atoll(value.c_str());
  if (name == "etag") t->etag = value;
  if ((name == "x-amz-server-side-encryption" && value == "aws:kms") ||
      name == "x-amz-server-side-encryption-customer-algorithm") {
    t->sse_non_md5 = true;
  }
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t len = size * n;
  if (t->status < 200 || t->status >= 300 || t->fd < 0) {
    t->error_body.append(data, std::min(len, size_t{2048} - std::min(size_t{2048}, t->error_body.size())));
    return len;
  }
  for (size_t done = 0; done < len;) {
    ssize_t w = ::write(t->fd, data + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      t->write_errno = errno;
      return 0;  // makes curl stop with CURLE_WRITE_ERROR
    }
    done += static_cast<size_t>(w);
  }
  EVP_DigestUpdate(t->md5, data, len);
  XXH64_update(t->xxh, data, len);
  t->bytes += static_cast<long long>(len);
  return len;
}

// "<Code>AccessDenied</Code>" from an S3 XML error body, or "".
std::string s3_error_code(const std::string& body) {
  size_t b = body.find("<Code>"), e = body.find("</Code>");
  return (b == std::string::npos || e == std::string::npos || e < b) ? "" : " (" + body.substr(b + 6, e - b - 6) + ")";
}

// Turns curl's result and the HTTP status into a Status; sets `retryable`
// for failures another attempt may cure.
Status classify(CURLcode rc, const Transfer& t, const std::string& url, bool* retryable) {
  *retryable = false;
  if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY) {
    *retryable = true;
    return io_error("cannot reach " + url + ": " + curl_easy_strerror(rc) +
                    "; check the host, port and AWS_ENDPOINT_URL, and that the server is running");
  }
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    *retryable = true;
    return {StatusCode::kTimeout, url + ": no complete answer within the timeout; raise RemoteCacheOptions::timeout_s"};
  }
  if (rc == CURLE_WRITE_ERROR && t.write_errno != 0) {
    return io_error(url + ": cannot write the cache file: " + std::strerror(t.write_errno));
  }
  if (rc != CURLE_OK) {
    *retryable = true;
    return io_error("download of " + url + " interrupted after " + std::to_string(t.bytes) + " bytes: " +
                    curl_easy_strerror(rc));
  }
  if (t.status == 401 || t.status == 403) {
    return {StatusCode::kRemoteError,
            url + ": unauthorized (HTTP " + std::to_string(t.status) + s3_error_code(t.error_body) +
                "); check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and the object's permissions"};
  }
  if (t.status == 404) return not_found(url + ": no such object (HTTP 404" + s3_error_code(t.error_body) + ")");
  if (t.status == 301 || t.status == 307) {
    return {StatusCode::kRemoteError, url + ": HTTP " + std::to_string(t.status) + s3_error_code(t.error_body) +
                                          "; for S3 this means the bucket is in another region: set AWS_REGION to it"};
  }
  if (t.status < 200 || t.status >= 300) {
    *retryable = t.status >= 500 || t.status == 429;
    return {StatusCode::kRemoteError, url + ": HTTP " + std::to_string(t.status) + s3_error_code(t.error_body)};
  }
  return Status::ok();
}

void curl_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// One request. `fd` >= 0: GET into fd; otherwise PUT `body`.
Status perform(const HttpTarget& target, int fd, const std::string* body, const RemoteCacheOptions& opts,
               Transfer* t, bool* retryable) {
  curl_init_once();
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return internal_error("remote_cache: curl_easy_init failed");
  curl_slist* headers = nullptr;
  for (const std::string& h : target.headers) headers = curl_slist_append(headers, h.c_str());
  headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip on PUT
  long timeout_ms = static_cast<long>(opts.timeout_s * 1000);
  curl_easy_setopt(curl, CURLOPT_URL, target.url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for timeouts
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, target.is_s3 ? 0L : 1L);  // a redirect would break the signature
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, t);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, t);
  if (body != nullptr) {
    // curl would label the body a form (x-www-form-urlencoded), which some
    // servers parse and drop.
    headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "PUT");
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
  }
  t->fd = fd;
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  CURLcode rc = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return classify(rc, *t, target.url, retryable);
}

// One GET attempt into the fresh file `tmp`; verified on success.
Status download_once(const std::string& url, const std::string& tmp, const RemoteCacheOptions& opts,
                     const std::string& expected_xxh64, bool* retryable) {
  *retryable = false;
  LOOM_ASSIGN_OR_RETURN(HttpTarget target, resolve(url, "GET", kEmptyPayloadSha256, false));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(tmp + ": cannot create the download file: " + std::strerror(errno));
  Transfer t;
  t.md5 = EVP_MD_CTX_new();
  t.xxh = XXH64_createState();
  EVP_DigestInit_ex(t.md5, EVP_md5(), nullptr);
  XXH64_reset(t.xxh, 0);
  Status st = perform(target, fd, nullptr, opts, &t, retryable);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  EVP_DigestFinal_ex(t.md5, md, &md_len);
  std::string md5_hex;
  for (unsigned int i = 0; i < md_len; ++i) md5_hex += hex64(md[i]).substr(14);
  std::string xxh_hex = hex64(XXH64_digest(t.xxh));
  EVP_MD_CTX_free(t.md5);
  XXH64_freeState(t.xxh);

  if (st.is_ok() && t.content_length >= 0 && t.bytes != t.content_length) {
    *retryable = true;
    st = io_error(url + ": got " + std::to_string(t.bytes) + " bytes, Content-Length says " +
                  std::to_string(t.content_length));
  }
  std::string etag = t.etag;
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  // A multipart ETag is "<md5 of part md5s>-<parts>": not checkable here.
  if (st.is_ok() && target.is_s3 && !t.sse_non_md5 && etag.size() == 32 && lower(etag) != md5_hex) {
    *retryable = true;
    st = io_error(url + ": corrupt download: MD5 " + md5_hex + " does not match the ETag " + etag);
  }
  if (st.is_ok() && !expected_xxh64.empty() && lower(expected_xxh64) != xxh_hex) {
    st = io_error(url + ": checksum mismatch: xxHash64 " + xxh_hex + ", expected " + expected_xxh64 +
                  "; the object changed or the expected checksum is stale");
  }
  if (st.is_ok() && ::fsync(fd) != 0) st = io_error(tmp + ": fsync failed: " + std::strerror(errno));
  if (::close(fd) != 0 && st.is_ok()) st = io_error(tmp + ": close failed: " + std::strerror(errno));
  return st;
}

// Runs `attempt` up to 1 + retries times with exponential back-off.
template <typename Fn>
Status with_retries(const RemoteCacheOptions& opts, Fn attempt) {
  Status st;
  for (int i = 0;; ++i) {
    bool retryable = false;
    st = attempt(&retryable);
    if (st.is_ok() || !retryable || i >= opts.retries) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(100 << std::min(i, 6)));
  }
}

// Removes "<final>.tmp.*" left by interrupted downloads; the caller holds the
// lock, so no live download owns one.
void remove_stale_temps(const std::string& final_path) {
  fs::path p(final_path);
  std::string prefix = p.filename().string() + ".tmp.";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(p.parent_path(), ec)) {
    if (starts_with(entry.path().filename().string(), prefix.c_str())) fs::remove(entry.path(), ec);
  }
}
#endif  // LOOM_HAVE_CURL

}  // namespace

std::string cache_path_for(const std::string& url, const std::string& cache_dir) {
  std::string name = url.substr(url.find_last_of('/') + 1);
  name = name.substr(0, name.find_first_of("?#"));
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  }
  if (name.size() > 100) name.resize(100);
  return (fs::path(cache_dir) / (hex64(XXH64(url.data(), url.size(), 0)) + "-" + name)).string();
}

Result<std::string> fetch_to_cache(const std::string& url, const RemoteCacheOptions& opts,
                                   const std::string& expected_xxh64) {
  if (!is_remote(url)) {
    std::string path = starts_with(url, "file://") ? url.substr(7) : url;
    struct stat sb {};
    if (::stat(path.c_str(), &sb) != 0) return not_found(path + ": no such file");
    return path;
  }
  if (opts.cache_dir.empty()) return invalid_argument("remote_cache: " + url + " needs a cache_dir to download into");
  if (!expected_xxh64.empty() &&
      (expected_xxh64.size() != 16 || expected_xxh64.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)) {
    return invalid_argument("remote_cache: expected checksum '" + expected_xxh64 + "' is not 16 hex digits (xxHash64)");
  }
#ifdef LOOM_HAVE_CURL
  const std::string final_path = cache_path_for(url, opts.cache_dir);
  if (::access(final_path.c_str(), F_OK) == 0) return final_path;  // published: complete by construction

  std::error_code ec;
  fs::create_directories(opts.cache_dir, ec);
  if (ec) return io_error(opts.cache_dir + ": cannot create the cache directory: " + ec.message());

  // One downloader per object across threads and processes; flock() is per
  // open file description, so each caller opens the lock file itself.
  const std::string lock_path = final_path + ".lock";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) return io_error(lock_path + ": cannot open the lock file: " + std::strerror(errno));
  while (::flock(lock_fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      int err = errno;
      ::close(lock_fd);
      return io_error(lock_path + ": flock failed: " + std::strerror(err));
    }
  }
  // Another caller may have published while we waited.
  if (::access(final_path.c_str(), F_OK) == 0) {
    ::close(lock_fd);
    return final_path;
  }
  remove_stale_temps(final_path);

  static std::atomic<unsigned long> counter{0};
  Status st = with_retries(opts, [&](bool* retryable) {
    std::string tmp = final_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    Status s = download_once(url, tmp, opts, expected_xxh64, retryable);
    if (s.is_ok() && std::rename(tmp.c_str(), final_path.c_str()) != 0) {
      s = io_error(final_path + ": cannot publish the download: " + std::strerror(errno));
    }
    if (!s.is_ok()) ::unlink(tmp.c_str());
    return s;
  });
  ::close(lock_fd);  // releases the flock
  if (!st.is_ok()) return st;
  return final_path;
#else
  return unsupported("remote_cache: " + url +
                     " needs libcurl; install libcurl4-openssl-dev libssl-dev and reconfigure, or pass a local path");
#endif
}

Status put_to_remote(const std::string& url, const std::string& body, const RemoteCacheOptions& opts) {
  if (!is_remote(url)) return invalid_argument("remote_cache: put_to_remote needs an s3:// or http(s):// URL, got " + url);
#ifdef LOOM_HAVE_CURL
  LOOM_ASSIGN_OR_RETURN(std::string payload_sha256, sha256_hex(body));
  return with_retries(opts, [&](bool* retryable) -> Status {
    *retryable = false;
    LOOM_ASSIGN_OR_RETURN(HttpTarget target, resolve(url, "PUT", payload_sha256, true));
    Transfer t;
    return perform(target, -1, &body, opts, &t, retryable);
  });
#else
  return unsupported("remote_cache: " + url + " needs libcurl; install libcurl4-openssl-dev libssl-dev and reconfigure");
#endif
}

}  // namespace loom::data
