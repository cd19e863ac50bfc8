// Exports of a plan to other trainers' dialects.
//   megatron:  Megatron-LM command-line arguments (pretrain_gpt.py), one per line.
//   torchtitan: the [parallelism], [training] and [activation_checkpoint]
//              sections of a torchtitan job TOML.
//   deepspeed: a DeepSpeed config JSON (batch identity, precision, ZeRO stage,
//              activation checkpointing); TP / PP sizes belong to the launcher
//              (Megatron-DeepSpeed args) and are listed in the megatron export.
#pragma once

#include <string>

#include "core/plan.h"
#include "core/status.h"

namespace loom {

// kUnsupported when the layout has no equivalent in that dialect (e.g. ZeRO-2
// in Megatron-LM), with the alternative.
Result<std::string> export_megatron_args(const Plan& plan);
Result<std::string> export_deepspeed_config(const Plan& plan);
Result<std::string> export_torchtitan_toml(const Plan& plan);
// By dialect name: "megatron", "deepspeed" or "torchtitan".
Result<std::string> export_plan(const Plan& plan, const std::string& dialect);

}  // namespace loom
