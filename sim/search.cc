#include "sim/search.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <set>
#include <sstream>
#include <thread>

#include "core/stage_split.h"
#include "sim/export.h"

namespace loom {

namespace {

std::vector<int> divisors(int64_t n, int64_t limit) {
  std::vector<int> out;
  for (int64_t d = 1; d <= n && d <= limit; ++d)
    if (n % d == 0) out.push_back(int(d));
  return out;
}

// Whether ZeRO stage `zero` is among a framework's `stages` (empty: all).
bool in_stages(const std::vector<int>& stages, int zero) {
  return stages.empty() || std::find(stages.begin(), stages.end(), zero) != stages.end();
}

}  // namespace

std::vector<Layout> enumerate_layouts(const Evaluator& eval, const SearchSpace& sp) {
  const ModelSpec& m = eval.model();
  const TrainSpec& t = eval.train();
  const int world = sp.world;
  int max_tp = sp.max_tp > 0 ? sp.max_tp : eval.hw().node.devices_per_node;
  if (eval.hw().node.nvlink_domain_size > max_tp && sp.max_tp == 0) max_tp = eval.hw().node.nvlink_domain_size;
  std::vector<Layout> out;
  // Megatron's recompute modules the search tries beside the attention core:
  // the output-discarding ones that apply to the model and re-run only norms,
  // MLA's up-projections or the experts' activation (DeepSeek-V3's own choice,
  // section 3.2.3 of its report); the dense MLP's checkpoint re-runs GEMMs and
  // is left to --fix.
  unsigned auto_modules = 0;
  if (sp.recompute_modules) {
    if (m.is_moe()) auto_modules |= kRecomputeLayernorm | kRecomputeMoeAct;
    if (m.mla.enabled) auto_modules |= kRecomputeLayernorm | kRecomputeMlaUpProj;
  }
  for (int tp : divisors(world, max_tp)) {
    if (sp.fix_tp && tp != sp.fix_tp) continue;
    if (m.num_heads % tp || (!m.mla.enabled && m.num_kv_heads % tp) || m.ffn_hidden % tp) continue;
    for (int pp : divisors(world / tp, m.num_layers)) {
      if (sp.fix_pp && pp != sp.fix_pp) continue;
      std::vector<int> cps;
      if (sp.fix_cp > 0) {
        if ((world / tp / pp) % sp.fix_cp == 0) cps.push_back(sp.fix_cp);
      } else {
        for (int cp = 1; cp <= sp.max_cp && (world / tp / pp) % cp == 0; cp *= 2)
          if (cp == 1 || t.seq_len / (2 * cp) >= sp.min_cp_chunk) cps.push_back(cp);
      }
      for (int cp : cps) {
      int dp = world / tp / pp / cp;
      if (sp.fix_dp && dp != sp.fix_dp) continue;
      if (t.global_batch % dp) continue;
      // (ep, etp): experts sharded over DP ranks and split over TP, or
      // (Megatron-Core's parallel folding, etp = 1, with SP) whole and
      // sharded over TP x DP ranks.
      std::vector<std::pair<int, int>> eps{{1, 0}};
      if (m.is_moe()) {
        eps.clear();
        for (int ep : divisors(dp, dp))
          if (m.moe.num_experts % ep == 0) eps.push_back({ep, 0});
        if (tp > 1 && sp.try_sequence_parallel && sp.try_expert_folding)
          for (int ep : divisors(tp * dp, tp * dp))
            if (ep > 1 && m.moe.num_experts % ep == 0) eps.push_back({ep, 1});
      }
      for (auto [ep, etp] : eps) {
        if (sp.fix_ep && ep != sp.fix_ep) continue;
        if (sp.fix_etp && (etp ? etp : tp) != sp.fix_etp) continue;
        for (int zero : sp.zero_stages) {
          if (pp > 1 && !sp.pipeline_zero_stages.empty() &&
              std::find(sp.pipeline_zero_stages.begin(), sp.pipeline_zero_stages.end(), zero) ==
                  sp.pipeline_zero_stages.end())
            continue;
          if (sp.fix_zero >= 0 && zero != sp.fix_zero) continue;
          if (dp * cp == 1 && zero > 0) continue;  // nothing to shard over
          for (int micro : divisors(t.global_batch / dp, sp.max_micro_batch)) {
            if (sp.fix_micro && micro != sp.fix_micro) continue;
            int64_t mb = t.global_batch / dp / micro;
            for (Schedule sched : sp.schedules) {
              if (sp.fix_schedule && sched != *sp.fix_schedule) continue;
              if (pp == 1 && sched != Schedule::k1F1B && !sp.fix_schedule) continue;
              std::vector<int> vs{1};
              if (sched == Schedule::kDualPipeV) {
                // Two chunks a stage as a V, at least 2*pp micro-batches, the
                // ZeRO stages it runs with.
                if (pp < 2 || mb < 2 * int64_t(pp) || !dualpipev_runs_zero(zero, eval.options().pp_fsdp_once) ||
                    2 * pp > m.num_layers)
                  continue;
                vs = {2};
              } else if (sched == Schedule::kInterleaved) {
                vs.clear();
                if (pp < 2 || mb % pp) continue;
                int per_stage = m.num_layers / pp;
                // Any v with at least one layer per chunk: an uneven split puts
                // the extra layers on the middle chunks (core/stage_split.h).
                // Megatron's splits: every v whose chunks hold whole, equal
                // layer counts (--num-layers-per-virtual-pipeline-stage), up
                // to one layer a chunk.
                if (sp.megatron_splits) {
                  if (m.num_layers % pp == 0)
                    for (int v = 2; v <= per_stage; ++v)
                      if (per_stage % v == 0) vs.push_back(v);
                } else {
                  for (int v = 2; v <= std::max(sp.max_virtual_stages, sp.fix_v) && v <= per_stage; ++v) vs.push_back(v);
                }
              }
              for (int v : vs) {
                if (sp.fix_v && v != sp.fix_v) continue;
                // The even split's first and last chunk, for the pinned-ends variants.
                const bool ends = sp.try_uneven_ends && pp >= 2 &&
                                  (sched != Schedule::kInterleaved || sp.uneven_ends_interleaved);
                int even_first = 0, even_last = 0;
                if (ends) {
                  const StageSplit even = split_layers(m, pp, v);
                  even_first = even.chunk_layers.front();
                  even_last = even.chunk_layers.back();
                }
                const int sp_first = tp > 1 && sp.sequence_parallel_required ? 1 : 0;
                for (int spar = sp_first; spar <= (tp > 1 && sp.try_sequence_parallel ? 1 : 0); ++spar) {
                  if (sp.fix_sp && bool(spar) != *sp.fix_sp) continue;
                  for (Recompute rc : sp.recompute) {
                    if (sp.fix_recompute && rc != *sp.fix_recompute) continue;
                    Layout l;
                    l.dp = dp;
                    l.tp = tp;
                    l.pp = pp;
                    l.ep = ep;
                    l.etp = etp;
                    l.cp = cp;
                    l.zero = zero;
                    l.micro_batch = micro;
                    l.schedule = sched;
                    l.virtual_stages = v;
                    l.sequence_parallel = spar;
                    l.recompute = rc;
                    if (sp.fix_recompute_layers > 0) {
                      if (rc != Recompute::kFull) continue;
                      l.recompute_layers = sp.fix_recompute_layers;
                    }
                    if (sp.fix_recompute_modules) {
                      if (rc != Recompute::kSelective) continue;
                      l.recompute_modules = sp.fix_recompute_modules;
                    }
                    l.overlap_grad_reduce = sp.overlap_grad_reduce && in_stages(sp.overlap_grad_zero_stages, zero);
                    l.overlap_param_gather = sp.overlap_param_gather && in_stages(sp.overlap_param_zero_stages, zero);
                    if (!validate_layout(l, m, t, world).is_ok()) continue;
                    // The stack's splits only (the megatron-core framework).
                    auto runnable = [&](const Layout& x) {
                      return !sp.megatron_splits || megatron_split_status(m, x).is_ok();
                    };
                    // Each layout, and under selective recompute with a stack
                    // that has Megatron's modules the same with the cheap
                    // ones that apply (auto_modules).
                    auto push_one = [&](const Layout& x) {
                      out.push_back(x);
                      if (auto_modules == 0 || x.recompute != Recompute::kSelective || sp.fix_recompute_modules) return;
                      Layout y = x;
                      y.recompute_modules = auto_modules;
                      out.push_back(y);
                    };
                    // Under CP, once per K/V exchange the stack runs.
                    auto push = [&](const Layout& x) {
                      if (x.cp <= 1) return push_one(x);
                      for (CpComm c : sp.cp_comms) {
                        if (sp.fix_cp_comm && c != *sp.fix_cp_comm) continue;
                        Layout y = x;
                        y.cp_comm = c;
                        // The heads exchange needs cp to divide the heads.
                        if (c == CpComm::kA2a && !validate_layout(y, m, t, world).is_ok()) continue;
                        push_one(y);
                      }
                    };
                    if (runnable(l)) push(l);
                    if (!ends || even_last < 2) continue;
                    Layout u = l;
                    u.last_stage_layers = even_last - 1;
                    if (validate_layout(u, m, t, world).is_ok() && runnable(u)) push(u);
                    if (even_first < 2) continue;
                    u.first_stage_layers = even_first - 1;
                    if (validate_layout(u, m, t, world).is_ok() && runnable(u)) push(u);
                  }
                }
              }
            }
          }
        }
      }
    }
      }
  }
  return out;
}

Result<SearchResult> search_layouts(const Evaluator& eval, const SearchSpace& sp,
                                    const std::function<void(double)>& progress, const std::atomic<bool>* cancel) {
  auto t0 = std::chrono::steady_clock::now();
  if (sp.world < 1) return invalid_argument("search: --gpus must be >= 1");
  LOOM_RETURN_IF_ERROR(validate_train_spec(eval.train()));
  if (sp.fix_recompute_layers > 0 && !sp.partial_recompute)
    return invalid_argument("search: --fix recompute_layers=" + std::to_string(sp.fix_recompute_layers) +
                            ": this stack recomputes every layer or none (torchtitan, DeepSpeed); recompute_layers is "
                            "Megatron's --recompute-method block, which megatron-core and Loom's executor run");
  if (sp.fix_cp_comm && std::find(sp.cp_comms.begin(), sp.cp_comms.end(), *sp.fix_cp_comm) == sp.cp_comms.end())
    return invalid_argument(std::string("search: --fix cp_comm=") + cp_comm_name(*sp.fix_cp_comm) +
                            ": this stack does not run context parallelism that way (its framework file's "
                            "context_parallel.cp_comm); use cp_comm=p2p");
  if (sp.fix_recompute_modules && !sp.recompute_modules)
    return invalid_argument("search: --fix recompute_modules=" + recompute_modules_text(sp.fix_recompute_modules) +
                            ": Megatron's --recompute-modules, which only --framework megatron-core plans (Loom's "
                            "executor, torchtitan and DeepSpeed re-run the attention core or whole layers)");
  for (auto [name, value] :
       {std::pair<const char*, int>{"tp", sp.fix_tp}, {"pp", sp.fix_pp}, {"dp", sp.fix_dp}, {"cp", sp.fix_cp}}) {
    if (value > 0 && sp.world % value != 0)
      return invalid_argument("search: --fix " + std::string(name) + "=" + std::to_string(value) +
                              " does not divide the " + std::to_string(sp.world) + " GPUs; pin a divisor of " +
                              std::to_string(sp.world));
  }
  SearchResult res;
  std::vector<Layout> layouts = enumerate_layouts(eval, sp);
  res.enumerated = int64_t(layouts.size());
  res.valid = res.enumerated;
  if (layouts.empty()) {
    // Explain with the simplest layout the pins allow: the rest data parallel.
    Layout l;
    l.tp = std::max(1, sp.fix_tp);
    l.pp = std::max(1, sp.fix_pp);
    l.ep = std::max(1, sp.fix_ep);
    l.cp = std::max(1, sp.fix_cp);
    l.dp = sp.fix_dp > 0 ? sp.fix_dp : std::max(1, sp.world / (l.tp * l.pp * l.cp));
    if (sp.fix_micro > 0) l.micro_batch = sp.fix_micro;
    if (sp.fix_zero >= 0) l.zero = sp.fix_zero;
    Status why = validate_layout(l, eval.model(), eval.train(), sp.world);
    if (why.is_ok() && sp.fix_tp > 0 && l.tp > eval.hw().node.devices_per_node)
      why = invalid_argument("tp=" + std::to_string(l.tp) + " spans more than one node (" +
                             std::to_string(eval.hw().node.devices_per_node) + " devices); the search keeps TP inside a node");
    std::string reason = why.is_ok() ? "no layout in the search space is valid" : why.message();
    return invalid_argument("search: no valid layout for " + std::to_string(sp.world) + " GPUs: " + reason);
  }

  std::vector<Estimate> est(layouts.size());
  // Partial recompute: per recompute=full layout that fits, the fewest
  // recomputed layers a chunk that still fit (memory is monotone in the
  // count), as an extra candidate beside it.
  // (--fix recompute=full pins every layer: partial only when not pinned.)
  std::vector<std::optional<Candidate>> partial(sp.partial_recompute && !sp.fix_recompute ? layouts.size() : 0);
  auto fewest_recomputed = [&](size_t i) {
    const Layout& full = layouts[i];
    if (full.recompute != Recompute::kFull || full.recompute_layers > 0 || !est[i].fits) return;
    const StageSplit split = split_layers(eval.model(), full);
    const int most = *std::max_element(split.chunk_layers.begin(), split.chunk_layers.end());
    int lo = 1, hi = most - 1;  // the answer lies in [lo, hi] when any fits
    std::optional<Candidate> best;
    while (lo <= hi) {
      Layout x = full;
      x.recompute_layers = lo + (hi - lo) / 2;
      Estimate e = eval.estimate(x);
      if (e.fits) {
        best = Candidate{x, e, false};
        hi = x.recompute_layers - 1;
      } else {
        lo = x.recompute_layers + 1;
      }
    }
    partial[i] = best;
  };
  int threads = sp.threads > 0 ? sp.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::min<int>(threads, int(layouts.size()));
  std::atomic<size_t> next{0}, done{0};
  const size_t block = 256;
  auto worker = [&]() {
    for (;;) {
      if (cancel && cancel->load()) return;
      size_t begin = next.fetch_add(block);
      if (begin >= layouts.size()) return;
      size_t end = std::min(layouts.size(), begin + block);
      for (size_t i = begin; i < end; ++i) {
        est[i] = eval.estimate(layouts[i]);
        if (!partial.empty()) fewest_recomputed(i);
      }
      size_t d = done.fetch_add(end - begin) + (end - begin);
      if (progress) progress(double(d) / layouts.size());
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();


  std::vector<Candidate> fitting;
  Candidate closest;
  double closest_peak = 0;
  bool have_closest = false;
  for (size_t i = 0; i < layouts.size(); ++i) {
    if (est[i].figures.step_time_s <= 0) continue;  // not evaluated (cancelled)
    if (!partial.empty() && partial[i]) {
      fitting.push_back(*partial[i]);
      ++res.partial_variants;
    }
    if (est[i].fits) {
      fitting.push_back({layouts[i], est[i], false});
    } else if (!have_closest || est[i].peak_memory_bytes < closest_peak) {
      closest = {layouts[i], est[i], false};
      closest_peak = est[i].peak_memory_bytes;
      have_closest = true;
    }
  }
  res.fitting = int64_t(fitting.size());
  std::sort(fitting.begin(), fitting.end(), [](const Candidate& a, const Candidate& b) {
    if (a.estimate.figures.tokens_per_s != b.estimate.figures.tokens_per_s)
      return a.estimate.figures.tokens_per_s > b.estimate.figures.tokens_per_s;
    return a.estimate.peak_memory_bytes < b.estimate.peak_memory_bytes;
  });
  // Pareto front: no other layout is both faster and smaller.
  {
    std::vector<size_t> by_mem(fitting.size());
    for (size_t i = 0; i < by_mem.size(); ++i) by_mem[i] = i;
    std::sort(by_mem.begin(), by_mem.end(), [&](size_t a, size_t b) {
      if (fitting[a].estimate.peak_memory_bytes != fitting[b].estimate.peak_memory_bytes)
        return fitting[a].estimate.peak_memory_bytes < fitting[b].estimate.peak_memory_bytes;
      return fitting[a].estimate.figures.tokens_per_s > fitting[b].estimate.figures.tokens_per_s;
    });
    // Non-dominated: faster than everything smaller, and the fastest of its
    // own memory (ties on both count once each: neither dominates the other).
    double best_smaller = -1;
    for (size_t k = 0; k < by_mem.size();) {
      const double mem = fitting[by_mem[k]].estimate.peak_memory_bytes;
      const double group_best = fitting[by_mem[k]].estimate.figures.tokens_per_s;
      size_t j = k;
      for (; j < by_mem.size() && fitting[by_mem[j]].estimate.peak_memory_bytes == mem; ++j) {
        const double tps = fitting[by_mem[j]].estimate.figures.tokens_per_s;
        fitting[by_mem[j]].pareto = tps == group_best && tps > best_smaller;
      }
      best_smaller = std::max(best_smaller, group_best);
      k = j;
    }
  }
  if (have_closest) {
    res.closest = closest;
    res.closest_why = memory_report(eval.model(), eval.hw(), closest.layout, eval.train(), eval.options()).why_not();
  }

  // Refine the best few with the event engine and re-rank them.
  int refine = std::min<int>(sp.refine_top, int(fitting.size()));
  std::vector<std::pair<SimResult, Candidate>> top;
  for (int i = 0; i < refine; ++i) {
    if (cancel && cancel->load()) break;
    auto r = simulate_layout(eval, fitting[i].layout);
    if (!r.is_ok()) return r.status().with_context("search: refining " + fitting[i].layout.to_string());
    top.emplace_back(std::move(r).value(), fitting[i]);
  }
  std::stable_sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
    return a.first.figures.tokens_per_s > b.first.figures.tokens_per_s;
  });
  for (size_t i = 0; i < top.size(); ++i) {
    fitting[i] = top[i].second;
    res.refined.push_back(std::move(top[i].first));
  }
  res.ranked = std::move(fitting);
  res.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

Status apply_search_fix(const std::string& text, SearchSpace* space) {
  SearchSpace& sp = *space;
  if (text.empty()) return Status::ok();
  std::stringstream ss(text);
  std::string item;
  std::set<std::string> seen;
  while (std::getline(ss, item, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos) return invalid_argument("--fix: '" + item + "' is not key=value (e.g. tp=8,pp=2)");
    std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    // As --layout: a key given twice is refused, not settled by the last one.
    if (!seen.insert(k).second) return invalid_argument("--fix: '" + k + "' is given twice in '" + text + "'; keep one");
    auto to_int = [&](int& field) -> Status {
      try {
        size_t used = 0;
        int x = std::stoi(v, &used);
        if (used != v.size() || x < 0) throw std::invalid_argument(v);
        field = x;
        return Status::ok();
      } catch (...) {
        return invalid_argument("--fix: " + k + "=" + v + " is not a non-negative integer");
      }
    };
    if (k == "dp") LOOM_RETURN_IF_ERROR(to_int(sp.fix_dp));
    else if (k == "tp") LOOM_RETURN_IF_ERROR(to_int(sp.fix_tp));
    else if (k == "pp") LOOM_RETURN_IF_ERROR(to_int(sp.fix_pp));
    else if (k == "ep") LOOM_RETURN_IF_ERROR(to_int(sp.fix_ep));
    else if (k == "cp") LOOM_RETURN_IF_ERROR(to_int(sp.fix_cp));
    else if (k == "etp") LOOM_RETURN_IF_ERROR(to_int(sp.fix_etp));
    else if (k == "micro") LOOM_RETURN_IF_ERROR(to_int(sp.fix_micro));
    else if (k == "zero") LOOM_RETURN_IF_ERROR(to_int(sp.fix_zero));
    else if (k == "v") LOOM_RETURN_IF_ERROR(to_int(sp.fix_v));
    else if (k == "recompute_layers") LOOM_RETURN_IF_ERROR(to_int(sp.fix_recompute_layers));
    else if (k == "recompute_modules") {
      auto mods = parse_recompute_modules(v);
      if (!mods.is_ok()) return invalid_argument("--fix: " + mods.status().message());
      sp.fix_recompute_modules = *mods;
    }
    else if (k == "sp" || k == "overlap_grad" || k == "overlap_param") {
      bool on;
      if (v == "1" || v == "true" || v == "on") on = true;
      else if (v == "0" || v == "false" || v == "off") on = false;
      else return invalid_argument("--fix: " + k + "=" + v + " must be 0 or 1");
      if (k == "sp") sp.fix_sp = on;
      else if (k == "overlap_grad") sp.overlap_grad_reduce = on;
      else {
        sp.overlap_param_gather = on;
        sp.overlap_param_zero_stages.clear();  // a pin holds for every ZeRO stage the search tries
      }
    }
    else if (k == "split") {
      if (v == "even") sp.try_uneven_ends = false;
      else if (v == "ends") sp.try_uneven_ends = true;
      else return invalid_argument("--fix: split=" + v + " must be even (the even split only) or ends (also one layer "
                                   "fewer on the last, or on the first and last, chunk)");
    } else if (k == "schedule") {
      LOOM_ASSIGN_OR_RETURN(Schedule s, parse_schedule(v));
      if (std::find(sp.schedules.begin(), sp.schedules.end(), s) == sp.schedules.end()) {
        std::string runs;
        for (Schedule x : sp.schedules) runs += std::string(runs.empty() ? "" : ", ") + schedule_name(x);
        return invalid_argument("--fix: schedule=" + v + " is not among the schedules of the modelled stack (" + runs +
                                ": Loom's executor, or the --framework's list)" +
                                (s == Schedule::kDualPipeV
                                     ? "; DualPipeV runs without --framework (Loom's executor) and under --framework "
                                       "torchtitan (or deepseek-v3, DeepSeek's DualPipe)"
                                     : ""));
      }
      sp.fix_schedule = s;
    } else if (k == "recompute") {
      LOOM_ASSIGN_OR_RETURN(Recompute r, parse_recompute(v));
      sp.fix_recompute = r;
    } else if (k == "cp_comm") {
      auto c = parse_cp_comm(v);
      if (!c.is_ok()) return invalid_argument("--fix: " + c.status().message());
      sp.fix_cp_comm = *c;
    } else {
      return invalid_argument("--fix: unknown key '" + k + "'; use dp, tp, pp, ep, etp, cp, micro, zero, v, sp, split, schedule, recompute, "
                              "recompute_layers, recompute_modules, overlap_grad, overlap_param, cp_comm");
    }
  }
  return Status::ok();
}

}  // namespace loom
