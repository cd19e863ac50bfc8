#include "sim/plan_request.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>

#include "sim/framework.h"

namespace loom {

Status apply_request_to_hw(const PlanRequest& req, HwProfile* hw) {
  if (req.attention_kernel.empty()) return Status::ok();
  Status s = select_attention_kernel(hw, req.attention_kernel);
  if (!s.is_ok()) return invalid_argument("--attention-kernel: " + s.message());
  return s;
}

Result<TrainSpec> make_train_spec(const PlanRequest& req, const HwProfile& hw, const ModelSpec* model) {
  TrainSpec train;
  train.global_batch = req.global_batch;
  train.seq_len = req.seq;
  train.steps = req.steps;
  train.lr = req.lr;
  train.min_lr = req.lr / 10;
  train.warmup_steps = req.warmup;
  train.seed = req.seed;
  LOOM_ASSIGN_OR_RETURN(train.precision, parse_precision(req.precision));
  LOOM_ASSIGN_OR_RETURN(train.grad_reduce, parse_grad_reduce(req.grad_reduce));
  // NaN passes CLI11's ranges and every comparison below: it would fall back
  // to each option's default without a word.
  for (const auto& [flag, v] : {std::pair<const char*, double>{"--moe-load-imbalance", req.moe_load_imbalance},
                                {"--moe-capacity-factor", req.moe_capacity_factor},
                                {"--moe-aux-loss-coeff", req.moe_aux_loss_coeff},
                                {"--moe-z-loss-coeff", req.moe_z_loss_coeff},
                                {"--lr", req.lr}})
    if (!std::isfinite(v)) return invalid_argument(std::string(flag) + " must be a finite number");
  // The plan stores the seed as a JSON integer that `loom execute` reads as
  // int64 (a negative --seed arrives here wrapped around).
  if (req.seed > uint64_t(INT64_MAX))
    return invalid_argument("--seed " + std::to_string(req.seed) + " is out of range: use 0 to 2^63-1");
  train.moe_capacity_factor = req.moe_capacity_factor > 0 ? req.moe_capacity_factor : 0;
  train.moe_z_loss_coeff = req.moe_z_loss_coeff;
  train.moe_aux_loss_coeff = req.moe_aux_loss_coeff >= 0 ? req.moe_aux_loss_coeff
                             : model && model->moe.router_aux_loss_coef >= 0 ? model->moe.router_aux_loss_coef
                                                                              : 0;
  if (model && !model->is_moe()) train.moe_aux_loss_coeff = train.moe_z_loss_coeff = train.moe_capacity_factor = 0;
  LOOM_RETURN_IF_ERROR(validate_train_spec(train));
  if (req.gpus < 1) return invalid_argument("--gpus=" + std::to_string(req.gpus) + " must be >= 1");
  if (req.dropout < -2 || req.dropout > 1)
    return invalid_argument("--dropout " + std::to_string(req.dropout) +
                            " must be -1 (from the model family), 0 (off) or 1 (on)");
  if (!valid_memory_headroom(req.memory_headroom))
    return invalid_argument("--memory-headroom " + std::to_string(req.memory_headroom) +
                            ": use a fraction of the device memory to keep free, 0 to 0.9 (e.g. 0.1 keeps 10%)");
  LOOM_RETURN_IF_ERROR(check_optimizer_state_overrides(req.optimizer_master_bytes, req.optimizer_moment_bytes,
                                                       "--optimizer-master-bytes / --optimizer-moment-bytes"));
  if (req.grad_buckets < 1 || req.grad_buckets > 32767)
    return invalid_argument("--grad-buckets " + std::to_string(req.grad_buckets) +
                            ": use 1 to 32767 gradient buckets per model chunk");
  Fp8Scaling scaling;
  if (!req.fp8_scaling.empty() && !parse_fp8_scaling(req.fp8_scaling, &scaling))
    return invalid_argument("--fp8-scaling " + req.fp8_scaling +
                            ": use delayed (amax history, Transformer Engine's DelayedScaling) or current "
                            "(per-tensor amax each step: Float8CurrentScaling, torchao tensorwise)");
  CrossEntropyImpl ce;
  if (!req.cross_entropy.empty() && !parse_cross_entropy(req.cross_entropy, &ce))
    return invalid_argument("--cross-entropy " + req.cross_entropy +
                            ": use fused, megatron (Megatron's unfused vocab_parallel_cross_entropy), megatron_fused "
                            "(--cross-entropy-loss-fusion), te (Transformer Engine's Triton kernel) or torch "
                            "(F.cross_entropy on fp32 logits)");
  LayerOps ops;
  if (!req.layer_ops.empty() && !parse_layer_ops(req.layer_ops, &ops))
    return invalid_argument("--layer-ops " + req.layer_ops +
                            ": use fused (fused kernels: Transformer Engine, Megatron) or torch_eager (torchtitan's "
                            "Llama block in eager PyTorch)");
  ExpertGemm experts;
  if (!req.expert_gemm.empty() && !parse_expert_gemm(req.expert_gemm, &experts))
    return invalid_argument("--expert-gemm " + req.expert_gemm +
                            ": use grouped (one grouped kernel for a layer's local experts) or per_expert (one GEMM "
                            "each: Transformer Engine's GroupedLinear, DeepSpeed's loop)");
  if (!req.framework.empty()) LOOM_RETURN_IF_ERROR(load_framework(req.framework).status());
  if (!req.tp_comm_overlap_cfg.empty()) LOOM_RETURN_IF_ERROR(load_tp_overlap_config(req.tp_comm_overlap_cfg).status());
  if (train.precision == Precision::kFp8 && hw.accel.peak_fp8_flops <= 0)
    return invalid_argument("--precision fp8: " + hw.name + " (" + hw.accel.name + ") has no fp8 tensor cores; use bf16");
  return train;
}

namespace {

// The request's framework, or none when it has none or it does not load
// (make_train_spec reports a bad one).
std::optional<Framework> request_framework(const PlanRequest& req) {
  if (req.framework.empty()) return std::nullopt;
  auto f = load_framework(req.framework);
  return f.is_ok() ? std::optional<Framework>(std::move(f).value()) : std::nullopt;
}

}  // namespace

SimOptions make_sim_options(const PlanRequest& req, const HwProfile& hw) {
  const std::optional<Framework> f = request_framework(req);
  return make_sim_options(req, hw, f ? &*f : nullptr);
}

SimOptions make_sim_options(const PlanRequest& req, const HwProfile& hw, const Framework* framework) {
  SimOptions opt;
  if (framework) apply_framework(*framework, &opt);
  if (!req.flash_attention) opt.flash_attention = false;
  if (req.fp32_main_grads) opt.fp32_main_grads = true;
  if (req.tp_async_backward) opt.tp_async_backward = true;
  if (req.tp_comm_overlap) opt.tp_comm_overlap = true;
  if (!req.tp_comm_overlap_cfg.empty()) {
    auto cfg = load_tp_overlap_config(req.tp_comm_overlap_cfg);  // make_train_spec reports a bad one
    if (cfg.is_ok()) opt.tp_overlap = std::move(cfg).value();
  }
  if (req.ep_comm_overlap) opt.ep_comm_overlap = true;
  if (req.pp_blocking_p2p) opt.pp_blocking_p2p = true;
  if (req.moe_dedup_dispatch) opt.moe_dedup_dispatch = true;
  if (req.moe_fp8_dispatch) opt.moe_fp8_dispatch = true;
  if (req.moe_dispatch_sms > 0) opt.moe_dispatch_sms = req.moe_dispatch_sms;
  if (req.moe_load_imbalance >= 0) opt.moe_load_imbalance = req.moe_load_imbalance;
  if (req.moe_capacity_factor >= 0) opt.moe_capacity_factor = req.moe_capacity_factor;
  if (req.pp_overlap_p2p_comm) opt.pp_overlap_p2p_comm = true;
  if (req.no_pp_blocking_p2p) opt.pp_blocking_p2p = false;
  if (req.no_pp_overlap_p2p_comm) opt.pp_overlap_p2p_comm = false;
  if (!req.fp8_scaling.empty()) parse_fp8_scaling(req.fp8_scaling, &opt.fp8_scaling);  // checked by make_train_spec
  if (!req.cross_entropy.empty()) parse_cross_entropy(req.cross_entropy, &opt.cross_entropy);  // checked there too
  if (!req.layer_ops.empty()) parse_layer_ops(req.layer_ops, &opt.layer_ops);  // checked there too
  if (!req.expert_gemm.empty()) parse_expert_gemm(req.expert_gemm, &opt.expert_gemm);  // checked there too
  if (req.fp8_attention) opt.fp8_attention = true;
  if (req.fp8_params) opt.fp8_params = true;
  opt.memory_headroom = req.memory_headroom;
  apply_optimizer_state_overrides(req.optimizer_master_bytes, req.optimizer_moment_bytes, &opt);
  if (req.ddp_average_in_collective) opt.grad_scale_pass = false;
  if (req.no_grad_nan_check) opt.grad_nan_check = false;
  if (req.dropout != -2) opt.dropout = req.dropout;
  opt.grad_buckets = req.grad_buckets;
  if (hw.is_cpu()) {
    // CPU ranks: no device context or allocator pool to reserve for.
    opt.runtime_reserve_bytes = 0;
    opt.dp_comm_host_progress = true;  // Open MPI's collectives progress in the host's MPI calls
    opt.flash_attention = true;  // the CPU attention kernel keeps no s*s scores
  }
  return opt;
}

SearchSpace make_search_space(const PlanRequest& req) {
  const std::optional<Framework> f = request_framework(req);
  return make_search_space(req, f ? &*f : nullptr);
}

SearchSpace make_search_space(const PlanRequest& req, const Framework* framework) {
  SearchSpace sp;
  sp.world = req.gpus;
  if (framework) apply_framework(*framework, &sp);
  return sp;
}

}  // namespace loom
