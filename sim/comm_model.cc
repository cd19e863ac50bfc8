// Communication cost model: NCCL's tuning model (tuning.cc) re-implemented
// for planning. See comm_model.h for the contract and
// docs/formats/hwprofile.md for where the profile numbers come from.
//
// time = latency(algo, proto, placement) + bytes / algbw(algo, proto, placement)
// for every enabled (algo, proto); the cheapest wins, as in NCCL's
// topoGetAlgoInfo. GPU profiles use NCCL's constant tables below; CPU profiles
// (sm_arch 0, MPI over shared memory or TCP) use a plain ring with the
// profile's own per-hop latencies.
#include "sim/comm_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom {
namespace {

// ============================================================================
// Constants. NVIDIA/nccl src/graph/tuning.cc and search.cc, master 5067397c
// (release line v2.30.x), as tabulated in shared/docs/reference/
// nccl_cost_model.md. Units: microseconds and GB/s (1e9 B/s), as in NCCL.
// ============================================================================
constexpr const char* kNcclVersion = "2.30.x (NVIDIA/nccl master 5067397c)";

constexpr int kLL = 0, kLL128 = 1, kSimple = 2;      // protocol index
constexpr int kTreeA = 0, kRingA = 1, kNvlsA = 2;    // algorithm index
constexpr int kHwNvlink = 0, kHwPci = 1, kHwNet = 2;  // link index
// Architecture rows: 0 Volta (sm70), 1 Ampere (sm80-89), 2 Hopper (sm90), 3 Blackwell (sm100+).
// Node columns: 0 = 1 node, 1 = 2 nodes, 2 = 3+ nodes.

// baseLat[algo][proto], us.
constexpr double kBaseLatUs[3][3] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0}};
// hwLat[link][algo][proto], us per hop. NVLS: Simple only.
constexpr double kHwLatUs[3][3][3] = {
    {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}, {0, 0, 25.0}},   // NVLink
    {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 0}},       // PCI
    {{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}, {0, 0, 18.0}},  // NET
};
// Per-hop CPU-side proxy overhead on multi-node rings (x3 for Simple).
constexpr double kNetOverheadUs = 1.0, kNetOverheadAmdUs = 2.0;
// Ring Simple all-reduce over >1 node: latency x1.4 (x1.9 on Volta) once
// bytes / (channels * ranks) >= 64.
constexpr double kRingPlateauFactor = 1.4, kRingPlateauFactorVolta = 1.9, kRingPlateauBytes = 64;

// LL cap, total GB/s. Single node: GPU-arch row; multi-node: row 0 for Intel
// and other CPUs, row 1 for AMD/mixed (NCCL's quirk).
constexpr double kLlMaxBw[4][3] = {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
// Per-channel caps, GB/s.
constexpr double kPerChMaxRingLL128Bw[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {40, 40, 40}};
constexpr double kPerChMaxTreeLL128Bw[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
constexpr double kPerChMaxTreeBw[4][3] = {{26.5, 18.5, 10}, {24, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70, 42.8, 24}};
constexpr double kLL128Efficiency = 0.92;        // 120/128 payload, as NCCL's 0.92 busBw factor
constexpr double kTreeLL128MultiNode = 120.0 / 128.0;
constexpr double kTreeLLDivisor = 3.8;
constexpr double kTreeAllReduceEfficiency = 0.92;
// Channels NCCL runs on an 8-GPU NVSwitch node; scales only the per-channel
// caps and the ring-plateau threshold (channel search is not modelled).
constexpr double kChannels = 16;

// Tree all-reduce size correction, index log2(bytes / 64), 64 B .. 256 MB
// (NCCL treeCorrectionFactor). Interpolated linearly in log2(bytes) here so
// that time stays non-decreasing in bytes (NCCL steps).
constexpr double kTreeCorrection[3][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};

// Per-channel network speeds NCCL's search tries (GB/s, descending); a NIC's
// achievable rate is the best total of 1..4 channels that fits its line rate.
constexpr double kNetSpeedsPreHopper[] = {48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12};
constexpr double kNetSpeedsHopper[] = {48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12};
constexpr double kNetSpeedsBlackwell[] = {96, 86, 80, 48, 45.1, 42, 40, 30, 24, 22, 20, 17.5,
                                          15, 12, 6,  3,  2.4,  1.2, 0.24, 0.12};

// NVLS all-reduce (single node): algbw as a fraction of the node's ring busbw.
// Measured, not NCCL's model (which predicts ~590 GB/s busbw on H100):
// Hopper 275/370 (8xH100, NVIDIA/nccl-tests#212, NVIDIA/nccl#1455, NVIDIA/nccl#2140),
// Blackwell 483/695 (8xB300, NVIDIA/nccl#2140). 0 = no NVLS on that arch.
constexpr double kNvlsAlgBwPerRingBusBw[4] = {0, 0, 275.0 / 370.0, 483.0 / 695.0};

constexpr double kUs = 1e-6, kGBs = 1e9;
constexpr double kInf = std::numeric_limits<double>::infinity();

// ============================================================================

// Everything about the hardware and placement one call needs, derived once.
struct Ctx {
  const HwProfile* hw;
  int n = 1, nodes = 1, ppn = 1;   // ranks, nodes (NVLink domains), ranks per node
  int dpn = 1;                     // devices per node (domain)
  int arch = -1;                   // 0..3; -1 = CPU profile
  int ncol = 0;                    // node column of the cap tables
  int intra_hw = kHwNvlink;        // NVLink or PCI hop latencies
  LinkClass intra_class = LinkClass::kNvlink;
  bool ll128_ok = false, amd = false;
  double intra_busbw = 0;          // B/s
  double net_group_bw = 0;         // B/s: the group's share of its node's NICs
  double net_rank_bw = 0;          // B/s: one rank's share
};

int log2i(int v) {
  int r = 0;
  while (v >= 2) v >>= 1, ++r;
  return r;
}

template <size_t N>
double best_nic_speed(const double (&speeds)[N], double nic_gbs) {
  double best = 0;
  for (int ch = 1; ch <= 4; ++ch) {
    for (double s : speeds)
      if (s * ch <= nic_gbs) {
        best = std::max(best, s * ch);
        break;
      }
  }
  return best > 0 ? best : nic_gbs;  // slower than any listed speed: the line rate
}

// What one NIC delivers to NCCL, GB/s.
double nic_gbs(int arch, double line_gbs) {
  if (arch < 0) return line_gbs;
  if (arch >= 3) return best_nic_speed(kNetSpeedsBlackwell, line_gbs);
  if (arch == 2) return best_nic_speed(kNetSpeedsHopper, line_gbs);
  return best_nic_speed(kNetSpeedsPreHopper, line_gbs);
}

Ctx make_ctx(const HwProfile& hw, const GroupShape& shape) {
  Ctx c;
  c.hw = &hw;
  const GroupShape d = over_nvlink_domains(hw, shape);
  c.n = d.ranks;
  c.nodes = d.nodes;
  c.ppn = d.ranks_per_node;
  c.dpn = std::max(1, hw.node.devices_per_node);
  int nics = std::max(0, hw.net.nics_per_node);
  // Nodes inside one NVLink domain (NVL72 trays) talk over NVLink: the
  // domain is the node, with all its trays' NICs.
  const int domain = hw.node.nvlink_domain_size;
  if (domain > c.dpn && domain % c.dpn == 0) {
    nics *= domain / c.dpn;
    c.dpn = domain;
  }
  const int sm = hw.accel.sm_arch;
  c.arch = sm <= 0 ? -1 : sm < 80 ? 0 : sm < 90 ? 1 : sm < 100 ? 2 : 3;
  c.ncol = c.nodes == 1 ? 0 : c.nodes == 2 ? 1 : 2;
  const std::string& fabric = hw.node.fabric;
  bool nvlink = fabric == "nvswitch" || fabric == "nvlink";
  c.intra_hw = nvlink ? kHwNvlink : kHwPci;
  c.intra_class = nvlink ? LinkClass::kNvlink : LinkClass::kPcie;
  c.ll128_ok = c.arch >= 0 && nvlink;  // NCCL: LL128 only on NVLink-class intra paths
  c.amd = hw.net.cpu_vendor == "amd" || hw.net.cpu_vendor == "mixed";
  c.intra_busbw = hw.node.intra_ring_busbw_bytes_per_s;
  double node_net = nics * nic_gbs(c.arch, hw.net.nic_bw_bytes_per_s / kGBs) * kGBs;
  // Every device of a node runs a group of this shape at once (the layout
  // tiles the world), so a group owns ppn/dpn of its node's NICs.
  double share = std::min(1.0, double(c.ppn) / c.dpn);
  // Cross-node traffic also leaves the GPU over its intra-node path.
  c.net_group_bw = std::min(c.intra_busbw, node_net * share);
  c.net_rank_bw = std::min(c.intra_busbw, node_net / c.dpn);
  return c;
}

double ll_max_bw(const Ctx& c) {
  int row = c.nodes == 1 ? c.arch : (c.amd ? 1 : 0);
  return kLlMaxBw[row][c.ncol] * kGBs;
}

// Bytes the GPU-side protocol lets through: LL halves the payload and is
// capped, LL128 keeps 120 of 128 bytes.
double proto_bw(const Ctx& c, int proto, double bw) {
  if (proto == kLL) return std::min(ll_max_bw(c), 0.5 * bw);
  if (proto == kLL128) return kLL128Efficiency * bw;
  return bw;
}

double tree_correction(int proto, double bytes) {
  double x = std::log2(std::max(bytes, 1.0) / 64.0);
  if (x <= 0) return kTreeCorrection[proto][0];
  if (x >= 22) return kTreeCorrection[proto][22];
  int i = static_cast<int>(x);
  double t = x - i;
  return kTreeCorrection[proto][i] + t * (kTreeCorrection[proto][i + 1] - kTreeCorrection[proto][i]);
}

// One candidate: latency (s) and algorithm bandwidth (B/s); lat < 0 = not applicable.
struct Cand {
  double lat_s = -1, algbw = 0;
};

Cand ring(const Ctx& c, Collective coll, int p, double bytes) {
  const bool cpu = c.arch < 0;
  if (cpu && p != kSimple) return {};
  if (p == kLL128 && !c.ll128_ok) return {};
  const int n = c.n, N = c.nodes;
  double nsteps = coll == Collective::kAllReduce ? 2.0 * (n - 1) : coll == Collective::kBroadcast ? n : n - 1.0;
  double bus = N > 1 ? c.net_group_bw : c.intra_busbw;
  if (!cpu) {
    if (p == kLL128) bus = std::min(kLL128Efficiency * bus, kChannels * kPerChMaxRingLL128Bw[c.arch][c.ncol] * kGBs);
    else bus = proto_bw(c, p, bus);
  }
  Cand r;
  r.algbw = bus * n / nsteps;
  double intra = cpu ? c.hw->node.intra_latency_s : kHwLatUs[c.intra_hw][kRingA][p] * kUs;
  double inter = cpu ? c.hw->net.latency_s : kHwLatUs[kHwNet][c.ppn == 1 ? kTreeA : kRingA][p] * kUs;
  double base = cpu ? 0 : kBaseLatUs[kRingA][p] * kUs;
  if (coll == Collective::kBroadcast) {  // pipelined chain: one hop of latency
    r.lat_s = base + (N > 1 ? inter : intra);
    return r;
  }
  double inter_steps = N == 1 ? 0 : coll == Collective::kAllReduce ? 2.0 * (N - 1) : N - 1.0;
  if (N > 1 && !cpu) {
    double overhead = (c.amd ? kNetOverheadAmdUs : kNetOverheadUs) * (p == kSimple ? 3 : 1) * kUs;
    intra = std::max(intra, overhead);
  }
  r.lat_s = base + (nsteps - inter_steps) * intra + inter_steps * inter;
  if (!cpu && coll == Collective::kAllReduce && p == kSimple && N > 1 &&
      bytes / (kChannels * n) >= kRingPlateauBytes)
    r.lat_s *= c.arch == 0 ? kRingPlateauFactorVolta : kRingPlateauFactor;
  return r;
}

Cand tree(const Ctx& c, int p, double bytes) {
  if (c.arch < 0 || c.nodes < 2) return {};
  if (p == kLL128 && !c.ll128_ok) return {};
  double bus = c.net_group_bw;
  bus = std::min(kTreeAllReduceEfficiency * bus, kChannels * kPerChMaxTreeBw[c.arch][c.ncol] * kGBs);
  if (p == kLL) bus = std::min(bus / kTreeLLDivisor, ll_max_bw(c));
  if (p == kLL128)
    bus = std::min(bus * kTreeLL128MultiNode, kChannels * kPerChMaxTreeLL128Bw[c.arch][c.ncol] * kGBs);
  Cand r;
  r.algbw = 0.5 * bus * tree_correction(p, bytes);
  double intra = kHwLatUs[c.intra_hw][kTreeA][p], inter = kHwLatUs[kHwNet][kTreeA][p];
  r.lat_s = (kBaseLatUs[kTreeA][p] + 2 * ((c.ppn - 1) * intra + log2i(c.nodes) * inter)) * kUs;
  return r;
}

Cand nvls(const Ctx& c, int p) {
  if (c.arch < 0 || p != kSimple || c.nodes != 1 || c.n < 2 || !c.hw->node.nvls) return {};
  double frac = kNvlsAlgBwPerRingBusBw[c.arch];
  if (frac <= 0) return {};
  Cand r;
  r.algbw = frac * c.intra_busbw;
  r.lat_s = (kBaseLatUs[kNvlsA][p] + kHwLatUs[kHwNvlink][kNvlsA][p]) * kUs;
  return r;
}

// Send/recv and all-to-all: direct transfers, one hop of latency.
// A direct transfer's path: one hop of latency (a network hop when the group
// spans nodes) and the protocol's NVLink / network bandwidths.
struct DirectPath {
  double lat_s, bw_intra, bw_net;
};
DirectPath direct_path(const Ctx& c, int p) {
  const bool cpu = c.arch < 0, cross = c.nodes > 1;
  const double intra_lat = cpu ? c.hw->node.intra_latency_s : kHwLatUs[c.intra_hw][kRingA][p] * kUs;
  const double inter_lat = cpu ? c.hw->net.latency_s : kHwLatUs[kHwNet][kRingA][p] * kUs;
  return {(cpu ? 0 : kBaseLatUs[kRingA][p] * kUs) + (cross ? inter_lat : intra_lat),
          cpu ? c.intra_busbw : proto_bw(c, p, c.intra_busbw), cpu ? c.net_rank_bw : proto_bw(c, p, c.net_rank_bw)};
}

Cand direct(const Ctx& c, Collective coll, int p, double bytes, double* time_s) {
  const bool cpu = c.arch < 0;
  if (cpu && p != kSimple) return {};
  if (p == kLL128 && !c.ll128_ok) return {};
  const bool cross = c.nodes > 1;
  const DirectPath path = direct_path(c, p);
  Cand r;
  r.lat_s = path.lat_s;
  const double bw_intra = path.bw_intra, bw_net = path.bw_net;
  double xfer;
  if (coll == Collective::kSendRecv) {
    xfer = bytes / (cross ? bw_net : bw_intra);
  } else {  // all-to-all: NIC part and NVLink part in parallel, all of it through the GPU
    double n = c.n;
    double out = bytes * (n - 1) / n, inter = cross ? bytes * (n - c.ppn) / n : 0;
    xfer = std::max(out / bw_intra, inter / bw_net);
  }
  *time_s = r.lat_s + xfer;
  r.algbw = *time_s > 0 ? bytes / *time_s : 0;
  return r;
}

int proto_index(CommProto p) { return p == CommProto::kLL ? kLL : p == CommProto::kLL128 ? kLL128 : kSimple; }
CommProto proto_of(int p) { return p == kLL ? CommProto::kLL : p == kLL128 ? CommProto::kLL128 : CommProto::kSimple; }

// Time of one (algo, proto); +inf when it does not apply.
double candidate_time(const Ctx& c, Collective coll, CommAlgo algo, int p, double bytes) {
  Cand r;
  const bool collective = coll != Collective::kSendRecv && coll != Collective::kAllToAll;
  switch (algo) {
    case CommAlgo::kRing:
      if (!collective) return kInf;
      r = ring(c, coll, p, bytes);
      break;
    case CommAlgo::kTree:
      if (coll != Collective::kAllReduce) return kInf;
      r = tree(c, p, bytes);
      break;
    case CommAlgo::kNvls:
      if (coll != Collective::kAllReduce) return kInf;
      r = nvls(c, p);
      break;
    case CommAlgo::kDirect: {
      if (collective) return kInf;
      double t = kInf;
      r = direct(c, coll, p, bytes, &t);
      return r.lat_s < 0 ? kInf : t;
    }
  }
  if (r.lat_s < 0 || !(r.algbw > 0)) return kInf;
  return r.lat_s + bytes / r.algbw;
}

double busbw_factor(Collective coll, double n) {
  switch (coll) {
    case Collective::kAllReduce: return 2 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll: return (n - 1) / n;
    case Collective::kBroadcast:
    case Collective::kSendRecv: return 1;
  }
  return 1;
}

// Bytes one (average) rank puts on each link class.
void fill_traffic(const Ctx& c, Collective coll, CommAlgo algo, double bytes, CollectiveCost& out) {
  const double n = c.n, N = c.nodes;
  double total = 0, net = 0;
  switch (coll) {
    case Collective::kAllReduce:
      if (algo == CommAlgo::kNvls) {  // reduce via multimem loads, multicast store of 1/n
        total = bytes * (n + 1) / n;
      } else {  // ring: N of the n ring edges leave a node; tree: N-1 of n-1 edges, both directions
        total = 2 * bytes * (n - 1) / n;
        net = algo == CommAlgo::kTree ? 2 * bytes * (N - 1) / n : (N > 1 ? total * N / n : 0);
      }
      break;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      total = bytes * (n - 1) / n;
      net = N > 1 ? total * N / n : 0;
      break;
    case Collective::kBroadcast:  // chain: n-1 edges, N-1 of them between nodes
      total = bytes * (n - 1) / n;
      net = bytes * (N - 1) / n;
      break;
    case Collective::kSendRecv:
      total = bytes;
      net = N > 1 ? bytes : 0;
      break;
    case Collective::kAllToAll:
      total = bytes * (n - 1) / n;
      net = N > 1 ? bytes * (n - c.ppn) / n : 0;
      break;
  }
  out.sent_bytes[static_cast<int>(LinkClass::kNetwork)] = net;
  out.sent_bytes[static_cast<int>(c.intra_class)] = total - net;
}

CollectiveCost finish(const Ctx& c, Collective coll, CommAlgo algo, int p, double bytes, double t) {
  CollectiveCost out;
  out.algo = algo;
  out.proto = proto_of(p);
  out.time_s = t;
  if (!(t < kInf)) return out;
  out.algbw_bytes_per_s = t > 0 ? bytes / t : 0;
  out.busbw_bytes_per_s = out.algbw_bytes_per_s * busbw_factor(coll, c.n);
  fill_traffic(c, coll, algo, bytes, out);
  return out;
}

bool trivial(const GroupShape& shape, double bytes) { return shape.ranks <= 1 || !(bytes > 0); }

// A calibrated CPU profile's measured time for a group on one node, scaled
// from the measured group size by the collective's bus factor; < 0 when the
// profile has no measurement for it.
double measured_time(const Ctx& c, Collective coll, const GroupShape& shape, double bytes) {
  const MeasuredCollectives& m = c.hw->node.measured;
  if (c.arch >= 0 || m.ranks < 2 || shape.nodes != 1) return -1;
  const CommTimeTable* t = m.find(collective_name(coll));
  if (!t) return -1;
  return t->lookup(bytes) * busbw_factor(coll, shape.ranks) / busbw_factor(coll, m.ranks);
}

CommAlgo measured_algo(Collective coll) {
  return coll == Collective::kSendRecv || coll == Collective::kAllToAll ? CommAlgo::kDirect : CommAlgo::kRing;
}

}  // namespace

const char* comm_model_nccl_version() { return kNcclVersion; }

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kSendRecv: return "send_recv";
    case Collective::kAllToAll: return "all_to_all";
  }
  return "?";
}

const char* comm_algo_name(CommAlgo a) {
  switch (a) {
    case CommAlgo::kRing: return "ring";
    case CommAlgo::kTree: return "tree";
    case CommAlgo::kNvls: return "nvls";
    case CommAlgo::kDirect: return "direct";
  }
  return "?";
}

const char* comm_proto_name(CommProto p) {
  switch (p) {
    case CommProto::kLL: return "LL";
    case CommProto::kLL128: return "LL128";
    case CommProto::kSimple: return "Simple";
  }
  return "?";
}

const char* link_class_name(LinkClass l) {
  switch (l) {
    case LinkClass::kNvlink: return "nvlink";
    case LinkClass::kPcie: return "pcie";
    case LinkClass::kNetwork: return "network";
  }
  return "?";
}

CollectiveCost collective_cost_for(const HwProfile& hw, Collective coll, const GroupShape& shape, double bytes,
                                   CommAlgo algo, CommProto proto) {
  const int p = proto_index(proto);
  if (trivial(shape, bytes)) {
    CollectiveCost zero;
    zero.algo = algo;
    zero.proto = proto;
    return zero;
  }
  Ctx c = make_ctx(hw, shape);
  if (double t = measured_time(c, coll, shape, bytes); t >= 0)
    return finish(c, coll, algo, p, bytes, algo == measured_algo(coll) && p == kSimple ? t : kInf);
  return finish(c, coll, algo, p, bytes, candidate_time(c, coll, algo, p, bytes));
}

CollectiveCost collective_cost(const HwProfile& hw, Collective coll, const GroupShape& shape, double bytes) {
  if (trivial(shape, bytes)) {
    CollectiveCost zero;
    if (coll == Collective::kSendRecv || coll == Collective::kAllToAll) zero.algo = CommAlgo::kDirect;
    return zero;
  }
  Ctx c = make_ctx(hw, shape);
  if (double t = measured_time(c, coll, shape, bytes); t >= 0) return finish(c, coll, measured_algo(coll), kSimple, bytes, t);
  static constexpr CommAlgo kAlgos[] = {CommAlgo::kRing, CommAlgo::kTree, CommAlgo::kNvls, CommAlgo::kDirect};
  double best = kInf;
  CommAlgo best_algo = CommAlgo::kRing;
  int best_p = kSimple;
  for (CommAlgo a : kAlgos) {
    for (int p = kLL; p <= kSimple; ++p) {
      double t = candidate_time(c, coll, a, p, bytes);
      if (t < best) best = t, best_algo = a, best_p = p;
    }
  }
  return finish(c, coll, best_algo, best_p, bytes, best);
}

CollectiveCost dedup_dispatch_cost(const HwProfile& hw, const GroupShape& shape, double intra_bytes,
                                   double net_bytes) {
  CollectiveCost out;
  out.algo = CommAlgo::kDirect;
  if (shape.ranks <= 1 || !(intra_bytes + net_bytes > 0)) return out;
  Ctx c = make_ctx(hw, shape);
  const DirectPath path = direct_path(c, kSimple);
  const double net = c.nodes > 1 ? net_bytes : 0;
  out.time_s = path.lat_s + std::max(intra_bytes / path.bw_intra, net > 0 ? net / path.bw_net : 0.0);
  out.algbw_bytes_per_s = out.time_s > 0 ? (intra_bytes + net) / out.time_s : 0;
  out.busbw_bytes_per_s = out.algbw_bytes_per_s;
  out.sent_bytes[static_cast<int>(LinkClass::kNetwork)] = net;
  out.sent_bytes[static_cast<int>(c.intra_class)] = intra_bytes;
  return out;
}

GroupShape over_nvlink_domains(const HwProfile& hw, const GroupShape& g) {
  GroupShape s;
  s.ranks = std::max(1, g.ranks);
  s.nodes = std::clamp(g.nodes, 1, s.ranks);
  s.ranks_per_node = std::max(1, g.ranks_per_node);
  if (s.ranks_per_node * s.nodes < s.ranks) s.ranks_per_node = (s.ranks + s.nodes - 1) / s.nodes;
  const int dpn = std::max(1, hw.node.devices_per_node), domain = hw.node.nvlink_domain_size;
  if (domain > dpn && domain % dpn == 0) {
    const int per_domain = domain / dpn;
    s.nodes = (s.nodes + per_domain - 1) / per_domain;
    s.ranks_per_node = std::max(s.ranks_per_node, (s.ranks + s.nodes - 1) / s.nodes);
  }
  return s;
}

double nccl_channels() { return kChannels; }

}  // namespace loom
