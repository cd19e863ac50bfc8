// File-system helpers for checkpoints (see ckpt_io.h).
#include "exec/checkpoint/ckpt_io.h"

#include "core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

namespace loom::ckpt {

namespace fs = std::filesystem;

namespace {

Status errno_status(const std::string& what, const std::string& path, int err) {
  if (err == ENOSPC || err == EFBIG || err == EDQUOT) return write_error(what, path, err);
  std::string msg = what + " " + path + ": " + std::strerror(err);
  if (err == ENOENT) return not_found(msg);
  return io_error(msg);
}

}  // namespace

Status write_file_durable(const std::string& path, const std::string& bytes) {
  WriteOptions o;
  o.durable = true;
  o.allow_stdout = false;
  return write_output_file(path, bytes, o);
}

Status fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("open (for fsync)", path, errno);
  int r = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (r != 0) return errno_status("fsync", path, err);
  return Status::ok();
}

Status rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return errno_status("rename " + from + " ->", to, errno);
  return Status::ok();
}

Result<uint64_t> file_size_bytes(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return errno_status("stat", path, errno);
  return static_cast<uint64_t>(st.st_size);
}

Result<std::string> xxh64_file_hex(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("open", path, errno);
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  std::vector<char> buf(4 << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      XXH64_freeState(state);
      ::close(fd);
      return errno_status("read", path, err);
    }
    if (n == 0) break;
    XXH64_update(state, buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  unsigned long long h = XXH64_digest(state);
  XXH64_freeState(state);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", h);
  return std::string(hex);
}

Status remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return io_error("remove " + path + ": " + ec.message());
  return Status::ok();
}

std::string step_dir_name(int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "step_%06lld", static_cast<long long>(step));
  return b;
}

std::string rank_file_stem(int rank) {
  char b[32];
  std::snprintf(b, sizeof b, "rank_%05d", rank);
  return b;
}

}  // namespace loom::ckpt
