#include "exec/backend/kernel_profile.h"

#include <algorithm>
#include <cstdio>

#include "core/json_util.h"

namespace loom::exec {

namespace {

// Timed calls held before their timings are read back (a host wait for the
// last one) without a step_done().
constexpr size_t kMaxPending = size_t(1) << 15;

}  // namespace

KernelProfiler::KernelProfiler(Kernels& inner, std::unique_ptr<OpTimer> timer)
    : ObservedKernels(inner), timer_(std::move(timer)) {}

void KernelProfiler::before(const KernelCall&) { timer_->start(); }

void KernelProfiler::after(const KernelCall& call) {
  timer_->stop();
  Totals& t = totals_[size_t(call.op)];
  ++t.calls;
  t.flops += call.flops;
  t.bytes += call.bytes;
  pending_.push_back(call.op);
  if (pending_.size() >= kMaxPending) resolve();
}

void KernelProfiler::resolve() {
  if (pending_.empty()) return;
  const std::vector<double> seconds = timer_->take();
  const size_t n = std::min(seconds.size(), pending_.size());
  for (size_t i = 0; i < n; ++i) totals_[size_t(pending_[i])].seconds += seconds[i];
  pending_.clear();
}

void KernelProfiler::step_done() {
  resolve();
  ++steps_;
}

void KernelProfiler::reset() {
  if (!pending_.empty()) (void)timer_->take();
  pending_.clear();
  totals_ = {};
  steps_ = 0;
}

std::vector<OpProfileRow> KernelProfiler::report() {
  resolve();
  const double steps = double(std::max<int64_t>(1, steps_));
  double total = 0;
  for (const Totals& t : totals_) total += t.seconds;
  std::vector<OpProfileRow> rows;
  for (int i = 0; i < kNumKernelOps; ++i) {
    const Totals& t = totals_[size_t(i)];
    if (t.calls == 0) continue;
    OpProfileRow r;
    r.op = kernel_op_name(KernelOp(i));
    r.calls = t.calls;
    r.seconds = t.seconds;
    r.ms_per_step = 1e3 * t.seconds / steps;
    r.share = total > 0 ? t.seconds / total : 0;
    r.flops = t.flops;
    r.bytes = t.bytes;
    r.tflops = t.seconds > 0 ? t.flops / t.seconds / 1e12 : 0;
    r.gbps = t.seconds > 0 ? t.bytes / t.seconds / 1e9 : 0;
    rows.push_back(std::move(r));
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const OpProfileRow& a, const OpProfileRow& b) { return a.seconds > b.seconds; });
  return rows;
}

Result<KernelProfiler*> install_kernel_profiler(ComputeBackend& backend) {
  auto profiler = std::make_unique<KernelProfiler>(backend.kernels(), backend.make_op_timer());
  KernelProfiler* p = profiler.get();
  LOOM_RETURN_IF_ERROR(backend.wrap_kernels(std::move(profiler)));
  return p;
}

std::string format_op_profile(const std::vector<OpProfileRow>& rows, int64_t steps) {
  const double n = double(std::max<int64_t>(1, steps));
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "per-op profile over %lld step%s (kernel table calls; TFLOP/s for GEMM and "
                "attention, GB/s for the memory-bound ops)\n",
                (long long)steps, steps == 1 ? "" : "s");
  out += line;
  std::snprintf(line, sizeof line, "%-24s %11s %11s %7s %9s %9s\n", "op", "calls/step", "ms/step", "share",
                "TFLOP/s", "GB/s");
  out += line;
  double calls = 0, ms = 0, share = 0;
  for (const OpProfileRow& r : rows) {
    char tf[32] = "-", gb[32] = "-";
    if (r.flops > 0 && r.seconds > 0) std::snprintf(tf, sizeof tf, r.tflops < 10 ? "%.2f" : "%.1f", r.tflops);
    else if (r.bytes > 0 && r.seconds > 0) std::snprintf(gb, sizeof gb, r.gbps < 10 ? "%.2f" : "%.1f", r.gbps);
    std::snprintf(line, sizeof line, "%-24s %11.1f %11.3f %6.1f%% %9s %9s\n", r.op.c_str(), double(r.calls) / n,
                  r.ms_per_step, 100 * r.share, tf, gb);
    out += line;
    calls += double(r.calls) / n;
    ms += r.ms_per_step;
    share += r.share;
  }
  std::snprintf(line, sizeof line, "%-24s %11.1f %11.3f %6.1f%%\n", "total", calls, ms, 100 * share);
  out += line;
  return out;
}

std::string op_profile_json(const std::vector<OpProfileRow>& rows, int64_t steps) {
  OrderedJson j;
  j["steps"] = steps;
  double total_ms = 0;
  for (const OpProfileRow& r : rows) total_ms += r.ms_per_step;
  j["total_ms_per_step"] = total_ms;
  j["ops"] = OrderedJson::array();
  for (const OpProfileRow& r : rows) {
    OrderedJson o;
    o["op"] = r.op;
    o["calls"] = r.calls;
    o["seconds"] = r.seconds;
    o["ms_per_step"] = r.ms_per_step;
    o["share"] = r.share;
    o["flops"] = r.flops;
    o["bytes"] = r.bytes;
    o["tflops"] = r.tflops;
    o["gbps"] = r.gbps;
    j["ops"].push_back(std::move(o));
  }
  return j.dump(2) + "\n";
}

}  // namespace loom::exec
