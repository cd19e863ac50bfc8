// The one rule for outputs (core/output_file.h), through write_text_file, the
// writer every JSON/text output uses (issue #14, finding 5).
#include "core/output_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

class OutputFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("loom_out_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string slurp(const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string dir_;
};

TEST_F(OutputFile, WritesThroughASymlinkToItsTarget) {
  fs::create_directories(dir_ + "/real");
  { std::ofstream(dir_ + "/real/t.json") << "old"; }
  fs::create_symlink("real/t.json", dir_ + "/link.json");
  ASSERT_TRUE(write_text_file(dir_ + "/link.json", "new").is_ok());
  EXPECT_TRUE(fs::is_symlink(dir_ + "/link.json"));
  EXPECT_EQ(slurp(dir_ + "/real/t.json"), "new");
  // A dangling link creates its target.
  fs::create_symlink("real/fresh.json", dir_ + "/dangling.json");
  ASSERT_TRUE(write_text_file(dir_ + "/dangling.json", "x").is_ok());
  EXPECT_TRUE(fs::is_symlink(dir_ + "/dangling.json"));
  EXPECT_EQ(slurp(dir_ + "/real/fresh.json"), "x");
  // Nothing temporary is left next to the target.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_ + "/real")) files += e.is_regular_file();
  EXPECT_EQ(files, 2);
}

TEST_F(OutputFile, RefusesAFifoADirectoryAndADevice) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  Status s = write_text_file(fifo, "x");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("FIFO"), std::string::npos) << s.message();
  struct stat st{};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  // through a symlink too
  fs::create_symlink("fifo", dir_ + "/to_fifo");
  EXPECT_EQ(write_text_file(dir_ + "/to_fifo", "x").code(), StatusCode::kInvalidArgument);
  s = write_text_file(dir_, "x");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("directory"), std::string::npos) << s.message();
  s = check_output_path("/dev/null", "--out");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("character device"), std::string::npos) << s.message();
}

TEST_F(OutputFile, ChecksUpFront) {
  EXPECT_TRUE(check_output_path(dir_ + "/new.json", "--record").is_ok());
  Status s = check_output_path(dir_ + "/missing/r.json", "--record");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--record"), std::string::npos);
  EXPECT_NE(s.message().find("does not exist"), std::string::npos) << s.message();
  EXPECT_TRUE(check_output_path("-", "--record").is_ok());
  EXPECT_FALSE(check_output_path("-", "--out", false).is_ok());
  { std::ofstream(dir_ + "/file") << "x"; }
  EXPECT_TRUE(check_output_dir(dir_ + "/a/b/ck", "--ckpt-dir").is_ok());
  s = check_output_dir(dir_ + "/file/ck", "--ckpt-dir");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not a directory"), std::string::npos) << s.message();
}

TEST_F(OutputFile, RefusesAPathInsideTheDirectoryRead) {
  fs::create_directories(dir_ + "/ck/step_000004");
  fs::create_symlink("ck/step_000004", dir_ + "/alias");
  EXPECT_FALSE(refuse_output_inside(dir_ + "/ck/step_000004/metadata.json", dir_ + "/ck", "--out").is_ok());
  EXPECT_FALSE(refuse_output_inside(dir_ + "/alias/m.safetensors", dir_ + "/ck", "--out").is_ok());
  EXPECT_FALSE(refuse_output_inside(dir_ + "/ck/../ck/latest", dir_ + "/ck", "--out").is_ok());
  Status s = refuse_output_inside(dir_ + "/ck/x", dir_ + "/ck", "--out");
  EXPECT_NE(s.message().find("inside the checkpoint"), std::string::npos) << s.message();
  EXPECT_TRUE(refuse_output_inside(dir_ + "/ck2/m.safetensors", dir_ + "/ck", "--out").is_ok());
  EXPECT_TRUE(refuse_output_inside(dir_ + "/m.safetensors", dir_ + "/ck", "--out").is_ok());
}

TEST_F(OutputFile, FileSizeLimitIsNamedAndNothingIsLeft) {
  // In a child: ulimit -f (RLIMIT_FSIZE) 4 KiB, SIGXFSZ ignored as the loom executable does.
  const std::string path = dir_ + "/big.json";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ignore_file_size_signal();
    struct rlimit rl{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &rl);
    Status s = write_text_file(path, std::string(100000, 'x'));
    const bool named = s.message().find("file size limit (ulimit -f) reached writing") != std::string::npos;
    ::_exit(!s.is_ok() && named ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir_)) << "a temporary file was left";
}

TEST_F(OutputFile, DashIsStandardOutput) {
  testing::internal::CaptureStdout();
  ASSERT_TRUE(write_text_file("-", "{\"a\":1}\n").is_ok());
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "{\"a\":1}\n");
  EXPECT_FALSE(fs::exists("-"));
}

}  // namespace
}  // namespace loom
