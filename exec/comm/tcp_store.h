// The rendezvous of the TCP communicator: a small store on rank 0.
//
// Rank 0 listens on MASTER_ADDR:MASTER_PORT. Every other rank connects to it
// (retrying until the rendezvous timeout: rank 0 may start later), opens its
// own listening socket on an ephemeral port of the interface that reaches
// rank 0, and registers (rank, world, job id, host, port). When every rank
// has arrived, rank 0 sends each the table of addresses and a job nonce (it
// authenticates the connections of the mesh, tcp_transport.h), then closes the
// store. Rank 0 rejects a wrong world size or a duplicate rank at once
// (every arrived rank gets the error); a process with another job id (of
// another job that found the port taken) gets the error alone and this job
// goes on. At the rendezvous timeout rank 0 names the ranks that never
// arrived (and any process turned away), to itself and to every arrived rank
// (whose own wait lasts a little longer, so they hear it from rank 0).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/comm/tcp_socket.h"

namespace loom::exec::tcp {

struct RendezvousOptions {
  int rank = 0;
  int world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double timeout_s = 120;  // every rank must arrive within this
  std::string job_id;      // "" matches ""; else every rank must pass the same
};

struct PeerAddress {
  std::string host;  // numeric address
  int port = 0;
  std::string to_string() const { return host_port(host, port); }
};

struct Rendezvous {
  uint64_t job_nonce = 0;          // chosen by rank 0, the same on every rank
  std::vector<PeerAddress> peers;  // every rank's listening address, by rank
  Fd listener;                     // this rank's listening socket (peers[rank])
};

// The rendezvous of this process (rank 0 serves the store). Errors name the
// problem and the fix; kTimeout when a rank did not arrive or the store was
// not reachable in time.
Result<Rendezvous> rendezvous(const RendezvousOptions& options);

// "1, 3, 5-9": sorted ranks as ranges.
std::string rank_list(const std::vector<int>& ranks);

}  // namespace loom::exec::tcp
