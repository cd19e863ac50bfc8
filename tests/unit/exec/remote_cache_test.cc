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
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "exec/data/remote_cache.h"
#include "exec/data/s3_sign.h"
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

// ---- SigV4 against AWS's published examples ---------------------------------------

S3Credentials aws_example_credentials() {
  S3Credentials c;
  c.access_key_id = "AKIAIOSFODNN7EXAMPLE";
  c.secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  c.region = "us-east-1";
  return c;
}

TEST(S3SignTest, MatchesAwsGetObjectExample) {
  SigV4Request req;
  req.method = "GET";
  req.canonical_uri = "/test.txt";
  req.payload_sha256_hex = kEmptyPayloadSha256;
  req.headers = {{"host", "examplebucket.s3.amazonaws.com"},
                 {"range", "bytes=0-9"},
                 {"x-amz-content-sha256", kEmptyPayloadSha256},
                 {"x-amz-date", "20130524T000000Z"}};
  auto sig = sign_v4(req, aws_example_credentials());
  if (sig.status().code() == StatusCode::kUnsupported) GTEST_SKIP() << "built without OpenSSL/libcurl";
  ASSERT_TRUE(sig.is_ok()) << sig.status().to_string();
  EXPECT_EQ(sig->canonical_request,
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sig->string_to_sign,
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(sig->signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(sig->authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(S3SignTest, MatchesAwsListObjectsExampleWithQuery) {
  SigV4Request req;
  req.method = "GET";
  req.canonical_uri = "/";
  req.canonical_query = "max-keys=2&prefix=J";
  req.payload_sha256_hex = kEmptyPayloadSha256;
  req.headers = {{"host", "examplebucket.s3.amazonaws.com"},
                 {"x-amz-content-sha256", kEmptyPayloadSha256},
                 {"x-amz-date", "20130524T000000Z"}};
  auto sig = sign_v4(req, aws_example_credentials());
  if (sig.status().code() == StatusCode::kUnsupported) GTEST_SKIP() << "built without OpenSSL/libcurl";
  ASSERT_TRUE(sig.is_ok()) << sig.status().to_string();
  EXPECT_EQ(sig->signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(S3SignTest, RejectsMissingHostAndEncodesKeys) {
  SigV4Request req;
  req.method = "GET";
  req.headers = {{"x-amz-date", "20130524T000000Z"}};
  EXPECT_EQ(sign_v4(req, aws_example_credentials()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s3_uri_encode("data/a b+c~_.-=", true), "data/a%20b%2Bc~_.-%3D");
  EXPECT_EQ(s3_uri_encode("a/b", false), "a%2Fb");
  EXPECT_EQ(amz_date(1369353600), "20130524T000000Z");
}

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
    ::unsetenv("AWS_SESSION_TOKEN");
    ::unsetenv("AWS_DEFAULT_REGION");
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
// independent check of s3_sign on PUT (payload hash) and GET (encoded key).
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

  // (No '+' in the key: moto 5 mis-verifies it even for boto3's signatures.)
  const std::string data = random_bytes(70000, 4);
  Status st = put_to_remote("s3://signed/", "", opts_);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  st = put_to_remote("s3://signed/dir/a b.bin", data, opts_);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  auto r = fetch_to_cache("s3://signed/dir/a b.bin", opts_);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(read_file(*r) == data);

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

}  // namespace
}  // namespace loom::data
