// Predicted vs measured op by op: a predicted trace (`loom plan --trace`,
// pid = stage) and a measured one (`loom execute --trace`, pid = rank) joined
// on the program op id (core/trace.h). Every rank that runs an op (its DP/TP
// replicas) has a measured event of it: the measured duration is their mean,
// with the slowest beside it. Used by `loom compare --ops` (cli/compare_ops.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/trace.h"

namespace loom {

struct OpRow {
  int32_t op_id = -1;
  std::string name;  // Program::op_name: "fwd s0 c0 mb1"
  std::string kind;  // op_kind_name: "fwd", "bwd", "send_act", ...
  int32_t stage = -1, chunk = -1, micro = -1;
  double predicted_us = 0;
  double measured_us = 0;      // mean over the ranks that ran the op
  double measured_max_us = 0;  // the slowest of them
  int ranks = 0;               // measured events joined
  double diff_us() const { return measured_us - predicted_us; }
  double rel_error() const;    // relative_error (core/figures.h)
};

struct OpKindTotal {
  std::string kind;
  int count = 0;
  double predicted_us = 0, measured_us = 0;  // sums over the kind's ops
};

struct OpComparison {
  std::string program_hash;     // of both traces (or the one that has it)
  std::vector<OpRow> rows;      // every program op, by op id
  std::vector<OpKindTotal> kinds;  // the kinds present, in program order (fwd, bwd, send_act, ...)
  std::string note;             // e.g. a trace without a program hash; empty when none
};

// Errors (kInvalidArgument, naming the files as `predicted_name` and
// `measured_name`): a trace of the wrong kind on a side; either trace has no
// program ops; the traces' program hashes differ (both named); an op id on
// one side only (how many, and the first few names); an op id whose names
// differ. Not the same program one to one is never joined partially.
Result<OpComparison> compare_ops(const Trace& predicted, const Trace& measured, const std::string& predicted_name,
                                 const std::string& measured_name);

// The `n` rows with the largest |measured - predicted|, largest first.
std::vector<const OpRow*> largest_differences(const OpComparison& c, size_t n);

}  // namespace loom
