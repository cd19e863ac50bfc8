// Checkpoints of a Trainer (exec/runtime/trainer_state.cc, library
// loom_exec_ckpt, which adds the HDF5 checkpoint library to the trainer's).
// Collective: every rank calls them.
//
// snapshot_trainer() fills this rank's part of a checkpoint taken after
// `next_step` steps: its TP/PP slice of every parameter and of the Adam
// moments (ZeRO shards gathered over DP through the sharding's arithmetic;
// DP rank 0 of each slice writes it) and its training state; `light` writes
// the training state only. restore_trainer() reads the slices this rank needs
// from a checkpoint written under ANY layout of the same model and sets
// *next_step. Errors are Status (a backend's out-of-memory included).
#pragma once

#include <cstdint>

#include "exec/checkpoint/checkpoint.h"
#include "exec/runtime/trainer.h"

namespace loom::exec {

Status snapshot_trainer(Trainer& trainer, int64_t next_step, bool light, ckpt::SaveRequest* out);
Status restore_trainer(Trainer& trainer, const ckpt::CheckpointReader& reader, int64_t* next_step);

}  // namespace loom::exec
