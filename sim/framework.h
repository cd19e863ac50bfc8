// Framework profiles: what a training stack does by default, read from
// frameworks/<name>.json (format: docs/formats/framework.md). Which overlaps
// are on, in which dtype gradients are reduced, which ZeRO stages, pipeline
// schedules, recompute modes and sequence-parallel settings the stack offers,
// its FP8 recipe, and the dialect `loom plan --export framework` prints. Each
// section names the source (file and default) it was read from.
//
// A framework shapes the simulator's options (apply_framework(SimOptions))
// and the layouts the search enumerates (apply_framework(SearchSpace)).
//
// Thread-safety: an immutable value.
#pragma once

#include <string>
#include <vector>

#include "core/layout.h"
#include "core/status.h"
#include "sim/search.h"
#include "sim/sim_options.h"

namespace loom {

enum class SequenceParallelRule { kOptional, kAlways, kNever };
// Which pipeline layer splits the stack can state. kAny: every split Loom
// makes (Megatron-core since core_v0.13.0: --pipeline-model-parallel-layout
// names each virtual stage's layers; torchtitan's module lists). kEqualChunks:
// Megatron-core before core_r0.11, whose --num-layers-per-virtual-pipeline-stage
// needs pp*v to divide the layers and pins no chunk, and whose
// non-interleaved uneven splits keep the middle stages equal
// (megatron_split_status, sim/export.h).
enum class LayerSplitRule { kAny, kEqualChunks };
bool parse_layer_split(const std::string& text, LayerSplitRule* out);

struct Framework {
  std::string name;         // file stem, e.g. "megatron-core"
  std::string version;      // the release its defaults were read from
  std::string description;
  std::string export_kind;  // "megatron", "deepspeed" or "torchtitan"
  bool fp32_main_grads = false;
  std::vector<int> grad_reduce_overlap_zero_stages;  // ZeRO stages whose gradient reduction overlaps backward
  // The ZeRO stages whose parameter gather overlaps compute (overlap.
  // param_gather: true = every stage, false = none, or a list: DeepSpeed
  // gathers ZeRO-1/2's updated parameters at the end of its optimizer step,
  // overlapping only ZeRO-3's prefetch).
  std::vector<int> param_gather_overlap_zero_stages = {1, 2, 3};
  bool tp_async_backward = false;
  bool tp_comm_overlap = false;
  TpOverlapConfig tp_overlap = te2_default_tp_overlap();  // overlap.tp_comm_overlap_cfg (a name from frameworks/tp_overlap/)
  bool pp_blocking_p2p = false;       // SimOptions::pp_blocking_p2p
  bool pp_overlap_p2p_comm = false;   // SimOptions::pp_overlap_p2p_comm
  bool pp_fsdp_once = false;          // pipeline.fsdp_once (SimOptions::pp_fsdp_once)
  LayerSplitRule layer_split = LayerSplitRule::kAny;  // pipeline.layer_split
  std::vector<int> zero_stages;
  // The ZeRO stages the stack runs under a pipeline (layouts.pipeline_zero_stages;
  // DeepSpeed's PipelineEngine refuses ZeRO-2/3); empty: zero_stages.
  std::vector<int> pipeline_zero_stages;
  std::vector<Schedule> schedules;
  std::vector<Recompute> recompute;
  SelectiveRecompute selective_recompute = SelectiveRecompute::kAttentionCore;  // what recompute=selective re-runs
  CrossEntropyImpl cross_entropy = CrossEntropyImpl::kFused;  // loss.cross_entropy (optional section)
  LayerOps layer_ops = LayerOps::kFused;  // layer.ops (optional section)
  bool fsdp_copies = false;               // layer.fsdp_copies
  bool embedding_dense_grad = false;      // layer.embedding_dense_grad
  bool qkv_bshd_copies = false;           // layer.qkv_bshd_copies
  bool fused_layer_backward = false;      // layer.fused_backward
  // gradients.zero_each_step / nan_check / scale_pass / hook_add
  // (SimOptions::grad_buffer_zero, grad_nan_check, grad_scale_pass, grad_hook_add)
  bool grad_buffer_zero = false, grad_nan_check = false, grad_scale_pass = false, grad_hook_add = false;
  bool wgrad_gemm_accumulate = false;  // SimOptions::wgrad_gemm_accumulate (gradients.gemm_accumulate)
  // optimizer.master_bytes / moment_bytes (SimOptions::optimizer_master_bytes,
  // optimizer_moment_bytes; optional section, with its source)
  double optimizer_master_bytes = 4, optimizer_moment_bytes = 4;
  // gradients.bucket_params / bucket_params_per_dp_rank / bucketed_chunks
  // (SimOptions::grad_bucket_params, grad_bucket_params_per_dp,
  // bucketed_chunks); 0: not stated, the program's grad_buckets per chunk.
  double grad_bucket_params = 0, grad_bucket_params_per_dp = 0;
  BucketedChunks bucketed_chunks = BucketedChunks::kAll;
  ExpertGemm expert_gemm = ExpertGemm::kGrouped;  // moe.expert_gemm (SimOptions::expert_gemm)
  int moe_dispatch_sms = 0;                        // moe.dispatch_sms (SimOptions::moe_dispatch_sms)
  SequenceParallelRule sequence_parallel = SequenceParallelRule::kOptional;
  // context_parallel.cp_comm (optional section): how the stack's context
  // parallelism exchanges K/V; the ring when the file does not say.
  std::vector<CpComm> cp_comms{CpComm::kP2p};
  Fp8Scaling fp8_scaling = Fp8Scaling::kCurrent;
  bool fp8_attention = false;
  bool fp8_norm_cast_fused = false;  // fp8.norm_cast_fused (SimOptions::fp8_norm_cast_fused)
  int dropout = -1;
};

// Errors name the key and what it must be.
Result<Framework> parse_framework(const std::string& json_text, const std::string& name);
// A path, or a bare name looked up as frameworks/<name>.json.
Result<Framework> load_framework(const std::string& path_or_name);

// The stack's modelling options: gradient dtype, backward TP overlap, FP8
// recipe, dropout. Records the framework's name in opt->framework.
void apply_framework(const Framework& f, SimOptions* opt);
// The layouts the stack can run: ZeRO stages, schedules, recompute modes,
// sequence parallelism, and which layouts overlap their gradient reduction.
void apply_framework(const Framework& f, SearchSpace* space);
// Whether a layout is one the stack can run (with Megatron's export, also
// its layer split of `model`: megatron_split_status, sim/export.h); the error
// says which setting it lacks and what it offers instead.
struct ModelSpec;
Status check_layout_for_framework(const Framework& f, const ModelSpec& model, const Layout& l);
// The stack a plan is for: the framework's rules, or without one Loom's
// executor's (every layout validate_layout accepts).
Status check_layout_for_stack(const Framework* f, const ModelSpec& model, const Layout& l);
// The layout's overlap flags as the stack sets them, unless `layout_text`
// (the --layout string it was parsed from) names its own overlap_grad /
// overlap_param.
void apply_framework_overlap(const Framework& f, const std::string& layout_text, Layout* l);

}  // namespace loom
