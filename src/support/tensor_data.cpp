#include "support/tensor_data.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>

namespace tsp {

template <typename T>
void* PageAllocator<T>::allocateBytes(std::size_t bytes) {
  if (bytes < kMappedBytes) return ::operator new(bytes);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

template <typename T>
void PageAllocator<T>::deallocateBytes(void* p, std::size_t bytes) {
  if (bytes < kMappedBytes) {
    ::operator delete(p);
    return;
  }
  munmap(p, bytes);
}

template struct PageAllocator<std::uint8_t>;

namespace {

using Encoding = TensorData::Encoding;

// The FP16 bit pattern of v when v is an FP16 value (NaN as the quiet NaN), else false.
bool exactHalf(double v, std::uint16_t& bits) {
  const std::uint16_t sign = std::signbit(v) ? 0x8000u : 0u;
  if (std::isnan(v)) {
    bits = 0x7e00u;
    return true;
  }
  const double a = std::fabs(v);
  if (std::isinf(v) || a == 0.0) {
    bits = static_cast<std::uint16_t>(sign | (std::isinf(v) ? 0x7c00u : 0u));
    return true;
  }
  int e = 0;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1): normal FP16 exponents are e - 1 in [-14, 15]
  if (e - 1 > 15) return false;
  if (e - 1 >= -14) {
    const double mantissa = std::ldexp(a, -(e - 1)) - 1.0;  // [0, 1)
    const double steps = mantissa * 1024.0;
    if (steps != std::floor(steps)) return false;
    bits = static_cast<std::uint16_t>(sign | static_cast<unsigned>(e - 1 + 15) << 10 | static_cast<unsigned>(steps));
    return true;
  }
  const double steps = std::ldexp(a, 24);  // subnormal: multiples of 2^-24
  if (steps != std::floor(steps) || steps >= 1024.0) return false;
  bits = static_cast<std::uint16_t>(sign | static_cast<unsigned>(steps));
  return true;
}

double halfValue(std::uint16_t h) {
  const double sign = (h & 0x8000u) ? -1.0 : 1.0;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 0x1f) return mantissa ? std::nan("") : sign * HUGE_VAL;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

bool integerIn(double v, double lo, double hi) { return v >= lo && v <= hi && v == std::trunc(v) && !(v == 0.0 && std::signbit(v)); }

bool fits(Encoding encoding, double v) {
  std::uint16_t bits = 0;
  switch (encoding) {
    case Encoding::kI8: return integerIn(v, -128.0, 127.0);
    case Encoding::kF16: return exactHalf(v, bits);
    case Encoding::kI32: return integerIn(v, -2147483648.0, 2147483647.0);
    case Encoding::kF32: return std::isnan(v) || static_cast<double>(static_cast<float>(v)) == v;
    case Encoding::kF64: return true;
  }
  return true;
}

int widthOf(Encoding encoding) {
  switch (encoding) {
    case Encoding::kI8: return 1;
    case Encoding::kF16: return 2;
    case Encoding::kI32: case Encoding::kF32: return 4;
    case Encoding::kF64: return 8;
  }
  return 8;
}

}  // namespace

TensorData TensorData::generate(std::size_t n, const std::function<double(std::size_t)>& value,
                                const std::function<void(std::size_t, std::size_t)>& read) {
  const auto blockRead = [&](std::size_t i) {
    if (read && ((i + 1) % kGenerateBlock == 0 || i + 1 == n)) read(i / kGenerateBlock * kGenerateBlock, i + 1);
  };
  // The narrowest encoding every value fits: a value that does not fit one rules it out for good.
  bool possible[] = {true, true, true, true, true};
  for (std::size_t i = 0; i < n; ++i) {
    const double v = value(i);
    for (int k = 0; k < 4; ++k) possible[k] = possible[k] && fits(static_cast<Encoding>(k), v);
    blockRead(i);
  }
  TensorData d;
  d.size_ = n;
  int chosen = 0;
  while (!possible[chosen]) ++chosen;
  d.encoding_ = static_cast<Encoding>(chosen);
  const int width = widthOf(d.encoding_);
  d.bytes_.resize(n * static_cast<std::size_t>(width));
  std::uint8_t* p = d.bytes_.data();
  for (std::size_t i = 0; i < n; ++i, p += width) {
    const double v = value(i);
    switch (d.encoding_) {
      case Encoding::kI8: *p = static_cast<std::uint8_t>(static_cast<std::int8_t>(v)); break;
      case Encoding::kF16: { std::uint16_t h = 0; exactHalf(v, h); std::memcpy(p, &h, 2); break; }
      case Encoding::kI32: { const auto x = static_cast<std::int32_t>(v); std::memcpy(p, &x, 4); break; }
      case Encoding::kF32: { const auto x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
      case Encoding::kF64: std::memcpy(p, &v, 8); break;
    }
    blockRead(i);
  }
  return d;
}

TensorData::TensorData(const std::vector<double>& values)
    : TensorData(generate(values.size(), [&](std::size_t i) { return values[i]; })) {}

double TensorData::operator[](std::size_t i) const {
  const std::uint8_t* p = bytes_.data() + i * static_cast<std::size_t>(widthOf(encoding_));
  switch (encoding_) {
    case Encoding::kI8: return static_cast<std::int8_t>(*p);
    case Encoding::kF16: { std::uint16_t h; std::memcpy(&h, p, 2); return halfValue(h); }
    case Encoding::kI32: { std::int32_t x; std::memcpy(&x, p, 4); return x; }
    case Encoding::kF32: { float x; std::memcpy(&x, p, 4); return x; }
    case Encoding::kF64: { double x; std::memcpy(&x, p, 8); return x; }
  }
  return 0.0;
}

double TensorData::at(std::size_t i) const {
  if (i >= size_) throw std::out_of_range("TensorData::at");
  return (*this)[i];
}

std::vector<double> TensorData::values() const {
  std::vector<double> out(size_);
  for (std::size_t i = 0; i < size_; ++i) out[i] = (*this)[i];
  return out;
}

void TensorData::discard(std::size_t first, std::size_t last) const {
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const std::size_t width = static_cast<std::size_t>(widthOf(encoding_));
  last = std::min(last, size_);
  if (first >= last) return;
  const auto begin = reinterpret_cast<std::uintptr_t>(bytes_.data() + first * width);
  const auto end = reinterpret_cast<std::uintptr_t>(bytes_.data() + last * width);
  const std::uintptr_t from = (begin + page - 1) / page * page, to = end / page * page;
  // Advice only: pages the kernel keeps keep their values, which no one reads.
  if (from < to) madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
}

bool operator==(const TensorData& a, const TensorData& b) {
  if (a.size_ != b.size_) return false;
  if (a.encoding_ == b.encoding_) return a.bytes_ == b.bytes_;
  for (std::size_t i = 0; i < a.size_; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

SharedTensorData shareTensorData(const std::vector<double>& values) {
  return std::make_shared<const TensorData>(values);
}

}  // namespace tsp
