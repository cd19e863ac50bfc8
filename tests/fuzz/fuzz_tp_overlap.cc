// Transformer Engine userbuffers configs (sim/tp_overlap.h
// parse_tp_overlap_config): frameworks/tp_overlap/*.json, --tp-comm-overlap-cfg
// files and a plan's copy. Accepted configs must round-trip through
// tp_overlap_config_json, and the GEMM pieces they ask for must price finite.
#include <cmath>
#include <cstdlib>

#include "sim/compute_model.h"
#include "sim/tp_overlap.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (bool require_source : {true, false}) {
    auto c = parse_tp_overlap_config(text, "fuzz", require_source);
    if (!c.is_ok()) {
      FUZZ_CHECK(!c.status().message().empty(), "an error without a message");
      continue;
    }
    const std::string canon = tp_overlap_config_json(*c);
    auto back = parse_tp_overlap_config(canon, "fuzz (canonical)", false);
    FUZZ_CHECK(back.is_ok(), back.status().to_string());
    FUZZ_CHECK(*back == *c, "the config changed in a round trip");
    static const HwProfile hw = [] {
      auto h = load_hw_profile("dgx-h100");
      if (!h.is_ok()) std::abort();
      return *h;
    }();
    for (const UbGemm* g : {&c->qkv_fprop, &c->proj_fprop, &c->fc2_fprop, &c->fc1_wgrad}) {
      FUZZ_CHECK(g->num_sm >= 1 && g->num_splits >= 1, "a config with no SMs or no splits");
      const double fraction = g->set_sm_margin && g->num_sm < 132 ? (132.0 - g->num_sm) / 132 : 1.0;
      const double t = ub_gemm_time_s(hw, Precision::kBf16, 4096, 1024, 4096, g->num_splits, 1, fraction);
      FUZZ_CHECK(t > 0 && std::isfinite(t), "a GEMM piece priced " + std::to_string(t));
    }
  }
  return 0;
}
