// Writing outputs under one rule (core/output_file.h).
#include "core/output_file.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace loom {

namespace fs = std::filesystem;

namespace {

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

const char* kind_of(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISDIR(m)) return "a directory";
  return "not a regular file";
}

std::atomic<unsigned> g_tmp_counter{0};

}  // namespace

Status write_error(const std::string& what_doing, const std::string& path, int err) {
  if (err == EFBIG)
    return io_error("file size limit (ulimit -f) reached writing " + path +
                    "; raise it (ulimit -f unlimited) or write less; the partial file was removed");
  if (err == ENOSPC || err == EDQUOT)
    return io_error("no space left on the device (or quota) writing " + path + ": " + std::strerror(err) +
                    "; free space or write elsewhere; the partial file was removed");
  if (err == ENOENT || err == ENOTDIR)
    return invalid_argument(what_doing + " " + path + ": " + std::strerror(err) + "; its directory " + dir_of(path) +
                            " does not exist: create it first");
  if (err == EACCES || err == EPERM || err == EROFS)
    return invalid_argument(what_doing + " " + path + ": " + std::strerror(err) + "; choose a writable location");
  return io_error(what_doing + " " + path + ": " + std::strerror(err));
}

Status explain_write_failure(const std::string& path, int err, Status fallback) {
  if (err == EFBIG) return write_error("write", path, err);
  struct rlimit rl{};
  if (::getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    struct stat st{};
    if (::stat(path.c_str(), &st) == 0 && uint64_t(st.st_size) >= uint64_t(rl.rlim_cur))
      return write_error("write", path, EFBIG);
  }
  if (err == ENOSPC || err == EDQUOT) return write_error("write", path, err);
  return fallback;
}

void ignore_file_size_signal() { std::signal(SIGXFSZ, SIG_IGN); }

Result<std::string> resolve_output_path(const std::string& path, const std::string& what) {
  if (path.empty()) return invalid_argument(what + ": the path is empty; name a file");
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st{};
    if (::lstat(p.c_str(), &st) != 0) {
      if (errno == ENOENT) return p;  // a new file (or a dangling link's target)
      return write_error(what + ":", p, errno);
    }
    if (S_ISREG(st.st_mode)) return p;
    if (S_ISLNK(st.st_mode)) {
      std::string target(size_t(st.st_size > 0 ? st.st_size : 4096) + 1, '\0');
      ssize_t n = ::readlink(p.c_str(), target.data(), target.size());
      if (n < 0) return write_error(what + ": readlink", p, errno);
      target.resize(size_t(n));
      p = (!target.empty() && target[0] == '/') ? target : dir_of(p) + "/" + target;
      continue;
    }
    std::string msg = what + " " + path + (p != path ? " (through its symlink, " + p + ")" : std::string()) + " is " +
                      kind_of(st.st_mode) + ", not a regular file; loom writes a file next to it and renames it into "
                      "place, which would replace it: name a regular file";
    if (!S_ISDIR(st.st_mode)) msg += " (or `-` for standard output where the output is text)";
    else msg += " inside the directory";
    return invalid_argument(msg);
  }
  return invalid_argument(what + " " + path + ": too many levels of symbolic links");
}

Status check_output_path(const std::string& path, const std::string& what, bool allow_stdout) {
  if (is_stdout_path(path)) {
    if (allow_stdout) return Status::ok();
    return invalid_argument(what + " -: this output cannot go to standard output; name a file");
  }
  LOOM_ASSIGN_OR_RETURN(std::string target, resolve_output_path(path, what));
  const std::string dir = dir_of(target);
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0)
    return invalid_argument(what + " " + path + ": the directory " + dir + " does not exist; create it first");
  if (!S_ISDIR(st.st_mode)) return invalid_argument(what + " " + path + ": " + dir + " is not a directory");
  if (::access(dir.c_str(), W_OK) != 0)
    return invalid_argument(what + " " + path + ": cannot write in " + dir + ": " + std::strerror(errno) +
                            "; choose a writable location");
  return Status::ok();
}

Status check_output_dir(const std::string& dir, const std::string& what) {
  if (dir.empty()) return invalid_argument(what + ": the path is empty; name a directory");
  std::string p = dir;
  while (!p.empty() && p.size() > 1 && p.back() == '/') p.pop_back();
  // The nearest existing ancestor must be a writable directory.
  for (int depth = 0; depth < 256; ++depth) {
    struct stat st{};
    if (::stat(p.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        return invalid_argument(what + " " + dir + ": " + p + " is " + kind_of(st.st_mode) +
                                ", not a directory; name a directory");
      if (::access(p.c_str(), W_OK) != 0)
        return invalid_argument(what + " " + dir + ": cannot write in " + p + ": " + std::strerror(errno) +
                                "; choose a writable location");
      return Status::ok();
    }
    if (errno == ENOTDIR) {  // a file on the way: name it
      const std::string up = dir_of(p);
      struct stat ust{};
      if (up != p && ::stat(up.c_str(), &ust) == 0 && !S_ISDIR(ust.st_mode))
        return invalid_argument(what + " " + dir + ": " + up + " is " + kind_of(ust.st_mode) +
                                ", not a directory; name a directory");
    } else if (errno != ENOENT) {
      return invalid_argument(what + " " + dir + ": " + p + ": " + std::strerror(errno));
    }
    const std::string up = dir_of(p);
    if (up == p) break;
    p = up;
  }
  return Status::ok();
}

Status refuse_output_inside(const std::string& out, const std::string& dir, const std::string& what) {
  if (is_stdout_path(out)) return Status::ok();
  LOOM_ASSIGN_OR_RETURN(std::string target, resolve_output_path(out, what));
  std::error_code ec;
  const fs::path d = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  const fs::path o = fs::weakly_canonical(fs::absolute(target, ec), ec);
  const std::string ds = d.string(), os = o.string();
  if (ds.empty() || os.empty()) return Status::ok();
  const std::string prefix = ds.back() == '/' ? ds : ds + "/";
  if (os == ds || os.rfind(prefix, 0) == 0)
    return invalid_argument(what + " " + out + " is inside the checkpoint being read (" + dir +
                            "); writing there would change the checkpoint: choose a path outside it");
  return Status::ok();
}

Status refuse_same_file(const std::string& out, const std::string& in, const std::string& what,
                        const std::string& in_what) {
  if (is_stdout_path(out) || in.empty()) return Status::ok();
  std::error_code ec;
  if (!fs::exists(in, ec) || !fs::exists(out, ec)) return Status::ok();
  if (fs::equivalent(out, in, ec) && !ec)
    return invalid_argument(what + " " + out + " is the " + in_what + " being read (" + in +
                            "); writing it would replace it: choose another path");
  return Status::ok();
}

Result<OutputTarget> begin_output(const std::string& path, const std::string& what) {
  OutputTarget t;
  t.path = path;
  LOOM_ASSIGN_OR_RETURN(t.target, resolve_output_path(path, what));
  t.tmp = t.target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_tmp_counter++);
  return t;
}

Status commit_output(const OutputTarget& t) {
  if (::rename(t.tmp.c_str(), t.target.c_str()) != 0) {
    const int err = errno;
    ::unlink(t.tmp.c_str());
    return write_error("rename " + t.tmp + " ->", t.target, err);
  }
  return Status::ok();
}

void abort_output(const OutputTarget& t) { ::unlink(t.tmp.c_str()); }

Status write_output_file(const std::string& path, const std::string& bytes, const WriteOptions& opts) {
  if (is_stdout_path(path)) {
    if (!opts.allow_stdout) return invalid_argument("-: this output cannot go to standard output; name a file");
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), stdout) == bytes.size() && std::fflush(stdout) == 0;
    if (!ok) return write_error("write", "standard output", errno);
    return Status::ok();
  }
  LOOM_ASSIGN_OR_RETURN(OutputTarget t, begin_output(path, path));
  int fd = ::open(t.tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return write_error("create", t.target, errno);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      abort_output(t);
      return write_error("write", t.target, err);
    }
    done += size_t(n);
  }
  if (opts.durable && ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    abort_output(t);
    return write_error("fsync", t.target, err);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    abort_output(t);
    return write_error("close", t.target, err);
  }
  return commit_output(t);
}

}  // namespace loom
