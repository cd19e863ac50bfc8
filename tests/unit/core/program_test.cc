// Program builder: schedule orders checked against hand-written sequences and
// Megatron's published schedule, structural invariants over many configs, the
// activation-memory bound each schedule promises (formulas.md), and the DP ops.
#include "core/program.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "tests/unit/core/program_test_support.h"

namespace loom {
namespace {

using namespace program_testing;

// Compute order of a stage as "F<micro>"/"B<micro>" (chunk appended as ".c" when v > 1).
std::vector<std::string> order(const Program& p, int s) {
  std::vector<std::string> out;
  for (int32_t id : p.stage_ops[s]) {
    const Op& op = p.ops[id];
    if (op.kind != OpKind::kForward && op.kind != OpKind::kBackward) continue;
    if (op.kind == OpKind::kBackward && op.part > 0) continue;
    std::string x(1, op.kind == OpKind::kForward ? 'F' : 'B');
    x += std::to_string(op.micro);
    if (p.config.virtual_stages > 1) x += '.' + std::to_string(op.chunk);
    out.push_back(x);
  }
  return out;
}

const Op* find_op(const Program& p, OpKind kind, int stage, int chunk, int micro, int part = 0) {
  for (const Op& op : p.ops)
    if (op.kind == kind && op.stage == stage && op.chunk == chunk && op.micro == micro && op.part == part) return &op;
  return nullptr;
}

TEST(Program, RejectsImpossibleConfigs) {
  struct Case {
    ProgramConfig c;
    const char* field;
  };
  ProgramConfig bad_zero = cfg(Schedule::k1F1B, 2, 4);
  bad_zero.zero = 4;
  ProgramConfig bad_buckets = cfg(Schedule::k1F1B, 2, 4);
  bad_buckets.grad_buckets = 0;
  std::vector<Case> cases = {
      {cfg(Schedule::k1F1B, 4, 0), "micro_batches"},
      {cfg(Schedule::kGpipe, 0, 4), "pp"},
      {cfg(Schedule::kInterleaved, 4, 8, 1), "virtual_stages"},
      {cfg(Schedule::kInterleaved, 4, 6, 2), "divisible by pp"},
      {cfg(Schedule::k1F1B, 4, 8, 2), "schedule=interleaved"},
      {bad_zero, "zero"},
      {bad_buckets, "grad_buckets"},
      {cfg(Schedule::kDualPipeV, 4, 7, 2), "micro_batches >= 2*pp"},
      {cfg(Schedule::kDualPipeV, 4, 8, 3), "v=2"},
      {cfg(Schedule::kDualPipeV, 1, 8, 2), "pp >= 2"},
  };
  for (const Case& c : cases) {
    auto r = build_program(c.c);
    ASSERT_FALSE(r.is_ok()) << c.field;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << r.status().message();
  }
}

TEST(Program, GpipeRunsAllForwardsThenAllBackwards) {
  Program p = build(cfg(Schedule::kGpipe, 3, 4));
  for (int s = 0; s < 3; ++s) EXPECT_EQ(order(p, s), split("F0 F1 F2 F3 B0 B1 B2 B3")) << "stage " << s;
}

TEST(Program, OneF1BOrderMatchesPipeDreamFlush) {
  Program p = build(cfg(Schedule::k1F1B, 4, 6));
  EXPECT_EQ(order(p, 0), split("F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5"));
  EXPECT_EQ(order(p, 1), split("F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5"));
  EXPECT_EQ(order(p, 2), split("F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5"));
  EXPECT_EQ(order(p, 3), split("F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5"));
  // Fewer micro-batches than stages: warm-up takes all of them.
  Program q = build(cfg(Schedule::k1F1B, 4, 2));
  EXPECT_EQ(order(q, 0), split("F0 F1 B0 B1"));
  EXPECT_EQ(order(q, 3), split("F0 B0 F1 B1"));
}

TEST(Program, InterleavedOrderMatchesMegatron) {
  // pp=2, v=2, m=4; written out from Megatron's get_model_chunk_id (groups of pp).
  Program p = build(cfg(Schedule::kInterleaved, 2, 4, 2));
  EXPECT_EQ(order(p, 0), split("F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0"));
  EXPECT_EQ(order(p, 1), split("F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0"));
}

TEST(Program, InvariantsHoldForEverySchedule) {
  for (int pp : {1, 2, 3, 4, 8})
    for (int64_t m : {1, 2, 3, 4, 7, 8, 16}) {
      check_invariants(build(cfg(Schedule::kGpipe, pp, m)));
      check_invariants(build(cfg(Schedule::k1F1B, pp, m)));
      for (int v : {2, 3, 4})
        if (m % pp == 0) check_invariants(build(cfg(Schedule::kInterleaved, pp, m, v)));
      if (pp >= 2 && m >= 2 * pp) check_invariants(build(cfg(Schedule::kDualPipeV, pp, m, 2)));
    }
}

TEST(Program, InvariantsHoldWithDataParallelOps) {
  for (Schedule sch : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved})
    for (int zero : {0, 1, 2, 3})
      for (bool overlap : {true, false})
        for (int buckets : {1, 3}) {
          ProgramConfig c = cfg(sch, 4, 8, sch == Schedule::kInterleaved ? 2 : 1);
          c.dp_comm = true;
          c.zero = zero;
          c.grad_buckets = buckets;
          c.overlap_grad_reduce = overlap;
          c.overlap_param_gather = !overlap;
          check_invariants(build(c));
        }
}

TEST(Program, OneF1BBoundsMicroBatchesInFlight) {
  for (int pp : {1, 2, 4, 8})
    for (int64_t m : {1, 3, 4, 8, 32}) {
      Program f = build(cfg(Schedule::k1F1B, pp, m));
      Program g = build(cfg(Schedule::kGpipe, pp, m));
      for (int s = 0; s < pp; ++s) {
        EXPECT_EQ(max_in_flight(f, s), std::min<int64_t>(pp - s, m)) << "1f1b pp=" << pp << " m=" << m << " s=" << s;
        EXPECT_EQ(max_in_flight(g, s), m) << "gpipe pp=" << pp << " m=" << m << " s=" << s;
      }
    }
}

TEST(Program, InterleavedFirstStageHoldsKorthikantiFactor) {
  // formulas.md: interleaving multiplies the first stage's activations by
  // (1 + (p-1)/(p*v)) over 1F1B's p micro-batches; a chunk holds 1/v of them.
  for (int pp : {2, 4, 8})
    for (int v : {2, 3, 4}) {
      Program p = build(cfg(Schedule::kInterleaved, pp, 4 * pp, v));
      double stage_units = double(max_in_flight(p, 0)) / v;
      EXPECT_DOUBLE_EQ(stage_units, pp * (1.0 + double(pp - 1) / (pp * v))) << "pp=" << pp << " v=" << v;
    }
}

TEST(Program, InterleavedLastStageFeedsNextChunkOfFirstStage) {
  Program p = build(cfg(Schedule::kInterleaved, 4, 8, 3));
  EXPECT_EQ(find_op(p, OpKind::kRecvActivation, 0, 0, 5), nullptr);  // global chunk 0 reads the data
  EXPECT_EQ(find_op(p, OpKind::kRecvGrad, 3, 2, 5), nullptr);        // last global chunk computes the loss
  const Op* recv = find_op(p, OpKind::kRecvActivation, 0, 2, 5);
  ASSERT_NE(recv, nullptr);
  const Op& send = p.ops[p.deps_of(*recv)[0]];
  EXPECT_EQ(p.op_name(send), "send_act s3 c1 mb5");
  const Op* rg = find_op(p, OpKind::kRecvGrad, 3, 0, 5);
  ASSERT_NE(rg, nullptr);
  EXPECT_EQ(p.op_name(p.ops[p.deps_of(*rg)[0]]), "send_grad s0 c1 mb5");
}

TEST(Program, SingleStageInterleavedHasNoTransfers) {
  Program p = build(cfg(Schedule::kInterleaved, 1, 4, 2));
  for (const Op& op : p.ops) EXPECT_NE(op.stream, Stream::kPpComm) << p.op_name(op);
  check_invariants(p);
}

TEST(Program, OpNames) {
  ProgramConfig c = cfg(Schedule::kInterleaved, 2, 4, 2);
  c.dp_comm = true;
  c.zero = 1;
  c.grad_buckets = 3;
  Program p = build(c);
  std::set<std::string> names;
  for (const Op& op : p.ops) names.insert(p.op_name(op));
  for (const char* want : {"fwd s1 c0 mb3", "bwd s0 c1 mb1", "bwd s0 c0 mb3 p2", "grad_sync s0 c1 b2", "optimizer s1",
                           "recv_act s1 c0 mb3", "send_grad s1 c1 mb0", "param_gather s0 c1"})
    EXPECT_TRUE(names.count(want)) << want;
}

ProgramConfig dp_cfg(int zero, int buckets, bool overlap_grad, bool overlap_param) {
  ProgramConfig c = cfg(Schedule::k1F1B, 2, 4);
  c.dp_comm = true;
  c.zero = zero;
  c.grad_buckets = buckets;
  c.overlap_grad_reduce = overlap_grad;
  c.overlap_param_gather = overlap_param;
  return c;
}

std::vector<const Op*> ops_of(const Program& p, int s, OpKind kind) {
  std::vector<const Op*> out;
  for (int32_t id : p.stage_ops[s])
    if (p.ops[id].kind == kind) out.push_back(&p.ops[id]);
  return out;
}

TEST(Program, BucketsFollowThePartsOfTheLastBackward) {
  Program p = build(dp_cfg(1, 4, true, true));
  for (int s = 0; s < 2; ++s) {
    auto syncs = ops_of(p, s, OpKind::kGradSync);
    ASSERT_EQ(syncs.size(), 4u);
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(syncs[k]->micro, -1);
      EXPECT_EQ(syncs[k]->part, k);
      ASSERT_EQ(syncs[k]->dep_count, 1);
      const Op& part = p.ops[p.deps_of(*syncs[k])[0]];
      EXPECT_EQ(part.kind, OpKind::kBackward);
      EXPECT_EQ(part.micro, 3);  // the stage's last backward
      EXPECT_EQ(part.part, k);
      EXPECT_EQ(part.num_parts, 4);
    }
    for (const Op* b : ops_of(p, s, OpKind::kBackward)) {
      EXPECT_EQ(b->num_parts, b->micro == 3 ? 4 : 1) << p.op_name(*b);
    }
    auto opt = ops_of(p, s, OpKind::kOptimizer);
    ASSERT_EQ(opt.size(), 1u);
    EXPECT_EQ(opt[0]->dep_count, 4);
    // ZeRO-1: the updated parameters are gathered during the next forwards.
    auto gathers = ops_of(p, s, OpKind::kParamGather);
    ASSERT_EQ(gathers.size(), 1u);
    EXPECT_EQ(gathers[0]->micro, -1);
    const Op* first_fwd = ops_of(p, s, OpKind::kForward)[0];
    auto deps = p.deps_of(*first_fwd);
    EXPECT_NE(std::find(deps.begin(), deps.end(), gathers[0]->id), deps.end());
  }
  // Without overlap: one unsplit backward, all buckets after it; gather after the optimizer.
  Program q = build(dp_cfg(1, 4, false, false));
  for (int s = 0; s < 2; ++s) {
    auto bwds = ops_of(q, s, OpKind::kBackward);
    for (const Op* b : bwds) EXPECT_EQ(b->num_parts, 1);
    for (const Op* g : ops_of(q, s, OpKind::kGradSync)) {
      ASSERT_EQ(g->dep_count, 1);
      EXPECT_EQ(q.deps_of(*g)[0], bwds.back()->id);
    }
    const Op* opt = ops_of(q, s, OpKind::kOptimizer)[0];
    auto gathers = ops_of(q, s, OpKind::kParamGather);
    ASSERT_EQ(gathers.size(), 1u);
    ASSERT_EQ(gathers[0]->dep_count, 1);
    EXPECT_EQ(q.deps_of(*gathers[0])[0], opt->id);
  }
}

// chunk_grad_buckets (a published stack's own buckets, e.g. Megatron-core's
// on pipeline rank 0's first chunk only): each chunk's syncs and the split of
// its last backward follow its own count; the invariants still hold.
TEST(Program, EachChunkSplitsIntoItsOwnBuckets) {
  ProgramConfig c = dp_cfg(1, 4, true, true);
  c.chunk_grad_buckets = {6, 1};  // stage 0: 6 buckets, stage 1: one
  Program p = build(c);
  const size_t want[2] = {6, 1};
  for (int s = 0; s < 2; ++s) {
    auto syncs = ops_of(p, s, OpKind::kGradSync);
    ASSERT_EQ(syncs.size(), want[s]);
    for (const Op* b : ops_of(p, s, OpKind::kBackward))
      EXPECT_EQ(b->num_parts, b->micro == 3 && want[s] > 1 ? int(want[s]) : 1) << p.op_name(*b);
    for (size_t k = 0; k < syncs.size(); ++k) {
      const Op& part = p.ops[p.deps_of(*syncs[k])[0]];
      EXPECT_EQ(part.micro, 3);
      EXPECT_EQ(part.part, int(k));
    }
    EXPECT_EQ(ops_of(p, s, OpKind::kOptimizer)[0]->dep_count, int(want[s]));
  }
  check_invariants(p);
  // Written to the JSON (and so to the hash) only when set; read back whole.
  ProgramConfig uniform = dp_cfg(1, 4, true, true);
  EXPECT_EQ(program_config_to_json(uniform).find("chunk_grad_buckets"), std::string::npos);
  auto back = parse_program_config(program_config_to_json(c), "program");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->chunk_grad_buckets, c.chunk_grad_buckets);
  EXPECT_NE(program_hash(c), program_hash(uniform));
  // A count per chunk, each in range.
  ProgramConfig short_list = c;
  short_list.chunk_grad_buckets = {6};
  EXPECT_FALSE(build_program(short_list).is_ok());
  ProgramConfig zero = c;
  zero.chunk_grad_buckets = {6, 0};
  EXPECT_FALSE(build_program(zero).is_ok());
  std::string text = program_config_to_json(c);
  text.replace(text.find("[6,1]"), 5, "[6]");
  auto bad = parse_program_config(text, "plan: program");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("chunk_grad_buckets"), std::string::npos) << bad.status().message();
}

// syncs_after_backward (FSDP's post-backward under a pipeline): the last
// backward stays whole and every bucket of the chunk follows it, with the
// overlap kept (the next step's forwards still wait only for the gather).
// Written to the JSON only when set, so other programs keep their hash.
TEST(Program, SyncsAfterTheWholeLastBackward) {
  ProgramConfig c = dp_cfg(1, 4, true, true);
  const std::string plain = program_config_to_json(c);
  c.syncs_after_backward = true;
  Program p = build(c);
  for (int s = 0; s < 2; ++s) {
    auto bwds = ops_of(p, s, OpKind::kBackward);
    for (const Op* b : bwds) EXPECT_EQ(b->num_parts, 1) << p.op_name(*b);
    auto syncs = ops_of(p, s, OpKind::kGradSync);
    ASSERT_EQ(syncs.size(), 4u);
    for (const Op* g : syncs) {
      ASSERT_EQ(g->dep_count, 1);
      EXPECT_EQ(p.deps_of(*g)[0], bwds.back()->id);
    }
    EXPECT_EQ(ops_of(p, s, OpKind::kParamGather).size(), 1u);
  }
  EXPECT_EQ(plain.find("syncs_after_backward"), std::string::npos);
  auto back = parse_program_config(program_config_to_json(c), "program");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_TRUE(back->syncs_after_backward);
  EXPECT_EQ(program_config_diff(c, *back), "");
  EXPECT_NE(program_hash(c), program_hash(dp_cfg(1, 4, true, true)));
}

TEST(Program, UnoverlappedBucketsFollowChunkOrder) {
  // Stage 0 of pp=2, v=2, m=4 ends "... B3.1 B2.0 B3.0": chunk 1 finishes first.
  ProgramConfig c = cfg(Schedule::kInterleaved, 2, 4, 2);
  c.dp_comm = true;
  c.grad_buckets = 2;
  c.overlap_grad_reduce = false;
  Program p = build(c);
  std::vector<std::string> names;
  for (const Op* g : ops_of(p, 0, OpKind::kGradSync)) names.push_back(p.op_name(*g));
  EXPECT_EQ(names, (std::vector<std::string>{"grad_sync s0 c1 b0", "grad_sync s0 c1 b1", "grad_sync s0 c0 b0",
                                             "grad_sync s0 c0 b1"}));
}

TEST(Program, Zero2ReduceScattersEveryBackward) {
  Program p = build(dp_cfg(2, 4, true, true));
  for (int s = 0; s < 2; ++s) {
    auto syncs = ops_of(p, s, OpKind::kGradSync);
    ASSERT_EQ(syncs.size(), 4u);  // one per micro-batch, not per bucket
    for (const Op* g : syncs) {
      ASSERT_EQ(g->dep_count, 1);
      const Op& b = p.ops[p.deps_of(*g)[0]];
      EXPECT_EQ(b.kind, OpKind::kBackward);
      EXPECT_EQ(b.micro, g->micro);
    }
  }
}

TEST(Program, Zero3GathersRunAheadOfCompute) {
  for (bool prefetch : {true, false}) {
    Program p = build(dp_cfg(3, 1, true, prefetch));
    const int ahead = prefetch ? 2 : 1;
    for (int s = 0; s < 2; ++s) {
      std::vector<const Op*> compute;
      for (int32_t id : p.stage_ops[s])
        if (p.ops[id].kind == OpKind::kForward || p.ops[id].kind == OpKind::kBackward) compute.push_back(&p.ops[id]);
      ASSERT_EQ(compute.size(), 8u);
      for (size_t i = 0; i < compute.size(); ++i) {
        const Op* gather = nullptr;
        for (int32_t d : p.deps_of(*compute[i]))
          if (p.ops[d].kind == OpKind::kParamGather) gather = &p.ops[d];
        ASSERT_NE(gather, nullptr) << p.op_name(*compute[i]);
        EXPECT_EQ(gather->micro, compute[i]->micro);
        EXPECT_EQ(gather->part, compute[i]->kind == OpKind::kForward ? 0 : 1);
        if (static_cast<int>(i) < ahead) {
          EXPECT_EQ(gather->dep_count, 0);
        } else {
          ASSERT_EQ(gather->dep_count, 1);
          EXPECT_EQ(p.deps_of(*gather)[0], compute[i - ahead]->id) << p.op_name(*gather);
        }
      }
    }
  }
}

TEST(Program, ConfigFromLayout) {
  Layout l;
  l.dp = 4;
  l.pp = 2;
  l.micro_batch = 2;
  l.zero = 1;
  l.schedule = Schedule::kInterleaved;
  l.virtual_stages = 3;
  l.overlap_grad_reduce = false;
  ProgramConfig c = program_config_for(l, 64, 5);
  EXPECT_EQ(c.pp, 2);
  EXPECT_EQ(c.virtual_stages, 3);
  EXPECT_EQ(c.micro_batches, 8);
  EXPECT_EQ(c.schedule, Schedule::kInterleaved);
  EXPECT_TRUE(c.dp_comm);
  EXPECT_EQ(c.zero, 1);
  EXPECT_EQ(c.grad_buckets, 5);
  EXPECT_FALSE(c.overlap_grad_reduce);
  EXPECT_TRUE(c.overlap_param_gather);
  l.dp = 1;
  EXPECT_FALSE(program_config_for(l, 64, 5).dp_comm);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// NCCL pairs sends and receives in call order: every schedule must post its
// receives in the sender's order, and a swapped pair of receives must be
// caught, naming the stages.
TEST(Program, P2pOrderHoldsForEveryScheduleAndSwapsAreCaught) {
  for (Schedule sch : {Schedule::kGpipe, Schedule::k1F1B})
    for (int pp : {2, 3, 4})
      for (int64_t m : {1, 2, 5, 8}) {
        Program p = build(cfg(sch, pp, m));
        EXPECT_TRUE(check_p2p_in_order(p).is_ok()) << check_p2p_in_order(p).to_string();
      }
  for (int pp : {2, 4})
    for (int64_t m : {4, 8})
      for (int v : {2, 3}) {
        Program p = build(cfg(Schedule::kInterleaved, pp, m, v));
        EXPECT_TRUE(check_p2p_in_order(p).is_ok()) << check_p2p_in_order(p).to_string();
      }
  Program p = build(cfg(Schedule::k1F1B, 2, 4));
  std::vector<int32_t>& ops = p.stage_ops[1];
  std::vector<size_t> recvs;
  for (size_t i = 0; i < ops.size(); ++i)
    if (p.ops[size_t(ops[i])].kind == OpKind::kRecvActivation) recvs.push_back(i);
  ASSERT_GE(recvs.size(), 2u);
  std::swap(ops[recvs[0]], ops[recvs[1]]);
  Status s = check_p2p_in_order(p);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("stage 1 receives its activations from stage 0"), std::string::npos) << s.message();
}

// Under NCCL's rules (each channel one in-order stream, sends complete only
// when their receive runs, receives block the host) every schedule must make
// progress with the wrap-around edges on their own channels; put them on the
// plain channels and interleaved schedules deadlock (the last stage's send
// to stage 0 sits in front of the receive stage 0 is waiting for).
TEST(Program, P2pProgressesUnderRendezvousWithWrapChannels) {
  for (int pp : {2, 3, 4, 8})
    for (int v : {1, 2, 4})
      for (int64_t k : {1, 2, 4}) {
        const int64_t m = k * pp;
        Program p = build(cfg(v > 1 ? Schedule::kInterleaved : Schedule::k1F1B, pp, m, v));
        Status s = check_p2p_progress(p);
        EXPECT_TRUE(s.is_ok()) << "pp=" << pp << " v=" << v << " m=" << m << ": " << s.to_string();
        if (v == 1) {
          Program g = build(cfg(Schedule::kGpipe, pp, m));
          EXPECT_TRUE(check_p2p_progress(g).is_ok()) << "gpipe pp=" << pp << " m=" << m;
          EXPECT_TRUE(check_p2p_progress(p, /*wrap_channels=*/false).is_ok()) << "no wrap edges without v > 1";
        }
      }
  Program p = build(cfg(Schedule::kInterleaved, 2, 4, 2));
  Status s = check_p2p_progress(p, /*wrap_channels=*/false);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("deadlock"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("stage 0"), std::string::npos) << s.message();
}

TEST(Program, P2pChannelsSeparateWrapAroundEdges) {
  Program p = build(cfg(Schedule::kInterleaved, 3, 6, 2));
  for (const Op& op : p.ops) {
    if (op.kind == OpKind::kSendActivation)
      EXPECT_EQ(p2p_channel(op, 3) == P2pChannel::kActivationWrap, op.stage == 2) << p.op_name(op);
    if (op.kind == OpKind::kRecvActivation)
      EXPECT_EQ(p2p_channel(op, 3) == P2pChannel::kActivationWrap, op.stage == 0) << p.op_name(op);
    if (op.kind == OpKind::kSendGrad)
      EXPECT_EQ(p2p_channel(op, 3) == P2pChannel::kGradientWrap, op.stage == 0) << p.op_name(op);
    if (op.kind == OpKind::kRecvGrad)
      EXPECT_EQ(p2p_channel(op, 3) == P2pChannel::kGradientWrap, op.stage == 2) << p.op_name(op);
  }
}

// The program names each transfer's other end and tag, so an interpreter
// never recomputes them: a recv's peer is its send's stage and chunk, both
// ends carry one tag, and tags are unique per receiving stage and direction.
TEST(Program, TransfersNameTheirPeerAndTag) {
  for (const ProgramConfig& c : {cfg(Schedule::kGpipe, 3, 4), cfg(Schedule::k1F1B, 4, 8),
                                 cfg(Schedule::kInterleaved, 2, 4, 2), cfg(Schedule::kInterleaved, 4, 8, 3)}) {
    Program p = build(c);
    std::set<std::tuple<int, bool, int32_t>> tags;  // (receiving stage, gradient?, tag)
    int transfers = 0;
    for (const Op& op : p.ops) {
      const bool recv = op.kind == OpKind::kRecvActivation || op.kind == OpKind::kRecvGrad;
      const bool send = op.kind == OpKind::kSendActivation || op.kind == OpKind::kSendGrad;
      if (!recv && !send) {
        EXPECT_EQ(op.tag, -1) << p.op_name(op);
        EXPECT_EQ(op.peer_stage, -1) << p.op_name(op);
        continue;
      }
      ++transfers;
      ASSERT_GE(op.peer_stage, 0) << p.op_name(op);
      if (!recv) continue;
      const Op* from = nullptr;
      for (int32_t d : p.deps_of(op))
        if (p.ops[d].kind == OpKind::kSendActivation || p.ops[d].kind == OpKind::kSendGrad) from = &p.ops[d];
      ASSERT_NE(from, nullptr) << p.op_name(op);
      EXPECT_EQ(op.peer_stage, from->stage) << p.op_name(op);
      EXPECT_EQ(op.peer_chunk, from->chunk) << p.op_name(op);
      EXPECT_EQ(from->peer_stage, op.stage) << p.op_name(*from);
      EXPECT_EQ(from->peer_chunk, op.chunk) << p.op_name(*from);
      EXPECT_EQ(from->tag, op.tag) << p.op_name(op);
      EXPECT_EQ(op.tag, p2p_tag(op.kind == OpKind::kRecvGrad, op.chunk, op.micro));
      EXPECT_TRUE(tags.insert({op.stage, op.kind == OpKind::kRecvGrad, op.tag}).second) << "tag reused: " << p.op_name(op);
    }
    EXPECT_GT(transfers, 0);
  }
}

// ZeRO-3 release points, against the rule the executor used before the
// program carried them: count the gathers issued for each chunk and the uses
// that consume them; a compute op releases its chunk when no gather issued
// for the chunk is still waiting for its use.
TEST(Program, Zero3ReleasesWhenNoGatherOfTheChunkIsOutstanding) {
  for (bool prefetch : {true, false})
    for (const ProgramConfig& base : {cfg(Schedule::k1F1B, 2, 4), cfg(Schedule::kInterleaved, 2, 4, 2)}) {
      ProgramConfig c = base;
      c.dp_comm = true;
      c.zero = 3;
      c.overlap_param_gather = prefetch;
      Program p = build(c);
      int releases = 0;
      for (int s = 0; s < c.pp; ++s) {
        std::map<int, int> outstanding;
        for (int32_t id : p.stage_ops[s]) {
          const Op& op = p.ops[id];
          if (op.kind == OpKind::kParamGather && op.micro >= 0) ++outstanding[op.chunk];
          const bool compute = op.kind == OpKind::kForward || op.kind == OpKind::kBackward;
          if (!compute) {
            EXPECT_FALSE(op.releases_params) << p.op_name(op);
            continue;
          }
          const bool expect = --outstanding[op.chunk] <= 0;
          if (expect) outstanding[op.chunk] = 0;
          EXPECT_EQ(op.releases_params, expect) << p.op_name(op) << (prefetch ? " prefetch" : "");
          releases += op.releases_params;
        }
      }
      EXPECT_GT(releases, 0);
    }
  // Without ZeRO-3 nothing is released.
  for (const Op& op : build(dp_cfg(2, 1, true, true)).ops) EXPECT_FALSE(op.releases_params);
}

// Backward parts tile a chunk's layers from the top: disjoint, contiguous,
// covering every layer once, part 0 the last layers.
TEST(Program, BackwardPartsTileTheChunkFromTheTop) {
  for (int layers = 0; layers <= 9; ++layers)
    for (int parts = 1; parts <= 6; ++parts) {
      int top = layers;
      for (int k = 0; k < parts; ++k) {
        LayerRange r = backward_part_layers(layers, k, parts);
        EXPECT_EQ(r.end, top) << layers << " layers, part " << k << " of " << parts;
        EXPECT_LE(r.begin, r.end);
        EXPECT_LE(r.end - r.begin, (layers + parts - 1) / parts);
        top = r.begin;
      }
      EXPECT_EQ(top, 0) << layers << " layers in " << parts << " parts";
    }
}

TEST(Program, ConfigRoundTripsAndHashesWhatDefinesTheProgram) {
  ProgramConfig c = dp_cfg(1, 3, true, false);
  auto back = parse_program_config(program_config_to_json(c), "program");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(program_config_diff(c, *back), "");
  EXPECT_EQ(program_hash(c), program_hash(*back));
  ProgramConfig other = c;
  other.grad_buckets = 4;
  EXPECT_NE(program_hash(c), program_hash(other));
  EXPECT_EQ(program_config_diff(c, other), "grad_buckets 3 vs 4");
  auto missing = parse_program_config(R"({"pp":2})", "plan: program");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("plan: program"), std::string::npos) << missing.status().message();
}

}  // namespace
}  // namespace loom
