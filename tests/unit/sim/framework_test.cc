// Framework profiles: every shipped file loads with its sources, sets the
// options its stack's sources state, and confines the search to the layouts
// that stack can run; bad files name the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>

#include "core/plan.h"
#include "core/stage_split.h"
#include "sim/export.h"
#include "sim/framework.h"
#include "sim/report.h"
#include "sim/search.h"
#include "tests/support/sim_test_support.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

Framework load_or_die(const std::string& name) { return testing::framework_or_die(name); }

TEST(Framework, ShippedProfilesLoadWithTheirStacksDefaults) {
  const Framework mc = load_or_die("megatron-core");
  // Megatron-LM with --bf16: fp32 main grads reduced in fp32; async backward
  // TP in its linear layers; TE's DelayedScaling is Megatron's default recipe.
  EXPECT_TRUE(mc.fp32_main_grads);
  EXPECT_TRUE(mc.tp_async_backward);
  EXPECT_EQ(mc.fp8_scaling, Fp8Scaling::kDelayed);
  EXPECT_EQ(mc.export_kind, "megatron");
  const Framework tt = load_or_die("torchtitan");
  // FSDP2 reduce_dtype float32; torchao's tensorwise (current) scaling.
  EXPECT_TRUE(tt.fp32_main_grads);
  EXPECT_FALSE(tt.tp_async_backward);
  EXPECT_EQ(tt.fp8_scaling, Fp8Scaling::kCurrent);
  EXPECT_EQ(tt.sequence_parallel, SequenceParallelRule::kAlways);
  // Selective means selective op AC there (every second mm re-run), the
  // attention core in Megatron (Korthikanti et al.).
  EXPECT_EQ(tt.selective_recompute, SelectiveRecompute::kEveryOtherMatmul);
  EXPECT_EQ(mc.selective_recompute, SelectiveRecompute::kAttentionCore);
  // The loss: Megatron's unfused vocab_parallel_cross_entropy (the fusion
  // flag is off by default); torchtitan's F.cross_entropy on fp32 logits.
  EXPECT_EQ(mc.cross_entropy, CrossEntropyImpl::kMegatron);
  EXPECT_EQ(tt.cross_entropy, CrossEntropyImpl::kTorch);
  // torchtitan's Llama block runs eager (compile = false in its configs), and
  // FSDP2 copies around its collectives; Megatron's layers are fused.
  EXPECT_EQ(tt.layer_ops, LayerOps::kTorchEager);
  EXPECT_TRUE(tt.fsdp_copies);
  EXPECT_EQ(mc.layer_ops, LayerOps::kFused);
  EXPECT_FALSE(mc.fsdp_copies);
  // Megatron-core's DDP zeroes, NaN-checks and (summing, not averaging)
  // scales its gradient buffer each step, and its hook adds autograd's
  // gradients into main_grad; every PyTorch stack's embedding gradient is
  // dense. FSDP2 has none of DDP's passes.
  EXPECT_TRUE(mc.grad_buffer_zero && mc.grad_nan_check && mc.grad_scale_pass && mc.grad_hook_add);
  // Megatron-core's buckets: max(40M, 1M x dp) parameters, on pipeline rank
  // 0's first chunk only (distributed_data_parallel.py, training.py);
  // torchtitan's DDP (replicate, bucket_cap_mb=100) caps a bucket at 100 MiB
  // of fp32 gradients, on every pipeline chunk.
  EXPECT_EQ(mc.grad_bucket_params, 40e6);
  EXPECT_EQ(mc.grad_bucket_params_per_dp, 1e6);
  EXPECT_EQ(mc.bucketed_chunks, BucketedChunks::kFirst);
  EXPECT_EQ(tt.grad_bucket_params, 100.0 * 1024 * 1024 / 4);
  EXPECT_EQ(tt.grad_bucket_params_per_dp, 0);
  EXPECT_EQ(tt.bucketed_chunks, BucketedChunks::kAll);
  EXPECT_TRUE(mc.embedding_dense_grad);
  EXPECT_TRUE(tt.embedding_dense_grad);
  // Transformer Engine's LayerNormLinear writes FP8 under delayed scaling;
  // the q/k/v bshd copies ended with core_v0.14 (rows on older releases say so).
  EXPECT_TRUE(mc.fp8_norm_cast_fused);
  EXPECT_FALSE(mc.qkv_bshd_copies);
  EXPECT_FALSE(tt.fp8_norm_cast_fused);
  EXPECT_TRUE(mc.fused_layer_backward);
  EXPECT_FALSE(tt.fused_layer_backward);
  EXPECT_FALSE(tt.grad_buffer_zero || tt.grad_nan_check || tt.grad_scale_pass || tt.grad_hook_add);
  const Framework ds = load_or_die("deepspeed");
  EXPECT_FALSE(ds.fused_layer_backward);  // Hugging Face's layers, not Transformer Engine's
  // communication_data_type falls back to the model dtype (bf16); overlap_comm
  // defaults to stage == 3.
  EXPECT_FALSE(ds.fp32_main_grads);
  EXPECT_EQ(ds.grad_reduce_overlap_zero_stages, std::vector<int>{3});
  EXPECT_EQ(ds.sequence_parallel, SequenceParallelRule::kNever);
  // MoE experts: Transformer Engine's GroupedLinear runs one cuBLAS GEMM per
  // expert (multi_stream_cublas_gemm), DeepSpeed's Experts a Python loop;
  // torchtitan's GroupedExperts one torch._grouped_mm.
  EXPECT_EQ(mc.expert_gemm, ExpertGemm::kPerExpert);
  EXPECT_EQ(ds.expert_gemm, ExpertGemm::kPerExpert);
  EXPECT_EQ(tt.expert_gemm, ExpertGemm::kGrouped);

  SimOptions opt;
  apply_framework(mc, &opt);
  EXPECT_EQ(opt.framework, "megatron-core");
  EXPECT_TRUE(opt.fp32_main_grads);
  // The plan records the framework and reads it back.
  auto back = parse_sim_options(sim_options_json(opt));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->framework, "megatron-core");
  EXPECT_EQ(back->fp8_scaling, Fp8Scaling::kDelayed);
  EXPECT_EQ(back->expert_gemm, ExpertGemm::kPerExpert);
  EXPECT_TRUE(back->grad_buffer_zero && back->grad_nan_check && back->grad_scale_pass && back->grad_hook_add);
  EXPECT_TRUE(back->embedding_dense_grad);
  // Off, they are not written: plans made before them keep their hash.
  EXPECT_TRUE(back->fp8_norm_cast_fused && back->fused_layer_backward);
  EXPECT_FALSE(back->qkv_bshd_copies);
  for (const char* key : {"grad_buffer_zero", "grad_nan_check", "grad_scale_pass", "grad_hook_add", "embedding_dense_grad",
                          "qkv_bshd_copies", "fp8_norm_cast_fused", "fused_layer_backward"})
    EXPECT_EQ(sim_options_json(SimOptions{}).find(key), std::string::npos) << key;
  EXPECT_EQ(sim_options_json(SimOptions{}).find("expert_gemm"), std::string::npos);
  EXPECT_FALSE(parse_sim_options(R"({"expert_gemm": "batched"})").is_ok());
  SimOptions titan;
  apply_framework(tt, &titan);
  auto titan_back = parse_sim_options(sim_options_json(titan));
  ASSERT_TRUE(titan_back.is_ok()) << titan_back.status().to_string();
  EXPECT_EQ(titan_back->selective_recompute, SelectiveRecompute::kEveryOtherMatmul);
  EXPECT_EQ(titan_back->cross_entropy, CrossEntropyImpl::kTorch);
  EXPECT_EQ(titan_back->layer_ops, LayerOps::kTorchEager);
  EXPECT_TRUE(titan_back->fsdp_copies);
  EXPECT_TRUE(titan_back->pp_fsdp_once);
  EXPECT_EQ(sim_options_json(SimOptions{}).find("pp_fsdp_once"), std::string::npos);
  EXPECT_EQ(sim_options_json(SimOptions{}).find("layer_ops"), std::string::npos);
  EXPECT_FALSE(parse_sim_options(R"({"layer_ops": "compiled"})").is_ok());
  EXPECT_EQ(parse_sim_options(sim_options_json(SimOptions{}))->cross_entropy, CrossEntropyImpl::kFused);
  // The default is not written (plans made before it keep their hash).
  EXPECT_EQ(sim_options_json(SimOptions{}).find("cross_entropy"), std::string::npos);
  EXPECT_FALSE(parse_sim_options(R"({"cross_entropy": "liger"})").is_ok());
  EXPECT_FALSE(parse_sim_options(R"({"selective_recompute": "half"})").is_ok());
  // The stack's buckets travel with the plan: Megatron-core's rule, and a
  // bucket per layer on the first chunk only (NeMo 1.x with Apex, a row's
  // setting), which states no size. Not written when not stated.
  EXPECT_EQ(back->grad_bucket_params, 40e6);
  EXPECT_EQ(back->grad_bucket_params_per_dp, 1e6);
  EXPECT_EQ(back->bucketed_chunks, BucketedChunks::kFirst);
  SimOptions layers;
  layers.grad_bucket_layers = true;
  layers.bucketed_chunks = BucketedChunks::kFirst;
  auto layers_back = parse_sim_options(sim_options_json(layers));
  ASSERT_TRUE(layers_back.is_ok()) << layers_back.status().to_string();
  EXPECT_TRUE(layers_back->grad_bucket_layers);
  EXPECT_EQ(layers_back->bucketed_chunks, BucketedChunks::kFirst);
  for (const char* key : {"grad_bucket_params", "bucketed_chunks", "grad_bucket_layers"})
    EXPECT_EQ(sim_options_json(SimOptions{}).find(key), std::string::npos) << key;
  EXPECT_FALSE(parse_sim_options(R"({"bucketed_chunks": "some"})").is_ok());
}

// The SMs a MoE dispatcher holds while its all-to-alls hide behind compute:
// DeepSeek-V3's report states 20 (section 3.2.2); Megatron-core's alltoall
// dispatcher runs on NCCL's channels (0: comm_contention_fraction). The plan
// records a stated count and reads it back; unstated, it writes nothing, so
// plans made before it keep their hash.
TEST(Framework, DeepSeekV3StatesItsDispatchersSms) {
  EXPECT_EQ(load_or_die("deepseek-v3").moe_dispatch_sms, 20);
  EXPECT_EQ(load_or_die("megatron-core").moe_dispatch_sms, 0);
  SimOptions opt;
  apply_framework(load_or_die("deepseek-v3"), &opt);
  EXPECT_EQ(opt.moe_dispatch_sms, 20);
  auto back = parse_sim_options(sim_options_json(opt));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->moe_dispatch_sms, 20);
  EXPECT_EQ(sim_options_json(SimOptions{}).find("moe_dispatch_sms"), std::string::npos);
  EXPECT_FALSE(parse_sim_options(R"({"moe_dispatch_sms": -1})").is_ok());
}

TEST(Framework, TheSearchTriesOnlyWhatTheStackCanRun) {
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 4096;
  Evaluator eval(m, hw, t, SimOptions{});
  for (const char* name : {"megatron-core", "torchtitan", "deepspeed", "deepseek-v3"}) {
    const Framework f = load_or_die(name);
    SearchSpace sp;
    sp.world = 16;
    apply_framework(f, &sp);
    const std::vector<Layout> layouts = enumerate_layouts(eval, sp);
    ASSERT_FALSE(layouts.empty()) << name;
    // Pinned first/last chunks only where the stack's export can state them
    // (Megatron's --decoder-first/last-pipeline-num-layers, plain pipelines).
    const bool pinned = std::any_of(layouts.begin(), layouts.end(), [](const Layout& l) {
      return l.first_stage_layers > 0 || l.last_stage_layers > 0;
    });
    EXPECT_EQ(pinned, std::string(name) != "deepspeed") << name;
    // DeepSpeed's PipelineEngine refuses ZeRO-2/3: under a pipeline only 0
    // and 1, without one all four.
    if (std::string(name) == "deepspeed") {
      std::set<int> piped, flat;
      for (const Layout& l : layouts) (l.pp > 1 ? piped : flat).insert(l.zero);
      EXPECT_EQ(piped, (std::set<int>{0, 1}));
      EXPECT_EQ(flat, (std::set<int>{0, 1, 2, 3}));
      Layout z3 = *parse_layout("dp=8,pp=2,zero=3");
      Status s = check_layout_for_framework(f, m, z3);
      ASSERT_FALSE(s.is_ok());
      EXPECT_NE(s.message().find("runs ZeRO 0, 1 under a pipeline"), std::string::npos) << s.message();
    }
    for (const Layout& l : layouts) {
      EXPECT_TRUE(check_layout_for_framework(f, m, l).is_ok()) << name << " " << l.to_string();
      const bool overlap = std::count(f.grad_reduce_overlap_zero_stages.begin(),
                                      f.grad_reduce_overlap_zero_stages.end(), l.zero) > 0;
      EXPECT_EQ(l.overlap_grad_reduce, overlap) << name << " " << l.to_string();
    }
  }
  // DualPipeV only where the stack runs it (torchtitan), and there with
  // v = 2, ZeRO 0 (torchtitan's DDP; FSDP's ZeRO-3 has no DualPipeV form
  // here) and at least 2*pp micro-batches; --fix refuses it elsewhere,
  // naming what the stack runs.
  for (const char* name : {"megatron-core", "torchtitan", "deepspeed"}) {
    const Framework f = load_or_die(name);
    SearchSpace sp;
    sp.world = 16;
    apply_framework(f, &sp);
    const Status fixed = apply_search_fix("schedule=dualpipev", &sp);
    EXPECT_EQ(fixed.is_ok(), std::string(name) == "torchtitan") << name << ": " << fixed.to_string();
    if (!fixed.is_ok()) {
      EXPECT_NE(fixed.message().find("--framework torchtitan"), std::string::npos) << fixed.message();
      continue;
    }
    const std::vector<Layout> vee = enumerate_layouts(eval, sp);
    ASSERT_FALSE(vee.empty());
    for (const Layout& l : vee) {
      EXPECT_EQ(l.schedule, Schedule::kDualPipeV) << l.to_string();
      EXPECT_EQ(l.virtual_stages, 2) << l.to_string();
      EXPECT_EQ(l.zero, 0) << l.to_string();
      EXPECT_GE(l.num_micro_batches(t.global_batch), 2 * l.pp) << l.to_string();
    }
  }
  // Loom's executor (no framework) runs DualPipeV too, with ZeRO 0 and 1.
  SearchSpace own;
  own.world = 16;
  ASSERT_TRUE(apply_search_fix("schedule=dualpipev", &own).is_ok());
  const std::vector<Layout> own_vee = enumerate_layouts(eval, own);
  ASSERT_FALSE(own_vee.empty());
  bool zero1 = false;
  for (const Layout& l : own_vee) {
    EXPECT_EQ(l.schedule, Schedule::kDualPipeV) << l.to_string();
    EXPECT_LE(l.zero, 1) << l.to_string();
    EXPECT_GE(l.num_micro_batches(t.global_batch), 2 * l.pp) << l.to_string();
    zero1 |= l.zero == 1;
  }
  EXPECT_TRUE(zero1);
  // And a layout the stack cannot run says what it offers instead.
  Layout z2;
  z2.dp = 16;
  z2.zero = 2;
  Status s = check_layout_for_framework(load_or_die("megatron-core"), m, z2);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("offers ZeRO 0, 1"), std::string::npos) << s.message();
  // A pinned interleaved split: Megatron-core states it since core_v0.13.0
  // (--pipeline-model-parallel-layout); a release before core_r0.11 cannot.
  Layout pinned = *parse_layout("dp=4,pp=4,schedule=interleaved,v=2,last=2");
  EXPECT_TRUE(check_layout_for_framework(load_or_die("megatron-core"), m, pinned).is_ok());
  Framework r08 = load_or_die("megatron-core");
  r08.layer_split = LayerSplitRule::kEqualChunks;
  s = check_layout_for_framework(r08, m, pinned);
  EXPECT_NE(s.message().find("with the interleaved schedule"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("layer_split equal_chunks"), std::string::npos) << s.message();
  pinned = *parse_layout("dp=4,pp=4,last=2");
  EXPECT_TRUE(check_layout_for_framework(load_or_die("megatron-core"), m, pinned).is_ok());
  EXPECT_TRUE(check_layout_for_framework(load_or_die("torchtitan"), m, pinned).is_ok());
  s = check_layout_for_framework(load_or_die("deepspeed"), m, pinned);
  EXPECT_NE(s.message().find("cannot pin the first and last pipeline chunk"), std::string::npos) << s.message();
}

// Llama-3-8B stretched to 92 layers (23 a stage over pp=4, 11.5 over pp=8) on
// H100s, 64 sequences of 4096 tokens: the layer splits each stack can state.
class FrameworkSplits : public ::testing::Test {
 protected:
  ModelSpec m = [] {
    ModelSpec x = testing::load_model_or_die("llama-3-8b");
    x.num_layers = 92;
    return x;
  }();
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  TrainSpec t = [] {
    TrainSpec x;
    x.global_batch = 64;
    x.seq_len = 4096;
    return x;
  }();
  Evaluator eval{m, hw, t, SimOptions{}};
};

TEST_F(FrameworkSplits, OldMegatronSearchesOnlySplitsItCanState) {
  // A Megatron-core release before core_r0.11 (pipeline.layer_split
  // equal_chunks; the MC rows' r0.8). 92 layers over pp=4 is 23 a stage: its
  // --num-layers-per-virtual-pipeline-stage can only make v = 23 (one layer a
  // chunk) of that, where Loom's own split also tries v = 2..8 with some
  // chunks a layer longer. Over pp=8 (11.5 a stage) no interleaved split
  // exists, and 1F1B needs the first and last stage pinned so that the six
  // middle stages are equal (--decoder-first/last-pipeline-num-layers).
  auto vs_at = [](const std::vector<Layout>& ls, int pp) {
    std::set<int> vs;
    for (const Layout& l : ls)
      if (l.pp == pp && l.schedule == Schedule::kInterleaved) vs.insert(l.virtual_stages);
    return vs;
  };
  SearchSpace free;
  free.world = 32;
  const std::vector<Layout> any = enumerate_layouts(eval, free);
  EXPECT_TRUE(vs_at(any, 4).count(8)) << "Loom's own split tries uneven chunks";
  Framework f = load_or_die("megatron-core");
  f.layer_split = LayerSplitRule::kEqualChunks;
  SearchSpace sp;
  sp.world = 32;
  apply_framework(f, &sp);
  const std::vector<Layout> mc = enumerate_layouts(eval, sp);
  EXPECT_EQ(vs_at(mc, 4), std::set<int>{23});
  EXPECT_TRUE(vs_at(mc, 8).empty());
  bool plain8 = false;
  for (const Layout& l : mc) {
    EXPECT_TRUE(megatron_split_status(m, l).is_ok()) << l.to_string();
    if (l.pp == 8 && l.schedule != Schedule::kInterleaved) {
      plain8 = true;
      const StageSplit split = split_layers(m, l);
      for (int s = 2; s + 1 < 8; ++s) EXPECT_EQ(split.chunk_layers[s], split.chunk_layers[1]) << l.to_string();
    }
  }
  EXPECT_TRUE(plain8);
}

// Megatron's PipelineParallelLayerLayout.parse_str_to_list, written again
// from its source (megatron/core/transformer/pipeline_parallel_layer_layout.py
// at d98e8a64dd): commas dropped, "(x)*n" then "c*n" unrolled, split at "|".
std::vector<std::string> megatron_layout_stages(std::string text) {
  text.erase(std::remove(text.begin(), text.end(), ','), text.end());
  for (const char* pattern : {R"(\(([^)]+)\)\*(\d+))", R"((.)\*(\d+))"}) {
    const std::regex re(pattern);
    std::string out;
    auto begin = std::sregex_iterator(text.begin(), text.end(), re);
    size_t last = 0;
    for (auto it = begin; it != std::sregex_iterator(); ++it) {
      out += text.substr(last, size_t(it->position()) - last);
      for (int i = 0; i < std::stoi((*it)[2].str()); ++i) out += (*it)[1].str();
      last = size_t(it->position() + it->length());
    }
    text = out + text.substr(last);
  }
  std::vector<std::string> stages(1);
  for (char c : text) {
    if (c == '|') stages.emplace_back();
    else stages.back() += c;
  }
  return stages;
}

TEST_F(FrameworkSplits, MegatronStatesAnySplitWithTheLayoutFlag) {
  // The shipped megatron-core (core_v0.13.0 and later): the search tries
  // uneven and pinned interleaved splits, and the export states each one
  // with --pipeline-model-parallel-layout, whose stages Megatron reads back
  // as Loom split them.
  const Framework f = load_or_die("megatron-core");
  EXPECT_EQ(f.layer_split, LayerSplitRule::kAny);
  SearchSpace sp;
  sp.world = 32;
  apply_framework(f, &sp);
  const std::vector<Layout> mc = enumerate_layouts(eval, sp);
  int uneven = 0, pinned = 0;
  for (const Layout& l : mc) {
    if (l.schedule != Schedule::kInterleaved) continue;
    if (l.first_stage_layers > 0 || l.last_stage_layers > 0) ++pinned;
    if (megatron_split_status(m, l).is_ok()) continue;
    ++uneven;
    ASSERT_TRUE(check_layout_for_framework(f, m, l).is_ok()) << l.to_string();
    const StageSplit split = split_layers(m, l);
    const std::vector<std::string> stages = megatron_layout_stages(megatron_pipeline_layout(m, l));
    ASSERT_EQ(stages.size(), size_t(l.pp * l.virtual_stages)) << l.to_string();
    for (size_t g = 0; g < stages.size(); ++g) {
      std::string want(size_t(split.chunk_layers[g]), 't');
      if (g == 0) want = "E" + want;
      if (g + 1 == stages.size()) want += "L";
      EXPECT_EQ(stages[g], want) << l.to_string() << " virtual stage " << g;
    }
  }
  EXPECT_GT(uneven, 0);
  EXPECT_GT(pinned, 0);
}

// FSDP under a pipeline, as torchtitan runs it (frameworks/torchtitan.json
// pipeline.fsdp_once): each chunk's parameters are gathered once a step and
// its gradients reduce-scattered once, after its last backward, not once per
// micro-batch. By hand, for Llama-3.1-405B at tp=8, pp=8, dp=8 in bf16 with
// fp32 reduction: a rank holds P = 405.9e9/64 parameters (the stages differ
// by a layer), and its DP traffic a step is one reduce-scatter of 4P bytes
// and one all-gather of 2P bytes, each sending 7/8 of its buffer: about
// 6 x 6.3e9 x 7/8 = 33 GB, whatever the micro-batch count. Its memory holds
// the whole 16-bit parameters and fp32 gradients of its stage, the
// optimizer state sharded 8 ways. Without a pipeline FSDP stays per layer.
TEST(Framework, TorchtitanFsdpUnderAPipelineSyncsOnceAStep) {
  const ModelSpec m = testing::load_model_or_die("llama-3.1-405b");
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  TrainSpec t;
  t.seq_len = 8192;
  t.precision = Precision::kBf16;
  SimOptions opt;
  apply_framework(load_or_die("torchtitan"), &opt);
  ASSERT_TRUE(opt.pp_fsdp_once);
  Layout l = *parse_layout("dp=8,tp=8,pp=8,zero=3,micro=1,schedule=interleaved,v=2,sp=1,recompute=full");
  double dp_bytes[2];
  int k = 0;
  for (int64_t batch : {64, 256}) {  // 8 and 32 micro-batches a step
    t.global_batch = batch;
    Evaluator eval(m, hw, t, opt);
    auto r = simulate_layout(eval, l);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->layout.zero, 3);  // the plan keeps the layout asked for
    double sent = 0;
    for (int c = 0; c < kNumLinkClasses; ++c) sent += r->traffic.bytes[int(CommKind::kDp)][c];
    dp_bytes[k++] = sent;
    EXPECT_NEAR(sent / (6 * 405.9e9 / 64 * 7 / 8), 1.0, 0.05) << batch;
    // The whole stage's parameters (2 bytes) and gradients (4 bytes) are held.
    const StageMemory& s1 = r->memory.stages[1];
    EXPECT_NEAR(s1.weights_bytes / (2 * 405.9e9 / 64), 1.0, 0.05);
    EXPECT_NEAR(s1.grads_bytes / (4 * 405.9e9 / 64), 1.0, 0.05);
    EXPECT_NEAR(s1.optimizer_bytes / (12 * 405.9e9 / 64 / 8), 1.0, 0.05);
    // The closed form prices the same form.
    EXPECT_NEAR(eval.estimate(l).time.step_time_s / r->time.step_time_s, 1.0, 0.1);
  }
  EXPECT_NEAR(dp_bytes[1] / dp_bytes[0], 1.0, 1e-9);  // not per micro-batch
  // DualPipeV with that FSDP: the deferred weight gradients end before the
  // one reduce-scatter, so torchtitan runs it; Loom's executor and Megatron
  // do not (ZeRO-2/3 would reduce after each backward), and say so.
  Layout vee = *parse_layout("dp=8,tp=8,pp=8,zero=3,micro=1,schedule=dualpipev,sp=1,recompute=full");
  const Framework tt = load_or_die("torchtitan");
  EXPECT_TRUE(check_layout_for_stack(&tt, m, vee).is_ok());
  {
    t.global_batch = 256;
    Evaluator eval(m, hw, t, opt);
    auto r = simulate_layout(eval, vee);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->layout.schedule, Schedule::kDualPipeV);
  }
  Status own = check_layout_for_stack(nullptr, m, vee);
  ASSERT_FALSE(own.is_ok());
  EXPECT_NE(own.message().find("--framework torchtitan"), std::string::npos) << own.message();
  Layout vee2 = vee;
  vee2.zero = 2;
  EXPECT_FALSE(check_layout_for_stack(&tt, m, vee2).is_ok());
  const Framework mc = load_or_die("megatron-core");
  EXPECT_FALSE(check_layout_for_stack(&mc, m, vee).is_ok());
  // The same stack without a pipeline: FSDP per layer, every micro-batch.
  t.global_batch = 64;
  Evaluator eval(m, hw, t, opt);
  Layout flat = *parse_layout("dp=64,tp=8,pp=1,zero=3,micro=1,sp=1,recompute=full");
  auto r = simulate_layout(eval, flat);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_LT(r->memory.stages[0].weights_bytes, 2 * 405.9e9 / 8 / 10);
}

// DeepSpeed overlaps only ZeRO-3's parameter prefetch: ZeRO-1 and 2 gather
// the updated parameters at the end of the optimizer step
// (stage_1_and_2.py step(): all_gather_dp_groups), with nothing beside them.
// The framework states it per ZeRO stage (overlap.param_gather: [3]); the
// search and a stated layout both take it, and a --fix pin still wins.
TEST(Framework, DeepSpeedOverlapsOnlyZero3sParameterGather) {
  const Framework ds = load_or_die("deepspeed");
  EXPECT_EQ(ds.param_gather_overlap_zero_stages, std::vector<int>{3});
  for (int zero : {1, 2, 3}) {
    Layout l = testing::layout_or_die("dp=8,zero=" + std::to_string(zero));
    apply_framework_overlap(ds, "dp=8,zero=" + std::to_string(zero), &l);
    EXPECT_EQ(l.overlap_param_gather, zero == 3) << "ZeRO-" << zero;
  }
  SearchSpace sp;
  apply_framework(ds, &sp);
  EXPECT_EQ(sp.overlap_param_zero_stages, std::vector<int>{3});
  ASSERT_TRUE(apply_search_fix("overlap_param=1", &sp).is_ok());
  EXPECT_TRUE(sp.overlap_param_zero_stages.empty());
  // Megatron-core overlaps its distributed optimizer's gather (ZeRO-1).
  const Framework mc = load_or_die("megatron-core");
  Layout l = testing::layout_or_die("dp=8,zero=1");
  apply_framework_overlap(mc, "dp=8,zero=1", &l);
  EXPECT_TRUE(l.overlap_param_gather);
}

TEST(Framework, BadFilesNameTheKey) {
  const std::string good = R"({"version": "1", "export": "megatron",
    "gradients": {"fp32_main_grads": true, "source": "s"},
    "overlap": {"grad_reduce_zero_stages": [0, 1], "source": "s"},
    "pipeline": {"blocking_p2p": true, "overlap_p2p_comm": true, "source": "s"},
    "layouts": {"zero_stages": [0, 1], "schedules": ["1f1b"], "recompute": ["none"], "sequence_parallel": "optional", "source": "s"},
    "fp8": {"scaling": "delayed", "source": "s"}, "source": "s"})";
  ASSERT_TRUE(parse_framework(good, "f").is_ok()) << parse_framework(good, "f").status().to_string();
  auto expect_error = [&](const std::string& from, const std::string& to, const std::string& needle) {
    std::string text = good;
    const size_t p = text.find(from);
    ASSERT_NE(p, std::string::npos) << from;
    text.replace(p, from.size(), to);
    auto r = parse_framework(text, "f");
    ASSERT_FALSE(r.is_ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
  };
  expect_error(R"("export": "megatron")", R"("export": "jax")", "export must be");
  expect_error(R"("zero_stages": [0, 1])", R"("zero_stages": [0, 4])", "layouts.zero_stages");
  expect_error(R"("schedules": ["1f1b"])", R"("schedules": ["zb-v"])", "layouts.schedules");
  expect_error(R"("sequence_parallel": "optional")", R"("sequence_parallel": "maybe")", "sequence_parallel must be");
  expect_error(R"("scaling": "delayed")", R"("scaling": "mx")", "fp8.scaling");
  expect_error(R"("recompute": ["none"])", R"("recompute": ["none"], "selective_recompute": "some")",
               "layouts.selective_recompute must be attention_core or every_other_matmul");
  expect_error(R"("blocking_p2p": true)", R"("blocking_p2p": 1)", "pipeline.blocking_p2p must be true or false");
  expect_error(R"("grad_reduce_zero_stages": [0, 1])", R"("grad_reduce_zero_stages": [0, 1], "param_gather": "yes")",
               "overlap.param_gather must be true, false or a list of ZeRO stages");
  expect_error(R"("grad_reduce_zero_stages": [0, 1])", R"("grad_reduce_zero_stages": [0, 1], "param_gather": [5])",
               "overlap.param_gather must hold ZeRO stages 0-3");
  expect_error(R"("blocking_p2p": true)", R"("blocking_p2p": true, "layer_split": "even")",
               "pipeline.layer_split must be any or equal_chunks");
  expect_error(R"("source": "s"})", R"("source": "s"}, "loss": {"cross_entropy": "liger", "source": "s"})",
               "loss.cross_entropy must be");
  expect_error(R"("source": "s"})", R"("source": "s"}, "loss": {"cross_entropy": "te"})", "loss.source is missing");
  expect_error(R"("gradients": {"fp32_main_grads": true, "source": "s"})", R"("gradients": {"fp32_main_grads": true})",
               "gradients.source");
  expect_error(R"("source": "s"})", R"("source": "s"}, "layer": {"ops": "jit", "source": "s"})", "layer.ops must be");
  expect_error(R"("fp32_main_grads": true)", R"("fp32_main_grads": true, "nan_check": "yes")",
               "gradients.nan_check must be true or false");
  expect_error(R"("source": "s"})", R"("source": "s"}, "layer": {"embedding_dense_grad": 1, "source": "s"})",
               "layer.embedding_dense_grad must be true or false");
  expect_error(R"("source": "s"})", R"("source": "s"}, "layer": {"ops": "torch_eager", "fused_backward": true, "source": "s"})",
               "layer.fused_backward describes fused kernels");
  expect_error(R"("source": "s"})", R"("source": "s"}, "layer": {"ops": "fused"})", "layer.source");
  expect_error(R"("source": "s"})", R"("source": "s"}, "moe": {"expert_gemm": "loop", "source": "s"})",
               "moe.expert_gemm must be grouped or per_expert");
  expect_error(R"("source": "s"})", R"("source": "s"}, "moe": {"expert_gemm": "grouped"})", "moe.source");
  expect_error(R"("source": "s"})", R"("source": "s"}, "moe": {"dispatch_sms": -4, "source": "s"})",
               "moe.dispatch_sms must be");
  expect_error(R"("zero_stages": [0, 1])", R"("zero_stages": [0, 1], "pipeline_zero_stages": [3])",
               "layouts.pipeline_zero_stages: ZeRO 3 is not among zero_stages");
  expect_error(R"("blocking_p2p": true)", R"("blocking_p2p": true, "fsdp_once": "yes")", "pipeline.fsdp_once");
  expect_error(R"("blocking_p2p": true)", R"("blocking_p2p": true, "fsdp_once": true)",
               "cannot also offer ZeRO-1");  // the good file's zero_stages are [0, 1]
  expect_error(R"("fp32_main_grads": true)", R"("fp32_main_grads": true, "bucket_params": 4e7)",
               "gradients.bucket_source is missing");
  expect_error(R"("fp32_main_grads": true)",
               R"("fp32_main_grads": true, "bucket_params": 4e7, "bucketed_chunks": "some", "bucket_source": "s")",
               "gradients.bucketed_chunks must be all, first or none");
  expect_error(R"("fp32_main_grads": true)", R"("fp32_main_grads": true, "bucket_params_per_dp_rank": 1e6)",
               "bucket_params_per_dp_rank needs bucket_params");
  expect_error(R"("fp32_main_grads": true)", R"("fp32_main_grads": true, "bucketed_chunks": "first")",
               "bucketed_chunks needs bucket_params");
  expect_error(R"("fp32_main_grads": true)", R"("fp32_main_grads": true, "gemm_accumulate": true)",
               "gradients.gemm_accumulate_source is missing");
  // A misspelt key is refused with the section's keys, not left at its default.
  expect_error(R"("fp32_main_grads": true)", R"("fp32_main_grad": true)",
               "gradients has no key 'fp32_main_grad'; the keys are bucket_params, bucket_params_per_dp_rank, "
               "bucket_source, bucketed_chunks, fp32_main_grads");
  expect_error(R"("export": "megatron")", R"("export": "megatron", "dropuot": 0)", "framework f has no key 'dropuot'");
  expect_error(R"("scaling": "delayed")", R"("scaling": "delayed", "atention": true)", "fp8 has no key 'atention'");
  EXPECT_FALSE(load_framework("no-such-stack").is_ok());
}

TEST(Framework, TorchtitanExportStatesTheLayout) {
  Plan p;
  p.model = testing::load_model_or_die("llama-3-8b");
  p.train.global_batch = 64;
  p.train.seq_len = 8192;
  p.train.precision = Precision::kFp8;
  p.layout.dp = 4;
  p.layout.tp = 2;
  p.layout.pp = 2;
  p.layout.zero = 3;
  p.layout.sequence_parallel = true;
  p.layout.schedule = Schedule::kInterleaved;
  p.layout.virtual_stages = 2;
  p.layout.micro_batch = 2;
  auto text = export_plan(p, "torchtitan");
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  for (const char* line : {"local_batch_size = 16", "data_parallel_shard_degree = 4", "tensor_parallel_degree = 2",
                           "pipeline_parallel_degree = 2", "pipeline_parallel_schedule = \"Interleaved1F1B\"",
                           "converters = [\"float8\"]",
                           // The split stated module by module: 4 parts of 8 layers, so that torchtitan's
                           // first/last_stage_less_layers defaults (1) cannot move it.
                           "module_fqns_per_model_part = [[\"tok_embeddings\", \"layers.0\", \"layers.1\"",
                           "\"layers.7\"], [\"layers.8\", ", "[\"layers.24\", ", "\"layers.31\", \"norm\", \"output\"]]"})
    EXPECT_NE(text->find(line), std::string::npos) << line << "\n" << *text;
  // A pinned last chunk (7 layers): the other 25 as 8, 9, 8 (the extra one on a middle chunk).
  p.layout.last_stage_layers = 7;
  text = export_plan(p, "torchtitan");
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  EXPECT_NE(text->find("\"layers.7\"], [\"layers.8\", "), std::string::npos) << *text;
  EXPECT_NE(text->find("\"layers.16\"], [\"layers.17\", "), std::string::npos) << *text;
  EXPECT_NE(text->find("[\"layers.25\", "), std::string::npos) << *text;
  p.layout.last_stage_layers = 0;
  p.layout.zero = 1;
  EXPECT_FALSE(export_plan(p, "torchtitan").is_ok());
}

}  // namespace
}  // namespace loom
