// Test support for the remote data path (exec/data/remote_cache.h, remote_file.h,
// s3_config.h): loopback servers (a scripted HTTP server, moto as a child
// process), an AWS environment that only the test sets, and the fixtures the
// remote tests share. Included by one test file per executable.
#pragma once

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

namespace loom::data::remote_test {
namespace fs = std::filesystem;
using std::chrono::milliseconds;

// ---- helpers -----------------------------------------------------------------

inline int free_port() {
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

inline bool port_open(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

inline std::string xxh64_hex(const std::string& s) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(XXH64(s.data(), s.size(), 0)));
  return buf;
}

// Files in `dir` whose name contains ".tmp." (in-flight or leftover downloads).
inline int count_temp_files(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().find(".tmp.") != std::string::npos;
  return n;
}

inline bool have_curl() {
  RemoteCacheOptions no_retry;
  no_retry.retries = 0;
  return put_to_remote("http://127.0.0.1:1/x", "", no_retry).code() != StatusCode::kUnsupported;
}

inline bool have_moto() {
  static const bool have = std::system("python3 -c 'import moto.server, flask, boto3' >/dev/null 2>&1") == 0;
  return have;
}

// Output of a shell command, or "" when it fails.
inline std::string run_capture(const std::string& cmd) {
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

inline std::string http_response(const std::string& status, const std::string& extra_headers, const std::string& body) {
  return "HTTP/1.1 " + status + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra_headers +
         "Connection: close\r\n\r\n" + body;
}


// Only what a test sets counts: no ~/.aws files, no AWS_* from the shell.
inline void isolate_aws_env(const std::string& dir) {
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

// A cache in a fresh directory, with test credentials and an isolated AWS environment.
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

// A moto S3 server on loopback with the bucket loom-data (skips without curl or moto).
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

}  // namespace loom::data::remote_test
