// The one rule for every file Loom writes (plans, traces, run records,
// metrics, profiles, regression results, checkpoints, safetensors exports,
// indexed datasets, manifests):
//   * "-" means standard output, for text/JSON outputs that allow it;
//   * a symlink is written through: its target is replaced, the link stays;
//   * an existing file that is not a regular file (a FIFO, a device, a socket,
//     a directory) is refused (kInvalidArgument), never replaced or opened;
//   * the file's directory must exist (kInvalidArgument when it does not);
//   * the bytes go to a temporary file next to the (resolved) target, which is
//     renamed over it only when complete: a crash never leaves half a file;
//   * a write that hits the file size limit (`ulimit -f`; loom ignores
//     SIGXFSZ so the write returns EFBIG) or a full disk says so, and the
//     temporary file is removed.
#pragma once

#include <string>

#include "core/status.h"

namespace loom {

// "-": the output goes to standard output.
inline bool is_stdout_path(const std::string& path) { return path == "-"; }

// Where the bytes of an output named `path` really go: `path` itself, or the
// final target of a symlink chain (relative links resolved against their
// directory). Refuses what may not be replaced (see above). `what` names the
// output in messages ("--out", "plan").
Result<std::string> resolve_output_path(const std::string& path, const std::string& what);

// The check an option can make before any work starts: resolvable as above,
// its directory exists and is writable. "-" passes when `allow_stdout`.
Status check_output_path(const std::string& path, const std::string& what, bool allow_stdout = true);

// Same for a directory an output creates (a checkpoint directory): an existing
// non-directory or a parent that cannot hold it is refused.
Status check_output_dir(const std::string& dir, const std::string& what);

// Refuses `out` when it lies inside `dir` (after resolving symlinks): writing
// there would change what is being read.
Status refuse_output_inside(const std::string& out, const std::string& dir, const std::string& what);

// Refuses `out` when it is the same file as the input `in` (after resolving
// symlinks): `loom execute plan.json --record plan.json` would replace the plan.
Status refuse_same_file(const std::string& out, const std::string& in, const std::string& what,
                        const std::string& in_what);

struct WriteOptions {
  bool durable = false;       // fsync the file before the rename
  bool allow_stdout = true;   // "-" writes to standard output
};

// Writes `bytes` as the output `path` under the rule above.
Status write_output_file(const std::string& path, const std::string& bytes, const WriteOptions& opts = {});

// For writers that produce the file themselves (HDF5, a streaming writer):
// begin_output resolves the target and names a temporary file next to it;
// commit_output renames the temporary over the target; abort_output removes it.
struct OutputTarget {
  std::string path;    // as given (for messages)
  std::string target;  // where it ends up
  std::string tmp;     // write here
};
Result<OutputTarget> begin_output(const std::string& path, const std::string& what);
Status commit_output(const OutputTarget& t);
void abort_output(const OutputTarget& t);

// An errno from writing `path` as a Status, with the cause spelled out: EFBIG
// "file size limit (ulimit -f) reached writing PATH", ENOSPC/EDQUOT "no space
// left ...". io_error.
Status write_error(const std::string& what_doing, const std::string& path, int err);
// When a library (HDF5, stdio) reports a failed write: a Status naming the file
// size limit when `err` is EFBIG or `path` has reached RLIMIT_FSIZE, the full
// disk for ENOSPC, else `fallback`.
Status explain_write_failure(const std::string& path, int err, Status fallback);
// Makes writes past `ulimit -f` fail with EFBIG instead of killing the process
// with SIGXFSZ. Called once at start-up by the loom executable.
void ignore_file_size_signal();

}  // namespace loom
