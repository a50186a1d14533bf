// SRAM allocation: never-used space while plentiful, then the space accessed last earliest; round-robin over slices.
#include "compile/alloc/sram_allocator.h"

#include <algorithm>

namespace tsp::alloc {

SramAllocator::SramAllocator(const topology::ChipSpec& chip, Reuse reuse) : chip_(chip), reuse_(reuse) {
  free_.assign(chip.memSlices, {{0, chip.addressesPerSlice}});
  highWater_.assign(chip.memSlices, 0);
  lastAccess_.assign(chip.memSlices, {{0, -1}});
  capacity_ = chip.sramBytes();
  if (reuse == Reuse::kFreshFirst)
    freshLimit_ = static_cast<std::int64_t>(kFreshShare * static_cast<double>(chip.memSlices) * chip.addressesPerSlice);
}

Bytes SramAllocator::footprint() const { return Bytes{used_} * chip_.vectorBytes; }

std::pair<int, std::int64_t> SramAllocator::oldestWindow(int slice, size_t run, int rows) const {
  const auto& pieces = lastAccess_[slice];
  const int begin = free_[slice][run].first, end = begin + free_[slice][run].second;
  // A window that starts inside a piece is no better than the one starting at the piece's start
  // (it overlaps the same pieces or more to its right), so the starts tried are the pieces'.
  std::pair<int, std::int64_t> best{-1, 0};
  for (auto it = std::prev(pieces.upper_bound(begin)); it != pieces.end() && std::max(it->first, begin) + rows <= end;
       ++it) {
    const int start = std::max(it->first, begin);
    std::int64_t latest = -1;
    for (auto p = it; p != pieces.end() && p->first < start + rows; ++p) latest = std::max(latest, p->second);
    if (best.first < 0 || latest < best.second) best = {start, latest};
  }
  return best;
}

Block SramAllocator::take(int slice, size_t run, int start, int rows) {
  auto& list = free_[slice];
  const int end = list[run].first + list[run].second;
  if (start > list[run].first) {  // the free space below the block stays free
    list.insert(list.begin() + static_cast<std::ptrdiff_t>(run), {list[run].first, start - list[run].first});
    ++run;
  }
  list[run].first = start + rows;
  list[run].second = end - start - rows;
  if (list[run].second == 0) list.erase(list.begin() + static_cast<std::ptrdiff_t>(run));
  if (start + rows > highWater_[slice]) {
    used_ += start + rows - highWater_[slice];
    highWater_[slice] = start + rows;
  }
  cursor_ = (slice + 1) % chip_.memSlices;
  inUse_ += Bytes{rows} * chip_.vectorBytes;
  peak_ = std::max(peak_, inUse_);
  return Block{slice, start, rows};
}

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
  // Reused space on the first slice (round-robin) with room: its lowest free addresses
  // (kFirstFit), or those whose last access is earliest, so that the block's writes wait least
  // (kFreshFirst; never-used addresses come first). The slice is first fit's either way:
  // the order of slices keeps a repeated layer's blocks on the same slices as its first
  // occurrence's, so its tasks repeat too (schedule::shardSegments).
  for (int phase = 0; phase < count; ++phase) {
    const int pass = phases[phase][0], fresh = phases[phase][1];
    for (int tried = 0; tried < chip_.memSlices; ++tried) {
      const int slice = (cursor_ + tried) % chip_.memSlices;
      if (pass == 0 && avoid.count(slice)) continue;
      const auto& list = free_[slice];
      std::optional<std::pair<size_t, std::pair<int, std::int64_t>>> oldest;  // (run, (start, last access))
      for (size_t i = 0; i < list.size(); ++i) {
        if (fresh || reuse_ == Reuse::kFirstFit) {
          const int start = fresh ? std::max(list[i].first, highWater_[slice]) : list[i].first;
          if (list[i].first + list[i].second - start >= rows) return take(slice, i, start, rows);
          continue;
        }
        if (list[i].second < rows) continue;
        const auto window = oldestWindow(slice, i, rows);
        if (!oldest || window.second < oldest->second.second) oldest = {i, window};
      }
      if (oldest) return take(slice, oldest->first, oldest->second.first, rows);
    }
  }
  return std::nullopt;
}

void SramAllocator::release(const Block& block, std::int64_t lastAccess) {
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
  // The block's addresses were last accessed at the later of their earlier tensors' last accesses and this one's.
  if (lastAccess < 0) return;
  auto& pieces = lastAccess_[block.slice];
  const int end = block.address + block.rows;
  auto split = [&](int at) {  // a piece boundary at `at`
    if (at >= chip_.addressesPerSlice) return;
    auto p = std::prev(pieces.upper_bound(at));
    if (p->first != at) pieces.emplace_hint(std::next(p), at, p->second);
  };
  split(block.address);
  split(end);
  for (auto p = pieces.find(block.address); p != pieces.end() && p->first < end; ++p) p->second = std::max(p->second, lastAccess);
  // Neighbouring pieces of one last access merge, so that the map stays as small as the distinct runs.
  auto p = pieces.find(block.address);
  if (p != pieces.begin()) --p;
  while (p != pieces.end() && p->first <= end) {
    auto next = std::next(p);
    if (next != pieces.end() && next->second == p->second) {
      pieces.erase(next);
      continue;
    }
    p = next;
  }
}

}  // namespace tsp::alloc
