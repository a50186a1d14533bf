// Deterministic tensor values for the partition tests' small graphs.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "support/tensor_data.h"

namespace tsp::partition::testing {

/// n values in [-1, 1) from a linear congruential stream seeded by seed.
inline SharedTensorData values(std::int64_t n, std::uint64_t seed) {
  std::vector<double> v(static_cast<size_t>(n));
  std::uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (auto& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<double>((s >> 33) % 2048) / 1024.0 - 1.0;
  }
  return shareTensorData(v);
}

}  // namespace tsp::partition::testing
