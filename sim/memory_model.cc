#include "sim/memory_model.h"

#include <algorithm>
#include <cstdio>

#include "sim/compute_model.h"

namespace loom {

bool embedding_copy_on_last_stage(const ModelSpec& m, int pp) {
  return pp > 1 && (m.tied_embeddings || m.num_mtp_layers > 0);
}

StageParams stage_params(const ModelSpec& m, const Layout& l, const StageSplit& split, int stage) {
  StageParams p;
  const double t = l.tp;
  // `layers` transformer blocks, `moe_layers` of them MoE. Attention and MLP
  // weights are split over TP; the norms are replicated.
  auto add_blocks = [&](double layers, double moe_layers) {
    p.dense += layers * (double(m.attention_params()) / t + double(m.norm_params_per_layer()));
    p.dense += (layers - moe_layers) * double(m.dense_mlp_params()) / t;
    p.dense += moe_layers * (double(m.router_params()) + double(m.shared_expert_params()) / t);
    p.expert += moe_layers * (double(m.moe.num_experts) / l.ep) * double(m.expert_params()) / t;
  };
  add_blocks(split.stage_layers(stage), split.stage_moe_layers(stage));
  if (stage == 0) p.dense += double(m.embedding_params()) / t + double(m.position_params());
  if (stage == l.pp - 1) {
    p.dense += double(m.final_norm_params());
    if (!m.tied_embeddings) p.dense += double(m.lm_head_params()) / t;
    // The embedding's copy: the tied head's matrix, or the one multi-token
    // prediction keeps.
    if (embedding_copy_on_last_stage(m, l.pp)) p.dense += double(m.embedding_params()) / t;
    // Multi-token-prediction modules (DeepSeek-V3 section 2.2), on the last
    // stage: a block like the last layer, two RMSNorms and a 2h x h
    // projection each; the output head and the embedding are shared.
    if (m.num_mtp_layers > 0) {
      const double mtp = m.num_mtp_layers, h = double(m.hidden);
      add_blocks(mtp, m.is_moe_layer(m.num_layers - 1) ? mtp : 0.0);
      p.dense += mtp * (2 * h + 2 * h * h / t);
    }
  }
  return p;
}

namespace {
}  // namespace

double layer_activation_bytes(const ModelSpec& m, const Layout& l, const SimOptions& opt, int64_t seq,
                              Precision precision, bool moe_layer) {
  const double e = element_bytes(precision), t = l.tp, s = double(seq), b = l.micro_batch;
  const double T = b * s, h = double(m.hidden), a = m.num_heads;
  const double r = l.sequence_parallel ? 1.0 / t : 1.0;
  const bool dropout = uses_dropout(m, opt);
  double qk_dim = double(m.head_dim), v_dim = double(m.head_dim), kv_heads = m.num_kv_heads;
  if (m.mla.enabled) {
    qk_dim = double(m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim);
    v_dim = double(m.mla.v_head_dim);
    kv_heads = a;
  }
  // FP8 training: Transformer Engine keeps a linear layer's input for the
  // weight gradient as its FP8 copy (1 byte; on Hopper the transposed copy
  // the TN-only FP8 GEMM needs), not the 16-bit tensor.
  const double e8 = precision == Precision::kFp8 ? 1.0 : e;
  double bytes = 0;
  bytes += 2 * T * h * e * r;  // inputs of the two norms
  // attention
  bytes += T * h * e8 * r;                                            // QKV input
  bytes += T * (a * qk_dim + kv_heads * qk_dim + kv_heads * v_dim) * e / t;  // Q, K, V
  bytes += T * a * v_dim * e8 / t;                                    // projection input
  // Qwen3's per-head q/k RMSNorm keeps q and k before the norm and an fp32
  // rstd per head and token (biases keep nothing).
  if (m.qk_norm && !m.mla.enabled) bytes += T * (a + kv_heads) * (qk_dim * e + 4) / t;
  if (dropout) bytes += T * h * r;                                    // attention-output dropout mask
  if (l.recompute == Recompute::kNone) {
    if (opt.flash_attention) {
      bytes += T * (a / t) * 4;  // softmax log-sum-exp per row (fp32)
    } else {
      bytes += b * (a / t) * s * s * (dropout ? 2 * e + 1 : e);  // softmax out (+ mask + dropout out)
    }
  } else if (opt.flash_attention) {
    bytes += T * (a / t) * 4;
  }
  // MLP or experts
  bytes += T * h * (moe_layer ? e : e8) * r;  // MLP input (16-bit for the router)
  // GELU: fc1 out, gelu out; SwiGLU: gate, up, product. The last is the
  // down projection's input (FP8 under FP8 training).
  double mats = m.mlp == MlpKind::kSwiGlu ? 3 : 2;
  const double act_bytes = (mats - 1) * e + e8;
  if (!moe_layer) {
    bytes += T * double(m.ffn_hidden) * act_bytes / t;
  } else {
    const double k = m.moe.experts_per_token;
    bytes += T * r * m.moe.num_experts * 4;                           // router probabilities (fp32)
    // Tokens are gathered over TP before dispatch (SP or not): every TP rank
    // computes its f/t slice of the experts for all T*k routed tokens.
    bytes += T * k * h * e8;                                          // dispatched tokens (expert fc1 input)
    bytes += T * k * double(m.moe.expert_ffn_hidden) * act_bytes / t;
    if (m.moe.num_shared_experts > 0)
      bytes += T * double(m.moe.shared_expert_ffn_hidden) * m.moe.num_shared_experts * act_bytes / t;
  }
  if (dropout) bytes += T * h * r;  // MLP-output dropout mask
  return bytes;
}

double layer_checkpoint_bytes(const ModelSpec& m, const Layout& l, int64_t seq, Precision precision) {
  double r = l.sequence_parallel ? 1.0 / l.tp : 1.0;
  return double(l.micro_batch) * double(seq) * double(m.hidden) * element_bytes(precision) * r;
}

int64_t in_flight_micro_batches(const Layout& l, int64_t m, int stage) {
  const int64_t p = l.pp;
  switch (l.schedule) {
    case Schedule::kGpipe: return m;
    case Schedule::k1F1B: return std::min<int64_t>(p - stage, m);
    case Schedule::kInterleaved: {
      int64_t v = l.virtual_stages;
      return std::min<int64_t>(m * v, (p - stage - 1) * 2 + (v - 1) * p + 1);
    }
  }
  return m;
}

StateBytes state_bytes_per_param(Precision p, const SimOptions& opt) {
  StateBytes s;
  if (p == Precision::kFp32) {
    s.weights = 4;
    s.grads = 4;
    s.optimizer = 8;  // Adam m and v; the weights are the master copy
  } else {
    // fp8: 16-bit weights + an fp8 copy for the GEMMs; with fp8_params the
    // FP8 weight and its transpose only.
    s.weights = p == Precision::kFp8 ? (opt.fp8_params ? 2 : 3) : 2;
    s.grads = opt.fp32_main_grads ? 4 : 2;
    s.optimizer = 12;  // fp32 master, m, v
  }
  return s;
}

ActivationTerms activation_terms(const ModelSpec& m, const Layout& l, const TrainSpec& train, const SimOptions& opt) {
  ActivationTerms a;
  a.dense = layer_activation_bytes(m, l, opt, train.seq_len, train.precision, false);
  a.moe = m.is_moe() ? layer_activation_bytes(m, l, opt, train.seq_len, train.precision, true) : 0;
  a.checkpoint = layer_checkpoint_bytes(m, l, train.seq_len, train.precision);
  return a;
}

StageMemory stage_memory(const ModelSpec& m, const Layout& l, const TrainSpec& train, const SimOptions& opt,
                         const StageSplit& split, int stage) {
  return stage_memory(m, l, train, opt, split, stage, activation_terms(m, l, train, opt));
}

StageMemory stage_memory(const ModelSpec& m, const Layout& l, const TrainSpec& train, const SimOptions& opt,
                         const StageSplit& split, int stage, const ActivationTerms& act) {
  StageMemory sm;
  sm.stage = stage;
  sm.layers = split.stage_layers(stage);
  StageParams params = stage_params(m, l, split, stage);
  sm.params = params.total();
  StateBytes sb = state_bytes_per_param(train.precision, opt);
  const double n_dense = l.dp, n_expert = double(l.dp) / l.ep;
  auto sharded = [&](double bytes_per_param, int from_stage) {
    double d = params.dense * bytes_per_param, x = params.expert * bytes_per_param;
    if (l.zero >= from_stage) {
      d /= n_dense;
      x /= n_expert;
    }
    return d + x;
  };
  sm.weights_bytes = sharded(sb.weights, 3);
  sm.grads_bytes = sharded(sb.grads, 2);
  sm.optimizer_bytes = sharded(sb.optimizer, 1);
  // Loom's own executor (no framework named; exec/runtime/data_parallel.cc)
  // shards ZeRO states its own way: under ZeRO >= 1 the owned shard's
  // gradient has a buffer of its own beside the full gradient; ZeRO-2/3 give
  // a model chunk's full gradient back after its reduce-scatter, so one
  // chunk's is live at a time; ZeRO-3 gathers a chunk's weights in place for
  // its use (one chunk at a time, the rest held as shards).
  const bool loom_executor = opt.framework.empty();
  if (loom_executor && l.zero >= 1) {
    const double chunks = l.schedule == Schedule::kInterleaved ? l.virtual_stages : 1;
    const double full_grads = params.total() * sb.grads, full_weights = params.total() * sb.weights;
    sm.grads_bytes = (l.zero >= 2 ? full_grads / chunks : full_grads) + sharded(sb.grads, 1);
    if (l.zero == 3) sm.weights_bytes = sharded(sb.weights, 3) + full_weights / chunks * (1 - 1.0 / n_dense);
  }

  // Activations held at the stage's peak.
  const int64_t micro_batches = l.num_micro_batches(train.global_batch);
  const int64_t in_flight = in_flight_micro_batches(l, micro_batches, stage);
  const double e = element_bytes(train.precision);
  const double T = double(l.micro_batch) * double(train.seq_len), h = double(m.hidden);
  const double r = l.sequence_parallel ? 1.0 / l.tp : 1.0;
  const int layers = sm.layers, moe_layers = split.stage_moe_layers(stage), dense_layers = layers - moe_layers;
  // Interleaved counts chunk-micro-batches: each holds layers / v layers.
  const double per_unit = l.schedule == Schedule::kInterleaved ? 1.0 / l.virtual_stages : 1.0;
  const double act_dense = act.dense, act_moe = moe_layers ? act.moe : 0;
  if (l.recompute == Recompute::kFull) {
    sm.activations_bytes = double(in_flight) * per_unit * layers * act.checkpoint;
    // Backward of one layer re-materializes that layer's activations.
    sm.activations_bytes += std::max(act_dense, act_moe);
  } else {
    sm.activations_bytes = double(in_flight) * per_unit * (dense_layers * act_dense + moe_layers * act_moe);
  }
  if (stage == 0 && uses_dropout(m, opt)) sm.activations_bytes += double(in_flight) * T * h * r;  // embedding dropout
  if (stage == l.pp - 1) {
    // One micro-batch's logits: in a framework, 16-bit logits and the fp32
    // copy its cross-entropy makes (Megatron's vocab-parallel loss upcasts);
    // Loom's executor (no framework) writes fp32 logits and turns them into
    // their gradient in place (exec/model/chunk.cc): one fp32 buffer.
    const double logit_bytes = opt.framework.empty() ? 4 : e + 4;
    sm.activations_bytes += T * (double(m.vocab) / l.tp) * logit_bytes + T * h * e * r;
    // Multi-token prediction: each module's block for every micro-batch in
    // flight (as the stage's layers), the concatenated 2h projection input,
    // and its own head's logits.
    if (m.num_mtp_layers > 0) {
      const double block = l.recompute == Recompute::kFull ? act.checkpoint
                           : m.is_moe_layer(m.num_layers - 1) ? act.moe : act.dense;
      sm.activations_bytes += m.num_mtp_layers * (double(in_flight) * per_unit * (block + 2 * T * h * e * r) +
                                                  T * (double(m.vocab) / l.tp) * (e + 4));
    }
  }

  // Communication buffers.
  double comm = 0;
  if (l.pp > 1) comm += 2 * T * h * e * r;                   // p2p send / recv buffers
  if (l.tp > 1 && l.sequence_parallel) comm += T * h * e;    // all-gathered activation
  if (l.zero == 3 && !loom_executor) {
    // Two layers of gathered (unsharded) weights: the one in use and the prefetch.
    double layer_params = layers ? (params.total() / std::max(1, layers)) : 0;
    comm += 2 * layer_params * sb.weights;
  }
  if (moe_layers > 0 && l.ep > 1) comm += 2 * T * r * m.moe.experts_per_token * h * e;  // a2a send/recv
  sm.comm_buffer_bytes = comm;

  // Fragmentation comes from the tensors allocated and freed every micro-
  // batch (activations, communication buffers). Weights, gradients and
  // optimizer states live in buffers allocated once (Megatron's contiguous
  // param-and-grad buffers, the distributed optimizer's shards, Loom's flat
  // arrays), which the caching allocator does not fragment.
  const double transient = sm.activations_bytes + comm;
  sm.overhead_bytes = opt.runtime_reserve_bytes + opt.fragmentation_fraction * transient;
  return sm;
}

MemoryReport memory_report(const ModelSpec& m, const HwProfile& hw, const Layout& l, const TrainSpec& train,
                           const SimOptions& opt) {
  MemoryReport r;
  r.capacity_bytes = hw.accel.memory_bytes;
  StageSplit split = split_layers(m, l);
  const ActivationTerms act = activation_terms(m, l, train, opt);
  for (int s = 0; s < l.pp; ++s) {
    r.stages.push_back(stage_memory(m, l, train, opt, split, s, act));
    if (r.stages.back().total_bytes() > r.stages[r.worst_stage].total_bytes()) r.worst_stage = s;
  }
  r.fits = r.peak_bytes() <= r.capacity_bytes;
  return r;
}

std::string MemoryReport::why_not() const {
  if (fits || stages.empty()) return "";
  const StageMemory& s = stages[worst_stage];
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "stage %d needs %.1f GB of %.1f GB: over by %.1f GB (weights %.1f, grads %.1f, optimizer %.1f, "
                "activations %.1f, buffers %.1f, overhead %.1f GB)",
                s.stage, s.total_bytes() / 1e9, capacity_bytes / 1e9, (s.total_bytes() - capacity_bytes) / 1e9,
                s.weights_bytes / 1e9, s.grads_bytes / 1e9, s.optimizer_bytes / 1e9, s.activations_bytes / 1e9,
                s.comm_buffer_bytes / 1e9, s.overhead_bytes / 1e9);
  return buf;
}

}  // namespace loom
