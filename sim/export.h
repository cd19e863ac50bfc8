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
// Whether Megatron-LM can state the layout's layer split (its pp, schedule,
// v, first / last): --num-layers-per-virtual-pipeline-stage needs pp*v to
// divide the layers and pins no chunk; a non-interleaved split is even, or
// --decoder-first/last-pipeline-num-layers with equal middle stages. The
// error says which and what to choose instead. The megatron-core framework's
// search enumerates only these (SearchSpace::megatron_splits).
struct ModelSpec;
struct Layout;
Status megatron_split_status(const ModelSpec& model, const Layout& layout);
// Megatron-core's --pipeline-model-parallel-layout (core_v0.13.0 and later;
// MTP modules in it since Megatron-LM HEAD d98e8a64dd's
// pipeline_parallel_layer_layout.py): the virtual stages in Megatron's order
// (chunk * pp + stage), "|" between them, E (embedding) before the first
// layer, the MTP modules (m) and the loss (L) after the last, runs of equal
// stages as "(...|)*n," (commas are cosmetic to Megatron). E.g. 126 layers on pp=8, v=8 with one layer on the
// first and the last chunk: "Et|(tt|)*62,tL".
std::string megatron_pipeline_layout(const ModelSpec& model, const Layout& layout);
Result<std::string> export_deepspeed_config(const Plan& plan);
Result<std::string> export_torchtitan_toml(const Plan& plan);
// By dialect name: "megatron", "deepspeed" or "torchtitan".
Result<std::string> export_plan(const Plan& plan, const std::string& dialect);

}  // namespace loom
