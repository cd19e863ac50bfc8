#include "exec/runtime/dataset_source.h"

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <unistd.h>

#include "core/json_util.h"
#include "exec/data/indexed_dataset.h"
#include "exec/data/loader.h"
#include "exec/data/remote_cache.h"

namespace loom::exec {

namespace {

namespace fs = std::filesystem;

bool is_remote(const std::string& s) {
  return s.rfind("s3://", 0) == 0 || s.rfind("http://", 0) == 0 || s.rfind("https://", 0) == 0;
}
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
std::string parent_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

std::string default_cache_dir() {
  if (const char* c = std::getenv("LOOM_CACHE_DIR")) return c;
  if (const char* h = std::getenv("HOME")) return std::string(h) + "/.cache/loom";
  return "/tmp/loom-cache";
}

// A local path for `path_or_url` (fetched into the cache when remote).
Result<std::string> local(const std::string& path_or_url, const DataSpecOptions& o, const std::string& xxh64 = "") {
  if (!is_remote(path_or_url)) return path_or_url;
  data::RemoteCacheOptions rc;
  rc.cache_dir = o.cache_dir.empty() ? default_cache_dir() : o.cache_dir;
  return data::fetch_to_cache(path_or_url, rc, xxh64);
}

// Opens PREFIX.bin/.idx (fetching both when remote; the local prefix is the
// cached .idx path without its extension).
Result<std::shared_ptr<data::IndexedDataset>> open_prefix(const std::string& prefix, const DataSpecOptions& o,
                                                          const std::string& bin_xxh = "",
                                                          const std::string& idx_xxh = "") {
  std::string local_prefix = prefix;
  if (is_remote(prefix)) {
    LOOM_ASSIGN_OR_RETURN(std::string bin, local(prefix + ".bin", o, bin_xxh));
    LOOM_ASSIGN_OR_RETURN(std::string idx, local(prefix + ".idx", o, idx_xxh));
    // The cache names files by URL hash: link them under one prefix.
    local_prefix = idx.substr(0, idx.size() - 4);
    // Ranks of one node share the cache: publish the link atomically (a
    // private name, then rename), so a concurrent rank sees it whole or not at all.
    std::error_code ec;
    const std::string link = local_prefix + ".bin";
    if (!fs::exists(link, ec)) {
      const std::string tmp = link + ".link." + std::to_string(::getpid());
      fs::remove(tmp, ec);
      fs::create_symlink(bin, tmp, ec);
      if (!ec) fs::rename(tmp, link, ec);
      if (ec && !fs::exists(link)) return io_error("data: cannot link cached " + bin + " as " + link + ": " + ec.message());
    }
  }
  LOOM_ASSIGN_OR_RETURN(auto ds, data::IndexedDataset::open(local_prefix));
  return std::shared_ptr<data::IndexedDataset>(std::move(ds));
}

struct Part {
  std::shared_ptr<data::IndexedDataset> ds;
  double weight;
};

Status add_manifest(const std::string& manifest, double weight, const DataSpecOptions& o, std::vector<Part>& out) {
  LOOM_ASSIGN_OR_RETURN(std::string path, local(manifest, o));
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(text, manifest));
  if (!j.contains("shards") || !j["shards"].is_array() || j["shards"].empty())
    return invalid_argument(manifest + ": no shards listed; re-run `loom preprocess`");
  if (j.contains("tokenizer") && j["tokenizer"].contains("vocab_size") && o.model_vocab > 0) {
    int64_t vocab = j["tokenizer"]["vocab_size"].get<int64_t>();
    if (vocab > o.model_vocab)
      return invalid_argument(manifest + ": the tokenizer's vocabulary (" + std::to_string(vocab) +
                              ") is larger than the model's (" + std::to_string(o.model_vocab) +
                              "); plan a model with vocab >= " + std::to_string(vocab));
  }
  const std::string dir = parent_of(manifest);
  double total_tokens = 0;
  std::vector<Part> shards;
  for (const Json& s : j["shards"]) {
    LOOM_ASSIGN_OR_RETURN(std::string bin, json_string(s, "bin", manifest + ": shard"));
    LOOM_ASSIGN_OR_RETURN(int64_t tokens, json_int(s, "tokens", manifest + ": shard"));
    std::string prefix = dir + "/" + bin.substr(0, bin.size() - 4);
    LOOM_ASSIGN_OR_RETURN(std::string bin_xxh, json_string_or(s, "bin_xxh64", "", manifest + ": shard"));
    LOOM_ASSIGN_OR_RETURN(std::string idx_xxh, json_string_or(s, "idx_xxh64", "", manifest + ": shard"));
    LOOM_ASSIGN_OR_RETURN(auto ds, open_prefix(prefix, o, bin_xxh, idx_xxh));
    if (ds->total_tokens() != tokens)
      return invalid_argument(manifest + ": shard " + bin + " holds " + std::to_string(ds->total_tokens()) +
                              " tokens but the manifest says " + std::to_string(tokens) + "; the shard was changed");
    shards.push_back({std::move(ds), double(tokens)});
    total_tokens += double(tokens);
  }
  // Shards of one dataset: drawn in proportion to their tokens.
  for (Part& p : shards) out.push_back({p.ds, weight * p.weight / total_tokens});
  return Status::ok();
}

class LoaderSource final : public TokenSource {
 public:
  LoaderSource(std::vector<Part> parts, DataSpecOptions o, std::string describe)
      : parts_(std::move(parts)), o_(std::move(o)), describe_(std::move(describe)) {}
  Status ensure_loader() {
    if (loader_) return Status::ok();
    std::vector<std::shared_ptr<data::IndexedDataset>> ds;
    std::vector<double> w;
    for (const Part& p : parts_) {
      ds.push_back(p.ds);
      w.push_back(p.weight);
    }
    LOOM_ASSIGN_OR_RETURN(loader_, data::Loader::create(ds, w, o_.seq_len, o_.global_batch, o_.dp_rank, o_.dp_size,
                                                        o_.seed, o_.prefetch_batches));
    return Status::ok();
  }
  Status read(int64_t first, int64_t n, int64_t T, int32_t* tokens, int32_t* targets) override {
    if (!loader_) {
      LOOM_RETURN_IF_ERROR(ensure_loader());
      next_first_ = first;
    }
    if (n != loader_->rows_per_rank() || T != loader_->seq_len() || first != next_first_)
      return internal_error("data: the loader serves consecutive batches of " +
                            std::to_string(loader_->rows_per_rank()) + " x " + std::to_string(loader_->seq_len()) +
                            " in order; asked for sample " + std::to_string(first));
    LOOM_RETURN_IF_ERROR(loader_->next(tokens, targets).status());
    next_first_ += o_.global_batch;
    next_first_global_ += o_.global_batch;
    if (o_.model_vocab > 0 && loader_->vocab_guard_max_token() >= o_.model_vocab)
      return invalid_argument("data: token id " + std::to_string(loader_->vocab_guard_max_token()) +
                              " is outside the model's vocabulary of " + std::to_string(o_.model_vocab) +
                              "; tokenize with the model's tokenizer or plan a larger vocab");
    return Status::ok();
  }
  int64_t vocab_size() const override { return 0; }  // checked per batch against the model
  // The loader's cursor counts GLOBAL samples, so it restores under any DP size.
  std::string state_json() const override {
    Json j;
    j["consumed_samples"] = loader_ ? loader_->cursor().consumed_samples : next_first_global_;
    if (loader_) j["per_dataset"] = loader_->cursor().per_dataset;
    return j.dump();
  }
  Status restore_state(const std::string& text, int64_t next_global_sample) override {
    LOOM_ASSIGN_OR_RETURN(Json j, parse_json(text, "checkpoint data state"));
    data::LoaderCursor c;
    c.consumed_samples = j.value("consumed_samples", next_global_sample);
    if (j.contains("per_dataset")) c.per_dataset = j["per_dataset"].get<std::vector<int64_t>>();
    if (c.consumed_samples != next_global_sample)
      return invalid_argument("checkpoint: the data cursor (" + std::to_string(c.consumed_samples) +
                              " samples) does not match the step (" + std::to_string(next_global_sample) + ")");
    LOOM_RETURN_IF_ERROR(ensure_loader());
    LOOM_RETURN_IF_ERROR(loader_->restore(c));
    next_first_ = next_global_sample + int64_t(o_.dp_rank) * (o_.global_batch / o_.dp_size);
    next_first_global_ = next_global_sample;
    return Status::ok();
  }
  std::string describe() const override { return describe_; }

 private:
  std::vector<Part> parts_;
  DataSpecOptions o_;
  std::string describe_;
  std::unique_ptr<data::Loader> loader_;
  int64_t next_first_ = 0;
  int64_t next_first_global_ = 0;
};

}  // namespace

Result<std::unique_ptr<TokenSource>> open_training_data(const std::string& spec, const DataSpecOptions& o) {
  std::vector<Part> parts;
  std::stringstream ss(spec);
  std::string item;
  int items = 0;
  std::string single_text;
  while (std::getline(ss, item, ',')) {
    ++items;
    double weight = 1;
    auto colon = item.find(':');
    // "w:path" when what stands before the first ':' is a number (not "s3", "https").
    if (colon != std::string::npos) {
      char* end = nullptr;
      double w = std::strtod(item.substr(0, colon).c_str(), &end);
      if (end && *end == '\0' && colon > 0) {
        if (!(w > 0)) return invalid_argument("--data: weight in '" + item + "' must be > 0");
        weight = w;
        item = item.substr(colon + 1);
      }
    }
    if (ends_with(item, ".manifest.json")) {
      LOOM_RETURN_IF_ERROR(add_manifest(item, weight, o, parts));
      continue;
    }
    bool local_prefix = !is_remote(item) && fs::exists(item + ".idx") && fs::exists(item + ".bin");
    bool remote_prefix = is_remote(item) && !ends_with(item, ".txt");
    if (local_prefix || remote_prefix) {
      LOOM_ASSIGN_OR_RETURN(auto ds, open_prefix(item, o));
      parts.push_back({std::move(ds), weight});
      continue;
    }
    single_text = item;
  }
  if (!single_text.empty()) {
    if (items > 1)
      return invalid_argument("--data: '" + single_text +
                              "' is a text file; blends take indexed datasets or manifests (run `loom preprocess`)");
    LOOM_ASSIGN_OR_RETURN(std::string path, local(single_text, o));
    return open_byte_text(path, o.seed);
  }
  if (parts.empty()) return invalid_argument("--data '" + spec + "' names no data");
  return std::unique_ptr<TokenSource>(new LoaderSource(std::move(parts), o, spec));
}

}  // namespace loom::exec
