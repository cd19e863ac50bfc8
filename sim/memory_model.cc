#include "sim/memory_model.h"

#include "core/executor_head.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "sim/compute_model.h"
#include "sim/cp_exchange.h"

namespace loom {

bool embedding_copy_on_last_stage(const ModelSpec& m, const Layout& l) {
  // DualPipeV's V puts the head on the embedding's stage: one copy serves both.
  return l.pp > 1 && l.head_stage() != 0 && (m.tied_embeddings || m.num_mtp_layers > 0);
}

ModelParamCounts model_param_counts(const ModelSpec& m) {
  ModelParamCounts c;
  c.attention = double(m.attention_params());
  c.norms = double(m.norm_params_per_layer());
  c.dense_mlp = double(m.dense_mlp_params());
  c.router = double(m.router_params());
  c.shared_experts = double(m.shared_expert_params());
  c.expert = double(m.expert_params());
  c.embedding = double(m.embedding_params());
  c.position = double(m.position_params());
  c.final_norm = double(m.final_norm_params());
  c.lm_head = double(m.lm_head_params());
  return c;
}

StageParams stage_params(const ModelSpec& m, const Layout& l, const StageSplit& split, int stage) {
  return stage_params(m, model_param_counts(m), l, split, stage);
}

StageParams stage_params(const ModelSpec& m, const ModelParamCounts& c, const Layout& l, const StageSplit& split,
                         int stage) {
  StageParams p;
  const double t = l.tp;
  // `layers` transformer blocks, `moe_layers` of them MoE. Attention and MLP
  // weights are split over TP; the norms are replicated.
  auto add_blocks = [&](double layers, double moe_layers) {
    p.dense += layers * (c.attention / t + c.norms);
    p.dense += (layers - moe_layers) * c.dense_mlp / t;
    p.dense += moe_layers * (c.router + c.shared_experts / t);
    p.expert += moe_layers * (double(m.moe.num_experts) / l.ep) * c.expert / l.expert_tp();
  };
  add_blocks(split.stage_layers(stage), split.stage_moe_layers(stage));
  if (stage == 0) p.dense += c.embedding / t + c.position;
  if (stage == l.head_stage()) {
    p.dense += c.final_norm;
    if (!m.tied_embeddings) p.dense += c.lm_head / t;
    // The embedding's copy: the tied head's matrix, or the one multi-token
    // prediction keeps.
    if (embedding_copy_on_last_stage(m, l)) p.dense += c.embedding / t;
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

BackwardWorkspace executor_backward_workspace(const ModelSpec& m, const Layout& l, int64_t seq) {
  // The executor computes in fp32 (16-bit copies are saved activations only).
  const double f = 4, t = l.tp, N = double(l.micro_batch) * double(seq), C = double(m.hidden);
  const double Nl = l.sequence_parallel ? N / t : N;
  const double F = double(m.ffn_hidden) / t, q = double(m.num_heads) * double(m.head_dim) / t,
               kv = double(m.num_kv_heads) * double(m.head_dim) / t;
  const double flowing = 2 * Nl * C;  // the chunk's dx and dy
  const double gathered = 2 * N * C;   // dfull, dh_part: the whole layer
  const bool gelu = m.norm == NormKind::kLayerNorm;  // the executor's GPT-2 block; RMSNorm blocks use SwiGLU
  // The MLP's backward: GELU's input gradient (fc2's GEMM applies GELU's
  // backward in place, Gemm::dgelu_pre); SwiGLU's down-projection gradient and
  // the gate and up gradients.
  const double mlp = (gelu ? 1 : 3) * N * F;
  double attention = 2 * Nl * C + N * (2 * q + 2 * kv);  // dh, dx_mid, dctx, dq, dk, dv
  if (m.qk_norm) attention += N * (q + kv);                // the normed q, k gradients
  BackwardWorkspace w;
  w.layer = f * (flowing + gathered + std::max(mlp, attention));
  w.mlp_or_attention = f * std::max(mlp, attention);
  w.attention = f * attention;
  // dh_part, dh; the fused head (core/executor_head.h) made dh_part in its
  // forward: a saved activation, not backward workspace.
  w.head = f * (flowing + (executor_head_grad_in_forward(l.zero) ? 0.0 : N * C) + Nl * C);
  return w;
}

double executor_moe_load(const Layout& l, const SimOptions& opt) {
  if (l.ep <= 1) return 1.0;
  const double imbalance = std::max(1.0, opt.moe_load_imbalance);
  return opt.moe_capacity_factor > 0 ? std::min(imbalance, opt.moe_capacity_factor) : imbalance;
}

ExecutorMoeMlp executor_moe_mlp(const ModelSpec& m, const Layout& l, int64_t seq, double load) {
  ExecutorMoeMlp x;
  const bool folded = l.folded_experts() && l.tp > 1;
  const double t = l.tp, N = double(l.micro_batch) * double(seq), C = double(m.hidden);
  const double Nr = folded ? N / t : N, E = m.moe.num_experts, K = m.moe.experts_per_token;
  const double El = E / std::max(1, l.ep);
  const double Fl = double(m.moe.expert_ffn_hidden) / (folded ? 1 : t);
  const double Fsl = double(m.moe.num_shared_experts) * double(m.moe.shared_expert_ffn_hidden) / t;
  const bool shared_gate = m.moe.shared_expert_gate && Fsl > 0;
  const double M = Nr * K, R = M * (l.ep > 1 ? load : 1.0);
  // probs (N,E), lse (N), top-k ids, weights and slots (N k each); with EP
  // and several local experts, the maps to and from expert order (R each).
  x.routing = 4 * (Nr * E + Nr + 3 * Nr * K) + (l.ep > 1 && El > 1 ? 8 * R : 0.0);
  if (shared_gate) x.routing += 4 * N;  // the gate's logit
  x.combine_elems = M * C;                            // yp
  x.expert_elems = R * C + 3 * R * Fl;                // xg, gate, up, SwiGLU product
  x.large_elems = x.combine_elems + x.expert_elems + 3 * N * Fsl + (shared_gate ? N * C : 0.0);
  // Backward, at the grouped GEMMs: the output rows' gradient in expert
  // order, the weights' gradient (N k), the input rows' gradient, and the
  // SwiGLU's three gradients. At the shared experts: the weights' gradient,
  // the gated output's gradient and the gate's, the SwiGLU's three.
  x.grouped_workspace = 4 * (2 * R * C + 3 * R * Fl + Nr * K);
  x.shared_workspace = Fsl > 0 ? 4 * (Nr * K + (shared_gate ? N * C + N : 0.0) + 3 * N * Fsl) : 0.0;
  return x;
}

double executor_layer_activation_bytes(const ModelSpec& m, const Layout& l, int64_t seq, Precision precision,
                                       bool fp32, const ExecutorMoeMlp* moe) {
  const bool half = !fp32 && precision != Precision::kFp32;
  const double large = half ? 2 : 4, residual = half && precision != Precision::kFp16 ? 2 : 4, stat = 4;
  const double t = l.tp, N = double(l.micro_batch) * double(seq), C = double(m.hidden);
  const double Nl = l.sequence_parallel ? N / t : N;
  const double hq = double(m.num_heads) / t, hk = double(m.num_kv_heads) / t, D = double(m.head_dim);
  const double F = double(m.ffn_hidden) / t;
  const bool gelu = m.norm == NormKind::kLayerNorm;
  if (l.recompute == Recompute::kFull) return residual * Nl * C;
  double bytes = residual * 2 * Nl * C;                   // x_in, x_mid
  bytes += large * 2 * N * C;                             // h1, h2
  bytes += stat * (gelu ? 4 : 2) * Nl;                    // norm means (LayerNorm) and rstds
  bytes += large * N * (hq + 2 * hk) * D;                 // q, k, v
  if (m.qk_norm) bytes += large * N * (hq + hk) * D + stat * N * (hq + hk);
  if (l.recompute != Recompute::kSelective) bytes += large * N * hq * D + stat * N * hq;  // ctx, lse
  bytes += moe ? moe->saved(large) : large * (gelu ? 2 : 3) * N * F;  // MLP intermediates
  return bytes;
}

// A dense layer's forward at its largest (exec/model/chunk.cc layer_forward):
// every tensor it makes is live, fp32 until the layer's end, and the MLP's
// second GEMM input is being rounded to 16 bits beside its fp32 form (in
// bf16 / fp16; h1 and h2 already are). Its temporaries too: the norm output
// before the TP gather, the row-parallel output and its reduction.
double executor_layer_forward_peak_bytes(const ModelSpec& m, const Layout& l, int64_t seq, Precision precision) {
  const bool half = precision != Precision::kFp32;
  const double f = 4, t = l.tp, N = double(l.micro_batch) * double(seq), C = double(m.hidden);
  const double Nl = l.sequence_parallel ? N / t : N;
  const double hq = double(m.num_heads) / t, hk = double(m.num_kv_heads) / t, D = double(m.head_dim);
  const double F = double(m.ffn_hidden) / t;
  const bool gelu = m.norm == NormKind::kLayerNorm;
  double bytes = f * 4 * Nl * C;                        // x_in, the norm output, the reduced output o, x_mid
  bytes += 4 * (gelu ? 4 : 2) * Nl;                     // norm statistics
  bytes += (half ? 2 : 4) * 2 * N * C + f * N * C;      // h1, h2; the row-parallel partial output
  bytes += f * N * (hq + 2 * hk) * D;                   // q, k, v
  if (m.qk_norm) bytes += f * N * (hq + hk) * D + 4 * N * (hq + hk);
  bytes += f * N * hq * D + 4 * N * hq;                 // ctx, lse
  bytes += f * (gelu ? 2 : 3) * N * F + (half ? 2 * N * F : 0.0);  // the MLP's, its last being rounded
  return bytes;
}

namespace {

// Loom's executor's transient memory at a stage's peak: activations,
// backward workspace, the step's inputs (sim/memory_model.h).
void executor_transients(const ModelSpec& m, const Layout& l, const TrainSpec& train,
                         const ActivationTerms::Executor& ex, int stage, int layers, int moe_layers,
                         const RecomputedLayers& rc, int top_chunk_kept, double in_flight_units,
                         int64_t micro_batches, const P2pBuffers& p2p, StageMemory* sm) {
  const int64_t seq = train.seq_len / std::max(1, l.cp);  // this rank's tokens of a sequence
  const double T = double(l.micro_batch) * double(seq), h = double(m.hidden);
  const double Nl = l.sequence_parallel ? T / l.tp : T;
  // MoE layers save their routing and expert rows in place of the dense MLP's
  // intermediates. The stage's top layer, whose backward comes first, is MoE
  // when the stage has any (every MoE model Loom ships puts its dense layers first).
  const ExecutorMoeMlp& moe = ex.moe;
  const bool top_moe = moe_layers > 0;
  const double saved_dense = ex.saved_dense;
  // Partial recompute: the layers past a chunk's first recompute_layers keep
  // everything (as without recompute), and the stage's top layer is one of
  // them when its chunk has more layers than that. Otherwise every layer
  // holds the layout's saved tensors.
  const bool partial = l.recompute_layers > 0;
  const double kept_dense = partial ? ex.kept_dense : saved_dense, kept_moe = partial ? ex.kept_moe : ex.saved_moe;
  const double held_layers = in_flight_units * (rc.dense * saved_dense + (layers - moe_layers - rc.dense) * kept_dense +
                                                rc.moe * ex.saved_moe + (moe_layers - rc.moe) * kept_moe);
  const bool top_kept = partial && top_chunk_kept > 0;
  const double saved = top_moe ? (top_kept ? kept_moe : ex.saved_moe) : (top_kept ? kept_dense : saved_dense);
  // What backward adds to the layer it is in: full recompute re-runs the
  // layer's forward in fp32, and the layer's saved input and the re-run's
  // output buffer are freed as soon as it is done, before the backward's own
  // buffers (exec/model/chunk.cc layer_backward), so the layer then holds
  // its fp32 activations in place of its saved input; selective recomputes
  // the attention output and log-sum-exp; 16-bit saves are restored to fp32,
  // except those backward reads only as a weight-gradient GEMM's operand
  // (ChunkConfig::gemm_reads_packed: the norm outputs h1 and, on a dense
  // layer, h2 and the MLP's second GEMM input), which stay in 16 bits.
  const double fp32_layer = top_moe ? ex.fp32_moe : ex.fp32_dense;
  // Under full recompute the re-run forward rounds those same tensors to 16
  // bits as soon as they are made (exec/model/chunk.cc layer_forward).
  double in_backward = fp32_layer - saved;
  if (train.precision != Precision::kFp32) {
    const double F = double(m.ffn_hidden) / l.tp;
    in_backward -= 2 * (T * h + (top_moe ? 0.0 : T * h + T * F));
  }
  // The head keeps from its forward to its backward the fp32 logits of the
  // padded vocabulary slice (turned into their gradient in place), the
  // gathered normed input, the head's input and the norm's statistics. Every
  // micro-batch whose forward is done and backward is not holds them: all m
  // under GPipe, one otherwise (the last stage runs each backward right after
  // its forward). The fused head (ZeRO 0-1, core/executor_head.h) keeps the
  // input's gradient in place of the logits and the normed input; its
  // forward has a moment of its own, at a block's GEMMs: the normed input
  // (local and gathered), the last layer's spare output buffer, and the
  // block's logits and per-row statistics.
  const bool last = stage == l.head_stage();
  const bool fused = executor_head_grad_in_forward(l.zero);
  double head_keep = 0, held_heads = 0, head_fwd_act = 0, head_fwd_ws = 0;
  if (last) {
    const double Vl = double((m.vocab + 63) / 64 * 64) / l.tp;
    const double stats = (m.norm == NormKind::kLayerNorm ? 2 : 1) * Nl;  // mean and rstd, or rstd
    if (fused) {
      head_keep = 4 * (T * h + Nl * h + stats);
      const double R = double(executor_head_block_rows(int64_t(T), int64_t(Vl)));
      head_fwd_act = 4 * (T * h + 2 * Nl * h);
      head_fwd_ws = 4 * (R * Vl + 4 * R);
    } else {
      head_keep = 4 * (T * Vl + T * h + Nl * h + stats);
    }
    held_heads = l.schedule == Schedule::kGpipe ? double(micro_batches) : 1.0;
  }
  // The peak comes inside a backward: of the head (its buffers live, its own
  // temporaries beside them) or of the top layer (that micro-batch's head
  // buffers freed, the layer's temporaries and restored tensors live),
  // whichever needs more.
  const BackwardWorkspace& w = ex.workspace;
  // A MoE top layer's backward: its MLP first (exec/model/moe_layer.cc),
  // at the grouped expert GEMMs (the expert outputs freed) or at the shared
  // experts (the expert rows freed too), then its attention with the MoE
  // state gone; the largest of the three moments.
  double layer_act = in_backward, layer_ws = w.layer;
  if (top_moe) {
    const double flow = w.layer - w.mlp_or_attention;  // the chunk's flowing and gathered gradients
    const double moments[3][2] = {
        {in_backward - 4 * moe.combine_elems, flow + moe.grouped_workspace},
        {in_backward - 4 * (moe.combine_elems + moe.expert_elems), flow + moe.shared_workspace},
        {in_backward - moe.saved(4), flow + w.attention}};
    layer_act = moments[0][0];
    layer_ws = moments[0][1];
    for (const auto& mo : moments)
      if (mo[0] + mo[1] > layer_act + layer_ws) layer_act = mo[0], layer_ws = mo[1];
  }
  // Every candidate moment as (activations, workspace); the stage's peak is
  // the largest, the first of equals in this order: the fused head's
  // forward, the head's backward, the top layer's backward, then a dense
  // layer's forward (below).
  std::array<std::pair<double, double>, 5> moments;
  size_t count = 0;
  if (last && fused) moments[count++] = {held_layers + held_heads * head_keep + head_fwd_act, head_fwd_ws};
  if (last) moments[count++] = {held_layers + held_heads * head_keep, w.head};
  moments[count++] = {held_layers + std::max(0.0, held_heads - 1) * head_keep + layer_act, layer_ws};
  // Two moments inside a dense layer's forward, when it holds its whole
  // working set in fp32 (executor_layer_forward_peak_bytes): the forward
  // itself, beside the chunk's input and output buffers (activations); and
  // under full recompute its re-run in backward, beside the restored input
  // and the re-run's output buffer (the same two (Nl, h) tensors) and the
  // backward's flowing gradients dx, dy (workspace, as large again). Under bf16 / fp16 they can pass the backward's peak, since
  // the saved tensors are 16-bit and the working set is not. (MoE stages:
  // their layers' forward is not modelled here.)
  if (moe_layers == 0 && layers > 0) {
    const double fwd = ex.forward_peak;
    const double in_out = 4 * 2 * Nl * h, flowing = in_out;
    const double others = held_layers - saved + std::max(0.0, held_heads - 1) * head_keep;
    moments[count++] = {others + fwd + in_out, 0.0};
    // The re-run of a recomputed layer; under partial recompute the same
    // micro-batch's kept layers above it in the chunk are freed by then.
    if (l.recompute == Recompute::kFull && rc.dense > 0) {
      const double rerun_others = held_layers - saved_dense - (partial ? top_chunk_kept * kept_dense : 0.0) +
                                  std::max(0.0, held_heads - 1) * head_keep;
      moments[count++] = {rerun_others + fwd + in_out, flowing};
    }
  }
  auto total = [](const std::pair<double, double>& mo) { return mo.first + mo.second; };
  size_t best = 0;
  for (size_t i = 1; i < count; ++i)
    if (total(moments[i]) > total(moments[best])) best = i;
  sm->activations_bytes = moments[best].first;
  sm->workspace_bytes = moments[best].second;
  // Another moment within the pipeline's pending sends of the peak: which of
  // the two a run meets depends on how far the peer has got (the sends a
  // stage holds at each), so both are this stage's peak breakdown.
  if (l.pp > 1) {
    const double margin = double(p2p.at_most - p2p.surely) * 4 * Nl * h;
    for (size_t i = 0; i < count; ++i)
      if (i != best && moments[i] != moments[best] && total(moments[i]) >= total(moments[best]) - margin &&
          total(moments[i]) > sm->alt_activations_bytes + sm->alt_workspace_bytes) {
        sm->alt_activations_bytes = moments[i].first;
        sm->alt_workspace_bytes = moments[i].second;
      }
  }
  // The step's token ids and targets (int32), on the stages that embed or
  // take the loss.
  if (stage == 0 || last) sm->inputs_bytes = 2 * 4 * double(train.global_batch / l.dp) * double(seq);
}

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
  if (l.recompute == Recompute::kSelective && every_other_matmul(opt, precision, moe_layer, m.mla.enabled)) {
    // torchtitan's selective op AC keeps what its policy saves and re-runs the
    // rest (sim/compute_model.cc): the layer's input (the checkpoint's), the
    // outputs of mms 1, 3, 5, 7 of q, k, v, o, gate, up, down (q, v, gate and
    // down's unreduced output; GELU: q, v, fc1), the attention kernel's output
    // and log-sum-exp, and the reduce-scatters' outputs (SP).
    const double f = double(m.ffn_hidden);
    double kept = T * h * e * r;
    kept += T * a * qk_dim * e / t + T * kv_heads * v_dim * e / t;
    kept += T * a * v_dim * e / t + T * (a / t) * 4;
    kept += T * f * e / t + (m.mlp == MlpKind::kSwiGlu ? T * h * e : 0.0);
    if (l.sequence_parallel && t > 1) kept += 2 * T * h * e * r;
    return kept;
  }
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
  // Megatron's --recompute-modules: selective without core_attn keeps the
  // attention core's tensors as without recompute.
  const unsigned mods = l.selective_modules();
  const bool core_kept = l.recompute == Recompute::kNone || (mods != 0 && !(mods & kRecomputeCoreAttn));
  if (core_kept) {
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
    bytes += T * k * h * e8 * double(l.expert_tp()) / t;              // dispatched tokens (expert fc1 input; folded: 1/t)
    bytes += T * k * double(m.moe.expert_ffn_hidden) * act_bytes / t;
    if (m.moe.num_shared_experts > 0)
      bytes += T * double(m.moe.shared_expert_ffn_hidden) * m.moe.num_shared_experts * act_bytes / t;
  }
  if (dropout) bytes += T * h * r;  // MLP-output dropout mask
  // The modules that re-run drop what they would keep (Megatron-core's
  // output-discarding checkpoints, transformer_layer.py / mlp.py /
  // multi_latent_attention.py at d98e8a64dd).
  double dropped = 0;
  if (mods & kRecomputeLayernorm) {
    // Only norms that are modules of their own: MLA's input norm (TENorm
    // before the down-projections) and a MoE layer's pre-MLP norm; the
    // others are fused into TE's LayerNormLinear (IdentityOp in the spec).
    if (m.mla.enabled) dropped += T * h * e8 * r;  // the down-projections' input
    if (moe_layer) dropped += T * h * e * r;       // the router's input
  }
  if ((mods & kRecomputeMlaUpProj) && m.mla.enabled)
    dropped += T * (a * qk_dim + kv_heads * qk_dim + kv_heads * v_dim) * e / t;  // the up-projected Q, K, V
  if ((mods & kRecomputeMoeAct) && moe_layer)
    dropped += T * m.moe.experts_per_token * double(m.moe.expert_ffn_hidden) * e8 / t;  // the experts' fc2 input
  if ((mods & kRecomputeMlp) && !moe_layer) dropped += T * double(m.ffn_hidden) * act_bytes / t;  // fc1 out, activation
  return bytes - dropped;
}

double layer_checkpoint_bytes(const ModelSpec& m, const Layout& l, int64_t seq, Precision precision) {
  double r = l.sequence_parallel ? 1.0 / l.tp : 1.0;
  return double(l.micro_batch) * double(seq) * double(m.hidden) * element_bytes(precision) * r;
}

int64_t in_flight_micro_batches(const Layout& l, int64_t m, int stage, bool ep_overlap) {
  const int64_t p = l.pp;
  switch (l.schedule) {
    case Schedule::kGpipe: return m;
    case Schedule::k1F1B: return std::min<int64_t>(p - stage, m);
    case Schedule::kInterleaved: {
      int64_t v = l.virtual_stages;
      return std::min<int64_t>(m * v, (p - stage - 1) * 2 + (v - 1) * p + 1 + (ep_overlap ? 1 : 0));
    }
    case Schedule::kDualPipeV:
      // Chunk-micro-batches: 2p + 1 on every stage (the reference order
      // replayed; deepseek-ai/DualPipe's README: PP + 1 for PP stages).
      return std::min<int64_t>(2 * m, 2 * p + 1);
  }
  return m;
}

StateBytes state_bytes_per_param(Precision p, const SimOptions& opt) {
  StateBytes s;
  // Adam's moments (SimOptions::optimizer_moment_bytes); Loom's executor
  // keeps them in fp32.
  const double moment = opt.for_loom_executor() ? 4 : opt.optimizer_moment_bytes;
  if (p == Precision::kFp32) {
    s.weights = 4;
    s.grads = 4;
    s.optimizer = 2 * moment;  // Adam m and v; the weights are the master copy
  } else {
    // fp8: 16-bit weights + an fp8 copy for the GEMMs; with fp8_params the
    // FP8 weight and its transpose only.
    s.weights = p == Precision::kFp8 ? (opt.fp8_params ? 2 : 3) : 2;
    s.grads = opt.fp32_main_grads ? 4 : 2;
    s.optimizer = opt.optimizer_master_bytes + 2 * moment;  // master (fp32, or its 16-bit remainder), m, v
  }
  return s;
}

ActivationTerms activation_terms(const ModelSpec& m, const Layout& l, const TrainSpec& train, const SimOptions& opt,
                                 const ModelParamCounts* counts) {
  ActivationTerms a;
  a.params = counts ? *counts : model_param_counts(m);
  const int64_t seq = train.seq_len / std::max(1, l.cp);  // this rank's tokens of a sequence (CP)
  a.dense = layer_activation_bytes(m, l, opt, seq, train.precision, false);
  a.moe = m.is_moe() ? layer_activation_bytes(m, l, opt, seq, train.precision, true) : 0;
  a.checkpoint = layer_checkpoint_bytes(m, l, seq, train.precision);
  // The same layout keeping every activation: what a layer holds without
  // recompute (torchtitan's re-run ops, partial recompute's kept layers).
  Layout keep_all = l;
  keep_all.recompute = Recompute::kNone;
  keep_all.recompute_layers = 0;
  if (l.recompute == Recompute::kSelective && every_other_matmul(opt, train.precision, false, m.mla.enabled)) {
    a.rerun = std::max(0.0, layer_activation_bytes(m, keep_all, opt, seq, train.precision, false) - a.dense);
  } else if (l.recompute_modules) {
    // Recompute modules: a layer's dropped tensors are whole again while its
    // backward runs (against the same layout keeping them; the attention
    // core as the modules say).
    Layout keep = l;
    keep.recompute_modules = 0;
    if (!(l.recompute_modules & kRecomputeCoreAttn)) keep.recompute = Recompute::kNone;
    a.rerun = std::max(0.0, layer_activation_bytes(m, keep, opt, seq, train.precision, false) - a.dense);
    if (m.is_moe())
      a.rerun_moe = std::max(0.0, layer_activation_bytes(m, keep, opt, seq, train.precision, true) - a.moe);
  }
  const bool partial = l.recompute_layers > 0;
  if (partial) {
    a.kept_dense = layer_activation_bytes(m, keep_all, opt, seq, train.precision, false);
    a.kept_moe = m.is_moe() ? layer_activation_bytes(m, keep_all, opt, seq, train.precision, true) : 0;
  }
  if (opt.for_loom_executor()) {
    ActivationTerms::Executor& ex = a.executor;
    ex.valid = true;
    ex.saved_dense = executor_layer_activation_bytes(m, l, seq, train.precision);
    if (partial) ex.kept_dense = executor_layer_activation_bytes(m, keep_all, seq, train.precision);
    ex.fp32_dense = executor_layer_activation_bytes(m, keep_all, seq, train.precision, true);
    if (m.is_moe()) {
      ex.moe = executor_moe_mlp(m, l, seq, executor_moe_load(l, opt));
      ex.saved_moe = executor_layer_activation_bytes(m, l, seq, train.precision, false, &ex.moe);
      if (partial) ex.kept_moe = executor_layer_activation_bytes(m, keep_all, seq, train.precision, false, &ex.moe);
      ex.fp32_moe = executor_layer_activation_bytes(m, keep_all, seq, train.precision, true, &ex.moe);
    }
    ex.forward_peak = executor_layer_forward_peak_bytes(m, l, seq, train.precision);
    ex.workspace = executor_backward_workspace(m, l, seq);
    ex.p2p = executor_p2p_buffers_per_stage(l, train.global_batch);
  }
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
  StageParams params = stage_params(m, act.params, l, split, stage);
  sm.params = params.total();
  // Loom's executor keeps fp32 weights, gradients and Adam moments in every
  // precision (16-bit copies are made per GEMM, and of saved activations).
  const bool loom_executor = opt.for_loom_executor();
  StateBytes sb = state_bytes_per_param(loom_executor ? Precision::kFp32 : train.precision, opt);
  // ZeRO shards over DP x CP; expert states over the expert-DP group (x TP folded).
  const double n_dense = l.dp * l.cp, n_expert = double(l.dp * l.cp) * (l.tp / l.expert_tp()) / l.ep;
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
  if (loom_executor && l.zero >= 1) {
    const double chunks = l.schedule == Schedule::kInterleaved ? l.virtual_stages : 1;
    const double full_grads = params.total() * sb.grads, full_weights = params.total() * sb.weights;
    sm.grads_bytes = (l.zero >= 2 ? full_grads / chunks : full_grads) + sharded(sb.grads, 1);
    if (l.zero == 3) sm.weights_bytes = sharded(sb.weights, 3) + full_weights / chunks * (1 - 1.0 / n_dense);
  }

  // The pipeline's send / receive buffers of Loom's executor at this stage.
  // `act` computed for the executor: with a pipeline, its buffers per stage.
  if (loom_executor && !act.executor.valid) {
    ActivationTerms ex = activation_terms(m, l, train, opt);
    ex.nccl = act.nccl;
    return stage_memory(m, l, train, opt, split, stage, ex);
  }
  const P2pBuffers p2p = loom_executor && l.pp > 1 ? (*act.executor.p2p)[size_t(stage)] : P2pBuffers{};
  // Activations held at the stage's peak.
  const int64_t micro_batches = l.num_micro_batches(train.global_batch);
  const int64_t in_flight = in_flight_micro_batches(l, micro_batches, stage, ep_overlap_applies(m, opt));
  const double e = element_bytes(train.precision);
  const double T = double(l.micro_batch) * double(train.seq_len / std::max(1, l.cp)), h = double(m.hidden);
  const double r = l.sequence_parallel ? 1.0 / l.tp : 1.0;
  const int layers = sm.layers, moe_layers = split.stage_moe_layers(stage), dense_layers = layers - moe_layers;
  // Interleaved counts chunk-micro-batches: each holds layers / v layers.
  const double per_unit =
      l.schedule == Schedule::kInterleaved || l.schedule == Schedule::kDualPipeV ? 1.0 / l.virtual_stages : 1.0;
  if (loom_executor) {
    const int top_chunk = l.global_chunk(stage, l.virtual_stages - 1);
    const int top_chunk_kept =
        split.chunk_layers[top_chunk] - chunk_recomputed_layers(m, l, split, top_chunk).total();
    executor_transients(m, l, train, act.executor, stage, layers, moe_layers, stage_recomputed_layers(m, l, split, stage),
                        top_chunk_kept, double(in_flight) * per_unit, micro_batches, p2p, &sm);
  } else {
    const double act_dense = act.dense, act_moe = moe_layers ? act.moe : 0;
    // DualPipeV's peak holds 2p - s micro-batches of the stage's chunk 0 and
    // s + 1 of its chunk 1 (its order replayed), whose layers differ where the
    // split pins the first and last chunks: the in-flight units by chunk.
    const bool vee = l.schedule == Schedule::kDualPipeV;
    const double vee_units[2] = {double(std::min<int64_t>(micro_batches, 2 * int64_t(l.pp) - stage)),
                                 double(std::min<int64_t>(micro_batches, stage + 1))};
    // The recomputed layers keep their input only, the others (partial
    // recompute: past the first recompute_layers of a chunk) everything.
    const bool full = l.recompute == Recompute::kFull;
    auto held = [&](int dense, int moe, const RecomputedLayers& x) {
      return full ? x.total() * act.checkpoint + (dense - x.dense) * act.kept_dense + (moe - x.moe) * act.kept_moe
                  : dense * act_dense + moe * act_moe;
    };
    const RecomputedLayers rc = stage_recomputed_layers(m, l, split, stage);
    if (vee) {
      sm.activations_bytes = 0;
      for (int c = 0; c < 2; ++c) {
        const int g = l.global_chunk(stage, c), moe_c = split.chunk_moe_layers[size_t(g)];
        sm.activations_bytes +=
            vee_units[c] * held(split.chunk_layers[size_t(g)] - moe_c, moe_c, chunk_recomputed_layers(m, l, split, g));
      }
    } else {
      sm.activations_bytes = double(in_flight) * per_unit * held(dense_layers, moe_layers, rc);
    }
    if (full) {
      // Backward of one layer re-materializes that layer's activations.
      sm.activations_bytes += std::max(rc.dense > 0 ? act_dense : 0.0, rc.moe > 0 ? act_moe : 0.0);
    } else {
      // torchtitan's selective op AC re-runs a dense layer's unsaved ops in
      // its backward, recompute modules a layer's dropped tensors: that
      // layer's tensors are whole again for a moment.
      sm.activations_bytes += std::max(dense_layers > 0 ? act.rerun : 0.0, moe_layers > 0 ? act.rerun_moe : 0.0);
    }
    // (Under DualPipeV the embedding is chunk 0's, the head chunk 1's, of stage 0.)
    const double first_units = vee ? vee_units[0] : double(in_flight);
    const double head_units = vee ? vee_units[1] : double(in_flight) * per_unit;
    if (stage == 0 && uses_dropout(m, opt)) sm.activations_bytes += first_units * T * h * r;  // embedding dropout
    if (stage == l.head_stage()) {
      // One micro-batch's logits: 16-bit logits and the fp32 copy the
      // framework's cross-entropy makes (Megatron's vocab-parallel loss upcasts).
      sm.activations_bytes += T * (double(m.vocab) / l.tp) * (e + 4) + T * h * e * r;
      // Multi-token prediction: each module's block for every micro-batch in
      // flight (as the stage's layers), the concatenated 2h projection input,
      // and its own head's logits.
      if (m.num_mtp_layers > 0) {
        const double block = l.recompute == Recompute::kFull ? act.checkpoint
                             : m.is_moe_layer(m.num_layers - 1) ? act.moe : act.dense;
        sm.activations_bytes += m.num_mtp_layers * (head_units * (block + 2 * T * h * e * r) +
                                                    T * (double(m.vocab) / l.tp) * (e + 4));
      }
    }
  }

  // Communication buffers. Loom's executor sends fp32 activations and
  // gathers SP's into the saved activations themselves.
  double comm = 0;
  if (l.pp > 1)  // p2p send / recv buffers
    comm += (loom_executor ? p2p.at_most * 4.0 : 2 * e) * T * h * r;
  if (l.tp > 1 && l.sequence_parallel && !loom_executor) comm += T * h * e;  // all-gathered activation
  if (l.zero == 3 && !loom_executor) {
    // Two layers of gathered (unsharded) weights: the one in use and the prefetch.
    double layer_params = layers ? (params.total() / std::max(1, layers)) : 0;
    comm += 2 * layer_params * sb.weights;
  }
  if (moe_layers > 0 && l.ep > 1) comm += 2 * T * r * m.moe.experts_per_token * h * e;  // a2a send/recv
  // The compressed gradient reduction's packed send and receive buffers
  // (exec/runtime/grad_compress.cc), b bytes per gradient each. ZeRO-2/3
  // reduce after every micro-batch and the next one's backward may run while
  // they are in flight (an upper bound: a reduction that completed first has
  // freed them); ZeRO-0/1 start them in the last backward as its activations
  // are freed, after the stage's peak (measured: 0 bytes of them live at the
  // peak of dp=2 ZeRO-0/1, 0 or 2 b per parameter under ZeRO-2/3).
  // Context parallelism's K/V exchange (sim/cp_exchange.h).
  if (l.cp > 1) comm += cp_exchange_buffer_bytes(m, l, T, e, loom_executor);
  if (loom_executor && l.dp * l.cp > 1 && l.zero >= 2 && train.grad_reduce != GradReduce::kFp32)
    comm += 2 * grad_reduce_element_bytes(train.grad_reduce) * params.total();
  sm.comm_buffer_bytes = comm;

  // Fragmentation comes from the tensors allocated and freed every micro-
  // batch (activations, communication buffers). Weights, gradients and
  // optimizer states live in buffers allocated once (Megatron's contiguous
  // param-and-grad buffers, the distributed optimizer's shards, Loom's flat
  // arrays), which the caching allocator does not fragment.
  const double transient = sm.activations_bytes + comm;
  sm.overhead_bytes = opt.runtime_reserve_bytes + opt.fragmentation_fraction * transient + act.nccl.fixed_bytes +
                      pipeline_peers(l, stage) * act.nccl.per_pp_peer_bytes;
  return sm;
}

double usable_memory_bytes(const HwProfile& hw, const SimOptions& opt) {
  return hw.accel.memory_bytes * usable_memory_fraction(opt.memory_headroom);
}

MemoryReport memory_report(const ModelSpec& m, const HwProfile& hw, const Layout& l, const TrainSpec& train,
                           const SimOptions& opt) {
  if (fsdp_once_per_step(l, opt)) return memory_report(m, hw, priced_layout(l, opt), train, opt);
  MemoryReport r;
  r.capacity_bytes = usable_memory_bytes(hw, opt);
  r.device_bytes = hw.accel.memory_bytes;
  StageSplit split = split_layers(m, l);
  ActivationTerms act = activation_terms(m, l, train, opt);
  act.nccl = nccl_p2p_buffers(m, hw, l, opt);
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
  char buf[512], of[96];
  if (device_bytes > capacity_bytes)
    std::snprintf(of, sizeof of, "%.1f GB usable (%.1f GB less the memory headroom)", capacity_bytes / 1e9,
                  device_bytes / 1e9);
  else
    std::snprintf(of, sizeof of, "%.1f GB", capacity_bytes / 1e9);
  std::snprintf(buf, sizeof buf,
                "stage %d needs %.1f GB of %s: over by %.1f GB (weights %.1f, grads %.1f, optimizer %.1f, "
                "activations %.1f, buffers %.1f, workspace %.1f, overhead %.1f GB)",
                s.stage, s.total_bytes() / 1e9, of, (s.total_bytes() - capacity_bytes) / 1e9,
                s.weights_bytes / 1e9, s.grads_bytes / 1e9, s.optimizer_bytes / 1e9, s.activations_bytes / 1e9,
                s.comm_buffer_bytes / 1e9, (s.workspace_bytes + s.inputs_bytes) / 1e9, s.overhead_bytes / 1e9);
  return buf;
}

}  // namespace loom
