#include "exec/runtime/grad_compress.h"

#include <functional>
#include <utility>
#include <vector>

#include "exec/backend/memory_ledger.h"

namespace loom::exec {

namespace {

// Floats one packed block occupies on the wire.
size_t block_floats(GradFormat f, size_t shard) {
  return (size_t(grad_packed_bytes(f, int64_t(shard))) + sizeof(float) - 1) / sizeof(float);
}

uint8_t* bytes(const DeviceBuffer& b, size_t float_offset) { return reinterpret_cast<uint8_t*>(b.f32() + float_offset); }

// A collective in flight and what completes it: test() asks the transport,
// wait() waits for it and then runs `finish` (the fp32 sums, or a second
// collective), once.
class CompressedRequest final : public CommRequest {
 public:
  CompressedRequest(std::unique_ptr<CommRequest> inner, std::vector<DeviceBuffer> buffers,
                    std::function<Status()> finish)
      : inner_(std::move(inner)), buffers_(std::move(buffers)), finish_(std::move(finish)) {}
  Status wait() override {
    if (done_) return status_;
    done_ = true;
    status_ = inner_->wait();
    if (status_.is_ok()) status_ = finish_();
    buffers_.clear();
    return status_;
  }
  bool test() override { return done_ || inner_->test(); }

 private:
  std::unique_ptr<CommRequest> inner_;
  std::vector<DeviceBuffer> buffers_;
  std::function<Status()> finish_;
  bool done_ = false;
  Status status_ = Status::ok();
};

}  // namespace

Result<std::unique_ptr<CommRequest>> GradCompressor::ireduce_scatter(const float* send, float* recv, size_t shard) {
  const int n = dp_->size(), me = dp_->rank();
  const size_t bf = block_floats(format_, shard);
  MemoryClassScope charge(MemoryClass::kCommBuffers);
  DeviceBuffer out(backend_, size_t(n) * bf * sizeof(float));  // zeroed: this rank's own block is never read
  auto in = DeviceBuffer::uninitialized(backend_, size_t(n) * bf * sizeof(float));
  Kernels& k = backend_->kernels();
  for (int p = 0; p < n; ++p)
    if (p != me) k.grad_pack({send + size_t(p) * shard, bytes(out, size_t(p) * bf), int64_t(shard), format_});
  LOOM_ASSIGN_OR_RETURN(auto req, dp_->iall_to_all(out.f32(), in.f32(), bf));
  const float* own = send + size_t(me) * shard;
  const float* in_base = in.f32();
  auto finish = [this, n, me, bf, shard, own, recv, in_base]() {
    if (recv != own) backend_->copy(recv, own, shard * sizeof(float));
    Kernels& kk = backend_->kernels();
    for (int p = 0; p < n; ++p)
      if (p != me)
        kk.grad_unpack({reinterpret_cast<const uint8_t*>(in_base + size_t(p) * bf), recv, int64_t(shard), format_,
                        /*accumulate=*/true});
    return Status::ok();
  };
  std::vector<DeviceBuffer> held;
  held.push_back(std::move(out));
  held.push_back(std::move(in));
  return std::unique_ptr<CommRequest>(std::make_unique<CompressedRequest>(std::move(req), std::move(held), finish));
}

Result<std::unique_ptr<CommRequest>> GradCompressor::iall_reduce(float* buf, size_t shard) {
  const int n = dp_->size(), me = dp_->rank();
  const size_t bf = block_floats(format_, shard);
  // Reduce-scatter in place: this rank's block of `buf` becomes the sum.
  float* own = buf + size_t(me) * shard;
  LOOM_ASSIGN_OR_RETURN(auto reduce_scatter, ireduce_scatter(buf, own, shard));
  std::shared_ptr<CommRequest> reduce(std::move(reduce_scatter));
  auto finish = [this, n, bf, shard, buf, own, reduce]() {
    LOOM_RETURN_IF_ERROR(reduce->wait());
    MemoryClassScope charge(MemoryClass::kCommBuffers);
    auto mine = DeviceBuffer::uninitialized(backend_, bf * sizeof(float));
    auto all = DeviceBuffer::uninitialized(backend_, size_t(n) * bf * sizeof(float));
    Kernels& k = backend_->kernels();
    k.grad_pack({own, bytes(mine, 0), int64_t(shard), format_});
    LOOM_ASSIGN_OR_RETURN(auto gather, dp_->iall_gather(mine.f32(), all.f32(), bf));
    LOOM_RETURN_IF_ERROR(gather->wait());
    for (int p = 0; p < n; ++p)
      k.grad_unpack({bytes(all, size_t(p) * bf), buf + size_t(p) * shard, int64_t(shard), format_,
                     /*accumulate=*/false});
    return Status::ok();
  };
  // The reduce-scatter's request is the one tested; completing it runs the gather.
  class Chained final : public CommRequest {
   public:
    Chained(std::function<bool()> test, std::function<Status()> finish)
        : test_(std::move(test)), finish_(std::move(finish)) {}
    Status wait() override {
      if (!done_) {
        done_ = true;
        status_ = finish_();
      }
      return status_;
    }
    bool test() override { return done_ || test_(); }

   private:
    std::function<bool()> test_;
    std::function<Status()> finish_;
    bool done_ = false;
    Status status_ = Status::ok();
  };
  return std::unique_ptr<CommRequest>(std::make_unique<Chained>([reduce] { return reduce->test(); }, std::move(finish)));
}

}  // namespace loom::exec
