#include "sim/lru_sets.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace loom {
namespace {

// One set of four ways: every key lands in it, so the replacement order is
// visible. make() counts the misses.
TEST(LruSets, FourKeysOfOneSetStayAndTheFifthEvictsTheLeastRecentlyUsed) {
  auto memo = std::make_unique<LruSets<int, std::string, 1>>();  // fresh on every run of the test
  int made = 0;
  auto get = [&](int key) { return memo->get(0, key, [&] { ++made; return "v" + std::to_string(key); }); };
  for (int k = 1; k <= 4; ++k) EXPECT_EQ(get(k), "v" + std::to_string(k));
  EXPECT_EQ(made, 4);
  for (int k = 4; k >= 1; --k) EXPECT_EQ(get(k), "v" + std::to_string(k));  // all four hit; 4 is now the oldest
  EXPECT_EQ(made, 4);
  EXPECT_EQ(get(5), "v5");  // evicts 4
  EXPECT_EQ(made, 5);
  EXPECT_EQ(get(1), "v1");
  EXPECT_EQ(get(2), "v2");
  EXPECT_EQ(get(3), "v3");
  EXPECT_EQ(made, 5);
  EXPECT_EQ(get(4), "v4");  // made again; evicts 5, the least recently used
  EXPECT_EQ(made, 6);
  EXPECT_EQ(get(5), "v5");
  EXPECT_EQ(made, 7);
}

// A key equal to a default-constructed one is not mistaken for an empty way.
TEST(LruSets, AnEmptyWayIsNotAHitForTheDefaultKey) {
  auto memo = std::make_unique<LruSets<int, int, 2>>();
  int made = 0;
  EXPECT_EQ(memo->get(0, 0, [&] { ++made; return 42; }), 42);
  EXPECT_EQ(made, 1);
  EXPECT_EQ(memo->get(0, 0, [&] { ++made; return 43; }), 42);
  EXPECT_EQ(made, 1);
  // Another set keeps its own entries.
  EXPECT_EQ(memo->get(1, 0, [&] { ++made; return 7; }), 7);
  EXPECT_EQ(made, 2);
}

}  // namespace
}  // namespace loom
