// Megatron-core's selective recompute by module (Layout::recompute_modules,
// --recompute-modules): what each module stops keeping and what it costs to
// re-run, worked by hand on DeepSeek-V3's shapes (models/deepseek-v3.json:
// h = 7168, 128 heads, q_lora 1536, kv_lora 512, qk_nope 128, qk_rope 64,
// v 128, SwiGLU, dense FFN 18432, 8 of 256 experts of 2048); and where the
// setting may go: the layout's text and the plan, the stacks that have it,
// the search's pin, the exports.
#include <gtest/gtest.h>

#include "core/layout.h"
#include "core/plan.h"
#include "sim/compute_model.h"
#include "sim/export.h"
#include "sim/framework.h"
#include "sim/memory_model.h"
#include "sim/report.h"
#include "sim/search.h"
#include "sim/simulate.h"
#include "tests/support/sim_test_support.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

Layout L(const std::string& text) { return testing::layout_or_die(text); }

Framework framework(const char* name) { return testing::framework_or_die(name); }

TEST(RecomputeModules, TextRoundTripsAndBadNamesAreNamed) {
  const Layout l = L("dp=8,recompute=selective,recompute_modules=mla_up_proj+layernorm");
  EXPECT_EQ(l.recompute_modules, unsigned(kRecomputeLayernorm | kRecomputeMlaUpProj));
  EXPECT_EQ(l.selective_modules(), l.recompute_modules);
  EXPECT_NE(l.to_string().find(",recompute_modules=layernorm+mla_up_proj"), std::string::npos) << l.to_string();
  EXPECT_EQ(L(l.to_string()), l);
  // Without names, selective is the attention core (Megatron's default).
  EXPECT_EQ(L("recompute=selective").selective_modules(), unsigned(kRecomputeCoreAttn));
  EXPECT_EQ(L("recompute=full").selective_modules(), 0u);
  for (const char* bad : {"recompute_modules=moe", "recompute_modules=core_attn+core_attn", "recompute_modules=a++b"}) {
    auto r = parse_layout(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find("recompute_modules"), std::string::npos) << r.status().message();
  }
  // What Megatron-core's TransformerConfig refuses is refused.
  const ModelSpec llama = testing::load_model_or_die("llama-3-8b");
  TrainSpec t;
  t.global_batch = 8;
  t.seq_len = 1024;
  auto expect_refused = [&](const ModelSpec& m, const char* text, const char* needle) {
    Status s = validate_layout(L(text), m, t, 8);
    ASSERT_FALSE(s.is_ok()) << text;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  expect_refused(llama, "dp=8,recompute=full,recompute_modules=mlp", "needs recompute=selective");
  expect_refused(llama, "dp=8,recompute=selective,recompute_modules=mla_up_proj", "multi-latent attention");
  expect_refused(llama, "dp=8,recompute=selective,recompute_modules=moe_act", "no experts");
  EXPECT_TRUE(validate_layout(L("dp=8,recompute=selective,recompute_modules=mlp+layernorm"), llama, t, 8).is_ok());
  // The plan keeps the modules (and writes nothing for a plan without them).
  Plan p;
  p.model = llama;
  p.hw = testing::load_hw_or_die("dgx-h100");
  p.layout = L("dp=8,recompute=selective,recompute_modules=core_attn+mlp");
  p.world_size = 8;
  p.train = t;
  auto back = parse_plan(plan_to_json(p));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->layout.recompute_modules, p.layout.recompute_modules);
  p.layout.recompute_modules = 0;
  EXPECT_EQ(plan_to_json(p).find("recompute_modules"), std::string::npos);
}

// Per layer, 4096 tokens (micro 1, seq 4096), no TP, bf16 (e = 2), Megatron's
// options (flash attention: the attention core keeps its log-sum-exp either
// way, so core_attn changes nothing here):
//   mla_up_proj drops Q, K, V: 4096 * (128*192 + 128*192 + 128*128) * 2 = 512 MiB
//   layernorm (a MoE layer): MLA's input norm and the pre-MLP norm outputs,
//     2 * 4096 * 7168 * 2 = 112 MiB; a dense layer only the MLA one, 56 MiB
//   moe_act drops the experts' fc2 input: 4096 * 8 * 2048 * 2 = 128 MiB
//   mlp (a dense layer) drops fc1's gate and up and their product:
//     4096 * 18432 * 3 * 2 = 432 MiB
TEST(RecomputeModules, EachModuleDropsWhatItReRuns) {
  const ModelSpec m = testing::load_model_or_die("deepseek-v3");
  SimOptions opt;
  apply_framework(framework("megatron-core"), &opt);
  const double MiB = 1024.0 * 1024.0;
  auto bytes = [&](const char* mods, bool moe) {
    const std::string text = std::string("recompute=selective") + (*mods ? std::string(",recompute_modules=") + mods : "");
    return layer_activation_bytes(m, L(text), opt, 4096, Precision::kBf16, moe);
  };
  for (bool moe : {false, true}) {
    const double core = bytes("core_attn", moe);
    EXPECT_DOUBLE_EQ(bytes("", moe), core);
    EXPECT_DOUBLE_EQ(core - bytes("mla_up_proj", moe), 512 * MiB) << moe;
    EXPECT_DOUBLE_EQ(core - bytes("layernorm", moe), (moe ? 112 : 56) * MiB) << moe;
  }
  EXPECT_DOUBLE_EQ(bytes("core_attn", true) - bytes("moe_act", true), 128 * MiB);
  EXPECT_DOUBLE_EQ(bytes("core_attn", false) - bytes("moe_act", false), 0);  // no experts in a dense layer
  EXPECT_DOUBLE_EQ(bytes("core_attn", false) - bytes("mlp", false), 432 * MiB);
  EXPECT_DOUBLE_EQ(bytes("core_attn", true) - bytes("mlp", true), 0);  // Megatron checkpoints dense MLPs only
  // Modules add up.
  EXPECT_DOUBLE_EQ(bytes("core_attn", true) - bytes("layernorm+mla_up_proj+moe_act", true), (112 + 512 + 128) * MiB);
}

// The re-run's cost in the layer's backward, by hand where it is FLOPs:
//   mla_up_proj: the q and kv up-projections again,
//     2 * 4096 * (128*192) * 1536 + 2 * 4096 * (128*256) * 512 = 446,676,598,784
//   mlp: the dense MLP's forward, 2 * 4096 * 7168 * 18432 * 3 = 3,246,995,275,776
// and the memory-bound ones (layernorm, moe_act) as passes that cost time
// but no FLOPs.
TEST(RecomputeModules, EachModuleReRunsItsForward) {
  const ModelSpec m = testing::load_model_or_die("deepseek-v3");
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  SimOptions opt;
  apply_framework(framework("megatron-core"), &opt);
  auto cost = [&](const char* mods, bool moe) {
    const Layout l = L(std::string("dp=8,recompute=selective,recompute_modules=") + mods);
    return layer_cost(m, hw, opt, Precision::kBf16, compute_shape(l, 4096, hw), moe);
  };
  EXPECT_DOUBLE_EQ(cost("mla_up_proj", true).recompute_flops, 446676598784.0);
  EXPECT_DOUBLE_EQ(cost("mlp", false).recompute_flops, 3246995275776.0);
  EXPECT_DOUBLE_EQ(cost("mlp", true).recompute_flops, 0);
  for (const char* mods : {"layernorm", "moe_act"}) {
    const PieceCost c = cost(mods, true);
    EXPECT_EQ(c.recompute_flops, 0) << mods;
    EXPECT_GT(c.recompute_s, 0) << mods;
  }
  // The dense MLP re-run costs its forward GEMMs, not the layer's whole
  // forward (full recompute) nor nothing; without core_attn the attention
  // core is not re-run.
  const PieceCost mlp = cost("mlp", false);
  const PieceCost full = layer_cost(m, hw, opt, Precision::kBf16, compute_shape(L("dp=8,recompute=full"), 4096, hw), false);
  EXPECT_GT(mlp.recompute_s, 0);
  EXPECT_LT(mlp.recompute_s, full.recompute_s);
  const PieceCost core = cost("core_attn", false);
  EXPECT_DOUBLE_EQ(cost("core_attn+mlp", false).recompute_s, core.recompute_s + mlp.recompute_s);
}

// Where the setting may go: Megatron-core plans and exports it; Loom's
// executor, torchtitan and DeepSpeed refuse it with the fix.
TEST(RecomputeModules, OnlyMegatronHasThem) {
  const ModelSpec m = testing::load_model_or_die("deepseek-v3");
  const Layout l = L("dp=8,tp=1,pp=8,ep=8,recompute=selective,recompute_modules=mla_up_proj+mlp");
  EXPECT_TRUE(check_layout_for_stack(nullptr, m, L("dp=8,recompute=selective")).is_ok());
  Status s = check_layout_for_stack(nullptr, m, l);
  EXPECT_NE(s.message().find("--framework megatron-core"), std::string::npos) << s.message();
  const Framework mc = framework("megatron-core");
  EXPECT_TRUE(check_layout_for_stack(&mc, m, l).is_ok());
  const Framework tt = framework("torchtitan");
  s = check_layout_for_stack(&tt, m, l);
  EXPECT_NE(s.message().find("drop recompute_modules"), std::string::npos) << s.message();
  // The search pins them only for a stack that has them.
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 4096;
  SimOptions opt;
  apply_framework(mc, &opt);
  Evaluator eval(m, testing::load_hw_or_die("dgx-h100"), t, opt);
  SearchSpace plain;
  plain.world = 64;
  ASSERT_TRUE(apply_search_fix("recompute_modules=mla_up_proj+mlp,pp=8,ep=8", &plain).is_ok());
  auto refused = search_layouts(eval, plain);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("--framework megatron-core"), std::string::npos)
      << refused.status().message();
  SearchSpace sp = plain;
  apply_framework(mc, &sp);
  const std::vector<Layout> layouts = enumerate_layouts(eval, sp);
  ASSERT_FALSE(layouts.empty());
  for (const Layout& x : layouts) {
    EXPECT_EQ(x.recompute, Recompute::kSelective) << x.to_string();
    EXPECT_EQ(x.recompute_modules, l.recompute_modules) << x.to_string();
  }
  // Megatron's flag; the other dialects refuse.
  auto r = simulate_layout(eval, l);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Plan p = make_plan(eval, *r, 64);
  auto args = export_plan(p, "megatron");
  ASSERT_TRUE(args.is_ok()) << args.status().to_string();
  EXPECT_NE(args->find("--recompute-granularity selective\n--recompute-modules mla_up_proj mlp\n"), std::string::npos)
      << *args;
  auto toml = export_plan(p, "torchtitan");
  ASSERT_FALSE(toml.is_ok());
  EXPECT_NE(toml.status().message().find("--export megatron"), std::string::npos) << toml.status().message();
}

// Under megatron-core the search adds, to each selective layout of a MoE or
// MLA model, the same with the cheap modules that apply (the norms, MLA's
// up-projections, the experts' activation); a dense model without MLA gets
// none. On DeepSeek-V3's published layout (2048 H800s, PP16, EP64, DP128,
// the report's dispatch) the search then picks what the report says DeepSeek
// recomputes (section 3.2.3: RMSNorm and the MLA up-projections; 3.3.2: the
// SwiGLU output): no other recompute setting fits faster.
TEST(RecomputeModules, TheSearchTriesTheCheapModules) {
  const Framework mc = framework("megatron-core");
  SimOptions opt;
  apply_framework(mc, &opt);
  opt.ep_comm_overlap = opt.moe_dedup_dispatch = opt.moe_fp8_dispatch = true;
  TrainSpec t;
  t.global_batch = 15360;
  t.seq_len = 4096;
  t.precision = Precision::kFp8;
  Evaluator ds(testing::load_model_or_die("deepseek-v3"), testing::load_hw_or_die("dgx-h800"), t, opt);
  SearchSpace sp;
  sp.world = 2048;
  apply_framework(mc, &sp);
  ASSERT_TRUE(apply_search_fix("tp=1,pp=16,ep=64,dp=128,zero=1", &sp).is_ok());
  const unsigned cheap = kRecomputeLayernorm | kRecomputeMlaUpProj | kRecomputeMoeAct;
  int with = 0, without = 0;
  for (const Layout& l : enumerate_layouts(ds, sp)) {
    if (l.recompute != Recompute::kSelective) continue;
    ++(l.recompute_modules == cheap ? with : without);
    EXPECT_TRUE(l.recompute_modules == 0 || l.recompute_modules == cheap) << l.to_string();
  }
  EXPECT_GT(with, 0);
  EXPECT_EQ(with, without);
  // Layouts that differ only in their modules are told apart by the closed
  // form's per-thread cache: each in turn gives what it gives first.
  const Layout plain = L("dp=128,tp=1,pp=16,ep=64,zero=1,recompute=selective");
  Layout cheap_l = plain;
  cheap_l.recompute_modules = cheap;
  auto first = [&](const Layout& x) {
    Evaluator fresh(testing::load_model_or_die("deepseek-v3"), testing::load_hw_or_die("dgx-h800"), t, opt);
    return fresh.estimate(x).time.step_time_s;
  };
  const double plain_first = first(plain), cheap_first = first(cheap_l);
  EXPECT_NE(plain_first, cheap_first);
  EXPECT_EQ(ds.estimate(cheap_l).time.step_time_s, cheap_first);
  EXPECT_EQ(ds.estimate(plain).time.step_time_s, plain_first);
  auto best = search_layouts(ds, sp);
  ASSERT_TRUE(best.is_ok()) << best.status().to_string();
  ASSERT_FALSE(best->refined.empty());
  const Layout& chosen = best->refined.front().layout;
  EXPECT_EQ(chosen.recompute, Recompute::kSelective) << chosen.to_string();
  EXPECT_EQ(chosen.recompute_modules, cheap) << chosen.to_string();
  // A dense model without MLA: nothing applies, nothing is added.
  TrainSpec t8 = t;
  t8.global_batch = 64;
  Evaluator llama(testing::load_model_or_die("llama-3-8b"), testing::load_hw_or_die("dgx-h100"), t8, opt);
  SearchSpace dense;
  dense.world = 8;
  apply_framework(mc, &dense);
  for (const Layout& l : enumerate_layouts(llama, dense)) EXPECT_EQ(l.recompute_modules, 0u) << l.to_string();
}

}  // namespace
}  // namespace loom
