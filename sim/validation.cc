#include "sim/validation.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "core/json_util.h"
#include "core/model_spec.h"
#include "sim/framework.h"
#include "sim/plan_request.h"
#include "sim/search.h"
#include "sim/simulate.h"
#include "sim/validation_row.h"

namespace loom {

namespace fs = std::filesystem;

const char* run_metric_name(RunMetric m) {
  switch (m) {
    case RunMetric::kTokensPerSecPerGpu: return "tokens_per_s_per_gpu";
    case RunMetric::kStepTime: return "step_time_s";
    case RunMetric::kTflopsMegatron2021: return "tflops_megatron_2021";
    case RunMetric::kTflopsMegatron: return "tflops_megatron";
    case RunMetric::kTflopsPalm: return "tflops_palm";
  }
  return "?";
}

namespace {

Result<RunMetric> parse_metric(const std::string& s, const std::string& where) {
  for (RunMetric m : {RunMetric::kTokensPerSecPerGpu, RunMetric::kStepTime, RunMetric::kTflopsMegatron2021,
                      RunMetric::kTflopsMegatron, RunMetric::kTflopsPalm})
    if (s == run_metric_name(m)) return m;
  return invalid_argument(where + ".metric '" + s +
                          "' is unknown; use tokens_per_s_per_gpu, step_time_s, tflops_megatron_2021, "
                          "tflops_megatron or tflops_palm");
}

Result<int> tristate(const Json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) return -1;
  if (!j[key].is_boolean()) return invalid_argument(where + "." + key + " must be true or false");
  return j[key].get<bool>() ? 1 : 0;
}

// The source's model FLOPs per token for the Megatron-family formulas.
double megatron_flops_per_token(const ModelSpec& m, double s) {
  const double L = m.num_layers, h = double(m.hidden), V = double(m.vocab);
  const double G = m.num_kv_heads, H = m.num_heads;
  const double q = double(m.num_heads) * double(m.head_dim) / h;
  double F = double(m.ffn_hidden);
  if (m.is_moe())
    F = double(m.moe.expert_ffn_hidden) * m.moe.experts_per_token +
        double(m.moe.shared_expert_ffn_hidden) * m.moe.num_shared_experts;
  const double mlp = (m.mlp == MlpKind::kSwiGlu ? 1.5 : 1.0) * 12 * L * F * h;
  return 12 * L * h * h * (1 + G / H + s / h) * q + mlp + 6 * V * h;
}

}  // namespace

Result<PublishedRun> parse_published_run(const Json& r, std::string w, const std::string& base_dir) {
  if (!r.is_object()) return invalid_argument(w + " must be an object");
  PublishedRun p;
  LOOM_ASSIGN_OR_RETURN(p.id, json_string(r, "id", w));
  w += " (" + p.id + ")";
  LOOM_ASSIGN_OR_RETURN(p.group_gpu, json_string(r, "gpu", w));
  LOOM_ASSIGN_OR_RETURN(p.group_kind, json_string_or(r, "kind", "dense", w));
  LOOM_ASSIGN_OR_RETURN(p.model, json_string(r, "model", w));
  if (p.model.find('/') != std::string::npos && fs::path(p.model).is_relative())
    p.model = (fs::path(base_dir) / p.model).lexically_normal().string();
  LOOM_ASSIGN_OR_RETURN(p.hw, json_string(r, "hw", w));
  LOOM_ASSIGN_OR_RETURN(int64_t gpus, json_positive_int(r, "gpus", w));
  p.gpus = int(gpus);
  LOOM_ASSIGN_OR_RETURN(p.global_batch, json_positive_int(r, "global_batch", w));
  LOOM_ASSIGN_OR_RETURN(p.seq, json_positive_int(r, "seq", w));
  LOOM_ASSIGN_OR_RETURN(p.precision, json_string(r, "precision", w));
  LOOM_ASSIGN_OR_RETURN(p.framework, json_string_or(r, "framework", "", w));
  LOOM_ASSIGN_OR_RETURN(p.flash_attention, tristate(r, "flash_attention", w));
  LOOM_ASSIGN_OR_RETURN(p.fp32_main_grads, tristate(r, "fp32_main_grads", w));
  LOOM_ASSIGN_OR_RETURN(p.tp_async_backward, tristate(r, "tp_async_backward", w));
  LOOM_ASSIGN_OR_RETURN(p.fp8_params, tristate(r, "fp8_params", w));
  LOOM_ASSIGN_OR_RETURN(p.grad_nan_check, tristate(r, "grad_nan_check", w));
  LOOM_ASSIGN_OR_RETURN(p.grad_scale_pass, tristate(r, "grad_scale_pass", w));
  LOOM_ASSIGN_OR_RETURN(p.qkv_bshd_copies, tristate(r, "qkv_bshd_copies", w));
  if (p.qkv_bshd_copies >= 0 && !(r.contains("qkv_bshd_source") && r["qkv_bshd_source"].is_string()))
    return invalid_argument(w + ".qkv_bshd_source is missing: name the release and setting the row's q/k/v copies were read from");
  if ((p.grad_nan_check >= 0 || p.grad_scale_pass >= 0) &&
      !(r.contains("grad_buffer_source") && r["grad_buffer_source"].is_string()))
    return invalid_argument(w + ".grad_buffer_source is missing: name the code the row's gradient-buffer passes were read from");
  LOOM_ASSIGN_OR_RETURN(p.tp_comm_overlap, tristate(r, "tp_comm_overlap", w));
  LOOM_ASSIGN_OR_RETURN(p.ep_comm_overlap, tristate(r, "ep_comm_overlap", w));
  LOOM_ASSIGN_OR_RETURN(p.pp_blocking_p2p, tristate(r, "pp_blocking_p2p", w));
  LOOM_ASSIGN_OR_RETURN(p.pp_overlap_p2p_comm, tristate(r, "pp_overlap_p2p_comm", w));
  LOOM_ASSIGN_OR_RETURN(p.moe_dedup_dispatch, tristate(r, "moe_dedup_dispatch", w));
  LOOM_ASSIGN_OR_RETURN(p.moe_fp8_dispatch, tristate(r, "moe_fp8_dispatch", w));
  LOOM_ASSIGN_OR_RETURN(p.moe_load_imbalance, json_number_or(r, "moe_load_imbalance", -1, w));
  LOOM_ASSIGN_OR_RETURN(p.moe_capacity_factor, json_number_or(r, "moe_capacity_factor", -1, w));
  LOOM_ASSIGN_OR_RETURN(int64_t dispatch_sms, json_int_or(r, "moe_dispatch_sms", 0, w));
  LOOM_RETURN_IF_ERROR(check_moe_dispatch_sms(dispatch_sms, w + ".moe_dispatch_sms"));
  p.moe_dispatch_sms = int(dispatch_sms);
  if (p.moe_dispatch_sms > 0 && !(r.contains("moe_dispatch_source") && r["moe_dispatch_source"].is_string()))
    return invalid_argument(w + ".moe_dispatch_source is missing: name the configuration that sets the dispatcher's SMs");
  LOOM_ASSIGN_OR_RETURN(p.expert_gemm, json_string_or(r, "expert_gemm", "", w));
  ExpertGemm expert_gemm;
  if (!p.expert_gemm.empty() && !parse_expert_gemm(p.expert_gemm, &expert_gemm))
    return invalid_argument(w + ".expert_gemm must be grouped or per_expert, got '" + p.expert_gemm + "'");
  LOOM_ASSIGN_OR_RETURN(p.fp8_attention, tristate(r, "fp8_attention", w));
  if ((!p.expert_gemm.empty() || p.fp8_attention >= 0) &&
      !(r.contains("kernels_source") && r["kernels_source"].is_string()))
    return invalid_argument(w + ".kernels_source is missing: name the configuration the row's expert GEMMs or FP8 "
                                "attention were read from");
  LOOM_ASSIGN_OR_RETURN(int64_t dropout, json_int_or(r, "dropout", -2, w));
  p.dropout = int(dropout);
  LOOM_ASSIGN_OR_RETURN(p.fp8_scaling, json_string_or(r, "fp8_scaling", "", w));
  LOOM_ASSIGN_OR_RETURN(p.optimizer_master_bytes, json_number_or(r, "optimizer_master_bytes", 0, w));
  LOOM_ASSIGN_OR_RETURN(p.optimizer_moment_bytes, json_number_or(r, "optimizer_moment_bytes", 0, w));
  LOOM_RETURN_IF_ERROR(check_optimizer_state_overrides(p.optimizer_master_bytes, p.optimizer_moment_bytes, w));
  if ((p.optimizer_master_bytes != 0 || p.optimizer_moment_bytes != 0) &&
      !(r.contains("optimizer_source") && r["optimizer_source"].is_string()))
    return invalid_argument(w + ".optimizer_source is missing: name the code the optimizer's state dtypes were read from");
  LOOM_ASSIGN_OR_RETURN(p.grad_bucket_params, json_number_or(r, "grad_bucket_params", -1, w));
  if (r.contains("grad_bucket_params") && !(p.grad_bucket_params > 0))
    return invalid_argument(w + ".grad_bucket_params must be > 0 (parameters in a bucket)");
  LOOM_ASSIGN_OR_RETURN(p.bucketed_chunks, json_string_or(r, "bucketed_chunks", "", w));
  BucketedChunks bucketed;
  if (!p.bucketed_chunks.empty() && !parse_bucketed_chunks(p.bucketed_chunks, &bucketed))
    return invalid_argument(w + ".bucketed_chunks must be all, first or none, got '" + p.bucketed_chunks + "'");
  LOOM_ASSIGN_OR_RETURN(p.grad_bucket_layers, tristate(r, "grad_bucket_layers", w));
  if ((p.grad_bucket_params > 0 || !p.bucketed_chunks.empty() || p.grad_bucket_layers >= 0) &&
      !(r.contains("grad_bucket_source") && r["grad_bucket_source"].is_string()))
    return invalid_argument(w + ".grad_bucket_source is missing: name the configuration and code the row's "
                                "gradient buckets were read from");
  LOOM_ASSIGN_OR_RETURN(p.cross_entropy, json_string_or(r, "cross_entropy", "", w));
  CrossEntropyImpl ce;
  if (!p.cross_entropy.empty() && !parse_cross_entropy(p.cross_entropy, &ce))
    return invalid_argument(w + ".cross_entropy must be " + cross_entropy_names() + ", got '" + p.cross_entropy + "'");
  if (!p.cross_entropy.empty() && !(r.contains("cross_entropy_source") && r["cross_entropy_source"].is_string()))
    return invalid_argument(w + ".cross_entropy_source is missing: name the code the row's loss was read from");
  LOOM_ASSIGN_OR_RETURN(p.tp_comm_overlap_cfg, json_string_or(r, "tp_comm_overlap_cfg", "", w));
  if (!p.tp_comm_overlap_cfg.empty()) {
    if (Status s = load_tp_overlap_config(p.tp_comm_overlap_cfg).status(); !s.is_ok())
      return invalid_argument(w + ".tp_comm_overlap_cfg: " + s.message());
  }
  LOOM_ASSIGN_OR_RETURN(p.attention_kernel, json_string_or(r, "attention_kernel", "", w));
  if (!p.attention_kernel.empty() && !(r.contains("attention_kernel_source") && r["attention_kernel_source"].is_string()))
    return invalid_argument(w + ".attention_kernel_source is missing: say why the row's stack ran that kernel");
  LOOM_ASSIGN_OR_RETURN(p.layer_split, json_string_or(r, "layer_split", "", w));
  LayerSplitRule split;
  if (!p.layer_split.empty() && !parse_layer_split(p.layer_split, &split))
    return invalid_argument(w + ".layer_split must be any or equal_chunks, got '" + p.layer_split + "'");
  if (!p.layer_split.empty() && p.framework.empty())
    return invalid_argument(w + ".layer_split needs a framework: it says which splits that stack's release states");
  LOOM_ASSIGN_OR_RETURN(p.layout, json_string_or(r, "layout", "", w));
  LOOM_ASSIGN_OR_RETURN(p.fix, json_string_or(r, "fix", "", w));
  if (p.layout.empty() == p.fix.empty())
    return invalid_argument(w + ": give either \"layout\" (the whole published layout) or \"fix\" (the published "
                                "dimensions, the rest searched)");
  LOOM_ASSIGN_OR_RETURN(std::string metric, json_string(r, "metric", w));
  LOOM_ASSIGN_OR_RETURN(p.metric, parse_metric(metric, w));
  LOOM_ASSIGN_OR_RETURN(p.published, json_positive(r, "published", w));
  LOOM_ASSIGN_OR_RETURN(p.tolerance, json_positive(r, "tolerance", w));
  LOOM_ASSIGN_OR_RETURN(p.memory_headroom, json_number_or(r, "memory_headroom", 0, w));
  if (!valid_memory_headroom(p.memory_headroom))
    return invalid_argument(w + ".memory_headroom must lie in [0, 0.9] (a fraction of the device memory kept free)");
  LOOM_ASSIGN_OR_RETURN(p.source, json_string(r, "source", w));
  LOOM_ASSIGN_OR_RETURN(p.notes, json_string_or(r, "notes", "", w));
  LOOM_ASSIGN_OR_RETURN(p.pending, json_string_or(r, "pending", "", w));
  return p;
}

Result<std::vector<PublishedRun>> parse_published_runs(const std::string& json_text, const std::string& base_dir) {
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(json_text, "published runs"));
  if (!j.is_object() || !j.contains("runs") || !j["runs"].is_array())
    return invalid_argument("published runs: expected an object with a \"runs\" array");
  std::vector<PublishedRun> out;
  for (size_t i = 0; i < j["runs"].size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(PublishedRun p,
                          parse_published_run(j["runs"][i], "runs[" + std::to_string(i) + "]", base_dir));
    out.push_back(std::move(p));
  }
  return out;
}

Result<std::vector<PublishedRun>> load_published_runs(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_published_runs(text, fs::path(path).parent_path().string());
}

RunPrediction predict_run(const PublishedRun& run) {
  RunPrediction out;
  out.run = run;
  auto fail = [&](const Status& s) {
    out.error = s.to_string();
    return out;
  };
  auto model = load_model_spec(run.model);
  if (!model.is_ok()) return fail(model.status());
  auto hw = load_hw_profile(run.hw);
  if (!hw.is_ok()) return fail(hw.status());
  PlanRequest req;
  req.gpus = run.gpus;
  req.global_batch = run.global_batch;
  req.seq = run.seq;
  req.precision = run.precision;
  req.framework = run.framework;
  req.attention_kernel = run.attention_kernel;
  req.memory_headroom = run.memory_headroom;
  if (Status s = apply_request_to_hw(req, &*hw); !s.is_ok()) return fail(s);
  auto train = make_train_spec(req, *hw);
  if (!train.is_ok()) return fail(train.status());
  std::optional<Framework> framework;
  if (!run.framework.empty()) {
    auto f = load_framework(run.framework);
    if (!f.is_ok()) return fail(f.status());
    framework = std::move(f).value();
    if (!run.layer_split.empty()) parse_layer_split(run.layer_split, &framework->layer_split);  // checked on load
  }
  const Framework* fw = framework ? &*framework : nullptr;
  // The framework's options, then the row's own.
  SimOptions opt = make_sim_options(req, *hw, fw);
  opt.loom_executor = false;  // a published run: another stack's buffers
  if (run.flash_attention >= 0) opt.flash_attention = run.flash_attention == 1;
  if (run.fp32_main_grads >= 0) opt.fp32_main_grads = run.fp32_main_grads == 1;
  if (run.tp_async_backward >= 0) opt.tp_async_backward = run.tp_async_backward == 1;
  if (run.dropout != -2) opt.dropout = run.dropout;
  if (run.fp8_params >= 0) opt.fp8_params = run.fp8_params == 1;
  if (run.grad_nan_check >= 0) opt.grad_nan_check = run.grad_nan_check == 1;
  if (run.grad_scale_pass >= 0) opt.grad_scale_pass = run.grad_scale_pass == 1;
  if (run.qkv_bshd_copies >= 0) opt.qkv_bshd_copies = run.qkv_bshd_copies == 1;
  if (run.tp_comm_overlap >= 0) opt.tp_comm_overlap = run.tp_comm_overlap == 1;
  if (!run.tp_comm_overlap_cfg.empty()) {
    auto cfg = load_tp_overlap_config(run.tp_comm_overlap_cfg);  // checked on load
    if (!cfg.is_ok()) return fail(cfg.status());
    opt.tp_overlap = std::move(cfg).value();
  }
  if (run.ep_comm_overlap >= 0) opt.ep_comm_overlap = run.ep_comm_overlap == 1;
  if (run.pp_blocking_p2p >= 0) opt.pp_blocking_p2p = run.pp_blocking_p2p == 1;
  if (run.pp_overlap_p2p_comm >= 0) opt.pp_overlap_p2p_comm = run.pp_overlap_p2p_comm == 1;
  if (run.moe_dedup_dispatch >= 0) opt.moe_dedup_dispatch = run.moe_dedup_dispatch == 1;
  if (run.moe_fp8_dispatch >= 0) opt.moe_fp8_dispatch = run.moe_fp8_dispatch == 1;
  if (run.moe_load_imbalance >= 0) opt.moe_load_imbalance = std::max(1.0, run.moe_load_imbalance);
  if (run.moe_capacity_factor >= 0) opt.moe_capacity_factor = run.moe_capacity_factor;
  if (run.moe_dispatch_sms > 0) opt.moe_dispatch_sms = run.moe_dispatch_sms;
  if (!run.expert_gemm.empty()) parse_expert_gemm(run.expert_gemm, &opt.expert_gemm);  // checked on load
  if (run.fp8_attention >= 0) opt.fp8_attention = run.fp8_attention == 1;
  if (run.grad_bucket_params > 0) {
    opt.grad_bucket_params = run.grad_bucket_params;
    opt.grad_bucket_params_per_dp = 0;  // the configuration's own size
  }
  if (run.grad_bucket_layers >= 0) opt.grad_bucket_layers = run.grad_bucket_layers == 1;
  if (!run.bucketed_chunks.empty()) {
    if (!opt.states_grad_buckets())
      return fail(invalid_argument(run.id + ": bucketed_chunks needs a bucket size (grad_bucket_params, or the "
                                            "framework's gradients.bucket_params)"));
    parse_bucketed_chunks(run.bucketed_chunks, &opt.bucketed_chunks);  // checked on load
  }
  apply_optimizer_state_overrides(run.optimizer_master_bytes, run.optimizer_moment_bytes, &opt);
  if (!run.fp8_scaling.empty() && !parse_fp8_scaling(run.fp8_scaling, &opt.fp8_scaling))
    return fail(invalid_argument(run.id + ": fp8_scaling must be delayed or current"));
  if (!run.cross_entropy.empty()) parse_cross_entropy(run.cross_entropy, &opt.cross_entropy);  // checked on load
  Evaluator eval(*model, *hw, *train, opt);

  SimResult result;
  if (!run.layout.empty()) {
    auto l = parse_layout(run.layout);
    if (!l.is_ok()) return fail(l.status());
    if (Status s = validate_layout(*l, *model, *train, run.gpus); !s.is_ok()) return fail(s);
    if (fw) apply_framework_overlap(*fw, run.layout, &*l);
    auto r = simulate_layout(eval, *l);
    if (!r.is_ok()) return fail(r.status());
    result = std::move(r).value();
    out.fits = result.memory.fits;
  } else {
    SearchSpace space = make_search_space(req, fw);
    space.world = run.gpus;
    space.refine_top = 4;
    if (Status s = apply_search_fix(run.fix, &space); !s.is_ok()) return fail(s);
    auto res = search_layouts(eval, space);
    if (!res.is_ok()) return fail(res.status());
    if (res->refined.empty()) {
      out.ok = true;
      out.fits = false;
      out.layout = res->closest ? res->closest->layout.to_string() + " (" + res->closest_why + ")" : "";
      return out;
    }
    result = res->refined[0];
    out.fits = true;
  }
  out.layout = result.layout.to_string();
  out.peak_memory_bytes = result.memory.peak_bytes();
  out.memory_capacity_bytes = result.memory.capacity_bytes;
  const double step = result.figures.step_time_s;
  out.time = result.time;
  out.closed_form_time = result.closed_form.time;
  const double tokens = double(run.global_batch) * double(run.seq);
  switch (run.metric) {
    case RunMetric::kTokensPerSecPerGpu: out.predicted = result.figures.tokens_per_s_per_gpu; break;
    case RunMetric::kStepTime: out.predicted = step; break;
    case RunMetric::kTflopsPalm: out.predicted = result.figures.model_tflops_per_gpu; break;
    case RunMetric::kTflopsMegatron2021: {
      const double B = double(run.global_batch), s = double(run.seq), L = model->num_layers,
                   h = double(model->hidden), V = double(model->vocab);
      out.predicted = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h)) / step / run.gpus / 1e12;
      break;
    }
    case RunMetric::kTflopsMegatron:
      out.predicted = megatron_flops_per_token(*model, double(run.seq)) * tokens / step / run.gpus / 1e12;
      break;
  }
  out.ok = true;
  // Errors in throughput terms: a step time predicted 10% short is +11% throughput.
  out.rel_error = run.metric == RunMetric::kStepTime ? run.published / out.predicted - 1 : out.predicted / run.published - 1;
  out.within_tolerance = out.fits && std::fabs(out.rel_error) <= run.tolerance;
  return out;
}

std::string format_validation_markdown(const std::vector<RunPrediction>& rows) {
  std::ostringstream o;
  char buf[512];
  auto g4 = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.4g", v);
    return std::string(b);
  };
  o << "| ID | model | hardware | GPUs | precision | framework | layout predicted | metric | published | predicted | "
       "error | pinned within | fits |\n";
  o << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  struct Acc {
    double sum = 0;
    int n = 0;
  };
  std::map<std::string, Acc> groups;
  Acc all;
  int within10 = 0, within_tol = 0, not_fit = 0, errors = 0, pending = 0;
  for (const RunPrediction& p : rows) {
    const PublishedRun& r = p.run;
    if (!r.pending.empty()) ++pending;
    const std::string model = fs::path(r.model).stem().string();
    if (!p.ok) {
      if (r.pending.empty()) ++errors;
      // Streamed, not formatted into a fixed buffer: a pending reason can be
      // longer than any buffer, and a cut row would lose its line end.
      o << "| " << r.id << " | " << model << " | " << r.hw << " | " << r.gpus << " | " << r.precision << " | "
        << r.framework << " | " << (r.pending.empty() ? "error" : "pending") << ": "
        << (r.pending.empty() ? p.error : r.pending) << " | | " << g4(r.published) << " | | | | |\n";
      continue;
    }
    if (!p.fits && r.pending.empty()) ++not_fit;
    const std::string tol = r.pending.empty() ? "±" + std::to_string(int(std::lround(100 * r.tolerance))) + "%"
                                              : "pending: " + r.pending;
    std::snprintf(buf, sizeof buf, "%+.1f%%", 100 * p.rel_error);
    o << "| " << r.id << " | " << model << " | " << r.hw << " | " << r.gpus << " | " << r.precision << " | "
      << (r.framework.empty() ? "—" : r.framework) << " | " << p.layout << " | " << run_metric_name(r.metric) << " | "
      << g4(r.published) << " | " << g4(p.predicted) << " | " << buf << " | " << tol << " | "
      << (p.fits ? "yes" : "**no**") << " |\n";
    if (!p.fits || !r.pending.empty()) continue;
    const double e = std::fabs(p.rel_error);
    all.sum += e;
    ++all.n;
    if (e <= 0.10) ++within10;
    if (p.within_tolerance) ++within_tol;
    const std::string prec = r.precision == "fp8" ? "FP8" : "BF16/FP16";
    for (const std::string& g : {r.group_gpu, r.group_kind, prec}) {
      groups[g].sum += e;
      ++groups[g].n;
    }
  }
  o << "\n";
  std::snprintf(buf, sizeof buf,
                "%zu runs (%d pending): mean absolute error %.1f%% over the %d pinned runs predicted to fit; %d within "
                "±10%%, %d within their pinned tolerance; %d predicted not to fit; %d not predicted (error).\n\n",
                rows.size(), pending, all.n ? 100 * all.sum / all.n : 0.0, all.n, within10, within_tol, not_fit, errors);
  o << buf;
  o << "| group | runs | mean absolute error |\n|---|---|---|\n";
  for (const auto& [g, a] : groups) {
    std::snprintf(buf, sizeof buf, "| %s | %d | %.1f%% |\n", g.c_str(), a.n, 100 * a.sum / a.n);
    o << buf;
  }
  return o.str();
}

std::string format_breakdown_markdown(const std::vector<RunPrediction>& rows) {
  std::ostringstream o;
  o << "| ID | step s | closed form s | forward | backward | recompute | TP exposed | EP exposed | CP exposed | PP exposed | "
       "DP exposed | contention | bubble | optimizer | memory GB |\n";
  o << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  char buf[64];
  for (const RunPrediction& p : rows) {
    if (!p.ok || p.time.step_time_s <= 0) continue;
    const StepBreakdown& t = p.time;
    std::snprintf(buf, sizeof buf, "%.4g", t.step_time_s);
    o << "| " << p.run.id << " | " << buf;
    std::snprintf(buf, sizeof buf, "%.4g", p.closed_form_time.step_time_s);
    o << " | " << buf;
    for (double v : {t.forward_s, t.backward_s, t.recompute_s, t.tp_comm_s, t.ep_comm_s, t.cp_comm_s, t.pp_comm_s,
                     t.dp_comm_s, t.contention_s, t.bubble_s, t.optimizer_s}) {
      std::snprintf(buf, sizeof buf, "%.1f%%", 100 * v / t.step_time_s);
      o << " | " << buf;
    }
    // The worst stage's peak against the usable memory: the fit verdict's margin.
    std::snprintf(buf, sizeof buf, "%.1f of %.1f", p.peak_memory_bytes / 1e9, p.memory_capacity_bytes / 1e9);
    o << " | " << buf << " |\n";
  }
  return o.str();
}

}  // namespace loom
