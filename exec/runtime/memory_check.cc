#include "exec/runtime/memory_check.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "exec/comm/communicator.h"
#include "sim/memory_model.h"
#include "sim/report.h"

namespace loom::exec {

double ranks_memory_bytes(const ModelSpec& model, const TrainSpec& train, const Layout& layout, const HwProfile& hw,
                          const SimOptions& opt, Precision precision, int first_rank, int count, bool host,
                          std::string* detail) {
  TrainSpec t = train;
  t.precision = precision;
  SimOptions o = opt;
  if (host) o.runtime_reserve_bytes = 0;  // no CUDA context / NCCL reserve on a CPU rank
  const MemoryReport report = memory_report(model, hw, layout, t, o);
  const RankGrid grid(layout);
  double need = 0;
  for (int r = first_rank; r < first_rank + count && r < grid.world(); ++r) {
    const int stage = grid.coords(r).pp;
    if (stage >= 0 && stage < int(report.stages.size())) need += report.stages[size_t(stage)].total_bytes();
  }
  if (detail && !report.stages.empty()) {
    const StageMemory& s = report.stages[size_t(report.worst_stage)];
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "stage %d per rank: weights %.3g GB, gradients %.3g GB, optimizer %.3g GB, activations %.3g GB, "
                  "buffers %.3g GB, workspace %.3g GB, overhead %.3g GB",
                  s.stage, s.weights_bytes / 1e9, s.grads_bytes / 1e9, s.optimizer_bytes / 1e9,
                  s.activations_bytes / 1e9, s.comm_buffer_bytes / 1e9, (s.workspace_bytes + s.inputs_bytes) / 1e9,
                  s.overhead_bytes / 1e9);
    *detail = buf;
  }
  return need;
}

Status check_memory_fits(double need_bytes, double available_bytes, int ranks, const std::string& where,
                         const std::string& detail) {
  if (need_bytes <= available_bytes) return Status::ok();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "the model needs about %.3g GB on %d rank%s (the simulator's memory model) but %s is %.3g GB; "
                "nothing was allocated. Scale the model down (--scale), spread it over more ranks or hosts "
                "(tp, pp, ZeRO), or free memory",
                need_bytes / 1e9, ranks, ranks == 1 ? "" : "s", where.c_str(), available_bytes / 1e9);
  std::string msg = buf;
  if (!detail.empty()) msg += " (" + detail + ")";
  return unsupported(msg);
}

Result<double> host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string key;
    double kib = 0;
    if (ss >> key >> kib && key == "MemAvailable:") return kib * 1024.0;
  }
  return not_found("/proc/meminfo: no MemAvailable line");
}

namespace {

SimOptions plan_sim_options(const Plan& plan) {
  SimOptions opt;
  if (!plan.sim_options_json.empty()) {
    auto parsed = parse_sim_options(plan.sim_options_json);
    if (parsed.is_ok()) opt = *parsed;
  }
  return opt;
}

}  // namespace

double device_available_bytes(double free_bytes, double total_bytes, double headroom) {
  if (!(total_bytes > 0)) return free_bytes;
  return std::min(free_bytes, total_bytes * usable_memory_fraction(headroom));
}

Status check_device_memory(const Plan& plan, const ModelSpec& model, const TrainSpec& train, const Layout& layout,
                           int rank, Precision precision, size_t free_bytes, size_t total_bytes,
                           const std::string& where) {
  std::string detail;
  const SimOptions opt = plan_sim_options(plan);
  const double need = ranks_memory_bytes(model, train, layout, plan.hw, opt, precision, rank, 1, false, &detail);
  const double available = device_available_bytes(double(free_bytes), double(total_bytes), opt.memory_headroom);
  std::string what = where;
  if (available < double(free_bytes)) {
    char buf[96];
    std::snprintf(buf, sizeof buf, ", at most %.0f%% of the device (the plan's --memory-headroom %.3g),",
                  100 * (1 - opt.memory_headroom), opt.memory_headroom);
    what += buf;
  }
  return check_memory_fits(need, available, 1, what, detail);
}

Status check_host_memory(const Plan& plan, const ModelSpec& model, const TrainSpec& train, const Layout& layout,
                         int rank) {
  auto avail = host_available_bytes();
  if (!avail.is_ok()) return Status::ok();  // not Linux: nothing to compare with
  const LaunchEnv env = detect_launch_env();
  const int local = std::max(1, env.local_world);
  const int first = rank / local * local;  // launchers place consecutive ranks on a host
  std::string detail;
  const double need = ranks_memory_bytes(model, train, layout, plan.hw, plan_sim_options(plan), Precision::kFp32,
                                         first, local, true, &detail);
  return check_memory_fits(need, *avail, local, "this host's available memory (MemAvailable)", detail);
}

}  // namespace loom::exec
