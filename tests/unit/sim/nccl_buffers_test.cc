// NCCL's point-to-point buffers (sim/nccl_buffers.h): the GPU memory a
// rank's communicators hold for the pipeline's send/recv, the context-
// parallel ring and the experts' all-to-all, counted in each stage's
// overhead (docs/simulator.md section 2.5).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/hw_profile.h"
#include "core/layout.h"
#include "sim/memory_model.h"
#include "sim/nccl_buffers.h"
#include "tests/support/test_models.h"

namespace loom {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

Layout layout_or_die(const std::string& text) {
  Result<Layout> l = parse_layout(text);
  EXPECT_TRUE(l.is_ok()) << text;
  return l.is_ok() ? *l : Layout{};
}

// The independent truth: NVIDIA/nccl#1685, an all-to-all over 8 H100s of
// one node, counts buffers of exactly 10,485,760 and 2,097,152 bytes, 32
// channels a pair of GPUs, and 1.06 GB of NCCL memory before the first
// all_to_all_single against 4.34 GB after (+3.28 GB, some of it NCCL's own
// bookkeeping). By hand: 7 peers x 32 channels x (10 MiB received + 2 MiB
// sent) = 2,688 MiB = 2.82e9 bytes, 86% of the measured growth.
TEST(NcclBuffers, AnAllToAllOnOneNodeHoldsAConnectionAPeerAndChannel) {
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  const ModelSpec m = testing::load_model_or_die("mixtral-8x7b");
  const NcclP2pBuffers b = nccl_p2p_buffers(m, hw, layout_or_die("dp=8,ep=8"), SimOptions{});
  EXPECT_DOUBLE_EQ(b.fixed_bytes, 2688 * kMiB);
  EXPECT_DOUBLE_EQ(b.per_pp_peer_bytes, 0);
  EXPECT_GT(b.fixed_bytes / 3.28e9, 0.8);
  EXPECT_LT(b.fixed_bytes / 3.28e9, 1.0);
  // A deduplicating dispatcher (DeepEP) moves tokens through its own
  // buffers, not NCCL's send/recv; a dense model has no all-to-all.
  SimOptions dedup;
  dedup.moe_dedup_dispatch = true;
  EXPECT_DOUBLE_EQ(nccl_p2p_buffers(m, hw, layout_or_die("dp=8,ep=8"), dedup).fixed_bytes, 0);
  EXPECT_DOUBLE_EQ(nccl_p2p_buffers(testing::load_model_or_die("llama-3-8b"), hw, layout_or_die("dp=8"), SimOptions{})
                       .fixed_bytes,
                   0);
}

// Spanning nodes, NCCL gives every peer the channels of its slowest (2 a NIC
// to start) and the network peers share a pool a direction of 32 channels x
// 16 steps x 128 KiB = 64 MiB: an EP group of 16 over two nodes holds both
// pools (128 MiB) and its 7 same-node peers at 2 channels x 12 MiB (168 MiB).
TEST(NcclBuffers, AGroupOverNodesSharesOnePoolAndFewChannels) {
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  const ModelSpec m = testing::load_model_or_die("mixtral-8x7b");
  EXPECT_DOUBLE_EQ(nccl_p2p_buffers(m, hw, layout_or_die("dp=16,ep=16"), SimOptions{}).fixed_bytes,
                   (128 + 168) * kMiB);
  // Two pipeline stages on two nodes (TP fills each): the pools only.
  EXPECT_DOUBLE_EQ(nccl_p2p_buffers(m, hw, layout_or_die("tp=8,pp=2"), SimOptions{}).per_pp_peer_bytes, 128 * kMiB);
}

// Stages that share a node (TP 2, PP 4: one pipeline a node) exchange with
// each neighbour at 32 channels x 12 MiB = 384 MiB; a 1F1B pipeline's end
// stages have one neighbour, its inner stages two, and an interleaved one
// sends the last stage's output back to stage 0, so every stage has two.
TEST(NcclBuffers, PipelineNeighboursOnOneNode) {
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  const ModelSpec m = testing::load_model_or_die("llama-3-8b");
  const Layout one_f_one_b = layout_or_die("tp=2,pp=4,schedule=1f1b");
  EXPECT_DOUBLE_EQ(nccl_p2p_buffers(m, hw, one_f_one_b, SimOptions{}).per_pp_peer_bytes, 384 * kMiB);
  EXPECT_EQ(pipeline_peers(one_f_one_b, 0), 1);
  EXPECT_EQ(pipeline_peers(one_f_one_b, 1), 2);
  EXPECT_EQ(pipeline_peers(one_f_one_b, 3), 1);
  const Layout interleaved = layout_or_die("tp=2,pp=4,schedule=interleaved,v=2");
  for (int s = 0; s < 4; ++s) EXPECT_EQ(pipeline_peers(interleaved, s), 2) << s;
  EXPECT_EQ(pipeline_peers(layout_or_die("pp=2,schedule=interleaved,v=2"), 0), 1);
  EXPECT_EQ(pipeline_peers(layout_or_die("dp=2"), 0), 0);
  // The CP ring on one node: the previous rank's buffers and the next one's
  // send block, 32 x 12 MiB.
  EXPECT_DOUBLE_EQ(nccl_p2p_buffers(m, hw, layout_or_die("tp=2,cp=4"), SimOptions{}).fixed_bytes, 384 * kMiB);
  EXPECT_DOUBLE_EQ(nccl_p2p_buffers(m, hw, layout_or_die("tp=2,cp=4,cp_comm=all_gather"), SimOptions{}).fixed_bytes,
                   0);
}

// H800's 8 NVLinks give 16 channels a peer (2 x 8, NCCL's rule); a profile
// that states none counts nothing.
TEST(NcclBuffers, ChannelsComeFromTheProfile) {
  const ModelSpec m = testing::load_model_or_die("mixtral-8x7b");
  EXPECT_DOUBLE_EQ(
      nccl_p2p_buffers(m, testing::load_hw_or_die("dgx-h800"), layout_or_die("dp=8,ep=8"), SimOptions{}).fixed_bytes,
      1344 * kMiB);
  HwProfile unstated = testing::load_hw_or_die("dgx-a100-80gb");
  unstated.node.nccl_p2p_channels_per_peer = 0;
  const NcclP2pBuffers none = nccl_p2p_buffers(m, unstated, layout_or_die("dp=8,ep=8,pp=2"), SimOptions{});
  EXPECT_DOUBLE_EQ(none.fixed_bytes, 0);
  EXPECT_DOUBLE_EQ(none.per_pp_peer_bytes, 0);
}

// Trays of one NVLink domain (NVL72) reach each other over NVLink: an EP
// group of 16 over four 4-GPU trays holds 15 peers' NVLink buffers, as on
// one node, not the network's pools.
TEST(NcclBuffers, TraysOfOneNvlinkDomainCountAsOneNode) {
  HwProfile hw = testing::load_hw_or_die("gb200-nvl72");
  hw.node.devices_per_node = 4;  // trays as nodes, the domain 72
  ASSERT_EQ(hw.node.nvlink_domain_size, 72);
  const ModelSpec m = testing::load_model_or_die("mixtral-8x7b");
  EXPECT_DOUBLE_EQ(nccl_p2p_buffers(m, hw, layout_or_die("dp=16,ep=16"), SimOptions{}).fixed_bytes,
                   15 * 32 * 12 * kMiB);
  hw.node.nvlink_domain_size = 4;  // no domain beyond the tray: the network's pools
  EXPECT_DOUBLE_EQ(nccl_p2p_buffers(m, hw, layout_or_die("dp=16,ep=16"), SimOptions{}).fixed_bytes,
                   (128 + 2 * 3 * 12) * kMiB);
}

// The stage's overhead carries them: the same layout with and without the
// all-to-all's NCCL buffers differs by exactly their bytes, on every stage.
TEST(NcclBuffers, EveryStagesOverheadCarriesThem) {
  const HwProfile hw = testing::load_hw_or_die("dgx-h100");
  const ModelSpec m = testing::load_model_or_die("mixtral-8x7b");
  TrainSpec train;
  train.global_batch = 64;
  train.seq_len = 4096;
  const Layout l = layout_or_die("dp=8,ep=8,pp=2,schedule=1f1b,recompute=full");
  SimOptions dedup;
  dedup.moe_dedup_dispatch = true;
  const MemoryReport with = memory_report(m, hw, l, train, SimOptions{});
  const MemoryReport without = memory_report(m, hw, l, train, dedup);
  ASSERT_EQ(with.stages.size(), 2u);
  for (size_t s = 0; s < 2; ++s)
    EXPECT_NEAR(with.stages[s].overhead_bytes - without.stages[s].overhead_bytes, 2688 * kMiB, 1.0) << s;
}

TEST(NcclBuffers, TheProfileFieldIsCheckedAndKept) {
  HwProfile hw = testing::load_hw_or_die("dgx-h100");
  EXPECT_EQ(hw.node.nccl_p2p_channels_per_peer, 32);
  nlohmann::json j = nlohmann::json::parse(hw_profile_to_json(hw));
  j["node"]["nccl_p2p_channels_per_peer"] = 128;
  const Result<HwProfile> bad = parse_hw_profile(j.dump(), "test");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("nccl_p2p_channels_per_peer=128"), std::string::npos);
  j["node"]["nccl_p2p_channels_per_peer"] = 16;
  const Result<HwProfile> ok = parse_hw_profile(j.dump(), "test");
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ(ok->node.nccl_p2p_channels_per_peer, 16);
}

}  // namespace
}  // namespace loom
