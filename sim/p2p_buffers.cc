// The pipeline send / receive buffers Loom's executor holds on each stage,
// read from the program its plan runs (sim/memory_model.h
// executor_p2p_buffers): split from memory_model.cc, whose other terms are
// formulas.
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "core/program.h"
#include "sim/lru_sets.h"
#include "sim/memory_model.h"

namespace loom {

namespace {

// executor_p2p_buffers for every stage, from the program of `config`.
std::vector<P2pBuffers> p2p_buffers_per_stage(const ProgramConfig& config) {
  std::vector<P2pBuffers> out(size_t(config.pp), P2pBuffers{2, 2});  // one in, one out if it cannot be built
  Result<Program> built = build_program(config);
  if (!built.is_ok() || int(built->stage_ops.size()) != config.pp) return out;
  const Program& prog = *built;
  const int pp = config.pp, last_global = pp * std::max(1, config.virtual_stages) - 1;
  // A chunk whose neighbour sits on the same stage (interleaving with pp = 1;
  // DualPipeV's tip, global chunks pp-1 and pp on the last stage) hands its
  // output and its input's gradient over in a buffer of the same kind, held
  // until the neighbour's op takes it (exec/runtime/pipeline.h).
  // Each op's position in its stage's issue order, and each receive by (stage, kind, tag).
  std::vector<int> pos(prog.ops.size(), 0);
  std::map<std::tuple<int, int, int>, int32_t> recv_of;
  for (int s = 0; s < pp; ++s)
    for (size_t i = 0; i < prog.stage_ops[size_t(s)].size(); ++i) {
      const Op& op = prog.ops[size_t(prog.stage_ops[size_t(s)][i])];
      pos[size_t(op.id)] = int(i);
      if (op.kind == OpKind::kRecvActivation || op.kind == OpKind::kRecvGrad)
        recv_of[{s, int(op.kind), op.tag}] = op.id;
    }
  // Sends issued on `stage` before its op `at` whose receive the program does
  // not order before `at`. Each stage runs its ops one after another, so what
  // surely happened before `at` is, per stage, a prefix of its issue order:
  // grow the prefixes through the cross-stage dependencies to a fixed point.
  auto pending_at = [&](int stage, int at) {
    std::vector<int> done(size_t(pp), -1), scanned(size_t(pp), -1);
    done[size_t(stage)] = at;
    for (bool grew = true; grew;) {
      grew = false;
      for (int s = 0; s < pp; ++s)
        for (; scanned[size_t(s)] < done[size_t(s)]; ++scanned[size_t(s)]) {
          const Op& op = prog.ops[size_t(prog.stage_ops[size_t(s)][size_t(scanned[size_t(s)] + 1)])];
          for (int32_t d : prog.deps_of(op)) {
            const int ds = prog.ops[size_t(d)].stage;
            if (pos[size_t(d)] > done[size_t(ds)]) {
              done[size_t(ds)] = pos[size_t(d)];
              grew = true;
            }
          }
        }
    }
    int pending = 0;
    const std::vector<int32_t>& mine = prog.stage_ops[size_t(stage)];
    for (int i = 0; i < at; ++i) {
      const Op& op = prog.ops[size_t(mine[size_t(i)])];
      if (op.kind != OpKind::kSendActivation && op.kind != OpKind::kSendGrad) continue;
      const int kind = int(op.kind == OpKind::kSendActivation ? OpKind::kRecvActivation : OpKind::kRecvGrad);
      auto it = recv_of.find({op.peer_stage, kind, op.tag});
      if (it == recv_of.end() || pos[size_t(it->second)] > done[size_t(op.peer_stage)]) ++pending;
    }
    return pending;
  };
  for (int stage = 0; stage < pp; ++stage) {
    // The stage's ops in issue order: the buffers live (sends freed as
    // issued) as each backward starts, at the moments with the most
    // chunk-micro-batches in flight.
    struct Moment {
      int at, live;
    };
    std::vector<Moment> peak;
    int live = 0, in_flight = 0, best_in_flight = -1;
    const std::vector<int32_t>& mine = prog.stage_ops[size_t(stage)];
    for (size_t i = 0; i < mine.size(); ++i) {
      const Op& op = prog.ops[size_t(mine[i])];
      const int global = config.global_chunk(op.stage, op.chunk);
      const bool in_from_peer = global != 0;
      const bool out_to_peer = global != last_global;
      switch (op.kind) {
        case OpKind::kRecvActivation:
        case OpKind::kRecvGrad: ++live; break;
        case OpKind::kSendActivation:
        case OpKind::kSendGrad: --live; break;
        case OpKind::kForward:
          ++in_flight;
          if (out_to_peer) ++live;  // the output, until sent
          if (in_from_peer) --live;  // the received input, consumed
          break;
        case OpKind::kBackward: {
          const bool last_part = op.part == op.num_parts - 1;
          if (op.part == 0) {
            // The input's gradient is allocated before a one-part backward runs.
            const Moment m{int(i), live + (last_part && in_from_peer ? 1 : 0)};
            if (in_flight > best_in_flight) peak.clear();
            if (in_flight >= best_in_flight) {
              best_in_flight = in_flight;
              peak.push_back(m);
            }
          }
          if (last_part) {
            --in_flight;
            if (in_from_peer) ++live;  // the input's gradient, until sent
            if (out_to_peer) --live;   // the received gradient, consumed
          }
          break;
        }
        default: break;
      }
    }
    if (peak.empty()) {
      out[size_t(stage)] = P2pBuffers{0, 0};
      continue;
    }
    // The schedule's steady state repeats: its first moments tell.
    P2pBuffers b{peak[0].live, 0};
    for (size_t k = 0; k < peak.size() && k < 4; ++k) {
      b.surely = std::min(b.surely, peak[k].live);
      b.at_most = std::max(b.at_most, peak[k].live + pending_at(stage, peak[k].at));
    }
    out[size_t(stage)] = b;
  }
  return out;
}

}  // namespace

const std::vector<P2pBuffers>* executor_p2p_buffers_per_stage(const Layout& l, int64_t global_batch) {
  if (l.pp <= 1) return nullptr;
  // The transfers depend on the schedule only (no data-parallel ops), and
  // the moments that tell come within the first micro-batches: the warm-up
  // holds at most 2*pp*v - 1 and the steady state repeats after it, so a
  // step of at most 4*pp*v micro-batches (a multiple of pp, as interleaving
  // wants) shows the same. A search meets few distinct schedules: memoized.
  const int v = std::max(1, l.virtual_stages);
  const int64_t micro_batches = std::min<int64_t>(l.num_micro_batches(global_batch), 4LL * l.pp * v);
  using Key = std::tuple<int, int, int, int64_t>;
  const Key key = std::make_tuple(l.pp, l.virtual_stages, int(l.schedule), micro_batches);
  // Shared by the search's threads (each schedule is worked out once) and
  // never cleared, so an answer's address stays valid: the keys are bounded
  // by the pipeline sizes, chunk counts and micro-batch counts a process
  // asks for (pp entries each). A thread's recent answers are at hand
  // without the lock (a search's layouts meet a hundred or more schedules:
  // a direct-mapped table of 64 slots sent about half of the 405B
  // benchmark's lookups to the lock, 52,130 in 100,000 evaluations).
  static std::mutex mu;
  static std::map<Key, std::vector<P2pBuffers>> memo;
  thread_local LruSets<Key, const std::vector<P2pBuffers>*, 64> recent;
  return recent.get(mix_fields({l.pp, l.virtual_stages, int(l.schedule), micro_batches}), key, [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = memo.find(key);
      if (it != memo.end()) return &it->second;
    }
    ProgramConfig c = program_config_for(l, global_batch, kDefaultGradBuckets);
    c.dp_comm = false;
    c.zero = 0;
    c.micro_batches = micro_batches;
    std::vector<P2pBuffers> fresh = p2p_buffers_per_stage(c);
    std::lock_guard<std::mutex> lock(mu);
    return &memo.emplace(key, std::move(fresh)).first->second;  // another thread's may be there first
  });
}

P2pBuffers executor_p2p_buffers(const Layout& l, int64_t global_batch, int stage) {
  if (l.pp <= 1 || stage < 0 || stage >= l.pp) return {};
  return (*executor_p2p_buffers_per_stage(l, global_batch))[size_t(stage)];
}

}  // namespace loom
