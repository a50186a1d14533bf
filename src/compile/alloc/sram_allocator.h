// SRAM allocation over the MEM slices with liveness-based reuse.
#pragma once

#include <optional>
#include <vector>

#include "compile/alloc/slice_set.h"
#include "support/units.h"
#include "topology/chip_spec.h"

namespace tsp::alloc {

/// One block of consecutive addresses on one MEM slice.
struct Block {
  int slice = 0;    ///< MEM slice index (0-based among MEM slices, not the queue id)
  int address = 0;  ///< first address
  int rows = 0;     ///< addresses (vectors)
};

/// First-fit allocation of blocks on every MEM slice; freed blocks are reused, so two tensors whose
/// lifetimes do not overlap may share addresses (the caller orders their accesses).
class SramAllocator {
 public:
  explicit SramAllocator(const topology::ChipSpec& chip);

  /// A block of `rows` addresses on some slice, preferring slices not in `avoid` and spreading
  /// consecutive requests over the slices; nullopt when no slice has `rows` free addresses in a row.
  /// A `pristine` block (for values in SRAM from the program's start: a resident tensor placed
  /// late) takes addresses no earlier block has used when some slice has them, so that no earlier
  /// tensor's writes land on it.
  std::optional<Block> allocate(int rows, const SliceSet& avoid, bool pristine = false);
  /// Returns a block to its slice.
  void release(const Block& block);

  /// Bytes allocated now, the most ever allocated at once, and the chip's capacity.
  Bytes inUse() const { return inUse_; }
  Bytes peak() const { return peak_; }
  Bytes capacity() const { return capacity_; }

 private:
  const topology::ChipSpec& chip_;
  std::vector<std::vector<std::pair<int, int>>> free_;  // per slice: sorted (address, length)
  std::vector<int> highWater_;  // per slice: the end of the highest address ever allocated
  int cursor_ = 0;
  Bytes inUse_ = 0, peak_ = 0, capacity_ = 0;
};

}  // namespace tsp::alloc
