// Tests of the string utilities behind "did you mean".
#include "support/strings.h"

#include <gtest/gtest.h>

namespace tsp {
namespace {

TEST(Strings, EditDistance) {
  EXPECT_EQ(editDistance("kitten", "sitting"), 3);
  EXPECT_EQ(editDistance("", "abc"), 3);
  EXPECT_EQ(editDistance("same", "same"), 0);
}

TEST(Strings, ClosestMatchFindsTyposOnly) {
  EXPECT_EQ(closestMatch("topolgy", {"cluster", "topology", "link"}), "topology");
  EXPECT_EQ(closestMatch("zzzzzz", {"cluster", "topology", "link"}), "");
}

}  // namespace
}  // namespace tsp
