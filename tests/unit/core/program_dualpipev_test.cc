// The program builder's DualPipeV: its order against deepseek-ai/DualPipe's,
// the V placement of the chunks, and the gradient syncs that follow the
// deferred weight gradients.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/program.h"
#include "tests/unit/core/program_test_support.h"

namespace loom {
namespace {

using namespace program_testing;

// DualPipeV's compute order: the calls deepseek-ai/DualPipe 3da1bbe
// dualpipe/dualpipev.py DualPipeV.step makes for 2 ranks and num_chunks 4,
// its eight loops expanded:
// "F<micro>.<chunk>", a backward that defers its weight gradients "D", the
// deferred weight gradients "W". Rank 0: step 1 runs 2 F0; step 2 one
// (F0, F1); step 3 one (B1 zero-bubble, W, F1); step 4 one (F0&B1, F1&B0);
// step 5 one (B1, F1&B0); step 6 one (B1, B0), rank 0 even, so its only
// iteration (i = 0 = (r+1)/2) defers B0 only; step 7 one (W, B0 zb); step 8 one W.
TEST(Program, DualPipeVOrderMatchesTheReference) {
  Program p = build(cfg(Schedule::kDualPipeV, 2, 4, 2));
  auto seq = [&](int s) {
    std::vector<std::string> out;
    for (int32_t id : p.stage_ops[size_t(s)]) {
      const Op& op = p.ops[size_t(id)];
      const char* k = op.kind == OpKind::kForward      ? "F"
                      : op.kind == OpKind::kWeightGrad ? "W"
                      : op.kind == OpKind::kBackward   ? (op.defers_wgrad ? "D" : "B")
                                                       : nullptr;
      if (k) out.push_back(k + std::to_string(op.micro) + "." + std::to_string(op.chunk));
    }
    return out;
  };
  EXPECT_EQ(seq(0), split("F0.0 F1.0 F2.0 F0.1 D0.1 W0.1 F1.1 F3.0 B1.1 F2.1 B0.0 B2.1 F3.1 B1.0 B3.1 D2.0 W2.0 "
                          "D3.0 W3.0"));
  // Rank 1 (the tip): no step 1; step 2 two (F0, F1); step 4's first pair
  // unoverlapped on the last rank (F0 then B1); step 6 two iterations, the
  // second (i = 1 = (r+1)/2, rank odd) deferring both.
  EXPECT_EQ(seq(1), split("F0.0 F0.1 F1.0 F1.1 F2.0 B0.1 F2.1 B0.0 F3.0 B1.1 F3.1 B1.0 B2.1 B2.0 D3.1 D3.0 W3.1 "
                          "W3.0"));
}

// The V: stage s holds global chunks s and 2pp-1-s, so stage 0 holds the
// first and the last (the embedding and the loss) and the last stage hands
// its chunk 0's output to its own chunk 1 without a transfer.
TEST(Program, DualPipeVPlacesChunksAsAV) {
  for (int pp : {2, 3, 4, 8})
    for (int64_t m : {2 * int64_t(pp), 2 * int64_t(pp) + 3, 4 * int64_t(pp)}) {
      SCOPED_TRACE("pp=" + std::to_string(pp) + " m=" + std::to_string(m));
      Program p = build(cfg(Schedule::kDualPipeV, pp, m, 2));
      for (const Op& op : p.ops) {
        if (op.kind == OpKind::kRecvActivation) {
          EXPECT_FALSE(op.stage == 0 && op.chunk == 0) << "the first chunk reads the tokens";
          EXPECT_FALSE(op.stage == pp - 1 && op.chunk == 1) << "the tip passes its activations in place";
          EXPECT_EQ(op.peer_stage, op.chunk == 0 ? op.stage - 1 : op.stage + 1) << p.op_name(op);
        }
        if (op.kind == OpKind::kRecvGrad) {
          EXPECT_FALSE(op.stage == 0 && op.chunk == 1) << "the loss is on stage 0's chunk 1";
          EXPECT_FALSE(op.stage == pp - 1 && op.chunk == 0) << "the tip passes its gradients in place";
          EXPECT_EQ(op.peer_stage, op.chunk == 0 ? op.stage + 1 : op.stage - 1) << p.op_name(op);
        }
      }
      // Every stage defers 2pp - s - 1 backwards to a W (steps 3, 6 and 7).
      for (int s = 0; s < pp; ++s) {
        int w = 0;
        for (int32_t id : p.stage_ops[size_t(s)]) w += p.ops[size_t(id)].kind == OpKind::kWeightGrad;
        EXPECT_EQ(w, 2 * pp - s - 1) << "stage " << s;
        // 2pp + 1 chunk-micro-batches in flight on every stage (the
        // README's PP + 1 activations for PP = 2pp stages).
        EXPECT_EQ(max_in_flight(p, s), 2 * pp + 1) << "stage " << s;
      }
      EXPECT_TRUE(check_p2p_in_order(p).is_ok()) << check_p2p_in_order(p).to_string();
      EXPECT_TRUE(check_p2p_progress(p).is_ok()) << check_p2p_progress(p).to_string();
    }
}

// ZeRO-1 buckets follow the op that completes a chunk's gradients: its last
// backward, or the W of its last deferred backward.
TEST(Program, DualPipeVSyncsFollowTheLastWeightGradients) {
  ProgramConfig c = cfg(Schedule::kDualPipeV, 4, 8, 2);
  c.dp_comm = true;
  c.zero = 1;
  c.grad_buckets = 3;
  Program p = build(c);
  check_invariants(p);
  for (int s = 0; s < 4; ++s)
    for (int chunk = 0; chunk < 2; ++chunk) {
      int32_t last = -1;  // the chunk's last gradient-completing op
      for (int32_t id : p.stage_ops[size_t(s)]) {
        const Op& op = p.ops[size_t(id)];
        if (op.chunk == chunk && (op.kind == OpKind::kWeightGrad || (op.kind == OpKind::kBackward && !op.defers_wgrad)))
          last = id;
      }
      int syncs = 0;
      for (int32_t id : p.stage_ops[size_t(s)]) {
        const Op& op = p.ops[size_t(id)];
        if (op.kind != OpKind::kGradSync || op.chunk != chunk) continue;
        ++syncs;
        ASSERT_EQ(op.dep_count, 1);
        EXPECT_EQ(p.deps_of(op)[0], last) << p.op_name(op);
      }
      EXPECT_EQ(syncs, 3);
    }
  ProgramConfig z2 = c;
  z2.zero = 2;
  EXPECT_FALSE(build_program(z2).is_ok());
}

}  // namespace
}  // namespace loom
