// Checkpoint rank files (exec/checkpoint/h5_slices.h): the input is one
// rank's HDF5 slice file. Slices it lists are checked for sense and read
// back whole, as CheckpointReader does. HDF5 itself parses the container; what
// is fuzzed here is Loom's use of what it returns.
#include <algorithm>

#include "exec/checkpoint/h5_slices.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;
using namespace loom::ckpt;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (loom::fuzz::seed_dir()) {
    const std::string path = loom::fuzz::scratch_dir() + "/rank.h5";
    TensorSlice w{"layers.0.w", {4, 3}, {2, 0}, {2, 3}, {1, 2, 3, 4, 5, 6}};
    TensorSlice b{"exp_avg/b", {5}, {1}, {3}, {0.5f, 1.5f, 2.5f}};
    if (!write_h5_slices(path, {w, b}).is_ok()) std::abort();
    loom::fuzz::write_seed("rank_0.h5", loom::fuzz::read_file(path));
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = loom::fuzz::scratch_dir() + "/rank.h5";
  loom::fuzz::write_file(path, data, size);
  auto slices = list_h5_slices(path);
  if (!slices.is_ok()) {
    FUZZ_CHECK(!slices.status().message().empty(), "an error without a message");
    return 0;
  }
  for (const SliceInfo& s : *slices) {
    const size_t rank = s.global_shape.size();
    FUZZ_CHECK(rank == 1 || rank == 2, s.name + ": a slice of rank " + std::to_string(rank) + " was listed");
    int64_t n = 1;
    for (size_t d = 0; d < rank; ++d) {
      FUZZ_CHECK(s.offset[d] >= 0 && s.extent[d] >= 0 && s.offset[d] + s.extent[d] <= s.global_shape[d],
                 s.name + ": a slice outside its global shape was listed");
      n *= s.extent[d];
    }
    if (n > (1 << 20)) continue;
    std::vector<float> out(size_t(std::max<int64_t>(n, 1)));
    (void)read_h5_slice_region(path, s.name, std::vector<int64_t>(rank, 0), s.extent, out.data());
  }
  return 0;
}
