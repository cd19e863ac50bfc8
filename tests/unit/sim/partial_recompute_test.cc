// Partial full recompute (Layout::recompute_layers): Megatron's
// --recompute-method block --recompute-num-layers N, which checkpoints the
// first N layers of each model chunk and keeps the others' activations
// (megatron/core/transformer/transformer_block.py _checkpointed_forward, a
// loop over the chunk's own layers). Checked against what that rule implies by
// hand: the recomputed layers of each chunk, the stage's recompute time and
// activations as N parts of the full-recompute ones and L - N parts of the
// no-recompute ones, and the search's choice against a brute force over N.
#include <gtest/gtest.h>

#include "core/layout.h"
#include "core/plan.h"
#include "core/stage_split.h"
#include "sim/evaluate.h"
#include "sim/export.h"
#include "sim/framework.h"
#include "sim/memory_model.h"
#include "sim/search.h"
#include "sim/simulate.h"
#include "tests/support/sim_test_support.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

Layout L(const std::string& text) { return testing::layout_or_die(text); }

TrainSpec train(int64_t batch, int64_t seq) {
  TrainSpec t;
  t.global_batch = batch;
  t.seq_len = seq;
  return t;
}

Framework framework(const char* name) { return testing::framework_or_die(name); }

SimOptions megatron() {
  SimOptions o;
  apply_framework(framework("megatron-core"), &o);
  return o;
}

// A model on DGX H100s with Megatron-core's options.
Evaluator megatron_eval(const char* model, int64_t batch, int64_t seq) {
  return Evaluator(testing::load_model_or_die(model), testing::load_hw_or_die("dgx-h100"), train(batch, seq),
                   megatron());
}

// A stack's search space over `world` GPUs with `fix` pinned.
SearchSpace space_of(const char* name, int world, const std::string& fix) {
  SearchSpace sp;
  sp.world = world;
  apply_framework(framework(name), &sp);
  const Status s = apply_search_fix(fix, &sp);
  LOOM_CHECK(s.is_ok(), s.to_string());
  return sp;
}

TEST(PartialRecompute, TheLayoutStatesItAndRefusesWhatMegatronCannot) {
  const ModelSpec m = testing::load_model_or_die("llama-3-8b");  // 32 layers
  const TrainSpec t = train(64, 4096);
  const Layout l = L("dp=4,pp=2,recompute=full,recompute_layers=5");
  EXPECT_EQ(l.recompute_layers, 5);
  EXPECT_EQ(parse_layout(l.to_string())->recompute_layers, 5);
  EXPECT_NE(l.to_string().find(",recompute_layers=5"), std::string::npos);
  EXPECT_EQ(L("dp=8").to_string().find("recompute_layers"), std::string::npos);  // one spelling of "all"
  EXPECT_TRUE(validate_layout(l, m, t, 8).is_ok());
  // Whole layers only under full recompute.
  Status s = validate_layout(L("dp=4,pp=2,recompute=selective,recompute_layers=5"), m, t, 8);
  EXPECT_NE(s.message().find("needs recompute=full"), std::string::npos) << s.message();
  // 16 layers a chunk: 16 is every layer (say recompute=full), 15 is partial.
  s = validate_layout(L("dp=4,pp=2,recompute=full,recompute_layers=16"), m, t, 8);
  EXPECT_NE(s.message().find("covers every layer of each model chunk (at most 16)"), std::string::npos) << s.message();
  EXPECT_TRUE(validate_layout(L("dp=4,pp=2,recompute=full,recompute_layers=15"), m, t, 8).is_ok());
  // The plan file carries it.
  Plan p;
  p.model = m;
  p.hw = testing::load_hw_or_die("dgx-h100");
  p.train = t;
  p.world_size = 8;
  p.layout = l;
  auto back = parse_plan(plan_to_json(p));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->layout.recompute_layers, 5);
}

TEST(PartialRecompute, EachChunkRecomputesItsFirstLayers) {
  // DeepSeek-V3: 61 layers, the first 3 dense. pp=4, v=2: 8 chunks of 7-8
  // layers; chunk 0 holds layers 0-6 (three dense), so N = 4 recomputes 3
  // dense and 1 MoE there, and 4 MoE layers in every other chunk.
  const ModelSpec m = testing::load_model_or_die("deepseek-v3");
  const Layout l = L("dp=8,pp=4,ep=8,schedule=interleaved,v=2,recompute=full,recompute_layers=4");
  const StageSplit split = split_layers(m, l);
  ASSERT_EQ(split.chunk_first_layer[0], 0);
  ASSERT_GE(split.chunk_layers[0], 4);
  const RecomputedLayers c0 = chunk_recomputed_layers(m, l, split, 0);
  EXPECT_EQ(c0.dense, 3);
  EXPECT_EQ(c0.moe, 1);
  for (int g = 1; g < 8; ++g) {
    const RecomputedLayers c = chunk_recomputed_layers(m, l, split, g);
    EXPECT_EQ(c.dense, 0) << g;
    EXPECT_EQ(c.moe, 4) << g;
  }
  // Stage 0 holds chunks 0 and 4.
  const RecomputedLayers s0 = stage_recomputed_layers(m, l, split, 0);
  EXPECT_EQ(s0.dense, 3);
  EXPECT_EQ(s0.moe, 5);
  // A chunk shorter than N recomputes all its layers; recompute=full alone, all.
  Layout all = l;
  all.recompute_layers = 0;
  EXPECT_EQ(stage_recomputed_layers(m, all, split, 0).total(), split.stage_layers(0));
  Layout none = l;
  none.recompute = Recompute::kNone;
  none.recompute_layers = 0;
  EXPECT_EQ(stage_recomputed_layers(m, none, split, 0).total(), 0);
}

TEST(PartialRecompute, TimeAndMemoryAreThatShareOfFullAndNone) {
  // Llama-3-8B on pp=2, 16 layers a stage, as Megatron-core runs it: the
  // stage's recompute time is N/16 of full recompute's; its activations are N
  // layer inputs and 16 - N whole layers (the no-recompute ones) per
  // micro-batch in flight, plus the one layer re-materialized in backward.
  const Evaluator eval = megatron_eval("llama-3-8b", 64, 4096);
  const ModelSpec& m = eval.model();
  const TrainSpec& t = eval.train();
  const SimOptions& opt = eval.options();
  const Layout full = L("dp=4,pp=2,zero=1,recompute=full");
  const Layout none = L("dp=4,pp=2,zero=1");
  const StageCosts f = eval.stage_costs(full)[0], n = eval.stage_costs(none)[0];
  ASSERT_GT(f.recompute_s, 0);
  EXPECT_DOUBLE_EQ(n.recompute_s, 0);
  const StageSplit split = split_layers(m, full);
  const ActivationTerms act_full = activation_terms(m, full, t, opt), act_none = activation_terms(m, none, t, opt);
  const int64_t in_flight = in_flight_micro_batches(full, full.num_micro_batches(t.global_batch), 0);
  ASSERT_EQ(in_flight, 2);
  double last_time = 0, last_mem = 1e300;
  for (int k : {1, 5, 15}) {
    Layout p = full;
    p.recompute_layers = k;
    SCOPED_TRACE(p.to_string());
    const StageCosts c = eval.stage_costs(p)[0];
    EXPECT_NEAR(c.recompute_s, f.recompute_s * k / 16, 1e-12);
    EXPECT_NEAR(c.fwd_s, f.fwd_s, 1e-12);
    EXPECT_NEAR(c.bwd_s, f.bwd_s, 1e-12);
    const double acts = stage_memory(m, p, t, opt, split, 0).activations_bytes;
    const double hand = in_flight * (k * act_full.checkpoint + (16 - k) * act_none.dense) + act_full.dense;
    const double fixed = stage_memory(m, none, t, opt, split, 0).activations_bytes - in_flight * 16 * act_none.dense;
    EXPECT_NEAR(acts, hand + fixed, 1.0);
    // More recompute: slower, smaller.
    const Estimate e = eval.estimate(p);
    EXPECT_GT(e.figures.step_time_s, last_time);
    EXPECT_LT(e.peak_memory_bytes, last_mem);
    last_time = e.figures.step_time_s;
    last_mem = e.peak_memory_bytes;
  }
  EXPECT_LT(last_time, eval.estimate(full).figures.step_time_s);
  EXPECT_GT(last_mem, eval.estimate(full).peak_memory_bytes);
  // The closed form and the event engine agree on it.
  Layout p = full;
  p.recompute_layers = 5;
  auto r = simulate_layout(eval, p);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_NEAR(r->closed_form.time.step_time_s / r->time.step_time_s, 1.0, 0.10);
}

TEST(PartialRecompute, TheSearchFindsTheFewestRecomputedLayersThatFit) {
  // Llama 3.1 405B on 8192 H100s as Meta laid it out (tp 8, pp 16, dp 64):
  // nothing fits without recompute, so Megatron-core's search takes the
  // fewest recomputed layers a chunk that fit. Brute force over N: that N
  // fits and N - 1 does not, and it is faster than recomputing every layer.
  const Evaluator eval = megatron_eval("llama-3.1-405b", 2048, 8192);
  const SearchSpace sp = space_of("megatron-core", 8192, "tp=8,pp=16,dp=64,sp=1,zero=1,micro=1,schedule=1f1b,split=even");
  ASSERT_TRUE(sp.partial_recompute);
  auto res = search_layouts(eval, sp);
  ASSERT_TRUE(res.is_ok()) << res.status().to_string();
  ASSERT_FALSE(res->ranked.empty());
  const Layout best = res->ranked.front().layout;
  ASSERT_EQ(best.recompute, Recompute::kFull) << best.to_string();
  ASSERT_GT(best.recompute_layers, 0) << best.to_string();
  for (int k = 1; k < 8; ++k) {
    Layout x = best;
    x.recompute_layers = k;
    EXPECT_EQ(eval.estimate(x).fits, k >= best.recompute_layers) << x.to_string();
  }
  Layout none = best;
  none.recompute = Recompute::kNone;
  none.recompute_layers = 0;
  EXPECT_FALSE(eval.estimate(none).fits);
  Layout all = best;
  all.recompute_layers = 0;
  EXPECT_GT(res->ranked.front().estimate.figures.tokens_per_s, eval.estimate(all).figures.tokens_per_s);
  // torchtitan checkpoints whole blocks: not in its search, and refused pinned.
  SearchSpace tt = space_of("torchtitan", 8192, "tp=8,pp=16,dp=64,sp=1,zero=3,micro=1,schedule=1f1b,split=even");
  EXPECT_FALSE(tt.partial_recompute);
  auto theirs = search_layouts(eval, tt);
  ASSERT_TRUE(theirs.is_ok());
  for (const Candidate& c : theirs->ranked) EXPECT_EQ(c.layout.recompute_layers, 0) << c.layout.to_string();
  tt.fix_recompute_layers = 2;
  auto pinned = search_layouts(eval, tt);
  ASSERT_FALSE(pinned.is_ok());
  EXPECT_NE(pinned.status().message().find("recomputes every layer or none"), std::string::npos)
      << pinned.status().message();
}

TEST(PartialRecompute, MegatronAndLoomsExecutorRunItTheOthersRefuse) {
  const ModelSpec m = testing::load_model_or_die("llama-3-8b");
  const Layout l = L("dp=4,pp=2,recompute=full,recompute_layers=3");
  for (const char* name : {"megatron-core", "torchtitan", "deepspeed"}) {
    const Framework f = framework(name);
    const Status s = check_layout_for_stack(&f, m, l);
    EXPECT_EQ(s.is_ok(), std::string(name) == "megatron-core") << name << ": " << s.message();
  }
  EXPECT_TRUE(check_layout_for_stack(nullptr, m, l).is_ok());  // Loom's executor
  Plan p;
  p.model = m;
  p.train = train(64, 4096);
  p.layout = l;
  auto args = export_megatron_args(p);
  ASSERT_TRUE(args.is_ok()) << args.status().to_string();
  EXPECT_NE(args->find("--recompute-granularity full\n--recompute-method block\n--recompute-num-layers 3\n"),
            std::string::npos)
      << *args;
  for (const char* dialect : {"deepspeed", "torchtitan"}) {
    auto other = export_plan(p, dialect);
    EXPECT_EQ(other.status().code(), StatusCode::kUnsupported) << dialect;
  }
}

}  // namespace
}  // namespace loom
