#include "exec/data/manifest.h"

#include "core/json_util.h"

namespace loom::data {

namespace {

// A shard's file name must stay inside the manifest's directory.
Status check_shard_name(const std::string& bin, const std::string& where) {
  if (bin.size() <= 4 || bin.compare(bin.size() - 4, 4, ".bin") != 0)
    return invalid_argument(where + ".bin '" + bin + "' must name a shard's .bin file (PREFIX.bin)");
  if (bin.front() == '/')
    return invalid_argument(where + ".bin '" + bin + "' is an absolute path; shards are named relative to the manifest");
  if (bin.find('\0') != std::string::npos)
    return invalid_argument(where + ".bin contains a NUL byte");
  size_t pos = 0;
  while (pos <= bin.size()) {
    size_t slash = bin.find('/', pos);
    if (slash == std::string::npos) slash = bin.size();
    if (bin.compare(pos, slash - pos, "..") == 0 && slash - pos == 2)
      return invalid_argument(where + ".bin '" + bin + "' leaves the manifest's directory ('..'); keep shards next to "
                              "their manifest");
    pos = slash + 1;
  }
  return Status::ok();
}

}  // namespace

Result<Manifest> parse_manifest(const std::string& text, const std::string& what) {
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(text, what));
  if (!j.is_object()) return invalid_argument(what + ": not a JSON object; give a manifest written by `loom preprocess`");
  if (!j.contains("shards") || !j["shards"].is_array() || j["shards"].empty())
    return invalid_argument(what + ": no shards listed; re-run `loom preprocess`");
  Manifest m;
  if (j.contains("tokenizer") && !j["tokenizer"].is_null()) {
    const Json& t = j["tokenizer"];
    if (!t.is_object()) return invalid_argument(what + ": tokenizer must be an object {\"vocab_size\": N, ...}");
    LOOM_ASSIGN_OR_RETURN(m.vocab_size, json_int_or(t, "vocab_size", 0, what + ": tokenizer"));
    if (t.contains("vocab_size") && !t["vocab_size"].is_null() && m.vocab_size <= 0)
      return invalid_argument(what + ": tokenizer.vocab_size must be a positive integer, got " +
                              std::to_string(m.vocab_size));
  }
  const Json& shards = j["shards"];
  for (size_t i = 0; i < shards.size(); ++i) {
    const Json& s = shards[i];
    const std::string w = what + ": shards[" + std::to_string(i) + "]";
    if (!s.is_object()) return invalid_argument(w + " must be an object {\"bin\", \"tokens\", ...}");
    ManifestShard sh;
    LOOM_ASSIGN_OR_RETURN(sh.bin, json_string(s, "bin", w));
    LOOM_RETURN_IF_ERROR(check_shard_name(sh.bin, w));
    sh.prefix = sh.bin.substr(0, sh.bin.size() - 4);
    LOOM_ASSIGN_OR_RETURN(sh.tokens, json_int(s, "tokens", w));
    if (sh.tokens < 0) return invalid_argument(w + ".tokens must be >= 0, got " + std::to_string(sh.tokens));
    if (m.tokens > INT64_MAX - sh.tokens) return invalid_argument(w + ".tokens: the shards' total overflows");
    m.tokens += sh.tokens;
    LOOM_ASSIGN_OR_RETURN(sh.bin_xxh64, json_string_or(s, "bin_xxh64", "", w));
    LOOM_ASSIGN_OR_RETURN(sh.idx_xxh64, json_string_or(s, "idx_xxh64", "", w));
    m.shards.push_back(std::move(sh));
  }
  if (m.tokens == 0) return invalid_argument(what + ": every shard is empty (0 tokens); there is nothing to train on");
  return m;
}

}  // namespace loom::data
