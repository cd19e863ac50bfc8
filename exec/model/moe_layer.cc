#include "exec/model/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "exec/model/linear.h"

namespace loom::exec {

struct MoeActs {
  int64_t N = 0;
  int64_t M = 0;  // token copies kept on this rank (permuted rows)
  int64_t R = 0;  // rows this rank's experts compute (after the dispatch)
  DeviceBuffer probs, lse, idx, w, slot_rows;  // routing (N,E) (N) (N,k) (N,k) (N*k)
  DeviceBuffer yp;                             // (M, C) expert outputs, permuted order, this TP rank's part
  DeviceBuffer xg, gate, up, s;                // (R, C), (R, F/tp) x 3: grouped by local expert
  DeviceBuffer group_idx, group_inv;           // ep > 1: received order -> grouped, and back
  std::vector<int64_t> send_rows, recv_rows;   // ep > 1: rows per EP peer
  std::vector<int64_t> expert_rows;            // rows per local expert, in xg
  std::vector<float> aux_grad;                 // (E) d(load-balancing loss)/dprobs, unscaled; empty: off
  float z_grad = 0;                            // d(z-loss)/dlse = z_grad * lse
  DeviceBuffer sg, su, ss;                     // shared experts (N, Fs/tp)
  DeviceBuffer ysh, gate_logit;                // gated shared experts: their output (N, C), the gate (N)
};

void free_moe_acts(MoeActs* a) { delete a; }

void for_each_large_moe_act(MoeActs* a, const std::function<void(DeviceBuffer&)>& f) {
  for (DeviceBuffer* b : {&a->yp, &a->xg, &a->gate, &a->up, &a->s, &a->sg, &a->su, &a->ss, &a->ysh}) f(*b);
}

namespace {

DeviceBuffer make(ComputeBackend* be, int64_t floats) {
  return DeviceBuffer::uninitialized(be, size_t(std::max<int64_t>(floats, 1)) * sizeof(float));
}

template <typename T>
DeviceBuffer upload(ComputeBackend* be, const std::vector<T>& v) {
  static_assert(sizeof(T) == 4);
  DeviceBuffer b = DeviceBuffer::uninitialized(be, std::max<size_t>(v.size(), 1) * 4);
  if (!v.empty()) be->copy_to_device(b.f32(), v.data(), v.size() * 4);
  return b;
}

std::string mlp_prefix(int layer) { return "layers." + std::to_string(layer) + ".mlp."; }

}  // namespace

MoeLayer::MoeLayer(const ModelDims& dims, const MoeRun& run, int tp_size, int tp_rank, Communicator* tp,
                   ParamStore* params, ComputeBackend* backend)
    : d_(dims), run_(run), tp_size_(tp_size), tp_rank_(tp_rank), tp_(tp), params_(params), backend_(backend) {
  LOOM_CHECK(run.ep_size == 1 || run.ep != nullptr, "EP communicator missing");
  LOOM_CHECK(d_.moe.E % run.ep_size == 0, "ep does not divide the experts");
}

Status MoeLayer::exchange(const float* send, const std::vector<int64_t>& send_rows, float* recv,
                          const std::vector<int64_t>& recv_rows) {
  std::vector<size_t> sc(send_rows.size()), rc(recv_rows.size());
  for (size_t i = 0; i < sc.size(); ++i) sc[i] = size_t(send_rows[i] * d_.C);
  for (size_t i = 0; i < rc.size(); ++i) rc[i] = size_t(recv_rows[i] * d_.C);
  return run_.ep->all_to_allv(send, sc, recv, rc);
}

Status MoeLayer::forward(int layer, const float* h, float* y, int64_t N, MoeActsPtr* out, MoeStats* stats) {
  Kernels& k = backend_->kernels();
  ParamStore& P = *params_;
  const int E = d_.moe.E, K = d_.moe.k;
  const bool folded = run_.folded && tp_size_ > 1;
  const int64_t C = d_.C, Fl = d_.moe.F / (folded ? 1 : tp_size_), Fsl = d_.moe.Fs / tp_size_;
  const std::string p = mlp_prefix(layer);
  // The rows this rank routes: all N, or (folded) its 1/tp of them.
  const int64_t Nall = N, r0 = folded ? tp_rank_ * (N / tp_size_) : 0;
  if (folded) N /= tp_size_;
  const float* hall = h;
  h += r0 * C;
  MoeActsPtr a(new MoeActs);
  a->N = N;
  // Router.
  {
    DeviceBuffer logits = make(backend_, N * E);
    k.gemm({false, true, N, E, C, 1.f, h, P.param(p + "router.weight"), 0.f, logits.f32()});
    a->probs = make(backend_, N * E);
    a->lse = make(backend_, N);
    a->idx = DeviceBuffer::uninitialized(backend_, size_t(N * K) * sizeof(int32_t));
    a->w = make(backend_, N * K);
    k.moe_router_forward({logits.f32(), a->probs.f32(), a->lse.f32(), a->idx.i32(), a->w.f32(), N, E, K,
                          d_.moe.normalize});
  }
  // The permutation, on the host: token copies sorted by expert, in token
  // order within an expert; with a capacity, each expert keeps its copies of
  // the largest weight (ties: the earlier token), Megatron's "probs" policy.
  std::vector<int32_t> idx(static_cast<size_t>(N * K));
  std::vector<float> w(static_cast<size_t>(N * K));
  backend_->copy_to_host(idx.data(), a->idx.i32(), idx.size() * sizeof(int32_t));
  backend_->copy_to_host(w.data(), a->w.f32(), w.size() * sizeof(float));
  std::vector<std::vector<int32_t>> slots(static_cast<size_t>(E));
  for (int64_t s = 0; s < N * K; ++s) {
    const int32_t e = idx[size_t(s)];
    if (e < 0 || e >= E) return internal_error("moe: the router picked expert " + std::to_string(e));
    slots[size_t(e)].push_back(int32_t(s));
  }
  std::vector<int64_t> routed(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) routed[size_t(e)] = int64_t(slots[size_t(e)].size());
  int64_t dropped = 0;
  if (run_.capacity_factor > 0) {
    const int64_t cap = int64_t(std::ceil(run_.capacity_factor * double(N * K) / double(E)));
    for (auto& v : slots) {
      if (int64_t(v.size()) <= cap) continue;
      dropped += int64_t(v.size()) - cap;
      std::stable_sort(v.begin(), v.end(), [&](int32_t x, int32_t y) { return w[size_t(x)] > w[size_t(y)]; });
      v.resize(size_t(cap));
      std::sort(v.begin(), v.end());
    }
  }
  std::vector<int32_t> slot_rows(size_t(N * K), -1), src;
  std::vector<int64_t> kept(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) {
    for (int32_t s : slots[size_t(e)]) {
      slot_rows[size_t(s)] = int32_t(src.size());
      src.push_back(s / K);
    }
    kept[size_t(e)] = int64_t(slots[size_t(e)].size());
  }
  const int64_t M = int64_t(src.size());
  a->M = M;
  a->slot_rows = upload(backend_, slot_rows);
  // The losses of the router (their values now, their gradients in backward),
  // over the micro-batch's Nt tokens (all CP ranks' chunks; folded, all TP
  // ranks' shares). The statistics, summed over those groups: per expert the
  // probabilities summed over tokens (E) and the token copies routed to it
  // (E); then, over TP only (the trainer reports TP rank 0's and sums the
  // rest), the squared log-sum-exps and the dropped copies.
  const double mw = run_.micro_weight;
  const int64_t Nt = N * run_.cp_size * (folded ? tp_size_ : 1);
  std::vector<float> st(static_cast<size_t>(2 * E + 2), 0.f);
  if (run_.aux_coeff > 0) {
    DeviceBuffer psum(backend_, size_t(E) * sizeof(float));  // zeroed: bias_backward accumulates
    k.bias_backward({a->probs.f32(), psum.f32(), N, E});
    backend_->copy_to_host(st.data(), psum.f32(), size_t(E) * sizeof(float));
  }
  for (int e = 0; e < E; ++e) st[size_t(E + e)] = float(routed[size_t(e)]);  // exact below 2^24
  if (run_.z_coeff > 0) {
    std::vector<float> lse(static_cast<size_t>(N));
    backend_->copy_to_host(lse.data(), a->lse.f32(), lse.size() * sizeof(float));
    double z = 0;
    for (float v : lse) z += double(v) * v;
    st[size_t(2 * E)] = float(z);
  }
  st[size_t(2 * E + 1)] = float(dropped);
  const bool by_tp = folded, by_cp = run_.cp_size > 1 && run_.aux_coeff > 0;
  if (by_tp || by_cp) {
    DeviceBuffer sd = upload(backend_, st);
    if (by_tp) LOOM_RETURN_IF_ERROR(tp_->all_reduce(sd.f32(), st.size(), ReduceOp::kSum));
    if (by_cp) LOOM_RETURN_IF_ERROR(run_.cp->all_reduce(sd.f32(), size_t(2 * E), ReduceOp::kSum));
    backend_->copy_to_host(st.data(), sd.f32(), st.size() * sizeof(float));
  }
  if (run_.aux_coeff > 0) {
    double aux = 0;
    a->aux_grad.resize(size_t(E));
    for (int e = 0; e < E; ++e) {
      const double f = double(st[size_t(E + e)]) / double(Nt * K);
      aux += f * st[size_t(e)] / double(Nt);
      a->aux_grad[size_t(e)] = float(mw * run_.aux_coeff * E * f / double(Nt));
    }
    // Every CP rank holds the same value: the first reports it.
    if (stats && run_.cp_rank == 0) stats->aux_loss += mw * run_.aux_coeff * E * aux;
  }
  if (run_.z_coeff > 0) {
    a->z_grad = float(mw * run_.z_coeff * 2 / double(Nt));
    if (stats) stats->z_loss += mw * run_.z_coeff * st[size_t(2 * E)] / double(Nt);  // this CP rank's share
  }
  if (stats) stats->dropped += int64_t(st[size_t(2 * E + 1)]);
  DeviceBuffer xp = make(backend_, M * C);
  {
    DeviceBuffer src_dev = upload(backend_, src);
    k.moe_gather({h, src_dev.i32(), xp.f32(), M, C});
  }
  // Dispatch over the EP group.
  const ExpertRange ex = local_experts(d_.moe, run_.ep_size, run_.ep_rank);
  const int El = ex.count, ep = run_.ep_size;
  if (ep == 1) {
    a->xg = std::move(xp);
    a->expert_rows = kept;
    a->R = M;
  } else {
    // Counts first: E per rank, El to each owner (the experts are contiguous per owner).
    std::vector<float> cnt_send(static_cast<size_t>(E)), cnt_recv(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) cnt_send[size_t(e)] = float(kept[size_t(e)]);
    DeviceBuffer cs = upload(backend_, cnt_send), cr = make(backend_, E);
    LOOM_RETURN_IF_ERROR(run_.ep->all_to_all(cs.f32(), cr.f32(), size_t(El)));
    backend_->copy_to_host(cnt_recv.data(), cr.f32(), cnt_recv.size() * sizeof(float));
    a->send_rows.assign(size_t(ep), 0);
    a->recv_rows.assign(size_t(ep), 0);
    for (int e = 0; e < E; ++e) a->send_rows[size_t(e / El)] += kept[size_t(e)];
    for (int s = 0; s < ep; ++s)
      for (int e = 0; e < El; ++e) a->recv_rows[size_t(s)] += int64_t(cnt_recv[size_t(s * El + e)]);
    int64_t R = 0;
    for (int64_t r : a->recv_rows) R += r;
    a->R = R;
    DeviceBuffer xr = make(backend_, R * C);
    LOOM_RETURN_IF_ERROR(exchange(xp.f32(), a->send_rows, xr.f32(), a->recv_rows));
    // Received: by source rank, then local expert. Grouped: by local expert,
    // then source (Megatron's sort_chunks_by_idxs; nothing to do for one
    // local expert).
    std::vector<int64_t> block(size_t(ep) * El + 1, 0);  // start of (s, e) in the received rows
    for (int s = 0; s < ep; ++s)
      for (int e = 0; e < El; ++e)
        block[size_t(s * El + e) + 1] = block[size_t(s * El + e)] + int64_t(cnt_recv[size_t(s * El + e)]);
    std::vector<int32_t> gidx, ginv(static_cast<size_t>(R));
    a->expert_rows.assign(size_t(El), 0);
    for (int e = 0; e < El; ++e)
      for (int s = 0; s < ep; ++s) {
        const int64_t b = block[size_t(s * El + e)], n = int64_t(cnt_recv[size_t(s * El + e)]);
        for (int64_t i = 0; i < n; ++i) {
          ginv[size_t(b + i)] = int32_t(gidx.size());
          gidx.push_back(int32_t(b + i));
        }
        a->expert_rows[size_t(e)] += n;
      }
    if (El == 1) {  // one local expert: the received order is already grouped
      a->xg = std::move(xr);
    } else {
      a->group_idx = upload(backend_, gidx);
      a->group_inv = upload(backend_, ginv);
      a->xg = make(backend_, R * C);
      k.moe_gather({xr.f32(), a->group_idx.i32(), a->xg.f32(), R, C});
    }
  }
  // The local experts, each on its rows.
  const int64_t R = a->R;
  if (stats) stats->max_load = std::max(stats->max_load, N * K > 0 ? double(R) / double(N * K) : 1.0);
  a->gate = make(backend_, R * Fl);
  a->up = make(backend_, R * Fl);
  a->s = make(backend_, R * Fl);
  DeviceBuffer yg = make(backend_, R * C);
  // The local experts' GEMMs, one grouped call each (gate, up, down); the
  // SwiGLU runs over all their rows at once.
  std::vector<GemmGroup> g_gate, g_up, g_down;
  int64_t off = 0;
  for (int e = 0; e < El; ++e) {
    const int64_t n = a->expert_rows[size_t(e)];
    if (n == 0) continue;
    const std::string q = expert_prefix(layer, ex.first + e);
    const float* x = a->xg.f32() + off * C;
    g_gate.push_back({n, Fl, C, x, P.param(q + "gate.weight"), a->gate.f32() + off * Fl});
    g_up.push_back({n, Fl, C, x, P.param(q + "up.weight"), a->up.f32() + off * Fl});
    g_down.push_back({n, C, Fl, a->s.f32() + off * Fl, P.param(q + "down.weight"), yg.f32() + off * C});
    off += n;
  }
  k.grouped_gemm({false, true, 1.f, 0.f, g_gate.data(), int64_t(g_gate.size())});
  k.grouped_gemm({false, true, 1.f, 0.f, g_up.data(), int64_t(g_up.size())});
  k.swiglu_forward({a->gate.f32(), a->up.f32(), a->s.f32(), R * Fl});
  k.grouped_gemm({false, true, 1.f, 0.f, g_down.data(), int64_t(g_down.size())});
  // Back to the tokens' ranks.
  if (ep == 1) {
    a->yp = std::move(yg);
  } else {
    DeviceBuffer yr;
    if (El == 1) {
      yr = std::move(yg);
    } else {
      yr = make(backend_, R * C);
      k.moe_gather({yg.f32(), a->group_inv.i32(), yr.f32(), R, C});
    }
    a->yp = make(backend_, M * C);
    LOOM_RETURN_IF_ERROR(exchange(yr.f32(), a->recv_rows, a->yp.f32(), a->send_rows));
  }
  // Shared experts: written into y, the routed outputs added after; gated
  // (Qwen2-MoE), added last, scaled by sigmoid(h . w_g).
  const bool ungated_shared = d_.moe.Fs > 0 && !d_.moe.shared_gate;
  // The shared experts see every row (TP-split like the dense MLP).
  if (d_.moe.Fs > 0) {
    a->sg = make(backend_, Nall * Fsl);
    a->su = make(backend_, Nall * Fsl);
    a->ss = make(backend_, Nall * Fsl);
    linear(k, hall, P.param(p + "shared.gate.weight"), nullptr, a->sg.f32(), Nall, C, Fsl);
    linear(k, hall, P.param(p + "shared.up.weight"), nullptr, a->su.f32(), Nall, C, Fsl);
    k.swiglu_forward({a->sg.f32(), a->su.f32(), a->ss.f32(), Nall * Fsl});
    if (d_.moe.shared_gate) a->ysh = make(backend_, Nall * C);
    linear(k, a->ss.f32(), P.param(p + "shared.down.weight"), nullptr, d_.moe.shared_gate ? a->ysh.f32() : y, Nall,
           Fsl, C);
  }
  // Folded: the routed output on this rank's rows only, zero elsewhere.
  if (folded && !ungated_shared) backend_->fill_zero(y, size_t(Nall * C) * sizeof(float));
  k.moe_unpermute({a->yp.f32(), a->slot_rows.i32(), a->w.f32(), y + r0 * C, N, K, C, ungated_shared || folded});
  if (d_.moe.shared_gate) {
    a->gate_logit = make(backend_, Nall);
    k.gemm({false, true, Nall, 1, C, 1.f, hall, P.param(p + "shared_gate.weight"), 0.f, a->gate_logit.f32()});
    k.sigmoid_gate_forward({a->gate_logit.f32(), a->ysh.f32(), y, Nall, C});
  }
  *out = std::move(a);
  return k.status();
}

Status MoeLayer::backward(int layer, const float* h, const float* dy, float* dh, MoeActsPtr* acts, float grad_scale,
                          DeferredWgrad* defer) {
  Kernels& k = backend_->kernels();
  ParamStore& P = *params_;
  MoeActs& a = **acts;
  const int E = d_.moe.E, K = d_.moe.k;
  const bool folded = run_.folded && tp_size_ > 1;
  const int64_t C = d_.C, Fl = d_.moe.F / (folded ? 1 : tp_size_), Fsl = d_.moe.Fs / tp_size_, N = a.N, M = a.M,
                R = a.R;
  // The rows this rank routed (folded: its 1/tp of them), and all of them.
  const int64_t Nall = folded ? N * tp_size_ : N, r0 = folded ? tp_rank_ * N : 0;
  const float* hall = h;
  const float* dyall = dy;
  float* dhall = dh;
  h += r0 * C;
  dy += r0 * C;
  dh += r0 * C;
  const std::string p = mlp_prefix(layer);
  const ExpertRange ex = local_experts(d_.moe, run_.ep_size, run_.ep_rank);
  const int El = ex.count, ep = run_.ep_size;
  // Combine's backward: the rows' gradients and the weights'.
  DeviceBuffer dyp = make(backend_, M * C), dw = make(backend_, N * K);
  k.moe_unpermute_backward({dy, a.yp.f32(), a.slot_rows.i32(), a.w.f32(), dyp.f32(), dw.f32(), N, K, C});
  a.yp = DeviceBuffer();
  // Each TP rank's expert outputs are parts (not folded): so are the weights' gradients.
  if (tp_size_ > 1 && !folded) LOOM_RETURN_IF_ERROR(tp_->all_reduce(dw.f32(), size_t(N * K), ReduceOp::kSum));
  DeviceBuffer dyg;
  if (ep == 1) {
    dyg = std::move(dyp);
  } else {
    DeviceBuffer dyr = make(backend_, R * C);
    LOOM_RETURN_IF_ERROR(exchange(dyp.f32(), a.send_rows, dyr.f32(), a.recv_rows));
    dyp = DeviceBuffer();
    if (El == 1) {
      dyg = std::move(dyr);
    } else {
      dyg = make(backend_, R * C);
      k.moe_gather({dyr.f32(), a.group_idx.i32(), dyg.f32(), R, C});
    }
  }
  DeviceBuffer dxg = make(backend_, R * C), ds = make(backend_, R * Fl), dgate = make(backend_, R * Fl),
               dup = make(backend_, R * Fl);
  // As forward, grouped over the local experts: the down projection's weight
  // and input gradients, the SwiGLU over all rows, then gate's and up's
  // (their input gradients summed into dxg).
  std::vector<GemmGroup> w_down, x_down, w_gate, x_gate, w_up, x_up;
  int64_t off = 0;
  for (int e = 0; e < El; ++e) {
    const int64_t n = a.expert_rows[size_t(e)];
    if (n == 0) continue;
    const std::string q = expert_prefix(layer, ex.first + e);
    const int64_t oc = off * C, of = off * Fl;
    w_down.push_back({C, Fl, n, dyg.f32() + oc, a.s.f32() + of, P.grad(q + "down.weight")});
    x_down.push_back({n, Fl, C, dyg.f32() + oc, P.param(q + "down.weight"), ds.f32() + of});
    w_gate.push_back({Fl, C, n, dgate.f32() + of, a.xg.f32() + oc, P.grad(q + "gate.weight")});
    x_gate.push_back({n, C, Fl, dgate.f32() + of, P.param(q + "gate.weight"), dxg.f32() + oc});
    w_up.push_back({Fl, C, n, dup.f32() + of, a.xg.f32() + oc, P.grad(q + "up.weight")});
    x_up.push_back({n, C, Fl, dup.f32() + of, P.param(q + "up.weight"), dxg.f32() + oc});
    off += n;
  }
  auto grouped = [&](bool ta, bool tb, float beta, const std::vector<GemmGroup>& g) {
    k.grouped_gemm({ta, tb, 1.f, beta, g.data(), int64_t(g.size())});
  };
  // The weight gradients now, or (defer) kept with what they read for the W.
  auto weights = [&](std::vector<GemmGroup>& g) {
    if (!defer)
      grouped(true, false, 1.f, g);
    else if (!g.empty())
      defer->grouped.push_back(std::move(g));
  };
  weights(w_down);                     // dW_down += dy^T s
  grouped(false, false, 0.f, x_down);  // ds = dy W_down
  k.swiglu_backward({ds.f32(), a.gate.f32(), a.up.f32(), dgate.f32(), dup.f32(), R * Fl});
  ds = DeviceBuffer();
  weights(w_gate);                     // dW_gate += dgate^T x
  grouped(false, false, 0.f, x_gate);  // dx = dgate W_gate
  weights(w_up);                       // dW_up += dup^T x
  grouped(false, false, 1.f, x_up);    // dx += dup W_up
  // What the experts saved is used up: only routing and the shared experts' state remain.
  if (defer)
    for (DeviceBuffer* b : {&dyg, &dgate, &dup, &a.xg, &a.s}) defer->hold(*b);
  dyg = DeviceBuffer();
  dgate = DeviceBuffer();
  dup = DeviceBuffer();
  for (DeviceBuffer* b : {&a.xg, &a.gate, &a.up, &a.s}) *b = DeviceBuffer();
  DeviceBuffer dxp;
  if (ep == 1) {
    dxp = std::move(dxg);
  } else {
    DeviceBuffer dxr;
    if (El == 1) {
      dxr = std::move(dxg);
    } else {
      dxr = make(backend_, R * C);
      k.moe_gather({dxg.f32(), a.group_inv.i32(), dxr.f32(), R, C});
      dxg = DeviceBuffer();
    }
    dxp = make(backend_, M * C);
    LOOM_RETURN_IF_ERROR(exchange(dxr.f32(), a.recv_rows, dxp.f32(), a.send_rows));
  }
  // Folded: this rank's input gradient is its rows' (zero elsewhere) plus
  // the shared experts' part.
  if (folded) backend_->fill_zero(dhall, size_t(Nall * C) * sizeof(float));
  k.moe_unpermute({dxp.f32(), a.slot_rows.i32(), nullptr, dh, N, K, C, false});
  dxp = DeviceBuffer();
  if (d_.moe.Fs > 0) {
    const float* dysh = dyall;
    DeviceBuffer dysh_buf;
    if (d_.moe.shared_gate) {
      // The gate: its gradient from this TP rank's part of the shared output, summed over TP.
      dysh_buf = make(backend_, Nall * C);
      DeviceBuffer dg = make(backend_, Nall);
      k.sigmoid_gate_backward({dyall, a.gate_logit.f32(), a.ysh.f32(), dysh_buf.f32(), dg.f32(), Nall, C});
      if (tp_size_ > 1) LOOM_RETURN_IF_ERROR(tp_->all_reduce(dg.f32(), size_t(Nall), ReduceOp::kSum));
      const std::string wg = p + "shared_gate.weight";
      const Gemm gate_wgrad{true, false, 1, C, Nall, 1.f, dg.f32(), hall, 1.f, P.grad(wg)};
      if (defer)
        defer->gemms.push_back(gate_wgrad);
      else
        k.gemm(gate_wgrad);
      if (tp_rank_ == 0) k.gemm({false, false, Nall, C, 1, 1.f, dg.f32(), P.param(wg), 1.f, dhall});
      dysh = dysh_buf.f32();
      if (defer) defer->hold(dg);
    }
    DeviceBuffer dss = make(backend_, Nall * Fsl), dsg = make(backend_, Nall * Fsl), dsu = make(backend_, Nall * Fsl);
    std::vector<Gemm>* dwg = defer ? &defer->gemms : nullptr;
    linear_backward(k, dysh, a.ss.f32(), P.param(p + "shared.down.weight"), P.grad(p + "shared.down.weight"), nullptr,
                    dss.f32(), Nall, Fsl, C, false, nullptr, nullptr, nullptr, dwg);
    k.swiglu_backward({dss.f32(), a.sg.f32(), a.su.f32(), dsg.f32(), dsu.f32(), Nall * Fsl});
    linear_backward(k, dsg.f32(), hall, P.param(p + "shared.gate.weight"), P.grad(p + "shared.gate.weight"), nullptr,
                    dhall, Nall, C, Fsl, true, nullptr, nullptr, nullptr, dwg);
    linear_backward(k, dsu.f32(), hall, P.param(p + "shared.up.weight"), P.grad(p + "shared.up.weight"), nullptr,
                    dhall, Nall, C, Fsl, true, nullptr, nullptr, nullptr, dwg);
    if (defer)
      for (DeviceBuffer* b : {&dysh_buf, &dsg, &dsu, &a.ss}) defer->hold(*b);
  }
  // The router: the weights' gradient, the losses', through the softmax.
  DeviceBuffer aux;
  if (!a.aux_grad.empty()) {
    std::vector<float> g(a.aux_grad);
    for (float& v : g) v *= grad_scale;
    aux = upload(backend_, g);
  }
  DeviceBuffer dlogits = make(backend_, N * E);
  k.moe_router_backward({a.probs.f32(), a.lse.f32(), a.idx.i32(), a.w.f32(), dw.f32(), aux.empty() ? nullptr : aux.f32(),
                         a.z_grad * grad_scale, dlogits.f32(), N, E, K, d_.moe.normalize});
  const std::string wr = p + "router.weight";
  const Gemm router_wgrad{true, false, E, C, N, 1.f, dlogits.f32(), h, 1.f, P.grad(wr)};
  if (defer)
    defer->gemms.push_back(router_wgrad);
  else
    k.gemm(router_wgrad);
  // Every TP rank holds the whole router gradient (folded: its rows' part,
  // summed over TP by the trainer as other replicated weights under SP); one
  // adds the input part (folded: each its own rows').
  if (tp_rank_ == 0 || folded) k.gemm({false, false, N, C, E, 1.f, dlogits.f32(), P.param(wr), 1.f, dh});
  if (defer) defer->hold(dlogits);
  acts->reset();
  return k.status();
}

}  // namespace loom::exec
