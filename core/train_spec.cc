#include "core/train_spec.h"

#include <cmath>
#include <string>

#include "core/model_spec.h"  // kMaxPositions

namespace loom {

namespace {
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 24;
}  // namespace

const char* grad_reduce_name(GradReduce g) {
  switch (g) {
    case GradReduce::kFp32: return "fp32";
    case GradReduce::kBf16: return "bf16";
    case GradReduce::kFp8: return "fp8";
  }
  return "?";
}

Result<GradReduce> parse_grad_reduce(const std::string& text) {
  if (text == "fp32") return GradReduce::kFp32;
  if (text == "bf16") return GradReduce::kBf16;
  if (text == "fp8") return GradReduce::kFp8;
  return invalid_argument("grad_reduce '" + text + "' is not one of fp32, bf16, fp8 (--grad-reduce)");
}

Status validate_train_spec(const TrainSpec& t) {
  if (t.global_batch <= 0)
    return invalid_argument("train: global_batch=" + std::to_string(t.global_batch) +
                            " must be a positive number of sequences per step (--global-batch)");
  if (t.seq_len <= 0)
    return invalid_argument("train: seq_len=" + std::to_string(t.seq_len) + " must be positive (--seq)");
  // Ranges before any arithmetic (tokens per step, activations, s^2 scores).
  if (t.seq_len > kMaxPositions)
    return invalid_argument("train: seq_len=" + std::to_string(t.seq_len) + " is out of range: at most " +
                            std::to_string(kMaxPositions) + " is accepted (--seq)");
  if (t.global_batch > kMaxGlobalBatch)
    return invalid_argument("train: global_batch=" + std::to_string(t.global_batch) + " is out of range: at most " +
                            std::to_string(kMaxGlobalBatch) + " is accepted (--global-batch)");
  if (t.steps < 0) return invalid_argument("train: steps must be >= 0");
  if (t.optimizer != "adamw")
    return invalid_argument("train: optimizer '" + t.optimizer + "' is not supported; use adamw");
  if (!(t.lr >= 0) || !std::isfinite(t.lr)) return invalid_argument("train: lr must be a finite number >= 0");
  if (t.warmup_steps < 0) return invalid_argument("train: warmup_steps must be >= 0");
  if (!(t.grad_clip >= 0) || !std::isfinite(t.grad_clip))
    return invalid_argument("train: grad_clip must be a finite number >= 0 (0 turns clipping off)");
  // AdamW's own ranges (a plan edited by hand reaches here with any number):
  // the moment decays in [0, 1), a positive epsilon, a decay >= 0, and a
  // floor of the schedule no higher than its peak.
  if (!(t.beta1 >= 0 && t.beta1 < 1)) return invalid_argument("train: beta1 must be in [0, 1)");
  if (!(t.beta2 >= 0 && t.beta2 < 1)) return invalid_argument("train: beta2 must be in [0, 1)");
  if (!(t.adam_eps >= 0) || !std::isfinite(t.adam_eps))
    return invalid_argument("train: adam_eps must be a finite number >= 0");
  if (!(t.weight_decay >= 0) || !std::isfinite(t.weight_decay))
    return invalid_argument("train: weight_decay must be a finite number >= 0");
  if (!(t.min_lr >= 0 && t.min_lr <= t.lr))
    return invalid_argument("train: min_lr must be in [0, lr] (the schedule decays from lr to it)");
  if (!(t.moe_aux_loss_coeff >= 0 && t.moe_aux_loss_coeff < 1e3))
    return invalid_argument("train: moe_aux_loss_coeff must be in [0, 1000) (--moe-aux-loss-coeff; 0 turns it off)");
  if (!(t.moe_z_loss_coeff >= 0 && t.moe_z_loss_coeff < 1e3))
    return invalid_argument("train: moe_z_loss_coeff must be in [0, 1000) (--moe-z-loss-coeff; 0 turns it off)");
  if (!(t.moe_capacity_factor >= 0 && t.moe_capacity_factor <= 1e3))
    return invalid_argument("train: moe_capacity_factor must be > 0 (tokens per expert over the even share) or 0 "
                            "for dropless routing (--moe-capacity-factor)");
  return Status::ok();
}

}  // namespace loom
