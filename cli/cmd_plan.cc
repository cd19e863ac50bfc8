// loom plan: search every layout (or evaluate one) and write the plan.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <vector>

#include "cli/commands.h"
#include "cli/cpu_local.h"
#include "cli/parse_args.h"
#include "core/output_file.h"
#include "core/json_util.h"
#include "core/plan.h"
#include "sim/export.h"
#include "sim/framework.h"
#include "sim/plan_request.h"
#include "sim/report.h"
#include "sim/search.h"
#include "sim/simulate.h"

namespace loom::cli {

namespace {

struct PlanArgs {
  std::string model = "llama-3-8b";
  std::string hw = "dgx-h100";
  int gpus = 64;
  int64_t global_batch = 512;
  int64_t seq = 4096;
  std::string precision;  // empty: fp32 on a CPU profile, else bf16
  std::string grad_reduce = "fp32";  // --grad-reduce
  std::string layout;      // evaluate this layout instead of searching
  std::string fix;         // pin dimensions of the search
  std::string scale;       // plan a scaled-down model
  int top = 10;
  int pick = 0;
  std::string out;
  std::string trace;
  std::string export_kind;
  bool json = false;
  int threads = 0;
  bool no_flash = false;
  bool fp32_main_grads = false;
  bool tp_async_backward = false;
  bool tp_comm_overlap = false;
  std::string tp_comm_overlap_cfg;
  std::string attention_kernel;
  bool ep_comm_overlap = false;
  bool pp_blocking_p2p = false;
  bool no_pp_blocking_p2p = false;
  bool no_pp_overlap_p2p_comm = false;
  bool moe_dedup_dispatch = false;
  int moe_dispatch_sms = 0;
  bool moe_fp8_dispatch = false;
  double moe_load_imbalance = -1;
  std::string moe_load_imbalance_from;  // a run's metrics file (loom execute --metrics)
  double moe_capacity_factor = -1;
  double moe_aux_loss_coeff = -1;
  double moe_z_loss_coeff = 0;
  bool pp_overlap_p2p_comm = false;
  std::string fp8_scaling;  // empty: the framework's, else current
  std::string cross_entropy;  // empty: the framework's, else fused
  std::string layer_ops;      // empty: the framework's, else fused
  std::string expert_gemm;    // empty: the framework's, else grouped
  bool fp8_attention = false;
  bool fp8_params = false;
  double memory_headroom = 0;
  double optimizer_master_bytes = 0, optimizer_moment_bytes = 0;
  bool ddp_average_in_collective = false;
  bool no_grad_nan_check = false;
  std::string framework;    // frameworks/<name>.json; empty: none
  int dropout = -2;         // -2: not given (the framework's, else -1)
  int grad_buckets = kDefaultGradBuckets;
  int64_t steps = 0;
  double lr = 3e-4;
  int64_t warmup = 0;
  uint64_t seed = 1234;
};


// --export framework: the dialect of the --framework's stack.
std::string export_dialect(const PlanArgs& a, const std::optional<Framework>& fw) {
  return a.export_kind == "framework" && fw ? fw->export_kind : a.export_kind;
}

Status write_outputs(const PlanArgs& a, const Evaluator& eval, const SimResult& r, const std::optional<Framework>& fw) {
  Plan plan = make_plan(eval, r, a.gpus);
  if (!a.out.empty()) {
    LOOM_RETURN_IF_ERROR(save_plan(plan, a.out));
    if (!a.json) std::printf("plan written to %s (plan hash %s)\n", a.out.c_str(), plan.plan_hash().c_str());
  }
  if (!a.trace.empty()) {
    LOOM_RETURN_IF_ERROR(
        write_trace(predicted_trace(r, plan.plan_hash()), a.trace));
    if (!a.json) std::printf("predicted trace written to %s (open in https://ui.perfetto.dev)\n", a.trace.c_str());
  }
  if (!a.export_kind.empty()) {
    Result<std::string> text = export_plan(plan, export_dialect(a, fw));
    if (!text.is_ok()) return text.status();
    std::printf("%s", text->c_str());
  }
  return Status::ok();
}

struct PlanInputs {
  ModelSpec model;
  HwProfile hw;
  TrainSpec train;
  SimOptions opt;
  SearchSpace space;  // the framework's layouts, or all
  std::optional<Framework> framework;
};

// The model (scaled), hardware, train spec and simulator options of the
// request; every output path checked before the search (core/output_file.h).
// The MoE load imbalance a run measured: the median over its steps of
// `expert_load_imbalance` in a `loom execute --metrics` file (the busiest EP
// rank's expert rows over the balanced share). A property of the router on
// the data, not of the machine: measured, then used as an input.
Result<double> measured_load_imbalance(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  std::vector<double> v;
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return parse_error("--moe-load-imbalance-from " + path + ": line " + std::to_string(n) +
                         " is not a JSON object; pass the file `loom execute --metrics` wrote");
    auto it = j.find("expert_load_imbalance");
    if (it == j.end()) continue;
    if (!it->is_number() || !(it->get<double>() >= 1.0) || !std::isfinite(it->get<double>()))
      return invalid_argument("--moe-load-imbalance-from " + path + ": line " + std::to_string(n) +
                              " has expert_load_imbalance " + it->dump() + "; it must be a number >= 1");
    v.push_back(it->get<double>());
  }
  if (v.empty())
    return invalid_argument("--moe-load-imbalance-from " + path +
                            ": no step records expert_load_imbalance (a MoE model's run writes it with --metrics); "
                            "pass --moe-load-imbalance X instead");
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Result<PlanInputs> read_inputs(const PlanArgs& a) {
  if (!a.export_kind.empty() && a.export_kind != "megatron" && a.export_kind != "deepspeed" &&
      a.export_kind != "torchtitan" && a.export_kind != "framework" && a.export_kind != "tp-comm-overlap-cfg")
    return invalid_argument("--export '" + a.export_kind +
                            "' is unknown; use megatron, deepspeed, torchtitan, framework or tp-comm-overlap-cfg");
  if (a.export_kind == "framework" && a.framework.empty())
    return invalid_argument("--export framework needs --framework (megatron-core, torchtitan or deepspeed)");
  if (!a.export_kind.empty() && a.json)
    return invalid_argument("--export and --json both print to stdout; use one of them");
  PlanInputs in;
  LOOM_ASSIGN_OR_RETURN(in.model, load_model_spec(a.model));
  if (!a.scale.empty()) {
    LOOM_ASSIGN_OR_RETURN(ModelScale scale, parse_model_scale(a.scale));
    LOOM_ASSIGN_OR_RETURN(in.model, scale_model(in.model, scale));
  }
  LOOM_ASSIGN_OR_RETURN(in.hw, load_hw_profile(a.hw));
  PlanRequest req;
  req.gpus = a.gpus;
  req.global_batch = a.global_batch;
  req.seq = a.seq;
  // Loom's CPU backend computes in fp32: a CPU profile's plans default to it.
  req.precision = !a.precision.empty() ? a.precision : in.hw.is_cpu() ? "fp32" : "bf16";
  req.grad_reduce = a.grad_reduce;
  if (in.hw.is_cpu() && req.precision != "fp32")
    std::fprintf(stderr,
                 "loom plan: note: --precision %s on the CPU profile %s: Loom's CPU backend computes in fp32, so "
                 "`loom execute` on CPU ranks will not run what this plan predicts\n",
                 req.precision.c_str(), in.hw.name.c_str());
  req.steps = a.steps;
  req.lr = a.lr;
  req.warmup = a.warmup;
  req.seed = a.seed;
  req.flash_attention = !a.no_flash;
  req.fp32_main_grads = a.fp32_main_grads;
  req.tp_async_backward = a.tp_async_backward;
  req.tp_comm_overlap = a.tp_comm_overlap;
  req.tp_comm_overlap_cfg = a.tp_comm_overlap_cfg;
  req.attention_kernel = a.attention_kernel;
  LOOM_RETURN_IF_ERROR(apply_request_to_hw(req, &in.hw));
  req.ep_comm_overlap = a.ep_comm_overlap;
  req.pp_blocking_p2p = a.pp_blocking_p2p;
  req.no_pp_blocking_p2p = a.no_pp_blocking_p2p;
  req.no_pp_overlap_p2p_comm = a.no_pp_overlap_p2p_comm;
  req.moe_dedup_dispatch = a.moe_dedup_dispatch;
  req.moe_fp8_dispatch = a.moe_fp8_dispatch;
  req.moe_dispatch_sms = a.moe_dispatch_sms;
  req.moe_load_imbalance = a.moe_load_imbalance;
  if (!a.moe_load_imbalance_from.empty()) {
    if (a.moe_load_imbalance >= 0)
      return invalid_argument("--moe-load-imbalance and --moe-load-imbalance-from both give the imbalance; use one");
    LOOM_ASSIGN_OR_RETURN(req.moe_load_imbalance, measured_load_imbalance(a.moe_load_imbalance_from));
    std::fprintf(stderr, "loom plan: MoE load imbalance %.3f, the median measured in %s\n", req.moe_load_imbalance,
                 a.moe_load_imbalance_from.c_str());
  }
  req.moe_capacity_factor = a.moe_capacity_factor;
  req.moe_aux_loss_coeff = a.moe_aux_loss_coeff;
  req.moe_z_loss_coeff = a.moe_z_loss_coeff;
  req.pp_overlap_p2p_comm = a.pp_overlap_p2p_comm;
  req.fp8_scaling = a.fp8_scaling;
  req.cross_entropy = a.cross_entropy;
  req.layer_ops = a.layer_ops;
  req.expert_gemm = a.expert_gemm;
  req.framework = a.framework;
  req.fp8_params = a.fp8_params;
  req.memory_headroom = a.memory_headroom;
  req.optimizer_master_bytes = a.optimizer_master_bytes;
  req.optimizer_moment_bytes = a.optimizer_moment_bytes;
  req.ddp_average_in_collective = a.ddp_average_in_collective;
  req.no_grad_nan_check = a.no_grad_nan_check;
  req.fp8_attention = a.fp8_attention;
  req.dropout = a.dropout;
  req.grad_buckets = a.grad_buckets;
  LOOM_ASSIGN_OR_RETURN(in.train, make_train_spec(req, in.hw, &in.model));
  // The framework's defaults, then what the command line set explicitly.
  if (!a.framework.empty()) {
    LOOM_ASSIGN_OR_RETURN(in.framework, load_framework(a.framework));
  }
  const Framework* fw = in.framework ? &*in.framework : nullptr;
  in.opt = make_sim_options(req, in.hw, fw);
  in.space = make_search_space(req, fw);
  // A calibrated CPU profile holds per-rank figures for the number of ranks
  // that shared the machine while it was measured; another count shares the
  // cores differently.
  const HwProfile& hw = in.hw;
  if (hw.is_cpu() && hw.node.fabric == "shm" && hw.node.source.rfind("measured by `loom calibrate`", 0) == 0 &&
      a.gpus != hw.node.devices_per_node)
    std::fprintf(stderr,
                 "loom plan: warning: %s was calibrated as %d rank(s) sharing one machine, not %d; per-rank speed "
                 "differs with the number of ranks: calibrate with `mpirun -np %d loom calibrate`\n",
                 hw.name.c_str(), hw.node.devices_per_node, a.gpus, a.gpus);
  if (a.top < 0 || a.pick < 0) return invalid_argument("--top and --pick must be >= 0");
  if (!a.out.empty()) LOOM_RETURN_IF_ERROR(check_output_path(a.out, "--out"));
  if (!a.trace.empty()) LOOM_RETURN_IF_ERROR(check_output_path(a.trace, "--trace"));
  // `--hw cpu-local` is this machine, measured on first use once the request
  // is known to be valid (cli/cpu_local.h); the shipped file only checked it.
  if (a.hw == "cpu-local") {
    LOOM_ASSIGN_OR_RETURN(in.hw, measured_cpu_local(a.gpus));
    LOOM_RETURN_IF_ERROR(apply_request_to_hw(req, &in.hw));
    LOOM_ASSIGN_OR_RETURN(in.train, make_train_spec(req, in.hw, &in.model));
    in.opt = make_sim_options(req, in.hw, fw);
  }
  return in;
}

void print_header(const PlanArgs& a, const PlanInputs& in) {
  std::printf("%s on %d x %s (%s), global batch %lld x %lld tokens, %s%s%s%s%s\n", in.model.name.c_str(), a.gpus,
              in.hw.accel.name.c_str(), in.hw.name.c_str(), (long long)a.global_batch, (long long)a.seq,
              precision_name(in.train.precision),
              in.train.grad_reduce == GradReduce::kFp32 ? "" : ", gradients reduced in ",
              in.train.grad_reduce == GradReduce::kFp32 ? "" : grad_reduce_name(in.train.grad_reduce),
              // The attention kernel priced, where the profile names one (--attention-kernel).
              in.hw.accel.attention_kernel.empty() ? "" : ", attention ",
              in.hw.accel.attention_kernel.c_str());
  if (in.model.is_moe()) {
    const MoeSpec& e = in.model.moe;
    const TrainSpec& t = in.train;
    std::printf("MoE: %d experts, top-%d%s, load-balancing loss coeff %g, z-loss coeff %g, ", e.num_experts,
                e.experts_per_token, e.norm_topk_prob ? " (renormalized)" : "", t.moe_aux_loss_coeff,
                t.moe_z_loss_coeff);
    if (t.moe_capacity_factor > 0)
      std::printf("capacity factor %g\n", t.moe_capacity_factor);
    else
      std::printf("dropless\n");
  }
}

// --layout: evaluate one layout. Exit 3 when it does not fit.
int plan_one(const PlanArgs& a, const Evaluator& eval, const PlanInputs& in) {
  auto layout = parse_layout(a.layout);
  if (!layout.is_ok()) return fail("plan", layout.status());
  if (Status s = validate_layout(*layout, in.model, in.train, a.gpus); !s.is_ok()) return fail("plan", s);
  if (Status s = check_layout_for_stack(in.framework ? &*in.framework : nullptr, in.model, *layout); !s.is_ok())
    return fail("plan", invalid_argument("--layout " + a.layout + ": " + s.message() +
                                         (in.framework ? " (--framework " + in.framework->name + ")" : "")));
  if (in.framework) apply_framework_overlap(*in.framework, a.layout, &*layout);
  auto r = simulate_layout(eval, *layout);
  if (!r.is_ok()) return fail("plan", r.status());
  if (a.json) {
    std::printf("%s\n", prediction_json(*r, 2).c_str());
  } else {
    print_header(a, in);
    std::printf("%s", format_result(*r, in.hw).c_str());
  }
  if (!r->memory.fits) {
    std::fprintf(stderr, "loom plan: layout %s does not fit: %s; no plan written\n", layout->to_string().c_str(),
                 r->memory.why_not().c_str());
    return 3;
  }
  if (Status s = write_outputs(a, eval, *r, in.framework); !s.is_ok()) return fail("plan", s);
  return 0;
}

void print_search_json(const PlanArgs& a, const PlanInputs& in, const SearchResult& res, const SimResult& chosen) {
  OrderedJson j;
  j["model"] = in.model.name;
  j["hardware"] = in.hw.name;
  j["gpus"] = a.gpus;
  j["search"] = {{"enumerated", res.enumerated}, {"fitting", res.fitting}, {"elapsed_s", res.elapsed_s}};
  j["layout"] = OrderedJson::parse(layout_to_json(chosen.layout));
  j["prediction"] = OrderedJson::parse(prediction_json(chosen));
  OrderedJson cands = OrderedJson::array();
  for (int i = 0; i < std::min<int>(a.top, int(res.ranked.size())); ++i) {
    const Candidate& c = res.ranked[i];
    const Figures& f = i < int(res.refined.size()) ? res.refined[i].figures : c.estimate.figures;
    cands.push_back({{"layout", OrderedJson::parse(layout_to_json(c.layout))},
                     {"step_time_s", f.step_time_s},
                     {"tokens_per_s", f.tokens_per_s},
                     {"mfu", f.mfu},
                     {"peak_memory_bytes", c.estimate.peak_memory_bytes},
                     {"pareto", c.pareto}});
  }
  j["candidates"] = cands;
  std::printf("%s\n", j.dump(2).c_str());
}

// The search: every valid layout, the best (or --pick) written. Exit 3 when
// none fits.
int plan_search(const PlanArgs& a, const Evaluator& eval, const PlanInputs& in) {
  SearchSpace space = in.space;
  space.threads = a.threads;
  space.refine_top = std::max(8, a.pick + 1);
  if (Status s = apply_search_fix(a.fix, &space); !s.is_ok()) return fail("plan", s);
  auto res = search_layouts(eval, space);
  if (!res.is_ok()) return fail("plan", res.status());
  if (res->ranked.empty()) {
    std::string msg = "no layout of " + in.model.name + " fits on " + std::to_string(a.gpus) + " x " +
                      in.hw.accel.name + " (" + std::to_string(res->valid) + " valid layouts tried)";
    if (res->closest) msg += "; closest: " + res->closest->layout.to_string() + ": " + res->closest_why;
    msg += "; use more GPUs, a smaller global batch or sequence, or a GPU with more memory";
    std::fprintf(stderr, "loom plan: %s\n", msg.c_str());
    return 3;
  }
  if (a.pick >= int(res->ranked.size()))
    return fail("plan", invalid_argument("--pick " + std::to_string(a.pick) + ": only " +
                                         std::to_string(res->ranked.size()) + " layouts fit"));
  SimResult chosen;
  if (a.pick < int(res->refined.size())) {
    chosen = res->refined[a.pick];
  } else {
    auto r = simulate_layout(eval, res->ranked[a.pick].layout);
    if (!r.is_ok()) return fail("plan", r.status());
    chosen = std::move(r).value();
  }
  if (a.json) {
    print_search_json(a, in, *res, chosen);
  } else {
    print_header(a, in);
    if (res->partial_variants > 0)
      std::printf("searched %lld valid layouts and %lld partial-recompute variants in %.3f s: %lld fit in memory "
                  "(* = on the Pareto front)\n\n",
                  (long long)res->enumerated, (long long)res->partial_variants, res->elapsed_s,
                  (long long)res->fitting);
    else
      std::printf("searched %lld valid layouts in %.3f s: %lld fit in memory (* = on the Pareto front)\n\n",
                  (long long)res->enumerated, res->elapsed_s, (long long)res->fitting);
    std::printf("%s\n", format_candidates(*res, a.top).c_str());
    std::printf("%s\n", format_pareto(*res, a.top).c_str());
    std::printf("chosen (#%d):\n%s", a.pick, format_result(chosen, in.hw).c_str());
  }
  if (Status s = write_outputs(a, eval, chosen, in.framework); !s.is_ok()) return fail("plan", s);
  return 0;
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  CLI::App app{"Search every parallel layout of a model on a cluster (or evaluate one) and write the plan.", "loom plan"};
  PlanArgs a;
  app.add_option("--model", a.model, "model: a name from models/ or a Hugging Face config.json path")
      ->capture_default_str();
  app.add_option("--hw", a.hw, "hardware profile: a name from hwprofiles/ or a path")->capture_default_str();
  app.add_option("--gpus", a.gpus, "number of GPUs (ranks)")->capture_default_str();
  app.add_option("--global-batch", a.global_batch, "sequences per optimizer step")->capture_default_str();
  app.add_option("--seq", a.seq, "sequence length (tokens)")->capture_default_str();
  app.add_option("--precision", a.precision,
                 "fp32|bf16|fp16|fp8 (default: fp32 on a CPU profile, whose backend computes in fp32; else bf16)");
  app.add_option("--grad-reduce", a.grad_reduce,
                 "element type of the data-parallel gradient reduction: fp32, bf16 or fp8 (E4M3 with a scale per "
                 "block); received pieces are summed in fp32")
      ->capture_default_str();
  app.add_option("--layout", a.layout,
                 "evaluate one layout, e.g. dp=2,tp=4,pp=2,ep=1,zero=1,micro=1,schedule=1f1b,v=1,sp=1,recompute=none");
  app.add_option("--scale", a.scale, "plan the model scaled down, e.g. layers=4,hidden=256,heads=4,vocab=256");
  app.add_option("--fix", a.fix, "pin search dimensions, e.g. tp=8,pp=2,recompute=full");
  app.add_option("--top", a.top, "rows of the candidate table")->capture_default_str();
  app.add_option("--pick", a.pick, "write candidate N of the table instead of the best")->capture_default_str();
  app.add_option("--out", a.out, "write the plan JSON here");
  app.add_option("--trace", a.trace, "write the predicted Chrome trace here");
  app.add_option("--export", a.export_kind,
                 "print the plan in another trainer's dialect: megatron (arguments), deepspeed (config JSON), "
                 "torchtitan (job TOML sections), framework (the --framework's), or tp-comm-overlap-cfg (the "
                 "userbuffers YAML the megatron export's --tp-comm-overlap-cfg names)");
  app.add_option("--framework", a.framework,
                 "training stack whose defaults to model (frameworks/<name>.json: megatron-core, torchtitan, "
                 "deepspeed): gradient dtype, overlaps, FP8 recipe, and the ZeRO stages, schedules, recompute and "
                 "sequence-parallel settings the search tries; explicit flags override it");
  app.add_flag("--json", a.json, "print figures as JSON (unit-suffixed keys) instead of tables");
  app.add_option("--threads", a.threads, "search threads (0 = all cores)");
  app.add_flag("--no-flash-attention", a.no_flash, "model materialized attention scores (Megatron-LM 2021)");
  app.add_flag("--fp32-main-grads", a.fp32_main_grads, "Megatron's fp32 gradient convention (4-byte grads)");
  app.add_flag("--tp-async-backward", a.tp_async_backward,
               "Megatron-core's asynchronous TP collectives in backward (input-gradient all-reduce behind the "
               "weight-gradient GEMM); default off, as Loom's executor runs them");
  app.add_flag("--tp-comm-overlap", a.tp_comm_overlap,
               "Megatron's --tp-comm-overlap (Transformer Engine userbuffers, with sequence parallelism): TP "
               "collectives pipelined with their GEMMs in forward and backward");
  app.add_option("--tp-comm-overlap-cfg", a.tp_comm_overlap_cfg,
                 "how Transformer Engine runs each TP linear's overlap under --tp-comm-overlap (Megatron's "
                 "--tp-comm-overlap-cfg, NeMo's tp_comm_overlap_cfg): a name from frameworks/tp_overlap/ "
                 "(e.g. nemo-25.02-bf16-h100-h8192-tp4), te1_defaults, te2_defaults, or a JSON file with TE's keys; "
                 "default: the --framework's, else te2_defaults");
  app.add_option("--attention-kernel", a.attention_kernel,
                 "the attention kernel to price, from the hardware profile's measured ones (dgx-h100: cudnn-9.19, "
                 "the default; cudnn-2024-07, the cuDNN of mid-2024 stacks; fa2, FlashAttention-2); the plan embeds "
                 "the profile with it");
  app.add_flag("--ep-comm-overlap", a.ep_comm_overlap,
               "MoE all-to-alls behind another micro-batch's compute (DualPipe, Megatron-core "
               "--overlap-moe-expert-parallel-comm): only what a forward+backward pair cannot cover is exposed");
  app.add_flag("--moe-dedup-dispatch", a.moe_dedup_dispatch,
               "MoE dispatch deduplicated per node (DeepEP, Megatron's flex dispatcher): a token crosses the "
               "network once per remote node holding its experts; with the model's n_group/topk_group it reaches "
               "at most topk_group nodes. Default: one copy per expert (alltoall dispatcher)");
  app.add_option("--moe-dispatch-sms", a.moe_dispatch_sms,
                 "SMs the MoE dispatcher's kernels hold (DeepEP/HybridEP num_sms: Megatron-core "
                 "--moe-hybridep-num-sms, 32 in Megatron-Bridge's performance recipes; DeepSeek-V3's 20): with "
                 "--ep-comm-overlap the compute beside a hidden all-to-all runs on the rest. Default: NCCL's "
                 "channels (the alltoall dispatcher)")
      ->check(CLI::Range(1, 4096));
  app.add_flag("--moe-fp8-dispatch", a.moe_fp8_dispatch,
               "MoE dispatch in fp8 (1 byte + a scale per 128 elements), combine in bf16, as DeepSeek-V3 trains");
  app.add_option("--moe-load-imbalance", a.moe_load_imbalance,
                 "tokens of the busiest rank's experts over the balanced share (>= 1; default 1, balanced)")
      ->check(CLI::Range(1.0, 1e6));
  app.add_option("--moe-load-imbalance-from", a.moe_load_imbalance_from,
                 "take the imbalance a run measured: the median expert_load_imbalance of a `loom execute --metrics` "
                 "file (the router on your data, measured; the step time is still predicted from the profile)");
  app.add_option("--moe-capacity-factor", a.moe_capacity_factor,
                 "expert capacity factor: an expert takes at most this times its balanced share and drops the "
                 "rest (Megatron --moe-expert-capacity-factor); 0 = dropless (default)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--moe-aux-loss-coeff", a.moe_aux_loss_coeff,
                 "MoE load-balancing (switch-transformer) loss coefficient (Megatron --moe-aux-loss-coeff); default: "
                 "the config's router_aux_loss_coef, else 0")
      ->check(CLI::Range(0.0, 999.0));
  app.add_option("--moe-z-loss-coeff", a.moe_z_loss_coeff,
                 "MoE router z-loss coefficient (Megatron --moe-z-loss-coeff); 0 = off")
      ->check(CLI::Range(0.0, 999.0));
  CLI::Option* blocking = app.add_flag("--pp-blocking-p2p", a.pp_blocking_p2p,
               "pipeline sends block the sender until they land (Megatron's and DeepSpeed's p2p: "
               "batch_isend_irecv, then wait); default off, as Loom's executor sends asynchronously");
  CLI::Option* overlap_p2p = app.add_flag("--pp-overlap-p2p-comm", a.pp_overlap_p2p_comm,
               "Megatron's overlap_p2p_comm: the interleaved schedule sends asynchronously even with "
               "--pp-blocking-p2p, and posts each receive after the previous op of its direction, so a "
               "transfer hides behind the op in between");
  app.add_flag("--no-pp-blocking-p2p", a.no_pp_blocking_p2p,
               "asynchronous pipeline sends even where the --framework blocks on them")
      ->excludes(blocking);
  app.add_flag("--no-pp-overlap-p2p-comm", a.no_pp_overlap_p2p_comm,
               "Megatron's --no-overlap-p2p-communication: interleaved sends block too where the --framework "
               "overlaps them")
      ->excludes(overlap_p2p);
  app.add_option("--fp8-scaling", a.fp8_scaling,
                 "fp8 recipe: current (per-tensor amax each step, an extra read of every cast tensor; the default "
                 "without --framework) or delayed (amax history)");
  app.add_option("--cross-entropy", a.cross_entropy,
                 "the loss's implementation, priced as its passes over the logits: fused (one read, an fp32 softmax "
                 "written and read back; the default without --framework), megatron (Megatron's unfused "
                 "vocab_parallel_cross_entropy), megatron_fused (--cross-entropy-loss-fusion), te (Transformer "
                 "Engine's Triton kernel) or torch (F.cross_entropy on fp32 logits)");
  app.add_option("--layer-ops", a.layer_ops,
                 "how the stack writes a dense layer's non-GEMM work: fused (a fused QKV projection, one RoPE and one "
                 "SwiGLU kernel; the default without --framework) or torch_eager (torchtitan's Llama block in eager "
                 "PyTorch: separate q/k/v projections, RoPE through fp32 complex numbers, repeat_kv copies for GQA, "
                 "SiLU and the multiply apart)");
  app.add_option("--expert-gemm", a.expert_gemm,
                 "how a MoE layer's local experts run their GEMMs: grouped (one grouped kernel: cuBLASLt/CUTLASS "
                 "grouped GEMM, torch._grouped_mm, Loom's executor; the default without --framework) or per_expert "
                 "(one GEMM each, priced one after another: Transformer Engine's GroupedLinear, DeepSpeed's loop)");
  app.add_flag("--fp8-attention", a.fp8_attention,
               "run the attention core in fp8 too (Transformer Engine's fp8_dot_product_attention; default bf16)");
  app.add_option("--memory-headroom", a.memory_headroom,
                 "fraction of each device's memory the plan keeps free, 0 to 0.9 (default 0): a layout fits when its "
                 "worst stage needs at most (1 - headroom) x capacity. Loom counts live tensors; what the stack's "
                 "allocator reserves beyond them is not modelled (docs/validation.md, Layout sweeps)");
  app.add_option("--optimizer-master-bytes", a.optimizer_master_bytes,
                 "bytes of Adam's master weights a parameter: 4 (fp32, the default) or 2 (the 16 low bits beside bf16 "
                 "weights: Apex DistributedFusedAdam's and Transformer Engine FusedAdam's store_param_remainders)");
  app.add_option("--optimizer-moment-bytes", a.optimizer_moment_bytes,
                 "bytes of each of Adam's two moments a parameter: 4 (fp32, the default) or 2 (bf16: DeepSeek-V3, "
                 "Megatron's --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)");
  app.add_flag("--fp8-params", a.fp8_params,
               "fp8 parameters (Megatron --fp8-param-gather): only the fp8 weight and its transpose are kept, "
               "gathered at 1 byte a parameter");
  app.add_flag("--ddp-average-in-collective", a.ddp_average_in_collective,
               "Megatron's --ddp-average-in-collective (NeMo 2.0's and Megatron-Bridge's recipes): NCCL averages the "
               "gradients, no 1/dp pass over the gradient buffer before the collective");
  app.add_flag("--no-check-for-nan-in-grad", a.no_grad_nan_check,
               "Megatron's --no-check-for-nan-in-loss-and-grad (Megatron-Bridge's performance scripts): no NaN-check "
               "norm over each gradient bucket before its collective");
  app.add_option("--dropout", a.dropout, "-1 from the model family, 0 off, 1 on");
  app.add_option("--grad-buckets", a.grad_buckets,
                 "gradient buckets per model chunk: the data-parallel syncs the program overlaps with backward "
                 "(recorded in the plan; loom execute runs the same)")
      ->capture_default_str();
  app.add_option("--steps", a.steps, "training steps recorded in the plan (for loom execute)");
  app.add_option("--lr", a.lr, "peak learning rate recorded in the plan");
  app.add_option("--warmup", a.warmup, "LR warm-up steps recorded in the plan");
  app.add_option("--seed", a.seed, "seed recorded in the plan");
  if (int rc = parse_args(app, "plan", argc, argv); rc >= 0) return rc;
  auto in = read_inputs(a);
  if (!in.is_ok()) return fail("plan", in.status());
  const Evaluator eval(in->model, in->hw, in->train, in->opt);
  return a.layout.empty() ? plan_search(a, eval, *in) : plan_one(a, eval, *in);
}

}  // namespace loom::cli
