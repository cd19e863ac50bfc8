#include "exec/backend/op_timer.h"

#include <chrono>

namespace loom::exec {

namespace {

class HostOpTimer final : public OpTimer {
 public:
  void start() override { t0_ = std::chrono::steady_clock::now(); }
  void stop() override {
    elapsed_.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  }
  std::vector<double> take() override {
    std::vector<double> out;
    out.swap(elapsed_);
    return out;
  }

 private:
  std::chrono::steady_clock::time_point t0_{};
  std::vector<double> elapsed_;
};

}  // namespace

std::unique_ptr<OpTimer> make_host_op_timer() { return std::make_unique<HostOpTimer>(); }

}  // namespace loom::exec
