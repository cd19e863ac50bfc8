// CheckpointReader, resolve_checkpoint, verify_checkpoint.
#include <algorithm>
#include <array>
#include <filesystem>
#include <map>

#include "core/json_util.h"
#include "exec/checkpoint/checkpoint.h"
#include "exec/checkpoint/ckpt_io.h"
#include "exec/checkpoint/h5_slices.h"

namespace loom::ckpt {

namespace fs = std::filesystem;

namespace {

struct FileEntry {
  std::string rel;
  uint64_t size_bytes = 0;
  std::string xxh64;
};

struct TensorIndex {
  std::vector<int64_t> global_shape;
  std::vector<CheckpointReader::SliceRef> slices;
};

// A file listed in metadata.json lies inside the step directory: relative,
// without ".." components (the writer lists model_weights/..., optimizer_state/...,
// training_state/...). A hand-edited or corrupt list must not make the reader
// (or verify) open files elsewhere.
Status check_relative_path(const std::string& rel, const std::string& where) {
  if (rel.empty() || rel.front() == '/' || rel.find('\0') != std::string::npos)
    return parse_error(where + ": files[] path '" + rel + "' must be a relative path inside the checkpoint");
  const std::string framed = "/" + rel + "/";
  if (framed.find("/../") != std::string::npos || framed.find("/./") != std::string::npos)
    return parse_error(where + ": files[] path '" + rel + "' leaves the checkpoint directory ('..' or '.')");
  return Status::ok();
}

Result<std::vector<FileEntry>> listed_files(const Json& meta, const std::string& where) {
  if (!meta.contains("files") || !meta["files"].is_array()) return parse_error(where + ": no \"files\" array");
  std::vector<FileEntry> out;
  for (const auto& f : meta["files"]) {
    LOOM_ASSIGN_OR_RETURN(std::string rel, json_string(f, "path", where + ": files[]"));
    LOOM_RETURN_IF_ERROR(check_relative_path(rel, where));
    LOOM_ASSIGN_OR_RETURN(int64_t size, json_int(f, "size_bytes", where + ": " + rel));
    if (size < 0) return parse_error(where + ": " + rel + ": size_bytes " + std::to_string(size) + " is negative");
    LOOM_ASSIGN_OR_RETURN(std::string hash, json_string(f, "xxh64", where + ": " + rel));
    out.push_back({rel, static_cast<uint64_t>(size), hash});
  }
  return out;
}

Result<Json> read_metadata(const std::string& step_dir) {
  const std::string path = step_dir + "/metadata.json";
  auto text = read_text_file(path);
  if (!text.is_ok()) {
    if (text.status().code() == StatusCode::kNotFound)
      return not_found(step_dir + " is not a committed checkpoint (no metadata.json; the save did not finish)");
    return text.status();
  }
  LOOM_ASSIGN_OR_RETURN(Json meta, parse_json(*text, path));
  if (!meta.is_object()) return parse_error(path + ": not a JSON object");
  return meta;
}

// Size always; checksum when `checksums`.
Status check_files(const std::string& step_dir, const std::vector<FileEntry>& files, bool checksums) {
  for (const auto& f : files) {
    const std::string path = step_dir + "/" + f.rel;
    auto size = file_size_bytes(path);
    if (!size.is_ok()) return not_found(path + ": listed in metadata.json but missing");
    if (*size != f.size_bytes)
      return parse_error(path + ": size " + std::to_string(*size) + " bytes, metadata.json says " +
                         std::to_string(f.size_bytes) + " (truncated or replaced)");
    if (!checksums) continue;
    LOOM_ASSIGN_OR_RETURN(std::string hash, xxh64_file_hex(path));
    if (hash != f.xxh64)
      return parse_error(path + ": XXH64 " + hash + ", metadata.json says " + f.xxh64 + " (the file is corrupt)");
  }
  return Status::ok();
}

int64_t numel(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}

}  // namespace

struct CheckpointReader::Impl {
  std::string path;
  std::string metadata_text;
  Json meta;
  int64_t step = 0;
  bool light = false;
  int world = 1;
  std::vector<FileEntry> files;
  std::map<std::string, TensorIndex> tensors[2];  // [0] model, [1] optimizer
};

CheckpointReader::CheckpointReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointReader::~CheckpointReader() = default;

Result<std::string> resolve_checkpoint(const std::string& path) {
  std::error_code ec;
  fs::path p(path);
  if (fs::is_regular_file(p, ec) && p.filename() == "latest") p = p.parent_path();
  if (!fs::is_directory(p, ec)) return not_found(path + ": no such checkpoint directory");
  if (fs::exists(p / "metadata.json", ec)) return p.string();
  if (fs::is_regular_file(p / "latest", ec)) {
    LOOM_ASSIGN_OR_RETURN(std::string name, read_text_file((p / "latest").string()));
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ' || name.back() == '\r')) name.pop_back();
    if (name.empty() || name.find('/') != std::string::npos)
      return parse_error((p / "latest").string() + ": does not name a step directory");
    return (p / name).string();
  }
  return p.string();  // a step directory without metadata.json: open() says why it refuses
}

Status verify_checkpoint(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string dir, resolve_checkpoint(path));
  LOOM_ASSIGN_OR_RETURN(Json meta, read_metadata(dir));
  LOOM_ASSIGN_OR_RETURN(auto files, listed_files(meta, dir + "/metadata.json"));
  return check_files(dir, files, true);
}

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  LOOM_ASSIGN_OR_RETURN(impl->path, resolve_checkpoint(path));
  LOOM_ASSIGN_OR_RETURN(impl->meta, read_metadata(impl->path));
  impl->metadata_text = impl->meta.dump();
  const std::string where = impl->path + "/metadata.json";
  LOOM_ASSIGN_OR_RETURN(impl->step, json_int(impl->meta, "step", where));
  if (impl->step < 0) return parse_error(where + ": step " + std::to_string(impl->step) + " is negative");
  LOOM_ASSIGN_OR_RETURN(int64_t world, json_int(impl->meta, "world_size", where));
  if (world < 1 || world > (int64_t{1} << 24))
    return parse_error(where + ": world_size " + std::to_string(world) + " is out of range (1..2^24)");
  impl->world = static_cast<int>(world);
  LOOM_ASSIGN_OR_RETURN(impl->light, json_bool_or(impl->meta, "light", false, where));
  LOOM_ASSIGN_OR_RETURN(impl->files, listed_files(impl->meta, where));
  // Every byte is checked once at open: XXH64 runs at memory speed, far
  // faster than the disk, and a reader never trusts a corrupt slice.
  LOOM_RETURN_IF_ERROR(check_files(impl->path, impl->files, true));
  for (const auto& f : impl->files) {
    const bool opt = f.rel.rfind("optimizer_state/", 0) == 0;
    if (!opt && f.rel.rfind("model_weights/", 0) != 0) continue;
    LOOM_ASSIGN_OR_RETURN(auto infos, list_h5_slices(impl->path + "/" + f.rel));
    for (auto& info : infos) {
      TensorIndex& t = impl->tensors[opt][info.name];
      if (t.slices.empty()) t.global_shape = info.global_shape;
      if (t.global_shape != info.global_shape)
        return parse_error(impl->path + "/" + f.rel + ": " + info.name + " has a global shape that differs from "
                           "another rank's slice");
      t.slices.push_back({f.rel, info.offset, info.extent});
    }
  }
  return std::unique_ptr<CheckpointReader>(new CheckpointReader(std::move(impl)));
}

int64_t CheckpointReader::step() const { return impl_->step; }
const std::string& CheckpointReader::path() const { return impl_->path; }
const std::string& CheckpointReader::metadata_json() const { return impl_->metadata_text; }
bool CheckpointReader::has_model() const { return !impl_->light; }
int CheckpointReader::world_size() const { return impl_->world; }

std::vector<std::string> CheckpointReader::tensor_names(bool optimizer) const {
  std::vector<std::string> out;
  for (const auto& [name, t] : impl_->tensors[optimizer]) out.push_back(name);
  return out;
}

Result<std::vector<int64_t>> CheckpointReader::global_shape(const std::string& name, bool optimizer) const {
  auto it = impl_->tensors[optimizer].find(name);
  if (it == impl_->tensors[optimizer].end())
    return not_found(impl_->path + ": no " + (optimizer ? "optimizer" : "model") + " tensor '" + name + "'");
  return it->second.global_shape;
}

std::vector<CheckpointReader::SliceRef> CheckpointReader::slices(const std::string& name, bool optimizer) const {
  auto it = impl_->tensors[optimizer].find(name);
  if (it == impl_->tensors[optimizer].end()) return {};
  return it->second.slices;
}

std::vector<std::pair<std::string, uint64_t>> CheckpointReader::files() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& f : impl_->files) out.emplace_back(f.rel, f.size_bytes);
  return out;
}

Status CheckpointReader::read(const std::string& name, bool optimizer, const std::vector<int64_t>& offset,
                              const std::vector<int64_t>& extent, float* out) const {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> shape, global_shape(name, optimizer));
  const size_t rank = shape.size();
  if (offset.size() != rank || extent.size() != rank)
    return invalid_argument(name + ": read asks for a " + std::to_string(offset.size()) + "-D rectangle of a " +
                            std::to_string(rank) + "-D tensor");
  for (size_t d = 0; d < rank; ++d)
    if (offset[d] < 0 || extent[d] < 0 || offset[d] + extent[d] > shape[d])
      return invalid_argument(name + ": read rectangle exceeds the global shape in dim " + std::to_string(d));
  // Work in 2-D: a 1-D tensor is one row.
  auto as2 = [&](const std::vector<int64_t>& v, int64_t pad) {
    return rank == 2 ? std::array<int64_t, 2>{v[0], v[1]} : std::array<int64_t, 2>{pad, v[0]};
  };
  const auto o = as2(offset, 0), e = as2(extent, 1);
  std::vector<uint8_t> covered(static_cast<size_t>(e[0] * e[1]), 0);
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> seen;  // replicas: read a box once
  std::vector<float> buf;
  for (const auto& s : impl_->tensors[optimizer].at(name).slices) {
    if (std::find(seen.begin(), seen.end(), std::make_pair(s.offset, s.extent)) != seen.end()) continue;
    const auto so = as2(s.offset, 0), se = as2(s.extent, 1);
    int64_t lo[2], hi[2];
    bool empty = false;
    for (int d = 0; d < 2; ++d) {
      lo[d] = std::max(o[d], so[d]);
      hi[d] = std::min(o[d] + e[d], so[d] + se[d]);
      empty |= lo[d] >= hi[d];
    }
    if (empty) continue;
    seen.emplace_back(s.offset, s.extent);
    std::vector<int64_t> local, count;
    for (int d = 2 - static_cast<int>(rank); d < 2; ++d) {
      local.push_back(lo[d] - so[d]);
      count.push_back(hi[d] - lo[d]);
    }
    buf.resize(static_cast<size_t>(numel(count)));
    LOOM_RETURN_IF_ERROR(read_h5_slice_region(impl_->path + "/" + s.file, name, local, count, buf.data()));
    const int64_t w = hi[1] - lo[1];
    for (int64_t r = lo[0]; r < hi[0]; ++r) {
      const size_t dst = static_cast<size_t>((r - o[0]) * e[1] + (lo[1] - o[1]));
      std::copy_n(buf.data() + (r - lo[0]) * w, w, out + dst);
      std::fill_n(covered.data() + dst, w, uint8_t{1});
    }
  }
  auto hole = std::find(covered.begin(), covered.end(), uint8_t{0});
  if (hole != covered.end()) {
    const int64_t i = hole - covered.begin();
    return not_found(impl_->path + ": " + name + ": element (" +
                     (rank == 2 ? std::to_string(o[0] + i / e[1]) + ", " : std::string()) +
                     std::to_string(o[1] + i % e[1]) + ") is in no saved slice");
  }
  return Status::ok();
}

Result<std::string> CheckpointReader::training_state(int rank) const {
  if (rank < 0 || rank >= impl_->world)
    return invalid_argument("training_state: rank " + std::to_string(rank) + " is outside world " +
                            std::to_string(impl_->world));
  return read_text_file(impl_->path + "/training_state/" + rank_file_stem(rank) + ".json");
}

}  // namespace loom::ckpt
