// Checkpoints: round trip across simulated ranks, async save, atomic commit,
// retention, corruption and disk-full handling (docs/formats/checkpoint.md).
#include "exec/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace loom::ckpt {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  auto p = fs::temp_directory_path() / ("loom_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

float value(int tensor, int64_t i) { return static_cast<float>(tensor * 1000 + i) + 0.25f; }

// Rank `rank` of 2: rows [rank*R/2, (rank+1)*R/2) of w (6x4), exp_avg/w likewise,
// b (10) split 4|6, u (3x8) split by columns 5|3.
SaveRequest request(int64_t step, int rank) {
  SaveRequest r;
  r.step = step;
  auto rows = [&](const std::string& name, int id, int64_t R, int64_t C) {
    TensorSlice s{name, {R, C}, {rank * R / 2, 0}, {R / 2, C}, {}};
    for (int64_t i = 0; i < R / 2; ++i)
      for (int64_t j = 0; j < C; ++j) s.data.push_back(value(id, (s.offset[0] + i) * C + j));
    return s;
  };
  r.model.push_back(rows("w", 1, 6, 4));
  TensorSlice b{"b", {10}, {rank ? 4 : 0}, {rank ? 6 : 4}, {}};
  for (int64_t i = 0; i < b.extent[0]; ++i) b.data.push_back(value(2, b.offset[0] + i));
  r.model.push_back(b);
  TensorSlice u{"u", {3, 8}, {0, rank ? 5 : 0}, {3, rank ? 3 : 5}, {}};
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < u.extent[1]; ++j) u.data.push_back(value(3, i * 8 + u.offset[1] + j));
  r.model.push_back(u);
  r.optimizer.push_back(rows("exp_avg/w", 4, 6, 4));
  r.training_state_json = "{\"rank\":" + std::to_string(rank) + ",\"step\":" + std::to_string(step) + "}";
  return r;
}

CheckpointOptions sync_opts(const std::string& dir) {
  CheckpointOptions o;
  o.dir = dir;
  o.async = false;
  o.commit_timeout_s = 20;
  return o;
}

void save_two_ranks(const CheckpointOptions& o, int64_t step) {
  auto c0 = Checkpointer::create(o, 0, 2, R"({"model_config":{"vocab_size":7}})");
  auto c1 = Checkpointer::create(o, 1, 2, "{}");
  ASSERT_TRUE(c0.is_ok()) << c0.status().to_string();
  ASSERT_TRUE(c1.is_ok()) << c1.status().to_string();
  Status s0, s1;
  std::thread t0([&] { s0 = (*c0)->save(request(step, 0)); });
  std::thread t1([&] { s1 = (*c1)->save(request(step, 1)); });
  t0.join();
  t1.join();
  ASSERT_TRUE(s0.is_ok()) << s0.to_string();
  ASSERT_TRUE(s1.is_ok()) << s1.to_string();
}

// World 1: a single full tensor, so single-rank tests stay short.
Status save_one(const CheckpointOptions& o, int64_t step, bool light = false, int64_t n = 16) {
  auto c = Checkpointer::create(o, 0, 1, "{}");
  if (!c.is_ok()) return c.status();
  SaveRequest r;
  r.step = step;
  r.light = light;
  if (!light) {
    TensorSlice s{"t", {n}, {0}, {n}, std::vector<float>(static_cast<size_t>(n))};
    for (int64_t i = 0; i < n; ++i) s.data[i] = value(static_cast<int>(step), i);
    r.model.push_back(s);
    r.optimizer.push_back(s);
  }
  r.training_state_json = "{}";
  LOOM_RETURN_IF_ERROR((*c)->save(std::move(r)));
  return (*c)->wait();
}

std::string latest_of(const std::string& dir) {
  std::ifstream f(dir + "/latest");
  std::string s;
  f >> s;
  return s;
}

TEST(Checkpoint, RoundTripTwoRanksAndRectanglesAcrossSlices) {
  const std::string dir = fresh_dir("roundtrip");
  save_two_ranks(sync_opts(dir), 10);
  EXPECT_EQ(latest_of(dir), "step_000010");
  auto r = CheckpointReader::open(dir);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->step(), 10);
  EXPECT_EQ((*r)->world_size(), 2);
  EXPECT_TRUE((*r)->has_model());
  EXPECT_EQ((*r)->tensor_names(false), (std::vector<std::string>{"b", "u", "w"}));
  EXPECT_EQ((*r)->tensor_names(true), (std::vector<std::string>{"exp_avg/w"}));
  EXPECT_EQ(*(*r)->global_shape("w", false), (std::vector<int64_t>{6, 4}));
  EXPECT_NE((*r)->metadata_json().find("vocab_size"), std::string::npos);

  // Rows 1..4, columns 1..2 of w: rows 1-2 from rank 0, rows 3-4 from rank 1.
  std::vector<float> out(4 * 2, -1.f);
  ASSERT_TRUE((*r)->read("w", false, {1, 1}, {4, 2}, out.data()).is_ok());
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 2; ++j) EXPECT_EQ(out[i * 2 + j], value(1, (1 + i) * 4 + 1 + j)) << i << "," << j;
  // u split by columns: columns 3..7 of rows 1..2.
  out.assign(2 * 5, -1.f);
  ASSERT_TRUE((*r)->read("u", false, {1, 3}, {2, 5}, out.data()).is_ok());
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(out[i * 5 + j], value(3, (1 + i) * 8 + 3 + j));
  out.assign(10, -1.f);
  ASSERT_TRUE((*r)->read("b", false, {0}, {10}, out.data()).is_ok());
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(out[i], value(2, i));
  out.assign(24, -1.f);
  ASSERT_TRUE((*r)->read("exp_avg/w", true, {0, 0}, {6, 4}, out.data()).is_ok());
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(out[i], value(4, i));
  EXPECT_EQ(*(*r)->training_state(1), "{\"rank\":1,\"step\":10}");
  EXPECT_FALSE((*r)->read("w", false, {5, 0}, {2, 4}, out.data()).is_ok());  // outside
  EXPECT_FALSE((*r)->read("nope", false, {0}, {1}, out.data()).is_ok());
  EXPECT_TRUE(verify_checkpoint(dir).is_ok());
}

TEST(Checkpoint, UncoveredElementIsAnError) {
  const std::string dir = fresh_dir("hole");
  auto c = Checkpointer::create(sync_opts(dir), 0, 1, "{}");
  ASSERT_TRUE(c.is_ok());
  SaveRequest r;
  r.step = 1;
  r.model.push_back({"w", {4, 2}, {0, 0}, {2, 2}, {1, 2, 3, 4}});  // rows 2-3 never saved
  ASSERT_TRUE((*c)->save(std::move(r)).is_ok());
  auto rd = CheckpointReader::open(dir);
  ASSERT_TRUE(rd.is_ok());
  std::vector<float> out(8);
  Status s = (*rd)->read("w", false, {0, 0}, {4, 2}, out.data());
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("element (2, 0)"), std::string::npos) << s.message();
  EXPECT_TRUE((*rd)->read("w", false, {0, 0}, {2, 2}, out.data()).is_ok());
}

TEST(Checkpoint, AsyncSaveReturnsBeforeTheWriteAndWaitCompletesIt) {
  const std::string dir = fresh_dir("async");
  CheckpointOptions o = sync_opts(dir);
  o.async = true;
  auto c = Checkpointer::create(o, 0, 1, "{}");
  ASSERT_TRUE(c.is_ok());
  SaveRequest r;
  r.step = 5;
  const int64_t n = 8 << 20;  // 32 MB: takes far longer to write, fsync and hash than save() to return
  r.model.push_back({"big", {n}, {0}, {n}, std::vector<float>(static_cast<size_t>(n), 1.5f)});
  ASSERT_TRUE((*c)->save(std::move(r)).is_ok());
  EXPECT_FALSE(fs::exists(dir + "/step_000005/metadata.json"));
  ASSERT_TRUE((*c)->wait().is_ok());
  EXPECT_TRUE(fs::exists(dir + "/step_000005/metadata.json"));
  EXPECT_EQ(latest_of(dir), "step_000005");
  EXPECT_TRUE((*c)->wait().is_ok());  // idle
}

TEST(Checkpoint, AsyncErrorIsReturnedByTheNextCall) {
  const std::string dir = fresh_dir("asyncerr");
  CheckpointOptions o = sync_opts(dir);
  o.async = true;
  auto c = Checkpointer::create(o, 0, 1, "{}");
  ASSERT_TRUE(c.is_ok());
  SaveRequest r;
  r.step = 1;
  r.model.push_back({"bad", {4}, {0}, {4}, {1.f, 2.f}});  // 2 values for an extent of 4
  ASSERT_TRUE((*c)->save(std::move(r)).is_ok());
  Status s = (*c)->wait();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("bad"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir + "/latest"));
}

TEST(Checkpoint, ReaderRefusesACheckpointWithoutMetadata) {
  const std::string dir = fresh_dir("nometa");
  ASSERT_TRUE(save_one(sync_opts(dir), 3).is_ok());
  fs::remove(dir + "/step_000003/metadata.json");
  auto r = CheckpointReader::open(dir + "/step_000003");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("not a committed checkpoint"), std::string::npos) << r.status().message();
  EXPECT_FALSE(CheckpointReader::open(dir).is_ok());  // latest names it too
}

TEST(Checkpoint, CrashMidSaveKeepsLatestAndCreateCleansTmp) {
  const std::string dir = fresh_dir("crash");
  ASSERT_TRUE(save_one(sync_opts(dir), 1).is_ok());
  // A crash during step 2: its files half written, no metadata.json.
  fs::create_directories(dir + "/step_000002.tmp/model_weights");
  std::ofstream(dir + "/step_000002.tmp/model_weights/rank_00000.h5.tmp") << "partial";
  EXPECT_EQ(latest_of(dir), "step_000001");
  auto r = CheckpointReader::open(dir);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->step(), 1);
  auto c = Checkpointer::create(sync_opts(dir), 0, 1, "{}");
  ASSERT_TRUE(c.is_ok());
  EXPECT_FALSE(fs::exists(dir + "/step_000002.tmp"));
  EXPECT_TRUE(fs::exists(dir + "/step_000001/metadata.json"));
  // A re-save of the same step replaces it atomically.
  ASSERT_TRUE(save_one(sync_opts(dir), 1, false, 32).is_ok());
  auto r2 = CheckpointReader::open(dir);
  ASSERT_TRUE(r2.is_ok());
  EXPECT_EQ((*(*r2)->global_shape("t", false))[0], 32);
  EXPECT_FALSE(fs::exists(dir + "/step_000001.replaced.tmp"));
}

std::vector<int64_t> steps_on_disk(const std::string& dir) {
  std::vector<int64_t> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) == 0 && n.find('.') == std::string::npos) out.push_back(std::stoll(n.substr(5)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Checkpoint, RetentionKeepsLastAndEveryAndDropsOldLightOnes) {
  const std::string dir = fresh_dir("retention");
  CheckpointOptions o = sync_opts(dir);
  o.keep_last = 2;
  o.keep_every = 4;
  for (int64_t s = 1; s <= 9; ++s) ASSERT_TRUE(save_one(o, s).is_ok());
  EXPECT_EQ(steps_on_disk(dir), (std::vector<int64_t>{4, 8, 9}));
  ASSERT_TRUE(save_one(o, 10, /*light=*/true).is_ok());
  EXPECT_EQ(steps_on_disk(dir), (std::vector<int64_t>{4, 8, 9, 10}));
  auto light = CheckpointReader::open(dir);
  ASSERT_TRUE(light.is_ok());
  EXPECT_FALSE((*light)->has_model());
  ASSERT_TRUE(save_one(o, 11).is_ok());
  EXPECT_EQ(steps_on_disk(dir), (std::vector<int64_t>{4, 8, 9, 11}));
}

TEST(Checkpoint, FlippedByteFailsVerifyAndOpenNamingTheFile) {
  const std::string dir = fresh_dir("flip");
  save_two_ranks(sync_opts(dir), 2);
  const std::string victim = dir + "/step_000002/model_weights/rank_00001.h5";
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(victim) / 2));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x01);
    f.seekp(static_cast<std::streamoff>(fs::file_size(victim) / 2));
    f.write(&c, 1);
  }
  Status v = verify_checkpoint(dir);
  ASSERT_FALSE(v.is_ok());
  EXPECT_NE(v.message().find("model_weights/rank_00001.h5"), std::string::npos) << v.message();
  auto r = CheckpointReader::open(dir);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("model_weights/rank_00001.h5"), std::string::npos);
}

TEST(Checkpoint, TruncatedFileIsRefused) {
  const std::string dir = fresh_dir("trunc");
  ASSERT_TRUE(save_one(sync_opts(dir), 4).is_ok());
  const std::string victim = dir + "/step_000004/optimizer_state/rank_00000.h5";
  fs::resize_file(victim, fs::file_size(victim) - 10);
  auto r = CheckpointReader::open(dir);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("optimizer_state/rank_00000.h5"), std::string::npos);
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos);
  EXPECT_FALSE(verify_checkpoint(dir).is_ok());
}

TEST(Checkpoint, DiskFullReturnsAnErrorAndKeepsThePreviousCheckpoint) {
  const std::string dir = fresh_dir("full");
  ASSERT_TRUE(save_one(sync_opts(dir), 1).is_ok());
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // child: files may not grow past 64 KiB
    ::close(fds[0]);
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim{64 << 10, 64 << 10};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    Status s = save_one(sync_opts(dir), 2, false, 1 << 18);  // 1 MiB tensor
    const std::string msg = s.is_ok() ? std::string() : s.message();
    (void)!::write(fds[1], msg.data(), msg.size());
    ::_exit(s.is_ok() ? 1 : 0);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "the save under a 64 KiB limit succeeded";
  std::printf("disk-full save: %s\n", msg.c_str());
  EXPECT_NE(msg.find("model_weights/rank_00000.h5"), std::string::npos) << msg;
  EXPECT_EQ(latest_of(dir), "step_000001");
  EXPECT_FALSE(fs::exists(dir + "/step_000002"));
  EXPECT_FALSE(fs::exists(dir + "/step_000002.tmp/metadata.json"));
  auto r = CheckpointReader::open(dir);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->step(), 1);
  EXPECT_TRUE(verify_checkpoint(dir).is_ok());
}

}  // namespace
}  // namespace loom::ckpt
