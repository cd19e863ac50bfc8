// ModelSpec: reading a Hugging Face config.json, validating it, and the
// parameter and FLOP counts derived from it. Key names follow
// transformers/models/*/configuration_*.py; the parameter layout follows the
// matching modeling_*.py (which weights exist, which carry a bias).
#include "core/model_spec.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/json_util.h"

namespace loom {
namespace {

const char* const kSupportedTypes =
    "gpt2, llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v2, deepseek_v3";

// "{1,2,4,8}": the divisors of n, for messages that say what would work.
// Trial division up to sqrt(n), so a fuzzed n_embd of 10^18 cannot stall a
// message: past 10^12 the message names n instead of listing, and a long
// list keeps its smallest and largest entries.
std::string divisors_of(int64_t n) {
  if (n <= 0) return "{}";
  if (n > 1'000'000'000'000) return "the divisors of " + std::to_string(n);
  std::vector<int64_t> low, high;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    low.push_back(d);
    if (d != n / d) high.push_back(n / d);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  constexpr size_t kShown = 24;
  std::string out = "{";
  for (size_t i = 0; i < low.size(); ++i) {
    if (low.size() > kShown && i == kShown / 2) {
      out += ",...";
      i = low.size() - kShown / 2;
    }
    if (out.size() > 1) out += ",";
    out += std::to_string(low[i]);
  }
  return out + "}";
}

Result<int> narrow_int(int64_t v, const std::string& what) {
  if (v > INT_MAX) return invalid_argument(what + "=" + std::to_string(v) + " is too large");
  return static_cast<int>(v);
}

// An optional positive integer: `fallback` when absent or null; 0 and
// negative values are rejected with the key named.
Result<int64_t> optional_positive(const Json& c, const char* key, int64_t fallback, const std::string& where) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  return json_positive_int(c, key, where);
}

// An optional non-negative integer (counts that may be zero).
Result<int64_t> optional_count(const Json& c, const char* key, int64_t fallback, const std::string& where) {
  LOOM_ASSIGN_OR_RETURN(int64_t v, json_int_or(c, key, fallback, where));
  if (v < 0) return invalid_argument(where + "." + key + " must be >= 0, got " + std::to_string(v));
  return v;
}

// A key whose absence transformers would fill with a default other than the
// one Loom can derive (a model with its own numbers): refused when absent,
// naming transformers' default, rather than guessed.
Status require_key(const Json& c, const char* key, const std::string& where, const std::string& transformers_default) {
  if (c.contains(key)) return Status::ok();
  return invalid_argument(where + "." + key + " is missing; transformers would take " + transformers_default +
                          " for it: state it (the model's own config.json has it)");
}

// The keys shared by all RoPE/RMSNorm/SwiGLU families (Llama naming).
Status parse_llama_like(const Json& c, const std::string& where, ModelSpec& m) {
  LOOM_ASSIGN_OR_RETURN(m.hidden, json_positive_int(c, "hidden_size", where));
  LOOM_ASSIGN_OR_RETURN(int64_t layers, json_positive_int(c, "num_hidden_layers", where));
  LOOM_ASSIGN_OR_RETURN(int64_t heads, json_positive_int(c, "num_attention_heads", where));
  LOOM_ASSIGN_OR_RETURN(int64_t kv_heads, optional_positive(c, "num_key_value_heads", heads, where));
  LOOM_ASSIGN_OR_RETURN(m.ffn_hidden, json_positive_int(c, "intermediate_size", where));
  LOOM_ASSIGN_OR_RETURN(m.vocab, json_positive_int(c, "vocab_size", where));
  LOOM_ASSIGN_OR_RETURN(m.max_position, json_positive_int(c, "max_position_embeddings", where));
  LOOM_ASSIGN_OR_RETURN(m.num_layers, narrow_int(layers, where + ".num_hidden_layers"));
  LOOM_ASSIGN_OR_RETURN(m.num_heads, narrow_int(heads, where + ".num_attention_heads"));
  LOOM_ASSIGN_OR_RETURN(m.num_kv_heads, narrow_int(kv_heads, where + ".num_key_value_heads"));
  LOOM_ASSIGN_OR_RETURN(m.head_dim, optional_positive(c, "head_dim", 0, where));
  if (m.head_dim == 0) {
    if (m.hidden % heads != 0)
      return invalid_argument(where + ": num_attention_heads=" + std::to_string(heads) +
                              " does not divide hidden_size=" + std::to_string(m.hidden) +
                              "; set head_dim, or use num_attention_heads in " + divisors_of(m.hidden));
    m.head_dim = m.hidden / heads;
  }
  LOOM_ASSIGN_OR_RETURN(m.tied_embeddings, json_bool_or(c, "tie_word_embeddings", false, where));
  m.norm = NormKind::kRmsNorm;
  m.mlp = MlpKind::kSwiGlu;
  m.position = PositionKind::kRope;
  return Status::ok();
}

Status parse_gpt2(const Json& c, const std::string& where, ModelSpec& m) {
  LOOM_ASSIGN_OR_RETURN(m.hidden, json_positive_int(c, "n_embd", where));
  LOOM_ASSIGN_OR_RETURN(int64_t layers, json_positive_int(c, "n_layer", where));
  LOOM_ASSIGN_OR_RETURN(int64_t heads, json_positive_int(c, "n_head", where));
  LOOM_ASSIGN_OR_RETURN(m.max_position, json_positive_int(c, "n_positions", where));
  LOOM_ASSIGN_OR_RETURN(m.vocab, json_positive_int(c, "vocab_size", where));
  LOOM_ASSIGN_OR_RETURN(m.ffn_hidden, optional_positive(c, "n_inner", 4 * m.hidden, where));
  LOOM_ASSIGN_OR_RETURN(m.num_layers, narrow_int(layers, where + ".n_layer"));
  LOOM_ASSIGN_OR_RETURN(m.num_heads, narrow_int(heads, where + ".n_head"));
  if (m.hidden % heads != 0)
    return invalid_argument(where + ": n_head=" + std::to_string(heads) + " does not divide n_embd=" +
                            std::to_string(m.hidden) + "; use n_head in " + divisors_of(m.hidden));
  m.num_kv_heads = m.num_heads;
  m.head_dim = m.hidden / heads;
  LOOM_ASSIGN_OR_RETURN(m.tied_embeddings, json_bool_or(c, "tie_word_embeddings", true, where));
  m.norm = NormKind::kLayerNorm;
  m.mlp = MlpKind::kGelu;
  m.position = PositionKind::kLearned;
  m.qkv_bias = true;  // GPT-2's Conv1D layers all carry a bias
  m.linear_bias = true;
  return Status::ok();
}

// Qwen2-MoE / Qwen3-MoE routing keys.
Status parse_qwen_moe(const Json& c, const std::string& where, bool shared_expert, ModelSpec& m) {
  LOOM_ASSIGN_OR_RETURN(int64_t experts, json_positive_int(c, "num_experts", where));
  LOOM_ASSIGN_OR_RETURN(int64_t top_k, json_positive_int(c, "num_experts_per_tok", where));
  LOOM_ASSIGN_OR_RETURN(m.moe.expert_ffn_hidden, json_positive_int(c, "moe_intermediate_size", where));
  LOOM_ASSIGN_OR_RETURN(int64_t step, optional_positive(c, "decoder_sparse_step", 1, where));
  LOOM_ASSIGN_OR_RETURN(m.moe.num_experts, narrow_int(experts, where + ".num_experts"));
  LOOM_ASSIGN_OR_RETURN(m.moe.experts_per_token, narrow_int(top_k, where + ".num_experts_per_tok"));
  LOOM_ASSIGN_OR_RETURN(m.moe.moe_layer_freq, narrow_int(step, where + ".decoder_sparse_step"));
  m.moe.moe_layer_phase = 1;  // transformers: (layer_idx + 1) % decoder_sparse_step == 0
  LOOM_ASSIGN_OR_RETURN(m.moe.norm_topk_prob, json_bool_or(c, "norm_topk_prob", false, where));
  if (c.contains("mlp_only_layers") && !c["mlp_only_layers"].is_null()) {
    const Json& ids = c["mlp_only_layers"];
    if (!ids.is_array()) return invalid_argument(where + ".mlp_only_layers must be a list of layer indices");
    for (const Json& id : ids) {
      if (!id.is_number_integer())
        return invalid_argument(where + ".mlp_only_layers must hold integers, got " + id.dump());
      // Range-checked before narrowing: 4294967296 must not become layer 0.
      if (id.is_number_unsigned() ? id.get<uint64_t>() > uint64_t(kMaxLayers)
                                  : (id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxLayers))
        return invalid_argument(where + ".mlp_only_layers holds " + id.dump() + ", not a layer index");
      m.moe.dense_layer_ids.push_back(int(id.get<int64_t>()));
    }
  }
  if (shared_expert) {
    LOOM_ASSIGN_OR_RETURN(int64_t shared, optional_count(c, "shared_expert_intermediate_size", 0, where));
    if (shared > 0) {
      m.moe.num_shared_experts = 1;
      m.moe.shared_expert_ffn_hidden = shared;
      m.moe.shared_expert_gate = true;
    }
  }
  return Status::ok();
}

// DeepSeek-V2/V3: multi-head latent attention and the DeepSeekMoE layout.
Status parse_deepseek(const Json& c, const std::string& where, bool v3, ModelSpec& m) {
  LOOM_ASSIGN_OR_RETURN(m.hidden, json_positive_int(c, "hidden_size", where));
  LOOM_ASSIGN_OR_RETURN(int64_t layers, json_positive_int(c, "num_hidden_layers", where));
  LOOM_ASSIGN_OR_RETURN(int64_t heads, json_positive_int(c, "num_attention_heads", where));
  LOOM_ASSIGN_OR_RETURN(m.ffn_hidden, json_positive_int(c, "intermediate_size", where));
  LOOM_ASSIGN_OR_RETURN(m.vocab, json_positive_int(c, "vocab_size", where));
  LOOM_ASSIGN_OR_RETURN(m.max_position, json_positive_int(c, "max_position_embeddings", where));
  LOOM_ASSIGN_OR_RETURN(m.num_layers, narrow_int(layers, where + ".num_hidden_layers"));
  LOOM_ASSIGN_OR_RETURN(m.num_heads, narrow_int(heads, where + ".num_attention_heads"));
  m.num_kv_heads = m.num_heads;  // MLA expands K and V per head from the shared latent
  m.mla.enabled = true;
  LOOM_ASSIGN_OR_RETURN(m.mla.q_lora_rank, optional_positive(c, "q_lora_rank", 0, where));
  LOOM_ASSIGN_OR_RETURN(m.mla.kv_lora_rank, json_positive_int(c, "kv_lora_rank", where));
  LOOM_ASSIGN_OR_RETURN(m.mla.qk_nope_head_dim, json_positive_int(c, "qk_nope_head_dim", where));
  LOOM_ASSIGN_OR_RETURN(m.mla.qk_rope_head_dim, json_positive_int(c, "qk_rope_head_dim", where));
  LOOM_ASSIGN_OR_RETURN(m.mla.v_head_dim, json_positive_int(c, "v_head_dim", where));
  m.head_dim = m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim;
  LOOM_ASSIGN_OR_RETURN(int64_t experts, optional_count(c, "n_routed_experts", 0, where));
  if (experts > 0) {
    LOOM_ASSIGN_OR_RETURN(int64_t top_k, json_positive_int(c, "num_experts_per_tok", where));
    LOOM_ASSIGN_OR_RETURN(m.moe.expert_ffn_hidden, json_positive_int(c, "moe_intermediate_size", where));
    LOOM_ASSIGN_OR_RETURN(int64_t shared, optional_count(c, "n_shared_experts", 0, where));
    LOOM_ASSIGN_OR_RETURN(int64_t first_dense, optional_count(c, "first_k_dense_replace", 0, where));
    LOOM_ASSIGN_OR_RETURN(int64_t freq, optional_positive(c, "moe_layer_freq", 1, where));
    LOOM_ASSIGN_OR_RETURN(std::string topk_method,
                          json_string_or(c, "topk_method", v3 ? "noaux_tc" : "greedy", where));
    LOOM_ASSIGN_OR_RETURN(m.moe.num_experts, narrow_int(experts, where + ".n_routed_experts"));
    LOOM_ASSIGN_OR_RETURN(m.moe.experts_per_token, narrow_int(top_k, where + ".num_experts_per_tok"));
    LOOM_ASSIGN_OR_RETURN(m.moe.num_shared_experts, narrow_int(shared, where + ".n_shared_experts"));
    LOOM_ASSIGN_OR_RETURN(m.moe.first_dense_layers, narrow_int(first_dense, where + ".first_k_dense_replace"));
    LOOM_ASSIGN_OR_RETURN(m.moe.moe_layer_freq, narrow_int(freq, where + ".moe_layer_freq"));
    // DeepSeek's shared experts are one MLP of n_shared * moe_intermediate_size,
    // the same parameters as n_shared experts of moe_intermediate_size each.
    m.moe.shared_expert_ffn_hidden = m.moe.num_shared_experts > 0 ? m.moe.expert_ffn_hidden : 0;
    m.moe.router_bias = topk_method == "noaux_tc";  // e_score_correction_bias (n_routed_experts)
    // Group-limited routing: noaux_tc (V3) and group_limited_greedy (V2)
    // pick topk_group of n_group expert groups first.
    LOOM_ASSIGN_OR_RETURN(int64_t groups, optional_count(c, "n_group", 0, where));
    LOOM_ASSIGN_OR_RETURN(int64_t topk_groups, optional_count(c, "topk_group", 0, where));
    if (groups > 1 && topk_groups > 0 && topk_groups < groups &&
        (topk_method == "noaux_tc" || topk_method == "group_limited_greedy")) {
      if (experts % groups != 0)
        return invalid_argument(where + ": n_group=" + std::to_string(groups) + " does not divide n_routed_experts=" +
                                std::to_string(experts));
      if (topk_groups * (experts / groups) < top_k)
        return invalid_argument(where + ": topk_group=" + std::to_string(topk_groups) + " groups of " +
                                std::to_string(experts / groups) + " experts cannot hold num_experts_per_tok=" +
                                std::to_string(top_k));
      LOOM_ASSIGN_OR_RETURN(m.moe.num_groups, narrow_int(groups, where + ".n_group"));
      LOOM_ASSIGN_OR_RETURN(m.moe.topk_groups, narrow_int(topk_groups, where + ".topk_group"));
    }
  }
  LOOM_ASSIGN_OR_RETURN(int64_t mtp, optional_count(c, "num_nextn_predict_layers", 0, where));
  LOOM_ASSIGN_OR_RETURN(m.num_mtp_layers, narrow_int(mtp, where + ".num_nextn_predict_layers"));
  LOOM_ASSIGN_OR_RETURN(m.tied_embeddings, json_bool_or(c, "tie_word_embeddings", false, where));
  m.norm = NormKind::kRmsNorm;
  m.mlp = MlpKind::kSwiGlu;
  m.position = PositionKind::kRope;
  return Status::ok();
}

// A RoPE scaling object (transformers' rope_scaling, or the scaling keys of
// its rope_parameters): the type, and llama3's frequency factors.
Status parse_rope_scaling(const Json& r, const std::string& rw, ModelSpec& m) {
  if (!r.is_object()) return invalid_argument(rw + " must be an object or null");
  std::string type;
  if (r.contains("rope_type")) {
    LOOM_ASSIGN_OR_RETURN(type, json_string(r, "rope_type", rw));
  } else if (r.contains("type")) {
    LOOM_ASSIGN_OR_RETURN(type, json_string(r, "type", rw));
  } else {
    return invalid_argument(rw + " has no rope_type; add one (e.g. \"llama3\") or set rope_scaling to null");
  }
  if (type != "default") {  // transformers: "default" is unscaled RoPE
    m.rope_scaling.type = type;
    m.rope_scaling.raw = r.dump();
    if (type == "llama3") {
      RopeScaling& x = m.rope_scaling;
      LOOM_ASSIGN_OR_RETURN(x.factor, json_positive(r, "factor", rw));
      LOOM_ASSIGN_OR_RETURN(x.low_freq_factor, json_positive(r, "low_freq_factor", rw));
      LOOM_ASSIGN_OR_RETURN(x.high_freq_factor, json_positive(r, "high_freq_factor", rw));
      LOOM_ASSIGN_OR_RETURN(x.original_max_position, json_positive_int(r, "original_max_position_embeddings", rw));
    }
  }
  return Status::ok();
}

// The fields the math needs beyond the shapes: RoPE base and scaling, the norm
// epsilon, the activation, the attention window. Defaults are transformers'
// configuration_*.py defaults for the model_type.
Status parse_math_fields(const Json& c, const std::string& where, const std::string& t, ModelSpec& m) {
  if (t == "gpt2") {
    LOOM_ASSIGN_OR_RETURN(m.norm_eps, json_number_or(c, "layer_norm_epsilon", 1e-5, where));
    LOOM_ASSIGN_OR_RETURN(m.activation, json_string_or(c, "activation_function", "", where));
    return Status::ok();
  }
  const bool mixtral = t == "mixtral";
  LOOM_ASSIGN_OR_RETURN(m.rope_theta, json_number_or(c, "rope_theta", mixtral ? 1e6 : 10000.0, where));
  LOOM_ASSIGN_OR_RETURN(m.norm_eps, json_number_or(c, "rms_norm_eps", mixtral ? 1e-5 : 1e-6, where));
  LOOM_ASSIGN_OR_RETURN(m.activation, json_string_or(c, "hidden_act", "", where));
  if (t == "mistral" || t == "mixtral") {
    // MistralConfig defaults sliding_window to 4096, MixtralConfig to None.
    if (!c.contains("sliding_window")) {
      m.sliding_window = t == "mistral" ? 4096 : 0;
    } else if (!c["sliding_window"].is_null()) {
      LOOM_ASSIGN_OR_RETURN(m.sliding_window, json_positive_int(c, "sliding_window", where));
    }
  } else if (t == "qwen2" || t == "qwen2_moe" || t == "qwen3" || t == "qwen3_moe") {
    LOOM_ASSIGN_OR_RETURN(bool use, json_bool_or(c, "use_sliding_window", false, where));
    // A null window is none (transformers: sliding_window None).
    if (use && !(c.contains("sliding_window") && c["sliding_window"].is_null())) {
      LOOM_ASSIGN_OR_RETURN(int64_t window, optional_positive(c, "sliding_window", 4096, where));
      // Which layers slide (transformers 008e574's __post_init__): Qwen2 and
      // Qwen3 those at or above max_window_layers (default 28); Qwen2-MoE
      // the even-numbered ones below max_window_layers; Qwen3-MoE all; or as
      // layer_types lists them. One window for every layer is what Loom
      // models.
      int64_t sliding = m.num_layers, listed = 0;
      if (c.contains("layer_types") && c["layer_types"].is_array()) {
        sliding = 0;
        for (const Json& x : c["layer_types"]) {
          ++listed;
          sliding += x.is_string() && x.get<std::string>() == "sliding_attention" ? 1 : 0;
        }
        if (listed != m.num_layers)
          return invalid_argument(where + ".layer_types lists " + std::to_string(listed) + " layers, not " +
                                  std::to_string(m.num_layers));
      } else if (t == "qwen2" || t == "qwen3") {
        LOOM_ASSIGN_OR_RETURN(int64_t first, json_int_or(c, "max_window_layers", 28, where));
        sliding = std::clamp<int64_t>(m.num_layers - std::max<int64_t>(first, 0), 0, m.num_layers);
      } else if (t == "qwen2_moe") {
        LOOM_ASSIGN_OR_RETURN(int64_t below, json_int_or(c, "max_window_layers", 28, where));
        sliding = 0;
        for (int64_t i = 0; i < m.num_layers; ++i) sliding += (i + 1) % 2 != 0 && i < below ? 1 : 0;
      }
      if (sliding > 0 && sliding < m.num_layers)
        return unsupported(where + ": " + std::to_string(sliding) + " of " + std::to_string(m.num_layers) +
                           " layers slide (use_sliding_window with max_window_layers / layer_types); Loom models "
                           "one attention window for every layer: set use_sliding_window false, or a window for all");
      if (sliding == m.num_layers) m.sliding_window = window;
    }
  }
  if (c.contains("rope_scaling") && !c["rope_scaling"].is_null()) {
    LOOM_RETURN_IF_ERROR(parse_rope_scaling(c["rope_scaling"], where + ".rope_scaling", m));
  }
  // transformers 5's form: rope_parameters holds rope_theta and the scaling
  // keys together (rope_type "default" = unscaled). Where the old keys are
  // there too they must say the same.
  if (c.contains("rope_parameters") && !c["rope_parameters"].is_null()) {
    const Json& r = c["rope_parameters"];
    const std::string rw = where + ".rope_parameters";
    if (!r.is_object() || !r.contains("rope_type"))
      return invalid_argument(rw + " must be an object with a rope_type (transformers 5: {\"rope_type\": \"default\", "
                              "\"rope_theta\": ...}), or null");
    ModelSpec p = m;
    p.rope_scaling = RopeScaling{};
    LOOM_ASSIGN_OR_RETURN(p.rope_theta, json_number_or(r, "rope_theta", m.rope_theta, rw));
    if (!(p.rope_theta > 0)) return invalid_argument(rw + ".rope_theta must be positive");
    LOOM_RETURN_IF_ERROR(parse_rope_scaling(r, rw, p));
    if (c.contains("rope_theta") && !c["rope_theta"].is_null() && p.rope_theta != m.rope_theta)
      return invalid_argument(where + ": rope_theta=" + c["rope_theta"].dump() + " and rope_parameters.rope_theta=" +
                              r["rope_theta"].dump() + " differ; keep one");
    if (c.contains("rope_scaling") && !c["rope_scaling"].is_null() &&
        (p.rope_scaling.type != m.rope_scaling.type || p.rope_scaling.factor != m.rope_scaling.factor))
      return invalid_argument(where + ": rope_scaling and rope_parameters describe different RoPE scalings; keep one");
    m.rope_theta = p.rope_theta;
    m.rope_scaling = p.rope_scaling;
  }
  return Status::ok();
}

// Parameters of one MLP with intermediate size f (weights only, or with biases).
int64_t mlp_weights(const ModelSpec& m, int64_t f) { return (m.mlp == MlpKind::kGelu ? 2 : 3) * m.hidden * f; }
int64_t mlp_biases(const ModelSpec& m, int64_t f) {
  if (!m.linear_bias && !m.mlp_bias) return 0;
  return (m.mlp == MlpKind::kGelu ? 1 : 2) * f + m.hidden;
}

// Matmul weights of one attention block (q, k, v, o and the MLA low-rank ones).
int64_t attention_weights(const ModelSpec& m) {
  const int64_t h = m.hidden, a = m.num_heads;
  if (m.mla.enabled) {
    const MlaSpec& x = m.mla;
    const int64_t qk = x.qk_nope_head_dim + x.qk_rope_head_dim;
    int64_t q = x.q_lora_rank > 0 ? h * x.q_lora_rank + x.q_lora_rank * a * qk : h * a * qk;
    int64_t kv = h * (x.kv_lora_rank + x.qk_rope_head_dim) + x.kv_lora_rank * a * (x.qk_nope_head_dim + x.v_head_dim);
    return q + kv + a * x.v_head_dim * h;
  }
  const int64_t d = m.head_dim;
  return h * a * d + 2 * h * m.num_kv_heads * d + a * d * h;
}

}  // namespace

// --- structure ----------------------------------------------------------------

bool ModelSpec::is_moe_layer(int layer) const {
  if (!is_moe() || layer < moe.first_dense_layers) return false;
  if (moe.moe_layer_freq <= 0 || (layer + moe.moe_layer_phase) % moe.moe_layer_freq != 0) return false;
  return std::find(moe.dense_layer_ids.begin(), moe.dense_layer_ids.end(), layer) == moe.dense_layer_ids.end();
}

int ModelSpec::num_moe_layers() const {
  int n = 0;
  for (int l = 0; l < num_layers; ++l) n += is_moe_layer(l) ? 1 : 0;
  return n;
}

// --- parameters ---------------------------------------------------------------

int64_t ModelSpec::embedding_params() const { return vocab * hidden; }
int64_t ModelSpec::position_params() const { return position == PositionKind::kLearned ? max_position * hidden : 0; }
int64_t ModelSpec::lm_head_params() const { return tied_embeddings ? 0 : vocab * hidden; }
int64_t ModelSpec::final_norm_params() const { return norm == NormKind::kLayerNorm ? 2 * hidden : hidden; }
int64_t ModelSpec::norm_params_per_layer() const { return 2 * final_norm_params(); }

int64_t ModelSpec::attention_params() const {
  int64_t n = attention_weights(*this);
  const bool out_bias = linear_bias || attn_out_bias;
  if (mla.enabled) {
    // transformers DeepseekV3Attention: q_a_proj and kv_a_proj_with_mqa and o_proj
    // take attention_bias; each low-rank latent has an RMSNorm.
    if (mla.q_lora_rank > 0) n += mla.q_lora_rank;  // q_a_layernorm
    n += mla.kv_lora_rank;                          // kv_a_layernorm
    if (qkv_bias) n += (mla.q_lora_rank > 0 ? mla.q_lora_rank : 0) + mla.kv_lora_rank + mla.qk_rope_head_dim;
  } else {
    if (qkv_bias) n += (num_heads + 2 * static_cast<int64_t>(num_kv_heads)) * head_dim;
    if (qk_norm) n += 2 * head_dim;  // q_norm, k_norm: RMSNorm over head_dim, shared by heads
  }
  if (out_bias) n += hidden;
  return n;
}

int64_t ModelSpec::dense_mlp_params() const { return mlp_weights(*this, ffn_hidden) + mlp_biases(*this, ffn_hidden); }

int64_t ModelSpec::expert_params() const {
  if (!is_moe()) return 0;
  return mlp_weights(*this, moe.expert_ffn_hidden) + mlp_biases(*this, moe.expert_ffn_hidden);
}

int64_t ModelSpec::shared_expert_params() const {
  if (moe.num_shared_experts == 0) return 0;
  const int64_t f = moe.shared_expert_ffn_hidden;
  return moe.num_shared_experts * (mlp_weights(*this, f) + mlp_biases(*this, f));
}

int64_t ModelSpec::router_params() const {
  if (!is_moe()) return 0;
  int64_t n = moe.num_experts * hidden;
  if (moe.router_bias) n += moe.num_experts;
  if (moe.shared_expert_gate) n += hidden;
  return n;
}

int64_t ModelSpec::layer_params(int layer) const {
  int64_t n = attention_params() + norm_params_per_layer();
  if (is_moe_layer(layer)) {
    n += moe.num_experts * expert_params() + shared_expert_params() + router_params();
  } else {
    n += dense_mlp_params();
  }
  return n;
}

int64_t ModelSpec::total_params() const {
  int64_t n = embedding_params() + position_params() + lm_head_params() + final_norm_params();
  for (int l = 0; l < num_layers; ++l) n += layer_params(l);
  return n;
}

int64_t ModelSpec::active_params() const {
  const int64_t idle_experts = static_cast<int64_t>(moe.num_experts - moe.experts_per_token);
  return total_params() - num_moe_layers() * idle_experts * expert_params();
}

int64_t ModelSpec::palm_params() const {
  return active_params() - embedding_params() - position_params() + (tied_embeddings ? vocab * hidden : 0);
}

// --- FLOPs --------------------------------------------------------------------

double ModelSpec::layer_matmul_flops_fwd(int layer) const {
  int64_t weights = attention_weights(*this);
  if (is_moe_layer(layer)) {
    weights += moe.num_experts * hidden + (moe.shared_expert_gate ? hidden : 0);  // router GEMMs
    weights += moe.experts_per_token * mlp_weights(*this, moe.expert_ffn_hidden);
    weights += moe.num_shared_experts * mlp_weights(*this, moe.shared_expert_ffn_hidden);
  } else {
    weights += mlp_weights(*this, ffn_hidden);
  }
  return 2.0 * static_cast<double>(weights);
}

double ModelSpec::attention_flops_per_token_fwd(int64_t seq, bool causal) const {
  const double qk_dim = mla.enabled ? static_cast<double>(mla.qk_nope_head_dim + mla.qk_rope_head_dim) : head_dim;
  const double v_dim = mla.enabled ? static_cast<double>(mla.v_head_dim) : head_dim;
  // Per token: its query against `seq` keys (QK^T) and its weights over `seq` values (AV).
  double flops = 2.0 * static_cast<double>(seq) * num_heads * (qk_dim + v_dim);
  return causal ? flops / 2 : flops;
}

double ModelSpec::attention_window_share(int64_t seq) const {
  if (sliding_window <= 0 || seq <= sliding_window) return 1.0;
  const double s = double(seq), w = double(sliding_window);
  return (w * (w + 1) / 2 + (s - w) * w) / (s * (s + 1) / 2);
}

double ModelSpec::logits_flops_per_token_fwd() const { return 2.0 * static_cast<double>(hidden) * vocab; }

double ModelSpec::model_flops_per_token_palm(int64_t seq) const {
  const double qk_dim = mla.enabled ? static_cast<double>(mla.qk_nope_head_dim + mla.qk_rope_head_dim) : head_dim;
  const double v_dim = mla.enabled ? static_cast<double>(mla.v_head_dim) : head_dim;
  // 12*L*H*Q*T with Q split as (Q_qk + Q_v)/2: identical for ordinary attention.
  return 6.0 * static_cast<double>(palm_params()) +
         6.0 * num_layers * num_heads * (qk_dim + v_dim) * static_cast<double>(seq);
}

// --- validation and parsing -----------------------------------------------------

Status validate_model_spec(const ModelSpec& m) {
  const std::string w = "model '" + m.name + "': ";
  auto positive = [&](int64_t v, const char* what) -> Status {
    if (v > 0) return Status::ok();
    return invalid_argument(w + what + " must be positive, got " + std::to_string(v));
  };
  LOOM_RETURN_IF_ERROR(positive(m.hidden, "hidden size (hidden_size / n_embd)"));
  LOOM_RETURN_IF_ERROR(positive(m.num_layers, "layer count (num_hidden_layers / n_layer)"));
  LOOM_RETURN_IF_ERROR(positive(m.num_heads, "head count (num_attention_heads / n_head)"));
  LOOM_RETURN_IF_ERROR(positive(m.num_kv_heads, "num_key_value_heads"));
  LOOM_RETURN_IF_ERROR(positive(m.head_dim, "head_dim"));
  LOOM_RETURN_IF_ERROR(positive(m.ffn_hidden, "MLP size (intermediate_size / n_inner)"));
  LOOM_RETURN_IF_ERROR(positive(m.vocab, "vocab_size"));
  LOOM_RETURN_IF_ERROR(positive(m.max_position, "max positions (max_position_embeddings / n_positions)"));
  // Ranges first: every product formed from these below and by the planner
  // and the executor stays far inside int64.
  auto at_most = [&](int64_t v, int64_t limit, const char* what) -> Status {
    if (v <= limit) return Status::ok();
    return invalid_argument(w + what + "=" + std::to_string(v) + " is out of range: at most " +
                            std::to_string(limit) + " is accepted");
  };
  LOOM_RETURN_IF_ERROR(at_most(m.hidden, kMaxHidden, "hidden size (hidden_size / n_embd)"));
  LOOM_RETURN_IF_ERROR(at_most(m.num_layers, kMaxLayers, "layer count (num_hidden_layers / n_layer)"));
  LOOM_RETURN_IF_ERROR(at_most(m.num_heads, kMaxHeads, "head count (num_attention_heads / n_head)"));
  LOOM_RETURN_IF_ERROR(at_most(m.num_kv_heads, kMaxHeads, "num_key_value_heads"));
  LOOM_RETURN_IF_ERROR(at_most(m.head_dim, kMaxHeads, "head_dim"));
  LOOM_RETURN_IF_ERROR(at_most(m.ffn_hidden, kMaxFfnHidden, "MLP size (intermediate_size / n_inner)"));
  LOOM_RETURN_IF_ERROR(at_most(m.vocab, kMaxVocab, "vocab_size"));
  LOOM_RETURN_IF_ERROR(at_most(m.max_position, kMaxPositions, "max positions (max_position_embeddings / n_positions)"));
  LOOM_RETURN_IF_ERROR(at_most(m.moe.num_experts, kMaxExperts, "expert count"));
  LOOM_RETURN_IF_ERROR(at_most(m.moe.expert_ffn_hidden, kMaxFfnHidden, "expert size (moe_intermediate_size)"));
  LOOM_RETURN_IF_ERROR(at_most(m.moe.shared_expert_ffn_hidden, kMaxFfnHidden, "shared expert size"));
  LOOM_RETURN_IF_ERROR(at_most(m.moe.num_shared_experts, kMaxExperts, "n_shared_experts"));
  LOOM_RETURN_IF_ERROR(at_most(m.mla.q_lora_rank, kMaxHidden, "q_lora_rank"));
  LOOM_RETURN_IF_ERROR(at_most(m.mla.kv_lora_rank, kMaxHidden, "kv_lora_rank"));
  LOOM_RETURN_IF_ERROR(at_most(m.mla.qk_nope_head_dim, kMaxHeads, "qk_nope_head_dim"));
  LOOM_RETURN_IF_ERROR(at_most(m.mla.qk_rope_head_dim, kMaxHeads, "qk_rope_head_dim"));
  LOOM_RETURN_IF_ERROR(at_most(m.mla.v_head_dim, kMaxHeads, "v_head_dim"));
  {
    // The total in floating point, before anything sums it in int64.
    const double h = double(m.hidden), a = double(m.num_heads), g = double(m.num_kv_heads), d = double(m.head_dim);
    const double mats = m.mlp == MlpKind::kGelu ? 2 : 3;
    const double mlp = mats * h *
                       std::max(double(m.ffn_hidden), double(m.moe.num_experts) * double(m.moe.expert_ffn_hidden) +
                                                          double(m.moe.num_shared_experts) *
                                                              double(m.moe.shared_expert_ffn_hidden));
    const double total = double(m.num_layers) * ((2 * a + 2 * g) * d * h + mlp) + 2 * double(m.vocab) * h +
                         double(m.max_position) * h;
    if (total > kMaxTotalParams)
    {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.3g", total);
      return invalid_argument(w + "about " + buf + " parameters is out of range: at most 1e15 are accepted; lower "
                              "the layer count, hidden size, MLP size or vocabulary");
    }
  }
  if (!(m.norm_eps > 0) || !(m.norm_eps < 1))
    return invalid_argument(w + "the norm epsilon (rms_norm_eps / layer_norm_epsilon) must be in (0, 1), got " +
                            std::to_string(m.norm_eps));
  if (m.position == PositionKind::kRope) {
    if (!(m.rope_theta > 1) || !std::isfinite(m.rope_theta))
      return invalid_argument(w + "rope_theta must be a finite number > 1, got " + std::to_string(m.rope_theta));
    // RoPE rotates pairs (i, i + d/2) of the rotated dims: they must be even.
    const int64_t rope_dim = m.mla.enabled ? m.mla.qk_rope_head_dim : m.head_dim;
    if (rope_dim % 2 != 0)
      return invalid_argument(w + (m.mla.enabled ? std::string("qk_rope_head_dim=") : std::string("head_dim=")) +
                              std::to_string(rope_dim) +
                              " is odd; RoPE rotates pairs of dimensions and needs it even (head_dim = hidden / heads "
                              "unless set: choose heads so that hidden / heads is even)");
    const RopeScaling& r = m.rope_scaling;
    if (r.type == "llama3") {
      if (!(r.factor >= 1) || !std::isfinite(r.factor))
        return invalid_argument(w + "rope_scaling.factor must be >= 1, got " + std::to_string(r.factor));
      if (!(r.high_freq_factor > r.low_freq_factor) || !std::isfinite(r.high_freq_factor))
        return invalid_argument(w + "rope_scaling.high_freq_factor must be greater than low_freq_factor");
      if (r.original_max_position <= 0)
        return invalid_argument(w + "rope_scaling.original_max_position_embeddings must be positive");
    }
  }
  if (m.sliding_window < 0) return invalid_argument(w + "sliding_window must be positive or null");
  if (m.num_heads % m.num_kv_heads != 0)
    return invalid_argument(w + "num_key_value_heads=" + std::to_string(m.num_kv_heads) +
                            " does not divide num_attention_heads=" + std::to_string(m.num_heads) +
                            "; use num_key_value_heads in " + divisors_of(m.num_heads));
  if (m.num_mtp_layers < 0) return invalid_argument(w + "num_nextn_predict_layers must be >= 0");
  if (m.mla.enabled) {
    const MlaSpec& x = m.mla;
    LOOM_RETURN_IF_ERROR(positive(x.kv_lora_rank, "kv_lora_rank"));
    LOOM_RETURN_IF_ERROR(positive(x.qk_nope_head_dim, "qk_nope_head_dim"));
    LOOM_RETURN_IF_ERROR(positive(x.qk_rope_head_dim, "qk_rope_head_dim"));
    LOOM_RETURN_IF_ERROR(positive(x.v_head_dim, "v_head_dim"));
    if (x.q_lora_rank < 0) return invalid_argument(w + "q_lora_rank must be null or positive");
    if (m.head_dim != x.qk_nope_head_dim + x.qk_rope_head_dim)
      return invalid_argument(w + "head_dim must equal qk_nope_head_dim + qk_rope_head_dim for MLA");
  }
  const MoeSpec& e = m.moe;
  if (e.num_experts < 0) return invalid_argument(w + "the expert count must be >= 0");
  if (e.num_experts == 0) {
    if (e.experts_per_token != 0 || e.num_shared_experts != 0)
      return invalid_argument(w + "experts per token / shared experts are set but the expert count is 0; "
                                  "set the expert count or remove them");
    return Status::ok();
  }
  if (e.experts_per_token < 1 || e.experts_per_token > e.num_experts)
    return invalid_argument(w + "num_experts_per_tok=" + std::to_string(e.experts_per_token) +
                            " must be in [1, " + std::to_string(e.num_experts) + "] (the routed expert count)");
  LOOM_RETURN_IF_ERROR(positive(e.expert_ffn_hidden, "expert size (moe_intermediate_size)"));
  if (e.num_shared_experts < 0) return invalid_argument(w + "n_shared_experts must be >= 0");
  if (e.num_shared_experts > 0) LOOM_RETURN_IF_ERROR(positive(e.shared_expert_ffn_hidden, "shared expert size"));
  if (e.first_dense_layers < 0 || e.first_dense_layers > m.num_layers)
    return invalid_argument(w + "first_k_dense_replace=" + std::to_string(e.first_dense_layers) +
                            " must be in [0, " + std::to_string(m.num_layers) + "] (the layer count)");
  if (e.moe_layer_freq < 1) return invalid_argument(w + "moe_layer_freq / decoder_sparse_step must be >= 1");
  if (e.moe_layer_phase < 0) return invalid_argument(w + "moe_layer_phase must be >= 0");
  for (int id : e.dense_layer_ids)
    if (id < 0 || id >= m.num_layers)
      return invalid_argument(w + "mlp_only_layers holds " + std::to_string(id) + ", outside [0, " +
                              std::to_string(m.num_layers) + "); remove it");
  return Status::ok();
}

Result<ModelSpec> parse_model_spec(const std::string& json_text, const std::string& name) {
  LOOM_ASSIGN_OR_RETURN(Json root, parse_json(json_text, name));
  if (!root.is_object()) return invalid_argument(name + ": a config.json must be a JSON object");
  ModelSpec m;
  LOOM_ASSIGN_OR_RETURN(m.name, json_string_or(root, "_name_or_path", name, name));
  if (m.name.empty()) m.name = name;
  std::string where = name;
  const Json* c = &root;
  if (root.contains("text_config") && root["text_config"].is_object()) {  // multimodal wrapper
    c = &root["text_config"];
    where = name + ".text_config";
  }
  if (!c->contains("model_type") || (*c)["model_type"].is_null())
    return invalid_argument(where + ".model_type is missing; add it, one of: " + std::string(kSupportedTypes));
  LOOM_ASSIGN_OR_RETURN(m.model_type, json_string(*c, "model_type", where));
  const std::string& t = m.model_type;
  if (t == "gpt2") {
    LOOM_RETURN_IF_ERROR(parse_gpt2(*c, where, m));
  } else if (t == "llama" || t == "mistral" || t == "mixtral" || t == "qwen3" || t == "qwen3_moe") {
    // When absent, transformers' Qwen3Config takes head_dim 128 and
    // num_key_value_heads 32, Qwen3MoeConfig 4 K/V heads (and hidden/heads
    // wide heads): the 8B's and the 30B-A3B's numbers, not derivable from
    // the rest (configuration_qwen3.py, configuration_qwen3_moe.py at
    // 008e574). Refused when absent.
    if (t == "qwen3") LOOM_RETURN_IF_ERROR(require_key(*c, "head_dim", where, "128 (Qwen3Config)"));
    if (t == "qwen3" || t == "qwen3_moe")
      LOOM_RETURN_IF_ERROR(require_key(*c, "num_key_value_heads", where,
                                       t == "qwen3" ? "32 (Qwen3Config)" : "4 (Qwen3MoeConfig)"));
    LOOM_RETURN_IF_ERROR(parse_llama_like(*c, where, m));
    // transformers: q,k,v and o all take attention_bias; gate/up/down take mlp_bias.
    LOOM_ASSIGN_OR_RETURN(bool attention_bias, json_bool_or(*c, "attention_bias", false, where));
    LOOM_ASSIGN_OR_RETURN(m.mlp_bias, json_bool_or(*c, "mlp_bias", false, where));
    m.qkv_bias = m.attn_out_bias = attention_bias;
    if (t == "mixtral") {
      const char* key = c->contains("num_local_experts") ? "num_local_experts" : "num_experts";
      LOOM_ASSIGN_OR_RETURN(int64_t experts, json_positive_int(*c, key, where));
      LOOM_ASSIGN_OR_RETURN(int64_t top_k, json_positive_int(*c, "num_experts_per_tok", where));
      LOOM_ASSIGN_OR_RETURN(m.moe.num_experts, narrow_int(experts, where + "." + key));
      LOOM_ASSIGN_OR_RETURN(m.moe.experts_per_token, narrow_int(top_k, where + ".num_experts_per_tok"));
      m.moe.expert_ffn_hidden = m.ffn_hidden;
      m.moe.norm_topk_prob = true;  // Mixtral renormalizes its top-k weights
    }
    if (t == "qwen3_moe") LOOM_RETURN_IF_ERROR(parse_qwen_moe(*c, where, /*shared_expert=*/false, m));
    m.qk_norm = (t == "qwen3" || t == "qwen3_moe");
  } else if (t == "qwen2" || t == "qwen2_moe") {
    LOOM_RETURN_IF_ERROR(parse_llama_like(*c, where, m));
    LOOM_ASSIGN_OR_RETURN(m.qkv_bias, json_bool_or(*c, "qkv_bias", true, where));  // o_proj has none
    if (t == "qwen2_moe") {
      LOOM_RETURN_IF_ERROR(require_key(*c, "shared_expert_intermediate_size", where, "5632 (Qwen2MoeConfig)"));
      LOOM_RETURN_IF_ERROR(parse_qwen_moe(*c, where, /*shared_expert=*/true, m));
    }
  } else if (t == "deepseek_v3" || t == "deepseek_v2") {
    // DeepseekV3Config's defaults are the 671B model's (256 routed experts,
    // one shared, the first 3 layers dense, q_lora_rank 1536): an absent key
    // would otherwise read as none.
    const bool v3 = t == "deepseek_v3";
    LOOM_RETURN_IF_ERROR(require_key(*c, "n_routed_experts", where,
                                     v3 ? "256 (DeepseekV3Config)" : "160 (DeepseekV2Config)"));
    LOOM_RETURN_IF_ERROR(require_key(*c, "q_lora_rank", where,
                                     v3 ? "1536 (DeepseekV3Config; null for none)" : "1536 (DeepseekV2Config; null for none)"));
    if (c->contains("n_routed_experts") && (*c)["n_routed_experts"].is_number() &&
        (*c)["n_routed_experts"].get<double>() > 0) {
      LOOM_RETURN_IF_ERROR(require_key(*c, "n_shared_experts", where, v3 ? "1 (DeepseekV3Config)" : "2 (DeepseekV2Config)"));
      LOOM_RETURN_IF_ERROR(
          require_key(*c, "first_k_dense_replace", where, v3 ? "3 (DeepseekV3Config)" : "0 (DeepseekV2Config)"));
    }
    LOOM_RETURN_IF_ERROR(parse_deepseek(*c, where, t == "deepseek_v3", m));
    LOOM_ASSIGN_OR_RETURN(bool attention_bias, json_bool_or(*c, "attention_bias", false, where));
    m.qkv_bias = m.attn_out_bias = attention_bias;
  } else {
    return invalid_argument(where + ".model_type '" + t + "' is not supported; use one of: " + kSupportedTypes);
  }
  if (t == "mixtral" || t == "qwen3_moe" || t == "qwen2_moe") {
    if (c->contains("router_aux_loss_coef") && !(*c)["router_aux_loss_coef"].is_null()) {
      LOOM_ASSIGN_OR_RETURN(m.moe.router_aux_loss_coef, json_number_or(*c, "router_aux_loss_coef", 0.0, where));
      if (!(m.moe.router_aux_loss_coef >= 0 && m.moe.router_aux_loss_coef < 1e3))
        return invalid_argument(where + ".router_aux_loss_coef must be in [0, 1000)");
    }
  }
  if (t != "gpt2") {  // an explicit override of the family default
    LOOM_ASSIGN_OR_RETURN(m.qk_norm, json_bool_or(*c, "qk_norm", m.qk_norm, where));
  }
  LOOM_RETURN_IF_ERROR(parse_math_fields(*c, where, t, m));
  LOOM_RETURN_IF_ERROR(validate_model_spec(m));
  return m;
}

std::vector<double> rope_inverse_frequencies(const ModelSpec& m, int64_t dim) {
  std::vector<double> inv(size_t(std::max<int64_t>(0, dim / 2)));
  for (size_t i = 0; i < inv.size(); ++i) inv[i] = std::pow(m.rope_theta, -2.0 * double(i) / double(dim));
  const RopeScaling& r = m.rope_scaling;
  if (r.type != "llama3") return inv;
  // transformers modeling_rope_utils._compute_llama3_parameters, term by term.
  const double old_context = double(r.original_max_position);
  const double low_freq_wavelen = old_context / r.low_freq_factor;
  const double high_freq_wavelen = old_context / r.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2 * M_PI / f;
    const double scaled = wavelen > low_freq_wavelen ? f / r.factor : f;  // low frequencies: divided
    const double smooth = (old_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    f = medium ? (1 - smooth) * scaled / r.factor + smooth * scaled : scaled;
  }
  return inv;
}

Result<ModelSpec> load_model_spec(const std::string& path_or_name) {
  LOOM_ASSIGN_OR_RETURN(std::string path, find_description_file(path_or_name, "models"));
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  std::string stem = std::filesystem::path(path).stem().string();
  Result<ModelSpec> spec = parse_model_spec(text, stem);
  if (!spec.is_ok()) return spec.status().with_context(path);
  return spec;
}

// --- writing ------------------------------------------------------------------

std::string model_spec_to_json(const ModelSpec& m) {
  OrderedJson j;
  j["_name_or_path"] = m.name;
  j["model_type"] = m.model_type;
  const std::string& t = m.model_type;
  if (t == "gpt2") {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["n_embd"] = m.hidden;
    j["n_layer"] = m.num_layers;
    j["n_head"] = m.num_heads;
    j["n_inner"] = m.ffn_hidden;
    j["n_positions"] = m.max_position;
    j["vocab_size"] = m.vocab;
    j["tie_word_embeddings"] = m.tied_embeddings;
    j["layer_norm_epsilon"] = m.norm_eps;
    if (!m.activation.empty()) j["activation_function"] = m.activation;
    return j.dump(2) + "\n";
  }
  j["hidden_size"] = m.hidden;
  j["intermediate_size"] = m.ffn_hidden;
  j["num_hidden_layers"] = m.num_layers;
  j["num_attention_heads"] = m.num_heads;
  j["num_key_value_heads"] = m.num_kv_heads;
  if (!m.mla.enabled) j["head_dim"] = m.head_dim;
  j["vocab_size"] = m.vocab;
  j["max_position_embeddings"] = m.max_position;
  j["tie_word_embeddings"] = m.tied_embeddings;
  if (t == "qwen2" || t == "qwen2_moe") {
    j["qkv_bias"] = m.qkv_bias;
  } else {
    j["attention_bias"] = m.qkv_bias || m.attn_out_bias;
    if (!m.mla.enabled) j["mlp_bias"] = m.mlp_bias;
  }
  if (m.qk_norm != (t == "qwen3" || t == "qwen3_moe")) j["qk_norm"] = m.qk_norm;
  j["rope_theta"] = m.rope_theta;
  j["rms_norm_eps"] = m.norm_eps;
  if (!m.activation.empty()) j["hidden_act"] = m.activation;
  if (m.rope_scaling.enabled()) {
    j["rope_scaling"] = OrderedJson::parse(m.rope_scaling.raw);
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (t == "mistral" || t == "mixtral") {
    if (m.sliding_window > 0) {
      j["sliding_window"] = m.sliding_window;
    } else {
      j["sliding_window"] = nullptr;
    }
  } else if (m.sliding_window > 0) {  // qwen2/qwen3 families
    j["use_sliding_window"] = true;
    j["sliding_window"] = m.sliding_window;
    if (t == "qwen2" || t == "qwen3") j["max_window_layers"] = 0;  // every layer slides
  }
  const MoeSpec& e = m.moe;
  if (m.mla.enabled) {
    if (m.mla.q_lora_rank > 0) {
      j["q_lora_rank"] = m.mla.q_lora_rank;
    } else {
      j["q_lora_rank"] = nullptr;
    }
    j["kv_lora_rank"] = m.mla.kv_lora_rank;
    j["qk_nope_head_dim"] = m.mla.qk_nope_head_dim;
    j["qk_rope_head_dim"] = m.mla.qk_rope_head_dim;
    j["v_head_dim"] = m.mla.v_head_dim;
    j["n_routed_experts"] = e.num_experts;
    if (m.is_moe()) {
      j["num_experts_per_tok"] = e.experts_per_token;
      j["moe_intermediate_size"] = e.expert_ffn_hidden;
      j["n_shared_experts"] = e.num_shared_experts;
      j["first_k_dense_replace"] = e.first_dense_layers;
      j["moe_layer_freq"] = e.moe_layer_freq;
      j["topk_method"] = e.router_bias ? "noaux_tc" : e.num_groups > 0 ? "group_limited_greedy" : "greedy";
      if (e.num_groups > 0) {
        j["n_group"] = e.num_groups;
        j["topk_group"] = e.topk_groups;
      }
    }
    j["num_nextn_predict_layers"] = m.num_mtp_layers;
  } else if (t == "mixtral") {
    j["num_local_experts"] = e.num_experts;
    j["num_experts_per_tok"] = e.experts_per_token;
    if (e.router_aux_loss_coef >= 0) j["router_aux_loss_coef"] = e.router_aux_loss_coef;
  } else if (t == "qwen2_moe" || t == "qwen3_moe") {
    j["num_experts"] = e.num_experts;
    j["num_experts_per_tok"] = e.experts_per_token;
    j["norm_topk_prob"] = e.norm_topk_prob;
    if (e.router_aux_loss_coef >= 0) j["router_aux_loss_coef"] = e.router_aux_loss_coef;
    j["moe_intermediate_size"] = e.expert_ffn_hidden;
    if (t == "qwen2_moe") j["shared_expert_intermediate_size"] = e.num_shared_experts > 0 ? e.shared_expert_ffn_hidden : 0;
    j["decoder_sparse_step"] = e.moe_layer_freq;
    j["mlp_only_layers"] = e.dense_layer_ids;
  }
  return j.dump(2) + "\n";
}

}  // namespace loom
