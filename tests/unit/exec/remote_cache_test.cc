// Remote shard cache and SigV4 signing.
//
// Truths: AWS's published SigV4 examples (S3 API reference, "Signature
// Calculations for the Authorization Header"); a real S3-compatible server
// (moto, `python3 -m moto.server`) on loopback for uploads and downloads; a
// tiny in-test HTTP server for the failures moto does not produce (403, a
// cut-off body, a wrong ETag). Tests needing moto skip when it is missing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "exec/data/remote_cache.h"
#include "exec/data/remote_file.h"
#include "exec/data/s3_config.h"
#include "gtest/gtest.h"

namespace loom::data {
namespace {
namespace fs = std::filesystem;
using std::chrono::milliseconds;

// ---- helpers -----------------------------------------------------------------

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool port_open(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

std::string xxh64_hex(const std::string& s) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(XXH64(s.data(), s.size(), 0)));
  return buf;
}

// Files in `dir` whose name contains ".tmp." (in-flight or leftover downloads).
int count_temp_files(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().find(".tmp.") != std::string::npos;
  return n;
}

bool have_curl() {
  RemoteCacheOptions no_retry;
  no_retry.retries = 0;
  return put_to_remote("http://127.0.0.1:1/x", "", no_retry).code() != StatusCode::kUnsupported;
}

bool have_moto() {
  static const bool have = std::system("python3 -c 'import moto.server, flask, boto3' >/dev/null 2>&1") == 0;
  return have;
}

// Output of a shell command, or "" when it fails.
std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[256];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  return ::pclose(p) == 0 ? out : "";
}

// `python3 -m moto.server` on 127.0.0.1:port as a child process; always killed
// (destructor, and PR_SET_PDEATHSIG if this test process dies first).
class MotoServer {
 public:
  // `no_auth_actions` >= 0 makes moto check SigV4 signatures and IAM
  // permissions after that many unauthenticated requests.
  explicit MotoServer(int no_auth_actions = -1) : port_(free_port()) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (no_auth_actions >= 0) ::setenv("INITIAL_NO_AUTH_ACTION_COUNT", std::to_string(no_auth_actions).c_str(), 1);
      std::freopen("/dev/null", "w", stdout);
      std::freopen("/dev/null", "w", stderr);
      std::string port = std::to_string(port_);
      ::execlp("python3", "python3", "-m", "moto.server", "-H", "127.0.0.1", "-p", port.c_str(), nullptr);
      ::_exit(127);
    }
    for (int i = 0; i < 150 && !port_open(port_); ++i) std::this_thread::sleep_for(milliseconds(100));
  }
  ~MotoServer() { stop(); }
  bool up() const { return pid_ > 0 && port_open(port_); }
  int port() const { return port_; }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  int port_;
  pid_t pid_ = -1;
};

// A one-response-per-connection HTTP server on loopback: reads the request
// head, writes whatever `respond` returns, closes the connection.
class FakeHttpServer {
 public:
  explicit FakeHttpServer(std::function<std::string(const std::string&)> respond) : respond_(std::move(respond)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(listen_fd_, 16);
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeHttpServer() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }
  int port() const { return port_; }
  int requests() const { return requests_; }
  std::string last_request() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_request_;
  }
  void set_respond(std::function<std::string(const std::string&)> respond) {
    std::lock_guard<std::mutex> lock(mu_);
    respond_ = std::move(respond);
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      // The body, by Content-Length (after a "100 Continue" when asked).
      const size_t head_end = req.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        std::string head = req.substr(0, head_end);
        for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        size_t cl = head.find("\r\ncontent-length:");
        const size_t want = cl == std::string::npos ? 0 : std::strtoul(head.c_str() + cl + 17, nullptr, 10);
        if (want > 0 && head.find("\r\nexpect: 100-continue") != std::string::npos &&
            req.size() == head_end + 4) {
          const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
          (void)::send(fd, cont, sizeof(cont) - 1, MSG_NOSIGNAL);
        }
        while (req.size() < head_end + 4 + want) {
          ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
          if (n <= 0) break;
          req.append(buf, static_cast<size_t>(n));
        }
      }
      std::string resp;
      {
        std::lock_guard<std::mutex> lock(mu_);
        last_request_ = req;
        resp = respond_(req);
      }
      ++requests_;
      for (size_t done = 0; done < resp.size();) {
        ssize_t n = ::send(fd, resp.data() + done, resp.size() - done, MSG_NOSIGNAL);
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
      ::shutdown(fd, SHUT_RDWR);
      ::close(fd);
    }
  }

  std::function<std::string(const std::string&)> respond_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::string last_request_;
  std::thread thread_;
};

std::string http_response(const std::string& status, const std::string& extra_headers, const std::string& body) {
  return "HTTP/1.1 " + status + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra_headers +
         "Connection: close\r\n\r\n" + body;
}

void isolate_aws_env(const std::string& dir);

// ---- local paths ---------------------------------------------------------------

class RemoteCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/loom_remote_cache_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    opts_.cache_dir = dir_ + "/cache";
    opts_.timeout_s = 10;
    opts_.retries = 1;
    ::setenv("AWS_ACCESS_KEY_ID", "AKIDLOOMTEST", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "loom-test-secret", 1);
    ::setenv("AWS_REGION", "us-east-1", 1);
    isolate_aws_env(dir_);
  }
  void TearDown() override {
    ::unsetenv("AWS_ENDPOINT_URL");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void use_endpoint(int port) {
    ::setenv("AWS_ENDPOINT_URL", ("http://127.0.0.1:" + std::to_string(port)).c_str(), 1);
  }

  std::string dir_;
  RemoteCacheOptions opts_;
};

TEST_F(RemoteCacheTest, LocalPathsPassThrough) {
  std::string path = dir_ + "/shard.bin";
  std::ofstream(path) << "local";
  auto r = fetch_to_cache(path, opts_);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(*r, path);
  EXPECT_EQ(*fetch_to_cache("file://" + path, opts_), path);
  auto missing = fetch_to_cache(dir_ + "/nope.bin", opts_);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.bin"), std::string::npos);
  EXPECT_EQ(fetch_to_cache("s3://b/k", opts_, "xyz").status().code(), StatusCode::kInvalidArgument);
}

// ---- configuration: credentials, endpoints, addressing ------------------------------

// Only what a test sets counts: no ~/.aws files, no AWS_* from the shell.
void isolate_aws_env(const std::string& dir) {
  for (const char* v : {"AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_DEFAULT_REGION", "AWS_PROFILE",
                        "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "LOOM_S3_ADDRESSING"})
    ::unsetenv(v);
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", (dir + "/no-credentials").c_str(), 1);
  ::setenv("AWS_CONFIG_FILE", (dir + "/no-config").c_str(), 1);
  // Never 169.254.169.254 / 169.254.170.2: anonymous means anonymous, on EC2 too.
  for (const char* v : {"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                        "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                        "AWS_EC2_METADATA_SERVICE_ENDPOINT"})
    ::unsetenv(v);
  ::setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  set_container_credentials_host_for_testing("");
  clear_s3_credential_cache();
}

S3Options s3o(const std::string& endpoint, const std::string& addressing = "", const std::string& profile = "") {
  S3Options o;
  o.endpoint = endpoint;
  o.addressing = addressing;
  o.profile = profile;
  return o;
}

class S3ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/loom_s3_config_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}) ::unsetenv(v);
    isolate_aws_env(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}) ::unsetenv(v);
    isolate_aws_env(dir_);
  }
  void write(const std::string& name, const std::string& text, const char* env_var) {
    std::ofstream(dir_ + "/" + name) << text;
    ::setenv(env_var, (dir_ + "/" + name).c_str(), 1);
  }
  std::string url(const std::string& bucket, const std::string& key, S3Options o = {}) {
    auto s = resolve_s3_settings(o);
    if (!s.is_ok()) return "ERROR " + s.status().to_string();
    auto a = s3_address(bucket, key, *s);
    return a.is_ok() ? a->url : "ERROR " + a.status().to_string();
  }
  std::string dir_;
};

TEST_F(S3ConfigTest, UrlsForAwsOssMinioAndMoto) {
  // AWS: virtual-hosted by default, in the region; path-style for a bucket no
  // DNS label can name or (TLS) one with dots. boto3 1.43 gives the same URLs.
  ::setenv("AWS_REGION", "us-west-2", 1);
  EXPECT_EQ(url("mybucket", "dir/a b+c.bin"), "https://mybucket.s3.us-west-2.amazonaws.com/dir/a%20b%2Bc.bin");
  EXPECT_EQ(url("my.bucket", "k"), "https://s3.us-west-2.amazonaws.com/my.bucket/k");
  EXPECT_EQ(url("My_Bucket", "k"), "https://s3.us-west-2.amazonaws.com/My_Bucket/k");
  EXPECT_EQ(url("mybucket", "k", s3o("", "path")), "https://s3.us-west-2.amazonaws.com/mybucket/k");
  EXPECT_EQ(url("mybucket", "\xe2\x9c\x93/x~y"), "https://mybucket.s3.us-west-2.amazonaws.com/%E2%9C%93/x~y");
  // Alibaba OSS: virtual-hosted only (it refuses path-style), so addressing must
  // say so, as with boto3 (a custom endpoint is path-style by default).
  S3Options oss = s3o("https://oss-cn-hangzhou.aliyuncs.com");
  EXPECT_EQ(url("mybucket", "k", oss), "https://oss-cn-hangzhou.aliyuncs.com/mybucket/k");
  oss.addressing = "virtual";
  EXPECT_EQ(url("mybucket", "d/k", oss), "https://mybucket.oss-cn-hangzhou.aliyuncs.com/d/k");
  ::setenv("LOOM_S3_ADDRESSING", "virtual", 1);
  EXPECT_EQ(url("mybucket", "k", s3o("https://oss-cn-hangzhou.aliyuncs.com")),
            "https://mybucket.oss-cn-hangzhou.aliyuncs.com/k");
  ::unsetenv("LOOM_S3_ADDRESSING");
  // MinIO (path-style, its default), with a default port dropped and a path prefix kept.
  EXPECT_EQ(url("data", "k", s3o("http://minio.example.com:9000")), "http://minio.example.com:9000/data/k");
  EXPECT_EQ(url("data", "k", s3o("https://minio.example.com:443/s3/")), "https://minio.example.com/s3/data/k");
  // moto on loopback; AWS_ENDPOINT_URL_S3 beats AWS_ENDPOINT_URL, --endpoint beats both.
  ::setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:5000", 1);
  EXPECT_EQ(url("b", "k"), "http://127.0.0.1:5000/b/k");
  ::setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:5001", 1);
  EXPECT_EQ(url("b", "k"), "http://127.0.0.1:5001/b/k");
  EXPECT_EQ(url("b", "k", s3o("http://127.0.0.1:5002")), "http://127.0.0.1:5002/b/k");
  EXPECT_NE(url("b", "k", s3o("minio:9000")).find("not http(s)://"), std::string::npos);
  EXPECT_NE(url("b", "k", s3o("", "dns")).find("not auto, virtual or path"), std::string::npos);
  EXPECT_EQ(s3_query({{"prefix", "a b/c"}, {"max-keys", "2"}, {"list-type", "2"}}),
            "list-type=2&max-keys=2&prefix=a%20b%2Fc");
}

TEST_F(S3ConfigTest, CredentialPrecedenceFollowsTheAwsCli) {
  // No credentials anywhere: anonymous.
  auto none = resolve_s3_settings({});
  ASSERT_TRUE(none.is_ok()) << none.status().to_string();
  EXPECT_TRUE(none->creds.access_key_id.empty());
  EXPECT_EQ(none->region, "us-east-1");

  write("credentials",
        "[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = sdefault\n"
        "[train] # a comment\naws_access_key_id=AKTRAIN\naws_secret_access_key=strain\naws_session_token = TOKTRAIN\n",
        "AWS_SHARED_CREDENTIALS_FILE");
  write("config",
        "[default]\nregion = eu-west-1\n"
        "[profile train]\nregion = cn-hangzhou\nendpoint_url = https://oss-cn-hangzhou.aliyuncs.com\n"
        "s3 =\n  addressing_style = virtual\n"
        "[profile minio]\naws_access_key_id = AKMINIO\naws_secret_access_key = sminio\nservices = local\n"
        "[services local]\ns3 =\n  endpoint_url = http://127.0.0.1:9000\n"
        "[profile sso]\nsso_session = corp\n",
        "AWS_CONFIG_FILE");
  auto def = resolve_s3_settings({});
  ASSERT_TRUE(def.is_ok()) << def.status().to_string();
  EXPECT_EQ(def->creds.access_key_id, "AKDEFAULT");
  EXPECT_EQ(def->region, "eu-west-1");
  EXPECT_NE(def->creds.source.find("'default'"), std::string::npos) << def->creds.source;

  ::setenv("AWS_PROFILE", "train", 1);
  auto train = resolve_s3_settings({});
  ASSERT_TRUE(train.is_ok()) << train.status().to_string();
  EXPECT_EQ(train->creds.access_key_id, "AKTRAIN");
  EXPECT_EQ(train->creds.session_token, "TOKTRAIN");
  EXPECT_EQ(train->region, "cn-hangzhou");
  EXPECT_EQ(url("bkt", "k"), "https://bkt.oss-cn-hangzhou.aliyuncs.com/k");

  // Keys in the environment beat AWS_PROFILE's (as botocore's chain), but the
  // profile's region and endpoint still apply.
  ::setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "senv", 1);
  auto env = resolve_s3_settings({});
  ASSERT_TRUE(env.is_ok());
  EXPECT_EQ(env->creds.access_key_id, "AKENV");
  EXPECT_TRUE(env->creds.session_token.empty());
  EXPECT_EQ(env->region, "cn-hangzhou");
  // An explicit profile (boto3's Session(profile_name=)) beats the environment.
  auto explicit_profile = resolve_s3_settings(s3o("", "", "minio"));
  ASSERT_TRUE(explicit_profile.is_ok()) << explicit_profile.status().to_string();
  EXPECT_EQ(explicit_profile->creds.access_key_id, "AKMINIO");  // from the config file
  EXPECT_EQ(url("b", "k", s3o("", "", "minio")), "http://127.0.0.1:9000/b/k");  // [services local]
  ::setenv("AWS_REGION", "ap-south-1", 1);
  EXPECT_EQ(resolve_s3_settings({})->region, "ap-south-1");

  // Half a key pair, a profile that is nowhere, one loom cannot use: errors.
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  EXPECT_EQ(resolve_s3_settings({}).status().code(), StatusCode::kInvalidArgument);
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::setenv("AWS_PROFILE", "nope", 1);
  auto missing = resolve_s3_settings({});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos) << missing.status().message();
  EXPECT_EQ(resolve_s3_settings(s3o("", "", "sso")).status().code(), StatusCode::kUnsupported);
}

// ---- container credentials and EC2 instance metadata (IMDSv2) ----------------------

std::string request_line(const std::string& req) { return req.substr(0, req.find("\r\n")); }
std::string lower_copy(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string iso8601_in(int seconds) {
  std::time_t t = std::time(nullptr) + seconds;
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}
std::string creds_json(const std::string& key, const std::string& token, int expires_in_s,
                       const std::string& code = "Success") {
  return "{\n  \"Code\" : \"" + code + "\",\n  \"LastUpdated\" : \"2026-01-01T00:00:00Z\",\n  \"Type\" : "
         "\"AWS-HMAC\",\n  \"AccessKeyId\" : \"" + key + "\",\n  \"SecretAccessKey\" : \"s\\/ecret\",\n"
         "  \"Token\" : \"" + token + "\",\n  \"Expiration\" : \"" + iso8601_in(expires_in_s) + "\"\n}";
}

// An IMDSv2 responder: a token for a PUT with the TTL header, the role and its
// keys for GETs that carry that token, 401 for GETs without it.
class FakeImds {
 public:
  FakeImds()
      : server_([this](const std::string& req) { return respond(req); }) {}
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(server_.port()); }
  std::vector<std::string> log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  int requests() const { return server_.requests(); }
  void set_creds_json(const std::string& j) {
    std::lock_guard<std::mutex> lock(mu_);
    json_ = j;
  }

 private:
  std::string respond(const std::string& req) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string line = request_line(req), low = lower_copy(req);
    log_.push_back(line);
    if (line.rfind("PUT /latest/api/token ", 0) == 0) {
      if (low.find("\r\nx-aws-ec2-metadata-token-ttl-seconds: 21600\r\n") == std::string::npos)
        return http_response("400 Bad Request", "", "");
      return http_response("200 OK", "", "IMDSTOKEN-1");
    }
    if (low.find("\r\nx-aws-ec2-metadata-token: imdstoken-1\r\n") == std::string::npos)
      return http_response("401 Unauthorized", "", "");
    if (line.rfind("GET /latest/meta-data/iam/security-credentials/ ", 0) == 0)
      return http_response("200 OK", "", "loom-role\n");
    if (line.rfind("GET /latest/meta-data/iam/security-credentials/loom-role ", 0) == 0)
      return http_response("200 OK", "", json_);
    return http_response("404 Not Found", "", "");
  }
  std::mutex mu_;
  std::vector<std::string> log_;
  std::string json_ = creds_json("ASIAIMDSKEY", "IMDS-SESSION-TOKEN", 6 * 3600);
  FakeHttpServer server_;  // last: stopped first
};

class MetadataCredsTest : public S3ConfigTest {
 protected:
  void SetUp() override {
    S3ConfigTest::SetUp();
    if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
    ::unsetenv("AWS_EC2_METADATA_DISABLED");
    // Nothing answers here unless a test says so (never the real 169.254.169.254).
    ::setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", ("http://127.0.0.1:" + std::to_string(free_port())).c_str(), 1);
  }
};

TEST_F(MetadataCredsTest, Imdsv2TokenRoleAndKeysAreFetchedOnceAndSignRequests) {
  FakeImds imds;
  ::setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", (imds.endpoint() + "/").c_str(), 1);
  auto s = resolve_s3_settings({});
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->creds.access_key_id, "ASIAIMDSKEY");
  EXPECT_EQ(s->creds.secret_access_key, "s/ecret");
  EXPECT_EQ(s->creds.session_token, "IMDS-SESSION-TOKEN");
  EXPECT_EQ(s->creds.source, "EC2 instance metadata, role loom-role");
  const std::vector<std::string> want = {"PUT /latest/api/token HTTP/1.1",
                                         "GET /latest/meta-data/iam/security-credentials/ HTTP/1.1",
                                         "GET /latest/meta-data/iam/security-credentials/loom-role HTTP/1.1"};
  EXPECT_EQ(imds.log(), want);
  // Cached for the process: no second round trip.
  ASSERT_TRUE(resolve_s3_settings({}).is_ok());
  EXPECT_EQ(imds.requests(), 3);

  // A request to S3 is signed with those keys and carries the session token.
  FakeHttpServer s3([](const std::string&) { return http_response("200 OK", "ETag: \"x\"\r\n", ""); });
  ::setenv("AWS_ENDPOINT_URL", ("http://127.0.0.1:" + std::to_string(s3.port())).c_str(), 1);
  RemoteCacheOptions o;
  o.retries = 0;
  o.timeout_s = 10;
  Status put = put_to_remote("s3://bucket/key", "data", o);
  ::unsetenv("AWS_ENDPOINT_URL");
  ASSERT_TRUE(put.is_ok()) << put.to_string();
  const std::string req = s3.last_request();
  EXPECT_NE(req.find("Credential=ASIAIMDSKEY/"), std::string::npos) << req;
  EXPECT_NE(lower_copy(req).find("x-amz-security-token: imds-session-token"), std::string::npos) << req;
  EXPECT_EQ(imds.requests(), 3);
}

TEST_F(MetadataCredsTest, ImdsKeysCloseToExpirationAreFetchedAgain) {
  FakeImds imds;
  ::setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.endpoint().c_str(), 1);
  imds.set_creds_json(creds_json("ASIAOLD", "T1", 120));  // within 5 minutes of Expiration
  ASSERT_EQ(resolve_s3_settings({})->creds.access_key_id, "ASIAOLD");
  imds.set_creds_json(creds_json("ASIANEW", "T2", 6 * 3600));
  auto s = resolve_s3_settings({});
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->creds.access_key_id, "ASIANEW");
  EXPECT_EQ(imds.requests(), 6);
  ASSERT_TRUE(resolve_s3_settings({}).is_ok());
  EXPECT_EQ(imds.requests(), 6);  // fresh now: cached

  // A bad answer is a clear error naming the URL and how to turn IMDS off.
  clear_s3_credential_cache();
  imds.set_creds_json("{\"Code\": \"Success\", \"AccessKeyId\": ");
  auto bad = resolve_s3_settings({});
  ASSERT_EQ(bad.status().code(), StatusCode::kParseError);
  EXPECT_NE(bad.status().message().find(imds.endpoint() + "/latest/meta-data/iam/security-credentials/loom-role"),
            std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("AWS_EC2_METADATA_DISABLED"), std::string::npos);
  clear_s3_credential_cache();
  imds.set_creds_json(creds_json("ASIAX", "T", 3600, "AssumeRoleUnauthorizedAccess"));
  auto code = resolve_s3_settings({});
  ASSERT_EQ(code.status().code(), StatusCode::kParseError);
  EXPECT_NE(code.status().message().find("AssumeRoleUnauthorizedAccess"), std::string::npos);

  // A refresh that fails keeps keys that have not expired yet (tried again a minute later).
  clear_s3_credential_cache();
  imds.set_creds_json(creds_json("ASIASTILLVALID", "T", 120));
  ASSERT_EQ(resolve_s3_settings({})->creds.access_key_id, "ASIASTILLVALID");
  const int before = imds.requests();
  imds.set_creds_json("not json");
  auto kept = resolve_s3_settings({});
  ASSERT_TRUE(kept.is_ok()) << kept.status().to_string();
  EXPECT_EQ(kept->creds.access_key_id, "ASIASTILLVALID");
  EXPECT_EQ(imds.requests(), before + 3);
  EXPECT_EQ(resolve_s3_settings({})->creds.access_key_id, "ASIASTILLVALID");
  EXPECT_EQ(imds.requests(), before + 3);
}

TEST_F(MetadataCredsTest, EnvironmentAndProfilesBeatImdsWhichIsNotEvenAsked) {
  FakeImds imds;
  ::setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.endpoint().c_str(), 1);
  ::setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "senv", 1);
  auto env = resolve_s3_settings({});
  ASSERT_TRUE(env.is_ok());
  EXPECT_EQ(env->creds.access_key_id, "AKENV");
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  write("credentials", "[default]\naws_access_key_id = AKPROFILE\naws_secret_access_key = sp\n",
        "AWS_SHARED_CREDENTIALS_FILE");
  EXPECT_EQ(resolve_s3_settings({})->creds.access_key_id, "AKPROFILE");
  EXPECT_EQ(imds.requests(), 0);

  // AWS_EC2_METADATA_DISABLED=true: anonymous, IMDS untouched.
  write("credentials", "", "AWS_SHARED_CREDENTIALS_FILE");
  ::setenv("AWS_EC2_METADATA_DISABLED", "True", 1);
  auto off = resolve_s3_settings({});
  ASSERT_TRUE(off.is_ok());
  EXPECT_TRUE(off->creds.access_key_id.empty());
  EXPECT_EQ(imds.requests(), 0);
  ::unsetenv("AWS_EC2_METADATA_DISABLED");
  EXPECT_EQ(resolve_s3_settings({})->creds.access_key_id, "ASIAIMDSKEY");
  EXPECT_EQ(imds.requests(), 3);
}

TEST_F(MetadataCredsTest, SilentImdsFallsThroughToAnonymousQuicklyOncePerProcess) {
  // Accepts connections (the kernel's backlog) and never answers.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 8), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", ("http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port))).c_str(),
           1);
  auto t0 = std::chrono::steady_clock::now();
  auto s = resolve_s3_settings({});
  auto first = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_TRUE(s->creds.access_key_id.empty());
  EXPECT_EQ(s->creds.source, "none (anonymous requests)");
  EXPECT_GE(first, milliseconds(900));
  EXPECT_LT(first, milliseconds(2500));
  t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(resolve_s3_settings({}).is_ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(200));  // "none" is cached
  ::close(fd);
  // Nothing listening at all (connection refused): anonymous at once.
  clear_s3_credential_cache();
  t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(resolve_s3_settings({})->creds.access_key_id.empty());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1500));
}

TEST_F(MetadataCredsTest, ContainerRelativeAndFullUriWithAuthorizationToken) {
  FakeImds imds;  // container credentials come first: IMDS is never asked
  ::setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.endpoint().c_str(), 1);
  std::mutex mu;
  std::vector<std::string> seen;
  FakeHttpServer agent([&](const std::string& req) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(request_line(req));
    const std::string low = lower_copy(req);
    const size_t a = low.find("\r\nauthorization: ");
    const std::string auth = a == std::string::npos ? "" : req.substr(a + 17, req.find("\r\n", a + 2) - a - 17);
    if (request_line(req).rfind("GET /v2/credentials/abc ", 0) == 0 && auth.empty())
      return http_response("200 OK", "", creds_json("ASIARELATIVE", "TREL", 3600));
    if (request_line(req).rfind("GET /full ", 0) == 0 && (auth == "file-token" || auth == "env-token"))
      return http_response("200 OK", "", creds_json("ASIAFULL-" + auth, "TFULL", 3600));
    if (request_line(req).rfind("GET /bad ", 0) == 0) return http_response("200 OK", "", "<html>not json</html>");
    return http_response("403 Forbidden", "", "{\"message\": \"bad token\"}");
  });
  const std::string base = "http://127.0.0.1:" + std::to_string(agent.port());

  set_container_credentials_host_for_testing("127.0.0.1:" + std::to_string(agent.port()));
  ::setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc", 1);
  auto rel = resolve_s3_settings({});
  ASSERT_TRUE(rel.is_ok()) << rel.status().to_string();
  EXPECT_EQ(rel->creds.access_key_id, "ASIARELATIVE");
  EXPECT_EQ(rel->creds.session_token, "TREL");
  EXPECT_EQ(rel->creds.source, "container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI)");
  ::unsetenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");

  ::setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", (base + "/full").c_str(), 1);
  ::setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "env-token", 1);
  auto full = resolve_s3_settings({});
  ASSERT_TRUE(full.is_ok()) << full.status().to_string();
  EXPECT_EQ(full->creds.access_key_id, "ASIAFULL-env-token");
  EXPECT_EQ(full->creds.source, "container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI)");
  // The token file (EKS Pod Identity) beats the variable.
  clear_s3_credential_cache();
  std::ofstream(dir_ + "/token") << "file-token\n";
  ::setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", (dir_ + "/token").c_str(), 1);
  EXPECT_EQ(resolve_s3_settings({})->creds.access_key_id, "ASIAFULL-file-token");
  // A wrong token: the agent's 403, naming the URL and the variable.
  clear_s3_credential_cache();
  std::ofstream(dir_ + "/token") << "wrong";
  auto denied = resolve_s3_settings({});
  ASSERT_EQ(denied.status().code(), StatusCode::kIoError);
  EXPECT_NE(denied.status().message().find(base + "/full"), std::string::npos) << denied.status().message();
  EXPECT_NE(denied.status().message().find("AWS_CONTAINER_CREDENTIALS_FULL_URI"), std::string::npos);
  EXPECT_NE(denied.status().message().find("403"), std::string::npos);
  ::setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", (dir_ + "/missing-token").c_str(), 1);
  auto no_file = resolve_s3_settings({});
  ASSERT_EQ(no_file.status().code(), StatusCode::kIoError);
  EXPECT_NE(no_file.status().message().find("missing-token"), std::string::npos);
  ::unsetenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  ::unsetenv("AWS_CONTAINER_AUTHORIZATION_TOKEN");

  // Malformed JSON, an agent that is not there, a plain-http host that is no agent.
  ::setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", (base + "/bad").c_str(), 1);
  auto bad = resolve_s3_settings({});
  ASSERT_EQ(bad.status().code(), StatusCode::kParseError);
  EXPECT_NE(bad.status().message().find(base + "/bad"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("AWS_CONTAINER_CREDENTIALS_FULL_URI"), std::string::npos);
  const std::string gone = "http://127.0.0.1:" + std::to_string(free_port()) + "/creds";
  ::setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", gone.c_str(), 1);
  auto down = resolve_s3_settings({});
  ASSERT_EQ(down.status().code(), StatusCode::kIoError);
  EXPECT_NE(down.status().message().find(gone), std::string::npos) << down.status().message();
  ::setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://example.com/creds", 1);
  EXPECT_EQ(resolve_s3_settings({}).status().code(), StatusCode::kInvalidArgument);
  ::unsetenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  EXPECT_EQ(imds.requests(), 0);
  EXPECT_EQ(seen.size(), 5u);
}

// ---- libcurl's SigV4 signer, case by case -------------------------------------------

// AWS's published SigV4 examples (S3 API reference, "Signature Calculations
// for the Authorization Header"), sent through loom's request path (curl
// signs; the date is fixed with an x-amz-date header, the example host routed
// to a loopback server with CONNECT_TO).
class CurlSignerTest : public RemoteCacheTest {
 protected:
  void SetUp() override {
    RemoteCacheTest::SetUp();
    if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
  }
  // The Signature= of the request that `send` makes to the capture server.
  std::string signature_of(const std::string& req) {
    size_t p = req.find("Signature=");
    return p == std::string::npos ? "" : req.substr(p + 10, 64);
  }
};

TEST_F(CurlSignerTest, ReproducesAwsPublishedExamples) {
  FakeHttpServer server([](const std::string&) { return http_response("200 OK", "", "ok"); });
  ::setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", 1);
  opts_.s3.endpoint = "http://s3.amazonaws.com";
  opts_.s3.addressing = "virtual";
  opts_.connect_to = {"examplebucket.s3.amazonaws.com:80:127.0.0.1:" + std::to_string(server.port())};
  const std::string date = "x-amz-date: 20130524T000000Z";

  // GET Object with a Range header.
  auto r = s3_call("GET", "s3://examplebucket/test.txt", "", {"Range: bytes=0-9", date}, "", opts_);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(signature_of(server.last_request()), "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
      << server.last_request();
  EXPECT_NE(server.last_request().find("SignedHeaders=host;range;x-amz-content-sha256;x-amz-date"), std::string::npos);

  // PUT Object: the payload's hash, a Date and an x-amz-storage-class header.
  r = s3_call("PUT", "s3://examplebucket/test$file.text", "",
              {"Date: Fri, 24 May 2013 00:00:00 GMT", "x-amz-storage-class: REDUCED_REDUNDANCY", date},
              "Welcome to Amazon S3.", opts_);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(signature_of(server.last_request()), "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")
      << server.last_request();

  // GET Bucket (ListObjects) with a query: right when the query comes sorted
  // (s3_query); curl 7.88 signs the query exactly as the URL has it, so an
  // unsorted one gets another signature, which S3 would refuse.
  const std::string sorted = s3_query({{"prefix", "J"}, {"max-keys", "2"}});
  EXPECT_EQ(sorted, "max-keys=2&prefix=J");
  r = s3_call("GET", "s3://examplebucket/", sorted, {date}, "", opts_);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(signature_of(server.last_request()), "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
      << server.last_request();
  r = s3_call("GET", "s3://examplebucket/", "prefix=J&max-keys=2", {date}, "", opts_);
  ASSERT_TRUE(r.is_ok());
  EXPECT_NE(signature_of(server.last_request()), "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

// botocore (boto3's signer) as an independent referee: it recomputes the
// signature of each request curl sent, from the request as it arrived.
const char* kBotocoreReferee = R"PY(
import hashlib, sys
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
raw = open(sys.argv[1], 'rb').read()
head, _, body = raw.partition(b'\r\n\r\n')
lines = head.decode('latin-1').split('\r\n')
method, target, _ = lines[0].split(' ')
hdrs = {}
for l in lines[1:]:
    k, _, v = l.partition(':')
    hdrs[k.strip().lower()] = v.strip()
auth = hdrs['authorization'][len('AWS4-HMAC-SHA256 '):]
parts = dict(p.strip().split('=', 1) for p in auth.split(','))
ak, date, region, service, _ = parts['Credential'].split('/')
signed = parts['SignedHeaders'].split(';')
req = AWSRequest(method=method, url='http://' + hdrs['host'] + target, data=body,
                 headers={h: hdrs.get(h, '') for h in signed})
req.context['timestamp'] = hdrs['x-amz-date']
a = S3SigV4Auth(Credentials(ak, sys.argv[2], hdrs.get('x-amz-security-token')), 's3', region)
sig = a.signature(a.string_to_sign(req, a.canonical_request(req)), req)
print('signature', 'ok' if sig == parts['Signature'] else 'MISMATCH',
      'payload', 'ok' if hdrs.get('x-amz-content-sha256') == hashlib.sha256(body).hexdigest() else 'MISMATCH',
      'token', hdrs.get('x-amz-security-token', '-') if 'x-amz-security-token' in signed else 'unsigned')
)PY";

TEST_F(CurlSignerTest, BotocoreAgreesWithEachCase) {
  if (std::system("python3 -c 'import botocore' >/dev/null 2>&1") != 0) GTEST_SKIP() << "botocore not installed";
  FakeHttpServer server([](const std::string&) { return http_response("200 OK", "", "ok"); });
  use_endpoint(server.port());
  const std::string script = dir_ + "/referee.py", captured = dir_ + "/request";
  std::ofstream(script) << kBotocoreReferee;
  auto referee = [&]() {
    std::ofstream(captured, std::ios::binary) << server.last_request();
    return run_capture("python3 " + script + " " + captured + " loom-test-secret 2>&1");
  };
  struct Case {
    std::string name, method, url, query;
    std::vector<std::string> headers;
    std::string body;
  };
  const std::vector<Case> cases = {
      {"plain GET", "GET", "s3://bucket/shards/x_00000.bin", "", {}, ""},
      {"key with spaces, '+', '=' and unicode", "GET", "s3://bucket/dir/a b+c=d \xc3\xa9\xe2\x9c\x93.bin", "", {}, ""},
      {"key with './' and '../'", "GET", "s3://bucket/a/./b/../c", "", {}, ""},
      {"query string", "GET", "s3://bucket/", s3_query({{"prefix", "a b"}, {"list-type", "2"}}), {}, ""},
      {"ranged GET", "GET", "s3://bucket/k.bin", "", {"Range: bytes=8388608-16777215"}, ""},
      {"PUT with a binary body", "PUT", "s3://bucket/up.bin", "", {"Content-Type: application/octet-stream"},
       random_bytes(70000, 9)},
      {"session token", "GET", "s3://bucket/k.bin", "", {}, ""},
  };
  for (const Case& c : cases) {
    if (c.name == "session token") ::setenv("AWS_SESSION_TOKEN", "FwoGZXIvYXdzE//token+with/slashes==", 1);
    auto r = s3_call(c.method, c.url, c.query, c.headers, c.body, opts_);
    ASSERT_TRUE(r.is_ok()) << c.name << ": " << r.status().to_string();
    const std::string verdict = referee();
    EXPECT_NE(verdict.find("signature ok payload ok"), std::string::npos) << c.name << ": " << verdict;
    if (c.name == "session token") {
      EXPECT_NE(verdict.find("token FwoGZXIvYXdzE//token+with/slashes=="), std::string::npos) << verdict;
    }
  }
  // What the referee catches: a signature made with another secret.
  ::setenv("AWS_SECRET_ACCESS_KEY", "another-secret", 1);
  ASSERT_TRUE(s3_call("GET", "s3://bucket/k.bin", "", {}, "", opts_).is_ok());
  EXPECT_NE(referee().find("signature MISMATCH"), std::string::npos);
}

// ---- against a real S3-compatible server (moto) -------------------------------------

class MotoTest : public RemoteCacheTest {
 protected:
  void SetUp() override {
    RemoteCacheTest::SetUp();
    if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
    if (!have_moto()) GTEST_SKIP() << "moto not installed: python3 -m pip install 'moto[server]'";
    moto_ = std::make_unique<MotoServer>();
    ASSERT_TRUE(moto_->up()) << "moto server did not start on port " << moto_->port();
    use_endpoint(moto_->port());
    Status st = put_to_remote("s3://loom-data/", "", opts_);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
  }
  void TearDown() override {
    moto_.reset();
    RemoteCacheTest::TearDown();
  }
  std::unique_ptr<MotoServer> moto_;
};

TEST_F(MotoTest, FetchesObjectThenServesFromCacheAfterServerStops) {
  const std::string data = random_bytes(300 * 1024 + 7, 1);
  ASSERT_TRUE(put_to_remote("s3://loom-data/shards/part 0.bin", data, opts_).is_ok());
  const std::string url = "s3://loom-data/shards/part 0.bin";

  auto path = fetch_to_cache(url, opts_, xxh64_hex(data));
  ASSERT_TRUE(path.is_ok()) << path.status().to_string();
  EXPECT_EQ(*path, cache_path_for(url, opts_.cache_dir));
  EXPECT_TRUE(read_file(*path) == data);  // (no binary dump on failure)
  EXPECT_EQ(count_temp_files(opts_.cache_dir), 0);

  moto_->stop();
  auto again = fetch_to_cache(url, opts_);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(*again, *path);
  EXPECT_TRUE(read_file(*again) == data);
}

// Listing: past one page of ListObjectsV2 (1000 keys), a folder's direct
// children only, glob patterns per path segment, XML-escaped keys, sorted.
TEST_F(MotoTest, ListsFoldersAndPatternsAcrossPages) {
  for (int i = 0; i < 1003; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "s3://loom-data/many/p%04d.jsonl", i);
    ASSERT_TRUE(put_to_remote(name, "{}", opts_).is_ok()) << name;
  }
  ASSERT_TRUE(put_to_remote("s3://loom-data/many/deeper/x.jsonl", "{}", opts_).is_ok());
  ASSERT_TRUE(put_to_remote("s3://loom-data/many/a&b <c>.parquet", "x", opts_).is_ok());
  auto folder = list_s3_objects("s3://loom-data/many/", opts_);
  ASSERT_TRUE(folder.is_ok()) << folder.status().to_string();
  ASSERT_EQ(folder->size(), 1004u);  // not deeper/x.jsonl
  EXPECT_EQ(folder->front(), "s3://loom-data/many/a&b <c>.parquet");
  EXPECT_EQ((*folder)[1], "s3://loom-data/many/p0000.jsonl");
  EXPECT_EQ(folder->back(), "s3://loom-data/many/p1002.jsonl");
  EXPECT_TRUE(std::is_sorted(folder->begin(), folder->end()));
  auto pattern = list_s3_objects("s3://loom-data/many/p10*.jsonl", opts_);
  ASSERT_TRUE(pattern.is_ok()) << pattern.status().to_string();
  EXPECT_EQ(pattern->size(), 3u);  // p1000..p1002: '*' does not cross '/', so deeper/ is out
  auto all = list_s3_objects("s3://loom-data/many/*", opts_);
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ(all->size(), 1004u);
  auto none = list_s3_objects("s3://loom-data/many/*.zst", opts_);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("matches no object"), std::string::npos);
  EXPECT_EQ(list_s3_objects("s3://loom-data/many/p0001.jsonl", opts_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(list_s3_objects("s3://no-such-bucket/x/", opts_).status().code(), StatusCode::kNotFound);
}

TEST_F(MotoTest, MissingObjectIsNotFound) {
  auto r = fetch_to_cache("s3://loom-data/no/such.bin", opts_);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().to_string();
  EXPECT_NE(r.status().message().find("no/such.bin"), std::string::npos) << r.status().message();
  EXPECT_FALSE(fs::exists(cache_path_for("s3://loom-data/no/such.bin", opts_.cache_dir)));
}

TEST_F(MotoTest, ChecksumMismatchPublishesNothing) {
  ASSERT_TRUE(put_to_remote("s3://loom-data/a.bin", "abcdef", opts_).is_ok());
  auto r = fetch_to_cache("s3://loom-data/a.bin", opts_, "0123456789abcdef");
  EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().to_string();
  EXPECT_NE(r.status().message().find("checksum"), std::string::npos) << r.status().message();
  EXPECT_FALSE(fs::exists(cache_path_for("s3://loom-data/a.bin", opts_.cache_dir)));
  EXPECT_EQ(count_temp_files(opts_.cache_dir), 0);
}

TEST_F(MotoTest, ConcurrentFetchesAllGetTheCompleteFile) {
  const std::string data = random_bytes(4 * 1024 * 1024, 2);
  ASSERT_TRUE(put_to_remote("s3://loom-data/big.bin", data, opts_).is_ok());
  constexpr int kThreads = 4;
  std::vector<Result<std::string>> results(kThreads, Result<std::string>(internal_error("not run")));
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] { results[i] = fetch_to_cache("s3://loom-data/big.bin", opts_); });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) {
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(*r, *results[0]);
    EXPECT_TRUE(read_file(*r) == data);  // each caller sees the whole object, never a partial file
  }
  EXPECT_EQ(count_temp_files(opts_.cache_dir), 0);
}

// With auth enforced, moto recomputes every SigV4 signature itself: an
// independent check of libcurl's signing as loom drives it, on PUT (payload
// hash), GET (encoded and unicode keys), ranged GET, and credentials from a
// profile. (moto checks no session tokens: its STS keys are unknown to its
// IAM; CurlSignerTest checks that the token is sent and signed.)
TEST_F(RemoteCacheTest, MotoAcceptsOurSignaturesAndRejectsAWrongSecret) {
  if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
  if (!have_moto()) GTEST_SKIP() << "moto not installed: python3 -m pip install 'moto[server]'";
  MotoServer moto(/*no_auth_actions=*/3);  // the three IAM calls below
  ASSERT_TRUE(moto.up()) << "moto server did not start on port " << moto.port();
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(moto.port());
  // An IAM user allowed s3:*, and its access key.
  const std::string keys = run_capture(
      "python3 -c \"import boto3, json, sys\n"
      "iam = boto3.client('iam', endpoint_url=sys.argv[1], region_name='us-east-1', aws_access_key_id='x', "
      "aws_secret_access_key='x')\n"
      "iam.create_user(UserName='loom')\n"
      "iam.put_user_policy(UserName='loom', PolicyName='s3', PolicyDocument=json.dumps({'Version': '2012-10-17', "
      "'Statement': [{'Effect': 'Allow', 'Action': 's3:*', 'Resource': '*'}]}))\n"
      "k = iam.create_access_key(UserName='loom')['AccessKey']\n"
      "print(k['AccessKeyId'], k['SecretAccessKey'])\" " +
      endpoint + " 2>/dev/null");
  std::istringstream in(keys);
  std::string key_id, secret;
  in >> key_id >> secret;
  ASSERT_FALSE(secret.empty()) << "could not create an IAM access key in moto";
  use_endpoint(moto.port());
  ::setenv("AWS_ACCESS_KEY_ID", key_id.c_str(), 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", secret.c_str(), 1);

  const std::string data = random_bytes(70000, 4);
  Status st = put_to_remote("s3://signed/", "", opts_);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  st = put_to_remote("s3://signed/dir/a b.bin", data, opts_);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  auto r = fetch_to_cache("s3://signed/dir/a b.bin", opts_);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(read_file(*r) == data);
  // Ranged GETs (the Range header is signed too). (No '+' and no unicode in
  // keys here: moto 5 refuses boto3's own signatures for them; the botocore
  // referee of CurlSignerTest covers those keys.)
  const std::string ukey = "s3://signed/d i r/x~y_z-0.bin";
  st = put_to_remote(ukey, data, opts_);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  std::string part;
  int64_t size = 0;
  st = fetch_range(ukey, 1000, 5000, opts_, &part, &size);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(size, static_cast<int64_t>(data.size()));
  EXPECT_TRUE(part == data.substr(1000, 5000));

  // The same key from a profile of a credentials file (no keys in the environment).
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  std::ofstream(dir_ + "/credentials") << "[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n"
                                       << "[loom]\naws_access_key_id = " << key_id
                                       << "\naws_secret_access_key = " << secret << "\n";
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", (dir_ + "/credentials").c_str(), 1);
  ::setenv("AWS_PROFILE", "loom", 1);
  st = fetch_range(ukey, 0, 10, opts_, &part);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_TRUE(part == data.substr(0, 10));
  ::unsetenv("AWS_PROFILE");  // the default profile's keys are wrong
  auto wrong = fetch_range(ukey, 0, 10, opts_, &part);
  EXPECT_EQ(wrong.code(), StatusCode::kRemoteError) << wrong.to_string();
  EXPECT_NE(wrong.message().find("profile 'default'"), std::string::npos) << wrong.message();
  ::setenv("AWS_ACCESS_KEY_ID", key_id.c_str(), 1);

  ::setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret", 1);
  auto bad = fetch_to_cache("s3://signed/other.bin", opts_);
  EXPECT_EQ(bad.status().code(), StatusCode::kRemoteError) << bad.status().to_string();
  EXPECT_NE(bad.status().message().find("unauthorized"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("SignatureDoesNotMatch"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
}

// ---- failures from a scripted loopback server ------------------------------------

TEST_F(RemoteCacheTest, ForbiddenIsUnauthorizedAndRequestIsSigned) {
  if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
  FakeHttpServer server([](const std::string&) {
    return http_response("403 Forbidden", "Content-Type: application/xml\r\n",
                         "<Error><Code>SignatureDoesNotMatch</Code></Error>");
  });
  use_endpoint(server.port());
  auto r = fetch_to_cache("s3://bucket/data/x.bin", opts_);
  EXPECT_EQ(r.status().code(), StatusCode::kRemoteError) << r.status().to_string();
  EXPECT_NE(r.status().message().find("unauthorized"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("AWS_SECRET_ACCESS_KEY"), std::string::npos);
  EXPECT_NE(r.status().message().find("SignatureDoesNotMatch"), std::string::npos);
  EXPECT_EQ(server.requests(), 1);  // not retried
  const std::string req = server.last_request();
  EXPECT_EQ(req.rfind("GET /bucket/data/x.bin HTTP/1.1\r\n", 0), 0u) << req;  // path-style addressing
  EXPECT_NE(req.find("Authorization: AWS4-HMAC-SHA256 Credential=AKIDLOOMTEST/"), std::string::npos) << req;
  EXPECT_NE(req.find("/us-east-1/s3/aws4_request"), std::string::npos) << req;
  EXPECT_FALSE(fs::exists(cache_path_for("s3://bucket/data/x.bin", opts_.cache_dir)));
}

TEST_F(RemoteCacheTest, UnreachableHostNamesTheUrl) {
  if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
  const std::string url = "http://127.0.0.1:" + std::to_string(free_port()) + "/shard.bin";
  auto r = fetch_to_cache(url, opts_);
  EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().to_string();
  EXPECT_NE(r.status().message().find("cannot reach " + url), std::string::npos) << r.status().message();
}

TEST_F(RemoteCacheTest, InterruptedDownloadPublishesNothingAndStaleTempIsIgnored) {
  if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
  const std::string body = random_bytes(1000, 3);
  // Promises 1000 bytes, sends 100, closes.
  FakeHttpServer server([&](const std::string&) {
    return "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n" + body.substr(0, 100);
  });
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/shards/s.bin";
  const std::string final_path = cache_path_for(url, opts_.cache_dir);
  // A temp file from an earlier download that died half-way.
  fs::create_directories(opts_.cache_dir);
  std::ofstream(final_path + ".tmp.99999.0") << body.substr(0, 500);

  auto r = fetch_to_cache(url, opts_);
  EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().to_string();
  EXPECT_NE(r.status().message().find("interrupted"), std::string::npos) << r.status().message();
  EXPECT_EQ(server.requests(), 1 + opts_.retries);  // a cut-off transfer is retried
  EXPECT_FALSE(fs::exists(final_path));
  EXPECT_EQ(count_temp_files(opts_.cache_dir), 0);

  server.set_respond([&](const std::string&) { return http_response("200 OK", "", body); });
  std::ofstream(final_path + ".tmp.99999.1") << body.substr(0, 500);
  auto ok = fetch_to_cache(url, opts_);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_TRUE(read_file(*ok) == body);
}

TEST_F(RemoteCacheTest, S3EtagIsCheckedAgainstMd5) {
  if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
  std::string etag = "\"00000000000000000000000000000000\"";
  FakeHttpServer server([&](const std::string&) { return http_response("200 OK", "ETag: " + etag + "\r\n", "hello world"); });
  use_endpoint(server.port());
  opts_.retries = 0;
  auto bad = fetch_to_cache("s3://bucket/h.txt", opts_);
  EXPECT_EQ(bad.status().code(), StatusCode::kIoError) << bad.status().to_string();
  EXPECT_NE(bad.status().message().find("ETag"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(fs::exists(cache_path_for("s3://bucket/h.txt", opts_.cache_dir)));
  EXPECT_EQ(count_temp_files(opts_.cache_dir), 0);

  etag = "\"5eb63bbbe01eeed093cb22bb8f5acdc3\"";  // MD5("hello world")
  auto good = fetch_to_cache("s3://bucket/h.txt", opts_);
  ASSERT_TRUE(good.is_ok()) << good.status().to_string();
  EXPECT_EQ(read_file(*good), "hello world");
}


// ---- ranged reads of shards still downloading (remote_file.h) ----------------------

// "bytes=A-B" of a request head, or {-1, -1}.
std::pair<int64_t, int64_t> requested_range(const std::string& req) {
  size_t p = req.find("\r\nRange: bytes=");
  if (p == std::string::npos) return {-1, -1};
  long long a = -1, b = -1;
  std::sscanf(req.c_str() + p + 15, "%lld-%lld", &a, &b);
  return {a, b};
}

// An S3-like answer to a GET of `data` with ETag `etag`: 206 for a Range
// (416 past the end), 412 when If-Match names another ETag.
std::string serve_object(const std::string& req, const std::string& data, const std::string& etag) {
  if (size_t m = req.find("\r\nIf-Match: "); m != std::string::npos) {
    if (req.compare(m + 12, etag.size(), etag) != 0) return http_response("412 Precondition Failed", "", "");
  }
  auto [a, b] = requested_range(req);
  if (a < 0) return http_response("200 OK", "ETag: " + etag + "\r\n", data);
  if (a >= static_cast<int64_t>(data.size())) return http_response("416 Range Not Satisfiable", "", "");
  b = std::min<int64_t>(b, static_cast<int64_t>(data.size()) - 1);
  return http_response("206 Partial Content",
                       "ETag: " + etag + "\r\nContent-Range: bytes " + std::to_string(a) + "-" + std::to_string(b) +
                           "/" + std::to_string(data.size()) + "\r\n",
                       data.substr(static_cast<size_t>(a), static_cast<size_t>(b - a + 1)));
}

class RemoteFileTest : public RemoteCacheTest {
 protected:
  void SetUp() override {
    RemoteCacheTest::SetUp();
    if (!have_curl()) GTEST_SKIP() << "built without libcurl/OpenSSL";
    opts_.block_bytes = 64 * 1024;
  }
  std::shared_ptr<RemoteFile> open_file(const std::string& url, bool prefetch, const std::string& xxh = "") {
    auto src = open_remote_source(url, opts_, xxh, ReadMode::kMmap, prefetch);
    EXPECT_TRUE(src.is_ok()) << src.status().to_string();
    if (!src.is_ok()) return nullptr;
    return std::dynamic_pointer_cast<RemoteFile>(*src);
  }
  std::string read_range(const ByteSource& f, int64_t off, int64_t n) {
    std::string out(static_cast<size_t>(n), '\0');
    Status st = f.read(off, n, reinterpret_cast<uint8_t*>(out.data()));
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    return out;
  }
};

// Deterministic "training starts before the shard has arrived": the server
// answers the first block and then holds every later range until released;
// the first read returns while the object is still incomplete.
TEST_F(RemoteFileTest, FirstReadReturnsBeforeTheObjectHasArrived) {
  const std::string data = random_bytes(5 * 64 * 1024 + 100, 21);
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool open_gate = false;
  std::atomic<int> held{0};
  FakeHttpServer server([&](const std::string& req) {
    if (requested_range(req).first >= 64 * 1024) {
      ++held;
      std::unique_lock<std::mutex> lock(gate_mu);
      gate_cv.wait(lock, [&] { return open_gate; });
    }
    return serve_object(req, data, "\"v1\"");
  });
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/shards/s.bin";
  auto release = [&] {
    std::lock_guard<std::mutex> lock(gate_mu);
    open_gate = true;
    gate_cv.notify_all();
  };
  {
    auto f = open_file(url, /*prefetch=*/true, xxh64_hex(data));
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->size(), static_cast<int64_t>(data.size()));
    EXPECT_EQ(f->blocks(), 6);
    EXPECT_TRUE(read_range(*f, 10, 1000) == data.substr(10, 1000));
    // The download is held at block 1: incomplete, nothing published.
    for (int i = 0; i < 200 && held == 0; ++i) std::this_thread::sleep_for(milliseconds(10));
    EXPECT_EQ(held.load(), 1);
    EXPECT_FALSE(f->complete());
    EXPECT_LT(f->blocks_present(), f->blocks());
    EXPECT_FALSE(fs::exists(cache_path_for(url, opts_.cache_dir)));
    release();
    Status st = f->wait_complete(20);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_TRUE(read_range(*f, 0, f->size()) == data);
  }
  release();
  const std::string published = cache_path_for(url, opts_.cache_dir);
  EXPECT_TRUE(read_file(published) == data);
  EXPECT_FALSE(fs::exists(published + ".part"));
  EXPECT_FALSE(fs::exists(published + ".map"));
  // A later open maps the published file: no RemoteFile, no request.
  const int before = server.requests();
  auto again = open_remote_source(url, opts_, xxh64_hex(data));
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(std::dynamic_pointer_cast<RemoteFile>(*again), nullptr);
  EXPECT_NE((*again)->data(), nullptr);
  EXPECT_EQ(server.requests(), before);
}

// Deterministic "another rank of the node publishes while this one opens":
// the object is absent when this open looks, and the node's downloader
// publishes it (the file in place, its .part renamed and its .map removed)
// while this open's size probe is in flight. The open then maps the published
// file and leaves no .map or .part of its own behind (it did before
// 3db5647: init opened the map path with O_CREAT after the other process had
// removed it, and kept the empty file).
TEST_F(RemoteFileTest, OpenRacingAnotherPublisherLeavesNoMapBehind) {
  const std::string data = random_bytes(3 * 64 * 1024 + 11, 25);
  std::string published;
  std::atomic<int> probes{0};
  FakeHttpServer server([&](const std::string& req) {
    if (probes++ == 0) {  // the other process publishes now
      std::ofstream(published, std::ios::binary) << data;
    }
    return serve_object(req, data, "\"v1\"");
  });
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/race/s.bin";
  published = cache_path_for(url, opts_.cache_dir);
  fs::create_directories(opts_.cache_dir);
  ASSERT_FALSE(fs::exists(published));
  auto src = open_remote_source(url, opts_, xxh64_hex(data), ReadMode::kMmap, /*prefetch=*/true);
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  EXPECT_EQ(std::dynamic_pointer_cast<RemoteFile>(*src), nullptr);  // the published file, mapped
  ASSERT_NE((*src)->data(), nullptr);
  EXPECT_TRUE(std::string(reinterpret_cast<const char*>((*src)->data()), data.size()) == data);
  EXPECT_EQ(server.requests(), 1);  // the probe only: nothing downloaded again
  EXPECT_FALSE(fs::exists(published + ".map"));
  EXPECT_FALSE(fs::exists(published + ".part"));
}

// An interrupted download resumes: blocks marked in the map are not fetched
// again; a replaced object (another ETag) starts over, and one replaced while
// being read fails (If-Match, HTTP 412) instead of mixing versions.
TEST_F(RemoteFileTest, ResumesAfterInterruptionAndNoticesAReplacedObject) {
  std::string data = random_bytes(4 * 64 * 1024 + 5, 22);
  std::string etag = "\"v1\"";
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  FakeHttpServer server([&](const std::string& req) {
    std::lock_guard<std::mutex> lock(mu);
    ranges.push_back(requested_range(req));
    return serve_object(req, data, etag);
  });
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/r.bin";
  auto block_fetches = [&](int64_t block) {
    std::lock_guard<std::mutex> lock(mu);
    return std::count(ranges.begin(), ranges.end(), std::make_pair(block * 65536, block * 65536 + 65535));
  };
  {
    auto f = open_file(url, /*prefetch=*/false);
    ASSERT_NE(f, nullptr);
    EXPECT_TRUE(read_range(*f, 65536 * 2 + 7, 100) == data.substr(65536 * 2 + 7, 100));
    EXPECT_TRUE(read_range(*f, 0, 10) == data.substr(0, 10));
    EXPECT_EQ(f->blocks_present(), 2);
  }  // "killed" here: .part and .map stay
  const std::string published = cache_path_for(url, opts_.cache_dir);
  EXPECT_TRUE(fs::exists(published + ".part"));
  {
    auto f = open_file(url, /*prefetch=*/true);
    ASSERT_NE(f, nullptr);
    ASSERT_TRUE(f->wait_complete(20).is_ok());
    EXPECT_TRUE(read_range(*f, 0, f->size()) == data);
  }
  for (int64_t b = 0; b < 4; ++b) EXPECT_EQ(block_fetches(b), 1) << "block " << b;
  EXPECT_TRUE(read_file(published) == data);

  // Replaced between runs: the old map's ETag no longer matches; all blocks anew.
  const std::string url2 = "http://127.0.0.1:" + std::to_string(server.port()) + "/r2.bin";
  {
    auto f = open_file(url2, false);
    ASSERT_NE(f, nullptr);
    read_range(*f, 0, 10);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    data = random_bytes(data.size(), 23);
    etag = "\"v2\"";
  }
  {
    auto f = open_file(url2, true);
    ASSERT_NE(f, nullptr);
    ASSERT_TRUE(f->wait_complete(20).is_ok());
    EXPECT_TRUE(read_range(*f, 0, f->size()) == data);
  }
  // Replaced while being read: the next block's If-Match fails.
  const std::string url3 = "http://127.0.0.1:" + std::to_string(server.port()) + "/r3.bin";
  auto f = open_file(url3, false);
  ASSERT_NE(f, nullptr);
  read_range(*f, 0, 10);
  {
    std::lock_guard<std::mutex> lock(mu);
    etag = "\"v3\"";
  }
  std::string out(100, '\0');
  Status st = f->read(65536, 100, reinterpret_cast<uint8_t*>(out.data()));
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.to_string();
  EXPECT_NE(st.message().find("changed"), std::string::npos) << st.message();
}

// Against moto: random ranged reads equal the object; the assembled file is
// verified (ETag MD5, manifest XXH64) and published; a wrong XXH64 is an
// error naming the URL, every later read fails with it, and nothing stays.
TEST_F(MotoTest, RangedReadsMatchTheObjectAndAChecksumMismatchFailsReads) {
  opts_.block_bytes = 64 * 1024;
  const std::string data = random_bytes(1024 * 1024 + 3, 24);
  const std::string url = "s3://loom-data/ranged/shard 0.bin";
  ASSERT_TRUE(put_to_remote(url, data, opts_).is_ok());
  {
    auto src = open_remote_source(url, opts_, xxh64_hex(data), ReadMode::kMmap, /*prefetch=*/false);
    ASSERT_TRUE(src.is_ok()) << src.status().to_string();
    auto f = std::dynamic_pointer_cast<RemoteFile>(*src);
    ASSERT_NE(f, nullptr);
    std::mt19937 rng(3);
    for (int i = 0; i < 100; ++i) {
      const int64_t off = rng() % data.size(), n = std::min<int64_t>(1 + rng() % 200000, data.size() - off);
      std::string out(static_cast<size_t>(n), '\0');
      ASSERT_TRUE(f->read(off, n, reinterpret_cast<uint8_t*>(out.data())).is_ok());
      ASSERT_TRUE(out == data.substr(static_cast<size_t>(off), static_cast<size_t>(n))) << "at " << off;
    }
    EXPECT_LT(f->blocks_present(), f->blocks() + 1);
  }
  {
    auto src = open_remote_source(url, opts_, xxh64_hex(data));
    ASSERT_TRUE(src.is_ok()) << src.status().to_string();
    auto f = std::dynamic_pointer_cast<RemoteFile>(*src);
    ASSERT_NE(f, nullptr);
    ASSERT_TRUE(f->wait_complete(30).is_ok());
  }
  EXPECT_TRUE(read_file(cache_path_for(url, opts_.cache_dir)) == data);

  const std::string bad_url = "s3://loom-data/ranged/shard 1.bin";
  ASSERT_TRUE(put_to_remote(bad_url, data, opts_).is_ok());
  auto src = open_remote_source(bad_url, opts_, "0123456789abcdef");
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  auto f = std::dynamic_pointer_cast<RemoteFile>(*src);
  ASSERT_NE(f, nullptr);
  Status st = f->wait_complete(30);
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.to_string();
  EXPECT_NE(st.message().find("checksum mismatch"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(bad_url), std::string::npos) << st.message();
  std::string out(10, '\0');
  EXPECT_EQ(f->read(0, 10, reinterpret_cast<uint8_t*>(out.data())).code(), StatusCode::kIoError);
  const std::string cached = cache_path_for(bad_url, opts_.cache_dir);
  EXPECT_FALSE(fs::exists(cached));
  EXPECT_FALSE(fs::exists(cached + ".part"));
  EXPECT_FALSE(fs::exists(cached + ".map"));
}

}  // namespace
}  // namespace loom::data