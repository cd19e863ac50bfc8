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
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>
#include <map>
#include <fnmatch.h>
#include <algorithm>
#include <cstdlib>


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
// One request: where, what, and how to sign it.
struct HttpTarget {
  std::string url;
  std::vector<std::string> headers;  // extra "Name: value" lines
  bool is_s3 = false;
  S3Credentials creds;  // S3 with a key: curl signs with SigV4
  std::string region;
};

std::string describe_creds(const S3Credentials& c) { return c.source; }

// Builds the request for `url`; for s3:// the address, the payload hash and
// the session token (curl adds Authorization and X-Amz-Date when it sends).
Result<HttpTarget> resolve(const std::string& url, const RemoteCacheOptions& opts, const std::string& payload_sha256,
                           bool allow_empty_key, const std::string& raw_query = "") {
  HttpTarget t;
  if (!starts_with(url, "s3://")) {
    t.url = url;
    return t;
  }
  t.is_s3 = true;
  std::string bucket, key;
  LOOM_RETURN_IF_ERROR(split_s3_url(url, &bucket, &key, allow_empty_key));
  LOOM_ASSIGN_OR_RETURN(S3Settings s, resolve_s3_settings(opts.s3));
  LOOM_ASSIGN_OR_RETURN(S3Address a, s3_address(bucket, key, s, raw_query));
  t.url = a.url;
  t.creds = s.creds;
  t.region = s.region;
  // S3 refuses a SigV4 request without the payload hash (curl 7.88 does not
  // add it); anonymous requests carry it too, harmlessly.
  t.headers.push_back("x-amz-content-sha256: " + payload_sha256);
  if (!s.creds.access_key_id.empty() && !s.creds.session_token.empty())
    t.headers.push_back("x-amz-security-token: " + s.creds.session_token);
  return t;
}

constexpr const char* kEmptyPayloadSha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// State of one transfer, filled by curl's callbacks.
struct Transfer {
  int fd = -1;                 // GET into a file; -1 otherwise
  std::string* mem = nullptr;  // GET into memory (ranges, s3_call); bounded by mem_limit
  size_t mem_limit = 0;
  long status = 0;
  long long content_length = -1;
  std::string etag;
  std::string content_range;
  std::map<std::string, std::string> headers;  // lowercase names (s3_call)
  bool sse_non_md5 = false;  // SSE-KMS / SSE-C objects: the ETag is not the MD5
  long long bytes = 0;
  int write_errno = 0;
  bool overflow = false;   // more body than mem_limit
  std::string error_body;  // body of a non-2xx response (first 2 KiB)
  bool keep_error_body_whole = false;
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
    t->content_range.clear();
    t->headers.clear();
    t->sse_non_md5 = false;
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  std::string name = lower(trim(line.substr(0, colon)));
  std::string value = trim(line.substr(colon + 1));
  t->headers[name] = value;
  if (name == "content-length") t->content_length = std::atoll(value.c_str());
  if (name == "etag") t->etag = value;
  if (name == "content-range") t->content_range = value;
  if ((name == "x-amz-server-side-encryption" && value == "aws:kms") ||
      name == "x-amz-server-side-encryption-customer-algorithm") {
    t->sse_non_md5 = true;
  }
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t len = size * n;
  if (t->status < 200 || t->status >= 300 || (t->fd < 0 && t->mem == nullptr)) {
    if (t->keep_error_body_whole && t->mem != nullptr) {
      t->mem->append(data, len);
      return len;
    }
    t->error_body.append(data, std::min(len, size_t{2048} - std::min(size_t{2048}, t->error_body.size())));
    return len;
  }
  if (t->mem != nullptr) {
    if (t->mem->size() + len > t->mem_limit) {
      t->overflow = true;
      return 0;  // CURLE_WRITE_ERROR
    }
    t->mem->append(data, len);
    t->bytes += static_cast<long long>(len);
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
  if (t->md5 != nullptr) EVP_DigestUpdate(t->md5, data, len);
  if (t->xxh != nullptr) XXH64_update(t->xxh, data, len);
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
Status classify(CURLcode rc, const Transfer& t, const std::string& url, const HttpTarget& target, bool* retryable) {
  *retryable = false;
  if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY) {
    *retryable = true;
    return io_error("cannot reach " + url + " (" + target.url + "): " + curl_easy_strerror(rc) +
                    "; check the host, port and the endpoint (--endpoint, AWS_ENDPOINT_URL), and that the server is "
                    "running");
  }
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    *retryable = true;
    return {StatusCode::kTimeout, url + ": no complete answer within the timeout; raise RemoteCacheOptions::timeout_s"};
  }
  if (rc == CURLE_WRITE_ERROR && t.write_errno != 0) {
    return io_error(url + ": cannot write the cache file: " + std::strerror(t.write_errno));
  }
  if (rc == CURLE_WRITE_ERROR && t.overflow) {
    *retryable = true;
    return io_error(url + ": the server sent more bytes than the range asked for");
  }
  if (rc != CURLE_OK) {
    *retryable = true;
    return io_error("download of " + url + " interrupted after " + std::to_string(t.bytes) + " bytes: " +
                    curl_easy_strerror(rc));
  }
  if (t.status == 401 || t.status == 403) {
    std::string how = target.is_s3 ? "; credentials: " + describe_creds(target.creds) +
                                          " (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE)"
                                    : "";
    return {StatusCode::kRemoteError,
            url + ": unauthorized (HTTP " + std::to_string(t.status) + s3_error_code(t.error_body) + ")" + how +
                "; check the keys and the object's permissions"};
  }
  if (t.status == 404) return not_found(url + ": no such object (HTTP 404" + s3_error_code(t.error_body) + ")");
  if (t.status == 412) {
    return io_error(url + ": the object changed while it was being read (HTTP 412, its ETag is no longer the one "
                          "the first block had); restart to read the new object");
  }
  if (t.status == 416) return invalid_argument(url + ": range past the end of the object (HTTP 416)");
  if (t.status == 301 || t.status == 307) {
    return {StatusCode::kRemoteError,
            url + ": HTTP " + std::to_string(t.status) + s3_error_code(t.error_body) +
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

// One request: `method` to target with `body` (PUT) or none; the answer's body
// goes where `t` says. Returns curl's code.
CURLcode perform_raw(const HttpTarget& target, const std::string& method, const std::string* body,
                     const RemoteCacheOptions& opts, Transfer* t) {
  curl_init_once();
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return CURLE_FAILED_INIT;
  curl_slist* headers = nullptr;
  for (const std::string& h : target.headers) headers = curl_slist_append(headers, h.c_str());
  const bool sign = target.is_s3 && !target.creds.access_key_id.empty();
  // No 100-continue round trip on PUT. Not on signed requests: curl 7.88
  // signs every header of CURLOPT_HTTPHEADER, a removed one too ("expect:"
  // with no value, which the server cannot reproduce).
  if (!sign) headers = curl_slist_append(headers, "Expect:");
  long timeout_ms = static_cast<long>(opts.timeout_s * 1000);
  curl_slist* connect_to = nullptr;
  for (const std::string& c : opts.connect_to) connect_to = curl_slist_append(connect_to, c.c_str());
  curl_easy_setopt(curl, CURLOPT_URL, target.url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for timeouts
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, target.is_s3 ? 0L : 1L);  // a redirect would break the signature
  if (target.is_s3) curl_easy_setopt(curl, CURLOPT_PATH_AS_IS, 1L);  // keys may hold "./" and "../"
  if (connect_to != nullptr) curl_easy_setopt(curl, CURLOPT_CONNECT_TO, connect_to);
  std::string sigv4;
  if (sign) {
    sigv4 = "aws:amz:" + target.region + ":s3";
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());
    // Separate options: a key or secret may hold ':'.
    curl_easy_setopt(curl, CURLOPT_USERNAME, target.creds.access_key_id.c_str());
    curl_easy_setopt(curl, CURLOPT_PASSWORD, target.creds.secret_access_key.c_str());
  }
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, t);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, t);
  if (method == "HEAD") curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  if (body != nullptr) {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
  } else if (method != "GET" && method != "HEAD") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  CURLcode rc = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  curl_slist_free_all(connect_to);
  curl_easy_cleanup(curl);
  return rc;
}

Status perform(const std::string& url, const HttpTarget& target, const std::string& method, const std::string* body,
               const RemoteCacheOptions& opts, Transfer* t, bool* retryable) {
  CURLcode rc = perform_raw(target, method, body, opts, t);
  if (rc == CURLE_FAILED_INIT) return internal_error("remote_cache: curl_easy_init failed");
  return classify(rc, *t, url, target, retryable);
}

// One GET attempt into the fresh file `tmp`; verified on success.
Status download_once(const std::string& url, const std::string& tmp, const RemoteCacheOptions& opts,
                     const std::string& expected_xxh64, bool* retryable) {
  *retryable = false;
  LOOM_ASSIGN_OR_RETURN(HttpTarget target, resolve(url, opts, kEmptyPayloadSha256, false));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(tmp + ": cannot create the download file: " + std::strerror(errno));
  Transfer t;
  t.fd = fd;
  t.md5 = EVP_MD_CTX_new();
  t.xxh = XXH64_createState();
  EVP_DigestInit_ex(t.md5, EVP_md5(), nullptr);
  XXH64_reset(t.xxh, 0);
  Status st = perform(url, target, "GET", nullptr, opts, &t, retryable);
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

[[maybe_unused]] Status no_curl(const std::string& url) {
  return unsupported("remote_cache: " + url +
                     " needs libcurl; install libcurl4-openssl-dev libssl-dev and reconfigure, or pass a local path");
}
#else
Status no_curl(const std::string& url) {
  return unsupported("remote_cache: " + url +
                     " needs libcurl; install libcurl4-openssl-dev libssl-dev and reconfigure, or pass a local path");
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

Result<std::string> sha256_hex(const std::string& data) {
#ifdef LOOM_HAVE_CURL
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &md_len, EVP_sha256(), nullptr) != 1) {
    return internal_error("s3: OpenSSL SHA-256 failed");
  }
  std::string out;
  for (unsigned int i = 0; i < md_len; ++i) out += hex64(md[i]).substr(14);
  return out;
#else
  (void)data;
  return unsupported("s3: this build has no OpenSSL/libcurl; install libcurl4-openssl-dev libssl-dev and reconfigure");
#endif
}

bool cached_copy_is(const std::string& path, const std::string& expected_xxh64) {
  if (::access(path.c_str(), F_OK) != 0) return false;
  if (expected_xxh64.empty()) return true;
  const std::string want = lower(expected_xxh64);
  {
    std::ifstream side(path + ".xxh64");
    std::string had;
    if (side >> had && had.size() == 16) return had == want;
  }
  // No record: hash the copy once (XXH64 runs at memory speed).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  std::vector<char> buf(size_t{8} << 20);
  bool ok = true;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ok = false;
    if (n <= 0) break;
    XXH64_update(st, buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  const std::string got = hex64(XXH64_digest(st));
  XXH64_freeState(st);
  if (!ok) return false;
  note_cached_checksum(path, got);
  return got == want;
}

void note_cached_checksum(const std::string& path, const std::string& xxh64) {
  if (xxh64.empty()) return;
  const std::string tmp = path + ".xxh64.tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << lower(xxh64) << "\n";
    if (!out) {
      ::unlink(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), (path + ".xxh64").c_str()) != 0) ::unlink(tmp.c_str());
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
  // Published copies are complete by construction; with an expected checksum
  // the copy must also be that object (the URL may have been re-published).
  if (!opts.refresh && cached_copy_is(final_path, expected_xxh64)) return final_path;

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
  if (!opts.refresh && cached_copy_is(final_path, expected_xxh64)) {
    ::close(lock_fd);
    return final_path;
  }
  // A copy of another version of the object: replaced (readers that have it
  // open keep theirs). A refresh replaces it by the rename below instead, so
  // that a failed download leaves it.
  const bool had_copy = ::access(final_path.c_str(), F_OK) == 0;
  if (had_copy && !opts.refresh) {
    ::unlink(final_path.c_str());
    ::unlink((final_path + ".xxh64").c_str());
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
  if (st.is_ok()) {
    if (expected_xxh64.empty()) ::unlink((final_path + ".xxh64").c_str());  // a refreshed copy: unrecorded
    note_cached_checksum(final_path, expected_xxh64);
  }
  ::close(lock_fd);  // releases the flock
  if (!st.is_ok() && opts.refresh && had_copy &&
      (st.code() == StatusCode::kIoError || st.code() == StatusCode::kTimeout) &&
      cached_copy_is(final_path, expected_xxh64)) {
    // Unreachable: the copy cached before, said aloud.
    if (opts.notice)
      opts.notice(url + " could not be fetched again (" + st.message() + "); using the copy cached in " + final_path);
    return final_path;
  }
  if (!st.is_ok()) return st;
  return final_path;
#else
  return no_curl(url);
#endif
}

Status put_to_remote(const std::string& url, const std::string& body, const RemoteCacheOptions& opts) {
  if (!is_remote(url)) return invalid_argument("remote_cache: put_to_remote needs an s3:// or http(s):// URL, got " + url);
#ifdef LOOM_HAVE_CURL
  LOOM_ASSIGN_OR_RETURN(std::string payload_sha256, sha256_hex(body));
  return with_retries(opts, [&](bool* retryable) -> Status {
    *retryable = false;
    LOOM_ASSIGN_OR_RETURN(HttpTarget target, resolve(url, opts, payload_sha256, true));
    // curl would label the body a form (x-www-form-urlencoded), which some
    // servers parse and drop.
    target.headers.push_back("Content-Type: application/octet-stream");
    Transfer t;
    return perform(url, target, "PUT", &body, opts, &t, retryable);
  });
#else
  (void)body, (void)opts;
  return no_curl(url);
#endif
}

Status fetch_range(const std::string& url, int64_t offset, int64_t length, const RemoteCacheOptions& opts,
                   std::string* out, int64_t* object_size, std::string* etag, const std::string& if_match,
                   bool* etag_is_md5) {
  if (!is_remote(url)) return invalid_argument("remote_cache: fetch_range needs an s3:// or http(s):// URL, got " + url);
  if (offset < 0 || length < 1) {
    return invalid_argument("remote_cache: range [" + std::to_string(offset) + ", +" + std::to_string(length) +
                            ") of " + url + " is empty or negative");
  }
#ifdef LOOM_HAVE_CURL
  return with_retries(opts, [&](bool* retryable) -> Status {
    *retryable = false;
    LOOM_ASSIGN_OR_RETURN(HttpTarget target, resolve(url, opts, kEmptyPayloadSha256, false));
    target.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1));
    if (!if_match.empty()) target.headers.push_back("If-Match: " + if_match);
    Transfer t;
    out->clear();
    out->reserve(static_cast<size_t>(length));
    t.mem = out;
    // A server that ignores Range sends the whole object: accept it only when
    // that is the range (offset 0, the object no longer than asked for).
    t.mem_limit = static_cast<size_t>(length);
    LOOM_RETURN_IF_ERROR(perform(url, target, "GET", nullptr, opts, &t, retryable));
    int64_t total = -1;
    if (t.status == 206) {
      // "bytes FIRST-LAST/TOTAL"
      long long first = -1, last = -1, size = -1;
      if (std::sscanf(t.content_range.c_str(), "bytes %lld-%lld/%lld", &first, &last, &size) != 3 || first != offset) {
        return {StatusCode::kRemoteError, url + ": unexpected Content-Range '" + t.content_range + "' for bytes " +
                                              std::to_string(offset) + "-" + std::to_string(offset + length - 1)};
      }
      total = size;
    } else if (t.status == 200 && offset == 0) {
      total = t.bytes;  // the whole object came, and it fit
    } else {
      return {StatusCode::kRemoteError, url + ": HTTP " + std::to_string(t.status) + " to a Range request"};
    }
    const int64_t expect = std::min<int64_t>(length, total - offset);
    if (t.bytes != expect || (t.content_length >= 0 && t.content_length != t.bytes)) {
      *retryable = true;
      return io_error(url + ": got " + std::to_string(t.bytes) + " bytes of the range at " + std::to_string(offset) +
                      ", expected " + std::to_string(expect));
    }
    if (expect != length) {
      return invalid_argument(url + ": range [" + std::to_string(offset) + ", " + std::to_string(offset + length) +
                              ") runs past the object's end (" + std::to_string(total) + " bytes)");
    }
    if (object_size != nullptr) *object_size = total;
    if (etag != nullptr) *etag = t.etag;
    if (etag_is_md5 != nullptr) {
      std::string e = t.etag;
      if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
      *etag_is_md5 = target.is_s3 && !t.sse_non_md5 && e.size() == 32 &&
                     lower(e).find_first_not_of("0123456789abcdef") == std::string::npos;
    }
    return Status::ok();
  });
#else
  (void)opts, (void)out, (void)object_size, (void)etag, (void)if_match, (void)etag_is_md5;
  return no_curl(url);
#endif
}

namespace {

// The text of each <tag>...</tag> in `xml`, XML entities decoded.
std::vector<std::string> xml_values(const std::string& xml, const std::string& tag) {
  std::vector<std::string> out;
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  for (size_t p = xml.find(open); p != std::string::npos; p = xml.find(open, p)) {
    p += open.size();
    size_t e = xml.find(close, p);
    if (e == std::string::npos) break;
    std::string v;
    for (size_t i = p; i < e; ++i) {
      if (xml[i] != '&') {
        v.push_back(xml[i]);
        continue;
      }
      static const std::pair<const char*, char> kEntities[] = {
          {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
      bool done = false;
      for (auto [name, ch] : kEntities)
        if (xml.compare(i, std::strlen(name), name) == 0) {
          v.push_back(ch);
          i += std::strlen(name) - 1;
          done = true;
          break;
        }
      if (!done && xml.compare(i, 2, "&#") == 0) {  // &#13; &#x0D;
        size_t semi = xml.find(';', i);
        if (semi != std::string::npos && semi < e) {
          bool hex = xml[i + 2] == 'x';
          unsigned long cp = std::strtoul(xml.substr(i + (hex ? 3 : 2), semi - i - (hex ? 3 : 2)).c_str(), nullptr,
                                          hex ? 16 : 10);
          if (cp < 0x80) v.push_back(static_cast<char>(cp));
          i = semi;
          done = true;
        }
      }
      if (!done) v.push_back('&');
    }
    out.push_back(std::move(v));
    p = e + close.size();
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> list_s3_objects(const std::string& url, const RemoteCacheOptions& opts) {
#ifndef LOOM_HAVE_CURL
  (void)opts;
  return no_curl(url);
#else
  std::string bucket, key;
  LOOM_RETURN_IF_ERROR(split_s3_url(url, &bucket, &key, true));
  const size_t wild = key.find_first_of("*?[");
  const bool pattern = wild != std::string::npos;
  if (!pattern && !key.empty() && key.back() != '/')
    return invalid_argument(url + ": not a listing (end it with / for a folder, or use * ? [..])");
  const std::string prefix = pattern ? key.substr(0, wild) : key;
  std::vector<std::string> keys;
  std::string token;
  for (int page = 0;; ++page) {
    std::map<std::string, std::string> q = {{"list-type", "2"}, {"prefix", prefix}};
    if (!pattern) q["delimiter"] = "/";  // a folder's direct children
    if (!token.empty()) q["continuation-token"] = token;
    LOOM_ASSIGN_OR_RETURN(HttpReply r, s3_call("GET", "s3://" + bucket + "/", s3_query(q), {}, "", opts));
    if (r.status == 401 || r.status == 403)
      return Status(StatusCode::kRemoteError, url + ": listing is unauthorized (HTTP " + std::to_string(r.status) +
                                                  s3_error_code(r.body) +
                                                  "); check the credentials (AWS_ACCESS_KEY_ID, --aws-profile) and "
                                                  "that they may list the bucket (s3:ListBucket)");
    if (r.status == 404) return not_found(url + ": no such bucket (HTTP 404" + s3_error_code(r.body) + ")");
    if (r.status != 200)
      return Status(StatusCode::kRemoteError,
                    url + ": listing failed (HTTP " + std::to_string(r.status) + s3_error_code(r.body) + ")");
    for (std::string& k : xml_values(r.body, "Key")) {
      if (pattern ? ::fnmatch(key.c_str(), k.c_str(), FNM_PATHNAME) == 0 : k.size() > prefix.size())
        keys.push_back(std::move(k));
    }
    auto truncated = xml_values(r.body, "IsTruncated");
    auto next = xml_values(r.body, "NextContinuationToken");
    if (truncated.empty() || truncated[0] != "true" || next.empty() || next[0].empty()) break;
    token = next[0];
    if (page > 100000) return Status(StatusCode::kRemoteError, url + ": the listing does not end");
  }
  if (keys.empty()) return not_found(url + ": matches no object");
  std::sort(keys.begin(), keys.end());
  std::vector<std::string> urls;
  for (const std::string& k : keys) urls.push_back("s3://" + bucket + "/" + k);
  return urls;
#endif
}

Result<HttpReply> s3_call(const std::string& method, const std::string& s3_url, const std::string& raw_query,
                          const std::vector<std::string>& headers, const std::string& body,
                          const RemoteCacheOptions& opts) {
#ifdef LOOM_HAVE_CURL
  LOOM_ASSIGN_OR_RETURN(std::string payload_sha256, sha256_hex(body));
  LOOM_ASSIGN_OR_RETURN(HttpTarget target, resolve(s3_url, opts, payload_sha256, true, raw_query));
  for (const std::string& h : headers) target.headers.push_back(h);
  HttpReply reply;
  Transfer t;
  t.mem = &reply.body;
  t.mem_limit = size_t{1} << 30;
  t.keep_error_body_whole = true;
  const bool with_body = method == "PUT" || method == "POST";
  CURLcode rc = perform_raw(target, method, with_body ? &body : nullptr, opts, &t);
  if (rc != CURLE_OK) return io_error(s3_url + ": " + curl_easy_strerror(rc));
  reply.status = t.status;
  reply.headers = t.headers;
  return reply;
#else
  (void)method, (void)raw_query, (void)headers, (void)body, (void)opts;
  return no_curl(s3_url);
#endif
}

}  // namespace loom::data
