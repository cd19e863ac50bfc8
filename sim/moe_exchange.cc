// A MoE layer's dispatch / combine exchange and the chance that a token's
// experts reach a node (declared in sim/compute_model.h).
#include "sim/compute_model.h"

namespace loom {

namespace {

// C(a - b, k) / C(a, k): the chance that k draws without replacement from a
// items all miss a set of b.
double all_miss(double a, double b, double k) {
  double p = 1;
  for (int i = 0; i < int(k); ++i) {
    if (a - b - i <= 0) return 0;
    p *= (a - b - i) / (a - i);
  }
  return p;
}

}  // namespace

MoeExchange moe_exchange(const ModelSpec& m, const HwProfile& hw, const SimOptions& opt, const ComputeShape& sh,
                         double elem_bytes, double load) {
  MoeExchange x;
  if (sh.ep_group.ranks <= 1) return x;
  const double tokens = double(sh.tokens) * (sh.sp ? 1.0 / sh.tp : 1.0), h = double(m.hidden);
  const double k = m.moe.experts_per_token;
  if (opt.moe_dedup_dispatch && sh.ep_group.nodes > 1) {
    // Each token crosses the network once per remote node it reaches; every
    // copy whose expert is not on the GPU it lands on moves over NVLink (the
    // sender's node, or the receiving proxy's).
    const double N = sh.ep_group.nodes, ppn = sh.ep_group.ranks_per_node;
    const double net = tokens * h * elem_bytes * (N - 1) * moe_node_hit_probability(m.moe, sh.ep_group.nodes) * load;
    const double intra = tokens * k * h * elem_bytes * (ppn - 1) / ppn * load;
    x.cost = dedup_dispatch_cost(hw, sh.ep_group, intra, net);
    x.bytes = intra + net;
    return x;
  }
  // The busiest rank's send buffer (comm_model.h convention), one copy per expert.
  x.bytes = tokens * k * h * elem_bytes * load;
  x.cost = collective_cost(hw, Collective::kAllToAll, sh.ep_group, x.bytes);
  return x;
}

double moe_node_hit_probability(const MoeSpec& moe, int nodes) {
  if (nodes <= 1) return 1;
  const double E = moe.num_experts, k = moe.experts_per_token;
  if (moe.num_groups > 1 && moe.topk_groups > 0 && moe.num_groups % nodes == 0) {
    const double G = moe.num_groups;
    return 1 - all_miss(G, G / nodes, moe.topk_groups);
  }
  return 1 - all_miss(E, E / nodes, k);
}

}  // namespace loom
