// The TCP backend of Communicator: host (CPU) buffers over plain TCP, for
// nodes without MPI (the relocatable bundle). Launched the torchrun way: a
// launcher sets RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (or Slurm's or
// Open MPI's variables, detect_launch_env()), rank 0 serves a small
// rendezvous store on MASTER_ADDR:MASTER_PORT, and the ranks build a full
// mesh of connections (tcp_store.h, tcp_transport.h). The NCCL communicator
// bootstraps over it (broadcast_bytes of the unique id) like over MPI.
//
// Semantics are MpiCommunicator's: collectives in the same order on every
// member, send/recv matched by (peer, tag) in order, non-blocking forms that
// progress on their own (a worker thread per communicator runs its
// collectives in call order, blocking ones included), split with
// MPI_Comm_split semantics. Collectives give every rank bit-identical results
// (each element is reduced in one fixed order, then copied).
// Errors: a call waiting longer than timeout_s returns kTimeout naming the
// communicator, the call and the peer waited for; a peer that died (or
// destroyed or abandoned the communicator) fails pending and later calls at
// once with kRemoteError naming it. After a failed or timed-out collective
// the communicator is unusable (its calls, and receive requests still
// pending on it, return the same error; the other members are told, so they
// fail too); a timed-out recv leaves it usable.
#pragma once

#include <memory>
#include <string>

#include "exec/comm/communicator.h"

namespace loom::exec {

struct TcpOptions {
  int rank = 0;
  int world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // A call (or CommRequest::wait()) waiting this long returns kTimeout naming
  // the communicator, the call and the peer; 0 disables the watchdog.
  double timeout_s = 300;
  // Every rank must arrive at the rendezvous (and connect to the others)
  // within this; rank 0 then names the missing ranks to everybody.
  double rendezvous_timeout_s = 120;
  // Optional: ranks with different job ids refuse to form a job (guards a
  // MASTER_PORT shared by two jobs); e.g. SLURM_JOB_ID or TORCHELASTIC_RUN_ID.
  std::string job_id;
};

// Rendezvous, mesh, and the communicator over every rank, named "world".
// Collective over the job (every rank calls it with the same world,
// master_addr, master_port). A world of 1 opens no socket.
Result<std::unique_ptr<Communicator>> tcp_world(const TcpOptions& options);

}  // namespace loom::exec
