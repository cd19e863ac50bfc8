// Communication cost model: time and link traffic of one NCCL-style collective.
//
// Mimics NCCL's own tuning model (../shared/docs/reference/nccl_cost_model.md,
// NVIDIA/nccl src/graph/tuning.cc): for every enabled (algorithm, protocol)
// pair a latency and an algorithm bandwidth are derived from the hardware
// profile and the group's placement on nodes, and the cheapest is chosen:
//   time = latency + bytes / algbw.
// Algorithms: Ring, Tree (all-reduce), NVLS (single-node NVSwitch SHARP, when
// the profile has it); across nodes the ring and tree pay NCCL's network hop
// latencies on their inter-node steps and the NIC share of the group. Protocols: LL, LL128,
// Simple. All constants live in one table in comm_model.cc with the NCCL
// version they come from.
//
// Byte conventions (nccl-tests): `bytes` is the size of ONE rank's buffer for
// all-reduce / broadcast / send-recv, and the TOTAL size across ranks (the
// gathered output) for all-gather / reduce-scatter. For all-to-all it is one
// rank's whole send buffer (n chunks, one per peer, its own included), as in
// nccl-tests alltoall_perf: each rank sends (n-1)/n of it.
// busbw follows nccl-tests: all-reduce algbw*2(n-1)/n, AG/RS/A2A algbw*(n-1)/n,
// broadcast and send/recv algbw.
//
// Thread-safety: pure functions; safe from any thread. Fast: no allocation,
// ~100 ns per call (the layout search calls it millions of times).
#pragma once

#include <cstdint>

#include "core/hw_profile.h"
#include "core/layout.h"

namespace loom {

// The channels (one thread block, so one SM, each) an NCCL collective runs
// on in this model: 16 on an 8-GPU NVSwitch node (sim/comm_model.cc).
double nccl_channels();
// `g` with the nodes of one NVLink domain (NVL72 trays, which reach each
// other over NVLink) counted as one node: the domains it spans and its
// members a domain. The node's own shape where the domain is the node.
GroupShape over_nvlink_domains(const HwProfile& hw, const GroupShape& g);

enum class Collective : uint8_t { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kSendRecv, kAllToAll };
enum class CommAlgo : uint8_t { kRing, kTree, kNvls, kDirect };  // kDirect: p2p and all-to-all
enum class CommProto : uint8_t { kLL, kLL128, kSimple };
const char* collective_name(Collective c);
const char* comm_algo_name(CommAlgo a);
const char* comm_proto_name(CommProto p);

// Link classes traffic is reported on.
enum class LinkClass : uint8_t { kNvlink = 0, kPcie = 1, kNetwork = 2 };
inline constexpr int kNumLinkClasses = 3;
const char* link_class_name(LinkClass l);  // "nvlink", "pcie", "network"

struct CollectiveCost {
  double time_s = 0;
  CommAlgo algo = CommAlgo::kRing;
  CommProto proto = CommProto::kSimple;
  double algbw_bytes_per_s = 0;  // bytes / time, nccl-tests convention
  double busbw_bytes_per_s = 0;
  // Bytes ONE rank sends on each link class for this call (what a NIC or an
  // NVLink port of that rank carries). Intra-node traffic goes to kNvlink on
  // NVLink/NVSwitch fabrics and to kPcie on PCIe-only nodes.
  double sent_bytes[kNumLinkClasses] = {0, 0, 0};
};

// Cost of one call on a group placed as `shape` (ranks, nodes, ranks per
// node). A group of 1 rank costs 0. For kSendRecv, `shape.nodes` == 2 means the
// peer is on another node, 1 means the same node.
CollectiveCost collective_cost(const HwProfile& hw, Collective coll, const GroupShape& shape, double bytes);

// The same model for one (algorithm, protocol) pair instead of the cheapest:
// what NCCL_ALGO / NCCL_PROTO would force. time_s is +infinity when the pair
// does not apply (Tree on one node, NVLS without NVLink SHARP, LL128 on PCIe,
// anything but Simple on a CPU profile, ...). For tests, reports and tuning.
CollectiveCost collective_cost_for(const HwProfile& hw, Collective coll, const GroupShape& shape, double bytes,
                                   CommAlgo algo, CommProto proto);

// MoE token dispatch (or combine) with per-node deduplication, as DeepEP's
// internode kernels run it (DeepSeek-V3 report, section 3.2.2): a token
// crosses the network once per remote node that holds one of its experts,
// to the GPU with the same local index there, which forwards it over NVLink
// to the experts' GPUs. `intra_bytes` is what one rank moves over NVLink, its
// own node's copies and the forwarding, and `net_bytes` what it sends over
// the network. The two paths run at once: one hop of latency (a network hop
// when the group spans nodes) plus the slower of the two, at the Simple
// protocol's bandwidth.
CollectiveCost dedup_dispatch_cost(const HwProfile& hw, const GroupShape& shape, double intra_bytes,
                                   double net_bytes);

// The NCCL release whose tuning constants the model copies ("2.30.x ...").
const char* comm_model_nccl_version();

}  // namespace loom
