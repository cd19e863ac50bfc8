// Program builder: expands a pipeline schedule (GPipe, 1F1B, interleaved 1F1B,
// DualPipeV)
// plus the data-parallel sync ops into the per-stage op lists of core/program.h.
//
// Building happens in two steps per stage:
//   1. the *compute order*: the sequence of (forward | backward, chunk, micro)
//      the schedule runs on that stage (gpipe_order / one_f_one_b_order /
//      interleaved_order / dualpipev_order below, the only schedule-specific
//      code, with the chunk placement of ProgramConfig::global_chunk);
//   2. the emitter wraps each compute op in its p2p and DP ops: a recv is
//      issued right before the compute op that consumes it, a send right after
//      the op that produces it, DP ops right after the op they follow.
// Because every non-compute op is pinned next to a compute op and the streams
// keep that order, the program is acyclic whenever the compute order is a
// valid pipeline schedule (every dependency a recv waits on is produced
// earlier in some topological order of the compute ops).
#include "core/program.h"

#include <array>
#include <deque>

#include <algorithm>
#include <string>

#include "core/json_util.h"

namespace loom {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kForward: return "fwd";
    case OpKind::kBackward: return "bwd";
    case OpKind::kSendActivation: return "send_act";
    case OpKind::kRecvActivation: return "recv_act";
    case OpKind::kSendGrad: return "send_grad";
    case OpKind::kRecvGrad: return "recv_grad";
    case OpKind::kParamGather: return "param_gather";
    case OpKind::kGradSync: return "grad_sync";
    case OpKind::kOptimizer: return "optimizer";
    case OpKind::kWeightGrad: return "wgrad";
  }
  return "unknown";
}

const char* stream_name(Stream s) {
  switch (s) {
    case Stream::kCompute: return "compute";
    case Stream::kPpComm: return "pp-comm";
    case Stream::kDpComm: return "dp-comm";
  }
  return "unknown";
}

std::string Program::op_name(const Op& op) const {
  std::string name = op_kind_name(op.kind);
  auto field = [&name](char tag, int64_t x) {
    name += ' ';
    name += tag;
    name += std::to_string(x);
  };
  field('s', op.stage);
  if (op.kind == OpKind::kOptimizer) return name;
  field('c', op.chunk);
  if (op.kind == OpKind::kGradSync && op.micro < 0) {
    field('b', op.part);
    return name;
  }
  if (op.micro >= 0) {
    name += " mb";
    name += std::to_string(op.micro);
  }
  if (op.kind == OpKind::kBackward && op.num_parts > 1) field('p', op.part);
  if (op.kind == OpKind::kBackward && op.defers_wgrad) name += " dgrad";
  if (op.kind == OpKind::kParamGather && op.micro >= 0) name += op.part == 0 ? " fwd" : " bwd";
  return name;
}

ProgramConfig program_config_for(const Layout& layout, int64_t global_batch, int grad_buckets) {
  ProgramConfig c;
  c.pp = layout.pp;
  c.virtual_stages = layout.virtual_stages;
  c.micro_batches = layout.num_micro_batches(global_batch);
  c.schedule = layout.schedule;
  c.dp_comm = layout.dp * layout.cp > 1;  // gradients are summed over DP x CP
  c.zero = layout.zero;
  c.grad_buckets = grad_buckets;
  c.overlap_grad_reduce = layout.overlap_grad_reduce;
  c.overlap_param_gather = layout.overlap_param_gather;
  return c;
}

int32_t p2p_tag(bool grad, int peer_chunk, int32_t micro) { return (grad ? 1 << 26 : 0) + (peer_chunk << 20) + micro; }

LayerRange backward_part_layers(int num_layers, int part, int num_parts) {
  const int64_t L = num_layers, k = part, n = std::max(1, num_parts);
  return {int(L - (k + 1) * L / n), int(L - k * L / n)};
}

namespace {

OrderedJson program_json(const ProgramConfig& c) {
  OrderedJson j;
  j["pp"] = c.pp;
  j["virtual_stages"] = c.virtual_stages;
  j["micro_batches"] = c.micro_batches;
  j["schedule"] = schedule_name(c.schedule);
  j["dp_comm"] = c.dp_comm;
  j["zero"] = c.zero;
  j["grad_buckets"] = c.grad_buckets;
  j["overlap_grad_reduce"] = c.overlap_grad_reduce;
  j["overlap_param_gather"] = c.overlap_param_gather;
  if (c.syncs_after_backward) j["syncs_after_backward"] = true;
  if (!c.chunk_grad_buckets.empty()) j["chunk_grad_buckets"] = c.chunk_grad_buckets;
  return j;
}

}  // namespace

std::string program_config_to_json(const ProgramConfig& c) { return program_json(c).dump(); }

std::string program_hash(const ProgramConfig& c) { return content_hash(program_config_to_json(c)); }

Result<ProgramConfig> parse_program_config(const std::string& text, const std::string& what) {
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(text, what));
  if (!j.is_object()) return invalid_argument(what + " must be a JSON object");
  ProgramConfig c;
  auto int_field = [&](const char* key, int64_t lo, int64_t hi) -> Result<int64_t> {
    LOOM_ASSIGN_OR_RETURN(int64_t x, json_int(j, key, what));
    if (x < lo || x > hi)
      return invalid_argument(what + "." + key + " = " + std::to_string(x) + " is out of range [" + std::to_string(lo) +
                              ", " + std::to_string(hi) + "]");
    return x;
  };
  auto bool_field = [&](const char* key) -> Result<bool> {
    if (!j.contains(key)) return invalid_argument(what + "." + key + " is missing; re-create the plan with `loom plan`");
    if (!j[key].is_boolean()) return invalid_argument(what + "." + key + " must be true or false");
    return j[key].get<bool>();
  };
  LOOM_ASSIGN_OR_RETURN(int64_t pp, int_field("pp", 1, 32767));
  LOOM_ASSIGN_OR_RETURN(int64_t v, int_field("virtual_stages", 1, 32767));
  LOOM_ASSIGN_OR_RETURN(c.micro_batches, int_field("micro_batches", 1, int64_t(1) << 30));
  LOOM_ASSIGN_OR_RETURN(std::string sched, json_string(j, "schedule", what));
  LOOM_ASSIGN_OR_RETURN(c.schedule, parse_schedule(sched));
  LOOM_ASSIGN_OR_RETURN(c.dp_comm, bool_field("dp_comm"));
  LOOM_ASSIGN_OR_RETURN(int64_t zero, int_field("zero", 0, 3));
  LOOM_ASSIGN_OR_RETURN(int64_t nb, int_field("grad_buckets", 1, 32767));
  LOOM_ASSIGN_OR_RETURN(c.overlap_grad_reduce, bool_field("overlap_grad_reduce"));
  LOOM_ASSIGN_OR_RETURN(c.overlap_param_gather, bool_field("overlap_param_gather"));
  if (j.contains("syncs_after_backward")) {
    LOOM_ASSIGN_OR_RETURN(c.syncs_after_backward, bool_field("syncs_after_backward"));
  }
  if (j.contains("chunk_grad_buckets")) {
    const Json& cb = j["chunk_grad_buckets"];
    if (!cb.is_array() || cb.size() != size_t(pp * v))
      return invalid_argument(what + ".chunk_grad_buckets must be an array of pp * virtual_stages = " +
                              std::to_string(pp * v) + " bucket counts");
    for (const Json& x : cb) {
      if (!x.is_number_integer() || x.get<int64_t>() < 1 || x.get<int64_t>() > 32767)
        return invalid_argument(what + ".chunk_grad_buckets holds " + x.dump() + "; each must be in [1, 32767]");
      c.chunk_grad_buckets.push_back(int(x.get<int64_t>()));
    }
  }
  c.pp = int(pp);
  c.virtual_stages = int(v);
  c.zero = int(zero);
  c.grad_buckets = int(nb);
  return c;
}

std::string program_config_diff(const ProgramConfig& a, const ProgramConfig& b) {
  const Json ja = Json::parse(program_config_to_json(a)), jb = Json::parse(program_config_to_json(b));
  std::string out;
  for (auto it = ja.begin(); it != ja.end(); ++it)
    if (!jb.contains(it.key()) || jb[it.key()] != it.value())
      out += (out.empty() ? "" : ", ") + it.key() + " " + it.value().dump() + " vs " +
             (jb.contains(it.key()) ? jb[it.key()].dump() : "absent");
  return out;
}

namespace {

const char* schedule_str(Schedule s) {
  switch (s) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::k1F1B: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kDualPipeV: return "dualpipev";
  }
  return "unknown";
}

// GPipe: every forward, then every backward, micro-batches in ascending order
// both times (FIFO, like 1F1B; with equal stages the timing is the same as
// running the backwards newest-first).
void gpipe_order(int64_t m, std::vector<ComputeStep>& out) {
  for (int64_t i = 0; i < m; ++i) out.push_back({true, 0, static_cast<int32_t>(i)});
  for (int64_t i = 0; i < m; ++i) out.push_back({false, 0, static_cast<int32_t>(i)});
}

// 1F1B (PipeDream-flush, Megatron's forward_backward_pipelining_without_interleaving).
void one_f_one_b_order(int pp, int stage, int64_t m, std::vector<ComputeStep>& out) {
  const int64_t warmup = std::min<int64_t>(pp - stage - 1, m);
  const int64_t steady = m - warmup;
  // warm-up: forwards only, filling the pipeline below this stage
  for (int64_t i = 0; i < warmup; ++i) out.push_back({true, 0, static_cast<int32_t>(i)});
  // steady 1F1B: one forward, then the backward of the oldest micro-batch in flight
  for (int64_t i = 0; i < steady; ++i) {
    out.push_back({true, 0, static_cast<int32_t>(warmup + i)});
    out.push_back({false, 0, static_cast<int32_t>(i)});
  }
  // cool-down: drain the backwards of the micro-batches still in flight
  for (int64_t i = steady; i < m; ++i) out.push_back({false, 0, static_cast<int32_t>(i)});
}

// Interleaved 1F1B (Megatron's forward_backward_pipelining_with_interleaving),
// v chunks per stage, micro-batches taken in groups of pp.
void interleaved_order(int pp, int v, int stage, int64_t m, std::vector<ComputeStep>& out) {
  const int64_t total = m * v;
  const int64_t group = int64_t(pp) * v;
  // Megatron's get_model_chunk_id and micro-batch id for virtual micro-step k.
  auto step = [&](int64_t k, bool fwd) {
    int chunk = static_cast<int>((k / pp) % v);
    if (!fwd) chunk = v - 1 - chunk;
    int64_t micro = (k / group) * pp + k % pp;
    return ComputeStep{fwd, static_cast<int16_t>(chunk), static_cast<int32_t>(micro)};
  };
  const int64_t warmup = std::min<int64_t>(int64_t(pp - stage - 1) * 2 + int64_t(v - 1) * pp, total);
  const int64_t steady = total - warmup;
  // warm-up
  for (int64_t k = 0; k < warmup; ++k) out.push_back(step(k, true));
  // steady 1F1B
  for (int64_t k = 0; k < steady; ++k) {
    out.push_back(step(warmup + k, true));
    out.push_back(step(k, false));
  }
  // cool-down
  for (int64_t k = steady; k < total; ++k) out.push_back(step(k, false));
}

}  // namespace

// DualPipeV (deepseek-ai/DualPipe 3da1bbe, dualpipe/dualpipev.py
// DualPipeV.step) on stage r of P with m micro-batches, m >= 2P. Chunk 0 is
// global chunk r, chunk 1 global chunk 2P-1-r. Each chunk takes its
// micro-batches in order; a backward marked zb defers its weight gradients
// to a later W, which runs the oldest deferred ones (WeightGradStore's
// queue). The reference's overlapped pairs (_forward_backward_chunk: a
// forward of one chunk beside a backward of the other) are a forward then a
// backward here; their all-to-alls hiding behind each other is the cost
// model's (SimOptions::ep_comm_overlap).
void dualpipev_order(int P, int r, int64_t m, std::vector<ComputeStep>& out) {
  int32_t f[2] = {0, 0}, b[2] = {0, 0};
  std::deque<ComputeStep> deferred;
  auto F = [&](int c) { out.push_back({true, int16_t(c), f[c]++}); };
  auto B = [&](int c, bool zb = false) {
    ComputeStep st{false, int16_t(c), b[c]++, false, zb};
    out.push_back(st);
    if (zb) deferred.push_back({false, int16_t(c), st.micro, true, false});
  };
  auto W = [&] {
    out.push_back(deferred.front());
    deferred.pop_front();
  };
  for (int i = 0; i < 2 * (P - r - 1); ++i) F(0);  // step 1: nF0
  for (int i = 0; i < r + 1; ++i) {                  // step 2: nF0F1
    F(0);
    F(1);
  }
  for (int i = 0; i < P - r - 1; ++i) {  // step 3: nB1W1F1 (zero bubble)
    B(1, true);
    W();
    F(1);
  }
  for (int64_t i = 0; i < m - 2 * P + r + 1; ++i) {  // step 4 (main): nF0B1F1B0
    F(0);
    B(1);
    F(1);
    B(0);
  }
  for (int i = 0; i < P - r - 1; ++i) {  // step 5: nB1F1B0
    B(1);
    F(1);
    B(0);
  }
  bool zb = false;  // step 6: nB1B0, the second half deferring its weight gradients
  for (int i = 0; i < r + 1; ++i) {
    if (i == (r + 1) / 2 && r % 2 == 1) zb = true;
    B(1, zb);
    if (i == (r + 1) / 2 && r % 2 == 0) zb = true;
    B(0, zb);
  }
  for (int i = 0; i < P - r - 1; ++i) {  // step 7: nWB0 (zero bubble)
    W();
    B(0, true);
  }
  for (int i = 0; i < r + 1; ++i) W();  // step 8: nW
  LOOM_CHECK(deferred.empty() && f[0] == m && f[1] == m && b[0] == m && b[1] == m,
             "dualpipev_order: the schedule did not run every micro-batch once");
}

namespace {

Status validate(const ProgramConfig& c) {
  auto s = [](int64_t x) { return std::to_string(x); };
  if (c.pp < 1 || c.pp > 32767) return invalid_argument("program: pp=" + s(c.pp) + " is out of range; use 1 <= pp <= 32767");
  if (c.micro_batches < 1)
    return invalid_argument("program: micro_batches=" + s(c.micro_batches) +
                            " must be >= 1; raise global_batch to at least dp*micro_batch");
  if (c.virtual_stages < 1 || c.virtual_stages > 32767)
    return invalid_argument("program: virtual_stages=" + s(c.virtual_stages) + " is out of range; use v >= 1");
  if (c.schedule == Schedule::kInterleaved) {
    if (c.virtual_stages < 2)
      return invalid_argument("program: schedule=interleaved needs virtual_stages >= 2 (got v=" +
                              s(c.virtual_stages) + "); set v >= 2 or use schedule=1f1b");
    if (c.micro_batches % c.pp != 0)
      return invalid_argument("program: schedule=interleaved needs micro_batches divisible by pp (m=" +
                              s(c.micro_batches) + ", pp=" + s(c.pp) + "); make m a multiple of " + s(c.pp) +
                              " or use schedule=1f1b");
  } else if (c.schedule == Schedule::kDualPipeV) {
    if (c.virtual_stages != 2 || c.pp < 2)
      return invalid_argument("program: schedule=dualpipev needs v=2 and pp >= 2 (got v=" + s(c.virtual_stages) +
                              ", pp=" + s(c.pp) + ")");
    if (c.micro_batches < 2 * int64_t(c.pp))
      return invalid_argument("program: schedule=dualpipev needs micro_batches >= 2*pp (m=" + s(c.micro_batches) +
                              ", pp=" + s(c.pp) + "); raise the global batch or lower the micro batch");
    if (c.dp_comm && c.zero > 1)
      return invalid_argument("program: schedule=dualpipev with zero=" + s(c.zero) +
                              " is not supported (deferred weight gradients); use zero=0 or zero=1");
  } else if (c.virtual_stages != 1) {
    return invalid_argument("program: virtual_stages=" + s(c.virtual_stages) + " needs schedule=interleaved (got " +
                            schedule_str(c.schedule) + "); set v=1 or schedule=interleaved");
  }
  if (c.zero < 0 || c.zero > 3) return invalid_argument("program: zero=" + s(c.zero) + " must be 0, 1, 2 or 3");
  if (c.grad_buckets < 1 || c.grad_buckets > 32767)
    return invalid_argument("program: grad_buckets=" + s(c.grad_buckets) + " is out of range; use 1 <= buckets <= 32767");
  if (!c.chunk_grad_buckets.empty()) {
    if (c.chunk_grad_buckets.size() != size_t(c.pp) * size_t(c.virtual_stages))
      return invalid_argument("program: chunk_grad_buckets holds " + s(int64_t(c.chunk_grad_buckets.size())) +
                              " counts for pp * v = " + s(int64_t(c.pp) * c.virtual_stages) + " chunks");
    for (int b : c.chunk_grad_buckets)
      if (b < 1 || b > 32767)
        return invalid_argument("program: a chunk_grad_buckets count is " + s(b) + "; use 1 <= buckets <= 32767");
  }
  // Each (chunk, micro) costs at most ~8 ops per direction; keep ids in int32.
  const int64_t units = int64_t(c.pp) * c.virtual_stages * c.micro_batches;
  if (c.micro_batches > (int64_t(1) << 30) || units > (int64_t(1) << 26))
    return invalid_argument("program: pp*v*micro_batches=" + s(units) +
                            " is too large to expand (limit 2^26); lower the global batch or micro-batch count");
  return Status::ok();
}

// Emits the ops of every stage; see the file comment for the placement rules.
class Builder {
 public:
  explicit Builder(const ProgramConfig& c)
      : c_(c), p_(c.pp), v_(c.virtual_stages), m_(c.micro_batches), units_(int64_t(p_) * v_ * m_) {}

  Program build() {
    prog_.config = c_;
    prog_.stage_ops.resize(p_);
    send_act_.assign(units_, -1);
    send_grad_.assign(units_, -1);
    int64_t buckets = int64_t(p_) * v_ * c_.grad_buckets;
    if (!c_.chunk_grad_buckets.empty()) {
      buckets = 0;
      for (int b : c_.chunk_grad_buckets) buckets += b;
    }
    prog_.ops.reserve(units_ * 6 + 2 * buckets + 4 * int64_t(p_));
    prog_.deps.reserve(units_ * 8);
    for (int s = 0; s < p_; ++s) build_stage(s);
    // A recv's peer send may live on a later stage; resolve them now.
    for (const Fixup& f : fixups_) {
      int32_t send = (f.grad ? send_grad_ : send_act_)[f.unit];
      LOOM_CHECK(send >= 0, "program builder: recv without a matching send");
      prog_.deps[f.slot] = send;
    }
    return std::move(prog_);
  }

 private:
  struct Fixup {
    int64_t slot;   // index into prog_.deps
    int64_t unit;   // (stage, chunk, micro) of the peer send
    bool grad;
  };

  int64_t unit(int stage, int chunk, int64_t micro) const { return (int64_t(stage) * v_ + chunk) * m_ + micro; }

  // Global chunk g (ProgramConfig::global_chunk) and back; a chunk's
  // neighbours in layer order as (stage, chunk).
  std::pair<int, int> place(int g) const {
    if (c_.schedule == Schedule::kDualPipeV) return g < p_ ? std::pair{g, 0} : std::pair{2 * p_ - 1 - g, 1};
    return {g % p_, g / p_};
  }
  std::pair<int, int> prev_chunk(int s, int c) const { return place(c_.global_chunk(s, c) - 1); }
  std::pair<int, int> next_chunk(int s, int c) const { return place(c_.global_chunk(s, c) + 1); }
  bool is_first_chunk(int s, int c) const { return c_.global_chunk(s, c) == 0; }
  bool is_last_chunk(int s, int c) const { return c_.global_chunk(s, c) == p_ * v_ - 1; }

  int32_t add(OpKind kind, Stream stream, int s, int c, int64_t micro, int part, int num_parts,
              std::initializer_list<int32_t> deps) {
    Op op;
    op.id = static_cast<int32_t>(prog_.ops.size());
    op.kind = kind;
    op.stream = stream;
    op.stage = static_cast<int16_t>(s);
    op.chunk = static_cast<int16_t>(c);
    op.micro = static_cast<int32_t>(micro);
    op.part = static_cast<int16_t>(part);
    op.num_parts = static_cast<int16_t>(num_parts);
    op.dep_begin = static_cast<int32_t>(prog_.deps.size());
    for (int32_t d : deps)
      if (d >= 0) prog_.deps.push_back(d);
    op.dep_count = static_cast<int32_t>(prog_.deps.size()) - op.dep_begin;
    prog_.ops.push_back(op);
    prog_.stage_ops[s].push_back(op.id);
    return op.id;
  }

  // A recv whose dep (the peer's send) is filled in after all stages exist.
  int32_t add_recv(OpKind kind, int s, int c, int64_t micro, int peer_s, int peer_c) {
    int64_t slot = static_cast<int64_t>(prog_.deps.size());
    int32_t id = add(kind, Stream::kPpComm, s, c, micro, 0, 1, {0});
    fixups_.push_back({slot, unit(peer_s, peer_c, micro), kind == OpKind::kRecvGrad});
    set_peer(id, peer_s, peer_c, c);
    return id;
  }

  // A transfer's other end and its tag (named by the receiving chunk).
  void set_peer(int32_t id, int peer_s, int peer_c, int receiver_chunk) {
    Op& op = prog_.ops[size_t(id)];
    op.peer_stage = static_cast<int16_t>(peer_s);
    op.peer_chunk = static_cast<int16_t>(peer_c);
    const bool grad = op.kind == OpKind::kRecvGrad || op.kind == OpKind::kSendGrad;
    op.tag = p2p_tag(grad, receiver_chunk, op.micro);
  }
  int32_t add_send(OpKind kind, int s, int c, int64_t micro, int32_t after) {
    const bool grad = kind == OpKind::kSendGrad;
    auto [ps, pc] = grad ? prev_chunk(s, c) : next_chunk(s, c);
    int32_t id = add(kind, Stream::kPpComm, s, c, micro, 0, 1, {after});
    set_peer(id, ps, pc, pc);
    return id;
  }

  // ZeRO-3: compute op j (chunk c) releases the chunk's parameters unless a
  // gather already issued for a later op of the same chunk is outstanding.
  void mark_release(int64_t j, int32_t compute) {
    if (!(c_.dp_comm && c_.zero == 3)) return;
    const int ahead = c_.overlap_param_gather ? 2 : 1;
    const int64_t n = static_cast<int64_t>(order_.size());
    for (int64_t k = j + 1; k < std::min(n, j + ahead); ++k)
      if (order_[k].chunk == order_[j].chunk) return;
    prog_.ops[size_t(compute)].releases_params = true;
  }

  void build_stage(int s) {
    order_.clear();
    switch (c_.schedule) {
      case Schedule::kGpipe: gpipe_order(m_, order_); break;
      case Schedule::k1F1B: one_f_one_b_order(p_, s, m_, order_); break;
      case Schedule::kInterleaved: interleaved_order(p_, v_, s, m_, order_); break;
      case Schedule::kDualPipeV: dualpipev_order(p_, s, m_, order_); break;
    }
    const int64_t n = static_cast<int64_t>(order_.size());
    const bool dp = c_.dp_comm;
    const int zero = c_.zero;
    auto nb_of = [&](int c) { return c_.buckets_of(s, c); };
    // ZeRO 0/1 sync each chunk's gradients once per step, in buckets that
    // follow the parts of the chunk's last backward.
    const bool bucketed = dp && zero <= 1;
    // ZeRO 2/3 reduce-scatter after every backward; without overlap the
    // compute stream waits for it (blocking reduce).
    const bool per_micro_rs = dp && zero >= 2;
    const bool zero3 = dp && zero == 3;
    const int ahead = c_.overlap_param_gather ? 2 : 1;  // ZeRO-3 gather for op i waits on op i-ahead

    // The op that completes each chunk's gradients: its last backward, or
    // the last deferred weight gradients after it.
    last_bwd_.assign(v_, -1);
    for (int64_t j = 0; j < n; ++j)
      if (!order_[j].fwd && (order_[j].wgrad || !order_[j].defers_wgrad)) last_bwd_[order_[j].chunk] = j;
    syncs_.clear();

    // ZeRO-1/2 all-gather of updated parameters, overlapped with this step's
    // forwards (it stands for the previous step's gather).
    step_gather_.assign(v_, -1);
    if (dp && (zero == 1 || zero == 2) && c_.overlap_param_gather)
      for (int c = 0; c < v_; ++c) step_gather_[c] = add(OpKind::kParamGather, Stream::kDpComm, s, c, -1, 0, 1, {});

    // ZeRO-3 gathers, one per compute op; the first `ahead` have no producer.
    gather_.assign(zero3 ? n : 0, -1);
    auto emit_gather = [&](int64_t j, int32_t after) {
      if (!zero3 || j >= n) return;
      const ComputeStep& st = order_[j];
      gather_[j] = add(OpKind::kParamGather, Stream::kDpComm, s, st.chunk, st.micro, st.fwd ? 0 : 1, 1, {after});
    };
    for (int64_t j = 0; j < ahead; ++j) emit_gather(j, -1);

    int32_t block_on = -1;  // a blocking reduce-scatter the next compute op waits for
    int32_t last_compute = -1;
    for (int64_t j = 0; j < n; ++j) {
      const ComputeStep& st = order_[j];
      const int c = st.chunk;
      const int64_t i = st.micro;
      const int32_t gather = zero3 ? gather_[j] : -1;
      if (st.wgrad) {
        last_compute = add(OpKind::kWeightGrad, Stream::kCompute, s, c, i, 0, 1, {block_on});
        block_on = -1;
        if (bucketed && c_.overlap_grad_reduce && j == last_bwd_[c])
          for (int k = 0, nb = nb_of(c); k < nb; ++k)
            syncs_.push_back(add(OpKind::kGradSync, Stream::kDpComm, s, c, -1, k, nb, {last_compute}));
        continue;
      }
      if (st.fwd) {
        int32_t recv = -1;
        if (!is_first_chunk(s, c)) {
          auto [ps, pc] = prev_chunk(s, c);
          if (ps != s) recv = add_recv(OpKind::kRecvActivation, s, c, i, ps, pc);
        }
        int32_t pg = step_gather_[c];
        step_gather_[c] = -1;  // only the chunk's first forward waits for it
        last_compute = add(OpKind::kForward, Stream::kCompute, s, c, i, 0, 1, {recv, gather, pg, block_on});
        block_on = -1;
        mark_release(j, last_compute);
        if (!is_last_chunk(s, c) && next_chunk(s, c).first != s)
          send_act_[unit(s, c, i)] = add_send(OpKind::kSendActivation, s, c, i, last_compute);
        emit_gather(j + ahead, last_compute);
        continue;
      }
      int32_t recv = -1;
      if (!is_last_chunk(s, c)) {
        auto [ns, nc] = next_chunk(s, c);
        if (ns != s) recv = add_recv(OpKind::kRecvGrad, s, c, i, ns, nc);
      }
      // The chunk's last backward is split to match its buckets: part k covers
      // the k-th slice of the chunk's layers counted from the top, as backward runs.
      // (DualPipeV's backwards, and any under syncs_after_backward, stay
      // whole: their buckets follow at once.)
      const bool whole = c_.schedule == Schedule::kDualPipeV || c_.syncs_after_backward;
      const int nb = nb_of(c);
      const bool split = bucketed && c_.overlap_grad_reduce && nb > 1;
      const int parts = (split && !whole && j == last_bwd_[c]) ? nb : 1;
      for (int k = 0; k < parts; ++k) {
        last_compute = k == 0 ? add(OpKind::kBackward, Stream::kCompute, s, c, i, 0, parts, {recv, gather, block_on})
                              : add(OpKind::kBackward, Stream::kCompute, s, c, i, k, parts, {});
        block_on = -1;
        // ZeRO 0/1 with overlap: bucket k as soon as part k is done (parts == nb here)
        if (bucketed && c_.overlap_grad_reduce && j == last_bwd_[c])
          for (int b = whole ? 0 : k; b < (whole ? nb : k + 1); ++b)
            syncs_.push_back(add(OpKind::kGradSync, Stream::kDpComm, s, c, -1, b, nb, {last_compute}));
      }
      prog_.ops[size_t(last_compute)].defers_wgrad = st.defers_wgrad;
      mark_release(j, last_compute);  // after the last part
      if (!is_first_chunk(s, c) && prev_chunk(s, c).first != s)
        send_grad_[unit(s, c, i)] = add_send(OpKind::kSendGrad, s, c, i, last_compute);
      emit_gather(j + ahead, last_compute);  // the gather goes before the reduce-scatter: it is on the critical path
      if (per_micro_rs) {
        int32_t rs = add(OpKind::kGradSync, Stream::kDpComm, s, c, i, 0, 1, {last_compute});
        syncs_.push_back(rs);
        if (!c_.overlap_grad_reduce) block_on = rs;
      }
    }
    // ZeRO 0/1 without overlap: every bucket after the stage's last backward.
    if (bucketed && !c_.overlap_grad_reduce) {
      for (int64_t j = 0; j < n; ++j) {  // chunks in the order their last backward ran
        if (order_[j].fwd || last_bwd_[order_[j].chunk] != j) continue;  // (a backward or a wgrad)
        for (int b = 0, nb = nb_of(order_[j].chunk); b < nb; ++b)
          syncs_.push_back(add(OpKind::kGradSync, Stream::kDpComm, s, order_[j].chunk, -1, b, nb, {last_compute}));
      }
    }
    // The optimizer waits for every gradient sync of the stage.
    // (A blocking reduce-scatter still pending is among them.)
    int32_t opt = add(OpKind::kOptimizer, Stream::kCompute, s, 0, -1, 0, 1, {});
    prog_.deps.insert(prog_.deps.end(), syncs_.begin(), syncs_.end());
    prog_.ops[opt].dep_count = static_cast<int32_t>(syncs_.size());
    // ZeRO-1/2 without overlap: gather the updated parameters after the optimizer.
    if (dp && (zero == 1 || zero == 2) && !c_.overlap_param_gather)
      for (int c = 0; c < v_; ++c) add(OpKind::kParamGather, Stream::kDpComm, s, c, -1, 0, 1, {opt});
  }

  const ProgramConfig& c_;
  const int p_, v_;
  const int64_t m_;
  const int64_t units_;
  Program prog_;
  std::vector<int32_t> send_act_, send_grad_;  // op id per (stage, chunk, micro), -1 when none
  std::vector<Fixup> fixups_;
  // Per-stage scratch, reused.
  std::vector<ComputeStep> order_;
  std::vector<int64_t> last_bwd_;
  std::vector<int32_t> syncs_, step_gather_, gather_;
};

}  // namespace

Result<Program> build_program(const ProgramConfig& config) {
  LOOM_RETURN_IF_ERROR(validate(config));
  return Builder(config).build();
}

Status check_p2p_in_order(const Program& p) {
  // Per (receiving stage, sending stage, channel): the receives' matched
  // sends must be the sender's sends to it on that channel, in issue order.
  const int P = int(p.stage_ops.size());
  auto is_send = [](OpKind k) { return k == OpKind::kSendActivation || k == OpKind::kSendGrad; };
  auto is_recv = [](OpKind k) { return k == OpKind::kRecvActivation || k == OpKind::kRecvGrad; };
  for (int r = 0; r < P; ++r)
    for (int from = 0; from < P; ++from)
      for (int ch = 0; ch < 4; ++ch) {
        std::vector<int32_t> sent, matched;
        for (int32_t id : p.stage_ops[size_t(from)]) {
          const Op& op = p.ops[size_t(id)];
          if (is_send(op.kind) && op.peer_stage == r && int(p2p_channel(op, p.config)) == ch) sent.push_back(id);
        }
        for (int32_t id : p.stage_ops[size_t(r)]) {
          const Op& op = p.ops[size_t(id)];
          if (!is_recv(op.kind) || op.peer_stage != from || int(p2p_channel(op, p.config)) != ch) continue;
          for (int32_t d : p.deps_of(op))
            if (is_send(p.ops[size_t(d)].kind)) matched.push_back(d);
        }
        if (sent == matched) continue;
        const bool grad = ch == int(P2pChannel::kGradient) || ch == int(P2pChannel::kGradientWrap);
        size_t k = 0;
        while (k < sent.size() && k < matched.size() && sent[k] == matched[k]) ++k;
        std::string detail = k < sent.size() && k < matched.size()
                                 ? ": the sender's transfer " + std::to_string(k) + " is " +
                                       p.op_name(p.ops[size_t(sent[k])]) + " but the receiver expects " +
                                       p.op_name(p.ops[size_t(matched[k])])
                                 : "";
        return unsupported(std::string("stage ") + std::to_string(r) + " receives its " +
                           (grad ? "gradients" : "activations") + " from stage " + std::to_string(from) +
                           " in another order than they are sent" + detail);
      }
  return Status::ok();
}

P2pChannel p2p_channel(const Op& op, int pp) {
  const int s = op.stage;
  switch (op.kind) {
    case OpKind::kSendActivation: return s == pp - 1 ? P2pChannel::kActivationWrap : P2pChannel::kActivation;
    case OpKind::kRecvActivation: return s == 0 ? P2pChannel::kActivationWrap : P2pChannel::kActivation;
    case OpKind::kSendGrad: return s == 0 ? P2pChannel::kGradientWrap : P2pChannel::kGradient;
    case OpKind::kRecvGrad: return s == pp - 1 ? P2pChannel::kGradientWrap : P2pChannel::kGradient;
    default: LOOM_CHECK(false, "p2p_channel of a non-transfer op");
  }
  return P2pChannel::kActivation;
}

P2pChannel p2p_channel(const Op& op, const ProgramConfig& c) {
  if (c.schedule != Schedule::kDualPipeV) return p2p_channel(op, c.pp);
  // DualPipeV: each arm of the V has its own pair of channels (chunk 0 runs
  // from the first stage to the last, chunk 1 back).
  const bool grad = op.kind == OpKind::kSendGrad || op.kind == OpKind::kRecvGrad;
  LOOM_CHECK(grad || op.kind == OpKind::kSendActivation || op.kind == OpKind::kRecvActivation,
             "p2p_channel of a non-transfer op");
  if (op.chunk == 0) return grad ? P2pChannel::kGradient : P2pChannel::kActivation;
  return grad ? P2pChannel::kGradientWrap : P2pChannel::kActivationWrap;
}

Status check_p2p_progress(const Program& p, bool wrap_channels) {
  const int P = int(p.stage_ops.size());
  auto is_send = [](OpKind k) { return k == OpKind::kSendActivation || k == OpKind::kSendGrad; };
  auto is_recv = [](OpKind k) { return k == OpKind::kRecvActivation || k == OpKind::kRecvGrad; };
  auto channel = [&](const Op& op) {
    int c = int(p2p_channel(op, p.config));
    return wrap_channels ? c : c % 2;
  };
  std::vector<std::array<std::deque<int32_t>, 4>> queue(static_cast<size_t>(P));  // per stage and channel, in issue order
  std::vector<size_t> next(static_cast<size_t>(P), 0);
  std::vector<int32_t> waiting(static_cast<size_t>(P), -1);  // the receive a stage's host blocks on
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s) {  // hosts issue ops until a receive blocks them
      const auto& ops = p.stage_ops[size_t(s)];
      while (waiting[size_t(s)] < 0 && next[size_t(s)] < ops.size()) {
        const Op& op = p.ops[size_t(ops[next[size_t(s)]])];
        if (op.kind == OpKind::kOptimizer) {
          bool sends_done = true;
          for (const auto& q : queue[size_t(s)]) sends_done &= q.empty();
          if (!sends_done) break;
        }
        if (is_send(op.kind) || is_recv(op.kind)) {
          queue[size_t(s)][size_t(channel(op))].push_back(op.id);
          if (is_recv(op.kind)) waiting[size_t(s)] = op.id;
        }
        ++next[size_t(s)];
        progress = true;
      }
    }
    for (int s = 0; s < P; ++s)  // streams pair a send at their head with its receive at the peer's head
      for (int c = 0; c < 4; ++c) {
        auto& q = queue[size_t(s)][size_t(c)];
        if (q.empty() || !is_send(p.ops[size_t(q.front())].kind)) continue;
        const Op& send = p.ops[size_t(q.front())];
        const int peer = send.peer_stage;
        auto& pq = queue[size_t(peer)][size_t(c)];
        if (pq.empty()) continue;
        const Op& recv = p.ops[size_t(pq.front())];
        bool pairs = false;
        for (int32_t d : p.deps_of(recv)) pairs |= d == send.id;
        if (!pairs) continue;
        if (waiting[size_t(peer)] == recv.id) waiting[size_t(peer)] = -1;
        q.pop_front();
        pq.pop_front();
        progress = true;
      }
  }
  std::string stuck;
  for (int s = 0; s < P; ++s) {
    bool idle = next[size_t(s)] == p.stage_ops[size_t(s)].size() && waiting[size_t(s)] < 0;
    for (const auto& q : queue[size_t(s)]) idle &= q.empty();
    if (idle) continue;
    stuck += (stuck.empty() ? "" : "; ") + std::string("stage ") + std::to_string(s);
    if (waiting[size_t(s)] >= 0) stuck += " waits in " + p.op_name(p.ops[size_t(waiting[size_t(s)])]);
    for (const auto& q : queue[size_t(s)])
      if (!q.empty()) stuck += ", its stream holds " + p.op_name(p.ops[size_t(q.front())]) + " first";
  }
  if (stuck.empty()) return Status::ok();
  return unsupported("the pipeline transfers deadlock when each channel is one in-order stream: " + stuck);
}

}  // namespace loom
