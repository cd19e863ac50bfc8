// open_world(): the communicator over every rank of this launch, whatever
// started the process.
//
//   mpirun / srun with PMI or PMIx  -> MPI, through the plugin libloom_mpi.so
//                                      (mpi_plugin.h) when it is installed
//                                      next to the executable;
//   torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//   MASTER_ADDR, MASTER_PORT), srun without MPI, or an MPI launcher when the
//   plugin is absent (a bundle)     -> TCP rendezvous on rank 0 and collectives
//                                      over TCP (tcp_communicator.h);
//   nothing                         -> one process (self communicator).
//
// LOOM_LAUNCH=mpi|tcp|single forces a choice. The rendezvous address is
// MASTER_ADDR:MASTER_PORT; without MASTER_ADDR it is the first host of a Slurm
// step's node list (when srun started the ranks, whatever MPI layer names
// them), or 127.0.0.1 when every rank is on this node; the port
// defaults to 29500 (torchrun's).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "exec/comm/communicator.h"

namespace loom::exec {

struct WorldOptions {
  double timeout_s = 300;             // a collective waiting this long ends the job
  double rendezvous_timeout_s = 300;  // TCP: every rank must arrive within this
};

class World {
 public:
  World() = default;
  World(std::unique_ptr<Communicator> comm, std::string how, std::function<void()> finalize);
  World(World&&) noexcept;
  World& operator=(World&&) noexcept;
  ~World();  // destroys the communicator, then finalizes MPI if it was used
  Communicator& comm() { return *comm_; }
  // How the ranks were joined, for the start-up line: "MPI (openmpi)",
  // "TCP rendezvous at host:port (torchrun)", "single process".
  const std::string& how() const { return how_; }

 private:
  std::unique_ptr<Communicator> comm_;
  std::string how_;
  std::function<void()> finalize_;
};

Result<World> open_world(int* argc, char*** argv, const WorldOptions& options = {});

// The rendezvous host and port for a TCP launch of `env` (see above), or an
// error naming the variable to set.
struct RendezvousAddress {
  std::string host;
  int port = 29500;
};
Result<RendezvousAddress> rendezvous_address(const LaunchEnv& env);

// The first host of a Slurm node list: "gpu[003-010,012],login1" -> "gpu003",
// "a[1-2]b" -> "a1b".
std::string first_slurm_host(const std::string& nodelist);

// Where open_world() looks for libloom_mpi.so: $LOOM_MPI_PLUGIN, else
// <executable dir>/../lib/loom/libloom_mpi.so.
std::string mpi_plugin_path();

}  // namespace loom::exec
