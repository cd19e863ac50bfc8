// Reading a Hugging Face config.json into a ModelSpec, family by family.
// Key names and absent-key defaults follow transformers/models/*/configuration_*.py;
// the parameter layout they imply is core/model_spec.cc's.
#include "core/model_config_reader.h"

#include <algorithm>
#include <climits>
#include <string>

#include "core/json_util.h"
#include "core/model_spec.h"

namespace loom {
namespace {

const char* const kSupportedTypes =
    "gpt2, llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v2, deepseek_v3";

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

}  // namespace

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

}  // namespace loom
