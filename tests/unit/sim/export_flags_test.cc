// `loom plan --export megatron` against Megatron-LM's own argument
// definitions: every flag exported must be one Megatron's training script
// accepts, with a value of the kind it parses (tests/data/megatron_flags.txt,
// generated from Megatron's source by scripts/megatron_flags.py), over plans
// of every model family and layout feature the export covers.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "sim/export.h"
#include "sim/report.h"
#include "sim/simulate.h"
#include "sim/tp_overlap.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

std::map<std::string, std::string> megatron_flags() {
  std::ifstream in(LOOM_SOURCE_DIR "/tests/data/megatron_flags.txt");
  std::map<std::string, std::string> flags;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string flag, kind;
    fields >> flag >> kind;
    flags[flag] = kind;
  }
  return flags;
}

// One exported argument set, line by line: "--flag [values]".
void expect_accepted(const std::string& args, const std::map<std::string, std::string>& flags,
                     const std::string& what) {
  std::istringstream lines(args);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string flag, v;
    words >> flag;
    std::vector<std::string> values;
    while (words >> v) values.push_back(v);
    ++n;
    auto it = flags.find(flag);
    ASSERT_NE(it, flags.end()) << what << ": Megatron-LM has no flag " << flag;
    const std::string& kind = it->second;
    if (kind == "flag") {
      EXPECT_TRUE(values.empty()) << what << ": " << flag << " takes no value";
    } else if (kind == "list") {
      EXPECT_FALSE(values.empty()) << what << ": " << flag << " needs values";
    } else {
      ASSERT_EQ(values.size(), 1u) << what << ": " << flag << " takes one value";
      size_t used = 0;
      if (kind == "int") {
        (void)std::stoll(values[0], &used);
        EXPECT_EQ(used, values[0].size()) << what << ": " << flag << " " << values[0] << " is not an int";
      } else if (kind == "float") {
        (void)std::stod(values[0], &used);
        EXPECT_EQ(used, values[0].size()) << what << ": " << flag << " " << values[0] << " is not a float";
      }
    }
  }
  EXPECT_GT(n, 20) << what;
}

Plan plan_of(const std::string& model, const std::string& hw, const std::string& layout, int world, TrainSpec t,
             const SimOptions& opt = SimOptions{}) {
  Evaluator eval(testing::load_model_or_die(model), testing::load_hw_or_die(hw), t, opt);
  auto l = parse_layout(layout);
  LOOM_CHECK(l.is_ok(), l.status().to_string());
  auto r = simulate_layout(eval, *l);
  LOOM_CHECK(r.is_ok(), r.status().to_string());
  return make_plan(eval, *r, world);
}

// Llama-3-8B on 8 H100s (dp=8, ZeRO-1) exported for Megatron under `opt`,
// every flag checked against those Megatron-LM accepts.
std::string llama8b_dp8_megatron_args(const SimOptions& opt, const std::map<std::string, std::string>& flags) {
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 1024;
  const std::string layout = "dp=8,zero=1,micro=1";
  auto a = export_megatron_args(plan_of("llama-3-8b", "dgx-h100", layout, 8, t, opt));
  LOOM_CHECK(a.is_ok(), a.status().to_string());
  expect_accepted(*a, flags, "llama-3-8b " + layout);
  return *a;
}

TEST(ExportMegatron, EveryFlagIsOneMegatronAccepts) {
  const auto flags = megatron_flags();
  ASSERT_GT(flags.size(), 500u) << "tests/data/megatron_flags.txt did not load";
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 1024;
  TrainSpec bf16_reduce = t;
  bf16_reduce.grad_reduce = GradReduce::kBf16;
  bf16_reduce.steps = 500;
  TrainSpec fp8 = t;
  fp8.precision = Precision::kFp8;
  struct Case {
    const char* model;
    const char* layout;
    int world;
    TrainSpec train;
  };
  const Case cases[] = {
      {"gpt2-124m", "dp=2,tp=2,pp=2,zero=1,micro=2,schedule=interleaved,v=2,sp=1", 8, t},
      {"llama-3-8b", "dp=4,tp=2,zero=1,micro=1,sp=1,recompute=full", 8, bf16_reduce},
      {"llama-3-8b", "dp=2,tp=2,pp=2,micro=1,recompute=selective", 8, fp8},
      {"llama-3-8b", "dp=2,tp=2,pp=2,micro=1,recompute=full,recompute_layers=3", 8, t},
      {"llama-3.1-405b", "dp=1,tp=8,pp=2,micro=1,sp=1", 16, t},
      {"qwen3-30b-a3b", "dp=8,ep=8,micro=1", 8, t},
      {"deepseek-v3", "dp=8,tp=1,pp=8,ep=8,micro=1,first=7,last=6", 64, t},
      {"mixtral-8x7b", "dp=8,tp=2,ep=4,pp=2,micro=1,sp=1", 32, t},
      {"llama-3-8b", "dp=2,tp=2,cp=2,zero=1,micro=1,sp=1", 8, t},
      {"llama-3-8b", "dp=2,tp=2,cp=2,zero=1,micro=1,sp=1,cp_comm=all_gather", 8, t},
      {"llama-3-8b", "dp=2,tp=2,cp=2,zero=1,micro=1,sp=1,cp_comm=a2a", 8, t},
      {"mixtral-8x7b", "dp=2,tp=2,ep=4,etp=1,zero=1,micro=1,sp=1", 4, t},
      {"llama-3.1-405b", "dp=1,tp=8,pp=8,zero=1,micro=1,sp=1,schedule=interleaved,v=8,first=1,last=1", 64, t},
      {"deepseek-v3", "dp=8,tp=1,pp=8,ep=8,micro=1,schedule=interleaved,v=2,last=2", 64, t},
      {"deepseek-v3", "dp=8,tp=1,pp=8,ep=8,micro=1,recompute=selective,recompute_modules=layernorm+mla_up_proj+moe_act",
       64, t},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.model) + " " + c.layout);
    const Plan p = plan_of(c.model, "dgx-h100", c.layout, c.world, c.train);
    auto args = export_megatron_args(p);
    ASSERT_TRUE(args.is_ok()) << args.status().to_string();
    expect_accepted(*args, flags, std::string(c.model) + " " + c.layout);
    if (p.layout.folded_experts()) {
      EXPECT_NE(args->find("--expert-tensor-parallel-size 1\n"), std::string::npos) << *args;
    }
    if (p.layout.first_stage_layers > 0 && p.layout.tp == 8) {  // 405B as Megatron-Bridge splits it
      EXPECT_NE(args->find("--pipeline-model-parallel-layout \"Et|(tt|)*62,tL\"\n"), std::string::npos) << *args;
    }
    if (p.model.num_mtp_layers > 0 && p.layout.schedule == Schedule::kInterleaved) {  // the MTP module, then the loss
      EXPECT_NE(args->find("mL\"\n"), std::string::npos) << *args;
    }
    if (p.layout.cp > 1) {
      EXPECT_NE(args->find("--context-parallel-size 2\n"), std::string::npos) << *args;
      EXPECT_NE(args->find(std::string("--cp-comm-type ") + cp_comm_name(p.layout.cp_comm) + "\n"), std::string::npos)
          << *args;
    }
  }
}

// The MoE dispatcher the plan priced is the one the export asks for: the
// alltoall dispatcher by default; deduplicated dispatch as Megatron-core's
// flex dispatcher over DeepEP, on the SMs the plan gave it; the EP overlap as
// --overlap-moe-expert-parallel-comm. FP8 attention has no Megatron-LM flag,
// so the export refuses it rather than drop it.
TEST(ExportMegatron, TheMoeDispatcherThePlanPricedIsFlags) {
  const auto flags = megatron_flags();
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 1024;
  auto args = [&](const SimOptions& o) {
    auto a = export_megatron_args(plan_of("qwen3-30b-a3b", "dgx-h100", "dp=16,ep=16,micro=1", 16, t, o));
    LOOM_CHECK(a.is_ok(), a.status().to_string());
    expect_accepted(*a, flags, "qwen3-30b-a3b dp=16,ep=16");
    return *a;
  };
  const std::string plain = args(SimOptions{});
  EXPECT_NE(plain.find("--moe-token-dispatcher-type alltoall\n"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("--overlap-moe-expert-parallel-comm"), std::string::npos) << plain;
  SimOptions deepep;
  deepep.moe_dedup_dispatch = deepep.ep_comm_overlap = true;
  deepep.moe_dispatch_sms = 24;
  const std::string flex = args(deepep);
  for (const char* f : {"--moe-token-dispatcher-type flex\n", "--moe-flex-dispatcher-backend deepep\n",
                        "--moe-deepep-num-sms 24\n", "--overlap-moe-expert-parallel-comm\n"})
    EXPECT_NE(flex.find(f), std::string::npos) << f << flex;
  EXPECT_EQ(flex.find("alltoall"), std::string::npos) << flex;
  SimOptions fp8_attention;
  fp8_attention.fp8_attention = true;
  TrainSpec fp8 = t;
  fp8.precision = Precision::kFp8;
  auto refused = export_megatron_args(plan_of("llama-3-8b", "dgx-h100", "dp=8,zero=1,micro=1", 8, fp8, fp8_attention));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("fp8_dot_product_attention"), std::string::npos)
      << refused.status().to_string();
}

// A plan that priced Megatron-core DDP's gradient-buffer passes exports the
// flags that turn the ones it left out off: averaging in the collective (no
// 1/dp pass) and no NaN-check norm; a plan without them says nothing.
TEST(ExportMegatron, TheGradientBufferPassesThePlanPricedAreFlags) {
  const auto flags = megatron_flags();
  SimOptions mc;
  mc.framework = "megatron-core";
  mc.grad_buffer_zero = mc.grad_nan_check = mc.grad_scale_pass = true;
  SimOptions bridge = mc;
  bridge.grad_nan_check = bridge.grad_scale_pass = false;
  auto args = [&](const SimOptions& o) { return llama8b_dp8_megatron_args(o, flags); };
  const std::string megatron = args(mc), nemo = args(bridge), none = args(SimOptions{});
  for (const char* f : {"--ddp-average-in-collective\n", "--no-check-for-nan-in-loss-and-grad\n"}) {
    EXPECT_EQ(megatron.find(f), std::string::npos) << megatron;
    EXPECT_NE(nemo.find(f), std::string::npos) << nemo;
    EXPECT_EQ(none.find(f), std::string::npos) << none;
  }
}

// Adam's state as the plan priced it (docs/simulator.md section 2.2):
// Megatron's precision-aware optimizer, with bf16 moments where the plan
// keeps them; DeepSpeed and torchtitan have no such setting and refuse.
TEST(ExportMegatron, TheOptimizerStateThePlanPricedIsFlags) {
  const auto flags = megatron_flags();
  SimOptions mc;
  mc.framework = "megatron-core";
  SimOptions remainder = mc, moments = mc;
  remainder.optimizer_master_bytes = 2;
  moments.optimizer_moment_bytes = 2;
  auto args = [&](const SimOptions& o) { return llama8b_dp8_megatron_args(o, flags); };
  const std::string fp32 = args(mc), rem = args(remainder), bf16 = args(moments);
  EXPECT_EQ(fp32.find("--use-precision-aware-optimizer\n"), std::string::npos) << fp32;
  EXPECT_NE(rem.find("--use-precision-aware-optimizer\n"), std::string::npos) << rem;
  EXPECT_EQ(rem.find("--exp-avg-dtype"), std::string::npos) << rem;
  EXPECT_NE(bf16.find("--use-precision-aware-optimizer\n--exp-avg-dtype bf16\n--exp-avg-sq-dtype bf16\n"),
            std::string::npos)
      << bf16;
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 1024;
  const Plan p = plan_of("llama-3-8b", "dgx-h100", "dp=8,zero=0,micro=1", 8, t, moments);
  for (const char* dialect : {"deepspeed", "torchtitan"}) {
    auto r = export_plan(p, dialect);
    ASSERT_FALSE(r.is_ok()) << dialect;
    EXPECT_NE(r.status().message().find("optimizer_moment_bytes"), std::string::npos) << r.status().to_string();
  }
}

// The attention kernel the plan priced is the one Megatron runs: cuDNN's
// fused attention (--attention-backend fused) for the H100 profile's cuDNN
// tables, FlashAttention-2 (flash, version 2) where the plan priced it (the
// A100 profile's own, or H100 with --attention-kernel fa2); nothing for a
// profile that names no kernel, or for materialized scores.
TEST(ExportMegatron, TheAttentionBackendIsTheKernelThePlanPriced) {
  const auto flags = megatron_flags();
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 4096;
  auto args_of = [&](const HwProfile& hw, const SimOptions& opt) {
    Evaluator eval(testing::load_model_or_die("llama-3-8b"), hw, t, opt);
    auto r = simulate_layout(eval, *parse_layout("dp=4,tp=2,zero=1,micro=1,sp=1"));
    LOOM_CHECK(r.is_ok(), r.status().to_string());
    auto a = export_megatron_args(make_plan(eval, *r, 8));
    LOOM_CHECK(a.is_ok(), a.status().to_string());
    expect_accepted(*a, flags, hw.name + " " + hw.accel.attention_kernel);
    return *a;
  };
  HwProfile h100 = testing::load_hw_or_die("dgx-h100");
  std::string a = args_of(h100, SimOptions{});
  EXPECT_NE(a.find("--attention-backend fused\n"), std::string::npos) << a;
  EXPECT_EQ(a.find("--flash-attention-version"), std::string::npos) << a;
  ASSERT_TRUE(select_attention_kernel(&h100, "cudnn-2024-07").is_ok());
  EXPECT_NE(args_of(h100, SimOptions{}).find("--attention-backend fused\n"), std::string::npos);
  ASSERT_TRUE(select_attention_kernel(&h100, "fa2").is_ok());
  a = args_of(h100, SimOptions{});
  EXPECT_NE(a.find("--attention-backend flash\n--flash-attention-version 2\n"), std::string::npos) << a;
  a = args_of(testing::load_hw_or_die("dgx-a100-80gb"), SimOptions{});
  EXPECT_NE(a.find("--attention-backend flash\n"), std::string::npos) << a;
  SimOptions materialized;
  materialized.flash_attention = false;
  EXPECT_EQ(args_of(testing::load_hw_or_die("dgx-h100"), materialized).find("--attention-backend"), std::string::npos);
  HwProfile unnamed = testing::load_hw_or_die("dgx-h100");
  unnamed.accel.attention_kernel.clear();
  unnamed.accel.attention_kernels.clear();
  EXPECT_EQ(args_of(unnamed, SimOptions{}).find("--attention-backend"), std::string::npos);
}

// Userbuffers as the plan priced them: --tp-comm-overlap (Megatron accepts
// it), with --tp-comm-overlap-cfg naming the YAML `--export
// tp-comm-overlap-cfg` prints when the settings are not Transformer Engine's
// own defaults; that YAML reads back (as a two-level mapping) to the same
// settings. Without SP there is no overlap to export.
TEST(ExportMegatron, UserbuffersSettingsFollowThePlan) {
  const auto flags = megatron_flags();
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 8192;
  SimOptions o;
  o.tp_comm_overlap = true;
  const Plan te = plan_of("llama-3-70b", "dgx-h100", "dp=2,tp=4,pp=2,zero=1,micro=1,sp=1", 16, t, o);
  auto args = export_megatron_args(te);
  ASSERT_TRUE(args.is_ok()) << args.status().to_string();
  expect_accepted(*args, flags, "te2 defaults");
  EXPECT_NE(args->find("--tp-comm-overlap\n"), std::string::npos) << *args;
  EXPECT_EQ(args->find("--tp-comm-overlap-cfg"), std::string::npos) << *args;

  auto cfg = load_tp_overlap_config("nemo-25.02-bf16-h100-h8192-tp4");
  ASSERT_TRUE(cfg.is_ok());
  o.tp_overlap = *cfg;
  const Plan nemo = plan_of("llama-3-70b", "dgx-h100", "dp=2,tp=4,pp=2,zero=1,micro=1,sp=1", 16, t, o);
  args = export_megatron_args(nemo);
  ASSERT_TRUE(args.is_ok()) << args.status().to_string();
  expect_accepted(*args, flags, "nemo settings");
  EXPECT_NE(args->find("--tp-comm-overlap-cfg nemo-25.02-bf16-h100-h8192-tp4.yaml\n"), std::string::npos) << *args;
  auto yaml = export_plan(nemo, "tp-comm-overlap-cfg");
  ASSERT_TRUE(yaml.is_ok()) << yaml.status().to_string();
  // "key:\n  field: value" -> JSON, booleans as 0/1 as Megatron's YAML gives them.
  std::istringstream lines(*yaml);
  std::string line, json = "{\"source\": \"export\"", key;
  bool open = false;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] != ' ') {
      json += std::string(open ? "}" : "") + ", \"" + line.substr(0, line.find(':')) + "\": {";
      open = true;
      key.clear();
      continue;
    }
    const std::string field = line.substr(2, line.find(':') - 2), value = line.substr(line.find(':') + 2);
    const bool boolean = field == "set_sm_margin" || field == "aggregate" || field == "atomic_gemm";
    json += std::string(key.empty() ? "" : ", ") + "\"" + field + "\": " +
            (field == "method" ? "\"" + value + "\"" : boolean ? (value == "1" ? "true" : "false") : value);
    key = field;
  }
  json += "}}";
  auto back = parse_tp_overlap_config(json, "nemo-25.02-bf16-h100-h8192-tp4", true);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string() << "\n" << json;
  EXPECT_EQ(*back, *cfg);

  const Plan no_sp = plan_of("llama-3-70b", "dgx-h100", "dp=2,tp=4,pp=2,zero=1,micro=1", 16, t, o);
  args = export_megatron_args(no_sp);
  ASSERT_TRUE(args.is_ok());
  EXPECT_EQ(args->find("--tp-comm-overlap"), std::string::npos) << *args;
  EXPECT_FALSE(export_plan(no_sp, "tp-comm-overlap-cfg").is_ok());
}

// The loss the plan priced: Megatron's fused one is its flag (accepted by
// Megatron-LM's parser); Transformer Engine's, which Megatron-LM now refuses,
// is refused here with the fix; the unfused one is Megatron's default.
TEST(ExportMegatron, TheLossFusionFollowsThePlan) {
  const auto flags = megatron_flags();
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 1024;
  SimOptions fused, te, unfused;
  fused.cross_entropy = CrossEntropyImpl::kMegatronFused;
  te.cross_entropy = CrossEntropyImpl::kTe;
  unfused.cross_entropy = CrossEntropyImpl::kMegatron;
  auto args = export_megatron_args(plan_of("llama-3-8b", "dgx-h100", "dp=8,zero=1,micro=1", 8, t, fused));
  ASSERT_TRUE(args.is_ok()) << args.status().to_string();
  expect_accepted(*args, flags, "megatron_fused");
  EXPECT_NE(args->find("--cross-entropy-loss-fusion\n"), std::string::npos) << *args;
  auto plain = export_megatron_args(plan_of("llama-3-8b", "dgx-h100", "dp=8,zero=1,micro=1", 8, t, unfused));
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  EXPECT_EQ(plain->find("cross-entropy"), std::string::npos) << *plain;
  auto refused = export_megatron_args(plan_of("llama-3-8b", "dgx-h100", "dp=8,zero=1,micro=1", 8, t, te));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("--cross-entropy megatron_fused"), std::string::npos)
      << refused.status().to_string();
}

// Context parallelism: torchtitan states its degree; DeepSpeed has none and
// says so rather than exporting a layout it would run without CP.
TEST(ExportContextParallel, TorchtitanStatesItDeepSpeedRefuses) {
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 8192;
  const Plan p = plan_of("llama-3-8b", "dgx-h100", "dp=2,tp=2,cp=2,zero=3,micro=1,sp=1", 8, t);
  auto toml = export_torchtitan_toml(p);
  ASSERT_TRUE(toml.is_ok()) << toml.status().to_string();
  EXPECT_NE(toml->find("context_parallel_degree = 2\n"), std::string::npos) << *toml;
  // The ring the plan priced, not torchtitan's default (allgather).
  EXPECT_NE(toml->find("context_parallel_rotate_method = \"alltoall\"\n"), std::string::npos) << *toml;
  auto ds = export_deepspeed_config(p);
  ASSERT_FALSE(ds.is_ok());
  EXPECT_NE(ds.status().message().find("cp=2"), std::string::npos) << ds.status().message();
  // The all-gathered K/V are priced as Transformer Engine runs them, which
  // torchtitan's rotation does not: refused, naming the fix.
  const Plan ag = plan_of("llama-3-8b", "dgx-h100", "dp=2,tp=2,cp=2,zero=3,micro=1,sp=1,cp_comm=all_gather", 8, t);
  auto refused = export_torchtitan_toml(ag);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("cp_comm=p2p"), std::string::npos) << refused.status().message();
}

// DualPipeV: torchtitan names it (PyTorch's ScheduleDualPipeV, placing the
// model parts as a V, so the parts stay in layer order); Megatron-LM and
// DeepSpeed have no such schedule and say so.
TEST(ExportDualPipeV, TorchtitanNamesItOthersRefuse) {
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 1024;
  const Plan p = plan_of("llama-3-8b", "dgx-h100", "dp=2,pp=4,schedule=dualpipev,micro=1", 8, t);
  auto toml = export_torchtitan_toml(p);
  ASSERT_TRUE(toml.is_ok()) << toml.status().to_string();
  EXPECT_NE(toml->find("pipeline_parallel_schedule = \"DualPipeV\"\n"), std::string::npos) << *toml;
  EXPECT_NE(toml->find("[[\"tok_embeddings\", \"layers.0\", \"layers.1\", \"layers.2\", \"layers.3\"]"),
            std::string::npos)
      << *toml;
  EXPECT_NE(toml->find("\"layers.31\", \"norm\", \"output\"]]"), std::string::npos) << *toml;
  for (const auto& refused : {export_megatron_args(p), export_deepspeed_config(p)}) {
    ASSERT_FALSE(refused.is_ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(refused.status().message().find("schedule=dualpipev has no"), std::string::npos)
        << refused.status().message();
    EXPECT_NE(refused.status().message().find("--export torchtitan"), std::string::npos);
  }
}

// What a run needs that Megatron would otherwise default differently: the
// iterations (it refuses to start without), the tokenizer and vocabulary, the
// RoPE base, no dropout for the families planned without, Qwen3's q/k norm.
TEST(ExportMegatron, StatesWhatMegatronWouldDefaultOtherwise) {
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 1024;
  const Plan llama = plan_of("llama-3-8b", "dgx-h100", "dp=8,micro=1", 8, t);
  auto a = export_megatron_args(llama);
  ASSERT_TRUE(a.is_ok());
  EXPECT_NE(a->find("--train-iters " + std::to_string(kDefaultTrainSteps) + "\n"), std::string::npos) << *a;
  EXPECT_NE(a->find("--rotary-base 500000\n"), std::string::npos) << *a;
  EXPECT_NE(a->find("--hidden-dropout 0.0\n--attention-dropout 0.0\n"), std::string::npos) << *a;
  EXPECT_NE(a->find("--vocab-size 128256\n"), std::string::npos) << *a;
  EXPECT_NE(a->find("--tokenizer-type HuggingFaceTokenizer\n"), std::string::npos) << *a;
  EXPECT_EQ(a->find("--qk-layernorm"), std::string::npos) << *a;
  const Plan qwen = plan_of("qwen3-30b-a3b", "dgx-h100", "dp=8,ep=8,micro=1", 8, t);
  auto q = export_megatron_args(qwen);
  ASSERT_TRUE(q.is_ok());
  EXPECT_NE(q->find("--qk-layernorm\n"), std::string::npos) << *q;
  const Plan gpt2 = plan_of("gpt2-124m", "dgx-h100", "dp=8,micro=1", 8, t);
  auto g = export_megatron_args(gpt2);
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(g->find("--hidden-dropout"), std::string::npos) << "GPT-2 keeps Megatron's 0.1, as planned";
  // A sliding window of W: Transformer Engine's (left, right) = (W - 1, 0),
  // the window transformers gives flash attention; a flag Megatron has.
  Plan windowed = llama;
  windowed.model.sliding_window = 4096;
  auto w = export_megatron_args(windowed);
  ASSERT_TRUE(w.is_ok());
  EXPECT_NE(w->find("--window-size 4095,0\n"), std::string::npos) << *w;
  EXPECT_TRUE(megatron_flags().count("--window-size")) << "tests/data/megatron_flags.txt";
  EXPECT_EQ(a->find("--window-size"), std::string::npos) << *a;
  auto ds = export_deepspeed_config(llama);
  ASSERT_TRUE(ds.is_ok());
  EXPECT_NE(ds->find("\"total_num_steps\": " + std::to_string(kDefaultTrainSteps)), std::string::npos) << *ds;
}

}  // namespace
}  // namespace loom
