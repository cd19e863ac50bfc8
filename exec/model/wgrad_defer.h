// Weight-gradient GEMMs a zero-bubble backward leaves for a later W
// (DualPipeV: core/program.h Op::defers_wgrad, OpKind::kWeightGrad), with the
// tensors they read, which stay alive until they run.
#pragma once

#include <cstdint>
#include <vector>

#include "exec/backend/compute_backend.h"
#include "exec/backend/kernels.h"

namespace loom::exec {

struct DeferredWgrad {
  std::vector<Gemm> gemms;                      // each accumulates into its weight's gradient (beta 1)
  std::vector<std::vector<GemmGroup>> grouped;  // grouped weight-gradient GEMMs (A^T B, beta 1): MoE experts
  std::vector<DeviceBuffer> keep;               // what they read

  void hold(DeviceBuffer& b) {
    if (!b.empty()) keep.push_back(std::move(b));
  }
  // Runs them in the order the backward met them.
  void run(Kernels& k) const {
    for (const Gemm& g : gemms) k.gemm(g);
    for (const std::vector<GemmGroup>& g : grouped)
      k.grouped_gemm({true, false, 1.f, 1.f, g.data(), int64_t(g.size())});
  }
};

}  // namespace loom::exec
