// open_world()'s TCP rendezvous address (exec/comm/world.h): the first host
// of a Slurm node list, when the node list applies, and MASTER_PORT checks.
// Reads and sets environment variables (restored after each test).
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "exec/comm/world.h"

namespace loom::exec {
namespace {

// Sets (value) or unsets (nullopt) variables for one scope, then restores them.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, std::optional<std::string>>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      if (value) {
        ::setenv(name, value->c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(TcpCommWorld, FirstSlurmHost) {
  EXPECT_EQ(first_slurm_host("gpu[003-010,012],login1"), "gpu003");
  EXPECT_EQ(first_slurm_host("node1"), "node1");
  EXPECT_EQ(first_slurm_host("node1,node2"), "node1");
  EXPECT_EQ(first_slurm_host("gpu[012,003-010]"), "gpu012");
  // Text after a bracket belongs to the name.
  EXPECT_EQ(first_slurm_host("a[1-2]b"), "a1b");
  EXPECT_EQ(first_slurm_host("a[1-2]b,c3"), "a1b");
  EXPECT_EQ(first_slurm_host("rack[3-4]-n[07,09]"), "rack3-n07");
  EXPECT_EQ(first_slurm_host(""), "");
}

LaunchEnv env_of(const char* launcher, int rank, int world, int local_world) {
  LaunchEnv e;
  e.launcher = launcher;
  e.rank = rank;
  e.world = world;
  e.local_world = local_world;
  e.local_rank = rank % local_world;
  return e;
}

TEST(TcpCommWorld, SlurmNodeListGivesTheAddress) {
  ScopedEnv env({{"MASTER_ADDR", std::nullopt},
                 {"MASTER_PORT", std::nullopt},
                 {"SLURM_PROCID", "1"},
                 {"SLURM_NTASKS", "4"},
                 {"SLURM_STEP_NODELIST", "n[07-08]x"},
                 {"SLURM_JOB_NODELIST", "n[01-08]x"}});
  auto a = rendezvous_address(env_of("slurm", 1, 4, 2));
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->host, "n07x");
  EXPECT_EQ(a->port, 29500);
  // srun --mpi=pmi2 sets PMI_RANK / PMI_SIZE (detected before Slurm's) and no
  // local size: the ranks are still srun's, on the step's nodes.
  a = rendezvous_address(env_of("pmi", 1, 4, 4));
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->host, "n07x");
  // Ranks that are not srun's (mpirun inside an allocation: SLURM_PROCID is
  // its daemon's): the node list says nothing about rank 0.
  a = rendezvous_address(env_of("openmpi", 2, 4, 4));
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_FALSE(rendezvous_address(env_of("openmpi", 2, 4, 2)).is_ok());  // several nodes: MASTER_ADDR needed
}

TEST(TcpCommWorld, MasterAddrAndPort) {
  ScopedEnv env({{"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29511"}, {"SLURM_PROCID", std::nullopt}});
  auto a = rendezvous_address(env_of("torchrun", 0, 2, 1));
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->host, "10.1.2.3");
  EXPECT_EQ(a->port, 29511);
  for (const char* bad : {"0", "65536", "29x", "-1", "x"}) {
    ScopedEnv port({{"MASTER_PORT", bad}});
    auto r = rendezvous_address(env_of("torchrun", 0, 2, 1));
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find("MASTER_PORT"), std::string::npos) << r.status().to_string();
  }
}

}  // namespace
}  // namespace loom::exec
