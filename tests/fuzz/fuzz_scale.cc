// The --scale string (core/model_spec.h parse_model_scale) and scale_model on
// shipped models of every family: a scaled model must pass validation and
// round-trip through its config.json text.
#include <vector>

#include "core/model_spec.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;

namespace {
const std::vector<ModelSpec>& models() {
  return fuzz::shipped_models<ModelSpec>({"gpt2-124m", "llama-3-8b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"}, [](const char* n) { return load_model_spec(n); },
                                         "fuzz_scale");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto scale = parse_model_scale(text);
  if (!scale.is_ok()) {
    FUZZ_CHECK(!scale.status().message().empty(), "an error without a message");
    return 0;
  }
  for (const ModelSpec& m : models()) {
    auto s = scale_model(m, *scale);
    if (!s.is_ok()) {
      FUZZ_CHECK(!s.status().message().empty(), "an error without a message");
      continue;
    }
    FUZZ_CHECK(validate_model_spec(*s).is_ok(), "scale_model returned an invalid model");
    if (scale->num_layers > 0) FUZZ_CHECK(s->num_layers == scale->num_layers, "layers not applied");
    if (scale->hidden > 0) FUZZ_CHECK(s->hidden == scale->hidden, "hidden not applied");
    if (scale->vocab > 0) FUZZ_CHECK(s->vocab == scale->vocab, "vocab not applied");
    auto back = parse_model_spec(model_spec_to_json(*s), "fuzz (scaled)");
    FUZZ_CHECK(back.is_ok(), back.status().to_string());
    FUZZ_CHECK(back->total_params() == s->total_params(),
               m.name + ": parameter count changed in a round trip: " + std::to_string(s->total_params()) + " -> " +
                   std::to_string(back->total_params()) + "\n" + model_spec_to_json(*s));
  }
  return 0;
}
