// Layout parsing, validation messages, and rank groups from the rank order.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/layout.h"
#include "core/stage_split.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

using testing::gpt_block_model;
using testing::load_model_or_die;

TrainSpec train(int64_t batch = 64, int64_t seq = 1024) {
  TrainSpec t;
  t.global_batch = batch;
  t.seq_len = seq;
  return t;
}

TEST(Layout, ParseAndPrintRoundTrip) {
  auto l = parse_layout("dp=2,tp=4,pp=2,zero=1,micro=2,schedule=interleaved,v=4,sp=1,recompute=selective");
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l->dp, 2);
  EXPECT_EQ(l->tp, 4);
  EXPECT_EQ(l->virtual_stages, 4);
  EXPECT_EQ(l->schedule, Schedule::kInterleaved);
  EXPECT_EQ(l->recompute, Recompute::kSelective);
  auto again = parse_layout(l->to_string());
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(*again, *l);
  // Keys left out keep their defaults.
  auto d = parse_layout("tp=2");
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->dp, 1);
  EXPECT_EQ(d->schedule, Schedule::k1F1B);
}

// Pinned first and last chunks (Megatron's --decoder-first/last-pipeline-
// num-layers). Llama 3 405B trained its 126 layers on PP16 with one layer
// fewer on the first and the last stage (Llama 3 report, section 3.3.2):
// first=7, last=7 leaves 112 for the 14 middle stages, 8 each, as a 128-layer
// model would have everywhere.
// DualPipeV: v = 2 implied, printed and parsed back; the V placement puts
// the first and the last global chunk on stage 0.
TEST(Layout, DualPipeVPlacesItsTwoChunksAsAV) {
  auto l = parse_layout("dp=2,pp=4,schedule=dualpipev,zero=1");
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l->schedule, Schedule::kDualPipeV);
  EXPECT_EQ(l->virtual_stages, 2);
  auto back = parse_layout(l->to_string());
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(*back, *l);
  EXPECT_EQ(l->head_stage(), 0);
  const int expect[4][2] = {{0, 7}, {1, 6}, {2, 5}, {3, 4}};
  for (int s = 0; s < 4; ++s)
    for (int c = 0; c < 2; ++c) EXPECT_EQ(l->global_chunk(s, c), expect[s][c]) << s << "," << c;
  // Llama-3-8B's 32 layers over 8 chunks of 4: stage 0 runs layers 0-3 and 28-31.
  ModelSpec m = load_model_or_die("llama-3-8b");
  const StageSplit split = split_layers(m, *l);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(split.stage_layers(s), 8);
  EXPECT_EQ(split.chunk_first_layer[size_t(split.global(0, 1))], 28);
  EXPECT_EQ(parse_layout("dp=2,pp=4,schedule=interleaved,v=2")->head_stage(), 3);
}

TEST(Layout, PinnedFirstAndLastChunks) {
  auto l = parse_layout("dp=8,tp=8,pp=16,first=7,last=7");
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l->first_stage_layers, 7);
  EXPECT_EQ(l->last_stage_layers, 7);
  EXPECT_EQ(*parse_layout(l->to_string()), *l);
  EXPECT_EQ(parse_layout("pp=2")->to_string().find("first"), std::string::npos) << "even splits print as before";
  ModelSpec m = load_model_or_die("llama-3.1-405b");
  ASSERT_EQ(m.num_layers, 126);
  const StageSplit s = split_layers(m, *l);
  EXPECT_EQ(s.chunk_layers.front(), 7);
  EXPECT_EQ(s.chunk_layers.back(), 7);
  for (int g = 1; g + 1 < 16; ++g) EXPECT_EQ(s.chunk_layers[size_t(g)], 8) << "stage " << g;
  EXPECT_EQ(s.chunk_first_layer.back(), 119);
  // Only the last pinned: the other 15 share 125, the extra ones on the middle stages first.
  Layout last_only = *l;
  last_only.first_stage_layers = 0;
  last_only.last_stage_layers = 5;
  const StageSplit t = split_layers(m, last_only);
  EXPECT_EQ(t.chunk_layers.back(), 5);
  EXPECT_EQ(t.chunk_layers.front(), 8);  // 125 = 15 x 8 + 5: chunks 1-5 get 9
  EXPECT_EQ(t.chunk_layers[1], 9);
  EXPECT_EQ(t.chunk_layers[6], 8);
  int total = 0;
  for (int n : t.chunk_layers) total += n;
  EXPECT_EQ(total, 126);

  TrainSpec tr = train(1024, 4096);
  EXPECT_TRUE(validate_layout(*l, m, tr, 1024).is_ok());
  Layout bad = *l;
  bad.first_stage_layers = 60;
  bad.last_stage_layers = 60;  // 6 layers left for 14 chunks
  Status st = validate_layout(bad, m, tr, 1024);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("need at least one each"), std::string::npos) << st.message();
  Layout no_pipe;
  no_pipe.dp = 8;
  no_pipe.last_stage_layers = 3;
  st = validate_layout(no_pipe, m, tr, 8);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("need pp >= 2"), std::string::npos) << st.message();
}

// The stage totals split_layers keeps (the closed form reads them per stage
// of every layout) are the chunks' sums under the split's placement, for
// every schedule and pinned ends, on a model whose MoE layers are not all
// of them; a split re-placed afterwards sums its chunks again.
TEST(Layout, StageTotalsAreTheSumsOfTheStagesChunks) {
  ModelSpec m = load_model_or_die("deepseek-v3");  // 61 layers, the first 3 dense
  ASSERT_GT(m.num_layers - m.num_moe_layers(), 0);
  int cases = 0;
  for (const char* text : {"dp=1,pp=4", "dp=1,pp=4,schedule=gpipe", "dp=1,pp=4,schedule=interleaved,v=3",
                           "dp=1,pp=8,schedule=interleaved,v=2,first=1,last=2", "dp=1,pp=4,schedule=dualpipev",
                           "dp=1,pp=8,schedule=dualpipev,first=2,last=3", "dp=1,pp=1"}) {
    auto l = parse_layout(text);
    ASSERT_TRUE(l.is_ok()) << text << ": " << l.status().to_string();
    const StageSplit split = split_layers(m, *l);
    int all = 0, all_moe = 0;
    for (int s = 0; s < l->pp; ++s) {
      int layers = 0, moe = 0;
      for (int c = 0; c < l->virtual_stages; ++c) {
        const size_t g = size_t(l->global_chunk(s, c));
        layers += split.chunk_layers[g];
        moe += split.chunk_moe_layers[g];
      }
      EXPECT_EQ(split.stage_layers(s), layers) << text << " stage " << s;
      EXPECT_EQ(split.stage_moe_layers(s), moe) << text << " stage " << s;
      all += layers;
      all_moe += moe;
      ++cases;
    }
    EXPECT_EQ(all, m.num_layers) << text;
    EXPECT_EQ(all_moe, m.num_moe_layers()) << text;
  }
  EXPECT_EQ(cases, 1 + 4 + 4 + 4 + 8 + 4 + 8);
  // Placed as a V after the split was made: stage 0 holds chunks 0 and 7.
  StageSplit vee = split_layers(m, 4, 2);
  vee.schedule = Schedule::kDualPipeV;
  EXPECT_EQ(vee.stage_layers(0), vee.chunk_layers[0] + vee.chunk_layers[7]);
  EXPECT_EQ(vee.stage_moe_layers(0), vee.chunk_moe_layers[0] + vee.chunk_moe_layers[7]);
}

TEST(Layout, ParseErrorsNameTheKey) {
  for (const char* bad : {"tp=x", "tp=-2", "foo=1", "schedule=zigzag", "recompute=some", "tp", "sp=2",
                          "order=tp-dp-qq"}) {
    auto l = parse_layout(bad);
    ASSERT_FALSE(l.is_ok()) << bad;
    EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(l.status().message().find("layout"), std::string::npos) << l.status().message();
  }
}

TEST(Layout, AKeyGivenTwiceIsRefusedNotOverridden) {
  for (const char* bad : {"dp=2,tp=2,dp=4", "micro=2,mbs=4", "v=2,virtual_stages=3", "sp=1,sp=0"}) {
    auto l = parse_layout(bad);
    ASSERT_FALSE(l.is_ok()) << bad;
    EXPECT_NE(l.status().message().find("given twice"), std::string::npos) << l.status().message();
  }
  EXPECT_TRUE(parse_layout("dp=2,tp=2,,pp=2").is_ok());
}

struct BadCase {
  const char* layout;
  int world;
  const char* must_mention;
};

TEST(Layout, ValidateRejectsImpossibleLayoutsWithAFix) {
  ModelSpec m = load_model_or_die("llama-3-8b");  // 32 heads, 8 KV heads, 32 layers
  const BadCase cases[] = {
      {"dp=1,tp=3", 3, "tp=3 does not divide num_attention_heads=32"},
      {"dp=1,tp=16", 16, "num_key_value_heads=8"},
      {"dp=1,pp=33", 33, "pp=33"},
      {"dp=4,tp=2", 16, "but the run has 16 ranks"},
      {"dp=3", 3, "not divisible by dp*micro"},
      {"dp=2,ep=2", 2, "has no experts"},
      {"dp=1,pp=2,v=2", 2, "needs schedule=interleaved"},
      {"dp=1,pp=1,schedule=interleaved,v=2", 1, "needs pp >= 2"},
      {"dp=1,zero=4", 1, "zero=4"},
      {"dp=1,sp=1", 1, "needs tp > 1"},
      {"dp=1,pp=16,schedule=interleaved,v=4", 16, "chunks but only 32 layers"},
      {"dp=2,micro=0", 2, "micro=0 must be >= 1"},
      {"dp=1,pp=4,schedule=dualpipev,v=3", 4, "two model chunks on each stage (v=2)"},
      {"dp=1,schedule=dualpipev", 1, "dualpipev needs pp >= 2"},
      {"dp=1,pp=32,schedule=dualpipev", 32, "64 chunks but the model has only 32 layers"},
  };
  for (const BadCase& c : cases) {
    auto l = parse_layout(c.layout);
    ASSERT_TRUE(l.is_ok()) << c.layout;
    Status s = validate_layout(*l, m, train(), c.world);
    ASSERT_FALSE(s.is_ok()) << c.layout;
    EXPECT_NE(s.message().find(c.must_mention), std::string::npos) << c.layout << " -> " << s.message();
  }
  // Interleaving needs m % pp == 0: 64 / (2 * 1) = 32 micro-batches, pp = 3 does not divide.
  ModelSpec m30 = gpt_block_model(1024, 16, 30);
  auto l = parse_layout("dp=2,pp=3,schedule=interleaved,v=2");
  Status s = validate_layout(*l, m30, train(64), 6);
  EXPECT_NE(s.message().find("multiple of pp=3"), std::string::npos) << s.message();
  // DualPipeV needs 2*pp micro-batches (deepseek-ai/DualPipe asserts it):
  // 64 / (2 * 8) = 4 < 2 * 4.
  auto few = parse_layout("dp=2,pp=4,micro=8,schedule=dualpipev");
  s = validate_layout(*few, m, train(64), 8);
  EXPECT_NE(s.message().find("at least 2*pp = 8 micro-batches"), std::string::npos) << s.message();
  // A good layout passes.
  auto good = parse_layout("dp=2,tp=4,pp=2,zero=1,micro=2,schedule=interleaved,v=2,sp=1");
  EXPECT_TRUE(validate_layout(*good, m, train(), 16).is_ok()) << validate_layout(*good, m, train(), 16).to_string();
}

TEST(Layout, ExpertParallelMustDivideDpAndExperts) {
  ModelSpec m = load_model_or_die("mixtral-8x7b");  // 8 experts
  auto l = parse_layout("dp=4,ep=3");
  EXPECT_NE(validate_layout(*l, m, train(), 4).message().find("ep=3 must divide dp=4"), std::string::npos);
  l = parse_layout("dp=16,ep=16");
  EXPECT_NE(validate_layout(*l, m, train(), 16).message().find("num_experts=8"), std::string::npos);
  l = parse_layout("dp=16,ep=8");
  EXPECT_TRUE(validate_layout(*l, m, train(), 16).is_ok());
}

TEST(RankGrid, DefaultOrderPutsTpFastest) {
  auto l = parse_layout("dp=2,tp=4,pp=2");
  RankGrid g(*l);
  EXPECT_EQ(g.world(), 16);
  EXPECT_EQ(g.group(Dim::kTp, 5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(g.group(Dim::kDp, 1), (std::vector<int>{1, 5}));
  EXPECT_EQ(g.group(Dim::kPp, 1), (std::vector<int>{1, 9}));
  RankCoords c = g.coords(13);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(g.rank_of(c), 13);
}

TEST(RankGrid, EveryDimensionPartitionsTheWorld) {
  for (const char* text : {"dp=4,tp=2,pp=2,ep=2", "dp=8,tp=1,pp=2,ep=4,order=dp-tp-pp", "dp=2,tp=2,pp=3,order=pp-dp-tp"}) {
    auto l = parse_layout(text);
    ASSERT_TRUE(l.is_ok()) << text;
    RankGrid g(*l);
    for (Dim d : {Dim::kDp, Dim::kTp, Dim::kPp, Dim::kEp}) {
      std::set<int> seen;
      for (int r = 0; r < g.world(); ++r) {
        auto grp = g.group(d, r);
        EXPECT_EQ(int(grp.size()), l->size(d)) << text << " " << dim_name(d);
        EXPECT_NE(std::find(grp.begin(), grp.end(), r), grp.end()) << "rank in its own group";
        for (int x : grp) EXPECT_EQ(g.group(d, x), grp) << "groups are equivalence classes";
        seen.insert(r);
      }
      EXPECT_EQ(int(seen.size()), g.world());
    }
    for (int r = 0; r < g.world(); ++r) EXPECT_EQ(g.rank_of(g.coords(r)), r) << text;
  }
}

TEST(RankGrid, ExpertGroupsLiveInsideDpGroups) {
  auto l = parse_layout("dp=8,ep=4");
  RankGrid g(*l);
  auto ep = g.group(Dim::kEp, 5);
  auto dp = g.group(Dim::kDp, 5);
  for (int r : ep) EXPECT_NE(std::find(dp.begin(), dp.end(), r), dp.end());
  EXPECT_EQ(ep, (std::vector<int>{4, 5, 6, 7}));
}

TEST(GroupShape, PlacementOnNodes) {
  auto l = parse_layout("dp=4,tp=8,pp=2");  // 64 ranks, 8 per node
  GroupShape tp = group_shape(*l, Dim::kTp, 8);
  EXPECT_EQ(tp.nodes, 1);
  EXPECT_EQ(tp.ranks_per_node, 8);
  GroupShape dp = group_shape(*l, Dim::kDp, 8);
  EXPECT_EQ(dp.nodes, 4);
  EXPECT_EQ(dp.ranks_per_node, 1);
  auto l2 = parse_layout("dp=16,tp=2,pp=2");
  GroupShape dp2 = group_shape(*l2, Dim::kDp, 8);
  EXPECT_EQ(dp2.ranks, 16);
  EXPECT_EQ(dp2.nodes, 4);
  EXPECT_EQ(dp2.ranks_per_node, 4);
}

}  // namespace
}  // namespace loom
