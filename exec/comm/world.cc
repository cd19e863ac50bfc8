#include "exec/comm/world.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <utility>

#include "core/resources.h"
#include "exec/comm/mpi_plugin.h"
#include "exec/comm/self_communicator.h"
#include "exec/comm/tcp_communicator.h"

namespace loom::exec {

namespace fs = std::filesystem;

World::World(std::unique_ptr<Communicator> comm, std::string how, std::function<void()> finalize)
    : comm_(std::move(comm)), how_(std::move(how)), finalize_(std::move(finalize)) {}
World::World(World&& o) noexcept
    : comm_(std::move(o.comm_)), how_(std::move(o.how_)), finalize_(std::exchange(o.finalize_, nullptr)) {}
World& World::operator=(World&& o) noexcept {
  if (this != &o) {
    comm_.reset();
    if (finalize_) std::exchange(finalize_, nullptr)();
    comm_ = std::move(o.comm_);
    how_ = std::move(o.how_);
    finalize_ = std::exchange(o.finalize_, nullptr);
  }
  return *this;
}
World::~World() {
  comm_.reset();
  if (finalize_) std::exchange(finalize_, nullptr)();
}

namespace {

std::string getenv_or(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

// An MPI launcher's own rank variables (mpirun, or srun with PMI/PMIx).
bool launched_by_mpi(const LaunchEnv& env) {
  if (env.launcher == "openmpi" || env.launcher == "pmi") return true;
  return !getenv_or("PMIX_RANK").empty() || !getenv_or("PMI_RANK").empty() ||
         !getenv_or("OMPI_COMM_WORLD_RANK").empty();
}

// The plugin's table, or why it could not be loaded.
Result<const MpiPlugin*> load_mpi_plugin() {
  static const MpiPlugin* loaded = nullptr;
  if (loaded != nullptr) return loaded;
  const std::string path = mpi_plugin_path();
  std::error_code ec;
  if (!fs::exists(path, ec))
    return not_found("the MPI plugin " + path + " is not installed (this loom was built without MPI, or is a bundle)");
  // RTLD_GLOBAL: Open MPI loads its own components, which need libmpi's symbols.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* err = ::dlerror();
    return unsupported("the MPI plugin " + path + " does not load: " + (err ? err : "unknown error") +
                       " (is Open MPI installed on this node?)");
  }
  using Entry = const MpiPlugin* (*)();
  auto entry = reinterpret_cast<Entry>(::dlsym(handle, "loom_mpi_plugin"));
  if (entry == nullptr) return internal_error(path + " has no loom_mpi_plugin symbol: not a Loom MPI plugin");
  const MpiPlugin* plugin = entry();
  if (plugin == nullptr || plugin->abi != kLoomMpiPluginAbi || plugin->world == nullptr)
    return internal_error(path + " is from another Loom build (plugin ABI mismatch); reinstall Loom");
  loaded = plugin;  // never unloaded: communicators' code lives there
  return plugin;
}

Result<World> open_mpi(const MpiPlugin* plugin, int* argc, char*** argv, const LaunchEnv& env,
                       const WorldOptions& options) {
  MpiOptions mo;
  mo.timeout_s = options.timeout_s;
  LOOM_ASSIGN_OR_RETURN(auto comm, plugin->world(argc, argv, mo));
  // A launcher that is not MPI's starts N singletons that each see a world of
  // 1: refuse rather than run N independent trainings.
  if (env.world > 1 && comm->size() != env.world) {
    const int seen = comm->size();
    comm.reset();
    plugin->finalize();
    return invalid_argument("the " + env.launcher + " launcher started " + std::to_string(env.world) +
                            " processes but MPI sees a world of " + std::to_string(seen) +
                            "; launch with mpirun (or srun with MPI/PMIx support), or set LOOM_LAUNCH=tcp");
  }
  return World(std::move(comm), "MPI (" + env.launcher + ")", plugin->finalize);
}

Result<World> open_tcp(const LaunchEnv& env, const WorldOptions& options) {
  LOOM_ASSIGN_OR_RETURN(RendezvousAddress addr, rendezvous_address(env));
  TcpOptions to;
  to.rank = env.rank;
  to.world = env.world;
  to.master_addr = addr.host;
  to.master_port = addr.port;
  to.timeout_s = options.timeout_s;
  to.rendezvous_timeout_s = options.rendezvous_timeout_s;
  // Two jobs that share a MASTER_PORT never join each other: the launcher's
  // job id, when it gives one, must match.
  to.job_id = getenv_or("TORCHELASTIC_RUN_ID", getenv_or("SLURM_JOB_ID"));
  LOOM_ASSIGN_OR_RETURN(auto comm, tcp_world(to));
  return World(std::move(comm), "TCP rendezvous at " + addr.host + ":" + std::to_string(addr.port) + " (" +
                                    env.launcher + ")",
               nullptr);
}

}  // namespace

std::string mpi_plugin_path() {
  if (std::string p = getenv_or("LOOM_MPI_PLUGIN"); !p.empty()) return p;
  std::string dir = executable_dir();
  if (dir.empty()) return "libloom_mpi.so";
  return (fs::path(dir) / ".." / "lib" / "loom" / "libloom_mpi.so").lexically_normal().string();
}

std::string first_slurm_host(const std::string& nodelist) {
  // The first comma-separated item at bracket depth 0, each bracketed range
  // list replaced by its first value; text after a bracket is kept:
  // "a[1-2]b" -> "a1b", "rack[3-4]-n[07,09]" -> "rack3-n07".
  std::string host;
  int depth = 0;
  bool first_value_done = false;  // inside a bracket: its first value is complete
  for (char c : nodelist) {
    if (c == '[') {
      ++depth;
      first_value_done = false;
    } else if (c == ']') {
      if (depth > 0) --depth;
    } else if (depth == 0) {
      if (c == ',') break;
      host += c;
    } else if (!first_value_done) {
      if (c == ',' || c == '-') {
        first_value_done = true;
      } else {
        host += c;
      }
    }
  }
  return host;
}

Result<RendezvousAddress> rendezvous_address(const LaunchEnv& env) {
  RendezvousAddress addr;
  if (std::string port = getenv_or("MASTER_PORT"); !port.empty()) {
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    if (end == port.c_str() || *end != '\0' || p < 1 || p > 65535)
      return invalid_argument("MASTER_PORT=\"" + port + "\" is not a TCP port (1-65535)");
    addr.port = int(p);
  }
  addr.host = getenv_or("MASTER_ADDR");
  // srun started this process itself: as the Slurm launcher, or with an MPI
  // layer whose ranks are Slurm's (srun --mpi=pmi2 sets PMI_RANK, detected
  // first, and often no local size, so local_world below is only a bound).
  const bool srun_task = env.launcher == "slurm" ||
                         (getenv_or("SLURM_PROCID") == std::to_string(env.rank) &&
                          getenv_or("SLURM_NTASKS") == std::to_string(env.world));
  if (addr.host.empty() && srun_task) {
    std::string list = getenv_or("SLURM_STEP_NODELIST", getenv_or("SLURM_JOB_NODELIST"));
    if (!list.empty()) addr.host = first_slurm_host(list);
  }
  if (addr.host.empty()) {
    if (env.local_world < env.world)
      return invalid_argument("the " + env.launcher + " launch spans several nodes (" + std::to_string(env.world) +
                              " ranks, " + std::to_string(env.local_world) +
                              " on this node) but MASTER_ADDR is not set: set MASTER_ADDR to the host of rank 0 "
                              "(and MASTER_PORT to a free port), as torchrun does");
    addr.host = "127.0.0.1";
  }
  return addr;
}

Result<World> open_world(int* argc, char*** argv, const WorldOptions& options) {
  const LaunchEnv env = detect_launch_env();
  const std::string forced = getenv_or("LOOM_LAUNCH");
  if (!forced.empty() && forced != "mpi" && forced != "tcp" && forced != "single")
    return invalid_argument("LOOM_LAUNCH=\"" + forced + "\" is not one of mpi, tcp, single");
  if (forced == "single" || (forced.empty() && env.world == 1 && !launched_by_mpi(env))) {
    if (env.world > 1)
      return invalid_argument("LOOM_LAUNCH=single but the " + env.launcher + " launcher started " +
                              std::to_string(env.world) + " ranks");
    return World(make_self_communicator("world"), "single process", nullptr);
  }
  if (forced == "tcp") return open_tcp(env, options);
  if (forced == "mpi" || launched_by_mpi(env)) {
    auto plugin = load_mpi_plugin();
    if (plugin.is_ok()) return open_mpi(*plugin, argc, argv, env, options);
    if (forced == "mpi") return plugin.status();
    // An MPI launcher without the plugin (a bundle on a node with mpirun):
    // its rank variables are enough for the TCP rendezvous.
    if (env.world == 1) return World(make_self_communicator("world"), "single process", nullptr);
    auto tcp = open_tcp(env, options);
    if (!tcp.is_ok()) return tcp.status().with_context(plugin.status().message() + "; the TCP rendezvous failed too");
    return tcp;
  }
  return open_tcp(env, options);
}

}  // namespace loom::exec
