// The MPI communicator as a run-time plugin (libloom_mpi.so), so `loom` itself
// never links Open MPI: the same binary runs under mpirun (the plugin loads the
// node's MPI), under torchrun-style launchers (TCP rendezvous) and alone, and a
// bundle for a node without Open MPI simply leaves the plugin out.
//
// The plugin is built from this tree with the same compiler as `loom`, so the
// table below passes C++ types; kLoomMpiPluginAbi guards against a stale file.
#pragma once

#include <memory>

#include "exec/comm/mpi_communicator.h"

namespace loom::exec {

inline constexpr int kLoomMpiPluginAbi = 1;

struct MpiPlugin {
  int abi = kLoomMpiPluginAbi;
  Result<std::unique_ptr<Communicator>> (*world)(int* argc, char*** argv, const MpiOptions& options) = nullptr;
  void (*finalize)() = nullptr;
};

}  // namespace loom::exec

// The plugin's one exported symbol.
extern "C" const loom::exec::MpiPlugin* loom_mpi_plugin();
