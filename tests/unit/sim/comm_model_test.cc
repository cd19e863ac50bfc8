// Comm cost model against independent truths: the worked example of
// nccl_cost_model.md section 6, the alpha-beta ring formula, nccl-tests busbw
// conventions, and invariants (monotone in bytes and bandwidth, crossing nodes
// never helps, a group of one is free).
#include "sim/comm_model.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace loom {
namespace {

namespace fs = std::filesystem;

constexpr Collective kAllColls[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                                    Collective::kBroadcast, Collective::kSendRecv,  Collective::kAllToAll};

// nccl_cost_model.md section 6: one DGX H100 node, busBw 370 GB/s. NVLS off so
// the ring is what NCCL would run.
HwProfile worked_example_h100() {
  HwProfile hw;
  hw.name = "worked-example";
  hw.accel.sm_arch = 90;
  hw.accel.peak_bf16_flops = 989e12;
  hw.accel.peak_fp32_flops = 67e12;
  hw.node.devices_per_node = 8;
  hw.node.fabric = "nvswitch";
  hw.node.intra_bw_bytes_per_s = 450e9;
  hw.node.intra_ring_busbw_bytes_per_s = 370e9;
  hw.node.intra_latency_s = 2.5e-6;
  hw.node.nvls = false;
  hw.net.nics_per_node = 8;
  hw.net.nic_bw_bytes_per_s = 50e9;
  hw.net.latency_s = 2e-6;
  hw.net.cpu_vendor = "intel";
  return hw;
}

HwProfile load(const std::string& name) {
  auto r = load_hw_profile(name);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? *r : HwProfile{};
}

std::vector<HwProfile> shipped() {
  std::vector<HwProfile> out;
  for (const auto& e : fs::directory_iterator(fs::path(LOOM_SOURCE_DIR) / "hwprofiles"))
    if (e.path().extension() == ".json") out.push_back(load(e.path().string()));
  return out;
}

GroupShape shape(int ranks, int nodes) { return GroupShape{ranks, nodes, (ranks + nodes - 1) / nodes}; }

double ring_ar_time(const HwProfile& hw, int n, double bytes, CommProto p) {
  return collective_cost_for(hw, Collective::kAllReduce, shape(n, 1), bytes, CommAlgo::kRing, p).time_s;
}

TEST(CommModel, WorkedExampleRingSimpleOneGiB) {
  HwProfile hw = worked_example_h100();
  const double bytes = 1073741824.0;
  // algBw = 370 * 8/14 GB/s, lat = 8.4 + 14 * 3.4 = 56.0 us.
  double expect = 56.0e-6 + bytes / (370e9 * 8 / 14);
  CollectiveCost c = collective_cost_for(hw, Collective::kAllReduce, shape(8, 1), bytes, CommAlgo::kRing,
                                         CommProto::kSimple);
  EXPECT_NEAR(c.time_s, expect, 1e-12);
  EXPECT_NEAR(c.time_s, 5.14e-3, 0.01e-3);
  // nccl-tests would print algbw ~209, busbw ~366 GB/s for this.
  EXPECT_NEAR(c.algbw_bytes_per_s / 1e9, 209.1, 1.0);
  EXPECT_NEAR(c.busbw_bytes_per_s / 1e9, 366.0, 1.0);
  CollectiveCost best = collective_cost(hw, Collective::kAllReduce, shape(8, 1), bytes);
  EXPECT_EQ(best.algo, CommAlgo::kRing);
  EXPECT_EQ(best.proto, CommProto::kSimple);
  EXPECT_NEAR(best.time_s, expect, 1e-12);
}

TEST(CommModel, WorkedExampleSmallMessagesPickLL) {
  HwProfile hw = worked_example_h100();
  const double bytes = 8192;
  // LL: algBw = min(141, 0.5 * 370) * 8/14 = 80.6 GB/s; lat = 6.6 + 14 * 0.6 = 15.0 us.
  double ll = ring_ar_time(hw, 8, bytes, CommProto::kLL);
  EXPECT_NEAR(ll, 15.0e-6 + bytes / (141e9 * 8 / 14), 1e-12);
  EXPECT_NEAR(ll, 15.1e-6, 0.05e-6);
  EXPECT_NEAR(ring_ar_time(hw, 8, bytes, CommProto::kSimple), 56.0e-6 + bytes / (370e9 * 8 / 14), 1e-12);
  CollectiveCost best = collective_cost(hw, Collective::kAllReduce, shape(8, 1), bytes);
  EXPECT_EQ(best.algo, CommAlgo::kRing);
  EXPECT_EQ(best.proto, CommProto::kLL);
  EXPECT_NEAR(best.time_s, ll, 1e-15);
}

TEST(CommModel, ProtocolCrossoverLLThenSimple) {
  HwProfile hw = worked_example_h100();
  CommProto last = CommProto::kLL;
  bool saw_simple = false;
  for (double b = 64; b <= 4e9; b *= 2) {
    CommProto p = collective_cost(hw, Collective::kAllReduce, shape(8, 1), b).proto;
    if (p == CommProto::kSimple) saw_simple = true;
    if (saw_simple) {
      EXPECT_EQ(p, CommProto::kSimple) << "Simple, once cheapest, stays cheapest; bytes=" << b;
    }
    last = p;
  }
  EXPECT_EQ(collective_cost(hw, Collective::kAllReduce, shape(8, 1), 64).proto, CommProto::kLL);
  EXPECT_EQ(last, CommProto::kSimple);
}

// Ring all-reduce: t = 2(n-1) alpha + 2(n-1)/n S / beta, beta = bus bandwidth.
TEST(CommModel, RingAllReduceIsAlphaBeta) {
  HwProfile hw = worked_example_h100();
  for (int n : {2, 4, 8}) {
    double s1 = 1e8, s2 = 3e8;
    double t1 = ring_ar_time(hw, n, s1, CommProto::kSimple), t2 = ring_ar_time(hw, n, s2, CommProto::kSimple);
    EXPECT_NEAR((t2 - t1) / (s2 - s1), 2.0 * (n - 1) / n / 370e9, 1e-22) << "n=" << n;
    double alpha_total = t1 - 2.0 * (n - 1) / n * s1 / 370e9;
    EXPECT_NEAR(alpha_total, 8.4e-6 + 2 * (n - 1) * 3.4e-6, 1e-12) << "base + 2(n-1) NVLink hops";
  }
  // CPU profile: a plain ring with the profile's own per-hop latency.
  HwProfile cpu = load("cpu-local");
  double s = 1e7;
  CollectiveCost c = collective_cost(cpu, Collective::kAllReduce, shape(2, 1), s);
  EXPECT_EQ(c.proto, CommProto::kSimple);
  EXPECT_NEAR(c.time_s, 2 * cpu.node.intra_latency_s + s / cpu.node.intra_ring_busbw_bytes_per_s, 1e-12);
}

TEST(CommModel, BusBandwidthFollowsNcclTests) {
  for (const HwProfile& hw : shipped()) {
    for (Collective coll : kAllColls) {
      int n = coll == Collective::kSendRecv ? 2 : std::min(8, hw.node.devices_per_node);
      if (n < 2) continue;
      double bytes = 64e6;
      CollectiveCost c = collective_cost(hw, coll, shape(n, 1), bytes);
      SCOPED_TRACE(hw.name + " " + collective_name(coll));
      ASSERT_GT(c.time_s, 0);
      EXPECT_NEAR(c.algbw_bytes_per_s, bytes / c.time_s, 1e-6 * c.algbw_bytes_per_s);
      double factor = coll == Collective::kAllReduce                                     ? 2.0 * (n - 1) / n
                      : coll == Collective::kBroadcast || coll == Collective::kSendRecv ? 1.0
                                                                                        : (n - 1.0) / n;
      EXPECT_NEAR(c.busbw_bytes_per_s, c.algbw_bytes_per_s * factor, 1e-6 * c.busbw_bytes_per_s);
      // Nothing moves faster than the link it runs on (NVLS excepted: the switch reduces).
      if (c.algo != CommAlgo::kNvls) {
        EXPECT_LE(c.busbw_bytes_per_s, hw.node.intra_bw_bytes_per_s);
      }
    }
  }
}

TEST(CommModel, GroupOfOneAndEmptyMessagesAreFree) {
  HwProfile hw = load("dgx-h100");
  for (Collective coll : kAllColls) {
    CollectiveCost one = collective_cost(hw, coll, shape(1, 1), 1e9);
    EXPECT_EQ(one.time_s, 0);
    for (double b : one.sent_bytes) EXPECT_EQ(b, 0);
    EXPECT_EQ(collective_cost(hw, coll, shape(8, 1), 0).time_s, 0);
  }
}

TEST(CommModel, TimeIsMonotoneInBytes) {
  for (const HwProfile& hw : shipped()) {
    for (Collective coll : kAllColls) {
      for (GroupShape g : {shape(2, 1), shape(8, 1), shape(2, 2), shape(16, 2), shape(64, 8), shape(512, 64),
                           shape(8, 8)}) {
        if (coll == Collective::kSendRecv && g.ranks != 2) continue;
        double prev = 0;
        for (double b = 1; b < 3e10; b *= 1.19) {
          double t = collective_cost(hw, coll, g, b).time_s;
          ASSERT_GE(t, prev) << hw.name << " " << collective_name(coll) << " ranks=" << g.ranks
                             << " nodes=" << g.nodes << " bytes=" << b;
          prev = t;
        }
      }
    }
  }
}

TEST(CommModel, MoreBandwidthIsNeverSlower) {
  for (const HwProfile& base : shipped()) {
    HwProfile fast_nvlink = base, fast_net = base;
    fast_nvlink.node.intra_ring_busbw_bytes_per_s *= 2;
    fast_nvlink.node.intra_bw_bytes_per_s *= 2;
    fast_net.net.nic_bw_bytes_per_s *= 2;
    for (Collective coll : kAllColls) {
      for (GroupShape g : {shape(2, 1), shape(8, 1), shape(2, 2), shape(64, 8)}) {
        if (coll == Collective::kSendRecv && g.ranks != 2) continue;
        for (double b = 1e3; b < 1e10; b *= 3.7) {
          double t = collective_cost(base, coll, g, b).time_s;
          EXPECT_LE(collective_cost(fast_nvlink, coll, g, b).time_s, t * (1 + 1e-12)) << base.name;
          EXPECT_LE(collective_cost(fast_net, coll, g, b).time_s, t * (1 + 1e-12)) << base.name;
        }
      }
    }
  }
}

TEST(CommModel, CrossingNodesIsNeverFaster) {
  for (const HwProfile& hw : shipped()) {
    std::vector<int> sizes{2, 4, 8, 16, 32, 64};
    for (int n : sizes) {
      if (n > hw.node.devices_per_node) continue;
      for (int nodes = 2; nodes <= n; nodes *= 2) {
        for (Collective coll : kAllColls) {
          if (coll == Collective::kSendRecv && n != 2) continue;
          for (double b = 8; b < 2e10; b *= 4.3) {
            double inside = collective_cost(hw, coll, shape(n, 1), b).time_s;
            double across = collective_cost(hw, coll, shape(n, nodes), b).time_s;
            EXPECT_GE(across, inside * (1 - 1e-12)) << hw.name << " " << collective_name(coll) << " n=" << n
                                                     << " nodes=" << nodes << " bytes=" << b;
          }
        }
      }
    }
  }
}

TEST(CommModel, TrafficPerLinkClass) {
  HwProfile hw = load("dgx-h100");
  const double s = 1e9;
  const int nv = static_cast<int>(LinkClass::kNvlink), pc = static_cast<int>(LinkClass::kPcie),
            net = static_cast<int>(LinkClass::kNetwork);
  CollectiveCost ring1 = collective_cost_for(hw, Collective::kAllReduce, shape(8, 1), s, CommAlgo::kRing,
                                             CommProto::kSimple);
  EXPECT_NEAR(ring1.sent_bytes[nv], 2.0 * 7 / 8 * s, 1);
  EXPECT_EQ(ring1.sent_bytes[net], 0);
  // 16 ranks on 2 nodes: 2 of the 16 ring edges leave a node.
  CollectiveCost ring2 = collective_cost_for(hw, Collective::kAllReduce, shape(16, 2), s, CommAlgo::kRing,
                                             CommProto::kSimple);
  double total = 2.0 * 15 / 16 * s;
  EXPECT_NEAR(ring2.sent_bytes[net], total * 2 / 16, 1);
  EXPECT_NEAR(ring2.sent_bytes[nv] + ring2.sent_bytes[net], total, 1);
  CollectiveCost ag = collective_cost(hw, Collective::kAllGather, shape(8, 1), s);
  EXPECT_NEAR(ag.sent_bytes[nv], 7.0 / 8 * s, 1);
  CollectiveCost p2p = collective_cost(hw, Collective::kSendRecv, shape(2, 2), s);
  EXPECT_EQ(p2p.algo, CommAlgo::kDirect);
  EXPECT_NEAR(p2p.sent_bytes[net], s, 1);
  EXPECT_EQ(p2p.sent_bytes[nv], 0);
  CollectiveCost a2a = collective_cost(hw, Collective::kAllToAll, shape(16, 2), s);
  EXPECT_NEAR(a2a.sent_bytes[net], s * 8 / 16, 1);
  EXPECT_NEAR(a2a.sent_bytes[nv], s * 7 / 16, 1);
  // PCIe-only nodes and CPU hosts report intra-node bytes as pcie.
  HwProfile pcie = worked_example_h100();
  pcie.node.fabric = "pcie";
  CollectiveCost on_pcie = collective_cost(pcie, Collective::kAllReduce, shape(4, 1), s);
  EXPECT_NEAR(on_pcie.sent_bytes[pc], 2.0 * 3 / 4 * s, 1);
  EXPECT_EQ(on_pcie.sent_bytes[nv], 0);
}

TEST(CommModel, NvlsWinsLargeSingleNodeAllReduceOnHopper) {
  HwProfile hw = load("dgx-h100");
  CollectiveCost big = collective_cost(hw, Collective::kAllReduce, shape(8, 1), 8e9);
  EXPECT_EQ(big.algo, CommAlgo::kNvls);
  // Measured on 8x H100: ~275 GB/s algbw, ~480 GB/s busbw (nccl-tests#212).
  EXPECT_NEAR(big.algbw_bytes_per_s / 1e9, 275, 5);
  EXPECT_NEAR(big.busbw_bytes_per_s / 1e9, 480, 10);
  EXPECT_EQ(collective_cost(hw, Collective::kAllReduce, shape(8, 1), 4096).proto, CommProto::kLL);
  // Two GPUs: the ring's algbw (= busbw) beats NVLS.
  EXPECT_EQ(collective_cost(hw, Collective::kAllReduce, shape(2, 1), 8e9).algo, CommAlgo::kRing);
}

TEST(CommModel, InapplicablePairsAreInfinite) {
  HwProfile h100 = load("dgx-h100"), a100 = load("dgx-a100-80gb"), cpu = load("cpu-local");
  auto t = [](const HwProfile& hw, Collective c, GroupShape g, CommAlgo a, CommProto p) {
    return collective_cost_for(hw, c, g, 1e6, a, p).time_s;
  };
  EXPECT_TRUE(std::isinf(t(h100, Collective::kAllReduce, shape(8, 1), CommAlgo::kTree, CommProto::kSimple)));
  EXPECT_FALSE(std::isinf(t(h100, Collective::kAllReduce, shape(16, 2), CommAlgo::kTree, CommProto::kSimple)));
  EXPECT_TRUE(std::isinf(t(h100, Collective::kAllGather, shape(16, 2), CommAlgo::kTree, CommProto::kSimple)));
  EXPECT_TRUE(std::isinf(t(a100, Collective::kAllReduce, shape(8, 1), CommAlgo::kNvls, CommProto::kSimple)));
  EXPECT_TRUE(std::isinf(t(h100, Collective::kAllReduce, shape(8, 1), CommAlgo::kNvls, CommProto::kLL)));
  EXPECT_TRUE(std::isinf(t(h100, Collective::kAllReduce, shape(16, 2), CommAlgo::kNvls, CommProto::kSimple)));
  EXPECT_TRUE(std::isinf(t(cpu, Collective::kAllReduce, shape(2, 1), CommAlgo::kRing, CommProto::kLL)));
  EXPECT_TRUE(std::isinf(t(h100, Collective::kSendRecv, shape(2, 1), CommAlgo::kRing, CommProto::kSimple)));
  EXPECT_TRUE(std::isinf(t(h100, Collective::kAllReduce, shape(8, 1), CommAlgo::kDirect, CommProto::kSimple)));
  HwProfile pcie = worked_example_h100();
  pcie.node.fabric = "pcie";
  EXPECT_TRUE(std::isinf(t(pcie, Collective::kAllReduce, shape(8, 1), CommAlgo::kRing, CommProto::kLL128)));
}

TEST(CommModel, MultiNodeRingIsBoundByTheNics) {
  // 8x HDR per DGX A100 node: NCCL reaches 24 of 25 GB/s per NIC, 192 GB/s per node.
  HwProfile a100 = load("dgx-a100-80gb");
  CollectiveCost c = collective_cost(a100, Collective::kAllReduce, shape(16, 2), 16e9);
  EXPECT_EQ(c.algo, CommAlgo::kRing);
  EXPECT_NEAR(c.busbw_bytes_per_s / 1e9, 192, 2);
  // A DP group with one rank per node owns one NIC of its node.
  CollectiveCost dp = collective_cost(a100, Collective::kAllReduce, shape(8, 8), 16e9);
  EXPECT_NEAR(dp.busbw_bytes_per_s / 1e9, 24, 0.5);
  // Many nodes: the tree's log-depth latency wins mid-size messages, the ring large ones.
  HwProfile h100 = load("dgx-h100");
  GroupShape big = shape(512, 64);
  EXPECT_EQ(collective_cost(h100, Collective::kAllReduce, big, 1e6).algo, CommAlgo::kTree);
  EXPECT_EQ(collective_cost(h100, Collective::kAllReduce, big, 1e10).algo, CommAlgo::kRing);
}

TEST(CommModel, NodesInsideOneNvlinkDomainUseNvlink) {
  HwProfile nvl72 = load("gb200-nvl72");
  HwProfile trays = nvl72;  // the same rack described as 18 trays of 4 GPUs
  trays.node.devices_per_node = 4;
  trays.net.nics_per_node = 4;
  GroupShape in_rack = shape(16, 4), rack = shape(16, 1);
  for (double b : {1e4, 1e7, 1e9}) {
    CollectiveCost a = collective_cost(trays, Collective::kAllReduce, in_rack, b);
    CollectiveCost r = collective_cost(nvl72, Collective::kAllReduce, rack, b);
    EXPECT_DOUBLE_EQ(a.time_s, r.time_s);
    EXPECT_EQ(a.sent_bytes[static_cast<int>(LinkClass::kNetwork)], 0);
  }
}

// A calibrated CPU profile's measured sweep replaces the formula: exact at the
// measured sizes, log-log interpolation between them, the smallest message's
// time below it and bandwidth-bound scaling above; other group sizes scale by
// the collective's bus factor; multi-node groups keep the formula.
TEST(CommModel, MeasuredCollectivesReplaceTheFormulaOnOneNode) {
  HwProfile cpu = load("cpu-local");
  CommTimeTable ar;
  ar.bytes = {4096, 65536, 1048576};
  ar.time_s = {20e-6, 80e-6, 900e-6};
  cpu.node.measured.ranks = 4;
  cpu.node.measured.tables["all_reduce"] = ar;
  auto t = [&](int n, double b, int nodes = 1) {
    return collective_cost(cpu, Collective::kAllReduce, shape(n, nodes), b).time_s;
  };
  EXPECT_DOUBLE_EQ(t(4, 65536), 80e-6);
  EXPECT_DOUBLE_EQ(t(4, 1024), 20e-6);                  // latency floor
  EXPECT_NEAR(t(4, 2 * 1048576), 1800e-6, 1e-12);       // bandwidth-bound beyond the sweep
  EXPECT_NEAR(t(4, 16384), std::sqrt(20e-6 * 80e-6), 1e-12);  // halfway in log(bytes): geometric mean
  // A 2-rank group moves 2(n-1)/n = 1 vs 1.5 buffer per rank: 2/3 of the time.
  EXPECT_NEAR(t(2, 65536), 80e-6 * (1.0 / 1.5), 1e-15);
  // Collectives it did not measure, and groups spanning nodes, use the formula.
  HwProfile plain = load("cpu-local");
  EXPECT_DOUBLE_EQ(collective_cost(cpu, Collective::kAllGather, shape(4, 1), 65536).time_s,
                   collective_cost(plain, Collective::kAllGather, shape(4, 1), 65536).time_s);
  EXPECT_DOUBLE_EQ(t(4, 65536, 2), collective_cost(plain, Collective::kAllReduce, shape(4, 2), 65536).time_s);
  // The measured path reports itself as ring / Simple, and only that pair applies.
  EXPECT_DOUBLE_EQ(collective_cost_for(cpu, Collective::kAllReduce, shape(4, 1), 65536, CommAlgo::kRing,
                                       CommProto::kSimple).time_s, 80e-6);
  EXPECT_TRUE(std::isinf(collective_cost_for(cpu, Collective::kAllReduce, shape(4, 1), 65536, CommAlgo::kTree,
                                             CommProto::kSimple).time_s));
  // Monotone in bytes across the whole range.
  double prev = 0;
  for (double b = 512; b < 1e8; b *= 1.7) {
    double now = t(4, b);
    EXPECT_GE(now, prev) << b;
    prev = now;
  }
}

TEST(CommModel, NamesAndVersion) {
  EXPECT_STREQ(collective_name(Collective::kAllReduce), "all_reduce");
  EXPECT_STREQ(collective_name(Collective::kAllToAll), "all_to_all");
  EXPECT_STREQ(comm_algo_name(CommAlgo::kNvls), "nvls");
  EXPECT_STREQ(comm_proto_name(CommProto::kLL128), "LL128");
  EXPECT_STREQ(link_class_name(LinkClass::kNetwork), "network");
  EXPECT_NE(std::string(comm_model_nccl_version()).find("2.30"), std::string::npos);
}

TEST(CommModel, FastEnoughForTheLayoutSearch) {
  HwProfile hw = load("dgx-h100");
  const int calls = 200000;
  double sink = 0;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i)
    sink += collective_cost(hw, kAllColls[i % 6], shape(16, 2), 1e3 + i).time_s;
  double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / calls;
  EXPECT_GT(sink, 0);
  std::printf("collective_cost: %.0f ns per call\n", ns);
  EXPECT_LT(ns, 5000) << "generous bound for a shared 2-core machine; target ~100 ns";
}

}  // namespace
}  // namespace loom
