// Memory model: bytes per rank on each pipeline stage, by component.
//
// Model states follow the ZeRO paper (Rajbhandari et al. 2020): with 16-bit
// training, 2 bytes of weights, 2 of gradients (4 with Megatron's fp32 main
// grads, SimOptions::fp32_main_grads) and K = 12 of optimizer state (fp32
// master weights, Adam m and v) per parameter; stage 1 shards the optimizer,
// 2 also the gradients, 3 also the weights, over the data-parallel group (the
// expert-data-parallel group dp/ep for expert parameters). fp32 training: 4 +
// 4 + 8 (no separate master copy).
//
// Activations follow Korthikanti et al. 2022 (Table 2) term by term, so the
// GPT block reproduces s*b*h*(34 + 5*a*s/h) and its TP / SP / selective /
// full-recompute forms exactly; SwiGLU, GQA, MLA, MoE, flash attention and
// dropout-free blocks use the same terms for the tensors they keep (see
// docs/simulator.md). In-flight micro-batches come from the schedule: GPipe m,
// 1F1B min(p - s, m) on stage s, interleaved (p - s - 1)*2 + (v - 1)*p + 1
// chunk-micro-batches (Megatron's warm-up + 1), i.e. the first stage holds
// p*(1 + (p-1)/(p*v)) stage-equivalents.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/hw_profile.h"
#include "core/layout.h"
#include "core/model_spec.h"
#include "core/stage_split.h"
#include "core/train_spec.h"
#include "sim/nccl_buffers.h"
#include "sim/sim_options.h"

namespace loom {

// Parameter elements one rank of a stage holds (after TP/EP sharding, before ZeRO).
struct StageParams {
  double dense = 0;   // replicated over the full DP group
  double expert = 0;  // replicated over the expert-DP group (dp / ep)
  double total() const { return dense + expert; }
};
StageParams stage_params(const ModelSpec& model, const Layout& layout, const StageSplit& split, int stage);
// The model's parameter counts stage_params adds up, read from the model
// once (its accessors work each count out on every call, and the closed
// form prices several stages of every layout).
struct ModelParamCounts {
  double attention = 0, norms = 0, dense_mlp = 0, router = 0, shared_experts = 0, expert = 0;  // one layer's
  double embedding = 0, position = 0, final_norm = 0, lm_head = 0;
};
ModelParamCounts model_param_counts(const ModelSpec& model);
// The same from counts read before (model_param_counts of `model`).
StageParams stage_params(const ModelSpec& model, const ModelParamCounts& counts, const Layout& layout,
                         const StageSplit& split, int stage);
// Whether a pipelined model's last stage holds a copy of the token embedding
// whose gradient is all-reduced with the first stage's: a tied output head,
// or multi-token prediction (Megatron-core builds the embedding on the MTP
// stage).
bool embedding_copy_on_last_stage(const ModelSpec& model, const Layout& layout);

// Activation bytes one layer keeps for backward, per micro-batch, on one rank.
double layer_activation_bytes(const ModelSpec& model, const Layout& layout, const SimOptions& opt, int64_t seq,
                              Precision precision, bool moe_layer);
// Korthikanti's checkpoint for full recompute: the layer input.
double layer_checkpoint_bytes(const ModelSpec& model, const Layout& layout, int64_t seq, Precision precision);

// Loom's executor (exec/model/chunk.cc): the buffers one layer's backward
// holds at once beside the saved activations (the gradient flowing down, the
// gathered gradient, and the larger of the MLP's and the attention's
// temporaries), and those of the head's backward.
struct BackwardWorkspace {
  double layer = 0, head = 0;
  double mlp_or_attention = 0, attention = 0;  // the parts of `layer` beyond the flowing and gathered gradients
};
BackwardWorkspace executor_backward_workspace(const ModelSpec& model, const Layout& layout, int64_t seq);
// What the executor's layer keeps from forward to backward for one
// micro-batch (its LayerActs, exec/model/chunk.cc): the residual stream in,
// the two gathered norm outputs and their statistics, q, k, v (and under
// qk-norm their inputs and statistics), the attention output and its
// log-sum-exp, the mid residual, the MLP's two (GELU) or three (SwiGLU)
// intermediates. Large tensors are saved in 16 bits under bf16 / fp16 (the
// residual stream in fp32 under fp16), the statistics in fp32; `fp32`
// prices the copy backward restores. Selective recompute drops the
// attention output and log-sum-exp, full recompute keeps the input only.
// Pipeline send / receive buffers (one micro-batch's fp32 boundary tensor
// each) the executor holds at a stage's peak: walking the stage's ops of the
// step's program (core/program.h) in issue order, the received tensors not
// yet consumed and the outputs not yet sent when a backward starts with the
// most chunk-micro-batches in flight (the first four such moments: the
// steady state repeats), and at most those plus the sends issued before it
// whose matching receive the program does not order before it (the peer may
// not have taken them yet; the executor frees a send's buffer when it
// completes). 0 without a pipeline.
struct P2pBuffers {
  int surely = 0;   // the peers keeping pace: every send taken as issued
  int at_most = 0;  // and every send the program does not order before the peak still pending
};
P2pBuffers executor_p2p_buffers(const Layout& layout, int64_t global_batch, int stage);
// The same for every stage (index: stage); null without a pipeline. Kept
// for the process's life (one entry per distinct schedule).
const std::vector<P2pBuffers>* executor_p2p_buffers_per_stage(const Layout& layout, int64_t global_batch);
// A MoE layer's MLP in the executor (exec/model/moe_layer.cc), one
// micro-batch, in bytes. Rows: the N gathered rows of the layer (folded
// experts: this TP rank's 1/tp of them) route M = N k token copies
// (dropless: an upper bound under a capacity); the rank's experts compute
// R = M x `load` rows (the busiest EP rank's share; M without EP).
struct ExecutorMoeMlp {
  double routing = 0;       // fp32 / int32 routing state: probabilities, lse, top-k ids and weights, slots, regroup maps
  double large_elems = 0;   // elements of the tensors saved in 16 bits under mixed precision (expert rows, yp, shared)
  double combine_elems = 0; // of them, the expert outputs in token order (freed first in backward)
  double expert_elems = 0;  // of them, the local experts' input rows and intermediates (freed after their GEMMs)
  double grouped_workspace = 0;  // backward's temporaries at the grouped expert GEMMs (fp32)
  double shared_workspace = 0;   // backward's temporaries at the shared experts (fp32)
  double saved(double large_bytes) const { return routing + large_elems * large_bytes; }
};
ExecutorMoeMlp executor_moe_mlp(const ModelSpec& model, const Layout& layout, int64_t seq, double load);
// The busiest EP rank's rows over the balanced share the memory model
// assumes: SimOptions::moe_load_imbalance, at most the capacity factor; 1
// without EP.
double executor_moe_load(const Layout& layout, const SimOptions& opt);

// `moe`: the layer is a MoE layer whose MLP is that (null: the dense MLP).
double executor_layer_activation_bytes(const ModelSpec& model, const Layout& layout, int64_t seq,
                                       Precision precision, bool fp32 = false, const ExecutorMoeMlp* moe = nullptr);

// A dense layer's forward at its largest in Loom's executor: its whole
// working set, fp32 until the layer's end (bf16 / fp16 pack the saved
// tensors only then), with the MLP's second GEMM input being rounded.
double executor_layer_forward_peak_bytes(const ModelSpec& model, const Layout& layout, int64_t seq,
                                         Precision precision);

// Micro-batches (interleaved: chunk-micro-batches) whose activations a stage
// holds at its peak under the schedule. `ep_overlap`: Megatron-core's
// all-to-all overlap runs one more warmup forward before the interleaved
// steady state (schedules.py get_pp_rank_microbatches), held as well.
int64_t in_flight_micro_batches(const Layout& layout, int64_t micro_batches, int stage, bool ep_overlap = false);

// Whether the all-to-all overlap applies: the option, on a MoE model.
inline bool ep_overlap_applies(const ModelSpec& m, const SimOptions& opt) { return opt.ep_comm_overlap && m.is_moe(); }

struct StageMemory {
  int stage = 0;
  int layers = 0;
  double params = 0;           // elements before ZeRO
  double weights_bytes = 0;
  double grads_bytes = 0;
  double optimizer_bytes = 0;
  double activations_bytes = 0;
  double comm_buffer_bytes = 0;
  // Loom's executor only (a framework's are in overhead_bytes): backward's
  // own buffers at the stage's peak, and the step's token ids and targets.
  double workspace_bytes = 0;
  double inputs_bytes = 0;
  double overhead_bytes = 0;   // runtime reserve + fragmentation allowance
  // Loom's executor, pipelined: another moment whose total comes within the
  // stage's possibly pending sends of the peak's (executor_p2p_buffers), so a
  // run may meet either as its peak; its activations and workspace (the
  // other classes are the same). Both 0 when there is none. Not in
  // total_bytes(): the peak is the larger.
  double alt_activations_bytes = 0, alt_workspace_bytes = 0;
  double total_bytes() const {
    return weights_bytes + grads_bytes + optimizer_bytes + activations_bytes + comm_buffer_bytes + workspace_bytes +
           inputs_bytes + overhead_bytes;
  }
};

struct MemoryReport {
  std::vector<StageMemory> stages;
  double capacity_bytes = 0;  // usable: the device's less the plan's memory headroom
  double device_bytes = 0;    // the device's
  int worst_stage = 0;
  bool fits = true;
  double peak_bytes() const { return stages.empty() ? 0 : stages[worst_stage].total_bytes(); }
  // "stage 0 needs 91.3 GB of 80.0 GB: over by 11.3 GB (activations 52.0 GB ...)"; empty when it fits.
  std::string why_not() const;
};

// Per-layer activation terms of a layout (the same for every stage).
struct ActivationTerms {
  double dense = 0, moe = 0, checkpoint = 0;
  // torchtitan's selective op AC: what a dense layer's backward re-runs and
  // so holds again for a moment (its no-recompute activations - dense); 0
  // for other recompute rules.
  double rerun = 0;
  // Recompute modules (Layout::recompute_modules): the tensors a dense
  // (rerun) and a MoE (rerun_moe) layer drop and re-run in its backward.
  double rerun_moe = 0;
  // Partial recompute (recompute_layers): a kept layer's activations, as
  // without recompute.
  double kept_dense = 0, kept_moe = 0;
  // The model's parameter counts (model_param_counts), for the stages' states.
  ModelParamCounts params;
  // NCCL's point-to-point buffers of the layout (sim/nccl_buffers.h), set by
  // callers that hold the hardware profile; in each stage's overhead.
  NcclP2pBuffers nccl;
  // Loom's executor (no framework named): a layer's terms and the pipeline's
  // buffers per stage, the same for every stage of the layout, so a stage's
  // memory only adds up (the search prices up to pp stages per layout).
  struct Executor {
    bool valid = false;
    double saved_dense = 0, saved_moe = 0;  // executor_layer_activation_bytes, dense / MoE top layer
    double kept_dense = 0, kept_moe = 0;    // the same without recompute (partial recompute's kept layers)
    double fp32_dense = 0, fp32_moe = 0;    // the same, no recompute, fp32
    double forward_peak = 0;                // executor_layer_forward_peak_bytes
    BackwardWorkspace workspace;
    ExecutorMoeMlp moe;                     // when the model has MoE layers
    const std::vector<P2pBuffers>* p2p = nullptr;  // per stage; null without a pipeline
  } executor;
};
// `counts`: model_param_counts(model) where the caller holds them (the
// Evaluator); read from the model when null.
ActivationTerms activation_terms(const ModelSpec& model, const Layout& layout, const TrainSpec& train,
                                 const SimOptions& opt, const ModelParamCounts* counts = nullptr);

StageMemory stage_memory(const ModelSpec& model, const Layout& layout, const TrainSpec& train, const SimOptions& opt,
                         const StageSplit& split, int stage);
// The same with the activation terms computed once for all stages.
StageMemory stage_memory(const ModelSpec& model, const Layout& layout, const TrainSpec& train, const SimOptions& opt,
                         const StageSplit& split, int stage, const ActivationTerms& act);
// The device memory a layout may use: the profile's capacity less the
// plan's headroom (SimOptions::memory_headroom).
double usable_memory_bytes(const HwProfile& hw, const SimOptions& opt);
MemoryReport memory_report(const ModelSpec& model, const HwProfile& hw, const Layout& layout, const TrainSpec& train,
                           const SimOptions& opt);

// Bytes per parameter of weights / grads / optimizer for a precision.
struct StateBytes {
  double weights = 2, grads = 2, optimizer = 12;
};
StateBytes state_bytes_per_param(Precision precision, const SimOptions& opt);

}  // namespace loom
