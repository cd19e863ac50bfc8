#include "exec/backend/cuda/cuda_op_timer.h"

#include <cstdint>
#include <vector>

namespace loom::exec {

namespace {

// A failed event call leaves a (non-sticky) error behind that the kernel
// table's status() would then report as its own: clear it; a sticky device
// error stays and surfaces there anyway.
bool ok(cudaError_t e) {
  if (e == cudaSuccess) return true;
  (void)cudaGetLastError();
  return false;
}

class CudaOpTimer final : public OpTimer {
 public:
  explicit CudaOpTimer(cudaStream_t stream) : stream_(stream) {}
  ~CudaOpTimer() override {
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
  }
  CudaOpTimer(const CudaOpTimer&) = delete;
  CudaOpTimer& operator=(const CudaOpTimer&) = delete;

  void start() override { record(); }
  void stop() override { record(); }

  std::vector<double> take() override {
    const size_t pairs = used_ / 2;
    std::vector<double> out(pairs, 0.0);
    // Events on one stream complete in order: waiting for the last recorded
    // one waits for them all.
    int64_t last = int64_t(used_) - 1;
    while (last >= 0 && !recorded_[size_t(last)]) --last;
    if (last >= 0 && ok(cudaEventSynchronize(events_[size_t(last)]))) {
      for (size_t p = 0; p < pairs; ++p) {
        const size_t a = 2 * p, b = a + 1;
        float ms = 0;
        if (recorded_[a] && recorded_[b] && ok(cudaEventElapsedTime(&ms, events_[a], events_[b])))
          out[p] = double(ms) * 1e-3;
      }
    }
    used_ = 0;
    return out;
  }

 private:
  void record() {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      if (!ok(cudaEventCreate(&e))) e = nullptr;
      events_.push_back(e);
      recorded_.push_back(0);
    }
    cudaEvent_t e = events_[used_];
    recorded_[used_] = e && ok(cudaEventRecord(e, stream_)) ? 1 : 0;
    ++used_;
  }

  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;  // the pool; [0, used_) recorded since the last take()
  std::vector<uint8_t> recorded_;    // whether events_[i]'s last record succeeded
  size_t used_ = 0;
};

}  // namespace

std::unique_ptr<OpTimer> make_cuda_op_timer(cudaStream_t stream) { return std::make_unique<CudaOpTimer>(stream); }

}  // namespace loom::exec
