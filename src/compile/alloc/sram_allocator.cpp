// SRAM allocation: first fit per slice, round-robin over slices, freed space reused.
#include "compile/alloc/sram_allocator.h"

#include <algorithm>

namespace tsp::alloc {

SramAllocator::SramAllocator(const topology::ChipSpec& chip) : chip_(chip) {
  free_.assign(chip.memSlices, {{0, chip.addressesPerSlice}});
  highWater_.assign(chip.memSlices, 0);
  capacity_ = chip.sramBytes();
}

std::optional<Block> SramAllocator::allocate(int rows, const SliceSet& avoid, bool pristine) {
  if (rows <= 0 || rows > chip_.addressesPerSlice) return std::nullopt;
  // Pristine first (above every slice's high-water mark), then any free space.
  for (int fresh = pristine ? 1 : 0; fresh >= 0; --fresh)
    for (int pass = 0; pass < 2; ++pass)
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
          highWater_[slice] = std::max(highWater_[slice], start + rows);
          cursor_ = (slice + 1) % chip_.memSlices;
          inUse_ += Bytes{rows} * chip_.vectorBytes;
          peak_ = std::max(peak_, inUse_);
          return b;
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
