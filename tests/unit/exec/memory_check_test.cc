// loom execute's memory check before it allocates (exec/runtime/memory_check.h):
// a plan made with --memory-headroom keeps that fraction of the device free
// at run time too, and the message names the margin.
#include <gtest/gtest.h>

#include "exec/runtime/memory_check.h"

namespace loom::exec {
namespace {

TEST(MemoryCheck, TheDeviceOffersItsFreeBytesLessThePlansHeadroom) {
  const double gb = 1e9;
  // No headroom: what is free.
  EXPECT_DOUBLE_EQ(device_available_bytes(70 * gb, 80 * gb, 0), 70 * gb);
  // 10% of 80 GB kept free: at most 72 GB, and never more than is free.
  EXPECT_DOUBLE_EQ(device_available_bytes(79 * gb, 80 * gb, 0.1), 72 * gb);
  EXPECT_DOUBLE_EQ(device_available_bytes(60 * gb, 80 * gb, 0.1), 60 * gb);
  // A device that does not report its total: its free bytes.
  EXPECT_DOUBLE_EQ(device_available_bytes(60 * gb, 0, 0.1), 60 * gb);
  // A headroom above the largest a plan takes counts as the largest.
  EXPECT_DOUBLE_EQ(device_available_bytes(80 * gb, 80 * gb, 5), 80 * gb * (1 - kMaxMemoryHeadroom));
}

TEST(MemoryCheck, AStageOverTheAvailableBytesIsRefusedWithTheNumbers) {
  EXPECT_TRUE(check_memory_fits(71e9, 72e9, 1, "GPU 0's free memory", "").is_ok());
  const Status s = check_memory_fits(75e9, 72e9, 1, "GPU 0's free memory", "stage 0 per rank: weights 1 GB");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("75 GB"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("72 GB"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("nothing was allocated"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace loom::exec
