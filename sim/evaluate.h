// Closed-form evaluation of one layout: memory per stage, step time with its
// breakdown, throughput figures and traffic per link class, from the cost
// models alone (no event engine). This is what the layout search runs millions
// of times; sim/simulate.h refines the best candidates with the event engine,
// and tests check the two agree.
//
// Step time (p stages, m micro-batches, v chunks per stage, t_s = forward +
// backward + recompute of one micro-batch on stage s, t_max = max_s t_s):
//   GPipe / 1F1B:  (m - 1) * t_max + sum_s t_s + 2 (p - 1) * t_p2p
//   interleaved:   m * t_max + (sum_s t_s - t_max) / v + 2 (p v - 1) * t_p2p
// which is (m + p - 1) t and m t + (p - 1) t / v for balanced stages; plus the
// exposed part of data-parallel communication (what the last backward, the
// pipeline drain or the next micro-batch cannot hide) and the optimizer step.
//
// MFU uses PaLM's model FLOPs (ModelSpec::model_flops_per_token_palm:
// 6N + 12*L*H*Q*T, N = active non-embedding parameters + the LM head); HFU
// counts the FLOPs actually executed, recompute included.
#pragma once

#include <cstdint>
#include <vector>

#include "core/hw_profile.h"
#include "core/layout.h"
#include "core/model_spec.h"
#include "core/train_spec.h"
#include "sim/comm_model.h"
#include "sim/compute_model.h"
#include "sim/memory_model.h"
#include "sim/sim_options.h"

namespace loom {

// Communication categories for traffic reports.
enum class CommKind : uint8_t { kTp = 0, kPp = 1, kDp = 2, kEp = 3, kCp = 4 };
inline constexpr int kNumCommKinds = 5;
const char* comm_kind_name(CommKind k);  // "tp", "pp", "dp", "ep", "cp"

struct StepBreakdown {
  double forward_s = 0;    // compute of all forwards on the critical stage
  double backward_s = 0;
  double recompute_s = 0;
  double tp_comm_s = 0;    // exposed TP collectives inside layers
  double ep_comm_s = 0;    // exposed MoE all-to-all
  double cp_comm_s = 0;    // exposed context-parallel ring (K/V, dK/dV)
  double pp_comm_s = 0;    // exposed pipeline p2p
  double dp_comm_s = 0;    // exposed DP / ZeRO collectives
  // Compute slowed by the DP / ZeRO collectives it hides (their SMs):
  // hidden DP time x comm_contention_fraction.
  double contention_s = 0;
  double bubble_s = 0;     // pipeline idle of the critical stage
  double optimizer_s = 0;
  double step_time_s = 0;
};

struct Figures {
  double step_time_s = 0;
  double tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  double model_tflops_per_gpu = 0;     // PaLM model FLOPs / step / GPU
  double hardware_tflops_per_gpu = 0;  // executed FLOPs incl. recompute
  // Against the 16-bit (bf16) dense peak, as NVIDIA and Meta report FP8 runs
  // too; mfu_fp8_peak against the FP8 peak (0 unless the run is FP8).
  double mfu = 0;
  double hfu = 0;
  double mfu_fp8_peak = 0;
};

// Bytes ONE rank sends per step, and the time its collectives take (exposed or
// not), by category and link class.
struct Traffic {
  double bytes[kNumCommKinds][kNumLinkClasses] = {};
  double time_s[kNumCommKinds] = {};
  double calls[kNumCommKinds] = {};
  // The category's typical call (TP: one layer collective, PP: one activation,
  // DP: the gradient sync, EP: one dispatch): bytes, nccl-tests busbw, and the
  // algorithm / protocol the comm model chose.
  double call_bytes[kNumCommKinds] = {};
  double busbw_bytes_per_s[kNumCommKinds] = {};
  CommAlgo algo[kNumCommKinds] = {};
  CommProto proto[kNumCommKinds] = {};
  double link_bytes(LinkClass l) const;
};

// The gradient buckets of chunk `chunk` on stage `stage` holding `params` of
// the rank's parameters in `layers` layers: the program's grad_buckets, or,
// where the stack's bucket size is stated (SimOptions::grad_bucket_params),
// ceil(params / max(grad_bucket_params, grad_bucket_params_per_dp x dp)) on
// the chunks bucketed_chunks names and 1 on the others (Megatron-core closes
// a bucket once it holds bucket_size parameters, walking them in backward
// order: param_and_grad_buffer.py); with grad_bucket_layers, one per layer.
int chunk_gradient_buckets(const SimOptions& opt, const Layout& l, int stage, int chunk, double params, int layers);

// Per-stage costs shared by the closed form and the event engine.
struct StageCosts {
  int stage = 0;
  int layers = 0, moe_layers = 0;
  double fwd_s = 0, bwd_s = 0, recompute_s = 0;  // one micro-batch, all chunks of the stage
  std::vector<double> chunk_fwd_s, chunk_bwd_s;  // per chunk; bwd includes recompute
  std::vector<double> chunk_wgrad_s;             // per chunk: the weight-gradient GEMMs inside chunk_bwd_s
  double chunk_max_s = 0;   // the slowest chunk's fwd + bwd + recompute
  double chunk0_fwd_s = 0;  // the first chunk's forward
  double tp_s = 0, ep_s = 0, cp_s = 0;           // exposed, included above (one micro-batch)
  double net_share = 0;  // the share of fwd + bwd + recompute that is exposed cross-node TP / EP / CP (NIC-bound)
  double flops_per_micro = 0;                    // executed (fwd + bwd + recompute)
  double grad_bytes = 0, expert_grad_bytes = 0;  // this rank's gradients to synchronize per step
  std::vector<double> chunk_grad_fraction;       // share of the stage's grads in each chunk
  std::vector<int> chunk_buckets;                // gradient buckets of each chunk (chunk_gradient_buckets)
  double optimizer_s = 0;                        // includes weight_cast_s and norm_sync_s
  double norm_sync_s = 0;                        // the gradient norm's all-reduce (a barrier over the group)
  double weight_cast_s = 0;                      // FP8: the stage's weights re-cast once a step
  Traffic traffic_per_micro;                     // TP and EP traffic of one micro-batch
};

// The compute part of a step breakdown from the critical stage's costs and
// the micro-batch count: forward, backward and recompute net of the exposed
// TP / EP / CP communication, which is reported apart (tp_comm_s, ep_comm_s,
// cp_comm_s). One
// rule for the closed form (Evaluator) and the event engine (simulate.cc).
void split_compute(const StageCosts& critical, int64_t micro_batches, StepBreakdown* breakdown);

// Under ep_comm_overlap (Megatron-core's --overlap-moe-expert-parallel-comm)
// the share of a stage's chunk executions that have no partner to hide their
// all-to-alls behind: the schedule's warmup forwards, one more than plain
// 1F1B's, and as many cooldown backwards (schedules.py
// get_pp_rank_microbatches; without a pipeline, the first forward and the
// last backward of combined_1f1b_schedule_for_no_pipelining). That count is
// the stage's micro-batches in flight; over micro_batches x v chunks.
// DualPipeV: the forwards its order runs outside a pair (3p - s - 1, one
// more on the last stage).
double ep_unpaired_fraction(const Layout& layout, int64_t micro_batches, int stage);

struct DpCollectives {
  double grad_sync_s = 0;    // all-reduce (ZeRO 0) or reduce-scatter of the stage's grads
  double param_gather_s = 0; // all-gather of the stage's weights (ZeRO 1/2 per step, 3 per use)
  bool crosses_nodes = false;  // the DP group spans nodes (its traffic takes the NIC)
  CollectiveCost grad_sync, grad_sync_expert, param_gather, param_gather_expert;
};

struct Estimate {
  bool fits = false;
  double peak_memory_bytes = 0;
  int worst_stage = 0;
  StepBreakdown time;
  Figures figures;
};

class Evaluator {
 public:
  Evaluator(const ModelSpec& model, const HwProfile& hw, const TrainSpec& train, const SimOptions& opt);

  // Closed form. The layout must have passed validate_layout. Thread-safe.
  Estimate estimate(const Layout& layout) const;

  // Pieces the detailed simulation and reports reuse.
  std::vector<StageCosts> stage_costs(const Layout& layout) const;
  DpCollectives dp_collectives(const Layout& layout, const StageCosts& stage) const;
  double p2p_time_s(const Layout& layout, CollectiveCost* cost = nullptr) const;
  Figures figures(const Layout& layout, double step_time_s, double executed_flops_per_step) const;
  Traffic step_traffic(const Layout& layout, const std::vector<StageCosts>& stages) const;

  // Per-layer / model-end costs of one micro-batch under a layout.
  struct Pieces {
    PieceCost dense, moe, emb, head;
    // With ep_comm_overlap: a MoE layer that runs without a partner
    // micro-batch (the schedule's warmup forwards and cooldown backwards),
    // its all-to-alls exposed (ep_unpaired_fraction).
    PieceCost moe_unpaired;
    // With recompute_layers (partial full recompute): the layers past the
    // recomputed ones, at the price without recompute.
    PieceCost dense_kept, moe_kept, moe_unpaired_kept;
    PieceCost mtp_block, mtp_projection;  // a multi-token-prediction module's block and its own work
    bool tp_net = false, ep_net = false, cp_net = false;  // the TP / EP / CP group spans nodes
    double nccl_fixed_bytes = 0;  // NCCL's CP-ring and all-to-all buffers (sim/nccl_buffers.h)
  };
  Pieces compute_pieces(const Layout& layout) const;

  const ModelSpec& model() const { return model_; }
  const HwProfile& hw() const { return hw_; }
  const TrainSpec& train() const { return train_; }
  const SimOptions& options() const { return opt_; }

 private:
  // Cached per thread (the search calls estimate() millions of times).
  const Pieces& pieces(const Layout& layout) const;
  const StageSplit& split(const Layout& layout) const;
  void fill_stage(const Layout& layout, const Pieces& pieces, const StageSplit& split, int stage,
                  StageCosts& out) const;

  ModelSpec model_;
  HwProfile hw_;
  TrainSpec train_;
  SimOptions opt_;
  double palm_flops_per_token_ = 0;
  ModelParamCounts params_;  // model_param_counts(model_)
  uint64_t id_ = 0;  // distinguishes evaluators in the per-thread caches
  DpCollectives compute_dp_collectives(const Layout& l, const StageCosts& sc) const;
  // One pipeline hop and NCCL's buffers for one pipeline neighbour, both
  // from the PP group's placement (memoized together by p2p_entry).
  struct P2pEntry {
    CollectiveCost cost;
    double nccl_peer_bytes = 0;
  };
  const P2pEntry& p2p_entry(const Layout& l) const;
  P2pEntry p2p_cost(const Layout& l) const;
};

}  // namespace loom
