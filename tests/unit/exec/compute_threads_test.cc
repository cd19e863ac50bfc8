// compute_threads(): the default share of the cores, the bound on --threads,
// and the oversubscription warning (issue: 8 ranks x all cores each on a
// 2-core machine ran 60x slower than predicted, with no hint).
#include "exec/runtime/compute_threads.h"

#include <gtest/gtest.h>

namespace loom::exec {
namespace {

TEST(ComputeThreads, DefaultSharesTheCoresAmongTheLocalRanks) {
  auto t = compute_threads(0, 8, 2, 2);  // mpirun -np 8 on a 2-core machine
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->threads, 1);
  EXPECT_NE(t->warning.find("more ranks than cores"), std::string::npos) << t->warning;
  auto one = compute_threads(0, 1, 16, 16);
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(one->threads, 16);
  auto four = compute_threads(0, 4, 16, 16);
  ASSERT_TRUE(four.is_ok());
  EXPECT_EQ(four->threads, 4);
  EXPECT_TRUE(four->warning.empty());
}

TEST(ComputeThreads, TheAffinityMaskIsWhatTheProcessMayUse) {
  auto t = compute_threads(0, 1, 4, 64);  // taskset / a cgroup of 4 cores
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->cores, 4);
  EXPECT_EQ(t->threads, 4);
  auto bound = compute_threads(0, 8, 1, 16);  // mpirun --bind-to core: one core per rank
  ASSERT_TRUE(bound.is_ok());
  EXPECT_EQ(bound->threads, 1);
  EXPECT_TRUE(bound->bound);
  EXPECT_TRUE(bound->warning.empty()) << bound->warning;
}

TEST(ComputeThreads, ExplicitCountsAreBoundedAndOversubscriptionIsNamed) {
  auto huge = compute_threads(65535, 1, 2, 2);
  ASSERT_FALSE(huge.is_ok());
  EXPECT_NE(huge.status().message().find("at most 8"), std::string::npos) << huge.status().message();
  auto negative = compute_threads(-2, 1, 2, 2);
  ASSERT_FALSE(negative.is_ok());
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidArgument);
  auto over = compute_threads(8, 1, 2, 2);
  ASSERT_TRUE(over.is_ok());
  EXPECT_EQ(over->threads, 8);
  EXPECT_NE(over->warning.find("oversubscribed"), std::string::npos);
  EXPECT_NE(over->warning.find("--threads 2"), std::string::npos) << over->warning;
  auto ranks = compute_threads(2, 2, 2, 2);  // 2 ranks x 2 threads on 2 cores
  ASSERT_TRUE(ranks.is_ok());
  EXPECT_NE(ranks->warning.find("2 rank(s) on this node x 2 threads"), std::string::npos) << ranks->warning;
  EXPECT_EQ(compute_threads(0, 2, 16, 16)->describe(), "8 threads per rank (16 cores, 2 ranks on this node)");
}

}  // namespace
}  // namespace loom::exec
