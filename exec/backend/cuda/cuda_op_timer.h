// The CUDA OpTimer (exec/backend/op_timer.h): each start() / stop() records
// an event on `stream` from a pool that grows to the number of pairs between
// take()s and is reused after; take() waits for the last event recorded and
// reads every pair's elapsed time (about half a microsecond resolution).
// Events are created on the current device.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "exec/backend/op_timer.h"

namespace loom::exec {

std::unique_ptr<OpTimer> make_cuda_op_timer(cudaStream_t stream);

}  // namespace loom::exec
