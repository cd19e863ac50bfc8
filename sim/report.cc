#include "sim/report.h"

#include "core/throughput.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/json_util.h"

namespace loom {

std::string human_bytes(double b) {
  char buf[64];
  if (b >= 1e12) std::snprintf(buf, sizeof buf, "%.2f TB", b / 1e12);
  else if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(buf, sizeof buf, "%.2f KB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

std::string human_seconds(double s) {
  char buf[64];
  if (s >= 1) std::snprintf(buf, sizeof buf, "%.3f s", s);
  else if (s >= 1e-3) std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  return buf;
}

namespace {

OrderedJson breakdown_json(const StepBreakdown& t) {
  OrderedJson j;
  j["step_time_s"] = t.step_time_s;
  j["forward_s"] = t.forward_s;
  j["backward_s"] = t.backward_s;
  j["recompute_s"] = t.recompute_s;
  j["tp_comm_exposed_s"] = t.tp_comm_s;
  j["ep_comm_exposed_s"] = t.ep_comm_s;
  j["cp_comm_exposed_s"] = t.cp_comm_s;
  j["pp_comm_exposed_s"] = t.pp_comm_s;
  j["dp_comm_exposed_s"] = t.dp_comm_s;
  j["comm_contention_s"] = t.contention_s;
  j["bubble_s"] = t.bubble_s;
  j["optimizer_s"] = t.optimizer_s;
  return j;
}

}  // namespace

std::string prediction_json(const SimResult& r, int indent) {
  OrderedJson j;
  const Figures& f = r.figures;
  j["step_time_s"] = f.step_time_s;
  j["tokens_per_s"] = f.tokens_per_s;
  j["tokens_per_s_per_gpu"] = f.tokens_per_s_per_gpu;
  j["model_tflops_per_gpu"] = f.model_tflops_per_gpu;
  j["hardware_tflops_per_gpu"] = f.hardware_tflops_per_gpu;
  j["mfu"] = f.mfu;
  j["hfu"] = f.hfu;
  if (f.mfu_fp8_peak > 0) j["mfu_fp8_peak"] = f.mfu_fp8_peak;
  j["mfu_formula"] = kMfuFormula;
  j["fits"] = r.memory.fits;
  j["peak_memory_bytes"] = r.memory.peak_bytes();
  j["memory_capacity_bytes"] = r.memory.capacity_bytes;
  if (!r.memory.fits) j["does_not_fit"] = r.memory.why_not();
  j["critical_stage"] = r.critical_stage;
  if (!r.outside_measured.empty()) j["outside_measured"] = r.outside_measured;
  j["phases"] = OrderedJson::parse(phases_to_json(r.phases));
  j["breakdown"] = breakdown_json(r.time);
  j["closed_form"] = {{"step_time_s", r.closed_form.time.step_time_s},
                      {"breakdown", breakdown_json(r.closed_form.time)}};
  OrderedJson stages = OrderedJson::array();
  for (const StageMemory& s : r.memory.stages) {
    OrderedJson js;
    js["stage"] = s.stage;
    js["layers"] = s.layers;
    js["params"] = s.params;
    js["weights_bytes"] = s.weights_bytes;
    js["grads_bytes"] = s.grads_bytes;
    js["optimizer_bytes"] = s.optimizer_bytes;
    js["activations_bytes"] = s.activations_bytes;
    js["comm_buffer_bytes"] = s.comm_buffer_bytes;
    js["workspace_bytes"] = s.workspace_bytes;
    js["inputs_bytes"] = s.inputs_bytes;
    js["overhead_bytes"] = s.overhead_bytes;
    js["total_bytes"] = s.total_bytes();
    if (s.stage < int(r.timeline.compute_busy_s.size())) {
      js["compute_busy_s"] = r.timeline.compute_busy_s[s.stage];
      js["bubble_s"] = r.timeline.idle[s.stage].pipeline_s;
    }
    stages.push_back(js);
  }
  j["memory_per_stage"] = stages;
  OrderedJson traffic;
  for (int k = 0; k < kNumCommKinds; ++k) {
    OrderedJson jk;
    for (int c = 0; c < kNumLinkClasses; ++c)
      jk[std::string(link_class_name(static_cast<LinkClass>(c))) + "_bytes"] = r.traffic.bytes[k][c];
    jk["time_s"] = r.traffic.time_s[k];
    jk["calls"] = r.traffic.calls[k];
    if (r.traffic.calls[k] > 0) {
      jk["typical_call_bytes"] = r.traffic.call_bytes[k];
      jk["typical_busbw_gb_per_s"] = r.traffic.busbw_bytes_per_s[k] / 1e9;
      jk["typical_algorithm"] = std::string(comm_algo_name(r.traffic.algo[k])) + "/" + comm_proto_name(r.traffic.proto[k]);
    }
    traffic[comm_kind_name(static_cast<CommKind>(k))] = jk;
  }
  OrderedJson links;
  for (int c = 0; c < kNumLinkClasses; ++c)
    links[std::string(link_class_name(static_cast<LinkClass>(c))) + "_bytes"] =
        r.traffic.link_bytes(static_cast<LinkClass>(c));
  traffic["per_link_class"] = links;
  j["traffic_per_rank_per_step"] = traffic;
  return j.dump(indent);
}

std::string sim_options_json(const SimOptions& o) {
  OrderedJson j;
  if (!o.framework.empty()) j["framework"] = o.framework;
  j["flash_attention"] = o.flash_attention;
  j["dropout"] = o.dropout;
  j["fp32_main_grads"] = o.fp32_main_grads;
  j["runtime_reserve_bytes"] = o.runtime_reserve_bytes;
  j["fragmentation_fraction"] = o.fragmentation_fraction;
  if (o.memory_headroom > 0) j["memory_headroom"] = o.memory_headroom;  // written when set: older plans keep their hash
  j["grad_buckets"] = o.grad_buckets;
  // Written only when stated, so plans made before them keep their hash.
  if (o.states_grad_buckets()) {
    j["grad_bucket_params"] = o.grad_bucket_params;
    j["grad_bucket_params_per_dp"] = o.grad_bucket_params_per_dp;
    j["bucketed_chunks"] = bucketed_chunks_name(o.bucketed_chunks);
    if (o.grad_bucket_layers) j["grad_bucket_layers"] = true;
  }
  j["tp_comm_overlap"] = o.tp_comm_overlap;
  // Written only with the overlap on, so plans made before it keep their hash.
  if (o.tp_comm_overlap) j["tp_comm_overlap_cfg"] = OrderedJson::parse(tp_overlap_config_json(o.tp_overlap));
  j["tp_async_backward"] = o.tp_async_backward;
  j["fp8_scaling"] = fp8_scaling_name(o.fp8_scaling);
  j["fp8_attention"] = o.fp8_attention;
  j["fp8_params"] = o.fp8_params;
  j["selective_recompute"] = selective_recompute_name(o.selective_recompute);
  // Written only when not the default, so plans made before it keep their hash.
  if (o.cross_entropy != CrossEntropyImpl::kFused) j["cross_entropy"] = cross_entropy_name(o.cross_entropy);
  if (o.layer_ops != LayerOps::kFused) j["layer_ops"] = layer_ops_name(o.layer_ops);
  if (o.fsdp_copies) j["fsdp_copies"] = true;
  // Written only when on, so plans made before them keep their hash.
  if (o.embedding_dense_grad) j["embedding_dense_grad"] = true;
  if (o.qkv_bshd_copies) j["qkv_bshd_copies"] = true;
  if (o.fused_layer_backward) j["fused_layer_backward"] = true;
  if (o.fp8_norm_cast_fused) j["fp8_norm_cast_fused"] = true;
  if (o.grad_buffer_zero) j["grad_buffer_zero"] = true;
  if (o.grad_nan_check) j["grad_nan_check"] = true;
  if (o.grad_scale_pass) j["grad_scale_pass"] = true;
  if (o.grad_hook_add) j["grad_hook_add"] = true;
  if (o.wgrad_gemm_accumulate) j["wgrad_gemm_accumulate"] = true;
  if (o.optimizer_master_bytes != 4) j["optimizer_master_bytes"] = o.optimizer_master_bytes;
  if (o.optimizer_moment_bytes != 4) j["optimizer_moment_bytes"] = o.optimizer_moment_bytes;
  j["moe_load_imbalance"] = o.moe_load_imbalance;
  j["ep_comm_overlap"] = o.ep_comm_overlap;
  j["pp_blocking_p2p"] = o.pp_blocking_p2p;
  j["moe_dedup_dispatch"] = o.moe_dedup_dispatch;
  j["moe_fp8_dispatch"] = o.moe_fp8_dispatch;
  if (o.moe_dispatch_sms > 0) j["moe_dispatch_sms"] = o.moe_dispatch_sms;  // (absent before it existed)
  j["moe_capacity_factor"] = o.moe_capacity_factor;
  if (o.expert_gemm != ExpertGemm::kGrouped) j["expert_gemm"] = expert_gemm_name(o.expert_gemm);
  j["pp_overlap_p2p_comm"] = o.pp_overlap_p2p_comm;
  if (o.pp_fsdp_once) j["pp_fsdp_once"] = true;  // (absent before it existed: plans keep their hash)
  j["kernel_overhead_s"] = o.kernel_overhead_s;
  j["dp_comm_host_progress"] = o.dp_comm_host_progress;
  return j.dump();
}

Result<SimOptions> parse_sim_options(const std::string& text) {
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(text, "sim_options"));
  SimOptions o;
  const std::string w = "sim_options";
  LOOM_ASSIGN_OR_RETURN(o.framework, json_string_or(j, "framework", "", w));
  LOOM_ASSIGN_OR_RETURN(o.flash_attention, json_bool_or(j, "flash_attention", o.flash_attention, w));
  LOOM_ASSIGN_OR_RETURN(int64_t dropout, json_int_or(j, "dropout", o.dropout, w));
  o.dropout = int(dropout);
  LOOM_ASSIGN_OR_RETURN(o.fp32_main_grads, json_bool_or(j, "fp32_main_grads", o.fp32_main_grads, w));
  LOOM_ASSIGN_OR_RETURN(o.runtime_reserve_bytes, json_number_or(j, "runtime_reserve_bytes", o.runtime_reserve_bytes, w));
  LOOM_ASSIGN_OR_RETURN(o.fragmentation_fraction,
                        json_number_or(j, "fragmentation_fraction", o.fragmentation_fraction, w));
  LOOM_ASSIGN_OR_RETURN(o.memory_headroom, json_number_or(j, "memory_headroom", o.memory_headroom, w));
  if (!valid_memory_headroom(o.memory_headroom))
    return invalid_argument(w + ".memory_headroom must lie in [0, 0.9] (a fraction of the device memory kept free)");
  LOOM_ASSIGN_OR_RETURN(int64_t buckets, json_int_or(j, "grad_buckets", o.grad_buckets, w));
  o.grad_buckets = int(buckets);
  LOOM_ASSIGN_OR_RETURN(o.grad_bucket_params, json_number_or(j, "grad_bucket_params", o.grad_bucket_params, w));
  LOOM_ASSIGN_OR_RETURN(o.grad_bucket_params_per_dp,
                        json_number_or(j, "grad_bucket_params_per_dp", o.grad_bucket_params_per_dp, w));
  if (o.grad_bucket_params < 0 || o.grad_bucket_params_per_dp < 0)
    return invalid_argument(w + ".grad_bucket_params and grad_bucket_params_per_dp must be >= 0");
  LOOM_ASSIGN_OR_RETURN(o.grad_bucket_layers, json_bool_or(j, "grad_bucket_layers", o.grad_bucket_layers, w));
  LOOM_ASSIGN_OR_RETURN(std::string bucketed,
                        json_string_or(j, "bucketed_chunks", bucketed_chunks_name(o.bucketed_chunks), w));
  if (!parse_bucketed_chunks(bucketed, &o.bucketed_chunks))
    return invalid_argument(w + ".bucketed_chunks must be \"all\", \"first\" or \"none\", got \"" + bucketed + "\"");
  LOOM_ASSIGN_OR_RETURN(o.tp_comm_overlap, json_bool_or(j, "tp_comm_overlap", o.tp_comm_overlap, w));
  if (j.contains("tp_comm_overlap_cfg")) {
    LOOM_ASSIGN_OR_RETURN(o.tp_overlap, parse_tp_overlap_config(j["tp_comm_overlap_cfg"].dump(), "of the plan", false));
  }
  LOOM_ASSIGN_OR_RETURN(o.kernel_overhead_s, json_number_or(j, "kernel_overhead_s", o.kernel_overhead_s, w));
  LOOM_ASSIGN_OR_RETURN(o.tp_async_backward, json_bool_or(j, "tp_async_backward", o.tp_async_backward, w));
  LOOM_ASSIGN_OR_RETURN(std::string scaling, json_string_or(j, "fp8_scaling", fp8_scaling_name(o.fp8_scaling), w));
  if (!parse_fp8_scaling(scaling, &o.fp8_scaling))
    return invalid_argument(w + ".fp8_scaling must be \"delayed\" or \"current\", got \"" + scaling + "\"");
  LOOM_ASSIGN_OR_RETURN(o.fp8_attention, json_bool_or(j, "fp8_attention", o.fp8_attention, w));
  LOOM_ASSIGN_OR_RETURN(o.fp8_params, json_bool_or(j, "fp8_params", o.fp8_params, w));
  LOOM_ASSIGN_OR_RETURN(std::string selective,
                        json_string_or(j, "selective_recompute", selective_recompute_name(o.selective_recompute), w));
  if (!parse_selective_recompute(selective, &o.selective_recompute))
    return invalid_argument(w + ".selective_recompute must be \"attention_core\" or \"every_other_matmul\", got \"" +
                            selective + "\"");
  LOOM_ASSIGN_OR_RETURN(std::string ce, json_string_or(j, "cross_entropy", cross_entropy_name(o.cross_entropy), w));
  if (!parse_cross_entropy(ce, &o.cross_entropy))
    return invalid_argument(w + ".cross_entropy must be " + cross_entropy_names() + ", got \"" + ce + "\"");
  LOOM_ASSIGN_OR_RETURN(std::string ops, json_string_or(j, "layer_ops", layer_ops_name(o.layer_ops), w));
  if (!parse_layer_ops(ops, &o.layer_ops))
    return invalid_argument(w + ".layer_ops must be \"fused\" or \"torch_eager\", got \"" + ops + "\"");
  LOOM_ASSIGN_OR_RETURN(o.fsdp_copies, json_bool_or(j, "fsdp_copies", o.fsdp_copies, w));
  LOOM_ASSIGN_OR_RETURN(o.embedding_dense_grad, json_bool_or(j, "embedding_dense_grad", o.embedding_dense_grad, w));
  LOOM_ASSIGN_OR_RETURN(o.qkv_bshd_copies, json_bool_or(j, "qkv_bshd_copies", o.qkv_bshd_copies, w));
  LOOM_ASSIGN_OR_RETURN(o.fused_layer_backward, json_bool_or(j, "fused_layer_backward", o.fused_layer_backward, w));
  LOOM_ASSIGN_OR_RETURN(o.fp8_norm_cast_fused, json_bool_or(j, "fp8_norm_cast_fused", o.fp8_norm_cast_fused, w));
  LOOM_ASSIGN_OR_RETURN(o.grad_buffer_zero, json_bool_or(j, "grad_buffer_zero", o.grad_buffer_zero, w));
  LOOM_ASSIGN_OR_RETURN(o.grad_nan_check, json_bool_or(j, "grad_nan_check", o.grad_nan_check, w));
  LOOM_ASSIGN_OR_RETURN(o.grad_scale_pass, json_bool_or(j, "grad_scale_pass", o.grad_scale_pass, w));
  LOOM_ASSIGN_OR_RETURN(o.grad_hook_add, json_bool_or(j, "grad_hook_add", o.grad_hook_add, w));
  LOOM_ASSIGN_OR_RETURN(o.wgrad_gemm_accumulate,
                        json_bool_or(j, "wgrad_gemm_accumulate", o.wgrad_gemm_accumulate, w));
  LOOM_ASSIGN_OR_RETURN(o.optimizer_master_bytes,
                        json_number_or(j, "optimizer_master_bytes", o.optimizer_master_bytes, w));
  LOOM_ASSIGN_OR_RETURN(o.optimizer_moment_bytes,
                        json_number_or(j, "optimizer_moment_bytes", o.optimizer_moment_bytes, w));
  LOOM_RETURN_IF_ERROR(check_optimizer_state_bytes(o.optimizer_master_bytes, o.optimizer_moment_bytes, w));
  LOOM_ASSIGN_OR_RETURN(o.moe_load_imbalance, json_number_or(j, "moe_load_imbalance", o.moe_load_imbalance, w));
  LOOM_ASSIGN_OR_RETURN(o.ep_comm_overlap, json_bool_or(j, "ep_comm_overlap", o.ep_comm_overlap, w));
  LOOM_ASSIGN_OR_RETURN(o.pp_blocking_p2p, json_bool_or(j, "pp_blocking_p2p", o.pp_blocking_p2p, w));
  LOOM_ASSIGN_OR_RETURN(o.moe_dedup_dispatch, json_bool_or(j, "moe_dedup_dispatch", o.moe_dedup_dispatch, w));
  LOOM_ASSIGN_OR_RETURN(o.moe_fp8_dispatch, json_bool_or(j, "moe_fp8_dispatch", o.moe_fp8_dispatch, w));
  LOOM_ASSIGN_OR_RETURN(o.moe_capacity_factor, json_number_or(j, "moe_capacity_factor", o.moe_capacity_factor, w));
  LOOM_ASSIGN_OR_RETURN(int64_t dispatch_sms, json_int_or(j, "moe_dispatch_sms", o.moe_dispatch_sms, w));
  LOOM_RETURN_IF_ERROR(check_moe_dispatch_sms(dispatch_sms, w + ".moe_dispatch_sms"));
  o.moe_dispatch_sms = int(dispatch_sms);
  LOOM_ASSIGN_OR_RETURN(std::string experts, json_string_or(j, "expert_gemm", expert_gemm_name(o.expert_gemm), w));
  if (!parse_expert_gemm(experts, &o.expert_gemm))
    return invalid_argument(w + ".expert_gemm must be \"grouped\" or \"per_expert\", got \"" + experts + "\"");
  if (o.moe_capacity_factor < 0 || !(o.moe_load_imbalance >= 1))
    return invalid_argument(w + ": moe_capacity_factor must be >= 0 (0 = dropless) and moe_load_imbalance >= 1");
  LOOM_ASSIGN_OR_RETURN(o.pp_overlap_p2p_comm, json_bool_or(j, "pp_overlap_p2p_comm", o.pp_overlap_p2p_comm, w));
  LOOM_ASSIGN_OR_RETURN(o.pp_fsdp_once, json_bool_or(j, "pp_fsdp_once", o.pp_fsdp_once, w));
  LOOM_ASSIGN_OR_RETURN(o.dp_comm_host_progress,
                        json_bool_or(j, "dp_comm_host_progress", o.dp_comm_host_progress, w));
  return o;
}

Plan make_plan(const Evaluator& eval, const SimResult& r, int world_size) {
  Plan p;
  p.loom_version = loom_version();
  p.model = eval.model();
  p.hw = canonical_hw_profile(eval.hw());
  p.train = eval.train();
  p.world_size = world_size;
  p.layout = r.layout;
  p.grad_buckets = eval.options().grad_buckets;
  p.sim_options_json = sim_options_json(eval.options());
  p.prediction_json = prediction_json(r);
  return p;
}

std::string format_result(const SimResult& r, const HwProfile& hw) {
  std::ostringstream o;
  const Figures& f = r.figures;
  const StepBreakdown& t = r.time;
  char buf[256];
  o << "layout  " << r.layout.to_string() << "\n";
  for (const std::string& note : r.outside_measured) o << "note    outside the measured range: " << note << "\n";
  std::snprintf(buf, sizeof buf, "step    %s   %.0f tokens/s (%.1f per GPU)   %.1f model TFLOP/s per GPU   MFU %.1f%%   HFU %.1f%%",
                human_seconds(f.step_time_s).c_str(), f.tokens_per_s, f.tokens_per_s_per_gpu, f.model_tflops_per_gpu,
                100 * f.mfu, 100 * f.hfu);
  o << buf;
  // MFU is against the 16-bit peak, as NVIDIA and Meta report FP8 runs; the
  // FP8 peak's share beside it.
  if (f.mfu_fp8_peak > 0) {
    std::snprintf(buf, sizeof buf, "   (of the FP8 peak: MFU %.1f%%)", 100 * f.mfu_fp8_peak);
    o << buf;
  }
  o << "\n";
  auto pct = [&](double x) { return t.step_time_s > 0 ? 100 * x / t.step_time_s : 0.0; };
  o << "time    (critical stage " << r.critical_stage << ")\n";
  struct Row {
    const char* name;
    double v;
  };
  for (Row row : {Row{"forward", t.forward_s}, Row{"backward", t.backward_s}, Row{"recompute", t.recompute_s},
                  Row{"TP comm (exposed)", t.tp_comm_s}, Row{"EP comm (exposed)", t.ep_comm_s},
                  Row{"CP comm (exposed)", t.cp_comm_s},
                  Row{"PP comm (exposed)", t.pp_comm_s}, Row{"DP comm (exposed)", t.dp_comm_s},
                  Row{"DP comm contention", t.contention_s}, Row{"pipeline bubble", t.bubble_s}, Row{"optimizer", t.optimizer_s}}) {
    if (row.v <= 1e-9 * t.step_time_s) continue;
    std::snprintf(buf, sizeof buf, "  %-20s %12s %6.1f%%\n", row.name, human_seconds(row.v).c_str(), pct(row.v));
    o << buf;
  }
  o << "memory  per rank, capacity " << human_bytes(hw.accel.memory_bytes);
  if (r.memory.capacity_bytes < r.memory.device_bytes)
    o << ", " << human_bytes(r.memory.capacity_bytes) << " usable (memory headroom "
      << human_bytes(r.memory.device_bytes - r.memory.capacity_bytes) << ")";
  o << (r.memory.fits ? "" : "  DOES NOT FIT") << "\n";
  std::snprintf(buf, sizeof buf, "  %-6s %7s %11s %11s %11s %11s %11s %11s %11s %11s\n", "stage", "layers", "weights",
                "grads", "optimizer", "activations", "buffers", "workspace", "overhead", "total");
  o << buf;
  for (const StageMemory& s : r.memory.stages) {
    std::snprintf(buf, sizeof buf, "  %-6d %7d %11s %11s %11s %11s %11s %11s %11s %11s\n", s.stage, s.layers,
                  human_bytes(s.weights_bytes).c_str(), human_bytes(s.grads_bytes).c_str(),
                  human_bytes(s.optimizer_bytes).c_str(), human_bytes(s.activations_bytes).c_str(),
                  human_bytes(s.comm_buffer_bytes).c_str(), human_bytes(s.workspace_bytes + s.inputs_bytes).c_str(),
                  human_bytes(s.overhead_bytes).c_str(),
                  human_bytes(s.total_bytes()).c_str());
    o << buf;
  }
  if (!r.memory.fits) o << "  " << r.memory.why_not() << "\n";
  o << "traffic per rank per step (sent)\n";
  std::snprintf(buf, sizeof buf, "  %-4s %12s %12s %12s %12s   %s\n", "", "nvlink", "pcie", "network", "time",
                "typical call (nccl-tests busbw, algorithm)");
  o << buf;
  for (int k = 0; k < kNumCommKinds; ++k) {
    if (r.traffic.calls[k] <= 0) continue;
    std::snprintf(buf, sizeof buf, "  %-4s %12s %12s %12s %12s   %s at %.0f GB/s, %s/%s\n",
                  comm_kind_name(static_cast<CommKind>(k)), human_bytes(r.traffic.bytes[k][0]).c_str(),
                  human_bytes(r.traffic.bytes[k][1]).c_str(), human_bytes(r.traffic.bytes[k][2]).c_str(),
                  human_seconds(r.traffic.time_s[k]).c_str(), human_bytes(r.traffic.call_bytes[k]).c_str(),
                  r.traffic.busbw_bytes_per_s[k] / 1e9, comm_algo_name(r.traffic.algo[k]),
                  comm_proto_name(r.traffic.proto[k]));
    o << buf;
  }
  return o.str();
}

std::string format_candidates(const SearchResult& r, int rows) {
  std::ostringstream o;
  char buf[320];
  std::snprintf(buf, sizeof buf, "%4s %-3s %5s %4s %4s %5s %4s %4s %5s %-12s %5s %3s %-9s %12s %10s %6s %10s\n", "#",
                "", "dp", "tp", "pp", "ep", "cp", "zero", "micro", "schedule", "ends", "sp", "recompute", "tokens/s",
                "step", "MFU", "memory");
  o << buf;
  int n = std::min<int>(rows, int(r.ranked.size()));
  for (int i = 0; i < n; ++i) {
    // The event engine timed the first rows and re-ranked them; the rest are
    // the closed form's estimates, in its order (docs/simulator.md 7).
    if (i == int(r.refined.size()) && i > 0)
      o << "     -- below: closed-form estimates (the rows above were timed by the event engine and re-ranked)\n";
    const Candidate& c = r.ranked[i];
    const Layout& l = c.layout;
    const Figures& f = i < int(r.refined.size()) ? r.refined[i].figures : c.estimate.figures;
    double mem = i < int(r.refined.size()) ? r.refined[i].memory.peak_bytes() : c.estimate.peak_memory_bytes;
    std::string sched = schedule_name(l.schedule);
    if (l.schedule == Schedule::kInterleaved) sched += " v" + std::to_string(l.virtual_stages);
    // ep marked "f" when folded over TP x DP (etp=1).
    const std::string ep = std::to_string(l.ep) + (l.folded_experts() ? "f" : "");
    // cp marked "g" when the K/V are all-gathered (cp_comm=all_gather), "a"
    // when the heads are exchanged (a2a).
    const char* cp_mark = l.cp <= 1 ? "" : l.cp_comm == CpComm::kAllGather ? "g" : l.cp_comm == CpComm::kA2a ? "a" : "";
    const std::string cp = std::to_string(l.cp) + cp_mark;
    // recompute "full(N)": the first N layers of each chunk (recompute_layers).
    std::string rc = recompute_name(l.recompute);
    if (l.recompute_layers > 0) rc += "(" + std::to_string(l.recompute_layers) + ")";
    // Layers pinned on the first / last pipeline chunk ("-": an even split).
    const std::string ends = l.first_stage_layers > 0 || l.last_stage_layers > 0
                                 ? std::to_string(l.first_stage_layers) + "/" + std::to_string(l.last_stage_layers)
                                 : "-";
    std::snprintf(buf, sizeof buf, "%4d %-3s %5d %4d %4d %5s %4s %4d %5d %-12s %5s %3d %-9s %12.0f %10s %5.1f%% %10s\n",
                  i, c.pareto ? "*" : "", l.dp, l.tp, l.pp, ep.c_str(), cp.c_str(), l.zero, l.micro_batch,
                  sched.c_str(), ends.c_str(), l.sequence_parallel ? 1 : 0, rc.c_str(), f.tokens_per_s,
                  human_seconds(f.step_time_s).c_str(), 100 * f.mfu, human_bytes(mem).c_str());
    o << buf;
  }
  return o.str();
}

std::string format_pareto(const SearchResult& r, int rows) {
  std::ostringstream o;
  std::vector<const Candidate*> front;
  for (const Candidate& c : r.ranked)
    if (c.pareto) front.push_back(&c);
  std::sort(front.begin(), front.end(), [](const Candidate* a, const Candidate* b) {
    return a->estimate.peak_memory_bytes < b->estimate.peak_memory_bytes;
  });
  o << "Pareto front (memory vs throughput): " << front.size() << " layouts\n";
  char buf[256];
  for (int i = 0; i < int(front.size()) && i < rows; ++i) {
    // The layout streamed, not formatted: a long one must not be cut.
    std::snprintf(buf, sizeof buf, "  %10s  %12.0f tokens/s  ", human_bytes(front[i]->estimate.peak_memory_bytes).c_str(),
                  front[i]->estimate.figures.tokens_per_s);
    o << buf << front[i]->layout.to_string() << "\n";
  }
  return o.str();
}

}  // namespace loom
