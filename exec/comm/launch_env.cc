// detect_launch_env(): where the launcher put this process.
//
// Sources, in order (conventions.md §4): torchrun -> Open MPI -> PMI
// (MPICH/Hydra/Cray/Intel MPI) -> Slurm -> single process. A source counts as
// present when its rank or world variable is set to a non-empty value (an
// empty value, as left by `export RANK=`, counts as unset).
//
// Malformed values never crash and never produce a half-valid answer: a
// present source whose values do not parse as decimal integers, or are out of
// range (world < 1, rank >= world, local_rank >= local_world,
// local_world > world, only one of rank/world set), is skipped as a whole, the
// next source is tried, and LaunchEnv::warning says what was ignored and why.
// Falling through rather than failing keeps a stray variable (RANK is a common
// name) from breaking a run that another launcher describes correctly; if it
// was the real launcher, the runtime's world-size check against the
// communicator catches the mismatch with a clear message.
//
// Absent local values (PMI and some Slurm setups do not export them):
//   local_world = world when unknown (an upper bound, exact on one node);
//   local_rank  = rank % local_world when local_world is known, else rank
//                 (block placement, as mpirun and srun place by default).
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "exec/comm/communicator.h"

namespace loom::exec {
namespace {

// One launcher's variable names. Each local variable has alternatives (first
// set one wins), e.g. PMI's MPI_LOCALRANKID / PMI_LOCAL_RANK.
struct Source {
  const char* launcher;
  const char* rank_var;
  const char* world_var;
  const char* local_rank_vars[2];
  const char* local_world_vars[2];
};

constexpr Source kSources[] = {
    {"torchrun", "RANK", "WORLD_SIZE", {"LOCAL_RANK", nullptr}, {"LOCAL_WORLD_SIZE", nullptr}},
    {"openmpi",
     "OMPI_COMM_WORLD_RANK",
     "OMPI_COMM_WORLD_SIZE",
     {"OMPI_COMM_WORLD_LOCAL_RANK", nullptr},
     {"OMPI_COMM_WORLD_LOCAL_SIZE", nullptr}},
    {"pmi", "PMI_RANK", "PMI_SIZE", {"MPI_LOCALRANKID", "PMI_LOCAL_RANK"}, {"MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"}},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", {"SLURM_LOCALID", nullptr}, {"SLURM_NTASKS_PER_NODE", nullptr}},
};

// The value of `name`, or nullopt when unset or empty.
std::optional<std::string> get(const char* name) {
  if (name == nullptr) return std::nullopt;
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// A non-negative decimal integer that fits in int, nothing else ("3x", "-1",
// " 2", "99999999999" are rejected).
std::optional<int> parse_int(std::string_view s) {
  int value = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, value);
  if (ec != std::errc() || ptr != end || value < 0 || s.empty() || s[0] == '-' || s[0] == '+') return std::nullopt;
  return value;
}

// SLURM_NTASKS_PER_NODE is "4", or "4(x2)" when every node has 4 tasks; a
// heterogeneous list such as "2(x3),1" has no single answer.
std::optional<int> parse_tasks_per_node(std::string_view s) {
  size_t paren = s.find('(');
  if (paren != std::string_view::npos) {
    if (s.find(',') != std::string_view::npos || s.back() != ')' || s.substr(paren, 2) != "(x") return std::nullopt;
    if (!parse_int(s.substr(paren + 2, s.size() - paren - 3))) return std::nullopt;
    s = s.substr(0, paren);
  }
  return parse_int(s);
}

struct Lookup {
  const char* name = nullptr;
  std::optional<std::string> value;
};

Lookup first_set(const char* const (&names)[2]) {
  for (const char* n : names) {
    if (auto v = get(n)) return {n, v};
  }
  return {};
}

// Fills `env` from `src` and returns "" when the source is present and valid;
// returns why it was ignored otherwise ("absent" when none of it is set).
std::string try_source(const Source& src, LaunchEnv* env) {
  auto rank_s = get(src.rank_var);
  auto world_s = get(src.world_var);
  if (!rank_s && !world_s) return "absent";
  if (!rank_s) return std::string(src.world_var) + " is set but " + src.rank_var + " is not";
  if (!world_s) return std::string(src.rank_var) + " is set but " + src.world_var + " is not";

  auto bad = [](const char* name, const std::string& value, const char* why) {
    return std::string(name) + "=\"" + value + "\" " + why;
  };
  auto rank = parse_int(*rank_s);
  if (!rank) return bad(src.rank_var, *rank_s, "is not a non-negative integer");
  auto world = parse_int(*world_s);
  if (!world) return bad(src.world_var, *world_s, "is not a non-negative integer");
  if (*world < 1) return bad(src.world_var, *world_s, "must be at least 1");
  if (*rank >= *world) {
    return bad(src.rank_var, *rank_s, "is not below ") + src.world_var + "=" + *world_s;
  }

  Lookup lw = first_set(src.local_world_vars);
  int local_world = *world;
  if (lw.value) {
    bool slurm = std::string_view(src.launcher) == "slurm";
    auto v = slurm ? parse_tasks_per_node(*lw.value) : parse_int(*lw.value);
    if (!v) return bad(lw.name, *lw.value, "is not a positive integer");
    if (*v < 1 || *v > *world) return bad(lw.name, *lw.value, "must be in [1, world]");
    local_world = *v;
  }
  Lookup lr = first_set(src.local_rank_vars);
  int local_rank = lw.value ? *rank % local_world : *rank;
  if (lr.value) {
    auto v = parse_int(*lr.value);
    if (!v) return bad(lr.name, *lr.value, "is not a non-negative integer");
    if (*v >= local_world) return bad(lr.name, *lr.value, "is not below the local world size");
    local_rank = *v;
  }

  env->rank = *rank;
  env->world = *world;
  env->local_rank = local_rank;
  env->local_world = local_world;
  env->launcher = src.launcher;
  return "";
}

}  // namespace

LaunchEnv detect_launch_env() {
  LaunchEnv env;
  for (const Source& src : kSources) {
    std::string why = try_source(src, &env);
    if (why.empty()) return env;
    if (why != "absent") {
      if (!env.warning.empty()) env.warning += "; ";
      env.warning += std::string("ignored ") + src.launcher + " variables: " + why;
    }
  }
  return env;  // single process: the defaults, plus any warning
}

}  // namespace loom::exec
