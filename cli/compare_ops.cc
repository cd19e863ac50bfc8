// loom compare --ops PREDICTED_TRACE MEASURED_TRACE: predicted vs measured op
// by op, joined on program op ids (core/op_compare.h).
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/compare.h"
#include "cli/parse_args.h"
#include "core/json_util.h"
#include "core/op_compare.h"

namespace loom::cli {

namespace {

Result<Trace> load_trace(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  Result<Trace> t = parse_trace(text);
  if (!t.is_ok()) return t.status().with_context(path);
  return t;
}

OrderedJson number_or_null(double x) { return std::isfinite(x) ? OrderedJson(x) : OrderedJson(nullptr); }

std::string ops_json(const OpComparison& c, const std::string& pred, const std::string& meas) {
  OrderedJson j;
  j["predicted"] = pred;
  j["measured"] = meas;
  j["program_hash"] = c.program_hash;
  j["joined"] = c.rows.size();
  j["unmatched"] = 0;
  if (!c.note.empty()) j["note"] = c.note;
  OrderedJson ops = OrderedJson::array();
  for (const OpRow& r : c.rows) {
    OrderedJson o;
    o["op_id"] = r.op_id;
    o["name"] = r.name;
    o["kind"] = r.kind;
    o["stage"] = r.stage;
    o["chunk"] = r.chunk;
    o["micro"] = r.micro;
    o["predicted_us"] = r.predicted_us;
    o["measured_us"] = r.measured_us;
    o["measured_max_us"] = r.measured_max_us;
    o["ranks"] = r.ranks;
    o["rel_error"] = number_or_null(r.rel_error());
    ops.push_back(o);
  }
  j["ops"] = ops;
  OrderedJson kinds = OrderedJson::array();
  for (const OpKindTotal& k : c.kinds)
    kinds.push_back({{"kind", k.kind}, {"count", k.count}, {"predicted_us", k.predicted_us},
                     {"measured_us", k.measured_us}});
  j["kinds"] = kinds;
  return j.dump(2);
}

std::string ops_text(const OpComparison& c, size_t top) {
  std::string out;
  char buf[320];
  std::snprintf(buf, sizeof buf, "%zu ops joined, 0 unmatched (program %s); measured: the mean over the ranks that "
                "ran each op, the slowest beside it\n",
                c.rows.size(), c.program_hash.empty() ? "unknown" : c.program_hash.c_str());
  out += buf;
  if (!c.note.empty()) out += "note: " + c.note + "\n";
  const auto worst = largest_differences(c, top);
  if (!worst.empty()) {
    out += "\nthe " + std::to_string(worst.size()) + " ops that differ most (|measured - predicted|):\n";
    std::snprintf(buf, sizeof buf, "  %-28s %14s %14s %14s %9s\n", "op", "predicted µs", "measured µs", "max µs",
                  "error");
    out += buf;
    for (const OpRow* r : worst) {
      std::snprintf(buf, sizeof buf, "  %-28s %13.1f %13.1f %13.1f %9s\n", r->name.c_str(), r->predicted_us,
                    r->measured_us, r->measured_max_us, error_text(r->rel_error()).c_str());
      out += buf;
    }
  }
  out += "\nper op kind (totals over the kind's ops):\n";
  std::snprintf(buf, sizeof buf, "  %-14s %6s %16s %16s %9s\n", "kind", "count", "predicted µs", "measured µs", "error");
  out += buf;
  for (const OpKindTotal& k : c.kinds) {
    std::snprintf(buf, sizeof buf, "  %-14s %6d %15.1f %15.1f %9s\n", k.kind.c_str(), k.count, k.predicted_us,
                  k.measured_us, error_text(relative_error(k.predicted_us, k.measured_us)).c_str());
    out += buf;
  }
  return out;
}

}  // namespace

int cmd_compare_ops(int argc, char** argv) {
  CLI::App app{"Predicted vs measured op by op: the program ops of a predicted trace (`loom plan --trace`) and a "
               "measured one (`loom execute --trace`) joined on op id; measured = the mean over the ranks that ran "
               "each op (DP/TP replicas), with the slowest. Refused (exit 2) when the traces are not of the same "
               "program one to one.",
               "loom compare --ops"};
  std::string pred_path, meas_path;
  bool ops = false, json = false;
  int top = 15;
  app.add_flag("--ops", ops, "compare traces op by op (this mode)")->required();
  app.add_option("predicted", pred_path, "predicted trace written by `loom plan --trace`")->required();
  app.add_option("measured", meas_path, "measured trace written by `loom execute --trace`")->required();
  app.add_option("--top", top, "how many of the ops that differ most to print")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  app.add_flag("--json", json, "print every joined op and the per-kind totals as JSON");
  if (int rc = parse_args(app, "compare --ops", argc, argv); rc >= 0) return rc;
  auto pred = load_trace(pred_path);
  if (!pred.is_ok()) return fail("compare --ops", pred.status());
  auto meas = load_trace(meas_path);
  if (!meas.is_ok()) return fail("compare --ops", meas.status());
  auto c = compare_ops(*pred, *meas, pred_path, meas_path);
  if (!c.is_ok()) return fail("compare --ops", c.status());
  if (json) std::printf("%s\n", ops_json(*c, pred_path, meas_path).c_str());
  else std::printf("%s", ops_text(*c, size_t(top)).c_str());
  return 0;
}

}  // namespace loom::cli
