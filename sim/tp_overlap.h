// Transformer Engine's userbuffers overlaps of tensor-parallel collectives
// with their GEMMs (Megatron --tp-comm-overlap and --tp-comm-overlap-cfg,
// NeMo's and Megatron-Bridge's tp_comm_overlap_cfg), under TE's own names
// (transformer_engine/pytorch/module/base.py initialize_ub): how each linear
// of a tensor-parallel block runs its GEMM beside its collective.
//
//   ring_exchange  the GEMM in tp slices of its tokens (two a GEMM when
//                  aggregated), each beside one peer-to-peer copy (copy
//                  engines: no SMs). The all-gathers before QKV and FC1 and
//                  of the output gradient before the proj / FC2 input
//                  gradient; TE can run the forward reduce-scatters so too.
//   pipeline       the GEMM in num_splits chunks of its output features,
//                  each chunk's reduce-scatter on num_sm SMs beside the next
//                  chunk's GEMM (proj and FC2 forward).
//   bulk           the whole GEMM beside one collective on num_sm SMs (the
//                  backward's input re-gather and input-gradient
//                  reduce-scatter, behind the QKV and FC1 dgrad and wgrad).
//
// set_sm_margin: the GEMM leaves num_sm SMs to the communication (cuBLAS
// math_sms = SMs - num_sm, comm_gemm_overlap.cpp), so it runs on fewer SMs;
// without it the two share the SMs.
//
// Config files: frameworks/tp_overlap/<name>.json, each naming its source:
//   {"name": ..., "source": ..., "base": "te1_defaults" | "te2_defaults",
//    "qkv_fprop": {"method": "ring_exchange", "aggregate": true}, ...}
// Keys left out keep the base's (TE fills a layer the config omits with its
// default the same way).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace loom {

enum class UbMethod : uint8_t { kRingExchange, kPipeline, kBulk };
const char* ub_method_name(UbMethod m);

struct UbGemm {
  UbMethod method = UbMethod::kBulk;
  int num_sm = 16;             // SMs of its communication kernel (ring exchange: copy engines)
  bool set_sm_margin = false;  // the GEMM runs on the other SMs only
  int num_splits = 4;          // pipeline: GEMM chunks
  bool aggregate = false;      // ring exchange: two slices a GEMM
  bool atomic_gemm = false;    // one GEMM signalling its chunks by atomic counters (FP8), not one per chunk
  bool operator==(const UbGemm&) const = default;
};

struct TpOverlapConfig {
  std::string name = "te2_defaults";
  // All-gather side: ring exchange.
  UbGemm qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad;
  // Forward reduce-scatters: pipeline or ring exchange.
  UbGemm proj_fprop, fc2_fprop;
  // Backward bulk overlaps.
  UbGemm qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad;
  bool operator==(const TpOverlapConfig&) const = default;
};

// Transformer Engine's defaults when no config is given: TE >= 2.1
// (get_default_config: ring exchange num_sm 1, pipeline and bulk num_sm 16
// with set_sm_margin, pipeline num_splits 4) and TE 1.x (initialize_ub's
// add_ub defaults: num_sm 16, set_sm_margin off, num_splits 4).
TpOverlapConfig te2_default_tp_overlap();
TpOverlapConfig te1_default_tp_overlap();

// Parses a config (see above); errors name the key and what it takes. A
// file must name its source; a plan's copy (tp_overlap_config_json) need not.
Result<TpOverlapConfig> parse_tp_overlap_config(const std::string& json_text, const std::string& name,
                                                bool require_source);
// A name from frameworks/tp_overlap/ (or te1_defaults / te2_defaults) or a path.
Result<TpOverlapConfig> load_tp_overlap_config(const std::string& path_or_name);

// The config as JSON (every key) and back, for plans.
std::string tp_overlap_config_json(const TpOverlapConfig& c);
// The config as the YAML file Megatron's --tp-comm-overlap-cfg reads (TE's
// ub_cfgs: one mapping per overlap, TE's keys and 0/1 for the booleans).
std::string tp_overlap_config_yaml(const TpOverlapConfig& c);
// Whether `c` is one of Transformer Engine's own defaults (no file needed).
bool is_te_default_tp_overlap(const TpOverlapConfig& c);

}  // namespace loom
