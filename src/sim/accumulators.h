// The VXM's named accumulators in functional mode: reductions and normalisation statistics, as Kokkos kernels.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "compile/isa/program.h"
#include "sim/chip.h"
#include "support/expected.h"

namespace tsp::sim {

/// The running values of every named accumulator of one chip (isa::Accumulator), one entry per
/// output element, FP32 in FP16 mode and INT32 in INT8 mode. An accumulator starts empty (sum 0,
/// maximum -infinity, no elements seen) at its first accumulate.
class AccumulatorBank {
 public:
  AccumulatorBank(ElementType element, int lanes) : element_(element), lanes_(lanes) {}

  /// kAccumulate: folds `count` vectors (lanes elements each, FP16 bits or INT8 bytes) of rows
  /// operand.row0 + j, tile operand.tile of the accumulator's input into their output elements.
  Status accumulate(int id, const isa::Accumulator& acc, const isa::FunctionalOperand& operand, const std::uint8_t* vectors,
                    std::int64_t count);
  /// kEmit: `count` vectors of output rows operand.row0 + j, tile operand.tile (a mean divided by
  /// the divisor, INT8 truncated toward zero and wrapped); lanes past the output's values are zero.
  Expected<std::vector<std::uint8_t>> emit(int id, const isa::Accumulator& acc, const isa::FunctionalOperand& operand,
                                           std::int64_t count);
  /// kNormalize: each element of `count` vectors by the statistics of its output element (softmax:
  /// exp(x - max) / sum; moments: (x - mean) / sqrt(variance + epsilon)), FP16 only.
  Expected<std::vector<std::uint8_t>> normalize(int id, const isa::Accumulator& acc, const isa::FunctionalOperand& operand,
                                                const std::uint8_t* vectors, std::int64_t count) const;

 private:
  struct Values {
    std::vector<float> a, b, n;  // sum / max / running max / mean; softmax sum / M2; elements seen (moments)
    std::vector<std::int32_t> i; // INT8 mode: the sum or maximum
  };
  // The output element of every (vector j, lane l), -1 past the input's values.
  std::vector<std::int64_t> outputIndex(const isa::Accumulator& acc, const isa::FunctionalOperand& operand,
                                        std::int64_t count) const;
  Values& state(int id, const isa::Accumulator& acc);

  ElementType element_;
  int lanes_;
  std::map<int, Values> values_;
};

}  // namespace tsp::sim
