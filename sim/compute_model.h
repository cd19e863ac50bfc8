// Compute model: how long one transformer layer (and the embedding / logits
// ends of the model) takes on one rank for one micro-batch, forward and
// backward, including the tensor- and expert-parallel collectives inside it.
//
// GEMMs: time = flops / (peak(precision) * gemm_efficiency(flops)), one entry
// per GEMM of the layer with its real shape (QKV, attention core, projection,
// MLP or routed experts, router, logits). Memory-bound ops (norms, residuals,
// dropout, activations, RoPE, softmax, cross-entropy, optimizer) take
// bytes / (HBM bandwidth * efficiency). Backward = data-gradient + weight-
// gradient GEMMs (2x forward) and about 2x the forward memory traffic.
//
// Collectives inside a layer (Megatron TP: all-reduce after the attention and
// MLP output projections, or reduce-scatter + all-gather with sequence
// parallelism; MoE all-to-all dispatch + combine) come from the comm model on
// the TP / EP group's placement.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "core/hw_profile.h"
#include "core/layout.h"
#include "core/model_spec.h"
#include "sim/comm_model.h"
#include "sim/sim_options.h"

namespace loom {

// Traffic of one rank, by link class, for one category of communication.
struct LinkBytes {
  double bytes[kNumLinkClasses] = {0, 0, 0};
  void add(const CollectiveCost& c, double count) {
    for (int i = 0; i < kNumLinkClasses; ++i) bytes[i] += c.sent_bytes[i] * count;
  }
  void add(const LinkBytes& o, double count = 1) {
    for (int i = 0; i < kNumLinkClasses; ++i) bytes[i] += o.bytes[i] * count;
  }
};

// One layer (or model end) for one micro-batch on one rank.
struct PieceCost {
  double fwd_s = 0;        // compute + exposed TP/EP comm of the forward
  double bwd_s = 0;        // compute + exposed comm of the backward, without recompute
  double recompute_s = 0;  // extra forward work redone in backward
  // The weight-gradient GEMMs inside bwd_s: half the GEMMs' backward (each
  // linear's wgrad has its dgrad's FLOPs). What a zero-bubble schedule
  // (DualPipeV's W) runs apart from the rest of the backward.
  double wgrad_s = 0;
  // The communication parts of the above (already included in them).
  double fwd_tp_s = 0, bwd_tp_s = 0, recompute_tp_s = 0;
  double fwd_ep_s = 0, bwd_ep_s = 0;
  // Executed FLOPs on this rank (for HFU); recompute separately.
  double fwd_flops = 0, bwd_flops = 0, recompute_flops = 0;
  LinkBytes tp_bytes;  // fwd + bwd + recompute
  LinkBytes ep_bytes;
  // Context parallelism's ring (K/V forward; K/V and dK/dV backward): its
  // exposed part is inside fwd_s / bwd_s / recompute_s (the attention waits
  // on it), these are what it sends and its whole time.
  double fwd_cp_s = 0, bwd_cp_s = 0, recompute_cp_s = 0;
  LinkBytes cp_bytes;
  int cp_calls = 0;
  double cp_comm_total_s = 0;
  int tp_calls = 0;    // collectives per micro-batch (fwd+bwd+recompute)
  int ep_calls = 0;
  double tp_comm_total_s = 0;  // all TP collective time, exposed or not
  double ep_comm_total_s = 0;
  // FP8: re-casting this piece's weights to FP8 (and their transposes) once a
  // step, after the optimizer updates them; 0 otherwise.
  double weight_cast_s = 0;
};

// Shapes a cost depends on, gathered once per layout.
struct ComputeShape {
  int64_t tokens = 0;   // b * s tokens of one micro-batch on this rank (b * s / cp under CP)
  int64_t seq = 0;      // s, the whole sequence
  int cp = 1;           // context parallelism: the sequence over cp ranks
  CpComm cp_comm = CpComm::kP2p;  // Layout::cp_comm under CP (kP2p without)
  int tp = 1;
  int ep = 1;
  int etp = 1;          // the experts' TP split: tp, or 1 under parallel folding (EP over TP x DP)
  bool sp = false;
  Recompute recompute = Recompute::kNone;
  unsigned recompute_modules = 0;  // Layout::selective_modules(): what recompute=selective re-runs
  // Loom's executor's fused head (core/executor_head.h): the head's gradient
  // GEMMs run in its forward.
  bool head_grad_in_forward = false;
  GroupShape tp_group;
  GroupShape ep_group;
  GroupShape cp_group;
};

ComputeShape compute_shape(const Layout& layout, int64_t seq_len, const HwProfile& hw);

// Whether dropout masks are kept (SimOptions::dropout, or the model family).
bool uses_dropout(const ModelSpec& model, const SimOptions& opt);

// A dense or MoE transformer layer.
PieceCost layer_cost(const ModelSpec& model, const HwProfile& hw, const SimOptions& opt, Precision precision,
                     const ComputeShape& shape, bool moe_layer);
// The share of a causal flash-attention kernel's SM time that does work when
// it has `heads` (sequences x local query heads) x ceil(q_rows / 128) query
// tiles, one per CTA and one CTA per SM (FlashAttention-2 and -3 at head dim
// 128: kBlockM = 128, hopper/tile_size.h; the backward's key tiles alike):
// tile i of a head scans i key blocks, so the kernel lasts at least its
// longest tile (n blocks) and at least the total work over the SMs,
// heads x n (n + 1) / 2 / sms; the published tables ran with many tiles an SM
// (their sources' batch x heads), where this is 1.
// min(1, heads (n + 1) / (2 sms)).
inline constexpr double kAttentionTileRows = 128;
double attention_tile_occupancy(double heads, double q_rows, int sms);
// A layer's parameters whose gradient Megatron-core's hook adds into the
// main gradient one kernel each (SimOptions::grad_hook_add): norm weights and
// biases, the linears' biases.
int hook_added_params(const ModelSpec& model, bool moe_layer);
// Token (+position) embedding on the first chunk: lookup, TP all-reduce.
PieceCost embedding_cost(const ModelSpec& model, const HwProfile& hw, const SimOptions& opt, Precision precision,
                         const ComputeShape& shape);
// Final norm, logits GEMM and vocab-parallel cross-entropy on the last chunk.
PieceCost head_cost(const ModelSpec& model, const HwProfile& hw, const SimOptions& opt, Precision precision,
                    const ComputeShape& shape);

// One multi-token-prediction module's own work beyond its transformer block
// and its output head (DeepSeek-V3 section 2.2): the next token's embedding,
// two RMSNorms, and the projection of their concatenation (2h) to h,
// column-parallel over TP.
PieceCost mtp_projection_cost(const ModelSpec& model, const HwProfile& hw, const SimOptions& opt, Precision precision,
                              const ComputeShape& shape);

// Optimizer step (AdamW) over `local_params` parameters held by this rank,
// plus the gradient-norm pass: memory bound.
double optimizer_time_s(const HwProfile& hw, const SimOptions& opt, Precision precision, double local_params);
// One pass writing (or reading) `bytes` at the profile's memory rate (a memset).
// What Loom's executor pays to discard `bytes` it writes again later
// (ComputeBackend::discard): at the profile's measured discard rate
// (discard_bytes_per_s; a CPU's page faults), else one memset pass (the
// CUDA backend's), plus one call.
double discard_time_s(const HwProfile& hw, const SimOptions& opt, double bytes);
double memory_pass_time_s(const HwProfile& hw, double bytes);

// The precision of work that FP8 training keeps in 16 bits (attention core,
// LM head, router, parameters and gradients outside the FP8 GEMMs): bf16
// under fp8, otherwise the training precision.
Precision sixteen_bit(Precision p);

// Contention: an NCCL collective keeps one thread block (an SM) per channel
// resident for its whole duration, so compute that overlaps it runs on the
// remaining SMs. The share of compute throughput one overlapped collective
// takes: channels / SMs (0 on CPUs, where the model has no SM count).
double comm_contention_fraction(const HwProfile& hw);
// The share of SMs a MoE all-to-all hidden behind compute takes from it:
// SimOptions::moe_dispatch_sms over the GPU's SMs where the dispatcher states
// its SMs (DeepEP, HybridEP), else comm_contention_fraction (NCCL's channels).
double ep_comm_contention_fraction(const HwProfile& hw, const SimOptions& opt);

// The probability that one of `nodes` nodes, each holding an equal
// contiguous share of the experts, holds at least one of a token's top-k
// experts, under uniform routing. With group-limited routing whose groups
// each lie on one node (num_groups a multiple of nodes) it is the chance
// that one of the node's groups is among the token's topk_groups; otherwise
// the chance that one of its experts is among the token's k. The expected
// number of nodes a token reaches is nodes x this.
double moe_node_hit_probability(const MoeSpec& moe, int nodes);

// One MoE dispatch or combine exchange of the busiest rank, `elem_bytes` a
// hidden element and `load` times the balanced share of tokens: Megatron's
// alltoall dispatcher (one copy per expert; bytes = the send buffer), or with
// SimOptions::moe_dedup_dispatch across nodes DeepEP's deduplicated dispatch
// (bytes = NVLink + network bytes).
struct MoeExchange {
  CollectiveCost cost;
  double bytes = 0;
};
MoeExchange moe_exchange(const ModelSpec& model, const HwProfile& hw, const SimOptions& opt, const ComputeShape& shape,
                         double elem_bytes, double load);

// FP8 casts (Transformer Engine's cast_transpose; with current scaling an
// amax pass first, docs/simulator.md 3.2a): bytes per element of the 16-bit
// tensor, kernels per cast, and the time of `casts` cast calls covering
// `elements` in all, at memory_bw x memory_bw_efficiency plus each kernel's
// kernel_overhead_s.
double fp8_cast_bytes(const SimOptions& opt);
int fp8_cast_kernels(const SimOptions& opt);
double fp8_cast_time_s(const HwProfile& hw, const SimOptions& opt, double elements, int casts);

// Time of one GEMM of shape (m x k) * (k x n). With the profile's per-shape
// measurements (AcceleratorSpec::gemm_shapes; 16-bit, and FP8 as the 16-bit
// GEMM of half the depth): the model's time (gemm_model_time_s) times the
// measured over the modelled time of the nearest shape the grid holds, so the
// measurement itself inside the grid and, beyond it, the model with the
// correction measured at the grid's edge (continuous across it).
double gemm_time_s(const HwProfile& hw, Precision precision, double m, double n, double k);
// The model alone: the efficiency table at the GEMM's FLOPs, its waves
// relative to the table's shapes, the ceilings (docs/simulator.md 3.1).
double gemm_model_time_s(const HwProfile& hw, Precision precision, double m, double n, double k);
// Time of that GEMM as a userbuffers overlap runs it (sim/tp_overlap.h):
// in `row_slices` x `col_slices` pieces, on `sm_fraction` of the SMs. Each
// piece runs at the table's rate at its own FLOPs (its fixed cost and small
// size) with the whole GEMM's waves (the wave model is not measured on the
// near-one-wave outputs of the pieces, docs/simulator.md 3.1), and on fewer
// SMs at that fraction of the table's (boost-clock) rate, never above the
// rate the power cap sustains: a GEMM on fewer SMs draws less power. Equal to
// gemm_model_time_s with one piece on every SM (the per-shape grid enters
// through the plain GEMM's time this is a fraction of, ub_linear).
double ub_gemm_time_s(const HwProfile& hw, Precision precision, double m, double n, double k, double row_slices,
                      double col_slices, double sm_fraction);
// Time of `groups` equal GEMMs run as one grouped kernel (MoE experts:
// cuBLASLt and CUTLASS grouped GEMM, torch._grouped_mm): one launch, the
// table's rate at all the groups' FLOPs, the waves of all their output tiles
// together; with the per-shape grid, corrected as the GEMM of the groups'
// stacked rows (groups x m) is (one group: gemm_time_s).
double grouped_gemm_time_s(const HwProfile& hw, Precision precision, double groups, double m, double n, double k);
// Time of a MoE layer's `groups` equal expert GEMMs as the stack runs them:
// one grouped kernel, or one GEMM per expert (Transformer Engine's
// multi_stream_cublas_gemm, DeepSpeed's loop), each costing what the table
// says of it alone (its own FLOPs, waves and fixed cost), one after another.
// TE spreads its GEMMs over 4 streams; what they gain by running side by
// side is not credited: TransformerEngine #2045 measured them 9% and 24%
// above that sum (H100, BF16, 8 x 4096 and 16 x 2048 rows of 768 x 2048).
// Never faster than the grouped kernel.
double expert_gemms_time_s(const HwProfile& hw, Precision precision, double groups, double m, double n, double k,
                           ExpertGemm how);

}  // namespace loom
