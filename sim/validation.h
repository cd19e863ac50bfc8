// Validation against published training runs: a table of runs as published
// (validation/published_runs.json, format in docs/validation.md), each
// predicted with the same PlanRequest path as `loom plan`, in the run's own
// metric, with its error and whether the run is predicted to fit.
//
// A row pins either the whole layout ("layout") or the dimensions the source
// published ("fix"), the rest searched within the row's framework, as the
// authors tuned them. Nothing in a row feeds the simulator's constants.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "sim/evaluate.h"

namespace loom {

// How the source states its figure.
enum class RunMetric {
  kTokensPerSecPerGpu,  // tokens / s / GPU
  kStepTime,            // seconds per optimizer step
  kTflopsMegatron2021,  // Narayanan et al. (SC'21): 96 B s L h^2 (1 + s/6h + V/16Lh) per step per GPU
  kTflopsMegatron,      // Megatron-core / NeMo: per token 12 L h^2 (1 + G/H + s/h) + 12 L F h (x1.5 SwiGLU) + 6 V h
  kTflopsPalm,          // PaLM model FLOPs (Meta's MFU): Loom's model_tflops_per_gpu
};

struct PublishedRun {
  std::string id;          // e.g. "M1"
  std::string group_gpu;   // "A100", "H100", "B200"
  std::string group_kind;  // "dense", "moe"
  std::string model;       // name from models/ or a path (relative to the table's folder)
  std::string hw;
  int gpus = 0;
  int64_t global_batch = 0;
  int64_t seq = 0;
  std::string precision;   // bf16 | fp16 | fp8
  std::string framework;   // frameworks/<name>, empty: Loom's defaults
  // Overrides of the framework's options (absent: the framework's).
  int grad_nan_check = -1, grad_scale_pass = -1;  // SimOptions' gradient-buffer passes (grad_buffer_source)
  int qkv_bshd_copies = -1;                       // SimOptions::qkv_bshd_copies (qkv_bshd_source)
  int flash_attention = -1, dropout = -2, fp32_main_grads = -1, tp_async_backward = -1, fp8_params = -1,
      tp_comm_overlap = -1, ep_comm_overlap = -1,
      pp_blocking_p2p = -1, pp_overlap_p2p_comm = -1, moe_dedup_dispatch = -1, moe_fp8_dispatch = -1;
  double moe_load_imbalance = -1, moe_capacity_factor = -1;  // < 0: the default
  int moe_dispatch_sms = 0;  // SimOptions::moe_dispatch_sms where the stack states it (moe_dispatch_source)
  // How the stack ran the experts' GEMMs and the attention where the row's
  // configuration departs from its framework's (SimOptions::expert_gemm,
  // fp8_attention); empty / -1: the framework's. Each needs its *_source.
  std::string expert_gemm;
  int fp8_attention = -1;
  std::string fp8_scaling;
  // Adam's state bytes a parameter where the stack's optimizer differs from
  // fp32 master, m and v (SimOptions::optimizer_master_bytes,
  // optimizer_moment_bytes; 0: the framework's), with optimizer_source.
  double optimizer_master_bytes = 0, optimizer_moment_bytes = 0;
  // The stack's gradient bucket size in parameters where its configuration
  // states one (SimOptions::grad_bucket_params; the framework's rule's
  // per-DP growth off), and which chunks it buckets (all, first, none);
  // < 0 / empty: the framework's. Needs grad_bucket_source.
  double grad_bucket_params = -1;
  std::string bucketed_chunks;
  int grad_bucket_layers = -1;  // SimOptions::grad_bucket_layers (NeMo 1.x's Apex buckets by layer)
  std::string cross_entropy;  // the loss's implementation (SimOptions::cross_entropy); empty: the framework's
  std::string tp_comm_overlap_cfg;  // SimOptions::tp_overlap (frameworks/tp_overlap/); empty: the framework's
  // The hardware profile's attention kernel the row's stack ran (HwProfile's
  // attention_kernels); empty: the profile's own. Needs attention_kernel_source.
  std::string attention_kernel;
  // The layer splits the row's stack release can state (Framework::layer_split:
  // any or equal_chunks); empty: the framework's. A row whose release predates
  // the framework file's sets it, with its source in the notes.
  std::string layer_split;
  std::string layout;      // a whole layout, or empty
  std::string fix;         // pinned dimensions (loom plan --fix syntax) when the layout is searched
  RunMetric metric = RunMetric::kTokensPerSecPerGpu;
  double published = 0;
  double tolerance = 0.10; // pinned: |predicted / published - 1| <= tolerance
  double memory_headroom = 0;  // SimOptions::memory_headroom (loom plan --memory-headroom)
  // Not pinned yet, and why (a mechanism Loom lacks, e.g. uneven pipeline
  // splits); the row is still predicted where it can be.
  std::string pending;
  std::string source;
  std::string notes;
};

struct RunPrediction {
  PublishedRun run;
  bool ok = false;         // predicted at all (an error otherwise, in `error`)
  std::string error;
  std::string layout;      // the layout predicted (searched or given)
  bool fits = false;
  double peak_memory_bytes = 0;  // the worst stage's, of the predicted layout
  double memory_capacity_bytes = 0;
  double predicted = 0;    // in the run's metric
  double rel_error = 0;    // predicted / published - 1, in throughput terms (step time inverted)
  // The step of the predicted layout from the event engine, by phase
  // (time.step_time_s is what `predicted` comes from; zero where the run was
  // not predicted), and the closed form's, which the search ranks by.
  StepBreakdown time;
  StepBreakdown closed_form_time;
  bool within_tolerance = false;
  // A pinned row that holds: predicted, fits, within tolerance. Pending rows hold.
  bool holds() const { return !run.pending.empty() || (ok && within_tolerance); }
};

const char* run_metric_name(RunMetric m);
// `base_dir`: where relative model paths are resolved (the table's folder).
Result<std::vector<PublishedRun>> parse_published_runs(const std::string& json_text, const std::string& base_dir);
Result<std::vector<PublishedRun>> load_published_runs(const std::string& path);
RunPrediction predict_run(const PublishedRun& run);
// The table and its summary (mean absolute error, rows within ±10% and
// within tolerance, fit verdicts, and the error by group) as Markdown.
std::string format_validation_markdown(const std::vector<RunPrediction>& rows);
// Each predicted row's step (seconds) and its phases (StepBreakdown) as shares
// of it, as Markdown: where the error of a row can sit.
std::string format_breakdown_markdown(const std::vector<RunPrediction>& rows);

}  // namespace loom
