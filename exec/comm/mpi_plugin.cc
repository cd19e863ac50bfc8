// libloom_mpi.so: exports the MPI communicator's entry points (mpi_plugin.h).
#include "exec/comm/mpi_plugin.h"

extern "C" __attribute__((visibility("default"))) const loom::exec::MpiPlugin* loom_mpi_plugin() {
  static const loom::exec::MpiPlugin plugin{loom::exec::kLoomMpiPluginAbi, &loom::exec::mpi_world,
                                            &loom::exec::mpi_finalize};
  return &plugin;
}
