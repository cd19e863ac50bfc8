// Status, Result and the error macros.
#include <gtest/gtest.h>

#include "core/status.h"

namespace loom {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("x=" + std::to_string(x) + " must be positive");
  return x;
}

Result<int> doubled(int x) {
  LOOM_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return 2 * v;
}

Status check_both(int a, int b) {
  LOOM_RETURN_IF_ERROR(parse_positive(a).status());
  LOOM_RETURN_IF_ERROR(parse_positive(b).status());
  return Status::ok();
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(Status::ok().is_ok());
  Status s = invalid_argument("layout: tp=3 does not divide 32");
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.to_string(), "invalid argument: layout: tp=3 does not divide 32");
  EXPECT_EQ(s.with_context("plan.json").message(), "plan.json: layout: tp=3 does not divide 32");
  EXPECT_TRUE(Status::ok().with_context("x").is_ok());
}

TEST(Status, ResultCarriesValueOrStatus) {
  auto good = doubled(21);
  ASSERT_TRUE(good.is_ok());
  EXPECT_EQ(*good, 42);
  auto bad = doubled(-1);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "x=-1 must be positive");
  // A Result built from an ok Status is an internal error, not a value.
  Result<int> odd{Status::ok()};
  EXPECT_FALSE(odd.is_ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInternal);
}

TEST(Status, ReturnIfErrorStopsAtTheFirstFailure) {
  EXPECT_TRUE(check_both(1, 2).is_ok());
  EXPECT_EQ(check_both(-1, -2).message(), "x=-1 must be positive");
  EXPECT_EQ(check_both(1, -2).message(), "x=-2 must be positive");
}

TEST(StatusDeathTest, CheckAbortsWithTheMessage) {
  EXPECT_DEATH(LOOM_CHECK(1 + 1 == 3, "arithmetic"), "internal check failed.*arithmetic");
}

}  // namespace
}  // namespace loom
