// The executor's memory check (library loom_exec_run, which links the
// simulator for it): before a run allocates anything, the plan's (possibly
// --scale'd) model under its layout is costed with the simulator's memory
// model (sim/memory_model.h) and compared with what the machine has:
// MemAvailable of /proc/meminfo for the ranks of this host on the CPU
// backend, the device's free memory for a CUDA rank (exec/runtime/devices.h
// device_memory). With Trainer::create's own checks (layout, tags) this is
// the "can it run" answer given before the first allocation.
#pragma once

#include <string>

#include "core/hw_profile.h"
#include "core/plan.h"
#include "core/layout.h"
#include "core/model_spec.h"
#include "core/status.h"
#include "core/train_spec.h"
#include "sim/sim_options.h"

namespace loom::exec {

// Bytes world ranks [first_rank, first_rank + count) need together: each
// rank's pipeline stage's peak in the memory model, in `precision`; without
// the accelerator runtime reserve when `host` (CPU ranks have no CUDA context).
// `detail` gets the worst stage's breakdown.
double ranks_memory_bytes(const ModelSpec& model, const TrainSpec& train, const Layout& layout, const HwProfile& hw,
                          const SimOptions& opt, Precision precision, int first_rank, int count, bool host,
                          std::string* detail);

// kUnsupported "... needs N GB ... but only M GB are available ..." when the
// need exceeds `available_bytes`; `where` names the memory ("this host's
// MemAvailable", "GPU 0's free memory").
Status check_memory_fits(double need_bytes, double available_bytes, int ranks, const std::string& where,
                         const std::string& detail);

// MemAvailable from /proc/meminfo in bytes; kNotFound where it cannot be read.
Result<double> host_available_bytes();

// What a device offers a run whose plan keeps `headroom` of each device free
// (SimOptions::memory_headroom): its free bytes, and at most (1 - headroom)
// of its total, as the plan's fit verdict assumed.
double device_available_bytes(double free_bytes, double total_bytes, double headroom);

// The checks for `loom execute` on this rank, before it allocates: the model,
// train and layout as it will run them (after --scale), the plan's hardware
// and simulator options. Host: this host's ranks (the launcher's local_world
// ranks around `rank`) against MemAvailable (ok where it cannot be read).
// Device: this rank's stage in `precision` against the device's free bytes,
// less the plan's memory headroom of its `total_bytes`.
Status check_host_memory(const Plan& plan, const ModelSpec& model, const TrainSpec& train, const Layout& layout,
                         int rank);
Status check_device_memory(const Plan& plan, const ModelSpec& model, const TrainSpec& train, const Layout& layout,
                           int rank, Precision precision, size_t free_bytes, size_t total_bytes,
                           const std::string& where);

}  // namespace loom::exec
