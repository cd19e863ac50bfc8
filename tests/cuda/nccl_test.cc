// The NCCL communicator on one rank (its collectives are identities there)
// and the failure path without a GPU. Multi-rank NCCL needs one GPU per rank:
// scripts/gpu-check runs that on a multi-GPU machine.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "exec/comm/nccl_communicator.h"
#include "exec/comm/self_communicator.h"

namespace loom::exec {
namespace {

int gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

TEST(NcclCommunicator, WithoutAGpuSaysSo) {
  if (gpus() > 0) GTEST_SKIP() << "a GPU is visible: the no-GPU path is not reachable here";
  auto self = make_self_communicator("world");
  auto w = nccl_world(self.get(), 0);
  ASSERT_FALSE(w.is_ok());
  EXPECT_EQ(w.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(w.status().message().find("CUDA device"), std::string::npos) << w.status().message();
}

TEST(NcclCommunicator, OneRankCollectivesAndSplit) {
  if (gpus() == 0) GTEST_SKIP() << "no CUDA device visible: NCCL needs one per rank";
  auto self = make_self_communicator("world");
  auto w = nccl_world(self.get(), 0, {.timeout_s = 60});
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  Communicator& c = **w;
  EXPECT_EQ(c.size(), 1);
  std::vector<float> h = {1, 2, 3, 4};
  float *d = nullptr, *o = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 4 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&o, 4 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, h.data(), 16, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(c.all_reduce(d, 4).is_ok());
  ASSERT_TRUE(c.all_gather(d, o, 4).is_ok());
  ASSERT_TRUE(c.reduce_scatter(o, d, 4).is_ok());
  auto req = c.iall_reduce(d, 4, ReduceOp::kMax);
  ASSERT_TRUE(req.is_ok());
  ASSERT_TRUE((*req)->wait().is_ok());
  ASSERT_TRUE(c.barrier().is_ok());
  std::vector<float> back(4);
  ASSERT_EQ(cudaMemcpy(back.data(), d, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, h);
  auto sub = c.split(0, 0, "dp");
  ASSERT_TRUE(sub.is_ok()) << sub.status().to_string();
  EXPECT_EQ((*sub)->name(), "dp");
  EXPECT_TRUE((*sub)->all_reduce(d, 4).is_ok());
  cudaFree(d);
  cudaFree(o);
}

}  // namespace
}  // namespace loom::exec
