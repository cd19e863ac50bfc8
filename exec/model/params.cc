#include "exec/model/params.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <cstring>

#include "core/mix.h"
#include "exec/backend/memory_ledger.h"

namespace loom::exec {

namespace {

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

uint64_t init_stream(uint64_t seed, const std::string& name) { return splitmix64(seed ^ splitmix64(name_hash(name))); }

float init_normal(uint64_t seed, const std::string& name, int64_t index) {
  return init_normal_at(init_stream(seed, name), index);
}

float init_normal_at(uint64_t base, int64_t index) {
  uint64_t a = splitmix64(base ^ (uint64_t(index) * 2 + 0));
  uint64_t b = splitmix64(base ^ (uint64_t(index) * 2 + 1));
  double u1 = (double(a >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  double u2 = double(b >> 11) * (1.0 / 9007199254740992.0);
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

Result<ModelDims> model_dims(const ModelSpec& s, int64_t seq_len) {
  ModelDims d;
  if (s.mla.enabled) return unsupported("execute: multi-latent attention (" + s.name + ") is not executable yet");
  d.gpt2 = s.norm == NormKind::kLayerNorm;
  if (d.gpt2 != (s.mlp == MlpKind::kGelu) || d.gpt2 != (s.position == PositionKind::kLearned))
    return unsupported("execute: " + s.name + " mixes GPT-2 and Llama block features; use one family");
  d.C = s.hidden;
  d.F = s.ffn_hidden;
  d.Hq = s.num_heads;
  d.Hk = s.num_kv_heads;
  d.D = s.head_dim;
  d.V = s.vocab;
  d.Vp = (s.vocab + 63) / 64 * 64;
  d.max_pos = s.max_position;
  d.L = s.num_layers;
  d.tied = s.tied_embeddings;
  d.norm_eps = float(s.norm_eps);
  if (d.gpt2) {
    // The GELU kernels are the tanh approximation (gelu_new / gelu_pytorch_tanh).
    if (!s.activation.empty() && s.activation != "gelu_new" && s.activation != "gelu_pytorch_tanh")
      return unsupported("execute: " + s.name + ": activation_function=\"" + s.activation +
                         "\" cannot be run: the executor's GELU is the tanh approximation (gelu_new); use gelu_new");
    return d;
  }
  if (!s.activation.empty() && s.activation != "silu" && s.activation != "swish")
    return unsupported("execute: " + s.name + ": hidden_act=\"" + s.activation +
                       "\" cannot be run: the executor's gated MLP is SwiGLU (silu); use silu");
  if (s.head_dim % 2 != 0)
    return invalid_argument("execute: " + s.name + ": head_dim=" + std::to_string(s.head_dim) +
                            " is odd; RoPE needs an even head dim");
  d.rope_theta = float(s.rope_theta);
  if (s.rope_scaling.enabled()) {
    if (s.rope_scaling.type != "llama3")
      return unsupported("execute: " + s.name + ": rope_scaling type \"" + s.rope_scaling.type +
                         "\" cannot be run: the executor implements Llama-3.1's \"llama3\" RoPE scaling only");
    d.rope_inv_freq = rope_inverse_frequencies(s, s.head_dim);
  }
  if (s.sliding_window > 0 && seq_len > s.sliding_window)
    return unsupported("execute: " + s.name + ": sliding_window=" + std::to_string(s.sliding_window) +
                       " is shorter than seq_len=" + std::to_string(seq_len) +
                       " and the executor's attention is full causal attention; use --seq <= " +
                       std::to_string(s.sliding_window) + " (the window then covers every position)");
  d.qkv_bias = s.qkv_bias || s.linear_bias;
  d.o_bias = s.attn_out_bias || s.linear_bias;
  d.mlp_bias = s.mlp_bias || s.linear_bias;
  d.qk_norm = s.qk_norm;
  if (s.is_moe()) {
    const MoeSpec& e = s.moe;
    if (e.num_groups > 0 || e.router_bias)
      return unsupported("execute: " + s.name + ": group-limited or bias-corrected routing (DeepSeek's n_group / "
                         "e_score_correction_bias) cannot be run: the executor routes by softmax top-k (Mixtral, "
                         "Qwen-MoE)");
    if (d.mlp_bias)
      return unsupported("execute: " + s.name + ": mlp_bias on a mixture-of-experts model cannot be run; the "
                         "executor's experts have no biases (as Mixtral's and Qwen-MoE's)");
    d.moe.E = e.num_experts;
    d.moe.k = e.experts_per_token;
    d.moe.F = e.expert_ffn_hidden;
    d.moe.Fs = int64_t(e.num_shared_experts) * e.shared_expert_ffn_hidden;
    d.moe.normalize = e.norm_topk_prob;
    d.moe.shared_gate = e.shared_expert_gate && d.moe.Fs > 0;
    d.moe.layer_moe.assign(size_t(s.num_layers), 0);
    for (int l = 0; l < s.num_layers; ++l) d.moe.layer_moe[size_t(l)] = s.is_moe_layer(l) ? 1 : 0;
  }
  return d;
}

ExpertRange local_experts(const MoeDims& m, int ep_size, int ep_rank) {
  const int n = m.E / ep_size;
  return {n * ep_rank, n};
}

std::string expert_prefix(int layer, int expert) {
  return "layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(expert) + ".";
}

void ParamStore::add(const std::string& name, std::vector<int64_t> global_shape, ShardKind shard, int split_size,
                     int split_rank, float init_std, float init_value, bool weight_decay) {
  ParamInfo p;
  p.name = name;
  p.global_shape = global_shape;
  p.shard = split_size > 1 ? shard : ShardKind::kReplicated;
  p.local_shape = global_shape;
  if (p.shard != ShardKind::kReplicated) {
    int dim = p.shard == ShardKind::kSplitDim0 ? 0 : 1;
    LOOM_CHECK(int(global_shape.size()) > dim && global_shape[dim] % split_size == 0,
               name + ": dimension not divisible by the TP size");
    p.local_shape[dim] = global_shape[dim] / split_size;
    p.shard_offset = p.local_shape[dim] * split_rank;
  }
  p.numel = 1;
  for (int64_t x : p.local_shape) p.numel *= x;
  p.init_std = init_std;
  p.init_value = init_value;
  p.weight_decay = weight_decay;
  p.offset = size_t(total_);
  total_ += p.numel;
  index_[name] = infos_.size();
  infos_.push_back(std::move(p));
}

void ParamStore::materialize(ComputeBackend* backend, uint64_t seed) {
  backend_ = backend;
  // Every element is written below (draws, constants, zero padding), so the
  // parameters skip the zero fill; a host-visible backend gets them drawn in
  // place, a device backend through one uninitialized host buffer. Rows are
  // drawn in parallel (first touch included): 355M parameters take well under
  // a second on 16 cores.
  {
    MemoryClassScope charge(MemoryClass::kWeights);
    params_ = DeviceBuffer::uninitialized(backend, size_t(total_) * sizeof(float));
  }
  MemoryClassScope charge(MemoryClass::kGrads);
  grads_ = DeviceBuffer(backend, size_t(total_) * sizeof(float));
  std::unique_ptr<float[]> staging;
  float* host = params_.f32();
  if (!backend->host_visible()) {
    staging.reset(new float[size_t(total_)]);
    host = staging.get();
  }
  for (const auto& [offset, count] : padding_) std::fill_n(host + offset, count, 0.0f);
  for (const ParamInfo& p : infos_) {
    float* dst = host + p.offset;
    if (p.init_std <= 0) {
      std::fill_n(dst, p.numel, p.init_value);
      continue;
    }
    const int64_t rows = p.local_shape[0], cols = p.local_shape.size() > 1 ? p.local_shape[1] : 1;
    const int64_t gcols = p.global_shape.size() > 1 ? p.global_shape[1] : 1;
    // The name is hashed once per tensor; each element depends on (seed,
    // name, global index) only, so any thread count and layout give the
    // same weights.
    const uint64_t base = init_stream(seed, p.name);
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        int64_t gr = r, gc = c;
        if (p.shard == ShardKind::kSplitDim0) gr += p.shard_offset;
        if (p.shard == ShardKind::kSplitDim1) gc += p.shard_offset;
        dst[r * cols + c] = p.init_std * init_normal_at(base, gr * gcols + gc);
      }
    }
  }
  if (staging) backend->copy_to_device(params_.f32(), host, size_t(total_) * sizeof(float));
}

const ParamInfo& ParamStore::info(const std::string& name) const {
  auto it = index_.find(name);
  LOOM_CHECK(it != index_.end(), "unknown parameter " + name);
  return infos_[it->second];
}

float* ParamStore::param(const std::string& name) const { return params_.f32() + info(name).offset; }
float* ParamStore::grad(const std::string& name) const { return grads_.f32() + info(name).offset; }

void ParamStore::zero_grads() {
  if (!grads_.empty()) backend_->fill_zero(grads_.f32(), grads_.bytes());
}

namespace {
float std_weight() { return 0.02f; }
float std_residual(const ModelDims& d) { return 0.02f / std::sqrt(2.0f * float(d.L)); }  // GPT-2's scaled projections
}  // namespace

void add_word_embedding_param(ParamStore& st, const ModelDims& d, int tp, int r) {
  st.add("embed.wte", {d.Vp, d.C}, ShardKind::kSplitDim0, tp, r, std_weight(), 0, true);
}

void add_embedding_params(ParamStore& st, const ModelDims& d, int tp, int r, bool include_wte) {
  if (include_wte) add_word_embedding_param(st, d, tp, r);
  if (d.gpt2) st.add("embed.wpe", {d.max_pos, d.C}, ShardKind::kReplicated, tp, r, 0.01f, 0, false);
}

void add_layer_params(ParamStore& st, const ModelDims& d, int first, int count, int tp, int r, int ep_size,
                      int ep_rank, LayerParams which, bool folded) {
  // Parallel folding: the experts whole on every rank (expert TP size 1).
  const int etp = folded ? 1 : tp, er = folded ? 0 : r;
  const float std_w = std_weight(), std_resid = std_residual(d);
  using S = ShardKind;
  for (int l = first; l < first + count; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    if (which == LayerParams::kExperts) {
      if (!d.moe.is_moe(l)) continue;
      const ExpertRange ex = local_experts(d.moe, ep_size, ep_rank);
      for (int e = ex.first; e < ex.first + ex.count; ++e) {
        const std::string q = expert_prefix(l, e);
        const size_t at = st.infos().size();
        st.add(q + "gate.weight", {d.moe.F, d.C}, S::kSplitDim0, etp, er, std_w, 0, true);
        st.add(q + "up.weight", {d.moe.F, d.C}, S::kSplitDim0, etp, er, std_w, 0, true);
        st.add(q + "down.weight", {d.C, d.moe.F}, S::kSplitDim1, etp, er, std_resid, 0, true);
        st.mark_expert(at);
      }
      continue;
    }
    st.add(p + "ln1.weight", {d.C}, S::kReplicated, tp, r, 0, 1, false);
    if (d.gpt2) st.add(p + "ln1.bias", {d.C}, S::kReplicated, tp, r, 0, 0, false);
    st.add(p + "attn.q.weight", {d.Hq * d.D, d.C}, S::kSplitDim0, tp, r, std_w, 0, true);
    st.add(p + "attn.k.weight", {d.Hk * d.D, d.C}, S::kSplitDim0, tp, r, std_w, 0, true);
    st.add(p + "attn.v.weight", {d.Hk * d.D, d.C}, S::kSplitDim0, tp, r, std_w, 0, true);
    if (d.gpt2 || d.qkv_bias) {
      st.add(p + "attn.q.bias", {d.Hq * d.D}, S::kSplitDim0, tp, r, 0, 0, false);
      st.add(p + "attn.k.bias", {d.Hk * d.D}, S::kSplitDim0, tp, r, 0, 0, false);
      st.add(p + "attn.v.bias", {d.Hk * d.D}, S::kSplitDim0, tp, r, 0, 0, false);
    }
    if (!d.gpt2 && d.qk_norm) {  // one RMSNorm weight over head_dim, shared by every head
      st.add(p + "attn.q_norm.weight", {d.D}, S::kReplicated, tp, r, 0, 1, false);
      st.add(p + "attn.k_norm.weight", {d.D}, S::kReplicated, tp, r, 0, 1, false);
    }
    st.add(p + "attn.o.weight", {d.C, d.Hq * d.D}, S::kSplitDim1, tp, r, std_resid, 0, true);
    if (d.gpt2 || d.o_bias) st.add(p + "attn.o.bias", {d.C}, S::kReplicated, tp, r, 0, 0, false);
    st.add(p + "ln2.weight", {d.C}, S::kReplicated, tp, r, 0, 1, false);
    if (d.gpt2) {
      st.add(p + "ln2.bias", {d.C}, S::kReplicated, tp, r, 0, 0, false);
      st.add(p + "mlp.fc1.weight", {d.F, d.C}, S::kSplitDim0, tp, r, std_w, 0, true);
      st.add(p + "mlp.fc1.bias", {d.F}, S::kSplitDim0, tp, r, 0, 0, false);
      st.add(p + "mlp.fc2.weight", {d.C, d.F}, S::kSplitDim1, tp, r, std_resid, 0, true);
      st.add(p + "mlp.fc2.bias", {d.C}, S::kReplicated, tp, r, 0, 0, false);
    } else if (d.moe.is_moe(l)) {
      st.add(p + "mlp.router.weight", {int64_t(d.moe.E), d.C}, S::kReplicated, tp, r, std_w, 0, true);
      // Whole on every TP rank unless folded (each TP rank routes its share:
      // summed over TP as other replicated weights under SP).
      if (!folded) st.mark_tp_whole_grad(p + "mlp.router.weight");
      if (d.moe.Fs > 0) {
        st.add(p + "mlp.shared.gate.weight", {d.moe.Fs, d.C}, S::kSplitDim0, tp, r, std_w, 0, true);
        st.add(p + "mlp.shared.up.weight", {d.moe.Fs, d.C}, S::kSplitDim0, tp, r, std_w, 0, true);
        st.add(p + "mlp.shared.down.weight", {d.C, d.moe.Fs}, S::kSplitDim1, tp, r, std_resid, 0, true);
        if (d.moe.shared_gate) {
          st.add(p + "mlp.shared_gate.weight", {1, d.C}, S::kReplicated, tp, r, std_w, 0, true);
          st.mark_tp_whole_grad(p + "mlp.shared_gate.weight");
        }
      }
      if (which == LayerParams::kAll)
        add_layer_params(st, d, l, 1, tp, r, ep_size, ep_rank, LayerParams::kExperts, folded);
    } else {
      st.add(p + "mlp.gate.weight", {d.F, d.C}, S::kSplitDim0, tp, r, std_w, 0, true);
      st.add(p + "mlp.up.weight", {d.F, d.C}, S::kSplitDim0, tp, r, std_w, 0, true);
      st.add(p + "mlp.down.weight", {d.C, d.F}, S::kSplitDim1, tp, r, std_resid, 0, true);
      if (d.mlp_bias) {
        st.add(p + "mlp.gate.bias", {d.F}, S::kSplitDim0, tp, r, 0, 0, false);
        st.add(p + "mlp.up.bias", {d.F}, S::kSplitDim0, tp, r, 0, 0, false);
        st.add(p + "mlp.down.bias", {d.C}, S::kReplicated, tp, r, 0, 0, false);
      }
    }
  }
}

void add_head_params(ParamStore& st, const ModelDims& d, int tp, int r) {
  st.add("final_norm.weight", {d.C}, ShardKind::kReplicated, tp, r, 0, 1, false);
  if (d.gpt2) st.add("final_norm.bias", {d.C}, ShardKind::kReplicated, tp, r, 0, 0, false);
  if (!d.tied) st.add("lm_head.weight", {d.Vp, d.C}, ShardKind::kSplitDim0, tp, r, std_weight(), 0, true);
}

void add_chunk_params(ParamStore& st, const ModelDims& d, int first, int count, bool has_embedding, bool has_head,
                      int tp, int r) {
  if (has_embedding) add_embedding_params(st, d, tp, r, true);
  add_layer_params(st, d, first, count, tp, r);
  if (has_head) {
    add_head_params(st, d, tp, r);
    // Tied: the head is the embedding matrix (a second copy on the last stage
    // when the embedding lives on another stage; same name, same init).
    if (d.tied && !has_embedding) add_word_embedding_param(st, d, tp, r);
  }
}

}  // namespace loom::exec
