// detect_launch_env(): each launcher's variables, their precedence
// (torchrun -> Open MPI -> PMI -> Slurm -> single process), and malformed
// values falling through to the next launcher with a warning.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "exec/comm/communicator.h"

namespace loom::exec {
namespace {

const char* const kVars[] = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "PMI_LOCAL_RANK",
    "MPI_LOCALNRANKS",
    "PMI_LOCAL_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
};

// Clears every launcher variable for the test and restores the originals
// afterwards (this binary itself may run under mpirun or srun).
class LaunchEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_[v] = old ? std::optional<std::string>(old) : std::nullopt;
      unsetenv(v);
    }
  }
  void TearDown() override {
    for (auto& [name, value] : saved_) {
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  }
  static void set(const char* name, const char* value) { setenv(name, value, 1); }
  void set_torchrun(const char* r, const char* w, const char* lr, const char* lw) {
    set("RANK", r), set("WORLD_SIZE", w), set("LOCAL_RANK", lr), set("LOCAL_WORLD_SIZE", lw);
  }
  void set_ompi(const char* r, const char* w, const char* lr, const char* lw) {
    set("OMPI_COMM_WORLD_RANK", r), set("OMPI_COMM_WORLD_SIZE", w);
    set("OMPI_COMM_WORLD_LOCAL_RANK", lr), set("OMPI_COMM_WORLD_LOCAL_SIZE", lw);
  }
  void set_slurm(const char* r, const char* w, const char* lr, const char* per_node) {
    set("SLURM_PROCID", r), set("SLURM_NTASKS", w), set("SLURM_LOCALID", lr), set("SLURM_NTASKS_PER_NODE", per_node);
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

void expect_env(const LaunchEnv& e, const char* launcher, int rank, int world, int local_rank, int local_world) {
  EXPECT_EQ(e.launcher, launcher);
  EXPECT_EQ(e.rank, rank);
  EXPECT_EQ(e.world, world);
  EXPECT_EQ(e.local_rank, local_rank);
  EXPECT_EQ(e.local_world, local_world);
}

TEST_F(LaunchEnvTest, NoLauncherIsOneProcess) {
  LaunchEnv e = detect_launch_env();
  expect_env(e, "none", 0, 1, 0, 1);
  EXPECT_EQ(e.warning, "");
}

TEST_F(LaunchEnvTest, Torchrun) {
  set_torchrun("5", "16", "1", "4");
  LaunchEnv e = detect_launch_env();
  expect_env(e, "torchrun", 5, 16, 1, 4);
  EXPECT_EQ(e.warning, "");
}

TEST_F(LaunchEnvTest, OpenMpi) {
  set_ompi("3", "8", "3", "4");
  expect_env(detect_launch_env(), "openmpi", 3, 8, 3, 4);
}

TEST_F(LaunchEnvTest, PmiWithMpichLocalRank) {
  set("PMI_RANK", "6"), set("PMI_SIZE", "8"), set("MPI_LOCALRANKID", "2"), set("MPI_LOCALNRANKS", "4");
  expect_env(detect_launch_env(), "pmi", 6, 8, 2, 4);
}

TEST_F(LaunchEnvTest, PmiWithPmiLocalRankAndNoLocalSize) {
  // No local size: assume one node (local_world = world), keep the given local rank.
  set("PMI_RANK", "1"), set("PMI_SIZE", "2"), set("PMI_LOCAL_RANK", "1");
  expect_env(detect_launch_env(), "pmi", 1, 2, 1, 2);
}

TEST_F(LaunchEnvTest, Slurm) {
  set_slurm("9", "16", "1", "8");
  expect_env(detect_launch_env(), "slurm", 9, 16, 1, 8);
}

TEST_F(LaunchEnvTest, SlurmRepeatedTasksPerNode) {
  set_slurm("5", "8", "1", "4(x2)");
  expect_env(detect_launch_env(), "slurm", 5, 8, 1, 4);
}

TEST_F(LaunchEnvTest, SlurmHeterogeneousTasksPerNodeIsIgnored) {
  set_slurm("2", "7", "2", "3(x2),1");
  LaunchEnv e = detect_launch_env();
  expect_env(e, "none", 0, 1, 0, 1);
  EXPECT_NE(e.warning.find("SLURM_NTASKS_PER_NODE"), std::string::npos) << e.warning;
}

TEST_F(LaunchEnvTest, MissingLocalVariablesAssumeOneNode) {
  set("RANK", "2"), set("WORLD_SIZE", "4");
  expect_env(detect_launch_env(), "torchrun", 2, 4, 2, 4);
}

TEST_F(LaunchEnvTest, MissingLocalRankIsDerivedFromLocalWorld) {
  set("SLURM_PROCID", "6"), set("SLURM_NTASKS", "8"), set("SLURM_NTASKS_PER_NODE", "4");
  expect_env(detect_launch_env(), "slurm", 6, 8, 2, 4);
}

TEST_F(LaunchEnvTest, EmptyValueCountsAsUnset) {
  set("RANK", ""), set("WORLD_SIZE", "");
  set_ompi("1", "2", "1", "2");
  LaunchEnv e = detect_launch_env();
  expect_env(e, "openmpi", 1, 2, 1, 2);
  EXPECT_EQ(e.warning, "");
}

TEST_F(LaunchEnvTest, PrecedenceTorchrunOverEverything) {
  set_torchrun("1", "2", "1", "2");
  set_ompi("3", "4", "3", "4");
  set("PMI_RANK", "5"), set("PMI_SIZE", "6");
  set_slurm("7", "8", "7", "8");
  expect_env(detect_launch_env(), "torchrun", 1, 2, 1, 2);
}

TEST_F(LaunchEnvTest, PrecedenceOpenMpiOverPmiAndSlurm) {
  set_ompi("3", "4", "3", "4");
  set("PMI_RANK", "5"), set("PMI_SIZE", "6");
  set_slurm("7", "8", "7", "8");
  expect_env(detect_launch_env(), "openmpi", 3, 4, 3, 4);
}

TEST_F(LaunchEnvTest, PrecedencePmiOverSlurm) {
  set("PMI_RANK", "5"), set("PMI_SIZE", "6");
  set_slurm("7", "8", "7", "8");
  expect_env(detect_launch_env(), "pmi", 5, 6, 5, 6);
}

TEST_F(LaunchEnvTest, NonNumericRankFallsThroughToNextLauncher) {
  set_torchrun("abc", "4", "0", "4");
  set_ompi("1", "2", "1", "2");
  LaunchEnv e = detect_launch_env();
  expect_env(e, "openmpi", 1, 2, 1, 2);
  EXPECT_NE(e.warning.find("torchrun"), std::string::npos) << e.warning;
  EXPECT_NE(e.warning.find("RANK=\"abc\""), std::string::npos) << e.warning;
}

TEST_F(LaunchEnvTest, RankNotBelowWorldFallsThrough) {
  set_torchrun("4", "4", "0", "4");
  set_slurm("3", "4", "3", "4");
  LaunchEnv e = detect_launch_env();
  expect_env(e, "slurm", 3, 4, 3, 4);
  EXPECT_NE(e.warning.find("not below WORLD_SIZE=4"), std::string::npos) << e.warning;
}

TEST_F(LaunchEnvTest, MalformedValuesOfEveryKindGiveOneProcess) {
  const char* bad[][4] = {
      {"-1", "4", "0", "4"},           // negative rank
      {"1", "0", "0", "1"},            // empty world
      {"1x", "4", "0", "4"},           // trailing garbage
      {" 1", "4", "0", "4"},           // leading space
      {"+1", "4", "0", "4"},           // sign
      {"1", "99999999999", "0", "4"},  // overflows int
      {"1", "4", "4", "4"},            // local rank >= local world
      {"1", "4", "0", "8"},            // local world > world
      {"1", "4", "zero", "4"},         // non-numeric local rank
      {"1.0", "4", "0", "4"},          // not an integer
  };
  for (auto& b : bad) {
    set_torchrun(b[0], b[1], b[2], b[3]);
    LaunchEnv e = detect_launch_env();
    SCOPED_TRACE(std::string(b[0]) + "/" + b[1] + "/" + b[2] + "/" + b[3]);
    expect_env(e, "none", 0, 1, 0, 1);
    EXPECT_NE(e.warning.find("ignored torchrun variables"), std::string::npos) << e.warning;
  }
}

TEST_F(LaunchEnvTest, OnlyOneOfRankAndWorldIsIgnored) {
  set("RANK", "3");  // e.g. left over in the shell, no WORLD_SIZE
  LaunchEnv e = detect_launch_env();
  expect_env(e, "none", 0, 1, 0, 1);
  EXPECT_NE(e.warning.find("RANK is set but WORLD_SIZE is not"), std::string::npos) << e.warning;
}

TEST_F(LaunchEnvTest, EveryMalformedLauncherIsReported) {
  set_torchrun("x", "2", "0", "2");
  set_ompi("2", "2", "0", "2");
  set("PMI_RANK", "0"), set("PMI_SIZE", "-3");
  set_slurm("0", "2", "0", "2");
  LaunchEnv e = detect_launch_env();
  expect_env(e, "slurm", 0, 2, 0, 2);
  EXPECT_NE(e.warning.find("torchrun"), std::string::npos) << e.warning;
  EXPECT_NE(e.warning.find("openmpi"), std::string::npos) << e.warning;
  EXPECT_NE(e.warning.find("pmi"), std::string::npos) << e.warning;
  EXPECT_EQ(e.warning.find("slurm"), std::string::npos) << e.warning;
}

}  // namespace
}  // namespace loom::exec
