// Predicted vs measured op by op (core/op_compare.h).
#include "core/op_compare.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/figures.h"
#include "core/program.h"

namespace loom {

namespace {

constexpr size_t kNamesShown = 5;

struct Joined {
  const TraceEvent* first = nullptr;
  double sum_us = 0, max_us = 0;
  int count = 0;
};

// The program ops of a trace by op id (nested slices and other events left out).
std::map<int32_t, Joined> ops_of(const Trace& t) {
  std::map<int32_t, Joined> ops;
  for (const TraceEvent& e : t.events) {
    if (e.op_id < 0) continue;
    Joined& j = ops[e.op_id];
    if (!j.first) j.first = &e;
    j.sum_us += e.dur_us;
    j.max_us = j.count == 0 ? e.dur_us : std::max(j.max_us, e.dur_us);
    ++j.count;
  }
  return ops;
}

std::string first_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < kNamesShown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > kNamesShown) s += ", ...";
  return s;
}

int kind_rank(const std::string& kind) {
  for (int k = 0; k <= int(OpKind::kOptimizer); ++k)
    if (kind == op_kind_name(static_cast<OpKind>(k))) return k;
  return int(OpKind::kOptimizer) + 1;
}

}  // namespace

double OpRow::rel_error() const { return relative_error(predicted_us, measured_us); }

Result<OpComparison> compare_ops(const Trace& predicted, const Trace& measured, const std::string& pred_name,
                                 const std::string& meas_name) {
  if (predicted.kind == "measured")
    return invalid_argument(pred_name + " is a measured trace (`loom execute --trace`); give the predicted trace "
                            "(`loom plan --trace`) first and the measured one second");
  if (measured.kind == "predicted")
    return invalid_argument(meas_name + " is a predicted trace (`loom plan --trace`); give the measured trace "
                            "(`loom execute --trace`) second");
  const std::map<int32_t, Joined> pred = ops_of(predicted), meas = ops_of(measured);
  if (pred.empty())
    return invalid_argument(pred_name + " has no program ops (no event with args.op_id): give a trace written by "
                            "`loom plan --trace`");
  if (meas.empty())
    return invalid_argument(meas_name + " has no program ops (no event with args.op_id): give a trace written by "
                            "`loom execute --trace`");
  OpComparison c;
  if (!predicted.program_hash.empty() && !measured.program_hash.empty()) {
    if (predicted.program_hash != measured.program_hash)
      return invalid_argument("the traces are of different programs: " + pred_name + " is of program " +
                              predicted.program_hash + ", " + meas_name + " of program " + measured.program_hash +
                              " (their plans differ in pipeline, micro-batches, schedule, ZeRO or gradient buckets); "
                              "compare a run's trace with the predicted trace of the plan it executed");
    c.program_hash = predicted.program_hash;
  } else {
    c.program_hash = predicted.program_hash.empty() ? measured.program_hash : predicted.program_hash;
    const std::string& older = predicted.program_hash.empty() ? pred_name : meas_name;
    c.note = older + " has no program hash (written by an older loom): the ops were joined by id without checking "
             "that the programs are the same";
  }
  std::vector<std::string> only_pred, only_meas;
  for (const auto& [id, p] : pred)
    if (!meas.count(id)) only_pred.push_back(p.first->name);
  for (const auto& [id, m] : meas)
    if (!pred.count(id)) only_meas.push_back(m.first->name + " (op " + std::to_string(id) + ")");
  if (!only_pred.empty() || !only_meas.empty()) {
    std::string what;
    if (!only_pred.empty())
      what += std::to_string(only_pred.size()) + " predicted op(s) have no measured event (" +
              first_names(only_pred) + ")";
    if (!only_meas.empty())
      what += std::string(what.empty() ? "" : "; ") + std::to_string(only_meas.size()) +
              " measured op(s) are not in the predicted trace (" + first_names(only_meas) + ")";
    return invalid_argument("the traces do not join one to one on op ids: " + what + "; " + pred_name + " and " +
                            meas_name + " are not of the same program: trace the plan that was executed");
  }
  std::map<std::string, OpKindTotal> kinds;
  for (const auto& [id, p] : pred) {
    const Joined& m = meas.at(id);
    if (p.first->name != m.first->name)
      return invalid_argument("op " + std::to_string(id) + " is '" + p.first->name + "' in " + pred_name + " but '" +
                              m.first->name + "' in " + meas_name + ": the traces are not of the same program");
    OpRow r;
    r.op_id = id;
    r.name = p.first->name;
    r.kind = p.first->cat;
    r.stage = p.first->stage;
    r.chunk = p.first->chunk;
    r.micro = p.first->micro;
    r.predicted_us = p.sum_us / p.count;
    r.measured_us = m.sum_us / m.count;
    r.measured_max_us = m.max_us;
    r.ranks = m.count;
    OpKindTotal& k = kinds[r.kind];
    k.kind = r.kind;
    ++k.count;
    k.predicted_us += r.predicted_us;
    k.measured_us += r.measured_us;
    c.rows.push_back(std::move(r));
  }
  for (auto& [name, k] : kinds) c.kinds.push_back(k);
  std::stable_sort(c.kinds.begin(), c.kinds.end(),
                   [](const OpKindTotal& a, const OpKindTotal& b) { return kind_rank(a.kind) < kind_rank(b.kind); });
  return c;
}

std::vector<const OpRow*> largest_differences(const OpComparison& c, size_t n) {
  std::vector<const OpRow*> rows;
  for (const OpRow& r : c.rows) rows.push_back(&r);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const OpRow* a, const OpRow* b) { return std::fabs(a->diff_us()) > std::fabs(b->diff_us()); });
  if (rows.size() > n) rows.resize(n);
  return rows;
}

}  // namespace loom
