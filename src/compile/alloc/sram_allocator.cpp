// SRAM allocation: never-used space while plentiful, then first fit; round-robin over slices.
#include "compile/alloc/sram_allocator.h"

#include <algorithm>

namespace tsp::alloc {

SramAllocator::SramAllocator(const topology::ChipSpec& chip, Reuse reuse) : chip_(chip), reuse_(reuse) {
  free_.assign(chip.memSlices, {{0, chip.addressesPerSlice}});
  highWater_.assign(chip.memSlices, 0);
  capacity_ = chip.sramBytes();
  if (reuse == Reuse::kFreshFirst)
    freshLimit_ = static_cast<std::int64_t>(kFreshShare * static_cast<double>(chip.memSlices) * chip.addressesPerSlice);
}

Bytes SramAllocator::footprint() const { return Bytes{used_} * chip_.vectorBytes; }

std::optional<Block> SramAllocator::allocate(int rows, const SliceSet& avoid, bool pristine) {
  if (rows <= 0 || rows > chip_.addressesPerSlice) return std::nullopt;
  // The phases, each a (pass, fresh) pair: pass 0 skips the avoided slices, fresh takes addresses
  // above the slice's high-water mark. A pristine block wants fresh space on any slice before reused
  // space (its values must not be overwritten by an earlier tensor's writes); a block while fresh
  // space is plentiful wants it on a slice it does not avoid before reused space there (a reuse
  // orders its writes after the last reads of the space's previous tensor, which may come late).
  static constexpr int kPristine[4][2] = {{0, 1}, {1, 1}, {0, 0}, {1, 0}};
  static constexpr int kPlenty[4][2] = {{0, 1}, {0, 0}, {1, 1}, {1, 0}};
  static constexpr int kReused[2][2] = {{0, 0}, {1, 0}};
  const bool plenty = used_ + rows <= freshLimit_;
  const int(*phases)[2] = pristine ? kPristine : plenty ? kPlenty : kReused;
  const int count = pristine || plenty ? 4 : 2;
  for (int phase = 0; phase < count; ++phase) {
    const int pass = phases[phase][0], fresh = phases[phase][1];
    for (int tried = 0; tried < chip_.memSlices; ++tried) {
      const int slice = (cursor_ + tried) % chip_.memSlices;
      if (pass == 0 && avoid.count(slice)) continue;
      auto& list = free_[slice];
      for (size_t i = 0; i < list.size(); ++i) {
        const int start = fresh ? std::max(list[i].first, highWater_[slice]) : list[i].first;
        const int end = list[i].first + list[i].second;
        if (end - start < rows) continue;
        Block b{slice, start, rows};
        if (start > list[i].first) {  // the free space below the block stays free
          list.insert(list.begin() + static_cast<std::ptrdiff_t>(i), {list[i].first, start - list[i].first});
          ++i;
        }
        list[i].first = start + rows;
        list[i].second = end - start - rows;
        if (list[i].second == 0) list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
        if (start + rows > highWater_[slice]) {
          used_ += start + rows - highWater_[slice];
          highWater_[slice] = start + rows;
        }
        cursor_ = (slice + 1) % chip_.memSlices;
        inUse_ += Bytes{rows} * chip_.vectorBytes;
        peak_ = std::max(peak_, inUse_);
        return b;
      }
    }
  }
  return std::nullopt;
}

void SramAllocator::release(const Block& block) {
  auto& list = free_[block.slice];
  auto it = std::lower_bound(list.begin(), list.end(), std::make_pair(block.address, 0));
  it = list.insert(it, {block.address, block.rows});
  if (it + 1 != list.end() && it->first + it->second == (it + 1)->first) {
    it->second += (it + 1)->second;
    list.erase(it + 1);
  }
  if (it != list.begin() && (it - 1)->first + (it - 1)->second == it->first) {
    (it - 1)->second += it->second;
    list.erase(it);
  }
  inUse_ -= Bytes{block.rows} * chip_.vectorBytes;
}

}  // namespace tsp::alloc
