// The context-parallel ring timed by the event engine (sim/cp_ring.h)
// against schedules worked out by hand from the executor's order of issue
// and waits (exec/model/context_parallel.cc).
#include <gtest/gtest.h>

#include "sim/cp_ring.h"

namespace loom {
namespace {

int transfers(const Program& p) {
  int n = 0;
  for (const Op& op : p.ops) n += op.stream != Stream::kCompute;
  return n;
}

TEST(CpRing, SendsWhatTheAlgorithmSends) {
  for (int n : {2, 3, 4, 8, 16}) {
    EXPECT_EQ(transfers(cp_ring_forward_program(n)), n - 1) << n;   // K/V to every other rank
    EXPECT_EQ(transfers(cp_ring_backward_program(n)), 2 * n - 1) << n;  // K/V again, and n dK/dV
  }
}

TEST(CpRing, FreeTransfersExposeNothing) {
  const CpRingTime t = cp_ring_time(4, 0, 0, 1.5, 3);
  EXPECT_DOUBLE_EQ(t.fwd_s, 6);
  EXPECT_DOUBLE_EQ(t.bwd_s, 12);
  EXPECT_DOUBLE_EQ(t.fwd_exposed_s, 0);
  EXPECT_DOUBLE_EQ(t.bwd_exposed_s, 0);
}

TEST(CpRing, ComputeBoundRingExposesOnlyTheLastGradientsTripHome) {
  // n=2, transfers 1, blocks 10: K/V 1 arrives at 1 (under block 0); dK/dV 0
  // leaves at 10, lands at 11 (under block 1, 10..20); dK/dV 1 leaves at 20
  // and nothing is left to hide it.
  const CpRingTime t = cp_ring_time(2, 1, 1, 10, 10);
  EXPECT_DOUBLE_EQ(t.fwd_exposed_s, 0);
  EXPECT_DOUBLE_EQ(t.bwd_s, 21);
  EXPECT_DOUBLE_EQ(t.bwd_exposed_s, 1);
}

TEST(CpRing, CommunicationBoundForwardWaitsForEveryKv) {
  // n=4, K/V 3, blocks 1: K/V s+1 leaves when K/V s has arrived (3, 6, 9);
  // block s starts on K/V s: 0, 3, 6, 9 -> the ring ends at 10.
  const CpRingTime t = cp_ring_time(4, 3, 3, 1, 1);
  EXPECT_DOUBLE_EQ(t.fwd_s, 10);
  EXPECT_DOUBLE_EQ(t.fwd_exposed_s, 6);  // (n-1) (x - f)
}

TEST(CpRing, CommunicationBoundBackwardSharesTheLinkBetweenKvAndGradients) {
  // n=3, transfers 2, blocks 1, all on one link in issue order:
  //   K/V1 0..2, block0 0..1, dKV0 2..4 (after K/V1 on the link),
  //   K/V2 4..6, block1 2..3, dKV1 6..8, block2 6..7 (on K/V2), dKV2 8..10.
  const CpRingTime t = cp_ring_time(3, 2, 2, 1, 1);
  EXPECT_DOUBLE_EQ(t.bwd_s, 10);
  EXPECT_DOUBLE_EQ(t.bwd_exposed_s, 7);
  // dK/dV twice K/V's size (fp32 gradients of bf16 K/V):
  //   K/V1 0..2, dKV0 2..6, K/V2 6..8, block1 2..3, dKV1 8..12,
  //   block2 8..9 (on K/V2; waits dKV0 at 6), dKV2 12..16.
  const CpRingTime g = cp_ring_time(3, 2, 4, 1, 1);
  EXPECT_DOUBLE_EQ(g.bwd_s, 16);
}

TEST(CpRing, LongerRingsExposeMoreOnlyWhenTheLinkIsTheLimit) {
  // Compute-bound: exposure stays one dK/dV whatever the ring's length.
  for (int n : {2, 4, 8, 16}) EXPECT_DOUBLE_EQ(cp_ring_time(n, 1, 1, 0, 5).bwd_exposed_s, 1) << n;
}

}  // namespace
}  // namespace loom
