// Fault injection for the mpi_dead_rank and mpi_stuck_rank tests.
//   dead_rank kill|stuck [timeout_s]
// Rank 1 kills itself with SIGKILL (kill) or sleeps without answering (stuck)
// while every other rank waits in an all_reduce. Expected: the job ends with a
// non-zero exit code and a message within seconds, either because mpirun
// notices the dead process and kills the job, or because the watchdog returns
// kTimeout and the rank calls abort(). Exit code 0 means the all_reduce
// "completed" without rank 1: a bug the test reports.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "exec/comm/mpi_communicator.h"

using namespace loom;
using namespace loom::exec;

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "kill";
  double timeout_s = argc > 2 ? std::atof(argv[2]) : 10;
  if (mode != "kill" && mode != "stuck") {
    std::fprintf(stderr, "usage: dead_rank kill|stuck [timeout_s]\n");
    return 2;
  }
  auto world = mpi_world(&argc, &argv, MpiOptions{.timeout_s = timeout_s});
  if (!world.is_ok()) {
    std::fprintf(stderr, "dead_rank: %s\n", world.status().to_string().c_str());
    return 2;
  }
  Communicator& w = **world;
  if (w.size() < 2) {
    std::fprintf(stderr, "dead_rank: needs at least 2 ranks, got %d\n", w.size());
    return 2;
  }
  Status s = w.barrier();
  if (!s.is_ok()) w.abort(2, s.to_string());

  if (w.rank() == 1) {
    // Let the others enter the all_reduce first.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (mode == "kill") {
      std::fprintf(stderr, "dead_rank: rank 1 kills itself (SIGKILL)\n");
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
    std::fprintf(stderr, "dead_rank: rank 1 stops answering\n");
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::seconds(600));
    return 0;
  }

  std::vector<float> buf(1 << 20, 1.0f);  // (1M) floats
  auto t0 = std::chrono::steady_clock::now();
  s = w.all_reduce(buf.data(), buf.size());
  double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!s.is_ok()) w.abort(3, s.to_string() + " (waited " + std::to_string(waited_s) + " s)");

  std::printf("dead_rank: rank %d: all_reduce completed without rank 1 (bug)\n", w.rank());
  world->reset();
  mpi_finalize();
  return 0;
}
