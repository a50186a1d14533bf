// The values of a weight or constant tensor, held compactly: each tensor at the narrowest element
// encoding that holds every one of its values exactly, read back as doubles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <compare>
#include <iterator>
#include <memory>
#include <vector>

namespace tsp {

/// Storage of large value arrays in their own anonymous mappings (kMappedBytes or more; smaller ones
/// from the heap): freeing one returns its pages to the kernel at once, whatever the heap around it
/// holds, so that a weight dropped after its placement costs no resident memory afterwards.
template <typename T>
struct PageAllocator {
  using value_type = T;
  static constexpr std::size_t kMappedBytes = std::size_t{1} << 16;
  PageAllocator() = default;
  template <typename U>
  PageAllocator(const PageAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator does
  T* allocate(std::size_t n) { return static_cast<T*>(allocateBytes(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) { deallocateBytes(p, n * sizeof(T)); }
  friend bool operator==(const PageAllocator&, const PageAllocator&) { return true; }

 private:
  static void* allocateBytes(std::size_t bytes);
  static void deallocateBytes(void* p, std::size_t bytes);
};

/// Element values in row-major order. The encoding is chosen from the values, not the tensor's
/// type: INT8 when all are integers in [-128, 127], FP16 (bit patterns) when all are FP16 values,
/// INT32, FP32, else FP64. A weight the importer rounded to its FP16 storage type takes 2 bytes an
/// element; a shape constant 1. Reading converts one element at a time.
class TensorData {
 public:
  enum class Encoding : std::uint8_t { kI8, kF16, kI32, kF32, kF64 };

  TensorData() = default;
  explicit TensorData(const std::vector<double>& values);
  /// The values value(0), ..., value(n - 1), encoded without holding them all as doubles (value is
  /// called twice per element, in order: once to choose the encoding, once to store). After each
  /// kGenerateBlock elements of a pass, read(begin, end) says value() is done with them for that pass
  /// (so that a caller may drop what backs them, such as a mapped file's pages).
  static TensorData generate(std::size_t n, const std::function<double(std::size_t)>& value,
                             const std::function<void(std::size_t, std::size_t)>& read = {});
  /// Elements generate() reads between two calls of its `read`.
  static constexpr std::size_t kGenerateBlock = std::size_t{1} << 18;

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  double operator[](std::size_t i) const;
  double at(std::size_t i) const;
  double front() const { return at(0); }
  Encoding encoding() const { return encoding_; }
  /// Bytes the values take (the encoded elements).
  std::size_t bytes() const { return bytes_.size(); }
  /// The encoded elements (a hash or a comparison of them is one of the values).
  const std::uint8_t* raw() const { return bytes_.data(); }
  /// Every value as a double (a copy).
  std::vector<double> values() const;
  /// Gives the memory of elements [first, last) back to the kernel (the whole pages inside it), for
  /// the one holder of the values once it has read them for the last time: they read as 0 after.
  void discard(std::size_t first, std::size_t last) const;
  operator std::vector<double>() const { return values(); }  // NOLINT: reads as the vector it replaces

  /// Equal sizes and encoded elements (NaN equals NaN; -0 differs from 0).
  friend bool operator==(const TensorData& a, const TensorData& b);
  /// Equal values, compared as doubles.
  friend bool operator==(const TensorData& a, const std::vector<double>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < b.size(); ++i)
      if (a[i] != b[i]) return false;
    return true;
  }

  /// A random-access iterator over the values (as doubles).
  class const_iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = double;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = double;
    const_iterator() = default;
    const_iterator(const TensorData* data, std::size_t i) : data_(data), i_(i) {}
    double operator*() const { return (*data_)[i_]; }
    double operator[](difference_type k) const { return (*data_)[static_cast<std::size_t>(static_cast<difference_type>(i_) + k)]; }
    const_iterator& operator++() { ++i_; return *this; }
    const_iterator operator++(int) { auto c = *this; ++i_; return c; }
    const_iterator& operator--() { --i_; return *this; }
    const_iterator operator--(int) { auto c = *this; --i_; return c; }
    const_iterator& operator+=(difference_type k) { i_ = static_cast<std::size_t>(static_cast<difference_type>(i_) + k); return *this; }
    const_iterator& operator-=(difference_type k) { return *this += -k; }
    friend const_iterator operator+(const_iterator a, difference_type k) { return a += k; }
    friend const_iterator operator+(difference_type k, const_iterator a) { return a += k; }
    friend const_iterator operator-(const_iterator a, difference_type k) { return a -= k; }
    friend difference_type operator-(const const_iterator& a, const const_iterator& b) {
      return static_cast<difference_type>(a.i_) - static_cast<difference_type>(b.i_);
    }
    friend bool operator==(const const_iterator& a, const const_iterator& b) { return a.i_ == b.i_; }
    friend auto operator<=>(const const_iterator& a, const const_iterator& b) { return a.i_ <=> b.i_; }

   private:
    const TensorData* data_ = nullptr;
    std::size_t i_ = 0;
  };
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }

 private:
  std::vector<std::uint8_t, PageAllocator<std::uint8_t>> bytes_;
  std::size_t size_ = 0;
  Encoding encoding_ = Encoding::kF64;
};

/// Shared values, as a graph tensor and a chip's weight image hold them.
using SharedTensorData = std::shared_ptr<const TensorData>;
/// Shared values made from doubles.
SharedTensorData shareTensorData(const std::vector<double>& values);

}  // namespace tsp
