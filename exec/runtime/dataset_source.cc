#include "exec/runtime/dataset_source.h"

#include "core/resources.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <filesystem>
#include <sstream>
#include <unistd.h>

#include "core/json_util.h"
#include "exec/data/indexed_dataset.h"
#include "exec/data/loader.h"
#include "exec/data/manifest.h"
#include "exec/data/remote_cache.h"
#include "exec/data/remote_file.h"

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


data::RemoteCacheOptions remote_options(const DataSpecOptions& o) {
  data::RemoteCacheOptions rc;
  rc.cache_dir = o.cache_dir.empty() ? user_cache_dir() : o.cache_dir;
  rc.s3 = o.s3;
  return rc;
}

// A local path for `path_or_url` (fetched into the cache when remote).
Result<std::string> local(const std::string& path_or_url, const DataSpecOptions& o, const std::string& xxh64 = "") {
  if (!is_remote(path_or_url)) return path_or_url;
  return data::fetch_to_cache(path_or_url, remote_options(o), xxh64);
}

// Opens PREFIX.bin/.idx with the reader LOOM_DATA_READ selects. Remote: the
// .idx is fetched whole (it is small and read first); the .bin is read while it
// downloads, block by block (remote_file.h), unless LOOM_REMOTE_RANGED=0 asks
// to download it whole first.
Result<std::shared_ptr<data::IndexedDataset>> open_prefix(const std::string& prefix, const DataSpecOptions& o,
                                                          const std::string& bin_xxh = "",
                                                          const std::string& idx_xxh = "") {
  LOOM_ASSIGN_OR_RETURN(data::ReadMode mode, data::read_mode_from_env());
  if (!is_remote(prefix)) {
    LOOM_ASSIGN_OR_RETURN(auto ds, data::IndexedDataset::open(prefix, mode));
    return std::shared_ptr<data::IndexedDataset>(std::move(ds));
  }
  LOOM_ASSIGN_OR_RETURN(std::string idx_path, local(prefix + ".idx", o, idx_xxh));
  auto idx = mode == data::ReadMode::kPread ? data::open_memory_source(idx_path) : data::open_mmap_source(idx_path);
  if (!idx.is_ok()) return idx.status();
  std::shared_ptr<data::ByteSource> bin;
  const char* ranged = std::getenv("LOOM_REMOTE_RANGED");
  if (ranged != nullptr && std::string(ranged) == "0") {
    LOOM_ASSIGN_OR_RETURN(std::string bin_path, local(prefix + ".bin", o, bin_xxh));
    LOOM_ASSIGN_OR_RETURN(bin, data::open_local_source(bin_path, mode, /*random_access=*/true));
  } else {
    LOOM_ASSIGN_OR_RETURN(bin, data::open_remote_source(prefix + ".bin", remote_options(o), bin_xxh, mode));
  }
  LOOM_ASSIGN_OR_RETURN(auto ds, data::IndexedDataset::open_sources(prefix, std::move(*idx), std::move(bin)));
  return std::shared_ptr<data::IndexedDataset>(std::move(ds));
}

// A byte-level text corpus is trained on exactly as its bytes are: refuse
// what is not plain text (JSON lines, compressed files, a dataset's .bin/.idx)
// instead of training on its syntax or its compressed bytes.
Status refuse_non_text(const std::string& item) {
  auto stripped = [&](const char* ext) { return item.substr(0, item.size() - std::strlen(ext)); };
  for (const char* ext : {".bin", ".idx"}) {
    if (ends_with(item, ext))
      return invalid_argument("--data " + item + " is one file of an indexed dataset; pass its PREFIX (--data " +
                              stripped(ext) + ") or the PREFIX.manifest.json that `loom preprocess` wrote");
  }
  const std::string how = "; tokenize it first: `loom preprocess --input " + item +
                          " --output PREFIX` (add --tokenizer MODEL), then pass --data PREFIX.manifest.json";
  for (const char* ext : {".jsonl", ".jsonl.gz", ".jsonl.zst", ".json", ".ndjson"}) {
    if (ends_with(item, ext))
      return invalid_argument("--data " + item + " is JSON lines, not plain text: loom execute would train on its "
                              "raw JSON syntax" + how);
  }
  for (const char* ext : {".gz", ".zst", ".bz2", ".xz", ".zip", ".tar"}) {
    if (ends_with(item, ext))
      return invalid_argument("--data " + item + " is compressed: loom execute would train on the compressed bytes" +
                              how);
  }
  if (is_remote(item)) return Status::ok();
  // By content too (a renamed file): compression magic, NUL bytes, or JSON lines.
  std::FILE* f = std::fopen(item.c_str(), "rb");
  if (f == nullptr) return Status::ok();  // the text reader reports what is wrong
  unsigned char head[4096];
  const size_t n = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  auto starts = [&](std::initializer_list<unsigned char> magic) {
    return n >= magic.size() && std::equal(magic.begin(), magic.end(), head);
  };
  if (starts({0x1f, 0x8b}) || starts({0x28, 0xb5, 0x2f, 0xfd}) || starts({'B', 'Z', 'h'}) ||
      starts({0xfd, '7', 'z', 'X', 'Z'}) || starts({'P', 'K', 0x03, 0x04}))
    return invalid_argument("--data " + item + " is a compressed file (by its first bytes): loom execute would train "
                            "on the compressed bytes" + how);
  if (std::memchr(head, 0, n) != nullptr)
    return invalid_argument("--data " + item + " is binary (it holds NUL bytes), not a text corpus; pass an indexed "
                            "dataset PREFIX or manifest from `loom preprocess`, or a plain text file");
  // JSON lines: the first line is a JSON object.
  size_t end = 0;
  while (end < n && head[end] != '\n') ++end;
  if (end < n && end > 1 && head[0] == '{') {
    auto j = Json::parse(std::string(reinterpret_cast<const char*>(head), end), nullptr, false);
    if (!j.is_discarded() && j.is_object())
      return invalid_argument("--data " + item + " holds JSON lines, not plain text: loom execute would train on "
                              "their raw JSON syntax" + how);
  }
  return Status::ok();
}

struct Part {
  std::shared_ptr<data::IndexedDataset> ds;
  double weight;
};

Status add_manifest(const std::string& manifest, double weight, const DataSpecOptions& o, std::vector<Part>& out) {
  // No checksum pins a manifest: fetched anew each run (a cached copy only
  // where the server cannot be reached), so a dataset re-published at its URL
  // brings its new checksums, and with them its new shards.
  std::string path = manifest;
  if (is_remote(manifest)) {
    data::RemoteCacheOptions ro = remote_options(o);
    ro.refresh = true;
    ro.notice = [](const std::string& what) { std::fprintf(stderr, "notice: %s\n", what.c_str()); };
    LOOM_ASSIGN_OR_RETURN(path, data::fetch_to_cache(manifest, ro));
  }
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  LOOM_ASSIGN_OR_RETURN(data::Manifest m, data::parse_manifest(text, manifest));
  if (m.vocab_size > 0 && o.model_vocab > 0 && m.vocab_size > o.model_vocab)
    return invalid_argument(manifest + ": the tokenizer's vocabulary (" + std::to_string(m.vocab_size) +
                            ") is larger than the model's (" + std::to_string(o.model_vocab) +
                            "); plan a model with vocab >= " + std::to_string(m.vocab_size));
  const std::string dir = parent_of(manifest);
  for (const data::ManifestShard& s : m.shards) {
    LOOM_ASSIGN_OR_RETURN(auto ds, open_prefix(dir + "/" + s.prefix, o, s.bin_xxh64, s.idx_xxh64));
    if (ds->total_tokens() != s.tokens)
      return invalid_argument(manifest + ": shard " + s.bin + " holds " + std::to_string(ds->total_tokens()) +
                              " tokens but the manifest says " + std::to_string(s.tokens) + "; the shard was changed");
    // Shards of one dataset are drawn in proportion to their tokens; an empty
    // shard (more shards than documents) has nothing to draw.
    if (s.tokens > 0) out.push_back({std::move(ds), weight * double(s.tokens) / double(m.tokens)});
  }
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
    j["datasets"] = identity();
    return j.dump();
  }
  Status restore_state(const std::string& text, int64_t next_global_sample) override {
    LOOM_ASSIGN_OR_RETURN(data::LoaderCursor c,
                          data::parse_loader_cursor(text, next_global_sample, "checkpoint data state"));
    if (c.consumed_samples != next_global_sample)
      return invalid_argument("checkpoint: the data cursor (" + std::to_string(c.consumed_samples) +
                              " samples) does not match the step (" + std::to_string(next_global_sample) + ")");
    // The data the checkpoint's run read: said when this run reads another
    // (a new mix for a later phase is a choice; the cursor then continues by
    // sample count into it).
    const Json was = Json::parse(text, nullptr, false);
    if (!was.is_discarded() && was.is_object() && was.contains("datasets") && was["datasets"] != identity())
      notice_ = "the checkpoint's run read " + was["datasets"].dump() + "; this one reads " + identity().dump() +
                ": the data cursor continues by sample count into this data";
    LOOM_RETURN_IF_ERROR(ensure_loader());
    LOOM_RETURN_IF_ERROR(loader_->restore(c));
    next_first_ = next_global_sample + int64_t(o_.dp_rank) * (o_.global_batch / o_.dp_size);
    next_first_global_ = next_global_sample;
    return Status::ok();
  }
  std::string describe() const override { return describe_; }
  std::string resume_notice() const override { return notice_; }

 private:
  // What identifies the data: the --data spec, and each part's tokens and
  // weight (a shard rewritten or replaced changes them).
  Json identity() const {
    Json parts = Json::array();
    for (const Part& p : parts_) parts.push_back({{"tokens", p.ds->total_tokens()}, {"weight", p.weight}});
    return {{"spec", describe_}, {"parts", parts}};
  }
  std::string notice_;
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
      if (ds->total_tokens() == 0)
        return invalid_argument("--data " + item + ": the indexed dataset is empty (no tokens); preprocess a corpus "
                                "with documents");
      parts.push_back({std::move(ds), weight});
      continue;
    }
    LOOM_RETURN_IF_ERROR(refuse_non_text(item));
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
