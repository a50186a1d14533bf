// Tests of SRAM allocation with reuse.
#include "compile/alloc/sram_allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

namespace tsp::alloc {
namespace {

// The slice bitset does what the std::set<int> it replaced did, in the same order, inline (up to
// 128 slices) and past it (a chip of up to 4,096): random inserts, erases and merges checked against
// a std::set after every step.
TEST(SliceSet, BehavesAsAnOrderedSetOfSlices) {
  for (const int slices : {88, 128, 300, 4096}) {
    std::mt19937 random(static_cast<unsigned>(slices));
    SliceSet set, other;
    std::set<int> reference, otherReference;
    for (int step = 0; step < 2000; ++step) {
      const int s = static_cast<int>(random() % static_cast<unsigned>(slices));
      switch (random() % 4) {
        case 0:
        case 1:
          EXPECT_EQ(set.insert(s), reference.insert(s).second);
          break;
        case 2:
          EXPECT_EQ(set.erase(s), reference.erase(s));
          break;
        default:
          other.insert(s);
          otherReference.insert(s);
          if (step % 50 == 0) {
            set.insert(other);
            reference.insert(otherReference.begin(), otherReference.end());
          }
      }
      ASSERT_EQ(std::vector<int>(set.begin(), set.end()), std::vector<int>(reference.begin(), reference.end()))
          << slices << " slices, step " << step;
      EXPECT_EQ(set.size(), reference.size());
      EXPECT_EQ(set.empty(), reference.empty());
      EXPECT_EQ(set.count(s), reference.count(s));
    }
    EXPECT_EQ(set.count(-1), 0u);
    EXPECT_EQ(set.count(slices + 5000), 0u);
    SliceSet copy = set;
    EXPECT_TRUE(copy == set);
    copy.insert(slices - 1);
    copy.erase(slices - 1);
    EXPECT_EQ(copy == set, reference.count(slices - 1) == 0);
  }
  EXPECT_EQ(std::vector<int>(SliceSet{5, 64, 0, 127, 63}.begin(), SliceSet{5, 64, 0, 127, 63}.end()),
            (std::vector<int>{0, 5, 63, 64, 127}));
}

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

// A pristine block (a resident tensor placed late) takes addresses no earlier block used, while
// such addresses remain; then it falls back to reused space.
TEST(SramAllocator, PristineBlocksAvoidUsedAddresses) {
  topology::ChipSpec chip;
  chip.memSlices = 1;
  chip.addressesPerSlice = 100;
  SramAllocator a(chip);
  auto x = a.allocate(40, {});
  ASSERT_TRUE(x);
  a.release(*x);
  auto reused = a.allocate(10, {});
  ASSERT_TRUE(reused);
  EXPECT_EQ(reused->address, 0);  // first fit reuses
  auto pristine = a.allocate(30, {}, true);
  ASSERT_TRUE(pristine);
  EXPECT_EQ(pristine->address, 40);  // above everything used so far
  auto filler = a.allocate(20, {}, false);
  ASSERT_TRUE(filler);
  EXPECT_EQ(filler->address, 10);  // the space below the pristine block stayed free
  auto fallback = a.allocate(30, {}, true);
  ASSERT_TRUE(fallback);
  EXPECT_EQ(fallback->address, 70);
  auto last = a.allocate(10, {}, true);  // no pristine space left: reuses
  ASSERT_TRUE(last);
  EXPECT_EQ(last->address, 30);
  EXPECT_EQ(a.inUse(), 100 * chip.vectorBytes);
}

}  // namespace
}  // namespace tsp::alloc
