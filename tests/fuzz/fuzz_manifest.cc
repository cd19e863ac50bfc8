// Preprocess manifests (exec/data/manifest.h parse_manifest), the
// `*.manifest.json` that `--data` accepts. Accepted manifests' shards are
// opened next to it, as a run does: the scratch directory holds the shards a
// real `loom preprocess` wrote (corpus.bin/.idx, corpus3_0000{0,1,2}.bin/.idx).
#include "exec/data/indexed_dataset.h"
#include "exec/data/manifest.h"
#include "exec/data/preprocess.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;
using namespace loom::data;

namespace {

// Writes the shards; returns the manifests' texts.
std::vector<std::string> make_shards() {
  const std::string dir = loom::fuzz::scratch_dir();
  loom::fuzz::write_file(dir + "/input.jsonl",
                         "{\"text\": \"First Citizen: before we proceed any further, hear me speak.\"}\n"
                         "{\"text\": \"All: speak, speak.\"}\n");
  std::vector<std::string> manifests;
  for (int shards : {1, 3}) {
    PreprocessOptions o;
    o.inputs = {dir + "/input.jsonl"};
    o.output_prefix = dir + (shards == 1 ? "/corpus" : "/corpus3");
    o.shards = shards;
    auto s = preprocess(o);
    if (!s.is_ok()) {
      std::fprintf(stderr, "fuzz_manifest: %s\n", s.status().to_string().c_str());
      std::abort();
    }
    manifests.push_back(loom::fuzz::read_file(s->manifest_path));
  }
  return manifests;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto manifests = make_shards();
  if (loom::fuzz::seed_dir()) {
    for (size_t i = 0; i < manifests.size(); ++i)
      loom::fuzz::write_seed("manifest_" + std::to_string(i) + ".json", manifests[i]);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto m = parse_manifest(text, "fuzz.manifest.json");
  if (!m.is_ok()) {
    FUZZ_CHECK(!m.status().message().empty(), "an error without a message");
    return 0;
  }
  FUZZ_CHECK(!m->shards.empty() && m->tokens > 0, "a manifest with nothing to read was accepted");
  int64_t sum = 0;
  for (const ManifestShard& s : m->shards) {
    FUZZ_CHECK(s.tokens >= 0 && s.prefix + ".bin" == s.bin, "shard fields inconsistent");
    const std::string framed = "/" + s.bin + "/";
    FUZZ_CHECK(s.bin.front() != '/' && framed.find("/../") == std::string::npos,
               "a shard outside the manifest's directory was accepted: " + s.bin);
    sum += s.tokens;
  }
  FUZZ_CHECK(sum == m->tokens, "token total differs from the shards' sum");
  for (size_t i = 0; i < m->shards.size() && i < 8; ++i) {
    auto ds = IndexedDataset::open(loom::fuzz::scratch_dir() + "/" + m->shards[i].prefix);
    if (ds.is_ok()) (void)(*ds)->total_tokens();
  }
  return 0;
}
