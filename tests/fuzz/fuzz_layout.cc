// The --layout string (core/layout.h parse_layout) and rank orders. Accepted
// layouts must print (Layout::to_string) to a string that parses back to the
// same layout; valid ones (validate_layout against shipped models) build a
// rank grid whose coordinates invert.
#include <algorithm>
#include <vector>

#include "core/layout.h"
#include "core/model_spec.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;

namespace {
const std::vector<ModelSpec>& models() {
  return fuzz::shipped_models<ModelSpec>({"gpt2-124m", "llama-3-8b", "mixtral-8x7b", "deepseek-v3"}, [](const char* n) { return load_model_spec(n); },
                                         "fuzz_layout");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto l = parse_layout(text);
  if (!l.is_ok()) {
    FUZZ_CHECK(!l.status().message().empty(), "an error without a message");
    return 0;
  }
  const std::string printed = l->to_string();
  auto l2 = parse_layout(printed);
  FUZZ_CHECK(l2.is_ok(), l2.status().to_string() + " (from '" + printed + "')");
  FUZZ_CHECK(*l2 == *l, "layout changed in a round trip: '" + printed + "' -> '" + l2->to_string() + "'");
  for (const ModelSpec& m : models()) {
    TrainSpec t;
    t.seq_len = 1024;
    t.global_batch = 1024;
    Status st = validate_layout(*l, m, t, 0);
    if (!st.is_ok()) {
      FUZZ_CHECK(!st.message().empty(), "an error without a message");
      continue;
    }
    FUZZ_CHECK(validate_layout(*l, m, t, l->world()).is_ok(), "valid for world 0 but not for its own world");
    RankGrid grid(*l);
    FUZZ_CHECK(grid.world() == l->world(), "grid world differs");
    for (int r : {0, grid.world() / 3, grid.world() - 1}) {
      RankCoords c = grid.coords(r);
      FUZZ_CHECK(grid.rank_of(c) == r, "rank_of(coords(r)) != r for r=" + std::to_string(r));
      for (Dim d : {Dim::kDp, Dim::kTp, Dim::kPp, Dim::kEp}) {
        if (l->size(d) > 4096) continue;
        auto g = grid.group(d, r);
        FUZZ_CHECK(std::find(g.begin(), g.end(), r) != g.end(), "a rank is missing from its own group");
      }
    }
  }
  return 0;
}
