// Scaling a model down for rehearsal: the same family (norms, MLP kind,
// positions, GQA ratio, MLA, MoE routing) at sizes that fit small hardware.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/model_spec.h"

namespace loom {
namespace {

const char* const kScaleKeys = "layers, hidden, heads, kv_heads, ffn, vocab, experts, seq";

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\n");
  return s.substr(b, e - b + 1);
}

// round(v * num / den), at least `floor_value`.
int64_t scaled(int64_t v, int64_t num, int64_t den, int64_t floor_value) {
  double x = std::round(static_cast<double>(v) * static_cast<double>(num) / static_cast<double>(den));
  return std::max(floor_value, static_cast<int64_t>(x));
}

// The largest divisor of `heads` that is <= target (at least 1).
int largest_divisor_at_most(int heads, int target) {
  for (int d = std::min(heads, std::max(1, target)); d > 1; --d)
    if (heads % d == 0) return d;
  return 1;
}

}  // namespace

Result<ModelScale> parse_model_scale(const std::string& text) {
  ModelScale s;
  std::stringstream in(text);
  std::string item;
  std::vector<std::string> seen;
  while (std::getline(in, item, ',')) {
    item = trim(item);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      return invalid_argument("scale: '" + item + "' is not key=value; write e.g. layers=4,hidden=256");
    std::string key = trim(item.substr(0, eq));
    std::string value = trim(item.substr(eq + 1));
    if (std::find(seen.begin(), seen.end(), key) != seen.end())
      return invalid_argument("scale: " + key + " is given twice; give it once");
    seen.push_back(key);
    int64_t v = 0;
    bool ok = !value.empty() && value.find_first_not_of("0123456789") == std::string::npos && value.size() <= 12;
    if (ok) v = std::stoll(value);
    if (!ok || v <= 0)
      return invalid_argument("scale: " + key + "=" + value + " is not a positive integer; write e.g. " + key + "=4");
    // Ranges before any arithmetic: the same bounds validate_model_spec applies.
    int64_t limit = 0;
    if (key == "layers") limit = kMaxLayers;
    else if (key == "hidden") limit = kMaxHidden;
    else if (key == "heads" || key == "kv_heads") limit = kMaxHeads;
    else if (key == "ffn") limit = kMaxFfnHidden;
    else if (key == "vocab") limit = kMaxVocab;
    else if (key == "experts") limit = kMaxExperts;
    else if (key == "seq") limit = kMaxPositions;
    if (limit > 0 && v > limit)
      return invalid_argument("scale: " + key + "=" + value + " is out of range: at most " + std::to_string(limit) +
                              " is accepted");
    if (key == "layers") {
      s.num_layers = static_cast<int>(v);
    } else if (key == "hidden") {
      s.hidden = v;
    } else if (key == "heads") {
      s.num_heads = static_cast<int>(v);
    } else if (key == "kv_heads") {
      s.num_kv_heads = static_cast<int>(v);
    } else if (key == "ffn") {
      s.ffn_hidden = v;
    } else if (key == "vocab") {
      s.vocab = v;
    } else if (key == "experts") {
      s.num_experts = static_cast<int>(v);
    } else if (key == "seq") {
      s.max_position = v;
    } else {
      return invalid_argument("scale: unknown key '" + key + "'; use " + kScaleKeys);
    }
  }
  return s;
}

// Rules (zero = keep):
// - hidden or heads given: head_dim = hidden / heads (heads must divide hidden);
//   hidden without heads keeps the head size where it divides the new hidden;
//   kv heads keep the GQA ratio heads/kv_heads, else the nearest divisor below.
// - MLA: qk_nope = v_head_dim = hidden/heads, qk_rope = half of it (even, >= 2),
//   the LoRA ranks scale with hidden.
// - ffn given: dense MLP = ffn; else hidden given: the MLP keeps its ratio to
//   hidden (GPT-2: 4x, Llama-3: 3.5x); expert and shared-expert sizes keep
//   their ratio to the dense size (Mixtral: expert = ffn).
// - layers given: leading dense layers and mlp_only_layers are kept where they
//   fit, leaving at least one MoE layer in an MoE model.
// - experts given: top-k is capped at the new expert count; group-limited
//   routing is dropped when its groups no longer fit.
Result<ModelSpec> scale_model(const ModelSpec& model, const ModelScale& scale) {
  ModelSpec m = model;
  const std::string w = "scale " + model.name + ": ";
  if (scale.num_layers > 0) {
    m.num_layers = scale.num_layers;
    if (m.is_moe()) {
      m.moe.first_dense_layers = std::min(m.moe.first_dense_layers, m.num_layers - 1);
      auto& ids = m.moe.dense_layer_ids;
      ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int id) { return id >= m.num_layers; }), ids.end());
      if (m.num_moe_layers() == 0) {  // keep the family: at least one routed layer
        ids.clear();
        m.moe.moe_layer_freq = 1;
      }
    }
  }
  if (scale.hidden > 0 || scale.num_heads > 0) {
    const int64_t hidden = scale.hidden > 0 ? scale.hidden : model.hidden;
    int heads = scale.num_heads > 0 ? scale.num_heads : model.num_heads;
    // hidden without heads keeps the head size (hidden per head) where it
    // divides the new hidden: GPT-2 (64 per head) at hidden=256 has 4 heads.
    const int64_t per_head = model.hidden / std::max(1, model.num_heads);
    if (scale.num_heads == 0 && per_head > 0 && hidden % per_head == 0)
      heads = static_cast<int>(std::min<int64_t>(kMaxHeads, hidden / per_head));
    if (hidden % heads != 0) {
      return invalid_argument(w + "heads=" + std::to_string(heads) + " does not divide hidden=" +
                              std::to_string(hidden) + "; give heads that divide hidden (head_dim = hidden/heads)");
    }
    m.hidden = hidden;
    m.num_heads = heads;
    m.head_dim = hidden / heads;
    if (m.mla.enabled) {
      MlaSpec& x = m.mla;
      x.qk_nope_head_dim = m.head_dim;
      x.v_head_dim = m.head_dim;
      x.qk_rope_head_dim = std::max<int64_t>(2, (m.head_dim / 2) & ~int64_t{1});
      x.kv_lora_rank = scaled(model.mla.kv_lora_rank, hidden, model.hidden, 1);
      if (x.q_lora_rank > 0) x.q_lora_rank = scaled(model.mla.q_lora_rank, hidden, model.hidden, 1);
      m.head_dim = x.qk_nope_head_dim + x.qk_rope_head_dim;
      m.num_kv_heads = heads;
    } else {
      const int ratio = std::max(1, model.num_heads / std::max(1, model.num_kv_heads));
      m.num_kv_heads = heads % ratio == 0 ? heads / ratio : largest_divisor_at_most(heads, heads / ratio);
    }
  }
  if (scale.num_kv_heads > 0) {
    if (m.mla.enabled)
      return invalid_argument(w + "kv_heads does not apply to MLA (DeepSeek) models, where every head has its own "
                                  "K and V; drop kv_heads=");
    // GPT-2's config.json has no field for KV heads (one per head): a
    // grouped-query GPT-2 would not survive being written into a plan, and the
    // executor would train another model than the one planned. Found by fuzzing.
    if (m.model_type == "gpt2" && scale.num_kv_heads != m.num_heads)
      return invalid_argument(w + "kv_heads=" + std::to_string(scale.num_kv_heads) + " does not apply to " +
                              model.model_type + " models, whose config has one KV head per attention head; drop "
                              "kv_heads= (or scale a grouped-query family: llama, mistral, qwen)");
    m.num_kv_heads = scale.num_kv_heads;
  }
  // The MLP keeps its ratio to hidden unless ffn= is given (HF semantics:
  // GPT-2's unset n_inner is 4 x n_embd, Llama's intermediate_size is its own
  // field that a user scaling hidden_size scales with it); expert and
  // shared-expert sizes keep their ratio to the dense size.
  const int64_t ffn = scale.ffn_hidden > 0 ? scale.ffn_hidden
                      : scale.hidden > 0   ? scaled(model.ffn_hidden, scale.hidden, model.hidden, 1)
                                           : 0;
  if (ffn > 0) {
    m.ffn_hidden = ffn;
    if (m.is_moe()) {
      m.moe.expert_ffn_hidden = scaled(model.moe.expert_ffn_hidden, ffn, model.ffn_hidden, 1);
      if (m.moe.num_shared_experts > 0)
        m.moe.shared_expert_ffn_hidden = scaled(model.moe.shared_expert_ffn_hidden, ffn, model.ffn_hidden, 1);
    }
  }
  if (scale.vocab > 0) m.vocab = scale.vocab;
  if (scale.max_position > 0) m.max_position = scale.max_position;
  if (scale.num_experts > 0) {
    if (!m.is_moe())
      return invalid_argument(w + "experts=" + std::to_string(scale.num_experts) +
                              " applies only to MoE models; this one is dense, drop experts=");
    m.moe.num_experts = scale.num_experts;
    m.moe.experts_per_token = std::min(m.moe.experts_per_token, scale.num_experts);
    // Group-limited routing survives only where the groups still divide the
    // experts and can hold a token's top-k.
    auto& e = m.moe;
    if (e.num_groups > 0 && (e.num_experts % e.num_groups != 0 ||
                             e.topk_groups * (e.num_experts / e.num_groups) < e.experts_per_token))
      e.num_groups = e.topk_groups = 0;
  }
  m.name = model.name + "-scaled";
  Status st = validate_model_spec(m);
  if (!st.is_ok()) return st.with_context("scale " + model.name);
  return m;
}

}  // namespace loom
