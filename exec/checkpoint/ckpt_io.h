// File-system helpers for checkpoints: durable writes (temp + fsync +
// rename), directory fsync, XXH64 of a file. Internal to exec/checkpoint.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace loom::ckpt {

// Writes `bytes` to `path` durably: PATH.tmp, fsync, rename to PATH.
// Does not fsync the directory (the commit does that once per directory).
Status write_file_durable(const std::string& path, const std::string& bytes);
// fsyncs a regular file or a directory.
Status fsync_path(const std::string& path);
// rename(2), with an error that names both paths.
Status rename_path(const std::string& from, const std::string& to);
// Size in bytes (kNotFound when absent).
Result<uint64_t> file_size_bytes(const std::string& path);
// XXH64 (seed 0) of the whole file, as 16 lower-case hex digits.
Result<std::string> xxh64_file_hex(const std::string& path);
// Removes a directory tree; absent is fine.
Status remove_tree(const std::string& path);
// "step_000100" for 100.
std::string step_dir_name(int64_t step);
// "rank_00003" for 3.
std::string rank_file_stem(int rank);

}  // namespace loom::ckpt
