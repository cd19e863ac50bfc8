#include "exec/comm/tcp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace loom::exec::tcp {
namespace {

// Largest byte count handed to one system call (Linux moves at most
// 0x7ffff000 per call anyway; this keeps ssize_t arithmetic far from overflow).
constexpr size_t kMaxPerCall = size_t(1) << 30;

bool set_nonblocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0) return false;
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  return fcntl(fd, F_SETFL, flags) == 0;
}

}  // namespace

Deadline deadline_after(double seconds) {
  if (!(seconds > 0)) return Deadline::max();
  // Beyond ~30 years counts as none (and cannot overflow the clock).
  if (seconds > 1e9) return Deadline::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

int poll_ms(Deadline d, int cap_ms) {
  if (d == Deadline::max()) return cap_ms;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()).count() + 1;
  return int(std::clamp<long long>(left, 0, cap_ms));
}

std::string seconds_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g s", s);
  return b;
}

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns the message (maybe not in buf).
  std::string s = strerror_r(err, buf, sizeof buf);
  if (!s.empty() && s[0] >= 'A' && s[0] <= 'Z' && (s.size() < 2 || !(s[1] >= 'A' && s[1] <= 'Z')))
    s[0] = char(s[0] - 'A' + 'a');
  return s;
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string SockAddr::host() const {
  char text[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, text, sizeof text);
  } else if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, text, sizeof text);
  }
  return text;
}

int SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SockAddr::set_port(int port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(uint16_t(port));
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(uint16_t(port));
}

bool SockAddr::is_loopback() const {
  if (family() == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr) >> 24) == 127;
  }
  if (family() == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) != 0;
  }
  return false;
}

std::string SockAddr::to_string() const { return host_port(host(), port()); }

std::string host_port(const std::string& host, int port) {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool resolve(const std::string& host, int port, SockAddr* out, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    if (error) *error = rc == EAI_SYSTEM ? errno_text(errno) : gai_strerror(rc);
    return false;
  }
  const addrinfo* pick = nullptr;
  for (const addrinfo* a = res; a; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
    if (a->ai_family == AF_INET6 && !pick) pick = a;
  }
  bool ok = pick != nullptr;
  if (ok) {
    std::memcpy(&out->storage, pick->ai_addr, pick->ai_addrlen);
    out->len = socklen_t(pick->ai_addrlen);
  } else if (error) {
    *error = "no IPv4 or IPv6 address";
  }
  freeaddrinfo(res);
  return ok;
}

SockAddr any_address(int family, int port) {
  SockAddr a;
  if (family == AF_INET6) {
    auto* s = reinterpret_cast<sockaddr_in6*>(&a.storage);
    s->sin6_family = AF_INET6;
    s->sin6_addr = in6addr_any;
    a.len = sizeof(sockaddr_in6);
  } else {
    auto* s = reinterpret_cast<sockaddr_in*>(&a.storage);
    s->sin_family = AF_INET;
    s->sin_addr.s_addr = htonl(INADDR_ANY);
    a.len = sizeof(sockaddr_in);
  }
  a.set_port(port);
  return a;
}

SockAddr local_address(int fd) {
  SockAddr a;
  a.len = sizeof a.storage;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0) a.len = 0;
  return a;
}

Fd listen_at(const SockAddr& addr, bool reuse_addr, int* err) {
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    *err = errno;
    return Fd();
  }
  if (reuse_addr) {
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  }
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) != 0 ||
      ::listen(fd.get(), SOMAXCONN) != 0) {
    *err = errno;
    return Fd();
  }
  return fd;
}

Fd connect_to(const SockAddr& addr, Deadline deadline, int* err) {
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd || !set_nonblocking(fd.get(), true)) {
    *err = errno;
    return Fd();
  }
  int rc;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno != EINPROGRESS) {
    *err = errno;
    return Fd();
  }
  while (rc != 0) {
    pollfd p{fd.get(), POLLOUT, 0};
    int ms = poll_ms(deadline);
    int n = ::poll(&p, 1, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *err = errno;
      return Fd();
    }
    if (n == 0) {
      if (Clock::now() >= deadline) {
        *err = ETIMEDOUT;
        return Fd();
      }
      continue;
    }
    int so_error = 0;
    socklen_t len = sizeof so_error;
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len);
    if (so_error != 0) {
      *err = so_error;
      return Fd();
    }
    rc = 0;
  }
  set_nonblocking(fd.get(), false);
  return fd;
}

void set_no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string IoResult::text() const {
  switch (what) {
    case Io::kOk: return "ok";
    case Io::kClosed: return "connection closed";
    case Io::kTimedOut: return "timed out";
    case Io::kCancelled: return "cancelled";
    case Io::kFailed: return errno_text(err);
  }
  return "?";
}

IoResult write_all(int fd, iovec* iov, int count, Deadline deadline, const std::atomic<bool>* cancel) {
  IoResult r;
  int first = 0;
  while (first < count && iov[first].iov_len == 0) ++first;
  while (first < count) {
    // At most kMaxPerCall bytes per call: trim the iovec list handed over.
    iovec part[8];
    int n = 0;
    size_t total = 0;
    for (int i = first; i < count && n < 8 && total < kMaxPerCall; ++i) {
      part[n] = iov[i];
      part[n].iov_len = std::min(part[n].iov_len, kMaxPerCall - total);
      total += part[n].iov_len;
      ++n;
    }
    msghdr msg{};
    msg.msg_iov = part;
    msg.msg_iovlen = size_t(n);
    ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        for (;;) {
          if (cancel && cancel->load()) return {Io::kCancelled, 0, r.done};
          if (Clock::now() >= deadline) return {Io::kTimedOut, 0, r.done};
          pollfd p{fd, POLLOUT, 0};
          int pr = ::poll(&p, 1, poll_ms(deadline, 100));
          if (pr > 0 || (pr < 0 && errno != EINTR)) break;
        }
        continue;
      }
      if (errno == EPIPE || errno == ECONNRESET) return {Io::kClosed, errno, r.done};
      return {Io::kFailed, errno, r.done};
    }
    r.done += size_t(w);
    size_t left = size_t(w);
    while (first < count && left >= iov[first].iov_len) {
      left -= iov[first].iov_len;
      iov[first].iov_len = 0;
      ++first;
    }
    if (first < count) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
    while (first < count && iov[first].iov_len == 0) ++first;
  }
  return r;
}

IoResult write_all(int fd, const void* data, size_t bytes, Deadline deadline) {
  iovec v{const_cast<void*>(data), bytes};
  return write_all(fd, &v, 1, deadline);
}

IoResult read_all(int fd, void* data, size_t bytes, Deadline deadline) {
  IoResult r;
  char* p = static_cast<char*>(data);
  const bool blocking = deadline == Deadline::max();
  while (r.done < bytes) {
    size_t want = std::min(bytes - r.done, kMaxPerCall);
    ssize_t got = ::recv(fd, p + r.done, want, blocking ? 0 : MSG_DONTWAIT);
    if (got > 0) {
      r.done += size_t(got);
      continue;
    }
    if (got == 0) return {Io::kClosed, 0, r.done};
    if (errno == EINTR) continue;
    if (!blocking && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Clock::now() >= deadline) return {Io::kTimedOut, 0, r.done};
      pollfd pf{fd, POLLIN, 0};
      ::poll(&pf, 1, poll_ms(deadline, 1000));
      continue;
    }
    if (errno == ECONNRESET) return {Io::kClosed, errno, r.done};
    return {Io::kFailed, errno, r.done};
  }
  return r;
}

}  // namespace loom::exec::tcp
