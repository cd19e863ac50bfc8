// Event engine: the pipeline-bubble formulas of formulas.md must come out of
// timing the schedules themselves; plus the engine's own semantics (stream
// order, p2p paid once, idle attribution, cycle and input errors) and a
// predicted trace that round-trips and never overlaps on one track.
#include "sim/event_engine.h"
#include "sim/dualpipev_time.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "core/program.h"
#include "core/trace.h"
#include "sim/simulate.h"
#include "tests/unit/core/program_test_support.h"

namespace loom {
namespace {

using program_testing::build;
using program_testing::cfg;

struct Costs {
  double fwd_s = 0, bwd_s = 0;  // per chunk per micro-batch (a split backward shares bwd_s)
  double p2p_s = 0, gather_s = 0, sync_s = 0, optimizer_s = 0;
  double wgrad_s = 0;  // the part of bwd_s a deferring backward leaves to its W
};

std::vector<double> durations(const Program& p, const Costs& c) {
  std::vector<double> d(p.ops.size());
  for (const Op& op : p.ops) {
    switch (op.kind) {
      case OpKind::kForward: d[op.id] = c.fwd_s; break;
      case OpKind::kBackward: d[op.id] = (c.bwd_s - (op.defers_wgrad ? c.wgrad_s : 0)) / op.num_parts; break;
      case OpKind::kWeightGrad: d[op.id] = c.wgrad_s; break;
      case OpKind::kSendActivation:
      case OpKind::kRecvActivation:
      case OpKind::kSendGrad:
      case OpKind::kRecvGrad: d[op.id] = c.p2p_s; break;
      case OpKind::kParamGather: d[op.id] = c.gather_s; break;
      case OpKind::kGradSync: d[op.id] = c.sync_s; break;
      case OpKind::kOptimizer: d[op.id] = c.optimizer_s; break;
    }
  }
  return d;
}

Timeline run(const Program& p, const Costs& c) {
  auto d = durations(p, c);
  auto r = run_event_engine(p, d);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  if (r.is_ok()) return std::move(r).value();
  Timeline empty;  // sized, so a failing case reports instead of crashing
  empty.ops.resize(p.ops.size());
  empty.compute_busy_s.resize(std::max(p.config.pp, 1));
  empty.idle.resize(std::max(p.config.pp, 1));
  return empty;
}

// GPipe and 1F1B: step = (m + p - 1)(t_f + t_b); every stage idles (p - 1)(t_f + t_b),
// i.e. a bubble fraction (p - 1)/(m + p - 1). Stage 0 waits for it all inside the step
// (pipeline_s); later stages finish their last backward early and wait in the tail.
TEST(EventEngine, GpipeAnd1F1BBubbleMatchesFormula) {
  const double tf = 1.0, tb = 2.0;
  for (Schedule sch : {Schedule::kGpipe, Schedule::k1F1B})
    for (int p : {1, 2, 3, 4, 8})
      for (int64_t m : {1, 2, 3, 4, 8, 16}) {
        SCOPED_TRACE(std::string(sch == Schedule::kGpipe ? "gpipe" : "1f1b") + " p=" + std::to_string(p) +
                     " m=" + std::to_string(m));
        Timeline t = run(build(cfg(sch, p, m)), {tf, tb});
        EXPECT_DOUBLE_EQ(t.step_time_s, (m + p - 1) * (tf + tb));
        for (int s = 0; s < p; ++s) {
          EXPECT_DOUBLE_EQ(t.compute_busy_s[s], m * (tf + tb));
          const StageIdle& idle = t.idle[s];
          EXPECT_DOUBLE_EQ(idle.pipeline_s + idle.tail_s, (p - 1) * (tf + tb)) << "stage " << s;
          EXPECT_EQ(idle.dp_comm_s, 0.0);
          EXPECT_NEAR((idle.pipeline_s + idle.tail_s) / t.step_time_s, double(p - 1) / (m + p - 1), 1e-12);
        }
        EXPECT_DOUBLE_EQ(t.idle[0].pipeline_s, (p - 1) * (tf + tb));
        EXPECT_DOUBLE_EQ(t.idle[0].tail_s, 0.0);
        // The last stage waits (p-1) forwards to start and drains (p-1) backwards early.
        EXPECT_DOUBLE_EQ(t.idle[p - 1].pipeline_s, (p - 1) * tf);
      }
}

// Interleaved with v chunks of t_f/v and t_b/v: bubble (p - 1)(t_f + t_b)/v.
TEST(EventEngine, InterleavedBubbleShrinksByV) {
  for (int p : {2, 4, 8})
    for (int v : {2, 3, 4})
      for (int64_t groups : {1, 2, 5}) {
        const int64_t m = groups * p;
        const double tf = 1.0 * v, tb = 2.0 * v;  // chunk durations 1 and 2: exact arithmetic
        SCOPED_TRACE("p=" + std::to_string(p) + " v=" + std::to_string(v) + " m=" + std::to_string(m));
        Timeline t = run(build(cfg(Schedule::kInterleaved, p, m, v)), {tf / v, tb / v});
        const double bubble = (p - 1) * (tf + tb) / v;
        EXPECT_DOUBLE_EQ(t.step_time_s, m * (tf + tb) + bubble);
        for (int s = 0; s < p; ++s) {
          EXPECT_DOUBLE_EQ(t.compute_busy_s[s], m * (tf + tb));
          EXPECT_DOUBLE_EQ(t.idle[s].pipeline_s + t.idle[s].tail_s, bubble) << "stage " << s;
        }
        // Strictly better than plain 1F1B with the same work.
        Timeline plain = run(build(cfg(Schedule::k1F1B, p, m)), {tf, tb});
        EXPECT_LT(t.step_time_s, plain.step_time_s);
      }
}

// DualPipeV without communication, chunk times F, B (W inside it): the step
// times of deepseek-ai/DualPipe's order (dualpipev.py DualPipeV.step)
// replayed by a separate script from the reference's loops, every stage
// busy 2m(F + B). Where W = F and B = 2F the idle is (p - 1)(F + B - 2W) =
// (p - 1)F on every stage, a third of interleaved 1F1B's (p - 1)(F + B) with
// the same two chunks per stage. The closed form's replay
// (dualpipev_pipeline_s) gives the same.
TEST(EventEngine, DualPipeVStepMatchesTheReferenceReplay) {
  struct Case {
    int p;
    int64_t m;
    double f, b, w, step;
  };
  for (const Case& k : {Case{2, 4, 1, 2, 1, 25}, Case{2, 4, 1, 2, 0.5, 26}, Case{4, 8, 1, 2, 0.5, 54.5},
                        Case{4, 12, 1, 2, 0.5, 78.5}, Case{3, 7, 1, 3, 1, 61}}) {
    SCOPED_TRACE("p=" + std::to_string(k.p) + " m=" + std::to_string(k.m) + " W=" + std::to_string(k.w));
    Costs c{k.f, k.b};
    c.wgrad_s = k.w;
    Timeline t = run(build(cfg(Schedule::kDualPipeV, k.p, k.m, 2)), c);
    EXPECT_DOUBLE_EQ(t.step_time_s, k.step);
    for (int s = 0; s < k.p; ++s) EXPECT_DOUBLE_EQ(t.compute_busy_s[s], 2.0 * k.m * (k.f + k.b));
    std::vector<DualPipeVStageTimes> times(size_t(k.p));
    for (auto& x : times)
      for (int ch = 0; ch < 2; ++ch) x.fwd[ch] = k.f, x.bwd[ch] = k.b, x.wgrad[ch] = k.w;
    EXPECT_DOUBLE_EQ(dualpipev_pipeline_s(k.p, k.m, times, 0.0), k.step);
  }
  for (int p : {2, 4, 8})
    for (int64_t m : {2 * int64_t(p), 5 * int64_t(p)}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      Costs c{1, 2};
      c.wgrad_s = 1;
      Timeline t = run(build(cfg(Schedule::kDualPipeV, p, m, 2)), c);
      for (int s = 0; s < p; ++s)
        EXPECT_DOUBLE_EQ(t.idle[s].pipeline_s + t.idle[s].tail_s, (p - 1) * 1.0) << "stage " << s;
      Timeline inter = run(build(cfg(Schedule::kInterleaved, p, m, 2)), {1, 2});
      EXPECT_DOUBLE_EQ(inter.step_time_s - 2.0 * m * 3, (p - 1) * 3.0);
      // The closed form extrapolates past 4p micro-batches at the slowest stage's rate.
      std::vector<DualPipeVStageTimes> times(static_cast<size_t>(p), DualPipeVStageTimes{});
      for (auto& x : times)
        for (int ch = 0; ch < 2; ++ch) x.fwd[ch] = 1, x.bwd[ch] = 2, x.wgrad[ch] = 1;
      EXPECT_DOUBLE_EQ(dualpipev_pipeline_s(p, 10 * p, times, 0.0), 2.0 * 10 * p * 3 + (p - 1));
    }
}

// The whole order replayed stage by stage to a fixed point, every
// micro-batch (the reference the closed form's cut-off replay is held to):
// each op starts when its stage is free and what it waits for is done, plus
// `t_p2p` across stages.
double dualpipev_full_replay(int P, int64_t m, const std::vector<DualPipeVStageTimes>& st, double t_p2p) {
  auto at = [&](int c, int s, int64_t i) { return (size_t(c) * size_t(P) + size_t(s)) * size_t(m) + size_t(i); };
  std::vector<double> fwd(2 * size_t(P) * size_t(m), -1), bwd(fwd.size(), -1), clock(size_t(P), 0);
  std::vector<std::vector<ComputeStep>> order(static_cast<size_t>(P));
  for (int s = 0; s < P; ++s) dualpipev_order(P, s, m, order[size_t(s)]);
  std::vector<size_t> next(size_t(P), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s)
      for (; next[size_t(s)] < order[size_t(s)].size(); ++next[size_t(s)]) {
        const ComputeStep& x = order[size_t(s)][next[size_t(s)]];
        const int c = x.chunk;
        const int64_t i = x.micro;
        double start = clock[size_t(s)], dep = 0;
        bool remote = true;
        if (!x.wgrad) {
          if (x.fwd)
            dep = (c == 0 && s == 0) ? (remote = false, 0.0)
                  : (c == 1 && s == P - 1) ? (remote = false, fwd[at(0, s, i)])
                  : c == 0 ? fwd[at(0, s - 1, i)] : fwd[at(1, s + 1, i)];
          else
            dep = (c == 1 && s == 0) ? (remote = false, fwd[at(1, 0, i)])
                  : (c == 0 && s == P - 1) ? (remote = false, bwd[at(1, s, i)])
                  : c == 1 ? bwd[at(1, s - 1, i)] : bwd[at(0, s + 1, i)];
          if (dep < 0) break;
          start = std::max(start, dep + (remote ? t_p2p : 0.0));
        }
        const DualPipeVStageTimes& d = st[size_t(s)];
        clock[size_t(s)] = start + (x.wgrad ? d.wgrad[c] : x.fwd ? d.fwd[c] : d.bwd[c] - (x.defers_wgrad ? d.wgrad[c] : 0));
        if (!x.wgrad) (x.fwd ? fwd : bwd)[at(c, s, i)] = clock[size_t(s)];
        progress = true;
      }
  }
  return *std::max_element(clock.begin(), clock.end());
}

// With stages that differ (a heavier stage 0, which holds the embedding and
// the head, and spread chunk times), the closed form replays min(m, 4p)
// micro-batches exactly and extrapolates the rest at the slowest stage's
// rate: within 1% of the whole order replayed, exact up to 4p (600 cases,
// p 2-16, m 2p-10p; the worst measured 0.9%).
TEST(EventEngine, DualPipeVClosedFormStaysWithinOnePercentOfTheWholeOrder) {
  std::mt19937 rng(1);  // the same cases on every machine
  auto uniform = [&](double lo, double hi) { return lo + (hi - lo) * double(rng() >> 8) / double(1u << 24); };
  double worst = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const int p = 2 + int(rng() % 15);
    const int64_t m = 2 * p + int64_t(rng() % uint32_t(8 * p));
    std::vector<DualPipeVStageTimes> st(static_cast<size_t>(p));
    for (int s = 0; s < p; ++s)
      for (int c = 0; c < 2; ++c) {
        // A third of the cases with equal interior stages, the rest all spread.
        const double f = (trial % 3 == 0 && s > 0) ? 1.0 : uniform(0.5, 2.0);
        st[size_t(s)].fwd[c] = f;
        st[size_t(s)].bwd[c] = f * uniform(1.75, 2.5);
        st[size_t(s)].wgrad[c] = st[size_t(s)].bwd[c] * uniform(0.25, 0.5);
      }
    if (trial % 5 == 1) {  // a heavy head on stage 0
      st[0].fwd[1] *= 3;
      st[0].bwd[1] *= 3;
    }
    const double t_p2p = trial % 2 ? 0.0 : uniform(0.0, 0.1);
    const double full = dualpipev_full_replay(p, m, st, t_p2p), got = dualpipev_pipeline_s(p, m, st, t_p2p);
    if (m <= 4 * p) EXPECT_NEAR(got, full, 1e-9 * full) << "p=" << p << " m=" << m;
    worst = std::max(worst, std::fabs(got / full - 1));
    EXPECT_LT(std::fabs(got / full - 1), 0.01) << "p=" << p << " m=" << m << " trial " << trial;
  }
  std::printf("DualPipeV closed form vs the whole order: worst %.2f%%\n", 100 * worst);
  EXPECT_GT(worst, 0);  // the cases do reach the extrapolation's error
}

TEST(EventEngine, SingleStageHasNoBubble) {
  for (Schedule sch : {Schedule::kGpipe, Schedule::k1F1B}) {
    Timeline t = run(build(cfg(sch, 1, 7)), {1.5, 2.5, 0, 0, 0, 0.25});
    EXPECT_DOUBLE_EQ(t.step_time_s, 7 * 4.0 + 0.25);
    EXPECT_EQ(t.idle[0].pipeline_s, 0.0);
    EXPECT_EQ(t.idle[0].dp_comm_s, 0.0);
    EXPECT_EQ(t.idle[0].tail_s, 0.0);
  }
  Timeline t = run(build(cfg(Schedule::kInterleaved, 1, 4, 2)), {0.5, 1.0});
  EXPECT_DOUBLE_EQ(t.step_time_s, 4 * 3.0);
  EXPECT_EQ(t.idle[0].pipeline_s, 0.0);
}

// A recv runs alongside its send, so each hop costs the transfer once:
// pp=2, m=1 crosses the stage boundary twice.
TEST(EventEngine, PointToPointIsPaidOncePerHop) {
  const double tf = 1, tb = 2, c = 0.25;
  Program p = build(cfg(Schedule::k1F1B, 2, 1));
  Timeline t = run(p, {tf, tb, c});
  EXPECT_DOUBLE_EQ(t.step_time_s, 2 * (tf + tb) + 2 * c);
  for (const Op& op : p.ops)
    if (op.kind == OpKind::kRecvActivation) {
      const OpTiming& send = t.ops[p.deps_of(op)[0]];
      EXPECT_DOUBLE_EQ(t.ops[op.id].start_s, send.start_s);
    }
  EXPECT_DOUBLE_EQ(t.idle[1].pipeline_s, tf + c);  // waited on the recv
}

// Blocking p2p (Megatron's batch_isend_irecv + wait): the sender's next
// compute op waits until its send has landed. Hand-worked, f = b = 1, each
// transfer x = 0.5, pp = 2, m = 2:
//  GPipe, async: s0 F0 [0,1] F1 [1,2]; s1 F0 [1.5,2.5] F1 [2.5,3.5] B0 [3.5,4.5]
//    B1 [4.5,5.5]; s0 B0 after the grad lands [5,6], B1 [6,7]: step 7.
//  GPipe, blocking: s0 F1 waits for send_act0 [1,1.5] -> F1 [1.5,2.5], its send
//    [2.5,3]; s1 F1 [3,4] B0 [4,5], B1 waits for send_grad0 [5,5.5] -> [5.5,6.5];
//    s0 B0 [5.5,6.5], B1 after grad1 lands at 7 -> [7,8]: step 8.
//  1F1B: s1's F1 needs s0's act 1 and s0's B0 needs s1's B0, so the round trip
//    is already on the path: step 7.5 both ways.
TEST(EventEngine, BlockingSendsCostTheSender) {
  const Costs c{1, 1, 0.5};
  auto step = [&](Schedule sch, bool blocking) {
    Program p = build(cfg(sch, 2, 2));
    if (blocking) return run(with_blocking_sends(p), c).step_time_s;
    auto d = durations(p, c);  // async: the transfer is timed on the recv alone, as simulate_layout does
    for (const Op& op : p.ops)
      if (op.kind == OpKind::kSendActivation || op.kind == OpKind::kSendGrad) d[op.id] = 0;
    return run_event_engine(p, d)->step_time_s;
  };
  EXPECT_DOUBLE_EQ(step(Schedule::kGpipe, false), 7.0);
  EXPECT_DOUBLE_EQ(step(Schedule::kGpipe, true), 8.0);
  EXPECT_DOUBLE_EQ(step(Schedule::k1F1B, false), 7.5);
  EXPECT_DOUBLE_EQ(step(Schedule::k1F1B, true), 7.5);
  // Op ids and the executor's program are kept; sends move to stages P + s.
  Program p = build(cfg(Schedule::k1F1B, 2, 2));
  Program b = with_blocking_sends(p);
  ASSERT_EQ(b.ops.size(), p.ops.size());
  ASSERT_EQ(b.stage_ops.size(), 4u);
  for (const Op& op : b.ops) {
    const bool send = op.kind == OpKind::kSendActivation || op.kind == OpKind::kSendGrad;
    EXPECT_EQ(op.stage, send ? p.ops[op.id].stage + 2 : p.ops[op.id].stage) << p.op_name(op);
  }
}

// Megatron's overlap_p2p_comm: the receive of each op's input is posted
// after the previous op of its direction, so in the steady state a transfer
// hides behind the op in between, and only the pipeline's fill and drain pay
// for hops: the first micro-batch's forward and the last one's backward each
// cross p·v - 1 chunk boundaries, so the step is the balanced bubble formula,
// m(t_f + t_b) + (p - 1)(t_f + t_b)/v (Narayanan et al. 2021, §2.2), plus
// 2(p·v - 1) transfers, whatever m is. Posted just before its consumer (the
// program's own order, which Loom's executor runs), every op with a receive
// waits for a whole transfer after the op before it finishes: the step pays
// about two per micro-batch and chunk.
TEST(EventEngine, PostedAheadRecvsHideSteadyStateTransfers) {
  for (int p : {2, 4, 8})
    for (int v : {2, 3})
      for (int64_t groups : {2, 5}) {
        const int64_t m = groups * p;
        const double f = 1.0, b = 2.0, x = 0.25;  // per chunk; every transfer shorter than any op
        SCOPED_TRACE("p=" + std::to_string(p) + " v=" + std::to_string(v) + " m=" + std::to_string(m));
        Program prog = build(cfg(Schedule::kInterleaved, p, m, v));
        const double ideal = m * v * (f + b) + (p - 1) * (f + b);
        Program ahead = with_posted_ahead_recvs(prog);
        ASSERT_EQ(ahead.ops.size(), prog.ops.size());
        ASSERT_EQ(ahead.stage_ops.size(), size_t(2 * p));
        const Timeline t = run(ahead, {f, b, x});  // sends last their transfer here
        EXPECT_NEAR(t.step_time_s, ideal + 2 * (p * v - 1) * x, 1e-9);  // the same for every m
        auto d = durations(prog, {f, b, x});
        for (const Op& op : prog.ops)
          if (op.kind == OpKind::kSendActivation || op.kind == OpKind::kSendGrad) d[op.id] = 0;
        const double just_in_time = run_event_engine(prog, d)->step_time_s;
        EXPECT_GE(just_in_time, ideal + 1.5 * double(m) * v * x);
      }
}

// The gradient norm's all-reduce is a barrier before the update
// (with_norm_barrier). 1F1B, p = 4, m = 8, F = 1, B = 2, no transfers: stage
// s's last backward ends at (m + p - 1)(F + B) - s·B = 33 - 2s (the last
// micro-batch's backward runs from the last stage to the first). With the
// last stage's update 6 long and the others' 1, each stage alone ends at
// 34 (stage 0) and 27 + 6 = 33 (stage 3): step 34. Behind the barrier every
// update starts at 33, when stage 0 has its gradients: step 39.
TEST(EventEngine, NormBarrierHoldsEveryUpdateForTheSlowestStage) {
  const int p = 4;
  const int64_t m = 8;
  ProgramConfig c = cfg(Schedule::k1F1B, p, m);
  Program prog = build(c);
  std::vector<double> d = durations(prog, {1.0, 2.0, 0.0, 0.0, 0.0, 1.0});
  for (const Op& op : prog.ops)
    if (op.kind == OpKind::kOptimizer && op.stage == p - 1) d[op.id] = 6.0;
  EXPECT_NEAR(run_event_engine(prog, d)->step_time_s, 34.0, 1e-9);
  const Program barrier = with_norm_barrier(prog);
  ASSERT_EQ(barrier.ops.size(), prog.ops.size());
  const Timeline t = *run_event_engine(barrier, d);
  EXPECT_NEAR(t.step_time_s, 39.0, 1e-9);
  for (const Op& op : prog.ops)
    if (op.kind == OpKind::kOptimizer) EXPECT_NEAR(t.ops[op.id].start_s, 33.0, 1e-9) << "stage " << op.stage;

  // With data parallelism each update also waits for every other stage's
  // gradient syncs.
  c.dp_comm = true;
  c.zero = 1;
  c.grad_buckets = 2;
  prog = build(c);
  const Program with_dp = with_norm_barrier(prog);
  for (const Op& op : with_dp.ops) {
    if (op.kind != OpKind::kOptimizer) continue;
    const auto deps = with_dp.deps_of(op);
    for (const Op& sync : prog.ops)
      if (sync.kind == OpKind::kGradSync)
        EXPECT_NE(std::find(deps.begin(), deps.end(), sync.id), deps.end())
            << "the update of stage " << op.stage << " does not wait for " << prog.op_name(sync);
  }
}

// FSDP / ZeRO-3 as the published stacks run it (with_layered_dp): each
// layer's parameters gathered one layer ahead of the layer that needs them,
// each layer's gradients reduce-scattered as its backward ends. With L
// uniform layers, a chunk gather P and a compute op C, the per-layer pipeline
// waits g = P/L for the first layer and then max(g, C/L) per layer, so the
// op is exposed to g while g <= C/L and to P - C(L - 1)/L beyond; before a
// backward the reduce-scatters of its first L - 1 layers share the cover, and
// the last layer's follows it. pp = 1, m = 1, L = 4: F = 4, B = 8, the gathers
// 2 each, the reduce-scatter 4.
//   layered: gathers 0.5 + 0.5 on the DP stream (the rest, 1.5 and 1.5 + 3 of
//   reduce-scatter, fits in 3 and 6); F [0.5, 4.5], B [4.5, 12.5], the last
//   layer's reduce-scatter [12.5, 13.5]: step 13.5 (the program as Loom's
//   executor runs it: gathers [0, 2] and [2, 4], F [2, 6], B [6, 14], the
//   reduce-scatter [14, 18]: 18).
//   gathers of 8 (g = 2 > C/L): the first layer's gathers stay on the DP
//   stream, [0, 2] and [2, 4]; F waits between its layers 6 - 4·3/4 = 3 and
//   B 6 + 3 - 8·3/4 = 3: F [2, 9] (layer by layer: 2 + 3·max(1, 2) + 1),
//   B [9, 20] (3·max(2, 2 + 1) + 2), the last reduce-scatter [20, 21].

// One stage with data-parallel ops: ZeRO `zero`, `buckets` gradient buckets.
Program dp_program(int64_t m, int zero, int buckets) {
  ProgramConfig pc = cfg(Schedule::k1F1B, 1, m);
  pc.dp_comm = true;
  pc.zero = zero;
  pc.grad_buckets = buckets;
  return build(pc);
}

TEST(EventEngine, LayeredDpFollowsThePerLayerPipeline) {
  Program p = dp_program(1, 3, 1);
  const std::vector<int> layers = {4};
  auto step = [&](double gather, bool layered, std::vector<double>* hidden_out) {
    auto d = durations(p, {4, 8, 0, gather, 4, 0});
    std::vector<double> hidden(p.ops.size(), 0.0), stall(p.ops.size(), 0.0);
    if (layered) with_layered_dp(p, layers, &d, &hidden, &stall);
    for (size_t i = 0; i < d.size(); ++i) d[i] += stall[i];  // as simulate_layout does
    if (hidden_out) *hidden_out = hidden;
    return run_event_engine(p, d)->step_time_s;
  };
  std::vector<double> hidden;
  EXPECT_DOUBLE_EQ(step(2, false, nullptr), 18.0);
  EXPECT_DOUBLE_EQ(step(2, true, &hidden), 13.5);
  double fwd_hidden = 0, bwd_hidden = 0;
  for (const Op& op : p.ops) {
    if (op.kind == OpKind::kForward) fwd_hidden = hidden[op.id];
    if (op.kind == OpKind::kBackward) bwd_hidden = hidden[op.id];
  }
  EXPECT_DOUBLE_EQ(fwd_hidden, 1.5);
  EXPECT_DOUBLE_EQ(bwd_hidden, 4.5);
  EXPECT_DOUBLE_EQ(step(8, true, nullptr), 21.0);
}

// Megatron's overlap_param_gather: the updated parameters of a chunk are
// gathered bucket by bucket before its first forward, which waits for the
// first bucket and for what the others cannot hide behind it. ZeRO-1, pp = 1,
// m = 2, F = 4, B = 8, 4 buckets: a gather of 2 costs its first bucket, 0.5;
// a gather of 8 costs 2 + (6 - 3) = 5, on the DP stream (later chunks'
// gathers queue behind it there, ahead of their forwards).
TEST(EventEngine, LayeredDpGathersBucketByBucket) {
  Program p = dp_program(2, 1, 4);
  const std::vector<int> layers = {32};  // not used by a step gather
  for (double gather : {2.0, 8.0}) {
    auto d = durations(p, {4, 8, 0, gather, 0, 0});
    std::vector<double> hidden, stall;
    with_layered_dp(p, layers, &d, &hidden, &stall);
    for (const Op& op : p.ops) {
      if (op.kind == OpKind::kParamGather) EXPECT_DOUBLE_EQ(d[op.id], gather == 2.0 ? 0.5 : 5.0);
      EXPECT_EQ(stall[op.id], 0.0);
    }
    const Timeline t = run_event_engine(p, d).value();
    for (const Op& op : p.ops)
      if (op.kind == OpKind::kForward && op.micro == 0) EXPECT_DOUBLE_EQ(t.ops[op.id].start_s, gather == 2.0 ? 0.5 : 5.0);
  }
}

// NIC sharing, by hand: pp = 2, m = 2, 1F1B, ZeRO-2 (a reduce-scatter after
// each backward, overlapped), f = b = 1, transfers 0.5, reduce-scatters 3.
// First timeline: s1 recv_act1 [3.5,4] runs under s1's RS(B0) [3.5,6.5]; s0
// recv_grad1 [6,6.5] under s0's RS(B0) [5,8]. Each shares the NIC for 0.5 s,
// so both recvs and both reduce-scatters last 0.5 s longer. Again: s1 F1
// [4.5,5.5] B1 [5.5,6.5], RS0 [3.5,7] RS1 [7,10]; s0 RS0 [5,8.5], recv_grad1
// [6.5,7.5], B1 [7.5,8.5], RS1 [8.5,11.5]: the step goes from 11 to 11.5.
TEST(EventEngine, NicSharingSlowsBothFlows) {
  ProgramConfig pc = cfg(Schedule::k1F1B, 2, 2);
  pc.dp_comm = true;
  pc.zero = 2;
  pc.grad_buckets = 1;
  pc.overlap_param_gather = false;
  Program p = build(pc);
  const Costs c{1, 1, 0.5, 0, 3, 0};
  auto d = durations(p, c);
  for (const Op& op : p.ops)
    if (op.kind == OpKind::kSendActivation || op.kind == OpKind::kSendGrad) d[op.id] = 0;
  auto first = run_event_engine(p, d);
  ASSERT_TRUE(first.is_ok());
  EXPECT_DOUBLE_EQ(first->step_time_s, 11.0);
  std::vector<double> net(p.ops.size(), 0.0);
  for (const Op& op : p.ops)
    if (op.kind == OpKind::kRecvActivation || op.kind == OpKind::kRecvGrad) net[op.id] = 1.0;
  std::vector<double> added;
  const std::vector<double> shared = with_nic_sharing(p, *first, d, net, 2, &added);
  int recvs_slowed = 0, syncs_slowed = 0;
  for (const Op& op : p.ops) {
    const double extra = shared[op.id] - d[op.id];
    if (extra == 0) continue;
    EXPECT_DOUBLE_EQ(extra, 0.5) << p.op_name(op);
    recvs_slowed += op.kind == OpKind::kRecvActivation || op.kind == OpKind::kRecvGrad;
    syncs_slowed += op.kind == OpKind::kGradSync;
  }
  EXPECT_EQ(recvs_slowed, 2);
  EXPECT_EQ(syncs_slowed, 2);
  EXPECT_EQ(added, std::vector<double>({0.0, 0.0}));  // no compute op carried network time
  auto second = run_event_engine(p, shared);
  ASSERT_TRUE(second.is_ok());
  EXPECT_DOUBLE_EQ(second->step_time_s, 11.5);
}

// Every schedule the builder makes stays acyclic with blocking sends (the
// interleaved ones with receives posted ahead too), ZeRO gathers and syncs
// included, and no stage finishes before its compute.
TEST(EventEngine, BlockingSendsNeverDeadlock) {
  for (Schedule sch : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved})
    for (int pp : {2, 3, 4, 8})
      for (int v : {1, 2, 3}) {
        if ((sch == Schedule::kInterleaved) != (v > 1)) continue;
        for (int64_t m : {int64_t(pp), int64_t(2 * pp), int64_t(4 * pp)})
          for (int zero : {0, 1, 3}) {
            ProgramConfig pc = cfg(sch, pp, m, v);
            pc.dp_comm = true;
            pc.zero = zero;
            pc.grad_buckets = 2;
            auto prog = build_program(pc);
            if (!prog.is_ok()) continue;  // e.g. m not a multiple of pp for interleaved
            Program b = with_blocking_sends(*prog);
            auto d = durations(b, {1e-3, 2e-3, 3e-4, 2e-4, 5e-4, 1e-4});
            auto t = run_event_engine(b, d);
            ASSERT_TRUE(t.is_ok()) << schedule_name(sch) << " pp=" << pp << " v=" << v << " m=" << m
                                   << " zero=" << zero << ": " << t.status().to_string();
            EXPECT_GE(t->step_time_s, double(m) * v * 3e-3 - 1e-12);
            if (sch != Schedule::kInterleaved) continue;
            Program a = with_posted_ahead_recvs(*prog);
            auto ta = run_event_engine(a, durations(a, {1e-3, 2e-3, 3e-4, 2e-4, 5e-4, 1e-4}));
            ASSERT_TRUE(ta.is_ok()) << "posted ahead, pp=" << pp << " v=" << v << " m=" << m << " zero=" << zero
                                    << ": " << ta.status().to_string();
            EXPECT_GE(ta->step_time_s, double(m) * v * 3e-3 - 1e-12);
          }
      }
}

// Hand-built program: two stages, streams overlap, an op starts at
// max(previous op on its stream, its deps).
TEST(EventEngine, StreamOrderAndDeps) {
  Program p;
  p.config.pp = 2;
  p.stage_ops.resize(2);
  auto add = [&](OpKind k, Stream st, int stage, std::vector<int32_t> deps) {
    Op op;
    op.id = static_cast<int32_t>(p.ops.size());
    op.kind = k;
    op.stream = st;
    op.stage = static_cast<int16_t>(stage);
    op.micro = op.id;
    op.dep_begin = static_cast<int32_t>(p.deps.size());
    op.dep_count = static_cast<int32_t>(deps.size());
    p.deps.insert(p.deps.end(), deps.begin(), deps.end());
    p.ops.push_back(op);
    p.stage_ops[stage].push_back(op.id);
    return op.id;
  };
  int a = add(OpKind::kForward, Stream::kCompute, 0, {});          // [0, 3]
  int g = add(OpKind::kGradSync, Stream::kDpComm, 0, {a});         // [3, 8]
  int b = add(OpKind::kForward, Stream::kCompute, 0, {});          // [3, 4]: overlaps g
  int c = add(OpKind::kForward, Stream::kCompute, 0, {g});         // [8, 9]: waits on g
  int d = add(OpKind::kBackward, Stream::kCompute, 1, {b});        // [4, 6]
  int e = add(OpKind::kOptimizer, Stream::kCompute, 1, {});        // [6, 7]
  int f = add(OpKind::kForward, Stream::kCompute, 1, {c, g});      // [9, 10]: c (9) ends after g (8)
  std::vector<double> dur = {3, 5, 1, 1, 2, 1, 1};
  auto r = run_event_engine(p, dur);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Timeline& t = *r;
  EXPECT_DOUBLE_EQ(t.ops[g].start_s, 3);
  EXPECT_DOUBLE_EQ(t.ops[b].start_s, 3);
  EXPECT_DOUBLE_EQ(t.ops[c].start_s, 8);
  EXPECT_DOUBLE_EQ(t.ops[d].start_s, 4);
  EXPECT_DOUBLE_EQ(t.ops[e].start_s, 6);
  EXPECT_DOUBLE_EQ(t.ops[f].start_s, 9);
  EXPECT_DOUBLE_EQ(t.step_time_s, 10);
  EXPECT_DOUBLE_EQ(t.compute_busy_s[0], 5);
  EXPECT_DOUBLE_EQ(t.compute_busy_s[1], 4);
  EXPECT_DOUBLE_EQ(t.idle[0].dp_comm_s, 4);  // 4..8 waiting on the grad sync
  EXPECT_DOUBLE_EQ(t.idle[0].pipeline_s, 0);
  EXPECT_DOUBLE_EQ(t.idle[0].tail_s, 1);
  EXPECT_DOUBLE_EQ(t.idle[1].pipeline_s, 4 + 2);  // 0..4 on b, 7..9 on c (the later of c and g)
  EXPECT_DOUBLE_EQ(t.idle[1].dp_comm_s, 0);
  EXPECT_DOUBLE_EQ(t.idle[1].tail_s, 0);
}

TEST(EventEngine, DetectsCycles) {
  // Two ops that wait on each other.
  Program p;
  p.stage_ops.resize(2);
  p.deps = {1, 0};
  for (int i = 0; i < 2; ++i) {
    Op op;
    op.id = i;
    op.stage = static_cast<int16_t>(i);
    op.dep_begin = i;
    op.dep_count = 1;
    p.ops.push_back(op);
    p.stage_ops[i].push_back(i);
  }
  std::vector<double> dur = {1, 1};
  auto r = run_event_engine(p, dur);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("cycle"), std::string::npos);

  // A cycle through stream order: op 0 comes first on the stream but depends on op 1.
  Program q = p;
  q.stage_ops = {{0, 1}};
  q.ops[1].stage = 0;
  q.deps = {1};
  q.ops[0].dep_count = 1;
  q.ops[1].dep_count = 0;
  q.ops[1].dep_begin = 1;
  r = run_event_engine(q, dur);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);

  // A real program with one back edge added: fwd mb0 on stage 0 waits on bwd mb0 of stage 1.
  Program big = build(cfg(Schedule::k1F1B, 2, 4));
  int32_t bwd = -1;
  for (const Op& op : big.ops)
    if (op.kind == OpKind::kBackward && op.stage == 1 && op.micro == 0) bwd = op.id;
  Op& fwd0 = big.ops[big.stage_ops[0][0]];
  ASSERT_EQ(fwd0.kind, OpKind::kForward);
  fwd0.dep_begin = static_cast<int32_t>(big.deps.size());
  fwd0.dep_count = 1;
  big.deps.push_back(bwd);
  auto d = durations(big, {1, 2});
  auto rb = run_event_engine(big, d);
  ASSERT_FALSE(rb.is_ok());
  EXPECT_EQ(rb.status().code(), StatusCode::kInternal);
}

TEST(EventEngine, RejectsBadInput) {
  Program p = build(cfg(Schedule::k1F1B, 2, 2));
  auto d = durations(p, {1, 2});
  std::vector<double> short_d(d.begin(), d.end() - 1);
  EXPECT_EQ(run_event_engine(p, short_d).status().code(), StatusCode::kInvalidArgument);
  d[3] = -1;
  EXPECT_EQ(run_event_engine(p, d).status().code(), StatusCode::kInvalidArgument);
  d[3] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(run_event_engine(p, d).status().code(), StatusCode::kInvalidArgument);
  d[3] = 1;
  Program broken = p;
  broken.deps[0] = static_cast<int32_t>(p.ops.size()) + 5;
  EXPECT_EQ(run_event_engine(broken, d).status().code(), StatusCode::kInternal);
  Program unlisted = p;
  unlisted.stage_ops[1].pop_back();
  EXPECT_EQ(run_event_engine(unlisted, d).status().code(), StatusCode::kInternal);
}

ProgramConfig dp_cfg(int zero, bool overlap) {
  ProgramConfig c = cfg(Schedule::k1F1B, 2, 4);
  c.dp_comm = true;
  c.zero = zero;
  c.grad_buckets = 4;
  c.overlap_grad_reduce = overlap;
  c.overlap_param_gather = overlap;
  return c;
}

TEST(EventEngine, GradSyncOverlapShortensTheStep) {
  const Costs costs{1, 2, 0, 0.2, 1.5, 0.1};  // 4 buckets x 1.5 s: significant vs a 2 s backward
  for (int zero : {0, 1, 2}) {
    SCOPED_TRACE("zero=" + std::to_string(zero));
    Timeline on = run(build(dp_cfg(zero, true)), costs);
    Timeline off = run(build(dp_cfg(zero, false)), costs);
    EXPECT_LT(on.step_time_s, off.step_time_s);
    // Without overlap the DP sync is exposed and attributed to DP comm.
    EXPECT_GT(off.idle[0].dp_comm_s, 0.0);
  }
}

TEST(EventEngine, Zero3PrefetchHidesGathers) {
  const Costs costs{1, 2, 0, 0.8, 0.5, 0};
  Timeline on = run(build(dp_cfg(3, true)), costs);
  Timeline off = run(build(dp_cfg(3, false)), costs);
  EXPECT_LT(on.step_time_s, off.step_time_s);
  for (int s = 0; s < 2; ++s) EXPECT_LT(on.idle[s].dp_comm_s, off.idle[s].dp_comm_s);

  // One stage, m=2 (order F0 B0 F1 B1), worked by hand. Without overlap each
  // compute op waits for its own gather after the previous op, F1 also for the
  // blocking reduce-scatter of B0, the optimizer for the last reduce-scatter:
  //   g0 0-.8 F0 .8-1.8 | g1 -2.6 B0 -4.6 | g2 -5.4 rs0 -5.9 F1 -6.9 | g3 -7.7 B1 -9.7 | rs1 -10.2 opt
  ProgramConfig c = cfg(Schedule::k1F1B, 1, 2);
  c.dp_comm = true;
  c.zero = 3;
  c.overlap_grad_reduce = c.overlap_param_gather = false;
  Timeline t = run(build(c), costs);
  EXPECT_NEAR(t.step_time_s, 10.2, 1e-12);
  EXPECT_NEAR(t.idle[0].dp_comm_s, 0.8 + 0.8 + 1.3 + 0.8 + 0.5, 1e-12);
  EXPECT_EQ(t.idle[0].pipeline_s, 0.0);
  // With prefetch (gather i waits on op i-2) and overlapped reduce-scatters:
  //   g0 0-.8 g1 -1.6 | F0 .8-1.8 | g2 -2.6 | B0 1.8-3.8 | g3 -4.6 rs0 -5.1 | F1 3.8-4.8 B1 -6.8 | rs1 -7.3 opt
  c.overlap_grad_reduce = c.overlap_param_gather = true;
  t = run(build(c), costs);
  EXPECT_NEAR(t.step_time_s, 7.3, 1e-12);
  EXPECT_NEAR(t.idle[0].dp_comm_s, 0.8 + 0.5, 1e-12);
}

// The predicted per-stage trace: one pid per stage, one tid per stream.
Trace trace_of(const Program& p, const Timeline& t) {
  Trace tr;
  tr.kind = "predicted";
  tr.plan_hash = "0123456789abcdef";
  for (int s = 0; s < p.config.pp; ++s) tr.process_names.push_back("stage " + std::to_string(s));
  for (int k = 0; k < kNumStreams; ++k) tr.thread_names.push_back(stream_name(static_cast<Stream>(k)));
  for (const Op& op : p.ops) {
    TraceEvent e;
    e.name = p.op_name(op);
    e.cat = op_kind_name(op.kind);
    e.pid = op.stage;
    e.tid = static_cast<int>(op.stream);
    e.ts_us = t.ops[op.id].start_s * 1e6;
    e.dur_us = t.ops[op.id].end_s * 1e6 - e.ts_us;
    e.op_id = op.id;
    e.micro = op.micro;
    e.stage = op.stage;
    e.chunk = op.chunk;
    e.bytes = op.kind == OpKind::kForward || op.kind == OpKind::kBackward ? 0 : 1 << 20;
    tr.events.push_back(e);
  }
  return tr;
}

TEST(EventEngine, PredictedTraceRoundTripsWithoutOverlaps) {
  ProgramConfig c = cfg(Schedule::kInterleaved, 4, 8, 2);
  c.dp_comm = true;
  c.zero = 3;
  Program p = build(c);
  Timeline t = run(p, {1e-3, 2e-3, 1e-4, 3e-4, 5e-4, 1e-4});
  Trace tr = trace_of(p, t);
  auto back = parse_trace(trace_to_json(tr));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_EQ(back->events.size(), tr.events.size());
  for (size_t i = 0; i < tr.events.size(); ++i) {
    EXPECT_EQ(back->events[i].name, tr.events[i].name);
    EXPECT_EQ(back->events[i].ts_us, tr.events[i].ts_us);
    EXPECT_EQ(back->events[i].dur_us, tr.events[i].dur_us);
    EXPECT_EQ(back->events[i].op_id, tr.events[i].op_id);
  }
  // Each (pid, tid) is one serial stream: sorted by start, no slice begins before the previous ends.
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  for (const TraceEvent& e : back->events) tracks[{e.pid, e.tid}].push_back({e.ts_us, e.ts_us + e.dur_us});
  EXPECT_EQ(tracks.size(), 4u * 3u);
  for (auto& [key, slices] : tracks) {
    std::sort(slices.begin(), slices.end());
    for (size_t i = 1; i < slices.size(); ++i)
      EXPECT_GE(slices[i].first, slices[i - 1].second - 1e-9) << "pid " << key.first << " tid " << key.second;
  }
}

// Linear time: pp=16, m=512, v=4 (~200k ops) must not take anywhere near a
// second even unoptimized; a quadratic pass would take minutes.
TEST(EventEngine, LargeProgramIsFast) {
  Program p = build(cfg(Schedule::kInterleaved, 16, 512, 4));
  auto d = durations(p, {1, 2, 0.01});
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_event_engine(p, d);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.is_ok());
  EXPECT_LT(ms, 1000.0);
  EXPECT_GT(r->step_time_s, 512 * 3.0);
}

}  // namespace
}  // namespace loom
