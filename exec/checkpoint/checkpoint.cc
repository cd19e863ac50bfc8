// Checkpointer: per-rank writes, file-system coordination, rank 0's commit
// and retention. The protocol is written up in docs/formats/checkpoint.md.
#include "exec/checkpoint/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <thread>

#include "core/json_util.h"
#include "core/output_file.h"
#include "core/plan.h"
#include "exec/checkpoint/ckpt_io.h"
#include "exec/checkpoint/h5_slices.h"

namespace loom::ckpt {

namespace fs = std::filesystem;

struct Checkpointer::Impl {
  CheckpointOptions opts;
  int rank = 0;
  int world = 1;
  Json metadata;            // the caller's object
  std::thread worker;       // the in-flight async save
  Status worker_status;     // its result, read after join

  Status do_save(const SaveRequest& req);
  Status write_rank_files(const SaveRequest& req, const std::string& tmp);
  Status commit(const SaveRequest& req, const std::string& tmp, const std::string& final_dir);
  Status apply_retention(int64_t committed_step);
};

namespace {

using Clock = std::chrono::steady_clock;

bool exists(const std::string& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// Polls for `path` until it exists or `timeout_s` passes; backs off to 50 ms.
bool wait_for(const std::string& path, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  auto sleep = std::chrono::milliseconds(1);
  while (!exists(path)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::milliseconds(50));
  }
  return true;
}

// Size + checksum entry of one finished file, path relative to the step dir.
Result<Json> file_entry(const std::string& step_dir, const std::string& rel) {
  LOOM_ASSIGN_OR_RETURN(uint64_t size, file_size_bytes(step_dir + "/" + rel));
  LOOM_ASSIGN_OR_RETURN(std::string hash, xxh64_file_hex(step_dir + "/" + rel));
  return Json{{"path", rel}, {"size_bytes", size}, {"xxh64", hash}};
}

std::string iso_time_utc(std::time_t t) {
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Parses "step_000123" (exactly; no suffix) into 123.
bool parse_step_dir(const std::string& name, int64_t* step) {
  if (name.rfind("step_", 0) != 0 || name.size() <= 5) return false;
  for (size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  *step = std::stoll(name.substr(5));
  return true;
}

// Removes leftovers of crashed saves; restores a checkpoint that a crashed
// re-save had moved aside (step_X.replaced.tmp with no step_X).
Status clean_leftovers(const std::string& dir) {
  std::error_code ec;
  std::vector<fs::path> tmps;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0) tmps.push_back(e.path());
  }
  if (ec) return io_error("list " + dir + ": " + ec.message());
  for (const auto& p : tmps) {
    const std::string n = p.filename().string();
    const std::string suffix = ".replaced.tmp";
    if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::string orig = dir + "/" + n.substr(0, n.size() - suffix.size());
      if (!exists(orig)) {
        LOOM_RETURN_IF_ERROR(rename_path(p.string(), orig));
        continue;
      }
    }
    LOOM_RETURN_IF_ERROR(remove_tree(p.string()));
  }
  return Status::ok();
}

}  // namespace

Checkpointer::Checkpointer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Checkpointer::~Checkpointer() { (void)wait(); }

Result<std::unique_ptr<Checkpointer>> Checkpointer::create(const CheckpointOptions& opts, int rank, int world,
                                                           const std::string& metadata_json) {
  if (opts.dir.empty()) return invalid_argument("checkpoint: dir is empty; pass a checkpoint directory");
  if (world < 1 || rank < 0 || rank >= world)
    return invalid_argument("checkpoint: rank " + std::to_string(rank) + " is outside world " + std::to_string(world));
  if (opts.keep_last < 0 || opts.keep_every < 0)
    return invalid_argument("checkpoint: keep_last and keep_every must be >= 0 (0 = keep all / none)");
  auto impl = std::make_unique<Impl>();
  impl->opts = opts;
  impl->rank = rank;
  impl->world = world;
  if (metadata_json.empty()) {
    impl->metadata = Json::object();
  } else {
    LOOM_ASSIGN_OR_RETURN(impl->metadata, parse_json(metadata_json, "checkpoint metadata"));
    if (!impl->metadata.is_object())
      return invalid_argument("checkpoint metadata must be a JSON object (it is merged into metadata.json)");
  }
  std::error_code ec;
  fs::create_directories(opts.dir, ec);
  if (ec) return io_error("checkpoint: create " + opts.dir + ": " + ec.message());
  if (rank == 0) LOOM_RETURN_IF_ERROR(clean_leftovers(opts.dir));
  return std::unique_ptr<Checkpointer>(new Checkpointer(std::move(impl)));
}

Status Checkpointer::wait() {
  if (!impl_ || !impl_->worker.joinable()) return Status::ok();
  impl_->worker.join();
  Status s = impl_->worker_status;
  impl_->worker_status = Status::ok();
  return s;
}

Status Checkpointer::save(SaveRequest request) {
  LOOM_RETURN_IF_ERROR(wait());  // one save in flight
  if (!impl_->opts.async) return impl_->do_save(request);
  // The request owns its copies of the tensors, so training may overwrite its
  // buffers while this thread writes (double buffering).
  impl_->worker = std::thread([impl = impl_.get(), req = std::move(request)]() {
    impl->worker_status = impl->do_save(req);
  });
  return Status::ok();
}

Status Checkpointer::Impl::do_save(const SaveRequest& req) {
  if (req.step < 0) return invalid_argument("checkpoint: step " + std::to_string(req.step) + " is negative");
  const std::string name = step_dir_name(req.step);
  const std::string tmp = opts.dir + "/" + name + ".tmp";
  const std::string ready = tmp + "/.created";
  if (rank == 0) {
    // A .tmp of this step can only be left by a failed save in this run.
    LOOM_RETURN_IF_ERROR(remove_tree(tmp));
    std::error_code ec;
    for (const char* sub : {"model_weights", "optimizer_state", "training_state"}) {
      fs::create_directories(tmp + "/" + sub, ec);
      if (ec) return io_error("checkpoint: create " + tmp + "/" + sub + ": " + ec.message());
    }
    LOOM_RETURN_IF_ERROR(write_file_durable(ready, ""));
  } else if (!wait_for(ready, opts.commit_timeout_s)) {
    return Status(StatusCode::kTimeout, "checkpoint: rank " + std::to_string(rank) + " waited " +
                                            std::to_string(opts.commit_timeout_s) + " s for rank 0 to create " + tmp);
  }
  Status s = write_rank_files(req, tmp);
  if (!s.is_ok()) {
    // Tell rank 0 at once instead of letting it time out.
    if (rank != 0) (void)write_file_durable(tmp + "/" + rank_file_stem(rank) + ".failed", s.message());
    // Rank 0 removes the unfinished step: nothing of a failed save stays behind.
    if (rank == 0) (void)remove_tree(tmp);
    return s;
  }
  if (rank != 0) return Status::ok();
  s = commit(req, tmp, opts.dir + "/" + name);
  // A failed commit before the rename (another rank failed, metadata.json
  // could not be written) leaves no step_*.tmp behind; a timeout leaves it for
  // the late rank (the next start cleans it).
  if (!s.is_ok() && s.code() != StatusCode::kTimeout) (void)remove_tree(tmp);
  return s;
}

Status Checkpointer::Impl::write_rank_files(const SaveRequest& req, const std::string& tmp) {
  const std::string stem = rank_file_stem(rank);
  std::vector<std::string> rels;
  if (!req.light) {
    for (int opt = 0; opt < 2; ++opt) {
      const std::string rel = std::string(opt ? "optimizer_state/" : "model_weights/") + stem + ".h5";
      const std::string path = tmp + "/" + rel;
      Status s = write_h5_slices(path + ".tmp", opt ? req.optimizer : req.model);
      if (!s.is_ok()) {
        // HDF5 reports a failed write without the cause: name the file size
        // limit or the full disk when that is what stopped it.
        s = explain_write_failure(path + ".tmp", errno, s);
        std::error_code ec;
        fs::remove(path + ".tmp", ec);
        return s.with_context("checkpoint step " + std::to_string(req.step));
      }
      LOOM_RETURN_IF_ERROR(fsync_path(path + ".tmp"));
      LOOM_RETURN_IF_ERROR(rename_path(path + ".tmp", path));
      rels.push_back(rel);
    }
  }
  const std::string ts_rel = "training_state/" + stem + ".json";
  LOOM_RETURN_IF_ERROR(write_file_durable(tmp + "/" + ts_rel, req.training_state_json));
  rels.push_back(ts_rel);
  for (const char* sub : {"model_weights", "optimizer_state", "training_state"})
    LOOM_RETURN_IF_ERROR(fsync_path(tmp + "/" + sub));
  Json files = Json::array();
  for (const auto& rel : rels) {
    LOOM_ASSIGN_OR_RETURN(Json e, file_entry(tmp, rel));
    files.push_back(std::move(e));
  }
  Json manifest{{"rank", rank}, {"step", req.step}, {"files", files}};
  return write_file_durable(tmp + "/" + stem + ".done", manifest.dump(1));
}

Status Checkpointer::Impl::commit(const SaveRequest& req, const std::string& tmp, const std::string& final_dir) {
  // 1. Every rank's manifest (or its failure note).
  Json files = Json::array();
  const auto deadline = Clock::now() + std::chrono::duration<double>(opts.commit_timeout_s);
  for (int r = 0; r < world; ++r) {
    const std::string done = tmp + "/" + rank_file_stem(r) + ".done";
    const std::string failed = tmp + "/" + rank_file_stem(r) + ".failed";
    auto sleep = std::chrono::milliseconds(1);
    while (!exists(done)) {
      if (exists(failed)) {
        auto why = read_text_file(failed);
        return Status(StatusCode::kRemoteError, "checkpoint step " + std::to_string(req.step) + ": rank " +
                                                    std::to_string(r) + " failed: " + (why.is_ok() ? *why : "?"));
      }
      if (Clock::now() >= deadline)
        return Status(StatusCode::kTimeout, "checkpoint step " + std::to_string(req.step) + ": rank " +
                                                std::to_string(r) + " did not finish within commit_timeout_s=" +
                                                std::to_string(opts.commit_timeout_s) + "; " + tmp +
                                                " is left for cleanup");
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::milliseconds(50));
    }
    LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(done));
    LOOM_ASSIGN_OR_RETURN(Json m, parse_json(text, done));
    if (!m.contains("files") || !m["files"].is_array()) return parse_error(done + ": no files array");
    for (auto& f : m["files"]) files.push_back(f);
  }
  // 2. metadata.json: the caller's object + ours. Written last: the commit marker.
  Json meta = metadata;
  meta["format"] = "loom-checkpoint-v1";
  meta["step"] = req.step;
  meta["light"] = req.light;
  meta["world_size"] = world;
  meta["loom_version"] = loom_version();
  meta["files"] = files;
  const std::time_t now = std::time(nullptr);
  meta["created_unix_s"] = static_cast<int64_t>(now);
  meta["created"] = iso_time_utc(now);
  LOOM_RETURN_IF_ERROR(write_file_durable(tmp + "/metadata.json", meta.dump(1)));
  LOOM_RETURN_IF_ERROR(fsync_path(tmp));
  // 3. Publish: rename the directory, then `latest`.
  std::string aside;
  if (exists(final_dir)) {  // a re-save of the same step
    aside = final_dir + ".replaced.tmp";
    LOOM_RETURN_IF_ERROR(remove_tree(aside));
    LOOM_RETURN_IF_ERROR(rename_path(final_dir, aside));
  }
  LOOM_RETURN_IF_ERROR(rename_path(tmp, final_dir));
  LOOM_RETURN_IF_ERROR(fsync_path(opts.dir));
  LOOM_RETURN_IF_ERROR(write_file_durable(opts.dir + "/latest", step_dir_name(req.step) + "\n"));
  LOOM_RETURN_IF_ERROR(fsync_path(opts.dir));
  if (!aside.empty()) LOOM_RETURN_IF_ERROR(remove_tree(aside));
  return apply_retention(req.step);
}

Status Checkpointer::Impl::apply_retention(int64_t committed_step) {
  struct Entry {
    int64_t step;
    bool light;
    std::string path;
  };
  std::vector<Entry> all;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(opts.dir, ec)) {
    int64_t step = 0;
    if (!e.is_directory() || !parse_step_dir(e.path().filename().string(), &step)) continue;
    auto text = read_text_file(e.path().string() + "/metadata.json");
    if (!text.is_ok()) continue;  // not committed: not ours to judge
    auto meta = parse_json(*text, "metadata.json");
    if (!meta.is_ok()) continue;
    all.push_back({step, meta->value("light", false), e.path().string()});
  }
  if (ec) return io_error("checkpoint retention: list " + opts.dir + ": " + ec.message());
  std::sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) { return a.step > b.step; });
  int64_t newest_full = -1;
  int full_seen = 0;
  for (const auto& e : all) {
    bool keep = true;
    if (e.step == committed_step) {
      keep = true;  // never delete what `latest` names
    } else if (e.light) {
      keep = newest_full < 0 || e.step > newest_full;
    } else {
      const bool in_last = opts.keep_last == 0 || full_seen < opts.keep_last;
      const bool every = opts.keep_every > 0 && e.step % opts.keep_every == 0;
      keep = in_last || every;
    }
    if (!e.light) {
      if (newest_full < 0) newest_full = e.step;
      ++full_seen;
    }
    if (!keep) LOOM_RETURN_IF_ERROR(remove_tree(e.path));
  }
  return Status::ok();
}

}  // namespace loom::ckpt
