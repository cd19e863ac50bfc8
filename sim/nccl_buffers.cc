#include "sim/nccl_buffers.h"

#include <algorithm>

#include "sim/comm_model.h"

namespace loom {
namespace {

// NCCL 2.18-2.27 at its default buffer sizes (src/transport/p2p.cc, the P2P
// transport over NVLink): the receiving GPU holds the three protocols'
// buffers (SIMPLE 4 MiB + LL128 4.6875 MiB + LL 512 KiB and the recv
// control block, rounded up to CUDA_IPC_MIN = 2 MiB: 10 MiB), the sending GPU
// its send control block (2 MiB), for every channel of a connection; 8x H100
// all-to-all allocations of exactly 10,485,760 and 2,097,152 bytes
// (NVIDIA/nccl#1685).
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kRecvBytes = 10 * kMiB;
constexpr double kSendBytes = 2 * kMiB;
// A communicator spanning nodes: NCCL gives every peer the channels of its
// slowest one, 2 a NIC to start (src/graph/paths.cc, NCHANNELS_PER_NET_PEER
// default), and its network peers share one staging pool a direction of
// p2p channels x NCCL_SHARED_STEPS (16) x the 128 KiB network chunk
// (src/transport/net.cc, P2P_NET_CHUNKSIZE).
constexpr double kNetChannelsPerPeer = 2;
constexpr double kSharedPoolBytesPerChannel = 16 * 128 * 1024.0;

// One communicator's buffers on a rank that receives from `recv_peers` and
// sends to `send_peers` of its `g` members.
double communicator_bytes(const HwProfile& hw, const GroupShape& g, int recv_peers, int send_peers) {
  const double ch = hw.node.nccl_p2p_channels_per_peer;
  if (ch <= 0 || g.ranks <= 1 || (recv_peers <= 0 && send_peers <= 0)) return 0;
  // Nodes of one NVLink domain (NVL72 trays) count as one: NCCL's multi-node
  // NVLink connects them over the P2P transport, the NVLink channels a peer.
  const GroupShape d = over_nvlink_domains(hw, g);
  if (d.nodes <= 1) return ch * (recv_peers * kRecvBytes + send_peers * kSendBytes);
  // Spanning nodes: the pools (send and receive), and the peers on the same
  // node (at most ranks_per_node - 1 of them) over NVLink at the network's
  // channels a peer.
  const int local = d.ranks_per_node - 1;
  return 2 * ch * kSharedPoolBytesPerChannel +
         kNetChannelsPerPeer * (std::min(recv_peers, local) * kRecvBytes + std::min(send_peers, local) * kSendBytes);
}

}  // namespace

int pipeline_peers(const Layout& l, int stage) {
  if (l.pp <= 1) return 0;
  if (l.pp == 2) return 1;
  const bool wraps = (l.schedule == Schedule::kInterleaved && l.virtual_stages > 1) || l.schedule == Schedule::kDualPipeV;
  if (wraps) return 2;
  return (stage > 0 ? 1 : 0) + (stage < l.pp - 1 ? 1 : 0);
}

double nccl_fixed_p2p_bytes(const ModelSpec& m, const HwProfile& hw, const Layout& l, const SimOptions& opt,
                            const GroupShape& cp_group, const GroupShape& ep_group) {
  if (hw.node.nccl_p2p_channels_per_peer <= 0) return 0;
  double bytes = 0;
  // The context-parallel ring (Transformer Engine's send/recv of K/V around
  // the CP group): receives from the previous rank and sends to the next.
  if (l.cp > 1 && l.cp_comm == CpComm::kP2p) bytes += communicator_bytes(hw, cp_group, 1, 1);
  // The experts' all-to-all through NCCL (not a deduplicating dispatcher's
  // own buffers): every other member both ways.
  if (m.is_moe() && l.ep > 1 && !opt.moe_dedup_dispatch)
    bytes += communicator_bytes(hw, ep_group, ep_group.ranks - 1, ep_group.ranks - 1);
  return bytes;
}

// Pipeline: each neighbour both ways (activations forward, gradients back).
double nccl_pp_peer_bytes(const HwProfile& hw, const GroupShape& pp_group) {
  return communicator_bytes(hw, pp_group, 1, 1);
}

NcclP2pBuffers nccl_p2p_buffers(const ModelSpec& m, const HwProfile& hw, const Layout& l, const SimOptions& opt) {
  NcclP2pBuffers b;
  if (hw.node.nccl_p2p_channels_per_peer <= 0) return b;
  const int dpn = hw.node.devices_per_node;
  if (l.pp > 1) b.per_pp_peer_bytes = nccl_pp_peer_bytes(hw, group_shape(l, Dim::kPp, dpn));
  const GroupShape none;
  b.fixed_bytes = nccl_fixed_p2p_bytes(m, hw, l, opt, l.cp > 1 ? group_shape(l, Dim::kCp, dpn) : none,
                                       l.ep > 1 ? expert_group_shape(l, dpn) : none);
  return b;
}

}  // namespace loom
