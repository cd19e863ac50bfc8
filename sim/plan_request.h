// What `loom plan` and the GUI turn their inputs into before simulating: the
// training spec and the modelling options, built one way for both so the GUI
// shows the numbers `loom plan --layout ... --json` prints.
#pragma once

#include <cstdint>
#include <string>

#include "core/hw_profile.h"
#include "core/model_spec.h"
#include "core/program.h"
#include "core/status.h"
#include "core/train_spec.h"
#include "sim/search.h"
#include "sim/sim_options.h"

namespace loom {

struct PlanRequest {
  int gpus = 64;
  int64_t global_batch = 512;
  int64_t seq = 4096;
  std::string precision = "bf16";
  std::string grad_reduce = "fp32";  // TrainSpec::grad_reduce: fp32 | bf16 | fp8
  int64_t steps = 0;
  double lr = 3e-4;
  int64_t warmup = 0;
  uint64_t seed = 1234;
  // A training stack's defaults (frameworks/<name>.json, sim/framework.h);
  // empty: Loom's own. The fields below override it where set: a false flag
  // and an empty fp8_scaling / dropout -2 leave the framework's value.
  std::string framework;
  // The profile's attention kernel to price (HwProfile's attention_kernels,
  // e.g. "cudnn-2024-07", "fa2"); empty: the profile's own. Applied to the
  // profile by apply_request_to_hw, so a plan embeds what it priced.
  std::string attention_kernel;
  bool flash_attention = true;
  bool fp32_main_grads = false;
  bool tp_async_backward = false;  // SimOptions::tp_async_backward
  bool tp_comm_overlap = false;    // SimOptions::tp_comm_overlap
  // SimOptions::tp_overlap: a name from frameworks/tp_overlap/ or a path;
  // empty: the framework's, else Transformer Engine's own defaults.
  std::string tp_comm_overlap_cfg;
  bool ep_comm_overlap = false;    // SimOptions::ep_comm_overlap
  bool pp_blocking_p2p = false;    // SimOptions::pp_blocking_p2p
  bool no_pp_blocking_p2p = false;     // turns pp_blocking_p2p off (over the framework's)
  bool no_pp_overlap_p2p_comm = false;  // turns pp_overlap_p2p_comm off
  bool moe_dedup_dispatch = false;  // SimOptions::moe_dedup_dispatch
  bool moe_fp8_dispatch = false;    // SimOptions::moe_fp8_dispatch
  int moe_dispatch_sms = 0;         // SimOptions::moe_dispatch_sms; 0: NCCL's channels
  double moe_load_imbalance = -1;   // SimOptions::moe_load_imbalance; < 0: the default
  double moe_capacity_factor = -1;  // SimOptions::moe_capacity_factor and TrainSpec's; < 0: the default (dropless)
  double moe_aux_loss_coeff = -1;   // TrainSpec::moe_aux_loss_coeff; < 0: the config's router_aux_loss_coef, else 0
  double moe_z_loss_coeff = 0;      // TrainSpec::moe_z_loss_coeff
  bool pp_overlap_p2p_comm = false;  // SimOptions::pp_overlap_p2p_comm
  std::string fp8_scaling;         // SimOptions::fp8_scaling: delayed | current; empty: the framework's, else current
  std::string cross_entropy;       // SimOptions::cross_entropy; empty: the framework's, else fused
  std::string layer_ops;           // SimOptions::layer_ops; empty: the framework's, else fused
  std::string expert_gemm;         // SimOptions::expert_gemm; empty: the framework's, else grouped
  bool fp8_attention = false;      // SimOptions::fp8_attention
  bool fp8_params = false;         // SimOptions::fp8_params
  double memory_headroom = 0;      // SimOptions::memory_headroom
  // SimOptions::optimizer_master_bytes / optimizer_moment_bytes; 0: the framework's (else 4)
  double optimizer_master_bytes = 0, optimizer_moment_bytes = 0;
  // Megatron-core DDP settings the framework file fixes at Megatron-LM's
  // command-line defaults: --ddp-average-in-collective (no 1/dp pass,
  // SimOptions::grad_scale_pass off) and --no-check-for-nan-in-loss-and-grad
  // (no NaN-check norm, SimOptions::grad_nan_check off), as NeMo 2.0 and
  // Megatron-Bridge set them.
  bool ddp_average_in_collective = false;
  bool no_grad_nan_check = false;
  int dropout = -2;  // -1: from the model family, 0 off, 1 on; -2: the framework's (else -1)
  int grad_buckets = kDefaultGradBuckets;  // gradient buckets per model chunk (the program's)
};

// What the request changes in the hardware profile (its attention kernel);
// errors name the kernels the profile has.
Status apply_request_to_hw(const PlanRequest& req, HwProfile* hw);

// Errors name the field: sizes, precision, fp8 on hardware without it, gpus,
// a framework that does not load.
// `model` (may be null) gives the MoE load-balancing coefficient's default.
Result<TrainSpec> make_train_spec(const PlanRequest& req, const HwProfile& hw, const ModelSpec* model = nullptr);
// CPU profiles reserve no device runtime and always use the flash-style
// attention kernel (the CPU kernel keeps no s x s scores).
SimOptions make_sim_options(const PlanRequest& req, const HwProfile& hw);
// The search space of the request's framework (all layouts without one).
SearchSpace make_search_space(const PlanRequest& req);
// The same with the request's framework already loaded (nullptr: none), for
// callers that need the framework itself as well.
struct Framework;
SimOptions make_sim_options(const PlanRequest& req, const HwProfile& hw, const Framework* framework);
SearchSpace make_search_space(const PlanRequest& req, const Framework* framework);

}  // namespace loom
