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

// A chip of `slices` MEM slices of 100 addresses.
topology::ChipSpec smallChip(int slices) {
  topology::ChipSpec chip;
  chip.memSlices = slices;
  chip.addressesPerSlice = 100;
  return chip;
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
  const topology::ChipSpec chip = smallChip(2);
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

// Allocates `rows` (any slice) and checks where the block starts.
void expectBlockAt(SramAllocator& a, int rows, int address, bool pristine = false) {
  auto block = a.allocate(rows, {}, pristine);
  ASSERT_TRUE(block) << rows << " rows";
  EXPECT_EQ(block->address, address) << rows << " rows";
}

// A pristine block (a resident tensor placed late) takes addresses no earlier block used, while
// such addresses remain; then it falls back to reused space.
TEST(SramAllocator, PristineBlocksAvoidUsedAddresses) {
  const topology::ChipSpec chip = smallChip(1);
  SramAllocator a(chip, Reuse::kFirstFit);
  auto x = a.allocate(40, {});
  ASSERT_TRUE(x);
  a.release(*x);
  expectBlockAt(a, 10, 0);                // first fit reuses the freed block's addresses at once
  expectBlockAt(a, 30, 40, true);         // pristine: above everything used so far
  expectBlockAt(a, 20, 10);               // the space below the pristine block stayed free
  expectBlockAt(a, 30, 70, true);
  expectBlockAt(a, 10, 30, true);         // no pristine space left: reuses
  EXPECT_EQ(a.inUse(), 100 * chip.vectorBytes);
}

// While the addresses ever used stay within kFreshShare of the SRAM, a block takes never-used
// addresses rather than a freed block's (whose writes would wait for the freed tensor's last
// reads); past it, the free space accessed last earliest (a block released without accesses: none).
TEST(SramAllocator, FreshSpaceBeforeFreedSpaceWhilePlentiful) {
  const topology::ChipSpec chip = smallChip(1);
  ASSERT_EQ(SramAllocator::kFreshShare, 0.5);
  SramAllocator a(chip);
  auto x = a.allocate(40, {});
  ASSERT_TRUE(x);
  a.release(*x);
  expectBlockAt(a, 10, 40);  // first fit would reuse address 0
  EXPECT_EQ(a.footprint(), 50 * chip.vectorBytes);
  expectBlockAt(a, 10, 0);   // 60 addresses used would pass half the slice: reused (never read: lowest)
  EXPECT_EQ(a.footprint(), 50 * chip.vectorBytes);
  expectBlockAt(a, 50, 50);  // only the never-used top holds 50 in a row
  EXPECT_EQ(a.footprint(), 100 * chip.vectorBytes);
}

// Fresh space on a slice the block does not avoid comes before fresh space on an avoided one, and
// reused space on a slice not avoided before either on an avoided slice.
TEST(SramAllocator, FreshSpaceKeepsAvoidingSlices) {
  const topology::ChipSpec chip = smallChip(2);
  SramAllocator a(chip);
  auto x = a.allocate(30, {1});
  ASSERT_TRUE(x && x->slice == 0);
  a.release(*x);
  // Never-used addresses of slice 0, not slice 1's.
  EXPECT_EQ(a.allocate(20, {1}), (Block{0, 30, 20}));
}

// Past the fresh share, reused space is the free space whose last access comes earliest (never-used
// addresses first), not the lowest; a block released without an access keeps its addresses' last one.
TEST(SramAllocator, ReusesTheSpaceAccessedLastEarliest) {
  const topology::ChipSpec chip = smallChip(1);
  SramAllocator a(chip);
  auto x = a.allocate(30, {});
  auto y = a.allocate(30, {});  // 60 addresses would pass half the slice: reused space, all never read
  ASSERT_TRUE(x && y);
  EXPECT_EQ(y->address, 30);
  a.release(*y, 5);
  a.release(*x, 9);
  expectBlockAt(a, 20, 60);  // never-used addresses before either freed block
  expectBlockAt(a, 20, 80);
  expectBlockAt(a, 20, 30);  // y's space, accessed last at 5, before x's (9); first fit would take 0
  expectBlockAt(a, 10, 50);
  a.release(Block{0, 30, 20});  // no access given: still y's last access
  expectBlockAt(a, 20, 30);
  SramAllocator first(chip, Reuse::kFirstFit);
  auto z = first.allocate(30, {});
  ASSERT_TRUE(z && first.allocate(30, {}));
  first.release(*z, 9);
  expectBlockAt(first, 20, 0);  // first fit: the lowest free addresses whatever their accesses
}

}  // namespace
}  // namespace tsp::alloc
