// ModelSpec: validating it, the parameter and FLOP counts derived from it,
// and its canonical config.json (reading one: core/model_config_reader.cc). Key names follow
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
#include "core/model_config_reader.h"

namespace loom {

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

namespace {

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
