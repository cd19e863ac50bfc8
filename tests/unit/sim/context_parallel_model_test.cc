// Context parallelism in the simulator against independent truths: the work
// of a layer is conserved across the CP group (cp ranks x their share = one
// rank's whole), the ring sends what the algorithm sends (K/V forward cp-1
// times; K/V cp-1 and dK/dV cp times backward), activations split over the
// group, the gradient group spans DP x CP, and the search honours cp.
#include <gtest/gtest.h>

#include "core/layout.h"
#include "sim/compute_model.h"
#include "sim/evaluate.h"
#include "sim/framework.h"
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

// cp_comm=all_gather (Llama 3's; Transformer Engine's
// AttnFuncWithCPAndKVAllGather): forward all-gathers K and V, backward
// gathers them again and reduce-scatters dK and dV, nothing hidden. By hand
// for Llama-3-8B, seq 8192 over cp=4 ranks of one node (tp=1): each rank
// holds 2048 tokens x 8 KV heads x 128 of K (bf16: 4 MiB), the same of V;
// the gathered tensors are 4 times that. The attention work is the ring's.
TEST(ContextParallelModel, TheAllGatherSendsWhatTransformerEngineSends) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  SimOptions opt;
  const int64_t seq = 8192;
  const int cp = 4;
  Layout l = with_cp(cp);
  l.cp_comm = CpComm::kAllGather;
  const ComputeShape sh = compute_shape(l, seq, hw);
  ASSERT_EQ(sh.cp_comm, CpComm::kAllGather);
  const double k_gathered = 4.0 * 2048 * 8 * 128 * 2;  // bytes of the whole sequence's K (= V's)
  ASSERT_EQ(k_gathered, 16.0 * 1024 * 1024);
  const double ag = collective_cost(hw, Collective::kAllGather, sh.cp_group, k_gathered).time_s;
  const double rs = collective_cost(hw, Collective::kReduceScatter, sh.cp_group, k_gathered).time_s;
  const PieceCost c = layer_cost(m, hw, opt, Precision::kBf16, sh, false);
  EXPECT_EQ(c.cp_calls, 6);  // K, V gathered forward; again backward; dK, dV reduce-scattered
  EXPECT_NEAR(c.fwd_cp_s / (2 * ag), 1.0, 1e-12);  // exposed whole
  EXPECT_NEAR(c.bwd_cp_s / (2 * ag + 2 * rs), 1.0, 1e-12);
  // Each rank sends (cp-1)/cp of a gathered tensor per call, on NVLink here.
  EXPECT_NEAR(total(c.cp_bytes) / (6 * k_gathered * (cp - 1) / cp), 1.0, 1e-9);
  const PieceCost ring = layer_cost(m, hw, opt, Precision::kBf16, compute_shape(with_cp(cp), seq, hw), false);
  EXPECT_NEAR(c.fwd_flops / ring.fwd_flops, 1.0, 1e-12);
  EXPECT_NEAR(c.bwd_flops / ring.bwd_flops, 1.0, 1e-12);
  // Recompute of the attention core gathers K and V once more.
  Layout sel = l;
  sel.recompute = Recompute::kSelective;
  const PieceCost r = layer_cost(m, hw, opt, Precision::kBf16, compute_shape(sel, seq, hw), false);
  EXPECT_EQ(r.cp_calls, 8);
  EXPECT_NEAR(r.cp_comm_total_s - c.cp_comm_total_s, 2 * ag, 1e-12);
}

// cp_comm=a2a (DeepSpeed-Ulysses; TE's AttnFuncWithCPAndQKVOA2A): forward
// all-to-alls Q, K, V and the output back, backward dO and then dQ, dK, dV:
// eight calls, each sending (cp-1)/cp of a rank's tensor, all exposed. By
// hand for Llama-3-8B at seq 8192 over cp=4 (tp=1): a rank's 2048 tokens of
// Q are 2048 x 32 x 128 x 2 bytes = 16 MiB, of K and of V 4 MiB each, of
// the output 16 MiB. The attention is a whole sequence's for 8 of the 32
// heads: the same work as the ring's.
TEST(ContextParallelModel, TheHeadsExchangeSendsWhatTransformerEngineSends) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  SimOptions opt;
  opt.framework = "megatron-core";
  const int64_t seq = 8192;
  const int cp = 4;
  Layout l = with_cp(cp);
  l.cp_comm = CpComm::kA2a;
  const ComputeShape sh = compute_shape(l, seq, hw);
  const double mib = 1024.0 * 1024;
  auto a2a = [&](double bytes) { return collective_cost(hw, Collective::kAllToAll, sh.cp_group, bytes).time_s; };
  const double pass = 2 * a2a(16 * mib) + 2 * a2a(4 * mib);
  const PieceCost c = layer_cost(m, hw, opt, Precision::kBf16, sh, false);
  EXPECT_EQ(c.cp_calls, 8);
  EXPECT_NEAR(c.fwd_cp_s / pass, 1.0, 1e-12);
  EXPECT_NEAR(c.bwd_cp_s / pass, 1.0, 1e-12);
  EXPECT_NEAR(total(c.cp_bytes) / (2 * 40 * mib * (cp - 1) / cp), 1.0, 1e-9);
  const PieceCost ring = layer_cost(m, hw, opt, Precision::kBf16, compute_shape(with_cp(cp), seq, hw), false);
  EXPECT_NEAR(c.fwd_flops / ring.fwd_flops, 1.0, 1e-12);
  EXPECT_NEAR(c.bwd_flops / ring.bwd_flops, 1.0, 1e-12);
  // Loom's executor sends Q, K, V, O and dO again in backward, and the
  // log-sum-exp (2048 x 32 fp32, 256 KiB) with the output both ways.
  SimOptions own;
  const PieceCost x = layer_cost(m, hw, own, Precision::kBf16, sh, false);
  const double lse = a2a(256 * 1024);
  EXPECT_EQ(x.cp_calls, 14);
  EXPECT_NEAR(x.fwd_cp_s / (pass + lse), 1.0, 1e-12);
  EXPECT_NEAR(x.bwd_cp_s / (2 * pass + lse), 1.0, 1e-12);
  // Heads that do not divide over the group are refused, naming the counts.
  TrainSpec t;
  t.seq_len = seq;
  t.global_batch = 64;
  Layout eight = l;
  eight.cp = 16;  // 32 query heads, 8 KV heads
  Status s = validate_layout(eight, m, t, 16);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("8 key/value heads"), std::string::npos) << s.message();
  const Status ok = validate_layout(l, m, t, 4);
  EXPECT_TRUE(ok.is_ok()) << ok.message();
}

// The gathered K/V and, in backward, the whole sequence's dK/dV beside them:
// (2 cp) times a rank's K/V in bf16 for Megatron-core, against the ring's
// two (the block held and the one arriving).
TEST(ContextParallelModel, TheAllGatherHoldsTheWholeSequencesKv) {
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  TrainSpec t;
  t.seq_len = 32768;
  t.global_batch = 64;
  SimOptions opt;
  opt.framework = "megatron-core";
  Layout ring = with_cp(8);
  ring.dp = 8;
  Layout ag = ring;
  ag.cp_comm = CpComm::kAllGather;
  const StageSplit split = split_layers(m, ring);
  const ActivationTerms at = activation_terms(m, ring, t, opt);
  const double kv = 4096.0 * 8 * 2 * 128;  // a rank's K and V elements: 4096 tokens, 8 KV heads of 128
  const double diff = stage_memory(m, ag, t, opt, split, 0, at).comm_buffer_bytes -
                      stage_memory(m, ring, t, opt, split, 0, at).comm_buffer_bytes;
  EXPECT_NEAR(diff / ((2 * 8 - 2) * 2 * kv), 1.0, 1e-9);
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

// Each CP layout once per K/V exchange the stack runs: all three for Loom's
// executor and Megatron-core (the heads exchange where cp divides the
// heads: Llama-3-8B has 32 query and 8 KV heads, 16 and 4 per rank at tp=2,
// 8 and 2 at tp=4, so at cp=4 only tp <= 2), the ring only for torchtitan
// (as the export pins its rotation); --fix cp_comm pins one, and one the
// stack lacks is refused.
TEST(ContextParallelModel, TheSearchTriesEachKvExchangeTheStackRuns) {
  Evaluator eval = eval_for("llama-3-8b", 64, 8192);
  for (const char* framework : {"", "megatron-core"}) {
    SCOPED_TRACE(framework);
    SearchSpace sp;
    sp.world = 16;
    if (*framework) apply_framework(load_framework(framework).value(), &sp);
    sp.fix_cp = 4;
    int ring = 0, gathered = 0, heads = 0;
    for (const Layout& l : enumerate_layouts(eval, sp)) {
      if (l.cp_comm == CpComm::kP2p) ++ring;
      if (l.cp_comm == CpComm::kAllGather) ++gathered;
      if (l.cp_comm == CpComm::kA2a) {
        ++heads;
        EXPECT_LE(l.tp, 2) << l.to_string();
      }
    }
    EXPECT_GT(ring, 0);
    EXPECT_EQ(ring, gathered);
    EXPECT_GT(heads, 0);
    EXPECT_LT(heads, ring);
    ASSERT_TRUE(apply_search_fix("cp_comm=all_gather", &sp).is_ok());
    const auto pinned = enumerate_layouts(eval, sp);
    EXPECT_EQ(int(pinned.size()), gathered);
    for (const Layout& l : pinned) EXPECT_EQ(l.cp_comm, CpComm::kAllGather) << l.to_string();
  }
  SearchSpace sp;
  SearchSpace titan;
  titan.world = 16;
  titan.fix_cp = 4;
  apply_framework(load_framework("torchtitan").value(), &titan);
  for (const Layout& l : enumerate_layouts(eval, titan)) EXPECT_EQ(l.cp_comm, CpComm::kP2p) << l.to_string();
  titan.fix_cp_comm = CpComm::kAllGather;
  auto refused = search_layouts(eval, titan);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("cp_comm=all_gather"), std::string::npos) << refused.status().message();
  Status bad = apply_search_fix("cp_comm=nvshmem", &sp);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("nvshmem"), std::string::npos) << bad.message();
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
                           "dp=64,tp=4,pp=16,cp=4,zero=1,micro=1,schedule=interleaved,v=4,sp=1,recompute=selective,"
                           "cp_comm=all_gather",
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
  // The K/V exchange is part of what a layer costs (a cross-node CP group
  // here: the gather is exposed, the ring hides behind its blocks).
  EXPECT_NE(forward[0], forward[1]);
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

// cp_comm round-trips through the layout text and the plan, and without CP
// there is nothing to exchange.
TEST(ContextParallelModel, TheKvExchangeIsPartOfTheLayout) {
  auto l = parse_layout("dp=2,cp=4,cp_comm=all_gather");
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l->cp_comm, CpComm::kAllGather);
  EXPECT_NE(l->to_string().find(",cp_comm=all_gather"), std::string::npos) << l->to_string();
  EXPECT_EQ(parse_layout(l->to_string()).value(), *l);
  EXPECT_EQ(parse_layout("cp=2").value().to_string().find("cp_comm"), std::string::npos);  // the ring: not written
  auto bad = parse_layout("cp=2,cp_comm=nvshmem");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("all_gather"), std::string::npos) << bad.status().message();
  ModelSpec m = testing::load_model_or_die("llama-3-8b");
  TrainSpec t;
  t.seq_len = 4096;
  Layout no_cp;
  no_cp.cp_comm = CpComm::kAllGather;
  Status s = validate_layout(no_cp, m, t, 1);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("cp=1"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace loom
