// Checkpoints: sharded, atomic, optionally asynchronous HDF5 checkpoints
// (docs/formats/checkpoint.md).
//
//   DIR/step_000100/model_weights/rank_00003.h5     one dataset per tensor slice
//   DIR/step_000100/optimizer_state/rank_00003.h5
//   DIR/step_000100/training_state/rank_00003.json
//   DIR/step_000100/metadata.json                    written last: the commit marker
//   DIR/latest                                       "step_000100", replaced atomically
//
// Tensors are stored under their GLOBAL name with the global shape and the
// slice's offset, so nothing about the layout is baked into names; a reader
// assembles any rectangle of a global tensor from whichever slices hold it,
// which is what loading under another layout needs.
//
// Ranks coordinate through the file system (per-rank "done" files in the
// temporary directory), not through the communicator, so the background
// writer never makes MPI calls. One node or a shared file system.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace loom::ckpt {

struct TensorSlice {
  std::string name;                   // global name, e.g. "layers.3.attn.q.weight"
  std::vector<int64_t> global_shape;  // 1-D or 2-D
  std::vector<int64_t> offset;        // where the slice starts in each dim
  std::vector<int64_t> extent;        // its size in each dim
  std::vector<float> data;            // prod(extent) values, row-major
};

struct SaveRequest {
  int64_t step = 0;                   // the step the state is AFTER (resume continues at step)
  bool light = false;                 // training state only (no model / optimizer files)
  std::vector<TensorSlice> model;     // -> model_weights/
  std::vector<TensorSlice> optimizer; // -> optimizer_state/ (names like "exp_avg/<param>")
  std::string training_state_json;    // -> training_state/ (this rank's)
};

struct CheckpointOptions {
  std::string dir;
  bool async = true;     // write on a background thread while training continues
  int keep_last = 3;     // full checkpoints kept (older ones deleted after a commit); 0 = all
  int keep_every = 0;    // also keep every M-th step's checkpoint; 0 = none
  double commit_timeout_s = 600;  // rank 0 waits this long for the other ranks' files
};

class Checkpointer {
 public:
  // Every rank constructs one (same options). `metadata_json` is an object
  // merged into metadata.json (model config, layout, plan hash, ...).
  static Result<std::unique_ptr<Checkpointer>> create(const CheckpointOptions& opts, int rank, int world,
                                                      const std::string& metadata_json);
  ~Checkpointer();  // waits for an in-flight save
  // Starts a save of this rank's part (async) or writes it (sync); waits for
  // the previous save first (one in flight). Errors of a background save are
  // returned by the next save()/wait().
  // Only rank 0 commits: its save (or wait(), when async) returns after
  // metadata.json, the rename and `latest`; other ranks return once their
  // files and their done manifest are durable. If the previous background
  // save failed, save() returns that error and does not start this one.
  Status save(SaveRequest request);
  // Joins the in-flight save (if any) and returns its Status; ok when idle.
  Status wait();

  struct Impl;

 private:
  explicit Checkpointer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class CheckpointReader {
 public:
  // `path`: a step directory, or DIR (its `latest`). Refuses a checkpoint
  // without metadata.json (uncommitted) or whose files' sizes/checksums differ.
  static Result<std::unique_ptr<CheckpointReader>> open(const std::string& path);
  int64_t step() const;
  const std::string& path() const;
  const std::string& metadata_json() const;
  bool has_model() const;  // false for a light checkpoint
  std::vector<std::string> tensor_names(bool optimizer) const;
  Result<std::vector<int64_t>> global_shape(const std::string& name, bool optimizer) const;
  // The rectangle [offset, offset + extent) of a global tensor, from the slices that hold it.
  Status read(const std::string& name, bool optimizer, const std::vector<int64_t>& offset,
              const std::vector<int64_t>& extent, float* out) const;
  Result<std::string> training_state(int rank) const;
  int world_size() const;
  ~CheckpointReader();

  // One stored slice of a tensor (for `loom ckpt inspect`).
  struct SliceRef {
    std::string file;  // relative to path(), e.g. "model_weights/rank_00001.h5"
    std::vector<int64_t> offset, extent;
  };
  std::vector<SliceRef> slices(const std::string& name, bool optimizer) const;
  // Relative paths of the files listed in metadata.json with their sizes.
  std::vector<std::pair<std::string, uint64_t>> files() const;

  struct Impl;

 private:
  explicit CheckpointReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Resolves "latest" / a directory / a step directory to a step directory.
Result<std::string> resolve_checkpoint(const std::string& path);
// Recomputes every file's size and checksum against metadata.json.
Status verify_checkpoint(const std::string& path);

}  // namespace loom::ckpt
