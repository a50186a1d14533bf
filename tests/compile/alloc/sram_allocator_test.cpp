// Tests of SRAM allocation with reuse.
#include "compile/alloc/sram_allocator.h"

#include <gtest/gtest.h>

namespace tsp::alloc {
namespace {

TEST(SramAllocator, SpreadsOverSlicesAndAvoids) {
  topology::ChipSpec chip;
  SramAllocator a(chip);
  auto x = a.allocate(10, {});
  auto y = a.allocate(10, {1});
  ASSERT_TRUE(x && y);
  EXPECT_EQ(x->slice, 0);
  EXPECT_EQ(y->slice, 2);  // slice 1 avoided
  EXPECT_EQ(a.inUse(), 20 * chip.vectorBytes);
}

TEST(SramAllocator, ReusesFreedSpaceAndTracksThePeak) {
  topology::ChipSpec chip;
  chip.memSlices = 2;
  chip.addressesPerSlice = 100;
  SramAllocator a(chip);
  auto x = a.allocate(100, {});
  auto y = a.allocate(100, {});
  ASSERT_TRUE(x && y);
  EXPECT_FALSE(a.allocate(1, {}));  // full
  a.release(*x);
  auto z = a.allocate(60, {});
  ASSERT_TRUE(z);
  EXPECT_EQ(z->slice, x->slice);
  EXPECT_EQ(z->address, 0);
  EXPECT_EQ(a.peak(), 200 * chip.vectorBytes);
  EXPECT_EQ(a.inUse(), 160 * chip.vectorBytes);
  a.release(*z);
  a.release(*y);
  EXPECT_TRUE(a.allocate(100, {}));  // freed blocks merged back into one
  EXPECT_FALSE(a.allocate(101, {}));  // larger than a slice
}

}  // namespace
}  // namespace tsp::alloc
