// SRAM allocation over the MEM slices with liveness-based reuse.
#pragma once

#include <cstdint>
#include <map>
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
  friend bool operator==(const Block&, const Block&) = default;
};

/// Where a block goes among the free addresses of a slice.
enum class Reuse {
  /// Never-used addresses while the chip's footprint stays within kFreshShare of the SRAM, so that a
  /// new tensor does not wait for the last reads of a freed one; then the space accessed last earliest.
  kFreshFirst,
  /// First fit from the lowest address: the smallest footprint.
  kFirstFit,
};

/// Blocks on every MEM slice; freed blocks are reused, so two tensors whose lifetimes do not overlap
/// may share addresses (the caller orders their accesses: a write waits for the last reads of the
/// space's previous tensor).
class SramAllocator {
 public:
  /// The share of the SRAM that kFreshFirst hands out before it reuses freed space.
  static constexpr double kFreshShare = 0.5;

  explicit SramAllocator(const topology::ChipSpec& chip, Reuse reuse = Reuse::kFreshFirst);

  /// A block of `rows` addresses on some slice, preferring slices not in `avoid` and spreading
  /// consecutive requests over the slices; nullopt when no slice has `rows` free addresses in a row.
  /// A `pristine` block (for values in SRAM from the program's start: a resident tensor placed
  /// late) takes addresses no earlier block has used when some slice has them, so that no earlier
  /// tensor's writes land on it.
  std::optional<Block> allocate(int rows, const SliceSet& avoid, bool pristine = false);
  /// Returns a block to its slice. `lastAccess` orders the block's last access (its last read, or
  /// its last write when later) among the program's: a later one, a larger value; -1: none.
  /// kFreshFirst reuses the space accessed last earliest.
  void release(const Block& block, std::int64_t lastAccess = -1);

  /// Bytes allocated now, the most ever allocated at once, and the chip's capacity.
  Bytes inUse() const { return inUse_; }
  Bytes peak() const { return peak_; }
  Bytes capacity() const { return capacity_; }
  /// Bytes below every slice's high-water mark: the addresses any block has used.
  Bytes footprint() const;
  Reuse reuse() const { return reuse_; }

 private:
  // The start of the `rows` addresses within free run `run` of `slice` whose latest last access is
  // earliest (the lowest such start), with that last access.
  std::pair<int, std::int64_t> oldestWindow(int slice, size_t run, int rows) const;
  // Takes `rows` addresses from `start` out of free run `run` of `slice`.
  Block take(int slice, size_t run, int start, int rows);

  const topology::ChipSpec& chip_;
  std::vector<std::vector<std::pair<int, int>>> free_;  // per slice: sorted (address, length)
  std::vector<int> highWater_;  // per slice: the end of the highest address ever allocated
  // Per slice: the last access of each address's released tensors, piecewise constant (start -> the
  // latest `lastAccess` released there; -1 where nothing was).
  std::vector<std::map<int, std::int64_t>> lastAccess_;
  Reuse reuse_;
  std::int64_t used_ = 0;        // addresses below the high-water marks, over the slices
  std::int64_t freshLimit_ = 0;  // kFreshFirst takes never-used addresses while used_ stays within this
  int cursor_ = 0;
  Bytes inUse_ = 0, peak_ = 0, capacity_ = 0;
};

}  // namespace tsp::alloc
