// One HDF5 file holding a list of tensor slices (one rank's part of a
// checkpoint). Serial HDF5 C API; every call here holds one process-wide
// mutex, so simulated ranks on threads may use it concurrently.
//
// Layout (docs/formats/checkpoint.md):
//   /<escaped global name>   float32 dataset of shape `extent` (1-D or 2-D), row-major
//     attrs: global_shape (int64[rank]), offset (int64[rank]), extent (int64[rank]),
//            dtype ("float32", a fixed-length string)
// All datasets sit in the root group. The global name is escaped so that it
// is one link name: '%' -> "%25", '/' -> "%2F" (so "exp_avg/layers.0.attn.q.weight"
// is stored as "exp_avg%2Flayers.0.attn.q.weight"); every other byte is kept.
//
// Errors: HDF5's automatic error printing is turned off; a failing HDF5 call
// becomes a kIoError Status naming the file, the call, the Loom file/line and
// the innermost messages of HDF5's error stack (which include errno text
// such as "File too large" or "No space left on device").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/checkpoint/checkpoint.h"

namespace loom::ckpt {

// What a dataset in a slice file describes (everything but the data).
struct SliceInfo {
  std::string name;  // unescaped global name
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offset;
  std::vector<int64_t> extent;
};

std::string escape_h5_name(const std::string& name);
std::string unescape_h5_name(const std::string& link);

// Creates (truncates) `path` and writes every slice. Checks that each slice
// is 1-D/2-D, lies inside its global shape and holds prod(extent) values.
// Does not fsync or rename: the caller owns durability.
Status write_h5_slices(const std::string& path, const std::vector<TensorSlice>& slices);

// Lists the slices stored in `path`, in HDF5 link (name) order.
Result<std::vector<SliceInfo>> list_h5_slices(const std::string& path);

// Reads the sub-rectangle [local_offset, local_offset + count) of slice
// `name` (coordinates relative to the slice) into `out`, row-major,
// prod(count) values.
Status read_h5_slice_region(const std::string& path, const std::string& name,
                            const std::vector<int64_t>& local_offset, const std::vector<int64_t>& count,
                            float* out);

}  // namespace loom::ckpt
