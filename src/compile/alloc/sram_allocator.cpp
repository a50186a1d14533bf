// SRAM allocation: first fit per slice, round-robin over slices, freed space reused.
#include "compile/alloc/sram_allocator.h"

#include <algorithm>

namespace tsp::alloc {

SramAllocator::SramAllocator(const topology::ChipSpec& chip) : chip_(chip) {
  free_.assign(chip.memSlices, {{0, chip.addressesPerSlice}});
  capacity_ = chip.sramBytes();
}

std::optional<Block> SramAllocator::allocate(int rows, const std::set<int>& avoid) {
  if (rows <= 0 || rows > chip_.addressesPerSlice) return std::nullopt;
  for (int pass = 0; pass < 2; ++pass)
    for (int tried = 0; tried < chip_.memSlices; ++tried) {
      const int slice = (cursor_ + tried) % chip_.memSlices;
      if (pass == 0 && avoid.count(slice)) continue;
      auto& list = free_[slice];
      for (size_t i = 0; i < list.size(); ++i) {
        if (list[i].second < rows) continue;
        Block b{slice, list[i].first, rows};
        list[i].first += rows;
        list[i].second -= rows;
        if (list[i].second == 0) list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
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
