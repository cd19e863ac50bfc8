// ModelSpec: a decoder-only transformer as described by a Hugging Face
// config.json, plus the quantities derived from it (parameter counts, FLOPs).
//
// Supported `model_type`s: gpt2, llama, mistral, mixtral, qwen2, qwen2_moe,
// qwen3, qwen3_moe, deepseek_v3 (also deepseek_v2). Megatron-style GPT configs
// use model_type "gpt2" with n_embd/n_layer/n_head. A config nested under
// `text_config` (multimodal wrappers) is read from there. A missing
// `num_key_value_heads` means multi-head attention (kv heads = heads).
//
// All counts are exact integers (no rounding); FLOPs are doubles.
// Thread-safety: a ModelSpec is an immutable value; share it freely.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace loom {

enum class NormKind { kLayerNorm, kRmsNorm };
enum class MlpKind { kGelu, kSwiGlu };          // GELU: fc1,fc2; SwiGLU: gate,up,down
enum class PositionKind { kLearned, kRope };

struct MoeSpec {
  int num_experts = 0;            // routed experts per MoE layer (0: dense model)
  int experts_per_token = 0;      // top-k
  int64_t expert_ffn_hidden = 0;  // intermediate size of one routed expert
  int num_shared_experts = 0;     // always-active experts (DeepSeek, Qwen2-MoE)
  int64_t shared_expert_ffn_hidden = 0;  // intermediate size of ONE shared expert
  int first_dense_layers = 0;     // DeepSeek first_k_dense_replace: leading dense layers
  int moe_layer_freq = 1;         // every k-th layer (after the dense ones) is MoE
  // Layer l >= first_dense_layers is MoE when (l + moe_layer_phase) % moe_layer_freq == 0
  // and l is not in dense_layer_ids. DeepSeek (moe_layer_freq): phase 0; Qwen-MoE
  // (decoder_sparse_step, "(l + 1) % step == 0"): phase 1. Mixtral: freq 1, phase 0.
  int moe_layer_phase = 0;
  std::vector<int> dense_layer_ids;  // Qwen mlp_only_layers: these use the dense MLP
  // Group-limited routing (DeepSeek-V2/V3 n_group / topk_group): the experts
  // form num_groups contiguous groups and each token's experts come from
  // its topk_groups best groups; DeepSeek-V3 trains with one group per node,
  // so a token reaches at most topk_groups nodes. 0: no limit.
  int num_groups = 0;
  int topk_groups = 0;
  bool router_bias = false;       // e_score_correction_bias etc. counted as router params
  bool shared_expert_gate = false;  // Qwen2-MoE: sigmoid gate (h -> 1) on the shared expert
  // Top-k weights renormalized to sum to 1 (Mixtral always; Qwen-MoE's
  // norm_topk_prob, false by default in transformers) or the raw softmax.
  bool norm_topk_prob = true;
  // config.json's router_aux_loss_coef (Mixtral, Qwen-MoE), or -1 when absent:
  // the default of --moe-aux-loss-coeff.
  double router_aux_loss_coef = -1;
};

// Multi-head latent attention (DeepSeek-V2/V3).
struct MlaSpec {
  bool enabled = false;
  int64_t q_lora_rank = 0;  // 0: q projected directly from hidden
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
};

// RoPE frequency scaling (config.json `rope_scaling`). Only the Llama-3.1
// kind ("llama3") is read into fields; any other kind is kept by name and as
// its JSON text (`raw`) so a plan carries it and the executor can refuse it.
struct RopeScaling {
  std::string type;                     // "" (none), "llama3", or another rope_type / type
  double factor = 0;                    // llama3: factor
  double low_freq_factor = 0;           // llama3: low_freq_factor
  double high_freq_factor = 0;          // llama3: high_freq_factor
  int64_t original_max_position = 0;    // llama3: original_max_position_embeddings
  std::string raw;                      // the object as JSON text (canonical dump)
  bool enabled() const { return !type.empty(); }
};

// Upper bounds on the sizes of a model (validate_model_spec, parse_model_scale):
// far above any real model, low enough that every int64 product of them the
// planner and the executor form (parameters, activations, FLOPs) cannot overflow.
inline constexpr int64_t kMaxHidden = int64_t{1} << 20;       // 1,048,576
inline constexpr int64_t kMaxFfnHidden = int64_t{1} << 22;    // 4,194,304
inline constexpr int64_t kMaxVocab = int64_t{1} << 26;        // 67,108,864 (tokens are int32)
inline constexpr int64_t kMaxLayers = int64_t{1} << 16;       // 65,536
inline constexpr int64_t kMaxHeads = int64_t{1} << 16;        // heads, kv heads, head_dim
inline constexpr int64_t kMaxPositions = int64_t{1} << 24;    // 16,777,216 (max positions, seq_len)
inline constexpr int64_t kMaxExperts = int64_t{1} << 14;      // 16,384
inline constexpr double kMaxTotalParams = 1e15;               // a quadrillion parameters

struct ModelSpec {
  std::string name;        // file stem or `_name_or_path`
  std::string model_type;  // as in config.json ("llama", "gpt2", ...)

  int64_t hidden = 0;              // h
  int num_layers = 0;              // L
  int num_heads = 0;               // a
  int num_kv_heads = 0;            // GQA groups; == num_heads for MHA
  int64_t head_dim = 0;            // usually hidden / num_heads; MLA: qk_nope + qk_rope
  int64_t ffn_hidden = 0;          // dense MLP intermediate size
  int64_t vocab = 0;               // V
  int64_t max_position = 0;        // n_positions / max_position_embeddings

  NormKind norm = NormKind::kRmsNorm;
  MlpKind mlp = MlpKind::kSwiGlu;
  PositionKind position = PositionKind::kRope;
  bool tied_embeddings = false;
  bool qkv_bias = false;           // bias on Q,K,V projections (GPT-2, Qwen2)
  bool linear_bias = false;        // bias on attn-out and MLP linears (GPT-2)
  // Finer flags for configs that set them apart (Llama attention_bias puts a bias
  // on q,k,v AND o; mlp_bias on gate/up/down). linear_bias implies both.
  bool attn_out_bias = false;      // bias on the attention output projection
  bool mlp_bias = false;           // bias on the MLP / expert linears
  bool qk_norm = false;            // per-head RMSNorm on q and k (Qwen3)
  // What the math needs beyond the shapes (kept in the canonical JSON, so a
  // plan carries them to the executor).
  double rope_theta = 10000;       // RoPE base (rope_theta)
  RopeScaling rope_scaling;        // rope_scaling (Llama-3.1: llama3)
  double norm_eps = 1e-5;          // rms_norm_eps / layer_norm_epsilon
  std::string activation;          // hidden_act / activation_function ("" = the family's: silu, gelu_new)
  int64_t sliding_window = 0;      // attention window (Mistral sliding_window, Qwen use_sliding_window); 0 = none
  int num_mtp_layers = 0;          // DeepSeek-V3 multi-token-prediction modules (not in totals)

  MoeSpec moe;
  MlaSpec mla;

  // --- structure -----------------------------------------------------------
  bool is_moe() const { return moe.num_experts > 0; }
  bool is_moe_layer(int layer) const;  // layer in [0, num_layers)
  int num_moe_layers() const;
  int num_dense_layers() const { return num_layers - num_moe_layers(); }

  // --- parameters (elements) ---------------------------------------------------
  int64_t embedding_params() const;       // V*h token embedding
  int64_t position_params() const;        // max_position*h when learned, else 0
  int64_t lm_head_params() const;         // V*h when untied, else 0
  int64_t final_norm_params() const;
  int64_t attention_params() const;       // one layer: q,k,v,o (+biases, MLA, qk-norm)
  int64_t norm_params_per_layer() const;  // the two pre-norms of a layer
  int64_t dense_mlp_params() const;       // one dense MLP
  int64_t expert_params() const;          // ONE routed expert
  int64_t shared_expert_params() const;   // ALL shared experts of one layer together
  int64_t router_params() const;          // one MoE layer's router (gate)
  int64_t layer_params(int layer) const;  // everything in that layer
  int64_t total_params() const;           // the published "parameter count"
  int64_t active_params() const;          // per token: top-k experts instead of all

  // --- FLOPs ------------------------------------------------------------------
  // Forward matmul FLOPs per token of one layer (2 per multiply-add), counting
  // only the experts a token is routed to (plus shared experts and router).
  double layer_matmul_flops_fwd(int layer) const;
  // Forward FLOPs per token of attention scores + weighted sum for a sequence
  // of `seq` tokens (QK^T and AV). `causal` halves it (only the lower triangle).
  double attention_flops_per_token_fwd(int64_t seq, bool causal) const;
  // Of a causal sequence of `seq` tokens' query-key pairs, the share a
  // sliding window keeps: each query attends to itself and the
  // sliding_window - 1 keys before it (transformers' flash path:
  // window_size = (sliding_window - 1, ...)), so W(W+1)/2 + (seq - W)W of
  // seq(seq+1)/2 pairs. 1 without a window or with seq <= sliding_window.
  double attention_window_share(int64_t seq) const;
  // Forward FLOPs per token of the output projection (logits).
  double logits_flops_per_token_fwd() const;
  // Training model FLOPs per token, PaLM appendix B: 6*N + 12*L*H*Q*T, with the
  // attention term counted in full (non-causal), as PaLM and nanoGPT do.
  // N = active_params() - embedding_params() - position_params() + V*h when the
  // embeddings are tied: every active weight, bias and norm except the token and
  // position embedding tables, plus the LM head matrix exactly once (a tied matrix
  // counts as the head). For GPT-2 this is nanoGPT's get_num_params() (which
  // drops only wpe). For MLA, 12*Q is read as 6*(qk_nope + qk_rope + v_head_dim).
  double model_flops_per_token_palm(int64_t seq) const;
  // The N of model_flops_per_token_palm.
  int64_t palm_params() const;
};

// Llama-3.1 RoPE scaling (transformers' _compute_llama3_parameters): the
// D/2 inverse frequencies theta^(-2i/D), with those of wavelengths above
// original_max/low_freq_factor divided by `factor`, those below
// original_max/high_freq_factor kept, and the band between interpolated.
// Without scaling: the plain theta^(-2i/D). `rope_dim` is the rotated head dim.
std::vector<double> rope_inverse_frequencies(const ModelSpec& model, int64_t rope_dim);

// Parses a config.json text. `name` is used in messages and as ModelSpec::name
// when the config carries none. Errors: kParseError with line/column for bad
// JSON; kInvalidArgument naming the key for unknown model_type, missing or
// non-positive sizes, heads not dividing hidden, kv heads not dividing heads.
Result<ModelSpec> parse_model_spec(const std::string& json_text, const std::string& name);

// The checks parse_model_spec applies (positive sizes, heads dividing hidden,
// kv heads dividing heads, top-k within the experts, MoE layer pattern), for
// specs built or changed in code. Messages name the field and the fix.
Status validate_model_spec(const ModelSpec& model);

// Reads and parses a file. A bare name ("llama-3-8b") is looked up as
// models/<name>.json ($LOOM_HOME, then the source tree) as well.
Result<ModelSpec> load_model_spec(const std::string& path_or_name);

// Scale-down for rehearsal: keeps the family (norm, MLP, positions, GQA ratio
// where possible, MoE routing) and replaces the given sizes. Zero = keep.
struct ModelScale {
  int num_layers = 0;
  int64_t hidden = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int64_t ffn_hidden = 0;
  int64_t vocab = 0;
  int num_experts = 0;
  int64_t max_position = 0;
};
// Parses "layers=4,hidden=256,heads=4,kv_heads=2,ffn=1024,vocab=512,experts=4,seq=256"
// (any subset; seq sets max_position). kInvalidArgument names an unknown key, a
// repeated key, or a value that is not a positive integer.
Result<ModelScale> parse_model_scale(const std::string& text);
// When hidden or heads is given, head_dim = hidden / heads (heads must divide
// hidden) and kv heads keep the GQA ratio (else the nearest divisor of heads
// below it); MLA dims follow head_dim and the LoRA ranks scale with hidden.
// ffn given: expert sizes keep their ratio to the dense MLP. Leading dense
// layers are kept while at least one MoE layer remains. The result is named
// "<name>-scaled" and passes validate_model_spec (else kInvalidArgument).
Result<ModelSpec> scale_model(const ModelSpec& model, const ModelScale& scale);

// The spec as HF-style config.json text (round-trips through parse_model_spec).
std::string model_spec_to_json(const ModelSpec& model);

}  // namespace loom
