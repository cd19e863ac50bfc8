// Context parallelism in the simulator against independent truths: the work
// of a layer is conserved across the CP group (cp ranks x their share = one
// rank's whole), the ring sends what the algorithm sends (K/V forward cp-1
// times; K/V cp-1 and dK/dV cp times backward), activations split over the
// group, the gradient group spans DP x CP, and the search honours cp.
#include <gtest/gtest.h>

#include "core/layout.h"
#include "sim/compute_model.h"
#include "sim/evaluate.h"
#include "sim/memory_model.h"
#include "sim/search.h"
#include "sim/simulate.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

Layout with_cp(int cp, Recompute rc = Recompute::kNone) {
  Layout l;
  l.cp = cp;
  l.recompute = rc;
  return l;
}

double total(const LinkBytes& b) {
  double s = 0;
  for (double x : b.bytes) s += x;
  return s;
}

TEST(ContextParallelModel, LayerWorkIsSharedOverTheGroup) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  SimOptions opt;
  const int64_t seq = 16384;
  const PieceCost one = layer_cost(m, hw, opt, Precision::kBf16, compute_shape(with_cp(1), seq, hw), false);
  for (int cp : {2, 4, 8}) {
    const PieceCost c = layer_cost(m, hw, opt, Precision::kBf16, compute_shape(with_cp(cp), seq, hw), false);
    EXPECT_NEAR(c.fwd_flops * cp / one.fwd_flops, 1.0, 1e-9) << "cp=" << cp;
    EXPECT_NEAR(c.bwd_flops * cp / one.bwd_flops, 1.0, 1e-9) << "cp=" << cp;
    // Less work per rank, some of the ring exposed: faster, not cp times.
    EXPECT_LT(c.fwd_s, one.fwd_s) << "cp=" << cp;
    EXPECT_GT(c.fwd_s * cp, one.fwd_s * 0.99) << "cp=" << cp;
  }
}

TEST(ContextParallelModel, TheRingSendsWhatTheAlgorithmSends) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ModelSpec m = testing::load_model_or_die("llama-3-8b");  // 8 KV heads of 128
  SimOptions opt;
  const int64_t seq = 8192;
  const int cp = 4;
  // This rank's K and V: seq/cp tokens, 8 KV heads x 128 for K and for V, bf16.
  const double kv = double(seq / cp) * m.num_kv_heads * 2 * m.head_dim * 2;
  const PieceCost c = layer_cost(m, hw, opt, Precision::kBf16, compute_shape(with_cp(cp), seq, hw), false);
  EXPECT_EQ(c.cp_calls, 3 * cp - 2);  // forward cp-1, backward (cp-1) + cp
  EXPECT_NEAR(total(c.cp_bytes) / (kv * (3 * cp - 2)), 1.0, 1e-9);
  EXPECT_GT(c.bwd_cp_s, 0);  // the last dK/dV goes home with nothing to hide behind
  // A recomputed forward runs its ring again.
  const PieceCost r =
      layer_cost(m, hw, opt, Precision::kBf16, compute_shape(with_cp(cp, Recompute::kSelective), seq, hw), false);
  EXPECT_EQ(r.cp_calls, 3 * cp - 2 + cp - 1);
  EXPECT_NEAR(total(r.cp_bytes) / (kv * (4 * cp - 3)), 1.0, 1e-9);
  // No ring without CP.
  const PieceCost none = layer_cost(m, hw, opt, Precision::kBf16, compute_shape(with_cp(1), seq, hw), false);
  EXPECT_EQ(none.cp_calls, 0);
  EXPECT_EQ(total(none.cp_bytes), 0);
}

TEST(ContextParallelModel, ActivationsSplitOverTheGroup) {
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  TrainSpec t;
  t.seq_len = 8192;
  t.global_batch = 64;
  SimOptions opt;
  const ActivationTerms one = activation_terms(m, with_cp(1), t, opt);
  const ActivationTerms two = activation_terms(m, with_cp(2), t, opt);
  EXPECT_NEAR(two.dense * 2 / one.dense, 1.0, 1e-9);
  EXPECT_NEAR(two.checkpoint * 2 / one.checkpoint, 1.0, 1e-9);
}

TEST(ContextParallelModel, GradientsSumOverDpTimesCp) {
  Layout l;
  l.dp = 2;
  l.cp = 2;
  l.tp = 2;
  // tp-cp-ep-dp-pp: rank 0's DP x CP group is {0, 2, 4, 6}; 4 devices a node.
  const GroupShape g = gradient_group_shape(l, 4);
  EXPECT_EQ(g.ranks, 4);
  EXPECT_EQ(g.nodes, 2);
  EXPECT_EQ(g.ranks_per_node, 2);
  // dp-major order: {0, 4, 2, 6} -> the same nodes.
  l.rank_order = "tp-dp-cp-pp";
  const GroupShape h = gradient_group_shape(l, 4);
  EXPECT_EQ(h.nodes, 2);
  l.cp = 1;
  l.rank_order = Layout{}.rank_order;
  const GroupShape d = gradient_group_shape(l, 4), e = group_shape(l, Dim::kDp, 4);
  EXPECT_EQ(d.ranks, e.ranks);
  EXPECT_EQ(d.nodes, e.nodes);
}

Evaluator eval_for(const std::string& model, int64_t batch, int64_t seq) {
  TrainSpec t;
  t.global_batch = batch;
  t.seq_len = seq;
  return Evaluator(testing::load_model_or_die(model), testing::load_hw_or_die("dgx-h100"), t, SimOptions{});
}

TEST(ContextParallelModel, TheSearchTriesCpAndHonoursItsPin) {
  Evaluator eval = eval_for("llama-3-8b", 64, 2048);
  SearchSpace sp;
  sp.world = 16;
  int max_cp = 0;
  for (const Layout& l : enumerate_layouts(eval, sp)) {
    EXPECT_EQ(l.world(), 16) << l.to_string();
    max_cp = std::max(max_cp, l.cp);
  }
  // 2048 tokens: chunks of at least 512 allow cp = 2, not 4.
  EXPECT_EQ(max_cp, 2);
  sp.fix_cp = 4;
  const auto pinned = enumerate_layouts(eval, sp);
  ASSERT_FALSE(pinned.empty());
  for (const Layout& l : pinned) EXPECT_EQ(l.cp, 4);
  // Every figure stays physical: executed FLOPs count the CP ranks.
  auto res = search_layouts(eval, sp);
  ASSERT_TRUE(res.is_ok()) << res.status().to_string();
  for (const Candidate& c : res->ranked) EXPECT_LT(c.estimate.figures.mfu, 1.0) << c.layout.to_string();
}

TEST(ContextParallelModel, ALongSequenceThatOnlyFitsWithCp) {
  // 8B at 128K tokens on one node: without CP a sequence's activations
  // outgrow a GPU even recomputed (at 64K, full recompute with tp=2 still
  // fits beside Loom's executor's 16 bytes of state per parameter); the
  // search's best layout splits it.
  Evaluator eval = eval_for("llama-3-8b", 8, 131072);
  SearchSpace sp;
  sp.world = 8;
  auto res = search_layouts(eval, sp);
  ASSERT_TRUE(res.is_ok()) << res.status().to_string();
  ASSERT_FALSE(res->refined.empty());
  EXPECT_GT(res->refined[0].layout.cp, 1) << res->refined[0].layout.to_string();
}

TEST(ContextParallelModel, AnEstimateDoesNotDependOnWhatWasEstimatedBefore) {
  // The closed form reuses per-thread buffers (stage costs, pieces); a field
  // left over from the previous layout (a cross-node CP ring's exposed time
  // once was) would change the ranking silently. Each estimate, taken after
  // every other layout in one order and then in the reverse order, must be
  // the same bit for bit, and equal to simulate_layout's closed form.
  Evaluator eval = eval_for("llama-3.1-405b", 2048, 8192);
  std::vector<Layout> ls;
  for (const char* text : {"dp=64,tp=4,pp=16,cp=4,zero=1,micro=1,schedule=interleaved,v=4,sp=1,recompute=selective",
                           "dp=256,tp=2,pp=8,cp=4,zero=2,micro=1,schedule=interleaved,v=8,sp=1,recompute=full",
                           "dp=32,tp=8,pp=16,cp=4,zero=1,micro=1,schedule=1f1b,sp=1,recompute=full",
                           "dp=1024,tp=8,pp=2,zero=3,micro=1,sp=1,recompute=full"})
    ls.push_back(parse_layout(text).value());
  std::vector<double> forward, backward(ls.size());
  for (const Layout& l : ls) forward.push_back(eval.estimate(l).figures.step_time_s);
  for (size_t i = ls.size(); i-- > 0;) backward[i] = eval.estimate(ls[i]).figures.step_time_s;
  for (size_t i = 0; i < ls.size(); ++i) {
    EXPECT_EQ(forward[i], backward[i]) << ls[i].to_string();
    auto sim = simulate_layout(eval, ls[i]);
    ASSERT_TRUE(sim.is_ok()) << sim.status().to_string();
    EXPECT_EQ(sim->closed_form.figures.step_time_s, forward[i]) << ls[i].to_string();
  }
}

TEST(ContextParallelModel, ASequenceThatDoesNotCutIntoChunksIsRefused) {
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  TrainSpec t;
  t.seq_len = 4100;  // not a multiple of 2 * 4
  Layout l;
  l.cp = 4;
  Status s = validate_layout(l, m, t, 4);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("8 chunks"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("seq_len=4100"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace loom
