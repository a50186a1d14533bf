// Units and small numeric helpers: cycles, bytes, nanoseconds and a stable hash.
#pragma once

#include <cstdint>
#include <string_view>

namespace tsp {

/// A count of chip clock cycles (at superlane 0, relative to program start).
using Cycle = std::int64_t;
/// A count of bytes.
using Bytes = std::int64_t;

/// ceil(a / b) for positive integers.
constexpr std::int64_t ceilDiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

/// Converts nanoseconds to cycles at clockMhz, rounding up (docs/machine-model.md, "Figures": link latency).
constexpr Cycle nsToCycles(double ns, double clockMhz) {
  const double exact = ns * clockMhz / 1000.0;
  const auto whole = static_cast<Cycle>(exact);
  return (static_cast<double>(whole) < exact - 1e-9) ? whole + 1 : whole;
}

/// 64-bit FNV-1a: a stable hash for content addressing (chip specs, programs).
constexpr std::uint64_t fnv1a(std::string_view text, std::uint64_t seed = 1469598103934665603ULL) {
  std::uint64_t h = seed;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace tsp
