// RankGrid: rank <-> coordinates along dp/tp/pp/ep/cp, as pure functions of
// the layout (Megatron's parallel_state without the global state).
#include <algorithm>

#include "core/layout.h"

namespace loom {

// The mixed-radix "digits" of a rank are tp, cp, ep (the expert shard inside
// dp), edp (dp / ep) and pp; Dim::kDp in a rank order stands for the edp digit.
RankGrid::RankGrid(const Layout& layout) {
  // The default order is by far the most common: skip parsing it.
  static const std::vector<Dim> kDefaultOrder{Dim::kTp, Dim::kCp, Dim::kEp, Dim::kDp, Dim::kPp};
  Result<std::vector<Dim>> order = layout.rank_order == "tp-cp-ep-dp-pp" ? Result<std::vector<Dim>>(kDefaultOrder)
                                                                          : parse_rank_order(layout.rank_order);
  LOOM_CHECK(order.is_ok(), "RankGrid needs a validated layout: " + order.status().message());
  // Folded experts (etp=1) span TP x DP: no expert digit inside dp.
  int ep = layout.folded_experts() ? 1 : std::max(1, layout.ep);
  for (int i = 0; i < kNumDims; ++i) size_[i] = 1;
  size_[static_cast<int>(Dim::kTp)] = layout.tp;
  size_[static_cast<int>(Dim::kCp)] = layout.cp;
  size_[static_cast<int>(Dim::kPp)] = layout.pp;
  size_[static_cast<int>(Dim::kEp)] = ep;
  size_[static_cast<int>(Dim::kDp)] = layout.dp / ep;  // expert-dp digit
  int stride = 1;
  for (Dim d : *order) {
    stride_[static_cast<int>(d)] = stride;
    stride *= size_[static_cast<int>(d)];
  }
  world_ = stride;
}

RankCoords RankGrid::coords(int rank) const {
  auto digit = [&](Dim d) { return (rank / stride_[static_cast<int>(d)]) % size_[static_cast<int>(d)]; };
  RankCoords c;
  c.tp = digit(Dim::kTp);
  c.cp = digit(Dim::kCp);
  c.pp = digit(Dim::kPp);
  c.ep = digit(Dim::kEp);
  c.dp = c.ep + size_[static_cast<int>(Dim::kEp)] * digit(Dim::kDp);
  return c;
}

int RankGrid::rank_of(const RankCoords& c) const {
  int ep = size_[static_cast<int>(Dim::kEp)];
  int edp = c.dp / ep, epi = c.dp % ep;
  return c.tp * stride_[static_cast<int>(Dim::kTp)] + c.cp * stride_[static_cast<int>(Dim::kCp)] +
         c.pp * stride_[static_cast<int>(Dim::kPp)] + epi * stride_[static_cast<int>(Dim::kEp)] +
         edp * stride_[static_cast<int>(Dim::kDp)];
}

int RankGrid::stride(Dim d) const { return stride_[static_cast<int>(d)]; }

std::vector<int> RankGrid::group(Dim d, int rank) const {
  RankCoords c = coords(rank);
  std::vector<int> out;
  int ep = size_[static_cast<int>(Dim::kEp)];
  switch (d) {
    case Dim::kTp:
      for (int i = 0; i < size_[static_cast<int>(Dim::kTp)]; ++i) out.push_back(rank_of({c.dp, i, c.pp, c.ep, c.cp}));
      break;
    case Dim::kCp:
      for (int i = 0; i < size_[static_cast<int>(Dim::kCp)]; ++i) out.push_back(rank_of({c.dp, c.tp, c.pp, c.ep, i}));
      break;
    case Dim::kPp:
      for (int i = 0; i < size_[static_cast<int>(Dim::kPp)]; ++i) out.push_back(rank_of({c.dp, c.tp, i, c.ep, c.cp}));
      break;
    case Dim::kDp: {
      int dp = ep * size_[static_cast<int>(Dim::kDp)];
      for (int i = 0; i < dp; ++i) out.push_back(rank_of({i, c.tp, c.pp, i % ep, c.cp}));
      break;
    }
    case Dim::kEp: {
      int base = (c.dp / ep) * ep;
      for (int i = 0; i < ep; ++i) out.push_back(rank_of({base + i, c.tp, c.pp, i, c.cp}));
      break;
    }
  }
  return out;
}

namespace {
// The shape of a group given its members: distinct nodes, most members on one.
GroupShape shape_of_members(std::vector<int> ranks, int devices_per_node) {
  GroupShape s;
  s.ranks = int(ranks.size());
  if (devices_per_node <= 0) {
    s.ranks_per_node = s.ranks;
    return s;
  }
  for (int& r : ranks) r /= devices_per_node;
  std::sort(ranks.begin(), ranks.end());
  int distinct = 0, run = 0, most = 0;
  for (size_t k = 0; k < ranks.size(); ++k) {
    run = (k > 0 && ranks[k] == ranks[k - 1]) ? run + 1 : 1;
    if (run == 1) ++distinct;
    most = std::max(most, run);
  }
  s.nodes = std::max(1, distinct);
  s.ranks_per_node = std::max(1, most);
  return s;
}
}  // namespace

GroupShape gradient_group_shape(const Layout& layout, int devices_per_node) {
  if (layout.cp <= 1) return group_shape(layout, Dim::kDp, devices_per_node);
  // The members of rank 0's group (a few thousand ranks at most; the
  // simulator memoizes per layout).
  RankGrid grid(layout);
  std::vector<int> members;
  members.reserve(size_t(layout.dp) * layout.cp);
  for (int i = 0; i < layout.dp; ++i)
    for (int j = 0; j < layout.cp; ++j) members.push_back(grid.rank_of({i, 0, 0, 0, j}));
  return shape_of_members(std::move(members), devices_per_node);
}

GroupShape expert_group_shape(const Layout& layout, int devices_per_node) {
  if (!layout.folded_experts()) return group_shape(layout, Dim::kEp, devices_per_node);
  RankGrid grid(layout);
  std::vector<int> members;
  for (int f = 0; f < layout.ep; ++f) members.push_back(grid.rank_of({f / layout.tp, f % layout.tp, 0, 0, 0}));
  return shape_of_members(std::move(members), devices_per_node);
}

GroupShape expert_dp_group_shape(const Layout& layout, int devices_per_node) {
  RankGrid grid(layout);
  std::vector<int> members;
  const int ep = std::max(1, layout.ep);
  const int folded = layout.folded_experts() ? layout.tp : 1;  // the ranks experts fold over: tp*dp or dp
  for (int f = 0; f < folded * layout.dp; f += ep)
    for (int j = 0; j < layout.cp; ++j)
      members.push_back(layout.folded_experts() ? grid.rank_of({f / layout.tp, f % layout.tp, 0, 0, j})
                                                : grid.rank_of({f, 0, 0, 0, j}));
  return shape_of_members(std::move(members), devices_per_node);
}

GroupShape group_shape(const Layout& layout, Dim d, int devices_per_node) {
  GroupShape s;
  s.ranks = layout.size(d);
  if (s.ranks <= 1 || devices_per_node <= 0) {
    s.nodes = 1;
    s.ranks_per_node = s.ranks;
    return s;
  }
  RankGrid grid(layout);
  // The group of rank 0 is {sum_k i_k * stride_k}: one digit, or for dp with
  // ep > 1 the ep and edp digits. Adjacent digits merge into one progression.
  struct Digit { int stride, size; };
  Digit dg[2];
  int nd = 0;
  const int ep = layout.folded_experts() ? 1 : std::max(1, layout.ep);  // the expert digit inside dp
  if (d == Dim::kDp && ep > 1) {
    dg[nd++] = {grid.stride(Dim::kEp), ep};
    dg[nd++] = {grid.stride(Dim::kDp), layout.dp / ep};
    if (dg[0].stride > dg[1].stride) std::swap(dg[0], dg[1]);
    if (dg[1].size == 1) nd = 1;
    else if (dg[0].size == 1) { dg[0] = dg[1]; nd = 1; }
    else if (dg[1].stride == dg[0].stride * dg[0].size) { dg[0].size *= dg[1].size; nd = 1; }
  } else {
    dg[nd++] = {grid.stride(d), s.ranks};
  }
  const int D = devices_per_node;
  if (nd == 1) {
    const int st = dg[0].stride, n = dg[0].size;
    if (st >= D) { s.nodes = n; s.ranks_per_node = 1; return s; }
    if (D % st == 0) {
      const int per = std::min(n, D / st);
      s.ranks_per_node = per;
      s.nodes = (n + per - 1) / per;
      return s;
    }
  }
  // General case: members in increasing order (mixed radix, fastest digit
  // first), counting runs of equal node ids; no allocation.
  const int n0 = dg[0].size, n1 = nd == 2 ? dg[1].size : 1;
  int nodes = 0, max_per_node = 0, run = 0, prev = -1;
  for (int b = 0; b < n1; ++b) {
    for (int a = 0; a < n0; ++a) {
      int r = a * dg[0].stride + (nd == 2 ? b * dg[1].stride : 0);
      int node = r / D;
      run = node == prev ? run + 1 : 1;
      if (run == 1) ++nodes;
      max_per_node = std::max(max_per_node, run);
      prev = node;
    }
  }
  s.nodes = nodes;
  s.ranks_per_node = max_per_node;
  return s;
}

}  // namespace loom
