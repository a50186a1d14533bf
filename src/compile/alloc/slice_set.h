// A set of MEM slice indices as a bitset: the lowering copies and merges these sets for every task.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <vector>

namespace tsp::alloc {

/// Slices (non-negative indices) as bits: the first 128 inline (the default chip has 88 MEM
/// slices), more on the heap. Iterates in increasing order, as the std::set<int> it replaces did, so
/// every choice made by walking one is the same; copying and merging one allocates nothing on a
/// chip of up to 128 slices.
class SliceSet {
 public:
  SliceSet() = default;
  SliceSet(std::initializer_list<int> slices) {
    for (int s : slices) insert(s);
  }

  /// Adds a slice; true when it was not in the set.
  bool insert(int slice) {
    std::uint64_t& w = word(static_cast<std::size_t>(slice) / 64, true);
    const std::uint64_t bit = std::uint64_t{1} << (slice % 64);
    const bool added = (w & bit) == 0;
    w |= bit;
    return added;
  }
  /// Adds every slice of another set.
  void insert(const SliceSet& other) {
    for (std::size_t i = 0; i < other.words(); ++i)
      if (const std::uint64_t w = other.at(i)) word(i, true) |= w;
  }
  /// 1 when the slice is in the set, else 0 (std::set's count).
  std::size_t count(int slice) const {
    if (slice < 0) return 0;
    const std::size_t i = static_cast<std::size_t>(slice) / 64;
    return i < words() && (at(i) >> (slice % 64)) & 1 ? 1 : 0;
  }
  /// Removes a slice; 1 when it was in the set.
  std::size_t erase(int slice) {
    if (!count(slice)) return 0;
    word(static_cast<std::size_t>(slice) / 64, false) &= ~(std::uint64_t{1} << (slice % 64));
    return 1;
  }
  std::size_t size() const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < words(); ++i) n += static_cast<std::size_t>(std::popcount(at(i)));
    return n;
  }
  bool empty() const {
    for (std::size_t i = 0; i < words(); ++i)
      if (at(i)) return false;
    return true;
  }
  friend bool operator==(const SliceSet& a, const SliceSet& b) {
    const std::size_t n = a.words() > b.words() ? a.words() : b.words();
    for (std::size_t i = 0; i < n; ++i)
      if ((i < a.words() ? a.at(i) : 0) != (i < b.words() ? b.at(i) : 0)) return false;
    return true;
  }

  /// The slices in increasing order.
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = int;
    using difference_type = std::ptrdiff_t;
    using pointer = const int*;
    using reference = int;
    const_iterator() = default;
    int operator*() const { return slice_; }
    const_iterator& operator++() {
      advance(slice_ + 1);
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator old = *this;
      advance(slice_ + 1);
      return old;
    }
    friend bool operator==(const const_iterator& a, const const_iterator& b) { return a.slice_ == b.slice_; }

   private:
    friend class SliceSet;
    const_iterator(const SliceSet* set, int from) : set_(set) { advance(from); }
    // To the first slice >= from in the set, or the end (-1).
    void advance(int from) {
      for (std::size_t i = static_cast<std::size_t>(from) / 64; i < set_->words(); ++i) {
        std::uint64_t w = set_->at(i);
        if (i == static_cast<std::size_t>(from) / 64) w &= ~std::uint64_t{0} << (from % 64);
        if (w) {
          slice_ = static_cast<int>(i * 64) + std::countr_zero(w);
          return;
        }
      }
      slice_ = -1;
    }
    const SliceSet* set_ = nullptr;
    int slice_ = -1;
  };
  const_iterator begin() const { return const_iterator(this, 0); }
  const_iterator end() const { return const_iterator(); }

 private:
  static constexpr std::size_t kInline = 2;
  std::size_t words() const { return kInline + more_.size(); }
  std::uint64_t at(std::size_t i) const { return i < kInline ? inline_[i] : more_[i - kInline]; }
  std::uint64_t& word(std::size_t i, bool grow) {
    if (i < kInline) return inline_[i];
    if (grow && i - kInline >= more_.size()) more_.resize(i - kInline + 1, 0);
    return more_[i - kInline];
  }
  std::array<std::uint64_t, kInline> inline_{};
  std::vector<std::uint64_t> more_;
};

}  // namespace tsp::alloc
