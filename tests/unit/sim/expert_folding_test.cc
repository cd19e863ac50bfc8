// Megatron-Core's MoE parallel folding (etp=1: experts whole on every rank,
// the EP group over TP x DP) in the layout, the rank grid and the simulator,
// against independent truths: the same experts over the same ranks hold the
// same parameters and do the same work however they are folded, and a group's
// members sit where the rank order puts them.
#include <gtest/gtest.h>

#include "core/layout.h"
#include "core/plan.h"
#include "core/stage_split.h"
#include "sim/compute_model.h"
#include "sim/memory_model.h"
#include "sim/search.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

Layout folded(int dp, int tp, int ep) {
  Layout l;
  l.dp = dp;
  l.tp = tp;
  l.ep = ep;
  l.etp = 1;
  l.sequence_parallel = true;
  return l;
}

TEST(ExpertFolding, TheLayoutCheckAcceptsEpOverTpTimesDp) {
  const ModelSpec m = testing::load_model_or_die("mixtral-8x7b");  // 8 experts
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 4096;
  const Status ok = validate_layout(folded(2, 2, 4), m, t, 4);
  EXPECT_TRUE(ok.is_ok()) << ok.message();
  // Unfolded, ep=4 over dp=2 is refused, and the message offers folding.
  Layout plain = folded(2, 2, 4);
  plain.etp = 0;
  Status s = validate_layout(plain, m, t, 4);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("etp=1"), std::string::npos) << s.message();
  // Folding needs SP, an ep dividing tp*dp, a MoE model, etp of tp or 1.
  Layout no_sp = folded(2, 2, 4);
  no_sp.sequence_parallel = false;
  s = validate_layout(no_sp, m, t, 4);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("sp=1"), std::string::npos) << s.message();
  s = validate_layout(folded(2, 2, 8), m, t, 4);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("tp*dp=4"), std::string::npos) << s.message();
  s = validate_layout(folded(2, 2, 2), testing::load_model_or_die("llama-3-8b"), t, 4);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("no experts"), std::string::npos) << s.message();
  Layout odd = folded(1, 4, 2);
  odd.etp = 2;
  s = validate_layout(odd, m, t, 4);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("etp=2"), std::string::npos) << s.message();
}

TEST(ExpertFolding, TextAndPlanRoundTrip) {
  const Layout l = folded(2, 2, 4);
  EXPECT_NE(l.to_string().find(",etp=1"), std::string::npos) << l.to_string();
  auto back = parse_layout(l.to_string());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->etp, 1);
  EXPECT_TRUE(back->folded_experts());
  // etp equal to tp is the default, spelled one way (fuzz_layout's
  // reproducer "etp=6,tp=6" changed in a round trip).
  auto same = parse_layout("etp=6,tp=6");
  ASSERT_TRUE(same.is_ok());
  EXPECT_EQ(same->etp, 0);
  EXPECT_FALSE(same->folded_experts());
  EXPECT_EQ(*parse_layout(same->to_string()), *same);
  // An unfolded layout's text does not change.
  Layout plain;
  plain.tp = 2;
  EXPECT_EQ(plain.to_string().find("etp"), std::string::npos);
  EXPECT_NE(layout_to_json(l).find("\"expert_tensor_parallel\":1"), std::string::npos) << layout_to_json(l);
  EXPECT_EQ(layout_to_json(plain).find("expert_tensor_parallel"), std::string::npos);
}

TEST(ExpertFolding, GroupsSitWhereTheRankOrderPutsThem) {
  // tp=2, dp=2, ep=4: ranks 0..3 (tp fastest); the EP group is all four, the
  // expert-DP groups single ranks; with ep=2 the EP group is a TP pair and
  // rank 0's expert-DP group is {0, 2}.
  const Layout four = folded(2, 2, 4);
  RankGrid grid(four);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(grid.rank_of(grid.coords(r)), r);
  GroupShape ep = expert_group_shape(four, 2);
  EXPECT_EQ(ep.ranks, 4);
  EXPECT_EQ(ep.nodes, 2);
  EXPECT_EQ(expert_dp_group_shape(four, 2).ranks, 1);
  const Layout two = folded(2, 2, 2);
  ep = expert_group_shape(two, 2);
  EXPECT_EQ(ep.ranks, 2);
  EXPECT_EQ(ep.nodes, 1);
  const GroupShape edp = expert_dp_group_shape(two, 2);
  EXPECT_EQ(edp.ranks, 2);
  EXPECT_EQ(edp.nodes, 2);
  EXPECT_EQ(four.expert_fold_index(1, 1), 3);
}

TEST(ExpertFolding, TheSameExpertsOverTheSameRanksCostTheSame) {
  const ModelSpec m = testing::load_model_or_die("mixtral-8x7b");
  // 4 ranks: experts split over tp=2 and sharded over ep=2 (dp), or whole
  // and sharded over ep=4 (tp x dp): 2 experts' worth of weights per rank.
  Layout plain;
  plain.dp = 2;
  plain.tp = 2;
  plain.ep = 2;
  plain.sequence_parallel = true;
  const Layout fold = folded(2, 2, 4);
  const StageSplit split = split_layers(m, plain);
  EXPECT_NEAR(stage_params(m, fold, split, 0).expert / stage_params(m, plain, split, 0).expert, 1.0, 1e-12);
  EXPECT_NEAR(stage_params(m, fold, split, 0).dense / stage_params(m, plain, split, 0).dense, 1.0, 1e-12);
  // The same FLOPs on every rank: t times the tokens through 1/t of each expert, or the reverse.
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  SimOptions opt;
  const PieceCost a = layer_cost(m, hw, opt, Precision::kBf16, compute_shape(plain, 4096, hw), true);
  const PieceCost b = layer_cost(m, hw, opt, Precision::kBf16, compute_shape(fold, 4096, hw), true);
  EXPECT_NEAR(b.fwd_flops / a.fwd_flops, 1.0, 1e-9);
  EXPECT_GT(b.ep_calls, 0);
}

TEST(ExpertFolding, TheSearchTriesFoldedLayouts) {
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 4096;
  Evaluator eval(testing::load_model_or_die("mixtral-8x7b"), testing::load_hw_or_die("dgx-h100"), t, SimOptions{});
  SearchSpace sp;
  sp.world = 16;
  int folded_seen = 0;
  for (const Layout& l : enumerate_layouts(eval, sp)) {
    if (!l.folded_experts()) continue;
    ++folded_seen;
    EXPECT_TRUE(l.sequence_parallel) << l.to_string();
    EXPECT_EQ((l.tp * l.dp) % l.ep, 0) << l.to_string();
  }
  EXPECT_GT(folded_seen, 0);
  sp.fix_etp = 1;
  sp.fix_tp = 2;
  for (const Layout& l : enumerate_layouts(eval, sp)) EXPECT_TRUE(l.folded_experts()) << l.to_string();
}

}  // namespace
}  // namespace loom
