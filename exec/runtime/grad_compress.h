// The compressed data-parallel gradient reduction (`loom plan --grad-reduce
// bf16|fp8`): the collectives of exec/comm/communicator.h on fp32 gradients,
// with the bytes on the wire packed (exec/backend/grad_format.h) and every
// received piece summed in fp32, so rounding does not compound across ranks
// as it would in a ring whose partial sums are re-rounded at every hop
// (NCCL's bf16 reduce-scatter; Megatron's --grad-reduce-in-bf16).
//
//   reduce-scatter: each rank packs the blocks the others own and exchanges
//     them in one all-to-all; the owner sums its own block (fp32, never
//     rounded) and the others' unpacked blocks, in rank order (deterministic).
//   all-reduce: that reduce-scatter, then the owner packs its reduced block,
//     all-gathers the packed blocks, and every rank (the owner too) unpacks
//     all of them, so the replicas stay bit-identical.
//
// The wire carries grad_packed_bytes(format, shard) per block (fp8: 4 bytes of
// amax per block of a bucket), rounded up to whole floats. The buffers live in
// the request and are charged to the comm_buffers memory class.
#pragma once

#include <memory>

#include "core/status.h"
#include "exec/backend/compute_backend.h"
#include "exec/backend/grad_format.h"
#include "exec/comm/communicator.h"

namespace loom::exec {

class GradCompressor {
 public:
  GradCompressor(ComputeBackend* backend, Communicator* dp, GradFormat format)
      : backend_(backend), dp_(dp), format_(format) {}
  // recv(shard) = this rank's block of the sum over ranks of send(shard * size)
  // (Communicator::ireduce_scatter's contract). `send` stays untouched.
  Result<std::unique_ptr<CommRequest>> ireduce_scatter(const float* send, float* recv, size_t shard);
  // buf(shard * size) = the sum over ranks, packed once after the reduction.
  Result<std::unique_ptr<CommRequest>> iall_reduce(float* buf, size_t shard);

 private:
  ComputeBackend* backend_;
  Communicator* dp_;
  GradFormat format_;
};

}  // namespace loom::exec
