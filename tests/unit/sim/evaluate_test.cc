// Pipeline bubbles produced by the engine from the schedule, and invariants
// of the whole evaluation (closed form against the engine: closed_form_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <new>
#include <thread>

#include "sim/compute_model.h"
#include "sim/memory_model.h"
#include "sim/plan_request.h"
#include "sim/report.h"
#include "sim/search.h"
#include "sim/simulate.h"
#include "tests/support/sim_test_support.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

using testing::load_hw_or_die;
using testing::load_model_or_die;
using testing::make_evaluator;

Layout L(const std::string& text) { return testing::layout_or_die(text); }

// Two evaluators built one after the other in the same storage (as a
// process that plans one run after another may place them) must not share
// memoized costs: until stop 47 the gradient norm's all-reduce was memoized
// on the profile's address, and the second evaluator, on a PCIe node (NCCL's
// PCIe latencies are longer than NVLink's), got the first one's NVLink time.
// Checked against the same evaluation on a fresh thread, whose memos are
// empty.
TEST(Evaluate, AnEvaluatorAtAReusedAddressGetsItsOwnCosts) {
  TrainSpec t;
  t.global_batch = 256;
  t.seq_len = 4096;
  const ModelSpec model = load_model_or_die("llama-3-8b");
  HwProfile fast = load_hw_or_die("dgx-h100"), slow = fast;
  slow.node.fabric = "pcie";
  const Layout l = L("dp=2,tp=4,pp=1,zero=1,micro=1");  // one node: the norm's all-reduce is intra-node
  alignas(Evaluator) unsigned char storage[sizeof(Evaluator)];
  Evaluator* a = new (storage) Evaluator(model, fast, t, SimOptions{});
  const double first = a->estimate(l).time.optimizer_s;
  a->~Evaluator();
  Evaluator* b = new (storage) Evaluator(model, slow, t, SimOptions{});
  const double second = b->estimate(l).time.optimizer_s;
  b->~Evaluator();
  double fresh = 0;
  std::thread([&] { fresh = Evaluator(model, slow, t, SimOptions{}).estimate(l).time.optimizer_s; }).join();
  EXPECT_GT(fresh, first);  // the slower network's norm all-reduce shows in the update
  EXPECT_DOUBLE_EQ(second, fresh);
}

// ZeRO-3 moves its weights and gradients one layer at a time (FSDP2 wraps
// each block): a stage of L layers pays at least L collective latencies per
// use, which one chunk-sized call would not. A narrow, deep GPT (h = 64,
// 96 layers, vocab 256: about 50k parameters a layer, 9.5 MB of bf16 weights
// in all) on dp = 64 over 8 DGX H100 nodes, where latency dominates: the
// floor is 96 x the cost of a one-byte call on the same group, and a single
// 9.5 MB call (ZeRO-1's step gather) costs far less than that.
TEST(Evaluate, Zero3GathersPayOneLatencyPerLayer) {
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 128;
  Evaluator eval(testing::gpt_block_model(64, 4, 96, /*vocab=*/256), load_hw_or_die("dgx-h100"), t, SimOptions{});
  const Layout z3 = L("dp=64,zero=3"), z1 = L("dp=64,zero=1");
  const StageCosts sc = eval.stage_costs(z3)[0];
  ASSERT_EQ(sc.layers, 96);
  const GroupShape g = group_shape(z3, Dim::kDp, eval.hw().node.devices_per_node);
  const double ag_floor = 96 * collective_cost(eval.hw(), Collective::kAllGather, g, 1.0).time_s;
  const double rs_floor = 96 * collective_cost(eval.hw(), Collective::kReduceScatter, g, 1.0).time_s;
  const DpCollectives d3 = eval.dp_collectives(z3, sc), d1 = eval.dp_collectives(z1, eval.stage_costs(z1)[0]);
  EXPECT_GE(d3.param_gather_s, ag_floor);
  EXPECT_GE(d3.grad_sync_s, rs_floor);
  EXPECT_LT(d1.param_gather_s, 0.5 * ag_floor) << "one call of the same bytes pays one latency";
  // Bytes on the wire are the same either way.
  for (int c = 0; c < kNumLinkClasses; ++c)
    EXPECT_NEAR(d3.param_gather.sent_bytes[c], d1.param_gather.sent_bytes[c], 1e-6 * (1 + d1.param_gather.sent_bytes[c]));
  // The traffic report counts the calls as run: m = 1 micro-batch, one
  // reduce-scatter and two gathers per layer, each of a layer's gradients.
  const Traffic tr = eval.step_traffic(z3, eval.stage_costs(z3));
  const int dp = static_cast<int>(CommKind::kDp);
  EXPECT_DOUBLE_EQ(tr.calls[dp], 3.0 * 96);
  EXPECT_DOUBLE_EQ(tr.call_bytes[dp], sc.grad_bytes / 96);
}

// --grad-reduce: the DP gradient bytes follow the element type (fp32 4,
// bf16 2, fp8 1 per gradient) while the ZeRO parameter gathers keep the
// weights' bytes; the packing passes cost memory time, so a compressed sync
// is never priced below its wire time.
TEST(Evaluate, GradReduceTypeSetsTheDpGradientBytes) {
  const Layout z1 = L("dp=64,zero=1");
  double grad_bytes[3] = {0, 0, 0}, gather_bytes[3] = {0, 0, 0}, sync_s[3] = {0, 0, 0};
  const GradReduce types[3] = {GradReduce::kFp32, GradReduce::kBf16, GradReduce::kFp8};
  for (int i = 0; i < 3; ++i) {
    TrainSpec t;
    t.global_batch = 64;
    t.seq_len = 128;
    t.precision = Precision::kFp32;
    t.grad_reduce = types[i];
    // 8 layers of hidden 2048 (400M parameters): bandwidth-bound, where the
    // per-peer pack and unpack launches (2 x dp of them) do not dominate.
    Evaluator eval(testing::gpt_block_model(2048, 16, 8, /*vocab=*/256), load_hw_or_die("dgx-h100"), t, SimOptions{});
    const StageCosts sc = eval.stage_costs(z1)[0];
    const DpCollectives d = eval.dp_collectives(z1, sc);
    grad_bytes[i] = sc.grad_bytes;
    for (int c = 0; c < kNumLinkClasses; ++c) gather_bytes[i] += d.param_gather.sent_bytes[c];
    sync_s[i] = d.grad_sync_s;
    const GroupShape g = group_shape(z1, Dim::kDp, eval.hw().node.devices_per_node);
    EXPECT_GE(d.grad_sync_s, collective_cost(eval.hw(), Collective::kReduceScatter, g, sc.grad_bytes).time_s);
  }
  EXPECT_DOUBLE_EQ(grad_bytes[1], grad_bytes[0] / 2);
  EXPECT_DOUBLE_EQ(grad_bytes[2], grad_bytes[0] / 4);
  EXPECT_NEAR(gather_bytes[1], gather_bytes[0], 1e-9 * gather_bytes[0]);
  EXPECT_NEAR(gather_bytes[2], gather_bytes[0], 1e-9 * gather_bytes[0]);
  // On 8 DGX H100 nodes the packing passes (~16 bytes of HBM traffic per
  // gradient) cost about what halving the rails' bytes saves: compression is
  // not free on a fast network, which the planner must show.
  EXPECT_GT(sync_s[1], 0.5 * sync_s[0]);
}

// A tied embedding over a pipeline: the first and last stages all-reduce the
// embedding's gradient before the update (Megatron's
// _allreduce_embedding_grads): GPT-2 XL-sized vocabulary, pp = 2 over two
// DGX H100 nodes (dp = 8 fills each node), the pair one rank per node:
// 50257 x 1600 bf16 gradients (161 MB) over the network.
TEST(Evaluate, TiedEmbeddingGradientsAreAllReducedBetweenFirstAndLastStage) {
  ModelSpec m = testing::gpt_block_model(1600, 25, 48, /*vocab=*/50257);
  ASSERT_TRUE(m.tied_embeddings);
  HwProfile hw = load_hw_or_die("dgx-h100");
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 1024;
  Evaluator eval(m, hw, t, SimOptions{});
  Layout l = L("dp=8,pp=2,order=tp-cp-ep-dp-pp");
  const auto stages = eval.stage_costs(l);
  const StageSplit split = split_layers(m, 2, 1);
  GroupShape pair;
  pair.ranks = 2;
  pair.nodes = 2;
  pair.ranks_per_node = 1;
  const double ar = collective_cost(hw, Collective::kAllReduce, pair, 50257.0 * 1600 * 2).time_s;
  // The gradient norm's all-reduce: one fp32 over every rank (Loom's
  // executor sums the squared norm over the world), 16 ranks on 2 nodes.
  GroupShape world;
  world.ranks = 16;
  world.nodes = 2;
  world.ranks_per_node = 8;
  const double norm = collective_cost(hw, Collective::kAllReduce, world, 4).time_s;
  EXPECT_GT(norm, 0);
  EXPECT_LT(norm, 1e-4) << "one scalar: latency only";
  for (int s = 0; s < 2; ++s) {
    // The update, Loom's executor zeroing its fp32 gradients, the norm's
    // all-reduce and the embedding's.
    const double params = stage_params(m, l, split, s).total();
    const double base =
        optimizer_time_s(hw, SimOptions{}, Precision::kBf16, params) + memory_pass_time_s(hw, 4 * params);
    EXPECT_NEAR(stages[size_t(s)].norm_sync_s, norm, 1e-15) << "stage " << s;
    EXPECT_NEAR(stages[size_t(s)].optimizer_s - base - norm, ar, 1e-12) << "stage " << s;
  }
  EXPECT_GT(ar, 1e-3) << "161 MB over one NIC pair takes milliseconds";
}

// A model whose embedding and head cost next to nothing, so stages are balanced.
Evaluator balanced_eval(int layers) {
  ModelSpec m = testing::gpt_block_model(4096, 32, layers, /*vocab=*/64);
  HwProfile hw = load_hw_or_die("dgx-h100");
  TrainSpec t;
  t.global_batch = 64;
  t.seq_len = 2048;
  return Evaluator(m, hw, t, SimOptions{});
}

TEST(Evaluate, EngineBubbleMatchesGpipeAnd1F1BFormula) {
  Evaluator eval = balanced_eval(16);
  for (Schedule sched : {Schedule::kGpipe, Schedule::k1F1B}) {
    for (int pp : {2, 4, 8}) {
      for (int micro : {1, 4, 16}) {  // m = 64, 16, 4 micro-batches (m < p included)
        Layout l;
        l.pp = pp;
        l.micro_batch = micro;
        l.schedule = sched;
        auto r = simulate_layout(eval, l);
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        const int64_t m = 64 / micro;
        const StageCosts& sc = r->stages[1];
        double t_fb = sc.fwd_s + sc.bwd_s + sc.recompute_s;
        // The bubble proper: exposed p2p transfers are reported apart (pp_comm_s).
        double bubble = r->time.bubble_s;
        EXPECT_NEAR(bubble / ((pp - 1) * t_fb), 1.0, 0.01) << schedule_name(sched) << " p=" << pp << " m=" << m;
        double pipe = r->time.step_time_s - r->time.optimizer_s - r->time.pp_comm_s;
        EXPECT_NEAR(bubble / pipe, double(pp - 1) / double(m + pp - 1), 0.01) << "p=" << pp << " m=" << m;
      }
    }
  }
}

TEST(Evaluate, EngineBubbleMatchesInterleavedFormula) {
  Evaluator eval = balanced_eval(32);
  for (int v : {2, 4}) {
    Layout l;
    l.pp = 4;
    l.micro_batch = 4;  // m = 16
    l.schedule = Schedule::kInterleaved;
    l.virtual_stages = v;
    auto r = simulate_layout(eval, l);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const StageCosts& sc = r->stages[1];
    double t_fb = sc.fwd_s + sc.bwd_s + sc.recompute_s;
    EXPECT_NEAR(r->time.bubble_s / (3 * t_fb / v), 1.0, 0.02) << "v=" << v;
  }
}

TEST(Evaluate, NoPipelineNoBubble) {
  Evaluator eval = make_evaluator("llama-3-8b", "dgx-h100", 256, 4096);
  for (const char* text : {"dp=64", "dp=8,tp=8,micro=4", "dp=64,zero=3"}) {
    auto r = simulate_layout(eval, L(text));
    ASSERT_TRUE(r.is_ok());
    EXPECT_DOUBLE_EQ(r->time.bubble_s, 0.0) << text;
    EXPECT_DOUBLE_EQ(r->closed_form.time.bubble_s, 0.0) << text;
  }
}

HwProfile scaled_bandwidth(HwProfile hw, double f) {
  hw.node.intra_bw_bytes_per_s *= f;
  hw.node.intra_ring_busbw_bytes_per_s *= f;
  hw.node.pcie_bw_bytes_per_s *= f;
  hw.net.nic_bw_bytes_per_s *= f;
  return hw;
}

TEST(Evaluate, MoreBandwidthNeverSlowsAStep) {
  ModelSpec m = load_model_or_die("llama-3-70b");
  HwProfile hw = load_hw_or_die("dgx-h100");
  TrainSpec t;
  t.global_batch = 512;
  t.seq_len = 4096;
  for (const char* text : {"dp=32,tp=8,pp=2,zero=1", "dp=64,tp=4,pp=2,sp=1", "dp=16,tp=8,pp=4,schedule=interleaved,v=2",
                           "dp=512,zero=3,recompute=full", "dp=128,tp=4,zero=2"}) {
    Layout l = L(text);
    double previous = 1e30, previous_closed = 1e30;
    for (double f : {0.25, 0.5, 1.0, 2.0, 4.0}) {
      Evaluator eval(m, scaled_bandwidth(hw, f), t, SimOptions{});
      auto r = simulate_layout(eval, l);
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      EXPECT_LE(r->time.step_time_s, previous * (1 + 1e-12)) << text << " x" << f;
      EXPECT_LE(r->closed_form.time.step_time_s, previous_closed * (1 + 1e-12)) << text << " x" << f;
      previous = r->time.step_time_s;
      previous_closed = r->closed_form.time.step_time_s;
    }
  }
}

TEST(Evaluate, FiguresAreConsistent) {
  Evaluator eval = make_evaluator("llama-3-8b", "dgx-h100", 256, 4096);
  auto r = simulate_layout(eval, L("dp=8,tp=4,pp=2,zero=1"));
  ASSERT_TRUE(r.is_ok());
  const Figures& f = r->figures;
  EXPECT_NEAR(f.tokens_per_s * f.step_time_s, 256.0 * 4096, 1e-6 * 256 * 4096);
  EXPECT_NEAR(f.tokens_per_s_per_gpu * 64, f.tokens_per_s, 1e-9 * f.tokens_per_s);
  double peak = eval.hw().accel.peak_flops(Precision::kBf16);
  EXPECT_NEAR(f.mfu, f.model_tflops_per_gpu * 1e12 / peak, 1e-12);
  double palm = eval.model().model_flops_per_token_palm(4096);
  EXPECT_NEAR(f.model_tflops_per_gpu, palm * f.tokens_per_s / 64 / 1e12, 1e-9 * f.model_tflops_per_gpu);
  EXPECT_GT(f.mfu, 0.05);
  EXPECT_LT(f.mfu, 1.0);
  // Full recompute executes more FLOPs for the same model FLOPs: HFU rises relative to MFU.
  auto rc = simulate_layout(eval, L("dp=8,tp=4,pp=2,zero=1,recompute=full"));
  ASSERT_TRUE(rc.is_ok());
  EXPECT_GT(rc->figures.hfu / rc->figures.mfu, f.hfu / f.mfu * 1.2);
}

TEST(Evaluate, CommunicationAppearsOnlyWhereTheLayoutImpliesIt) {
  Evaluator eval = make_evaluator("llama-3-8b", "dgx-h100", 256, 4096);
  auto dp_only = simulate_layout(eval, L("dp=64"));
  ASSERT_TRUE(dp_only.is_ok());
  EXPECT_EQ(dp_only->traffic.calls[int(CommKind::kTp)], 0);
  EXPECT_EQ(dp_only->traffic.calls[int(CommKind::kPp)], 0);
  EXPECT_GT(dp_only->traffic.bytes[int(CommKind::kDp)][int(LinkClass::kNetwork)], 0);
  auto tp_pp = simulate_layout(eval, L("dp=1,tp=8,pp=8"));
  ASSERT_TRUE(tp_pp.is_ok());
  EXPECT_EQ(tp_pp->traffic.calls[int(CommKind::kDp)], 0);
  // TP inside a node: NVLink only; PP across nodes (stride 8 = a whole node): network.
  EXPECT_GT(tp_pp->traffic.bytes[int(CommKind::kTp)][int(LinkClass::kNvlink)], 0);
  EXPECT_EQ(tp_pp->traffic.bytes[int(CommKind::kTp)][int(LinkClass::kNetwork)], 0);
  EXPECT_GT(tp_pp->traffic.bytes[int(CommKind::kPp)][int(LinkClass::kNetwork)], 0);
  // ZeRO-3 moves 1.5x the DP bytes of ZeRO-0 (3 Psi vs 2 Psi per step, ZeRO paper).
  auto z0 = simulate_layout(eval, L("dp=64,micro=4"));
  auto z3 = simulate_layout(eval, L("dp=64,micro=4,zero=3"));
  ASSERT_TRUE(z0.is_ok() && z3.is_ok());
  auto dp_bytes = [](const SimResult& r) {
    double b = 0;
    for (int c = 0; c < kNumLinkClasses; ++c) b += r.traffic.bytes[int(CommKind::kDp)][c];
    return b;
  };
  EXPECT_NEAR(dp_bytes(*z3) / dp_bytes(*z0), 1.5, 0.02);
}

TEST(Evaluate, MoeLayoutsUseExpertParallelAllToAll) {
  Evaluator eval = make_evaluator("mixtral-8x7b", "dgx-h100", 256, 4096);
  auto r = simulate_layout(eval, L("dp=16,tp=2,pp=2,ep=8,zero=1,sp=1"));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_GT(r->traffic.calls[int(CommKind::kEp)], 0);
  auto no_ep = simulate_layout(eval, L("dp=16,tp=2,pp=2,ep=1,zero=1,sp=1"));
  ASSERT_TRUE(no_ep.is_ok());
  EXPECT_EQ(no_ep->traffic.calls[int(CommKind::kEp)], 0);
  // Experts sharded 8 ways hold far less expert memory per rank.
  EXPECT_LT(r->memory.stages[0].weights_bytes, 0.5 * no_ep->memory.stages[0].weights_bytes);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

TEST(Evaluate, ClosedFormMemoryEqualsTheFullReport) {
  // The search's lean path skips interior stages that cannot hold more; it
  // must find the same peak, and the same (first) worst stage, as the
  // per-stage report: for Loom's executor (pipeline buffers that differ from
  // stage to stage) and for a framework's memory model alike.
  int pipelined = 0;
  for (bool executor : {true, false}) {
    SimOptions opt;
    opt.loom_executor = executor;
    for (const char* model : {"llama-3-70b", "mixtral-8x7b", "deepseek-v3"}) {
      Evaluator eval = make_evaluator(model, "dgx-h100", 512, 4096, opt);
      SearchSpace sp;
      sp.world = 256;
      sp.max_micro_batch = 2;
      auto layouts = enumerate_layouts(eval, sp);
      ASSERT_FALSE(layouts.empty()) << model;
      for (size_t i = 0; i < layouts.size(); i += 7) {
        const Layout& l = layouts[i];
        Estimate e = eval.estimate(l);
        MemoryReport r = memory_report(eval.model(), eval.hw(), l, eval.train(), eval.options());
        ASSERT_DOUBLE_EQ(e.peak_memory_bytes, r.peak_bytes()) << model << " " << l.to_string();
        ASSERT_EQ(e.worst_stage, r.worst_stage) << model << " " << l.to_string();
        ASSERT_EQ(e.fits, r.fits) << model << " " << l.to_string();
        pipelined += l.pp > 2;
      }
    }
  }
  EXPECT_GT(pipelined, 100);  // the skip has interior stages to skip
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// DP collectives that progress only in the host's waits (Open MPI on CPU
// ranks) hide behind no compute: the exposed DP time is every collective of
// the step, in the event engine and in the search's closed form alike; with
// a stream of their own (NCCL) most of it hides behind backward.
TEST(Simulate, HostProgressedDpCollectivesHideBehindNothing) {
  SimOptions host;
  host.dp_comm_host_progress = true;
  for (const char* layout : {"dp=8,zero=1,micro=1", "dp=8,zero=0,micro=1"}) {
    Evaluator own = make_evaluator("llama-3-8b", "dgx-h100", 64, 2048);
    Evaluator waits = make_evaluator("llama-3-8b", "dgx-h100", 64, 2048, host);
    const Layout l = L(layout);
    auto a = simulate_layout(own, l), b = simulate_layout(waits, l);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    const DpCollectives d = waits.dp_collectives(l, b->stages[0]);
    const double all = d.grad_sync_s + (l.zero == 1 ? d.param_gather_s : 0.0);
    EXPECT_NEAR(b->time.dp_comm_s, all, 1e-6 * all) << layout;
    EXPECT_LT(a->time.dp_comm_s, 0.9 * all) << layout << ": partly overlapped on a stream of its own";
    EXPECT_NEAR(waits.estimate(l).time.dp_comm_s, all, 1e-6 * all) << layout;
    // The step grows by what was hidden, less the SM contention the overlap cost.
    EXPECT_GT(b->time.step_time_s, a->time.step_time_s) << layout;
    EXPECT_LE(b->time.step_time_s - a->time.step_time_s, all - a->time.dp_comm_s + 1e-9) << layout;
  }
  // Every layout's program stays acyclic with the DP ops held back (ZeRO-3's
  // gathers queue behind the reduce-scatters they wait for).
  Evaluator waits = make_evaluator("llama-3-8b", "dgx-h100", 64, 2048, host);
  SearchSpace sp;
  sp.world = 16;
  sp.max_micro_batch = 2;
  const auto layouts = enumerate_layouts(waits, sp);
  ASSERT_GT(layouts.size(), 50u);
  for (const Layout& l : layouts) {
    auto r = simulate_layout(waits, l);
    ASSERT_TRUE(r.is_ok()) << l.to_string() << ": " << r.status().to_string();
  }
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Loom's executor under ZeRO-2/3 discards the stage's full fp32 gradient
// after every micro-batch's reduce-scatter and writes it again in the next
// backward; ZeRO-3 discards the parameters it does not own once a step.
// Llama-3-8B on 8 H100s, dp = 8: 8.03e9 parameters, 32.1 GB of fp32
// gradients. Without a measured rate a discard is one memset pass: at the
// profile's 3.35 TB/s x efficiency; a measured 4 GB/s (a CPU's page faults)
// prices it at 32.1 GB / 4 GB/s = 8.0 s a micro-batch. A framework's buffers
// are not discarded.
TEST(Evaluate, ZeroTwoAndThreeRewriteTheirDiscardedGradients) {
  TrainSpec t;
  t.global_batch = 16;
  t.seq_len = 1024;
  const ModelSpec m = load_model_or_die("llama-3-8b");
  HwProfile hw = load_hw_or_die("dgx-h100");
  HwProfile measured = hw;
  measured.accel.discard_bytes_per_s = 4e9;
  SimOptions opt;
  const Evaluator memset(m, hw, t, opt), faults(m, measured, t, opt);
  const Layout probe = L("dp=8,micro=1,zero=2");
  const double P = stage_params(m, probe, split_layers(m, probe), 0).total(), grads = 4 * P;
  EXPECT_NEAR(P, 8.03e9, 0.01e9);
  const double bw = hw.accel.memory_bw_bytes_per_s * hw.accel.memory_bw_efficiency;
  for (int zero : {2, 3}) {
    SCOPED_TRACE(zero);
    const Layout l = L("dp=8,micro=1,zero=" + std::to_string(zero));
    const StageCosts a = memset.stage_costs(l)[0], b = faults.stage_costs(l)[0];
    EXPECT_NEAR(b.bwd_s - a.bwd_s, grads / 4e9 - grads / bw, 1e-9);
    const double shard_rest = zero == 3 ? grads * 7 / 8 : 0;
    EXPECT_NEAR(b.optimizer_s - a.optimizer_s, shard_rest / 4e9 - shard_rest / bw, 1e-9);
    EXPECT_GT(b.bwd_s - a.bwd_s, 7.9);  // 8.0 s a micro-batch, less the memset it replaces
  }
  // ZeRO-1 keeps its gradients; a framework's memory model has no discard.
  const Layout z1 = L("dp=8,micro=1,zero=1");
  EXPECT_DOUBLE_EQ(memset.stage_costs(z1)[0].bwd_s, faults.stage_costs(z1)[0].bwd_s);
  SimOptions fw;
  fw.framework = "megatron-core";
  const Evaluator fa(m, hw, t, fw), fb(m, measured, t, fw);
  const Layout z2 = L("dp=8,micro=1,zero=2");
  EXPECT_DOUBLE_EQ(fa.stage_costs(z2)[0].bwd_s, fb.stage_costs(z2)[0].bwd_s);
}

// Llama-3-8B on the A100 profile, 128 sequences of 2048 tokens: the setup of
// the stack-cost tests below, each pricing one pass against a hand count.
struct Llama8bOnA100 {
  TrainSpec t = [] {
    TrainSpec x;
    x.global_batch = 128;
    x.seq_len = 2048;
    return x;
  }();
  ModelSpec m = load_model_or_die("llama-3-8b");
  HwProfile hw = load_hw_or_die("dgx-a100-80gb");
  // A stack's options with fp32 main gradients.
  static SimOptions stack(const char* framework) {
    SimOptions o;
    o.framework = framework;
    o.fp32_main_grads = true;
    return o;
  }
};

TEST(Evaluate, FsdpCopiesCostTheirPassesPerMicroBatch) {
  // FSDP2 (torchtitan) under ZeRO-3 copies each all-gather's output into the
  // parameters (read + write 2 bytes a bf16 weight), in forward and again in
  // backward, and copies the bf16 gradients into an fp32 reduce-scatter
  // input (read 2, write 4). Llama-3-8B, one stage: P = 8.03e9 parameters,
  // so forward pays 4P = 32.1 GB and backward 4P + 6P = 80.3 GB more, at
  // the A100 profile's streaming rate (2039 GB/s x 0.88 = 1794 GB/s): 17.9 ms
  // and 44.8 ms a micro-batch, plus one launch each.
  const Llama8bOnA100 k;
  const TrainSpec& t = k.t;
  const ModelSpec& m = k.m;
  const HwProfile& hw = k.hw;
  SimOptions off = Llama8bOnA100::stack("torchtitan");  // fp32 reduction, as torchtitan's mixed_precision_reduce
  SimOptions on = off;
  on.fsdp_copies = true;
  const Evaluator a(m, hw, t, off), b(m, hw, t, on);
  const Layout l = L("dp=64,micro=1,zero=3");
  const StageCosts x = a.stage_costs(l)[0], y = b.stage_costs(l)[0];
  const double P = stage_params(m, l, split_layers(m, l), 0).total();
  EXPECT_NEAR(P, 8.03e9, 0.01e9);
  const double bw = 2039e9 * 0.88;
  EXPECT_NEAR(y.fwd_s - x.fwd_s, 4 * P / bw + on.kernel_overhead_s, 1e-9);
  EXPECT_NEAR(y.bwd_s - x.bwd_s, 10 * P / bw + 2 * on.kernel_overhead_s, 1e-9);
  EXPECT_NEAR(y.fwd_s - x.fwd_s, 0.0179, 0.0002);
  // Not without ZeRO-3's per-layer gathers, nor on one rank.
  for (const char* other : {"dp=64,micro=1,zero=1", "dp=1,micro=1,zero=3"}) {
    const Layout o = L(other);
    EXPECT_DOUBLE_EQ(a.stage_costs(o)[0].fwd_s, b.stage_costs(o)[0].fwd_s) << other;
    EXPECT_DOUBLE_EQ(a.stage_costs(o)[0].bwd_s, b.stage_costs(o)[0].bwd_s) << other;
  }
}

TEST(Evaluate, MegatronGradientBufferPassesCostTheirBytesOnceAStep) {
  // Megatron-core's DDP, once a step on the compute stream, over the whole
  // fp32 gradient buffer (4 bytes x P = 8.03e9 for Llama-3-8B on one stage,
  // 32.1 GB): zeroing (write 4P), a norm per bucket for the NaN check (read
  // 4P) and the 1/dp scaling (read + write 8P): 16P = 128.5 GB at the A100
  // profile's streaming rate (2039 GB/s x 0.88 = 1794 GB/s) is 71.6 ms, plus
  // launches: 1 zero, 2 per bucket for the norms, 1 per bucket for the
  // scaling (4 buckets). Without data parallelism the scaling factor is 1
  // and that pass is skipped.
  const Llama8bOnA100 k;
  const TrainSpec& t = k.t;
  const ModelSpec& m = k.m;
  const HwProfile& hw = k.hw;
  SimOptions off = Llama8bOnA100::stack("megatron-core");
  SimOptions on = off;
  on.grad_buffer_zero = on.grad_nan_check = on.grad_scale_pass = true;
  const Evaluator a(m, hw, t, off), b(m, hw, t, on);
  const Layout l = L("dp=64,micro=1,zero=1");
  const double P = stage_params(m, l, split_layers(m, l), 0).total();
  EXPECT_NEAR(P, 8.03e9, 0.01e9);
  const double bw = 2039e9 * 0.88;
  const double d = b.stage_costs(l)[0].optimizer_s - a.stage_costs(l)[0].optimizer_s;
  EXPECT_NEAR(d, 16 * P / bw + (1 + 2 * 4 + 4) * on.kernel_overhead_s, 1e-9);
  EXPECT_NEAR(d, 0.0716, 0.0005);
  // Sharded under ZeRO-3 (Megatron-FSDP's buffer holds the rank's shard):
  // a 64th of it.
  const Layout z3 = L("dp=64,micro=1,zero=3");
  const double d3 = b.stage_costs(z3)[0].optimizer_s - a.stage_costs(z3)[0].optimizer_s;
  EXPECT_NEAR(d3, 16 * P / 64 / bw + (1 + 2 * 4 + 4) * on.kernel_overhead_s, 1e-9);
  const Layout one = L("dp=1,micro=1,zero=1");
  const double d1 = b.stage_costs(one)[0].optimizer_s - a.stage_costs(one)[0].optimizer_s;
  EXPECT_NEAR(d1, 8 * P / bw + (1 + 2 * 4) * on.kernel_overhead_s, 1e-9);
  // Loom's own executor zeroes its gradients in its update (priced apart):
  // these flags do not apply to it.
  SimOptions loom_on;
  loom_on.grad_buffer_zero = loom_on.grad_nan_check = loom_on.grad_scale_pass = true;
  const Evaluator c(m, hw, t, SimOptions{}), e(m, hw, t, loom_on);
  EXPECT_DOUBLE_EQ(c.stage_costs(l)[0].optimizer_s, e.stage_costs(l)[0].optimizer_s);
}

TEST(Evaluate, DenseEmbeddingGradientsCostTheWholeTableEveryMicroBatch) {
  // PyTorch's dense embedding backward writes a zero-filled bf16 gradient of
  // the whole local table, and Megatron-core's hook adds it into the fp32
  // main gradient (read 4 + 2, write 4). Llama-3-8B: V x h = 128256 x 4096 =
  // 525.3M elements; 2 bytes each is 1.05 GB (0.59 ms at 1794 GB/s), the add
  // 10 bytes each 5.25 GB (2.93 ms). With TP = 2 each rank holds half the
  // vocabulary.
  const Llama8bOnA100 k;
  const ModelSpec& m = k.m;
  const HwProfile& hw = k.hw;
  const double bw = 2039e9 * 0.88, vh = 128256.0 * 4096;
  for (int tp : {1, 2}) {
    const ComputeShape sh = compute_shape(L("dp=8,tp=" + std::to_string(tp) + ",micro=1"), 2048, hw);
    const SimOptions off = Llama8bOnA100::stack("megatron-core");
    SimOptions dense = off, hook = off;
    dense.embedding_dense_grad = true;
    hook.embedding_dense_grad = hook.grad_hook_add = true;
    const double base = embedding_cost(m, hw, off, Precision::kBf16, sh).bwd_s;
    EXPECT_NEAR(embedding_cost(m, hw, dense, Precision::kBf16, sh).bwd_s - base,
                2 * vh / tp / bw + off.kernel_overhead_s, 1e-9) << tp;
    EXPECT_NEAR(embedding_cost(m, hw, hook, Precision::kBf16, sh).bwd_s - base,
                12 * vh / tp / bw + 2 * off.kernel_overhead_s, 1e-9) << tp;
    // The forward is untouched.
    EXPECT_DOUBLE_EQ(embedding_cost(m, hw, hook, Precision::kBf16, sh).fwd_s,
                     embedding_cost(m, hw, off, Precision::kBf16, sh).fwd_s);
  }
  EXPECT_NEAR(2 * vh / bw, 0.000586, 0.000005);
}

TEST(Evaluate, HookAddedParametersAreTheNormsAndBiases) {
  // Llama: two RMSNorm weights a layer. GPT-2: two LayerNorms (weight and
  // bias each), the fused QKV bias, the projection's and both MLP linears'
  // biases: 4 + 1 + 1 + 2 = 8. Qwen3 adds its q and k norms (4).
  // A MoE layer adds its router's weight; DeepSeek-V3's MLA its q and kv
  // latent norms.
  EXPECT_EQ(hook_added_params(load_model_or_die("llama-3-8b"), false), 2);
  EXPECT_EQ(hook_added_params(load_model_or_die("gpt2-124m"), false), 8);
  EXPECT_EQ(hook_added_params(load_model_or_die("qwen3-30b-a3b"), true), 5);
  EXPECT_EQ(hook_added_params(load_model_or_die("deepseek-v3"), true), 5);
}

}  // namespace
}  // namespace loom

// Megatron-core's all-to-all overlap (--overlap-moe-expert-parallel-comm)
// pairs a forward with another micro-batch's backward only in the steady
// state. The warmup forwards (get_pp_rank_microbatches: (pp - r - 1)·2 +
// (v - 1)·pp, plus one more with the overlap) and as many cooldown backwards
// run alone, their all-to-alls exposed. Qwen3-235B as Megatron-Bridge ran it
// (pp 8, v 4, 128 micro-batches): stage 0 has 7·2 + 3·8 + 1 = 39 of its 512
// chunk executions alone, stage 7 has 0 + 24 + 1 = 25. Without a pipeline
// (combined_1f1b_schedule_for_no_pipelining) the first forward and the last
// backward: 1 of m.
namespace loom {
namespace {

TEST(Evaluate, EpOverlapLeavesTheWarmupAndCooldownUnpaired) {
  Layout b6 = L("dp=16,tp=2,pp=8,ep=32,schedule=interleaved,v=4,sp=1");
  EXPECT_DOUBLE_EQ(ep_unpaired_fraction(b6, 128, 0), 39.0 / 512);
  EXPECT_DOUBLE_EQ(ep_unpaired_fraction(b6, 128, 7), 25.0 / 512);
  EXPECT_DOUBLE_EQ(ep_unpaired_fraction(L("dp=64,ep=8"), 32, 0), 1.0 / 32);
  EXPECT_DOUBLE_EQ(ep_unpaired_fraction(L("dp=16,pp=4,ep=8,schedule=gpipe"), 8, 1), 1.0);  // no steady state
  EXPECT_DOUBLE_EQ(ep_unpaired_fraction(b6, 2, 0), 1.0);  // fewer micro-batches than the warmup
  // DualPipeV over 4 stages, 8 micro-batches: stage 0 runs six F0, then F0
  // F1, then three (B1 W F1) alone before its one step-4 iteration's two
  // pairs, then three step-5 (B1, F1&B0): of 16 forwards 2 + 3 = 5 paired, 11
  // alone; the last stage pairs 2*4 - 1 (its first pair runs apart), 9 alone.
  const Layout v = L("dp=16,pp=4,ep=8,schedule=dualpipev");
  EXPECT_DOUBLE_EQ(ep_unpaired_fraction(v, 8, 0), 11.0 / 16);
  EXPECT_DOUBLE_EQ(ep_unpaired_fraction(v, 8, 3), 9.0 / 16);

  // A stage's MoE layers cost the blend: that share at the no-overlap price,
  // the rest paired.
  SimOptions on;
  on.ep_comm_overlap = true;
  const Evaluator off_eval = make_evaluator("mixtral-8x7b", "dgx-h100", 64, 4096);
  const Evaluator on_eval = make_evaluator("mixtral-8x7b", "dgx-h100", 64, 4096, on);
  const Layout l = L("dp=4,pp=4,ep=4,schedule=interleaved,v=2,zero=1");
  const int64_t m = l.num_micro_batches(64);
  ASSERT_EQ(m, 16);
  const Evaluator::Pieces paired = on_eval.compute_pieces(l);
  const std::vector<StageCosts> alone = off_eval.stage_costs(l), mixed = on_eval.stage_costs(l);
  for (int s = 0; s < 4; ++s) {
    const double u = ep_unpaired_fraction(l, m, s);
    EXPECT_DOUBLE_EQ(u, ((4 - s - 1) * 2 + 4 + 1) / 32.0) << s;
    const int layers = split_layers(on_eval.model(), l).stage_layers(s);
    const double ep_paired = (paired.moe.fwd_ep_s + paired.moe.bwd_ep_s) * layers;
    EXPECT_NEAR(mixed[s].ep_s, (1 - u) * ep_paired + u * alone[s].ep_s, 1e-12) << s;
    EXPECT_LT(mixed[s].ep_s, alone[s].ep_s) << s;
  }
  EXPECT_GT(mixed[0].ep_s, mixed[3].ep_s);  // the first stage warms up longest
  // The closed form and the engine see the same stages.
  auto r = simulate_layout(on_eval, l);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_NEAR(r->closed_form.time.step_time_s / r->time.step_time_s, 1.0, 0.10);
}

// --memory-headroom keeps a fraction of each device free: a layout fits when
// its worst stage needs at most (1 - headroom) x capacity, in the closed
// form the search ranks by and in the memory report alike; the plan records
// the headroom (only when set) and refuses one outside [0, 0.9].
TEST(Evaluate, MemoryHeadroomShrinksTheUsableCapacityForBothPaths) {
  Evaluator eval = make_evaluator("llama-3-8b", "dgx-h100", 64, 4096);
  const Layout l = testing::layout_or_die("dp=8,tp=1,pp=1,zero=1,micro=1,recompute=full");
  const MemoryReport whole = memory_report(eval.model(), eval.hw(), l, eval.train(), eval.options());
  ASSERT_TRUE(whole.fits);
  const double device = eval.hw().accel.memory_bytes, peak = whole.peak_bytes();
  ASSERT_GT(peak / device, 0.15);  // a headroom below 0.9 can make it not fit
  // Usable 5% below the peak: it does not fit; 5% above: it does.
  for (double usable : {0.95 * peak, 1.05 * peak}) {
    SimOptions opt = eval.options();
    opt.memory_headroom = 1 - usable / device;
    Evaluator e2(eval.model(), eval.hw(), eval.train(), opt);
    const MemoryReport r = memory_report(e2.model(), e2.hw(), l, e2.train(), e2.options());
    EXPECT_NEAR(r.capacity_bytes, usable, 1.0);
    EXPECT_EQ(r.device_bytes, device);
    EXPECT_DOUBLE_EQ(r.peak_bytes(), peak);  // the headroom moves the capacity, not the count
    EXPECT_EQ(r.fits, usable > peak);
    EXPECT_EQ(e2.estimate(l).fits, r.fits);
    if (!r.fits) EXPECT_NE(r.why_not().find("usable"), std::string::npos) << r.why_not();
  }
  // The plan's record of it.
  SimOptions opt;
  opt.memory_headroom = 0.1;
  auto back = parse_sim_options(sim_options_json(opt));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_DOUBLE_EQ(back->memory_headroom, 0.1);
  EXPECT_EQ(sim_options_json(SimOptions{}).find("memory_headroom"), std::string::npos);
  EXPECT_FALSE(parse_sim_options(R"({"memory_headroom": 0.95})").is_ok());
  EXPECT_FALSE(parse_sim_options(R"({"memory_headroom": -0.1})").is_ok());
  PlanRequest req;
  req.memory_headroom = 0.95;
  EXPECT_FALSE(make_train_spec(req, eval.hw()).is_ok());
  req.memory_headroom = std::nan("");
  EXPECT_FALSE(make_train_spec(req, eval.hw()).is_ok());
  req.memory_headroom = 0.1;
  EXPECT_TRUE(make_train_spec(req, eval.hw()).is_ok());
  EXPECT_DOUBLE_EQ(make_sim_options(req, eval.hw(), nullptr).memory_headroom, 0.1);
}

}  // namespace
}  // namespace loom
