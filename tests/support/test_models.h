// Models built in code for tests: a GPT block exactly as Korthikanti et al.
// and Narayanan et al. assume it (4h MLP, GELU, LayerNorm, learned positions,
// MHA, biases, dropout), so the published formulas apply term by term.
#pragma once

#include <string>

#include "core/hw_profile.h"
#include "core/model_spec.h"
#include "core/status.h"

namespace loom::testing {

inline ModelSpec gpt_block_model(int64_t hidden, int heads, int layers, int64_t vocab = 51200,
                                 int64_t max_position = 2048) {
  ModelSpec m;
  m.name = "gpt-test-h" + std::to_string(hidden);
  m.model_type = "gpt2";
  m.hidden = hidden;
  m.num_layers = layers;
  m.num_heads = heads;
  m.num_kv_heads = heads;
  m.head_dim = hidden / heads;
  m.ffn_hidden = 4 * hidden;
  m.vocab = vocab;
  m.max_position = max_position;
  m.norm = NormKind::kLayerNorm;
  m.mlp = MlpKind::kGelu;
  m.position = PositionKind::kLearned;
  m.tied_embeddings = true;
  m.qkv_bias = true;
  m.linear_bias = true;
  m.attn_out_bias = true;
  m.mlp_bias = true;
  return m;
}

// Loads a shipped file or fails the calling test with the Status message.
inline ModelSpec load_model_or_die(const std::string& name) {
  auto r = load_model_spec(name);
  LOOM_CHECK(r.is_ok(), r.status().to_string());
  return r.value();
}

inline HwProfile load_hw_or_die(const std::string& name) {
  auto r = load_hw_profile(name);
  LOOM_CHECK(r.is_ok(), r.status().to_string());
  return r.value();
}

}  // namespace loom::testing
