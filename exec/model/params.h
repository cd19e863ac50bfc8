// Parameters of one rank's slice of the model, named by their GLOBAL name and
// shape, with this rank's slice of it. Nothing about the layout is baked into
// names: "layers.3.attn.q.weight" is the same tensor under every layout, and
// every rank initializes its slice from (seed, global name, global element
// index) alone, so runs under different layouts start from identical weights.
//
// Sharding (Megatron TP): column-parallel weights (q, k, v, fc1, gate, up,
// the vocab-parallel embedding and LM head) are split along dim 0 (outputs);
// row-parallel weights (attention output, fc2, down) along dim 1 (inputs);
// norms, position embeddings and row-parallel biases are replicated.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/model_spec.h"
#include "core/status.h"
#include "exec/backend/compute_backend.h"

namespace loom::exec {

enum class ShardKind : uint8_t { kReplicated, kSplitDim0, kSplitDim1 };

struct ParamInfo {
  std::string name;
  std::vector<int64_t> global_shape;  // 1-D or 2-D, row-major
  ShardKind shard = ShardKind::kReplicated;
  int64_t shard_offset = 0;           // first global index along the split dim
  std::vector<int64_t> local_shape;
  int64_t numel = 0;                  // local elements
  size_t offset = 0;                  // into the flat parameter / gradient buffers
  float init_std = 0;                 // > 0: normal(0, std); else the constant init_value
  float init_value = 0;
  bool weight_decay = true;           // matrices decay; norms, biases and positions do not
  // Replicated over TP with a gradient every TP rank computes whole (the MoE
  // router sees every token): never summed over TP under sequence parallelism.
  bool tp_whole_grad = false;
  // A routed expert's weight: synchronized over the expert-data-parallel
  // group (the DP ranks holding the same experts), not the whole DP group.
  bool expert = false;
};

// Deterministic N(0, 1) sample for (seed, name, index): the same on every rank
// and layout (SplitMix64 counter hashing + Box-Muller).
float init_normal(uint64_t seed, const std::string& name, int64_t global_index);
// The same draw split in two: the per-tensor stream (hash of seed and name),
// then the element's value; init_normal(s, n, i) == init_normal_at(init_stream(s, n), i).
uint64_t init_stream(uint64_t seed, const std::string& name);
float init_normal_at(uint64_t stream, int64_t global_index);

// The mixture-of-experts part of a model (Mixtral / Qwen-MoE blocks): E
// routed SwiGLU experts of intermediate size F, top-k routing, optional
// always-active shared experts (one SwiGLU MLP of Fs).
struct MoeDims {
  int E = 0, k = 0;
  int64_t F = 0;
  int64_t Fs = 0;
  bool shared_gate = false;     // Qwen2-MoE: the shared experts' output scaled by sigmoid(h . w_g)
  bool normalize = true;        // top-k weights renormalized (Mixtral, norm_topk_prob)
  std::vector<char> layer_moe;  // per global layer: 1 when the layer's MLP is MoE
  bool enabled() const { return E > 0; }
  bool is_moe(int layer) const { return enabled() && layer_moe[size_t(layer)] != 0; }
};

// Model dimensions the executor needs, derived from a ModelSpec.
struct ModelDims {
  bool gpt2 = true;        // GPT-2 block (LayerNorm, GELU, biases, learned positions) vs Llama block
  int64_t C = 0;           // hidden
  int64_t F = 0;           // MLP intermediate
  int64_t Hq = 0, Hk = 0;  // heads, KV heads
  int64_t D = 0;           // head dim
  int64_t V = 0;           // vocabulary
  int64_t Vp = 0;          // padded to a multiple of 64 (so any tp <= 64 dividing 64 splits it)
  int64_t max_pos = 0;
  int L = 0;
  bool tied = true;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.f;
  // Per-dimension RoPE inverse frequencies (D/2) when the config scales RoPE
  // (Llama-3.1 rope_scaling); empty: theta^(-2i/D) from rope_theta.
  std::vector<double> rope_inv_freq;
  // Llama blocks only (a GPT-2 block always has every bias):
  bool qkv_bias = false;   // q, k, v projections (Qwen2, Llama attention_bias)
  bool o_bias = false;     // attention output projection (Llama attention_bias)
  bool mlp_bias = false;   // gate, up, down (Llama mlp_bias)
  bool qk_norm = false;    // per-head RMSNorm of q and k before RoPE (Qwen3), weights (D) shared by heads
  MoeDims moe;
};
// Refuses (kUnsupported, naming the config field) what the executor cannot
// honour: MoE routing other than softmax top-k (DeepSeek's groups and bias), MLA, mixed families, an activation other than the family's,
// RoPE scaling other than Llama-3.1's, an attention window shorter than
// `seq_len` (0: not checked).
Result<ModelDims> model_dims(const ModelSpec& spec, int64_t seq_len = 0);

class ParamStore {
 public:
  // Adds a parameter; `split_size` / `split_rank` give this rank's TP slice.
  void add(const std::string& name, std::vector<int64_t> global_shape, ShardKind shard, int split_size,
           int split_rank, float init_std, float init_value, bool weight_decay);
  // Flags (ParamInfo): the parameter `name`, or those from index `from` on.
  void mark_tp_whole_grad(const std::string& name) { infos_[index_.at(name)].tp_whole_grad = true; }
  void mark_expert(size_t from) {
    for (size_t i = from; i < infos_.size(); ++i) infos_[i].expert = true;
  }
  // Leaves `n` unused elements (ZeRO shards of equal size).
  void add_padding(int64_t n) {
    padding_.push_back({total_, n});
    total_ += n;
  }
  // Allocates the flat buffers and initializes every parameter.
  void materialize(ComputeBackend* backend, uint64_t seed);

  float* param(const std::string& name) const;  // LOOM_CHECKs the name exists
  float* grad(const std::string& name) const;
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  const ParamInfo& info(const std::string& name) const;
  const std::vector<ParamInfo>& infos() const { return infos_; }
  int64_t numel() const { return total_; }
  float* params() const { return params_.f32(); }
  ComputeBackend* backend() const { return backend_; }
  float* grads() const { return grads_.f32(); }
  void zero_grads();

 private:
  std::vector<ParamInfo> infos_;
  std::unordered_map<std::string, size_t> index_;
  int64_t total_ = 0;
  std::vector<std::pair<int64_t, int64_t>> padding_;  // (offset, count): zeros
  ComputeBackend* backend_ = nullptr;
  DeviceBuffer params_, grads_;
};

// Which of a layer's parameters add_layer_params adds: all, all but the
// routed experts', or only the routed experts' (the trainer keeps experts in
// units of their own: they sync over another group).
enum class LayerParams { kAll, kDense, kExperts };
// The routed experts rank `ep_rank` of `ep_size` holds: [first, first + count).
struct ExpertRange {
  int first = 0, count = 0;
};
ExpertRange local_experts(const MoeDims& m, int ep_size, int ep_rank);
// "layers.3.mlp.experts.5." : an expert's global name prefix.
std::string expert_prefix(int layer, int expert);

// The parameters of the global model chunk made of layers [first, first+count),
// with the embedding when `has_embedding`, and the final norm + LM head (or the
// tied embedding's copy) when `has_head`.
void add_chunk_params(ParamStore& store, const ModelDims& d, int first_layer, int num_layers, bool has_embedding,
                      bool has_head, int tp_size, int tp_rank);
// The pieces add_chunk_params is made of, for callers that lay parameters out
// themselves (the trainer keeps the tied embedding in its own ZeRO unit).
void add_word_embedding_param(ParamStore& store, const ModelDims& d, int tp_size, int tp_rank);  // "embed.wte"
void add_embedding_params(ParamStore& store, const ModelDims& d, int tp_size, int tp_rank, bool include_wte);
void add_layer_params(ParamStore& store, const ModelDims& d, int first_layer, int num_layers, int tp_size, int tp_rank,
                      int ep_size = 1, int ep_rank = 0, LayerParams which = LayerParams::kAll, bool folded = false);
void add_head_params(ParamStore& store, const ModelDims& d, int tp_size, int tp_rank);  // final norm (+ untied head)

}  // namespace loom::exec
