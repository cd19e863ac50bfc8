// HF config.json (core/model_spec.h parse_model_spec), text_config nesting
// included: models/*.json and any user config. Accepted configs must
// round-trip through model_spec_to_json; parameter counts, FLOPs, RoPE
// frequencies, the stage split, layout validation and scale-down run on them.
#include <cmath>

#include "core/layout.h"
#include "core/model_spec.h"
#include "core/stage_split.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto m = parse_model_spec(text, "fuzz");
  if (!m.is_ok()) {
    FUZZ_CHECK(!m.status().message().empty(), "an error without a message");
    return 0;
  }
  const std::string canon = model_spec_to_json(*m);
  auto m2 = parse_model_spec(canon, "fuzz (canonical)");
  FUZZ_CHECK(m2.is_ok(), m2.status().to_string() + "\n" + canon);
  FUZZ_CHECK(model_spec_to_json(*m2) == canon, "the canonical form changed in a round trip:\n" + canon);
  FUZZ_CHECK(m2->total_params() == m->total_params(), "parameter count changed in a round trip");

  const ModelSpec& s = *m;
  FUZZ_CHECK(s.total_params() > 0 && s.active_params() > 0 && s.active_params() <= s.total_params(),
             "parameter counts: total " + std::to_string(s.total_params()) + " active " +
                 std::to_string(s.active_params()));
  FUZZ_CHECK(s.num_moe_layers() >= 0 && s.num_moe_layers() <= s.num_layers, "MoE layer count out of range");
  int64_t sum = s.embedding_params() + s.position_params() + s.lm_head_params() + s.final_norm_params();
  for (int l = 0; l < s.num_layers && l < 256; ++l) {
    FUZZ_CHECK(s.layer_params(l) > 0, "a layer without parameters");
    double f = s.layer_matmul_flops_fwd(l);
    FUZZ_CHECK(f > 0 && std::isfinite(f), "layer FLOPs " + std::to_string(f));
  }
  if (s.num_layers <= 256) {
    for (int l = 0; l < s.num_layers; ++l) sum += s.layer_params(l);
    FUZZ_CHECK(sum == s.total_params(), "total_params is not the sum of its parts");
  }
  double palm = s.model_flops_per_token_palm(std::max<int64_t>(1, std::min<int64_t>(s.max_position, 4096)));
  FUZZ_CHECK(palm > 0 && std::isfinite(palm), "PaLM FLOPs " + std::to_string(palm));
  if (s.position == PositionKind::kRope) {
    int64_t rope_dim = s.mla.enabled ? s.mla.qk_rope_head_dim : s.head_dim;
    if (rope_dim >= 2 && rope_dim <= 4096) {
      for (double f : rope_inverse_frequencies(s, rope_dim))
        FUZZ_CHECK(std::isfinite(f) && f > 0, "RoPE inverse frequency " + std::to_string(f));
    }
  }
  // Layouts a user would try, against this model.
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 128;
  for (const char* text : {"dp=1", "tp=2", "pp=2", "dp=2,ep=2", "pp=2,schedule=interleaved,v=2", "tp=8,sp=1"}) {
    auto l = parse_layout(text);
    FUZZ_CHECK(l.is_ok(), l.status().to_string());
    Status st = validate_layout(*l, s, t, 0);
    if (!st.is_ok()) continue;
    StageSplit split = split_layers(s, l->pp, l->virtual_stages);
    int total = 0;
    for (int n : split.chunk_layers) total += n;
    FUZZ_CHECK(total == s.num_layers, "stage split loses layers");
  }
  // The scale-down the CLI offers (--scale).
  for (const char* sc : {"layers=2,hidden=64,heads=4,ffn=128,vocab=256", "layers=1", "hidden=128,heads=2"}) {
    auto scale = parse_model_scale(sc);
    FUZZ_CHECK(scale.is_ok(), scale.status().to_string());
    auto small = scale_model(s, *scale);
    if (!small.is_ok()) continue;
    auto back = parse_model_spec(model_spec_to_json(*small), "fuzz (scaled)");
    FUZZ_CHECK(back.is_ok(), back.status().to_string());
  }
  return 0;
}
