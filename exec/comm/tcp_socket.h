// POSIX TCP sockets for the TCP communicator (tcp_communicator.h): an owning
// descriptor, addresses, listening, connecting under a deadline, and whole
// buffer transfers that survive partial reads and writes, EINTR and sizes
// beyond 2^31 bytes. Only tcp_*.cc include this header.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace loom::exec::tcp {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// now + seconds; seconds <= 0 means no deadline (Deadline::max()).
Deadline deadline_after(double seconds);
// Milliseconds until `d` for poll(), clamped to [0, cap_ms]; cap_ms when d is max().
int poll_ms(Deadline d, int cap_ms = 1000);
// "3 s", "0.5 s".
std::string seconds_text(double s);
// strerror_r of `err`, lower-cased first letter ("connection refused").
std::string errno_text(int err);

// An owned file descriptor (closed on destruction).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// An IPv4 or IPv6 socket address.
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;
  int family() const { return storage.ss_family; }
  std::string host() const;  // numeric: "10.0.0.2", "::1"
  int port() const;
  void set_port(int port);
  bool is_loopback() const;
  std::string to_string() const;  // "10.0.0.2:29500", "[::1]:29500"
};
// `host:port` in the same notation (brackets around IPv6 literals).
std::string host_port(const std::string& host, int port);

// The first address of `host` (a name or a numeric address), IPv4 preferred.
// On failure *error gets getaddrinfo's text.
bool resolve(const std::string& host, int port, SockAddr* out, std::string* error);
// The wildcard address (0.0.0.0 or ::) of `family`.
SockAddr any_address(int family, int port);
// The local / remote address of a connected or bound socket.
SockAddr local_address(int fd);

// A listening socket bound to `addr` (port 0: an ephemeral one). On failure
// returns an empty Fd and sets *err to errno.
Fd listen_at(const SockAddr& addr, bool reuse_addr, int* err);
// One connection attempt that gives up at `deadline`; on failure returns an
// empty Fd and sets *err (ETIMEDOUT when the deadline passed).
Fd connect_to(const SockAddr& addr, Deadline deadline, int* err);
// Sets TCP_NODELAY (small collective messages must not wait for Nagle).
void set_no_delay(int fd);

// The outcome of a transfer.
enum class Io { kOk, kClosed, kTimedOut, kCancelled, kFailed };
struct IoResult {
  Io what = Io::kOk;
  int err = 0;  // errno for kFailed
  size_t done = 0;  // bytes transferred before the outcome
  bool ok() const { return what == Io::kOk; }
  std::string text() const;  // "connection closed", "timed out", "connection reset by peer", ...
};

// Writes every byte of iov[0..count) (modified in place) before `deadline`,
// never raising SIGPIPE; gives up early when *cancel becomes true (polled
// every 100 ms while the peer does not drain).
IoResult write_all(int fd, iovec* iov, int count, Deadline deadline, const std::atomic<bool>* cancel = nullptr);
IoResult write_all(int fd, const void* data, size_t bytes, Deadline deadline);
// Reads exactly `bytes` before `deadline` (max(): blocks without a deadline;
// shutdown() of the socket wakes it with kClosed). kClosed: EOF first.
IoResult read_all(int fd, void* data, size_t bytes, Deadline deadline);

}  // namespace loom::exec::tcp
