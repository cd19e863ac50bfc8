// The files around preprocessing: which inputs a run reads (expand_inputs),
// what its outputs are named (shard_prefix), their checksums (xxh64_file) and
// the manifest that describes a finished run (write_preprocess_manifest). The
// reading, tokenizing and shard writing pipeline is preprocess.cc.
#include "exec/data/preprocess.h"

#include <glob.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/output_file.h"
#include "exec/data/jsonl_reader.h"
#include "exec/data/parquet_reader.h"
#include "exec/data/remote_cache.h"

namespace loom::data {

namespace fs = std::filesystem;

namespace {

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

Status write_preprocess_manifest(const PreprocessOptions& o, const PreprocessStats& s) {
  nlohmann::json shards = nlohmann::json::array();
  for (const ShardStats& sh : s.shards) {
    shards.push_back({{"bin", fs::path(sh.bin_path).filename().string()},
                      {"idx", fs::path(sh.idx_path).filename().string()},
                      {"documents", sh.documents},
                      {"tokens", sh.tokens},
                      {"bin_bytes", sh.bin_bytes},
                      {"idx_bytes", sh.idx_bytes},
                      {"bin_xxh64", hex64(sh.bin_xxh64)},
                      {"idx_xxh64", hex64(sh.idx_xxh64)}});
  }
  nlohmann::json m = {
      {"format", "loom-preprocess-manifest"},
      {"version", 1},
      {"tokenizer", {{"spec", o.tokenizer}, {"name", s.tokenizer_name}, {"vocab_size", s.vocab_size}}},
      {"dtype", dtype_name(s.dtype)},
      {"dtype_code", static_cast<int>(s.dtype)},
      {"append_eod", o.append_eod},
      {"text_field", o.text_field},
      {"shard_assignment", "round_robin"},
      {"inputs", s.inputs},
      {"documents", s.documents},
      {"tokens", s.tokens},
      {"empty_documents", s.empty_documents},
      {"skipped_lines",
       {{"malformed_json", s.lines.skipped_malformed},
        {"missing_field", s.lines.skipped_missing_field},
        {"invalid_utf8", s.lines.skipped_invalid_utf8}}},
      {"shards", shards}};
  if (s.cleaned) m["cleaning"] = s.clean.to_json();
  WriteOptions wo;
  wo.durable = true;
  wo.allow_stdout = false;
  return write_output_file(s.manifest_path, m.dump(2) + "\n", wo);
}

std::string shard_prefix(const std::string& prefix, int i, int n) {
  if (n == 1) return prefix;
  char buf[16];
  std::snprintf(buf, sizeof buf, "_%05d", i);
  return prefix + buf;
}

Result<uint64_t> xxh64_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return not_found(path + ": cannot open for checksum");
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) XXH64_update(st, buf.data(), n);
  bool bad = std::ferror(f);
  std::fclose(f);
  uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  if (bad) return io_error(path + ": read failed while checksumming");
  return h;
}

Result<std::vector<std::string>> expand_inputs(const std::vector<std::string>& inputs,
                                               const RemoteCacheOptions* remote) {
  std::vector<std::string> files;
  auto is_input_name = [](const std::string& name) { return is_jsonl_name(name) || is_parquet_name(name); };
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (in.rfind("s3://", 0) == 0 || in.rfind("http://", 0) == 0 || in.rfind("https://", 0) == 0) {
      const bool listing = in.back() == '/' || in.find_first_of("*?[") != std::string::npos;
      if (!listing) {
        files.push_back(in);
        continue;
      }
      if (in.rfind("s3://", 0) != 0 || remote == nullptr)
        return invalid_argument(in + ": " + (remote ? "HTTP has no listing" : "no listing here") +
                                "; pass each object's URL");
      LOOM_ASSIGN_OR_RETURN(std::vector<std::string> found, list_s3_objects(in, *remote));
      if (in.back() == '/') {  // a folder: its inputs by name, as a local directory
        std::vector<std::string> named;
        for (const std::string& u : found)
          if (is_jsonl_name(u) || is_parquet_name(u)) named.push_back(u);
        if (named.empty())
          return invalid_argument(in + ": has no *.jsonl, *.jsonl.gz, *.jsonl.zst or *.parquet objects");
        found = std::move(named);
      }
      files.insert(files.end(), found.begin(), found.end());
    } else if (in.find_first_of("*?[") != std::string::npos && !fs::exists(in, ec)) {
      glob_t g{};
      int rc = ::glob(in.c_str(), GLOB_ERR, nullptr, &g);
      std::vector<std::string> found;
      if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i)
          if (fs::is_regular_file(g.gl_pathv[i], ec)) found.push_back(g.gl_pathv[i]);
      ::globfree(&g);
      if (rc == GLOB_ABORTED) return io_error(in + ": cannot list the pattern's directories");
      if (found.empty()) return not_found(in + ": the pattern matches no file");
      std::sort(found.begin(), found.end());  // glob sorts too, but by the locale's collation
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(in, ec))
        if (e.is_regular_file() && is_input_name(e.path().filename().string())) found.push_back(e.path().string());
      if (ec) return io_error(in + ": cannot list directory (" + ec.message() + ")");
      if (found.empty())
        return invalid_argument(in + ": directory has no *.jsonl, *.jsonl.gz, *.jsonl.zst or *.parquet files");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(in, ec)) {
      files.push_back(in);
    } else {
      return not_found(in + ": no such file or directory");
    }
  }
  if (files.empty()) return invalid_argument("preprocess: no inputs; pass --input FILE|DIR");
  return files;
}

}  // namespace loom::data
