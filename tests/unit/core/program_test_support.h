// Helpers the program builder's tests share (program_test.cc,
// program_dualpipev_test.cc): configs, the structural invariants every
// program must satisfy, and the micro-batches a stage holds in flight.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/program.h"

namespace loom::program_testing {

inline ProgramConfig cfg(Schedule sch, int pp, int64_t m, int v = 1) {
  ProgramConfig c;
  c.schedule = sch;
  c.pp = pp;
  c.micro_batches = m;
  c.virtual_stages = v;
  return c;
}

inline Program build(const ProgramConfig& c) {
  auto r = build_program(c);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : Program{};
}

inline std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find(' ', i);
    if (j == std::string::npos) j = text.size();
    if (j > i) out.push_back(text.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

// Independent acyclicity check: iterative three-colour DFS over deps plus
// "previous op on the same (stage, stream)".
inline bool acyclic(const Program& p) {
  const size_t n = p.ops.size();
  std::vector<std::vector<int32_t>> preds(n);
  for (const Op& op : p.ops)
    for (int32_t d : p.deps_of(op)) preds[op.id].push_back(d);
  for (const auto& stage : p.stage_ops) {
    int32_t last[kNumStreams] = {-1, -1, -1};
    for (int32_t id : stage) {
      int st = static_cast<int>(p.ops[id].stream);
      if (last[st] >= 0) preds[id].push_back(last[st]);
      last[st] = id;
    }
  }
  std::vector<int> colour(n, 0);  // 0 new, 1 on stack, 2 done
  for (size_t root = 0; root < n; ++root) {
    if (colour[root]) continue;
    std::vector<std::pair<int32_t, size_t>> stack{{static_cast<int32_t>(root), 0}};
    colour[root] = 1;
    while (!stack.empty()) {
      auto& [u, k] = stack.back();
      if (k < preds[u].size()) {
        int32_t w = preds[u][k++];
        if (colour[w] == 1) return false;
        if (colour[w] == 0) {
          colour[w] = 1;
          stack.push_back({w, 0});
        }
      } else {
        colour[u] = 2;
        stack.pop_back();
      }
    }
  }
  return true;
}

// The invariants every program must satisfy, whatever the schedule.
inline void check_invariants(const Program& p) {
  const auto& c = p.config;
  const int pp = c.pp, v = c.virtual_stages;
  const int64_t m = c.micro_batches;
  SCOPED_TRACE("pp=" + std::to_string(pp) + " v=" + std::to_string(v) + " m=" + std::to_string(m));
  ASSERT_EQ(p.stage_ops.size(), static_cast<size_t>(pp));
  std::vector<int> listed(p.ops.size(), 0);
  for (int s = 0; s < pp; ++s)
    for (int32_t id : p.stage_ops[s]) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, static_cast<int32_t>(p.ops.size()));
      EXPECT_EQ(p.ops[id].stage, s);
      ++listed[id];
    }
  std::set<std::string> names;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    EXPECT_EQ(op.id, static_cast<int32_t>(i));
    EXPECT_EQ(listed[i], 1) << p.op_name(op);
    EXPECT_TRUE(names.insert(p.op_name(op)).second) << "duplicate name " << p.op_name(op);
    for (int32_t d : p.deps_of(op)) {
      ASSERT_GE(d, 0);
      ASSERT_LT(d, static_cast<int32_t>(p.ops.size()));
      EXPECT_NE(d, op.id);
    }
    bool p2p = op.kind == OpKind::kSendActivation || op.kind == OpKind::kRecvActivation ||
               op.kind == OpKind::kSendGrad || op.kind == OpKind::kRecvGrad;
    bool dp = op.kind == OpKind::kParamGather || op.kind == OpKind::kGradSync;
    EXPECT_EQ(op.stream, p2p ? Stream::kPpComm : dp ? Stream::kDpComm : Stream::kCompute) << p.op_name(op);
  }
  EXPECT_TRUE(acyclic(p));

  // Per stage: one forward and one (possibly split) backward per (chunk, micro), forward first.
  for (int s = 0; s < pp; ++s) {
    std::map<std::pair<int, int>, int> fwd_at, bwd_parts;
    int pos = 0;
    for (int32_t id : p.stage_ops[s]) {
      const Op& op = p.ops[id];
      ++pos;
      std::pair<int, int> key(op.chunk, op.micro);
      if (op.kind == OpKind::kForward) {
        EXPECT_EQ(fwd_at.count(key), 0u) << p.op_name(op);
        fwd_at[key] = pos;
      } else if (op.kind == OpKind::kBackward) {
        EXPECT_EQ(fwd_at.count(key), 1u) << "backward before its forward: " << p.op_name(op);
        EXPECT_EQ(op.part, bwd_parts[key]) << p.op_name(op);
        ++bwd_parts[key];
        if (op.part + 1 == op.num_parts) bwd_parts[key] = op.defers_wgrad ? 2000 : 1000;  // complete (W pending)
      } else if (op.kind == OpKind::kWeightGrad) {
        // The deferred weight gradients of a backward that ran before, once.
        EXPECT_EQ(bwd_parts[key], 2000) << "wgrad without a deferring backward before it: " << p.op_name(op);
        bwd_parts[key] = 1000;
      }
    }
    EXPECT_EQ(fwd_at.size(), static_cast<size_t>(v * m));
    EXPECT_EQ(bwd_parts.size(), static_cast<size_t>(v * m));
    for (auto& [key, parts] : bwd_parts) EXPECT_EQ(parts, 1000) << "incomplete backward c" << key.first;
  }

  // Pipeline p2p: global chunk g = chunk*pp + stage (DualPipeV: a V, stage s
  // holding g = s and g = 2pp-1-s) feeds g+1 and gets its gradient back.
  const bool vee = c.schedule == Schedule::kDualPipeV;
  auto global_of = [&](int s, int ch) { return vee && ch == 1 ? 2 * pp - 1 - s : ch * pp + s; };
  auto stage_of = [&](int g) { return vee ? (g < pp ? g : 2 * pp - 1 - g) : g % pp; };
  auto chunk_of = [&](int g) { return vee ? (g < pp ? 0 : 1) : g / pp; };
  for (const Op& op : p.ops) {
    const int g = global_of(op.stage, op.chunk);
    if (op.kind == OpKind::kForward && g > 0) {
      const int ps = stage_of(g - 1), pc = chunk_of(g - 1);
      if (ps == op.stage) continue;  // pp=1: no transfer
      int recvs = 0;
      for (int32_t d : p.deps_of(op)) {
        const Op& r = p.ops[d];
        if (r.kind != OpKind::kRecvActivation) continue;
        ++recvs;
        EXPECT_EQ(r.stage, op.stage);
        EXPECT_EQ(r.chunk, op.chunk);
        EXPECT_EQ(r.micro, op.micro);
        ASSERT_EQ(r.dep_count, 1);
        const Op& send = p.ops[p.deps_of(r)[0]];
        EXPECT_EQ(send.kind, OpKind::kSendActivation);
        EXPECT_EQ(send.stage, ps);
        EXPECT_EQ(send.chunk, pc);
        EXPECT_EQ(send.micro, op.micro);
        ASSERT_EQ(send.dep_count, 1);
        const Op& producer = p.ops[p.deps_of(send)[0]];
        EXPECT_EQ(producer.kind, OpKind::kForward);
        EXPECT_EQ(std::tie(producer.stage, producer.chunk, producer.micro), std::tie(send.stage, send.chunk, send.micro));
      }
      EXPECT_EQ(recvs, 1) << p.op_name(op);
    }
    if (op.kind == OpKind::kBackward && op.part == 0 && g < pp * v - 1) {
      const int ns = stage_of(g + 1), nc = chunk_of(g + 1);
      if (ns == op.stage) continue;
      int recvs = 0;
      for (int32_t d : p.deps_of(op)) {
        const Op& r = p.ops[d];
        if (r.kind != OpKind::kRecvGrad) continue;
        ++recvs;
        ASSERT_EQ(r.dep_count, 1);
        const Op& send = p.ops[p.deps_of(r)[0]];
        EXPECT_EQ(send.kind, OpKind::kSendGrad);
        EXPECT_EQ(std::tie(send.stage, send.chunk, send.micro), std::tie(ns, nc, op.micro));
        const Op& producer = p.ops[p.deps_of(send)[0]];
        EXPECT_EQ(producer.kind, OpKind::kBackward);
        EXPECT_EQ(producer.part + 1, producer.num_parts) << "send_grad must follow the last backward part";
      }
      EXPECT_EQ(recvs, 1) << p.op_name(op);
    }
  }
  // Exactly one optimizer per stage, last on the compute stream.
  for (int s = 0; s < pp; ++s) {
    int32_t last_compute = -1;
    for (int32_t id : p.stage_ops[s])
      if (p.ops[id].stream == Stream::kCompute) last_compute = id;
    ASSERT_GE(last_compute, 0);
    EXPECT_EQ(p.ops[last_compute].kind, OpKind::kOptimizer);
  }
}

// Forwards minus backwards at each point of a stage's order (chunk-micro units).
inline int max_in_flight(const Program& p, int s) {
  int now = 0, peak = 0;
  for (int32_t id : p.stage_ops[s]) {
    const Op& op = p.ops[id];
    if (op.kind == OpKind::kForward) peak = std::max(peak, ++now);
    if (op.kind == OpKind::kBackward && op.part + 1 == op.num_parts) --now;
  }
  EXPECT_EQ(now, 0);
  return peak;
}

}  // namespace loom::program_testing
