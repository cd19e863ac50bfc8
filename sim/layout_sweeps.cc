#include "sim/layout_sweeps.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <numeric>

#include "core/json_util.h"
#include "sim/validation_row.h"

namespace loom {

namespace fs = std::filesystem;

double kendall_tau_b(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = std::min(x.size(), y.size());
  double concordant = 0, discordant = 0, ties_x = 0, ties_y = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      const double dx = x[i] - x[j], dy = y[i] - y[j];
      if (dx == 0 && dy == 0) continue;  // tied in both: in neither count
      if (dx == 0) {
        ++ties_x;
      } else if (dy == 0) {
        ++ties_y;
      } else if ((dx > 0) == (dy > 0)) {
        ++concordant;
      } else {
        ++discordant;
      }
    }
  const double denom = std::sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y));
  return denom > 0 ? (concordant - discordant) / denom : 0.0;
}

namespace {

// Ranks 1..n, ties sharing their average rank.
std::vector<double> average_ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> rank(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    for (size_t k = i; k <= j; ++k) rank[order[k]] = 1 + 0.5 * double(i + j);
    i = j + 1;
  }
  return rank;
}

// kInvalidArgument naming the first key of `obj` outside `keys`: a misspelt
// field would otherwise be dropped without a word.
Status only_keys(const Json& obj, std::initializer_list<const char*> keys, const std::string& where) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (const char* k : keys) known = known || it.key() == k;
    if (!known) {
      std::string list;
      for (const char* k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
      return invalid_argument(where + ": unknown field '" + it.key() + "' (the fields are " + list + ")");
    }
  }
  return Status::ok();
}

}  // namespace

double spearman_rho(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = std::min(x.size(), y.size());
  if (n < 2) return 0;
  const std::vector<double> rx = average_ranks({x.begin(), x.begin() + long(n)});
  const std::vector<double> ry = average_ranks({y.begin(), y.begin() + long(n)});
  const double mean = (double(n) + 1) / 2;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxy += (rx[i] - mean) * (ry[i] - mean);
    sxx += (rx[i] - mean) * (rx[i] - mean);
    syy += (ry[i] - mean) * (ry[i] - mean);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0.0;
}

Result<std::vector<LayoutSweep>> parse_layout_sweeps(const std::string& json_text, const std::string& base_dir) {
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(json_text, "layout sweeps"));
  if (!j.is_object() || !j.contains("sweeps") || !j["sweeps"].is_array())
    return invalid_argument("layout sweeps: expected an object with a \"sweeps\" array");
  std::vector<LayoutSweep> out;
  for (size_t i = 0; i < j["sweeps"].size(); ++i) {
    const Json& s = j["sweeps"][i];
    std::string w = "sweeps[" + std::to_string(i) + "]";
    if (!s.is_object()) return invalid_argument(w + " must be an object");
    LayoutSweep sw;
    LOOM_ASSIGN_OR_RETURN(sw.id, json_string(s, "id", w));
    for (const LayoutSweep& earlier : out)
      if (earlier.id == sw.id) return invalid_argument(w + ": a second sweep with id '" + sw.id + "'");
    w += " (" + sw.id + ")";
    LOOM_RETURN_IF_ERROR(only_keys(s, {"id", "source", "notes", "settings", "pins", "runs"}, w));
    LOOM_ASSIGN_OR_RETURN(sw.source, json_string(s, "source", w));
    LOOM_ASSIGN_OR_RETURN(sw.notes, json_string_or(s, "notes", "", w));
    if (!s.contains("settings") || !s["settings"].is_object())
      return invalid_argument(w + ".settings must be an object: the model, hardware, GPUs, sequence, precision and "
                                  "stack every run shares, as a validation-table row states them");
    Json settings = s["settings"];
    for (const char* per_run : {"id", "layout", "fix", "global_batch", "metric", "published", "tolerance", "pending"})
      if (settings.contains(per_run))
        return invalid_argument(w + ".settings." + per_run + ": a sweep's settings are what its runs share; the id, " +
                                "layout, batch and measurement are each run's, and a sweep is not pinned by tolerance");
    if (!s.contains("pins") || !s["pins"].is_object())
      return invalid_argument(w + ".pins must be an object: min_kendall_tau, max_pick_regret, max_wrong_fit_verdicts");
    const Json& pins = s["pins"];
    LOOM_RETURN_IF_ERROR(
        only_keys(pins, {"min_kendall_tau", "max_pick_regret", "max_wrong_fit_verdicts"}, w + ".pins"));
    LOOM_ASSIGN_OR_RETURN(sw.min_kendall_tau, json_number(pins, "min_kendall_tau", w + ".pins"));
    LOOM_ASSIGN_OR_RETURN(sw.max_pick_regret, json_number(pins, "max_pick_regret", w + ".pins"));
    LOOM_ASSIGN_OR_RETURN(int64_t wrong, json_int(pins, "max_wrong_fit_verdicts", w + ".pins"));
    if (!s.contains("runs") || !s["runs"].is_array() || s["runs"].size() < 2)
      return invalid_argument(w + ".runs must be an array of at least two measured layouts");
    if (!(sw.min_kendall_tau >= -1 && sw.min_kendall_tau <= 1) || !(sw.max_pick_regret >= 0) || wrong < 0 ||
        wrong > int64_t(s["runs"].size()))
      return invalid_argument(w + ".pins: min_kendall_tau lies in [-1, 1], max_pick_regret is not negative, and "
                                  "max_wrong_fit_verdicts lies between 0 and the number of runs");
    sw.max_wrong_fit_verdicts = int(wrong);
    for (size_t k = 0; k < s["runs"].size(); ++k) {
      const Json& r = s["runs"][k];
      const std::string rw = w + ".runs[" + std::to_string(k) + "]";
      if (!r.is_object()) return invalid_argument(rw + " must be an object");
      LOOM_RETURN_IF_ERROR(only_keys(r, {"layout", "global_batch", "step_time_s", "oom", "memory_gib"}, rw));
      SweepRun run;
      LOOM_ASSIGN_OR_RETURN(run.layout, json_string(r, "layout", rw));
      LOOM_ASSIGN_OR_RETURN(run.global_batch, json_positive_int(r, "global_batch", rw));
      LOOM_ASSIGN_OR_RETURN(run.oom, json_bool_or(r, "oom", false, rw));
      if (run.oom == r.contains("step_time_s"))
        return invalid_argument(rw + ": give either \"step_time_s\" (the measured step) or \"oom\": true (the layout "
                                     "ran out of memory)");
      if (!run.oom) {
        LOOM_ASSIGN_OR_RETURN(run.measured_step_s, json_positive(r, "step_time_s", rw));
      }
      LOOM_ASSIGN_OR_RETURN(run.memory_gib, json_number_or(r, "memory_gib", 0, rw));
      if (run.memory_gib < 0) return invalid_argument(rw + ".memory_gib must not be negative");
      sw.runs.push_back(std::move(run));
    }
    const auto ran = std::count_if(sw.runs.begin(), sw.runs.end(), [](const SweepRun& r) { return !r.oom; });
    if (ran < 2) return invalid_argument(w + ".runs: at least two layouts must have run for an order to compare");
    // The shared settings as a row of the table, checked by the table's own
    // parser; each run fills in its layout, batch and step.
    settings["id"] = sw.id;
    settings["layout"] = sw.runs[0].layout;
    settings["global_batch"] = sw.runs[0].global_batch;
    settings["metric"] = "step_time_s";
    settings["published"] = 1.0;
    settings["tolerance"] = 1.0;
    if (!settings.contains("source")) settings["source"] = sw.source;
    LOOM_ASSIGN_OR_RETURN(sw.base, parse_published_run(settings, w + ".settings", base_dir));
    out.push_back(std::move(sw));
  }
  return out;
}

Result<std::vector<LayoutSweep>> load_layout_sweeps(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_layout_sweeps(text, fs::path(path).parent_path().string());
}

bool SweepPrediction::holds() const {
  return error.empty() && pick_that_ran >= 0 && kendall_tau >= sweep.min_kendall_tau &&
         pick_regret <= sweep.max_pick_regret && fit_wrong <= sweep.max_wrong_fit_verdicts;
}

namespace {

// Each run's seconds per sequence (step / batch), the unit sweeps rank by:
// measured (0 where it ran out of memory) and predicted (0 where it was not
// predicted).
void seconds_per_sequence(const LayoutSweep& sweep, const std::vector<RunPrediction>& runs,
                          std::vector<double>* measured, std::vector<double>* predicted) {
  measured->assign(sweep.runs.size(), 0);
  predicted->assign(sweep.runs.size(), 0);
  for (size_t i = 0; i < sweep.runs.size() && i < runs.size(); ++i) {
    const double batch = double(sweep.runs[i].global_batch);
    if (!sweep.runs[i].oom) (*measured)[i] = sweep.runs[i].measured_step_s / batch;
    if (runs[i].ok) (*predicted)[i] = runs[i].predicted / batch;
  }
}

// 1 + how many of `pool` (indices into v) are below v[i].
int place_in(const std::vector<double>& v, const std::vector<size_t>& pool, size_t i) {
  int place = 1;
  for (size_t k : pool)
    if (v[k] < v[i]) ++place;
  return place;
}

}  // namespace

SweepPrediction predict_sweep(const LayoutSweep& sweep) {
  SweepPrediction out;
  out.sweep = sweep;
  const size_t n = sweep.runs.size();
  for (size_t i = 0; i < n; ++i) {
    const SweepRun& r = sweep.runs[i];
    PublishedRun row = sweep.base;
    row.id = sweep.id + "#" + std::to_string(i + 1);
    row.layout = r.layout;
    row.fix.clear();
    row.global_batch = r.global_batch;
    row.metric = RunMetric::kStepTime;
    row.published = r.oom ? 1.0 : r.measured_step_s;
    out.runs.push_back(predict_run(row));
    const RunPrediction& p = out.runs.back();
    if (!p.ok) {
      if (out.error.empty()) out.error = row.id + " (" + r.layout + "): " + p.error;
      continue;
    }
    (p.fits == !r.oom ? out.fit_right : out.fit_wrong) += 1;
  }
  std::vector<double> measured, predicted;
  seconds_per_sequence(sweep, out.runs, &measured, &predicted);
  std::vector<double> xs, ys;
  std::vector<size_t> ranked;
  for (size_t i = 0; i < n; ++i) {
    const bool ran = !sweep.runs[i].oom, ok = out.runs[i].ok, fits = ok && out.runs[i].fits;
    if (ran && ok && (out.measured_best < 0 || measured[i] < measured[size_t(out.measured_best)]))
      out.measured_best = int(i);
    if (fits && (out.pick < 0 || predicted[i] < predicted[size_t(out.pick)])) out.pick = int(i);
    if (ran && fits) {
      ranked.push_back(i);
      xs.push_back(measured[i]);
      ys.push_back(predicted[i]);
      if (out.pick_that_ran < 0 || predicted[i] < predicted[size_t(out.pick_that_ran)]) out.pick_that_ran = int(i);
    }
  }
  out.ranked = int(ranked.size());
  out.kendall_tau = kendall_tau_b(xs, ys);
  out.spearman = spearman_rho(xs, ys);
  if (out.pick_that_ran >= 0 && out.measured_best >= 0)
    out.pick_regret = measured[size_t(out.pick_that_ran)] / measured[size_t(out.measured_best)] - 1;
  if (out.measured_best >= 0 &&
      std::find(ranked.begin(), ranked.end(), size_t(out.measured_best)) != ranked.end())
    out.measured_best_place = place_in(predicted, ranked, size_t(out.measured_best));
  return out;
}

namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

std::string format_sweeps_markdown(const std::vector<SweepPrediction>& sweeps) {
  std::string s;
  for (const SweepPrediction& sp : sweeps) {
    const LayoutSweep& sw = sp.sweep;
    // A model given as a path is named by its file, not where this checkout put it.
    const std::string model =
        sw.base.model.find('/') != std::string::npos ? fs::path(sw.base.model).stem().string() : sw.base.model;
    s += "### " + sw.id + "\n\n" + model + " on " + std::to_string(sw.base.gpus) + " GPUs (" + sw.base.hw +
         "), " + sw.base.precision + (sw.base.framework.empty() ? "" : ", " + sw.base.framework) + ". Source: " +
         sw.source + "\n\n";
    const size_t n = sw.runs.size();
    std::vector<double> measured, predicted;
    seconds_per_sequence(sw, sp.runs, &measured, &predicted);
    std::vector<size_t> ran, fits;
    for (size_t i = 0; i < n; ++i) {
      if (!sw.runs[i].oom) ran.push_back(i);
      if (sp.runs[i].ok && sp.runs[i].fits) fits.push_back(i);
    }
    s += "| # | layout | batch | measured step | place | predicted step | place | memory measured | memory "
         "predicted |\n|---|---|---|---|---|---|---|---|---|\n";
    for (size_t i = 0; i < n; ++i) {
      const SweepRun& r = sw.runs[i];
      const RunPrediction& p = sp.runs[i];
      s += "| " + std::to_string(i + 1) + " | " + r.layout + " | " + std::to_string(r.global_batch) + " | ";
      if (r.oom)
        s += "out of memory | — | ";
      else
        s += fmt("%.2f s", r.measured_step_s) + " | " + std::to_string(place_in(measured, ran, i)) + " | ";
      if (!p.ok)
        s += "not predicted | — | ";
      else if (!p.fits)
        s += fmt("%.2f s", p.predicted) + " | does not fit | ";
      else
        s += fmt("%.2f s", p.predicted) + " | " + std::to_string(place_in(predicted, fits, i)) + " | ";
      s += (r.memory_gib > 0 ? fmt("%.1f GB", r.memory_gib * 1.073741824) : std::string("—")) + " | ";
      s += p.ok ? fmt("%.1f GB", p.peak_memory_bytes / 1e9) + fmt(" of %.1f", p.memory_capacity_bytes / 1e9)
                : std::string("—");
      s += " |\n";
    }
    s += "\nPlaces rank seconds per sequence (step / batch): measured among the " + std::to_string(ran.size()) +
         " layouts that ran, predicted among the " + std::to_string(fits.size()) + " Loom predicts to fit.\n\n";
    if (!sp.error.empty()) {
      s += "**Not predicted:** " + sp.error + "\n\n";
      continue;
    }
    s += "* Order: Kendall's tau-b " + fmt("%.2f", sp.kendall_tau) + ", Spearman's rho " + fmt("%.2f", sp.spearman) +
         " over the " + std::to_string(sp.ranked) + " layouts that ran and that Loom predicts to fit (pinned: tau >= " +
         fmt("%.2f", sw.min_kendall_tau) + ").\n";
    if (sp.measured_best >= 0)
      s += "* The measured best, #" + std::to_string(sp.measured_best + 1) +
           (sp.measured_best_place > 0 ? ", is Loom's " + std::to_string(sp.measured_best_place) + " of " +
                                             std::to_string(sp.ranked) + ".\n"
                                       : ", is predicted not to fit.\n");
    if (sp.pick < 0)
      s += "* Loom predicts none of these layouts to fit.";
    else
      s += "* Loom's pick, #" + std::to_string(sp.pick + 1) +
           (sw.runs[size_t(sp.pick)].oom ? ", ran out of memory." : ", ran.");
    if (sp.pick_that_ran >= 0)
      s += " Of the layouts that ran, Loom's fastest (#" + std::to_string(sp.pick_that_ran + 1) + ") ran " +
           fmt("%+.1f%%", 100 * sp.pick_regret) + " against the measured best (pinned: at most " +
           fmt("%+.1f%%", 100 * sw.max_pick_regret) + ").";
    else if (sp.pick >= 0)
      s += " None of the layouts that ran is predicted to fit.";
    s += "\n";
    s += "* Fit verdicts: " + std::to_string(sp.fit_right) + " right, " + std::to_string(sp.fit_wrong) + " wrong";
    std::string wrong;
    for (size_t i = 0; i < n; ++i)
      if (sp.runs[i].ok && sp.runs[i].fits == sw.runs[i].oom)
        wrong += (wrong.empty() ? "" : ", ") + std::string("#") + std::to_string(i + 1) +
                 (sw.runs[i].oom ? " predicted to fit, ran out of memory" : " predicted not to fit, ran");
    s += (wrong.empty() ? "" : " (" + wrong + ")") + " (pinned: at most " + std::to_string(sw.max_wrong_fit_verdicts) +
         " wrong).\n\n";
  }
  return s;
}

}  // namespace loom
