// The MPI backend of Communicator (OpenMPI from Debian). Only this header and
// its .cc include <mpi.h>.
#pragma once

#include <climits>
#include <cstddef>
#include <memory>

#include "exec/comm/communicator.h"

namespace loom::exec {

struct MpiOptions {
  // A call (or CommRequest::wait()) that has not completed after this long
  // returns kTimeout naming the communicator, the call and the timeout (a peer
  // is presumed dead or stuck); the caller then ends the job with abort().
  // After a timed-out collective the communicator is unusable (its calls
  // return the same error); a timed-out recv is cancelled and leaves it
  // usable. 0 disables the watchdog.
  double timeout_s = 300;
  // Largest element count of one MPI call (MPI counts are int; for
  // reduce_scatter / all_gather / all_to_all, summed over the ranks): larger
  // buffers are split into several calls. Lowered only by tests, to exercise
  // the splitting with small buffers. Clamped to [1, INT_MAX].
  size_t max_count_per_call = INT_MAX;
};

// Initializes MPI (MPI_THREAD_FUNNELED or better; once per process) and
// returns a communicator over every rank, named "world" (a duplicate of
// MPI_COMM_WORLD, so Loom's traffic never matches the application's).
// Collective over MPI_COMM_WORLD; may be called again to get another world
// communicator with other options. Errors are returned as MPI_ERRORS_RETURN
// codes converted to Status with file/line, never a crash inside MPI.
Result<std::unique_ptr<Communicator>> mpi_world(int* argc, char*** argv, const MpiOptions& options = {});
// Finalizes MPI (after every communicator is destroyed).
void mpi_finalize();
// True while MPI can be used by this process (it cannot be restarted once
// finalized).
bool mpi_available();

}  // namespace loom::exec
