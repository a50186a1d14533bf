// Tests of diagnostics formatting and Expected.
#include "support/diagnostic.h"

#include <gtest/gtest.h>

#include "support/expected.h"
#include "support/units.h"

namespace tsp {
namespace {

TEST(Diagnostic, FormatsFileLineColumn) {
  const Diagnostic d = configError({"c.yaml", 3, 7, ""}, "unknown key 'x'");
  EXPECT_EQ(d.format(), "c.yaml:3:7: unknown key 'x'");
  EXPECT_EQ(d.code, ExitCode::kConfig);
}

TEST(Diagnostic, FormatsModelNode) {
  const Diagnostic d = modelError("fc0", "MatMul inner dimensions differ");
  EXPECT_EQ(d.format(), "node 'fc0': MatMul inner dimensions differ");
  EXPECT_EQ(d.code, ExitCode::kModel);
}

TEST(Expected, HoldsValueOrError) {
  Expected<int> good = 4;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 4);
  Expected<int> bad = makeError(ExitCode::kDoesNotFit, "too big");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ExitCode::kDoesNotFit);
}

TEST(Units, NanosecondsRoundUpToCycles) {
  EXPECT_EQ(nsToCycles(250.0, 900.0), 225);
  EXPECT_EQ(nsToCycles(1.0, 900.0), 1);    // 0.9 cycles rounds up
  EXPECT_EQ(nsToCycles(10.0, 1000.0), 10);  // exact stays exact
  EXPECT_EQ(ceilDiv(321, 320), 2);
}

}  // namespace
}  // namespace tsp
