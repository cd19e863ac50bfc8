// loom calibrate: measure this machine into a hardware profile, under the
// same launcher and backends `loom execute` uses (mpirun -np N loom calibrate).
// Every rank runs the microbenchmarks at the same time, so the figures are what
// one rank gets while its peers share the machine.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <unistd.h>
#include <utility>
#include <vector>

#include "cli/calibrate.h"
#include "cli/commands.h"
#include "cli/parse_args.h"
#include "core/output_file.h"
#include "core/hw_profile.h"
#include "core/json_util.h"
#include "exec/backend/backend_error.h"
#include "exec/backend/kernel_bench.h"
#include "exec/runtime/devices.h"
#include "exec/comm/self_communicator.h"
#include "exec/comm/world.h"

namespace loom::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Median seconds per call of `fn` (and in *best the fastest sample's: the
// machine's capability, which contention can only slow) over samples lasting at least `min_s` in
// total. Every rank runs it at the same time (a barrier starts each sample)
// and the same number of calls. A sample repeats `fn` for about `sample_s`, far
// longer than a scheduler time slice: when ranks outnumber cores, a single
// short call often runs unpreempted at full speed, while a training step runs
// at the shared rate that whole samples see.
template <typename Fn>
Result<double> time_it(exec::Communicator& w, Fn&& fn, double min_s, double* spread, double sample_s,
                       exec::KernelBench* device = nullptr, double* best = nullptr) {
  // The first sample sizes itself by a probe call (at most 16 calls: an
  // unpreempted probe can be far faster than the shared rate); later ones by
  // the previous sample's time per call. The slowest rank decides.
  LOOM_RETURN_IF_ERROR(w.barrier());
  auto t0 = Clock::now();
  LOOM_RETURN_IF_ERROR(fn());  // probe (also warms up)
  if (device) device->synchronize();
  double per_call = std::chrono::duration<double>(Clock::now() - t0).count();
  double cap = 16;
  std::vector<double> t;
  auto start = Clock::now();
  for (;;) {
    double calls_d = std::clamp(std::ceil(sample_s / std::max(per_call, 1e-7)), 1.0, cap);
    LOOM_RETURN_IF_ERROR(w.all_reduce(&calls_d, 1, exec::ReduceOp::kMin));
    const int64_t calls = int64_t(calls_d);
    cap = 20000;
    LOOM_RETURN_IF_ERROR(w.barrier());
    auto s0 = Clock::now();
    for (int64_t i = 0; i < calls; ++i) LOOM_RETURN_IF_ERROR(fn());
    if (device) device->synchronize();
    per_call = std::chrono::duration<double>(Clock::now() - s0).count() / double(calls);
    t.push_back(per_call);
    // Every rank must run the same number of samples: decide together.
    double more = (std::chrono::duration<double>(Clock::now() - start).count() < min_s || t.size() < 3) ? 1 : 0;
    LOOM_RETURN_IF_ERROR(w.all_reduce(&more, 1, exec::ReduceOp::kMax));
    if (more == 0) break;
  }
  std::sort(t.begin(), t.end());
  double med = t[t.size() / 2];
  if (spread) *spread = (t[t.size() * 3 / 4] - t[t.size() / 4]) / med;  // interquartile range / median
  // The slowest rank sets the pace of a lock-step training step.
  LOOM_RETURN_IF_ERROR(w.all_reduce(&med, 1, exec::ReduceOp::kMax));
  if (best) {
    *best = t.front();
    LOOM_RETURN_IF_ERROR(w.all_reduce(best, 1, exec::ReduceOp::kMax));
  }
  return med;
}

struct Point {
  double flops, flops_per_s;
  double forward_share = 0;  // weight GEMMs: forward time / (forward + dgrad + wgrad); 0 = not measured
};

// An efficiency table from measured GEMM points: the median efficiency
// (rate / peak, within [floor, 1]) in each factor-of-4 band of GEMM size,
// keyed by the band's middle point, and the end bands' efficiencies again at
// the smallest and largest sizes measured: the lookup is flat beyond the
// ends either way, so prices do not change, but the table spans what was
// measured (sim/coverage.h flags only shapes outside it). Sorts `pts` by FLOPs.
OrderedJson band_table(std::vector<Point>& pts, double peak, double floor) {
  std::sort(pts.begin(), pts.end(), [](const Point& x, const Point& y) { return x.flops < y.flops; });
  const bool shares = !pts.empty() && std::all_of(pts.begin(), pts.end(), [](const Point& p) {
    return p.forward_share > 0;
  });
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  OrderedJson table = OrderedJson::array();
  for (size_t i = 0; i < pts.size();) {
    size_t j = i;
    std::vector<double> eff, share;
    for (; j < pts.size() && pts[j].flops < pts[i].flops * 4; ++j) {
      eff.push_back(pts[j].flops_per_s / peak);
      share.push_back(pts[j].forward_share);
    }
    const double gflop = pts[(i + j - 1) / 2].flops / 1e9;
    if (table.empty() || gflop > table.back()["gflop"].get<double>()) {
      table.push_back({{"gflop", gflop}, {"efficiency", std::clamp(median(eff), floor, 1.0)}});
      if (shares) table.back()["forward_share"] = median(share);
    }
    i = j;
  }
  if (!pts.empty() && !table.empty()) {
    const double lo = pts.front().flops / 1e9, hi = pts.back().flops / 1e9;
    if (lo < table.front()["gflop"].get<double>()) {
      OrderedJson first = table.front();
      first["gflop"] = lo;
      table.insert(table.begin(), first);
    }
    if (hi > table.back()["gflop"].get<double>()) {
      OrderedJson last = table.back();
      last["gflop"] = hi;
      table.push_back(last);
    }
  }
  return table;
}

// What the sweeps measured, per rank.
struct Measured {
  std::vector<Point> gemm;         // (FLOPs, FLOP/s) of each GEMM shape, sorted by FLOPs
  double peak = 0;                 // the best GEMM rate (bf16 on a GPU)
  double fp32_peak = 0;            // GPU: one large fp32 GEMM
  OrderedJson gemm_table = OrderedJson::array();
  OrderedJson head_table = OrderedJson::array();  // the LM head's GEMMs
  double triad_bw = 0, elem_bw = 0, opt_bw = 0;
  double discard_bw = 0;  // bytes / extra second of writing discarded memory; 0 = no extra time seen
  OrderedJson att_table = OrderedJson::array();
  double att_bwd_ratio = 0;
  double xent_fwd = 0, xent_bwd = 0;  // seconds per logit (median over the vocabularies)
  int64_t xent_vocab_min = 0, xent_vocab_max = 0;
  OrderedJson colls = OrderedJson::array();
  OrderedJson colls_measured;      // per collective: [{bytes, time_us}]
  double busbw_large = 0, latency_small = 0, p2p_bw = 0;
  double worst_spread = 0;
  double stream_bw() const { return std::max({triad_bw, elem_bw, opt_bw}); }
};

// The sweeps of `loom calibrate`, one method each; every rank runs them in
// lock step (time_it's barriers and collectives).
class Calibrator {
 public:
  Calibrator(exec::Communicator& w, exec::KernelBench& bench, const CalibArgs& a)
      : w_(w), bench_(bench), a_(a), min_s_(a.quick ? 0.05 : 0.25), sample_s_(a.quick ? 0.004 : 0.02) {}

  Status run(Measured* m) {
    t0_ = last_print_ = Clock::now();
    budget_total_ = planned_budget();
    LOOM_RETURN_IF_ERROR(stage("GEMMs", &Calibrator::gemms, m));
    LOOM_RETURN_IF_ERROR(stage("memory bandwidth", &Calibrator::bandwidths, m));
    LOOM_RETURN_IF_ERROR(stage("LM head GEMMs", &Calibrator::head_gemms, m));
    LOOM_RETURN_IF_ERROR(stage("attention", &Calibrator::attention, m));
    LOOM_RETURN_IF_ERROR(stage("cross-entropy", &Calibrator::cross_entropy, m));
    LOOM_RETURN_IF_ERROR(stage("collectives", &Calibrator::collectives, m));
    LOOM_RETURN_IF_ERROR(bench_.status());  // a device's failed launch, never a silent rate
    m->worst_spread = worst_spread_;
    if (a_.progress) std::fprintf(stderr, "\r\033[K");
    return Status::ok();
  }

 private:
  static constexpr int kStages = 6;

  Status stage(const char* name, Status (Calibrator::*sweep)(Measured*), Measured* m) {
    ++stage_;
    stage_name_ = name;
    print_progress(true);
    return (this->*sweep)(m);
  }

  // Each timed() call lasts about its budget (time_it samples for at least
  // that long), so the ETA scales the time so far by the budget still to go.
  void print_progress(bool force) {
    if (!a_.progress) return;
    auto now = Clock::now();
    if (!force && std::chrono::duration<double>(now - last_print_).count() < 0.5) return;
    last_print_ = now;
    double elapsed = std::chrono::duration<double>(now - t0_).count();
    double frac = budget_total_ > 0 ? std::min(1.0, budget_done_ / budget_total_) : 0;
    char eta[32] = "?";
    if (frac > 0.02) std::snprintf(eta, sizeof eta, "%.0f s", elapsed * (1 / frac - 1));
    std::fprintf(stderr, "\r\033[Kcalibrate: %3.0f%%  %d/%d %s  %d measurements  %.0f s  ETA %s", 100 * frac, stage_,
                 kStages, stage_name_, calls_, elapsed, eta);
    std::fflush(stderr);
  }

  Result<double> timed(const exec::KernelBench::Run& run, double budget, double* best = nullptr) {
    double spread = 0;
    auto t = time_it(w_, [&] { run(); return Status::ok(); }, budget, &spread, sample_s_, &bench_, best);
    worst_spread_ = std::max(worst_spread_, spread);
    ++calls_;
    budget_done_ += budget;
    print_progress(false);
    return t;
  }

  // The sweeps' shapes, listed once for the sweep and for planned_budget().
  std::vector<std::array<int64_t, 3>> gemm_shapes() const {
    std::vector<std::array<int64_t, 3>> out;
    const int64_t dims[] = {64, 128, 256, 512, 768, 1024, 2048};
    for (int64_t rows : {64, 256, 1024, 4096})
      for (int64_t nk : dims)
        for (int64_t k : {nk, 4 * nk})
          if (rows * nk * k <= (a_.quick ? 1LL << 31 : 1LL << 33)) out.push_back({rows, nk, k});
    return out;
  }
  // 8 shapes (3 with --quick): the sweep is a third of a full calibration's time.
  std::vector<std::array<int64_t, 3>> head_shapes() const {
    std::vector<std::array<int64_t, 3>> out;
    for (int64_t V : {int64_t{AcceleratorSpec::kHeadGemmMinVocab}, int64_t{50257}, int64_t{128256}})
      for (int64_t h : {int64_t{128}, int64_t{768}})
        for (int64_t rows : {int64_t{64}, int64_t{512}}) {
          if (a_.quick && (V == 128256 || h == 768)) continue;
          if (double(rows) * double(V) * double(h) > double(a_.quick ? 1LL << 31 : 1LL << 32)) continue;
          out.push_back({rows, V, h});
        }
    return out;
  }
  std::vector<std::pair<int64_t, int64_t>> attention_shapes() const {
    std::vector<std::pair<int64_t, int64_t>> out;
    if (!bench_.has_attention()) return out;
    for (auto [S, D] : {std::pair<int64_t, int64_t>{32, 32}, {64, 32}, {128, 32}, {128, 64}, {256, 64}, {512, 64},
                        {1024, 64}, {2048, 128}})
      if (!a_.quick || S <= 512) out.push_back({S, D});
    return out;
  }
  std::vector<int64_t> xent_vocabs() const {
    std::vector<int64_t> out;
    for (int64_t V : {int64_t{4096}, int64_t{32000}, int64_t{50257}, int64_t{128256}})
      if (!a_.quick || V == 4096 || V == 50257) out.push_back(V);
    return out;
  }
  std::vector<size_t> collective_sizes() const {
    std::vector<size_t> out;
    if (w_.size() < 2) return out;
    for (size_t bytes = 4096; bytes <= (a_.quick ? (4u << 20) : (64u << 20)); bytes *= 4) out.push_back(bytes);
    return out;
  }
  // The sum of the timed() budgets the sweeps will ask for.
  double planned_budget() const {
    return double(gemm_shapes().size()) * 3 * min_s_ / 8 + (bench_.sm_arch() > 0 ? min_s_ : 0) +
           (min_s_ + 2 * min_s_ / 2 + min_s_ / 2) + double(head_shapes().size()) * 3 * min_s_ / 8 +
           double(attention_shapes().size()) * 2 * min_s_ / 8 + double(xent_vocabs().size()) * 2 * min_s_ / 8 +
           double(collective_sizes().size()) * 5 * min_s_ / 2;
  }

  // GEMM throughput over transformer shapes (tokens x out x in). A training
  // step runs each weight GEMM three ways (forward, input and weight
  // gradient): time the three with the same work and take their mean. In a
  // layer one operand of each GEMM was just produced by the kernel before it
  // and is in cache (x forward, dy backward) while the other and the output
  // were last touched a layer ago: the bench keeps the first hot and rotates
  // the others through bench.cold_set_bytes(). Timing one hot set of
  // matrices overstated small GEMMs by 10-25% here; all-cold understated them.
  // The peak is the best rate a shape reached in its fastest samples (what
  // the machine can do: contention only slows it, so a busy machine does not
  // lower the MFU denominator); the efficiencies are the median rates over
  // it, so times priced as peak x efficiency are the median rates.
  Status gemms(Measured* m) {
    for (auto [rows, nk, k] : gemm_shapes()) {
      exec::KernelBench::GemmRuns g = bench_.gemm(rows, nk, k, bench_.cold_set_bytes());
      double total = 0, fastest = 0, forward = 0;
      for (const exec::KernelBench::Run* run : {&g.forward, &g.dgrad, &g.wgrad}) {
        double best = 0;
        LOOM_ASSIGN_OR_RETURN(double t, timed(*run, min_s_ / 8, &best));
        if (run == &g.forward) forward = t;
        total += t;
        fastest += best;
      }
      m->gemm.push_back({2.0 * rows * nk * k, 3 * 2.0 * rows * nk * k / total, forward / total});
      m->peak = std::max(m->peak, 3 * 2.0 * rows * nk * k / fastest);
    }
    if (exec::KernelBench::Run f32 = bench_.gemm_fp32(4096, 4096, 4096)) {  // GPU: the CUDA-core rate
      LOOM_ASSIGN_OR_RETURN(double t, timed(f32, min_s_));
      m->fp32_peak = 2.0 * 4096 * 4096 * 4096 / t;
    }
    m->gemm_table = band_table(m->gemm, m->peak, 0.0);
    return Status::ok();
  }

  // Memory bandwidth three ways. The triad (2 reads + 1 write). The
  // elementwise kernels as a layer runs them: the simulator prices norms,
  // residual adds and the activation function by the bytes they move
  // (sim/compute_model.cc: norm 2 N C, add 3 N C, GELU 2 N F elements forward;
  // backward twice that) at memory_bw x memory_bw_efficiency; on a CPU these
  // kernels are bound by arithmetic (tanh, rsqrt) as much as by memory, so the
  // executor's own kernels are timed on a micro-batch-sized layer. The
  // optimizer step (grad norm, AdamW, zeroing), priced at 32 bytes per
  // parameter.
  Status bandwidths(Measured* m) {
    const size_t elems = size_t(a_.quick ? 1 << 22 : 1 << 24);
    LOOM_ASSIGN_OR_RETURN(double tri, timed(bench_.triad(elems), min_s_));
    m->triad_bw = 3.0 * elems * sizeof(float) / tri;
    const int64_t N = 2048, C = 256, F = 4 * C;
    exec::KernelBench::FwdBwd layer = bench_.layer_elementwise(N, C, F);
    LOOM_ASSIGN_OR_RETURN(double tf, timed(layer.forward, min_s_ / 2));
    LOOM_ASSIGN_OR_RETURN(double tb, timed(layer.backward, min_s_ / 2));
    const double fwd_bytes = double(sizeof(float)) * (2 * 2 * N * C + 2 * 3 * N * C + 2 * N * F);
    m->elem_bw = 3 * fwd_bytes / (tf + tb);  // forward bytes + backward (twice as many)
    const int64_t np = a_.quick ? (1 << 20) : (1 << 22);
    LOOM_ASSIGN_OR_RETURN(double t_opt, timed(bench_.optimizer_step(np), min_s_ / 2));
    m->opt_bw = 32.0 * double(np) / t_opt;
    // What a discard costs when the memory is written again (ZeRO-2/3's
    // gradient after its reduce-scatter, exec/runtime/data_parallel.cc):
    // the write after a discard against the same write without one.
    const size_t db = size_t(a_.quick ? 16 : 64) << 20;
    LOOM_ASSIGN_OR_RETURN(double t_dw, timed(bench_.discard_and_write(db), min_s_ / 2));
    LOOM_ASSIGN_OR_RETURN(double t_w, timed(bench_.write(db), min_s_ / 2));
    m->discard_bw = t_dw > t_w ? double(db) / (t_dw - t_w) : 0;
    return Status::ok();
  }

  // The attention kernel (causal, fused softmax), forward + backward, keyed
  // like the simulator looks it up: one head's forward FLOP with the causal
  // share, 4 s^2 d (s+1)/(2s); the efficiency is the forward's, and the
  // backward's time is kept as a ratio to it (the median over the shapes).
  Status attention(Measured* m) {
    std::vector<Point> points;
    std::vector<double> ratios;  // backward / forward time
    for (auto [S, D] : attention_shapes()) {
      const int64_t H = 4;
      const double head_flops = 4.0 * S * S * D * double(S + 1) / double(2 * S);
      const int64_t B = std::max<int64_t>(1, int64_t(std::ceil(6e7 / head_flops / H)));
      exec::KernelBench::FwdBwd att = bench_.attention(B, S, H, D);
      LOOM_ASSIGN_OR_RETURN(double tf, timed(att.forward, min_s_ / 8));
      LOOM_ASSIGN_OR_RETURN(double tb, timed(att.backward, min_s_ / 8));
      points.push_back({head_flops, head_flops * double(B * H) / tf});
      ratios.push_back(tb / tf);
    }
    std::sort(ratios.begin(), ratios.end());
    m->att_bwd_ratio = ratios.empty() ? 0 : ratios[ratios.size() / 2];
    std::sort(points.begin(), points.end(), [](const Point& x, const Point& y) { return x.flops < y.flops; });
    for (const Point& pt : points)
      if (m->att_table.empty() || pt.flops / 1e9 > m->att_table.back()["gflop"].get<double>())
        m->att_table.push_back(
            {{"gflop", pt.flops / 1e9}, {"efficiency", std::clamp(pt.flops_per_s / m->peak, 1e-3, 1.0)}});
    return Status::ok();
  }

  // The LM head's GEMMs, tokens x vocabulary x hidden at the shipped
  // families' vocabularies and the hidden sizes users scale them to: a wide
  // output and, in the weight gradient, a reduction over only the
  // micro-batch's tokens, unlike the near-square layer GEMMs of the main
  // table. Same three-way timing and factor-of-4 bands.
  Status head_gemms(Measured* m) {
    std::vector<Point> pts;
    for (auto [rows, V, h] : head_shapes()) {
      exec::KernelBench::GemmRuns g = bench_.gemm(rows, V, h, bench_.cold_set_bytes());
      double total = 0, forward = 0;
      for (const exec::KernelBench::Run* run : {&g.forward, &g.dgrad, &g.wgrad}) {
        LOOM_ASSIGN_OR_RETURN(double t, timed(*run, min_s_ / 8));
        if (run == &g.forward) forward = t;
        total += t;
      }
      pts.push_back({2.0 * rows * V * h, 3 * 2.0 * rows * V * h / total, forward / total});
    }
    m->head_table = band_table(pts, m->peak, 1e-3);
    return Status::ok();
  }

  // The vocabulary cross-entropy at the vocabularies of the shipped model
  // families (byte-level BPE 4096, Llama-2 32,000, GPT-2 50,257, Llama-3
  // 128,256), over enough tokens for ~4M logits (16 MB, beyond the caches as
  // a step's logits are): time per logit, forward and backward apart, the
  // median over the vocabularies.
  Status cross_entropy(Measured* m) {
    std::vector<double> fwd, bwd;
    for (int64_t V : xent_vocabs()) {
      const int64_t N = std::max<int64_t>(8, (int64_t{1} << 22) / V);
      exec::KernelBench::FwdBwd ce = bench_.cross_entropy(N, V);
      LOOM_ASSIGN_OR_RETURN(double tf, timed(ce.forward, min_s_ / 8));
      LOOM_ASSIGN_OR_RETURN(double tb, timed(ce.backward, min_s_ / 8));
      fwd.push_back(tf / double(N * V));
      bwd.push_back(tb / double(N * V));
      m->xent_vocab_min = m->xent_vocab_min ? std::min(m->xent_vocab_min, V) : V;
      m->xent_vocab_max = std::max(m->xent_vocab_max, V);
    }
    std::sort(fwd.begin(), fwd.end());
    std::sort(bwd.begin(), bwd.end());
    m->xent_fwd = fwd[fwd.size() / 2];
    m->xent_bwd = bwd[bwd.size() / 2];
    return Status::ok();
  }

  // Collectives among the local ranks, nccl-tests style, by message size.
  Status collectives(Measured* m) {
    const int n = w_.size();
    m->colls_measured = {{"ranks", n}};
    if (n < 2) return Status::ok();
    auto t_of = [&](auto&& fn) { return time_it(w_, fn, min_s_ / 2, nullptr, sample_s_); };
    for (size_t bytes : collective_sizes()) {
      const size_t count = bytes / sizeof(float), part = count / size_t(n);
      std::vector<float> buf(count * size_t(n), 1.f), out(count * size_t(n), 0.f);
      LOOM_ASSIGN_OR_RETURN(double ar, t_of([&] { return w_.all_reduce(buf.data(), count); }));
      LOOM_ASSIGN_OR_RETURN(double rs, t_of([&] { return w_.reduce_scatter(buf.data(), out.data(), part); }));
      LOOM_ASSIGN_OR_RETURN(double ag, t_of([&] { return w_.all_gather(buf.data(), out.data(), part); }));
      LOOM_ASSIGN_OR_RETURN(double a2a, t_of([&] { return w_.all_to_all(buf.data(), out.data(), part); }));
      // send/recv between ranks 0 and 1 (the others idle at the barrier)
      LOOM_ASSIGN_OR_RETURN(double sr, t_of([&]() -> Status {
        if (w_.rank() == 0) return w_.send(buf.data(), count, 1, 7);
        if (w_.rank() == 1) return w_.recv(out.data(), count, 0, 7);
        return Status::ok();
      }));
      const double S = double(bytes), f = double(n - 1) / n;
      OrderedJson row;
      row["bytes"] = bytes;
      row["all_reduce"] = {{"time_us", ar * 1e6}, {"algbw_gb_per_s", S / ar / 1e9}, {"busbw_gb_per_s", 2 * f * S / ar / 1e9}};
      row["reduce_scatter"] = {{"time_us", rs * 1e6}, {"busbw_gb_per_s", f * S / rs / 1e9}};
      row["all_gather"] = {{"time_us", ag * 1e6}, {"busbw_gb_per_s", f * S / ag / 1e9}};
      row["all_to_all"] = {{"time_us", a2a * 1e6}, {"busbw_gb_per_s", f * S / a2a / 1e9}};
      row["send_recv"] = {{"time_us", sr * 1e6}, {"busbw_gb_per_s", S / sr / 1e9}};
      m->colls.push_back(row);
      for (auto [name, t] : {std::pair<const char*, double>{"all_reduce", ar}, {"reduce_scatter", rs},
                             {"all_gather", ag}, {"all_to_all", a2a}, {"send_recv", sr}})
        m->colls_measured[name].push_back({{"bytes", bytes}, {"time_us", t * 1e6}});
      if (bytes == 4096) m->latency_small = ar / (2.0 * (n - 1));  // per ring step
      m->busbw_large = 2 * f * S / ar;
      m->p2p_bw = std::max(m->p2p_bw, S / sr);  // the link: the best point-to-point rate seen
    }
    return Status::ok();
  }

  exec::Communicator& w_;
  exec::KernelBench& bench_;
  const CalibArgs& a_;
  const double min_s_, sample_s_;
  double worst_spread_ = 0;
  Clock::time_point t0_, last_print_;
  int stage_ = 0;
  const char* stage_name_ = "";
  int calls_ = 0;
  double budget_done_ = 0, budget_total_ = 0;
};

// The measurements as a hardware profile (docs/formats/hwprofile.md).
OrderedJson profile_json(const Measured& m, const exec::KernelBench& bench, const CalibArgs& a, int n) {
  char host[256] = "unknown";
  ::gethostname(host, sizeof host);
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const double ram_gib = double(pages) * double(page) / double(1ull << 30);
  const std::string src = std::string("measured by `loom calibrate` on ") + host + " on " + date + " with " +
                          std::to_string(n) + " ranks x " + std::to_string(a.threads) +
                          " threads running at once (figures per rank); worst interquartile spread of repeated runs " +
                          std::to_string(int(std::lround(100 * m.worst_spread))) + "%";
  // The profile's bandwidth is the best streaming rate seen (kernels running
  // in cache can beat the triad), so bandwidth x efficiency reproduces each
  // measured rate exactly instead of clamping it.
  const double stream_bw = m.stream_bw();
  OrderedJson j;
  j["name"] = a.name;
  j["description"] = std::string("This machine (") + host + ") as " + std::to_string(n) + " MPI ranks of " +
                     std::to_string(a.threads) + " compute thread(s) each, measured by loom calibrate.";
  j["nccl_version"] = "none (MPI over shared memory)";
  const bool gpu = bench.sm_arch() > 0;
  j["accelerator"] = {{"name", gpu ? bench.name() : std::string("cpu rank")}, {"sm_arch", bench.sm_arch()},
                      {"peak_fp32_tflops", (gpu ? m.fp32_peak : m.peak) / 1e12},
                      {"memory_gib", gpu ? bench.memory_bytes() / double(1ull << 30) : ram_gib / n},
                      {"memory_bw_gb_per_s", stream_bw / 1e9},
                      {"memory_bw_efficiency", std::clamp(m.elem_bw / stream_bw, 0.01, 1.0)},
                      {"optimizer_bw_efficiency", std::clamp(m.opt_bw / stream_bw, 0.01, 1.0)},
                      {"gemm_efficiency", m.gemm_table}};
  // GPU GEMMs run in bf16 (the training precision): that is the table's peak.
  if (gpu) j["accelerator"]["peak_bf16_tflops"] = m.peak / 1e12;
  if (!m.head_table.empty()) j["accelerator"]["head_gemm_efficiency"] = m.head_table;
  if (!m.att_table.empty()) {
    j["accelerator"]["attention_efficiency"] = m.att_table;
    j["accelerator"]["attention_backward_ratio"] = m.att_bwd_ratio;
  }
  if (!gpu) j["accelerator"]["cpu_threads"] = a.threads;
  if (m.discard_bw > 0) j["accelerator"]["discard_gb_per_s"] = m.discard_bw / 1e9;
  j["accelerator"]["cross_entropy_fwd_ns_per_logit"] = m.xent_fwd * 1e9;
  j["accelerator"]["cross_entropy_bwd_ns_per_logit"] = m.xent_bwd * 1e9;
  j["accelerator"]["cross_entropy_vocab_measured"] = {m.xent_vocab_min, m.xent_vocab_max};
  j["accelerator"]["source"] = src;
  j["node"] = {{"devices_per_node", n},
               {"fabric", gpu ? "pcie" : "shm"},
               // A ring cannot beat its link: on a loaded machine the send/recv
               // sweep can read slower than the all-reduce did.
               {"intra_bw_gb_per_s", n > 1 ? std::max(m.p2p_bw, m.busbw_large) / 1e9 : m.triad_bw / 1e9},
               {"intra_ring_busbw_gb_per_s", n > 1 ? m.busbw_large / 1e9 : m.triad_bw / 1e9},
               {"intra_latency_us", n > 1 ? m.latency_small * 1e6 : 1.0},
               {"nvls", false},
               {"nvlink_domain_size", 0},
               {"source", src}};
  // The sweep itself: the simulator interpolates it by message size (latency
  // and bandwidth per size range) instead of one latency and one bandwidth.
  if (n > 1) j["node"]["measured_collectives"] = m.colls_measured;
  j["network"] = {{"nics_per_node", 1}, {"nic_bw_gbit_per_s", 10}, {"latency_us", 30}, {"topology", "single host"},
                  {"cpu_vendor", "intel"}, {"source", "not measured: one host"}};
  j["calibration"] = {{"ranks", n}, {"threads_per_rank", a.threads}, {"date", date}, {"host", host},
                      {"gemm_points", m.gemm.size()}, {"triad_gb_per_s", m.triad_bw / 1e9},
                      {"elementwise_gb_per_s", m.elem_bw / 1e9}, {"optimizer_gb_per_s", m.opt_bw / 1e9},
                      {"collectives", m.colls}};
  return j;
}

void print_summary(const Measured& m, int n) {
  const double stream_bw = m.stream_bw();
  std::printf("GEMM peak per rank %.1f GFLOP/s; memory bandwidth per rank %.1f GB/s (triad); elementwise layer "
              "kernels %.1f GB/s (efficiency %.2f); optimizer %.1f GB/s (%.2f)\n",
              m.peak / 1e9, m.triad_bw / 1e9, m.elem_bw / 1e9, std::clamp(m.elem_bw / stream_bw, 0.01, 1.0),
              m.opt_bw / 1e9, std::clamp(m.opt_bw / stream_bw, 0.01, 1.0));
  if (n > 1) {
    std::printf("%12s %12s %12s %12s %12s %12s  (busbw GB/s, nccl-tests convention)\n", "bytes", "all_reduce",
                "reduce_scat", "all_gather", "all_to_all", "send_recv");
    for (const auto& r : m.colls)
      std::printf("%12zu %12.2f %12.2f %12.2f %12.2f %12.2f\n", r["bytes"].get<size_t>(),
                  r["all_reduce"]["busbw_gb_per_s"].get<double>(), r["reduce_scatter"]["busbw_gb_per_s"].get<double>(),
                  r["all_gather"]["busbw_gb_per_s"].get<double>(), r["all_to_all"]["busbw_gb_per_s"].get<double>(),
                  r["send_recv"]["busbw_gb_per_s"].get<double>());
  }
  std::printf("noise: worst interquartile spread of repeated measurements %.0f%%\n", 100 * m.worst_spread);
}

}  // namespace

Result<std::string> measure_profile_json(exec::Communicator& w, exec::KernelBench& bench, const CalibArgs& a,
                                         bool summary, double* worst_spread) {
  const int n = w.size();
  if (bench.sm_arch() > 0 && n > 1)
    return unsupported("--backend cuda measures the kernels of one GPU (its collectives are not measured yet): run "
                       "it without mpirun");
  Measured m;
  LOOM_RETURN_IF_ERROR(Calibrator(w, bench, a).run(&m));
  if (worst_spread) *worst_spread = m.worst_spread;
  if (w.rank() != 0) return std::string();
  const OrderedJson j = profile_json(m, bench, a, n);
  // The profile must load like any other.
  auto check = parse_hw_profile(j.dump(), a.name);
  if (!check.is_ok()) return check.status().with_context("internal: the measured profile");
  if (summary) print_summary(m, n);
  return j.dump(2) + "\n";
}

static int calibrate(exec::Communicator& w, exec::KernelBench& bench, const CalibArgs& a) {
  auto measured = measure_profile_json(w, bench, a, true);
  if (!measured.is_ok()) return fail("calibrate", measured.status());
  if (w.rank() != 0) return 0;
  const std::string& text = *measured;
  if (a.out.empty()) {
    std::printf("%s", text.c_str());
  } else {
    if (Status s = write_text_file(a.out, text); !s.is_ok()) return fail("calibrate", s);
    std::printf("profile written to %s\n", a.out.c_str());
  }
  return 0;
}

int cmd_calibrate(int argc, char** argv) {
  CLI::App app{"Measure this machine into a hardware profile (mpirun -np N loom calibrate --out hwprofiles/x.json).",
               "loom calibrate"};
  CalibArgs a;
  app.add_option("--out", a.out, "write the profile here (default: print it)");
  app.add_option("--name", a.name, "profile name")->capture_default_str();
  app.add_option("--threads", a.threads, "compute threads per rank, as `loom execute --threads`")->capture_default_str();
  app.add_flag("--quick", a.quick, "shorter measurements (tests)");
  bool quiet = false;
  app.add_flag("--quiet", quiet, "no progress line (there is none anyway when stderr is not a terminal)");
  app.add_option("--backend", a.backend, "compute backend whose kernels are measured: cpu (cuda: with the CUDA backend)")
      ->capture_default_str();
  if (int rc = parse_args(app, "calibrate", argc, argv); rc >= 0) return rc;
  if (a.threads < 1) return fail("calibrate", invalid_argument("--threads must be >= 1"));
  // The kernels come from the compute backend, the collectives from the
  // communicator: a CUDA build adds cuBLAS/NCCL behind the same interfaces.
  auto made = exec::make_kernel_bench(a.backend, a.threads);
  if (!made.is_ok()) return fail("calibrate", made.status());
  std::unique_ptr<exec::KernelBench> bench = std::move(made).value();
  // The profile's path is checked before minutes of measuring (core/output_file.h).
  if (!a.out.empty())
    if (Status s = check_output_path(a.out, "--out"); !s.is_ok()) return fail("calibrate", s);
  auto world = exec::open_world(&argc, &argv);
  if (!world.is_ok()) return fail("calibrate", world.status());
  a.progress = !quiet && world->comm().rank() == 0 && isatty(fileno(stderr));
  try {
    return calibrate(world->comm(), *bench, a);
  } catch (const exec::BackendError& e) {  // a failed device call (exec/backend/backend_error.h)
    return fail("calibrate", e.status());
  }
}

}  // namespace loom::cli
