// What the multi-rank test programs share: main()'s start (the MPI world and
// the sample corpus as byte tokens: argv[1], else the source tree's copy) and
// training a config for its per-step losses.
#pragma once

#include <cstdio>
#include <memory>
#include <vector>

#include "exec/comm/mpi_communicator.h"
#include "exec/runtime/token_source.h"
#include "exec/runtime/trainer.h"

namespace loom::exec {

struct MpiTestSetup {
  std::unique_ptr<Communicator> world;
  std::unique_ptr<TokenSource> data;
};

// Prints what failed and returns nullopt-like (world null) on an error.
inline MpiTestSetup mpi_test_setup(int* argc, char*** argv, double collective_timeout_s) {
  MpiTestSetup s;
  auto world = mpi_world(argc, argv, MpiOptions{collective_timeout_s});
  if (!world.is_ok()) {
    std::fprintf(stderr, "%s\n", world.status().to_string().c_str());
    return s;
  }
  const char* path = *argc > 1 ? (*argv)[1] : LOOM_SOURCE_DIR "/data/tinyshakespeare.txt";
  auto data = open_byte_text(path, 1234);
  if (!data.is_ok()) {
    std::fprintf(stderr, "%s\n", data.status().to_string().c_str());
    return s;
  }
  s.world = std::move(*world);
  s.data = std::move(*data);
  return s;
}

// Per-step losses of `cfg` on `comm`; *peak_bytes gets the rank's last peak.
inline Result<std::vector<double>> train_losses(Communicator* comm, const TrainerConfig& cfg, TokenSource* data,
                                                double* peak_bytes = nullptr) {
  LOOM_ASSIGN_OR_RETURN(auto t, Trainer::create(comm, cfg, data));
  std::vector<double> losses;
  for (int64_t s = 0; s < cfg.train.steps; ++s) {
    LOOM_ASSIGN_OR_RETURN(StepResult r, t->step(s));
    losses.push_back(r.loss);
    if (peak_bytes) *peak_bytes = double(r.peak_memory_bytes);
  }
  return losses;
}

}  // namespace loom::exec
