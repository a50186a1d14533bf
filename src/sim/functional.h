// Functional-mode arithmetic: FP16 storage with FP32 accumulation, INT8 with INT32, as Kokkos kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "compile/isa/program.h"
#include "support/expected.h"

namespace tsp::sim {

/// IEEE 754 binary16 bits of a float, rounded to nearest, ties to even (overflow gives infinity).
std::uint16_t floatToHalf(float value);
/// The float value of IEEE 754 binary16 bits (exact).
float halfToFloat(std::uint16_t bits);
/// bfloat16 bits of a float (its upper 16 bits), rounded to nearest, ties to even (NaN kept quiet).
std::uint16_t floatToBf16(float value);
/// The float value of bfloat16 bits (exact).
float bf16ToFloat(std::uint16_t bits);

/// One MXM plane step over a block of rows, INT8 x INT8 into INT32 accumulators:
/// acc[r][j] += sum_k x[r][k] * w[k][j] (row-major x: rows x k, w: k x n, acc: rows x n).
void mxmAccumulateInt8(const std::int8_t* x, const std::int8_t* w, std::int32_t* acc, int rows, int k, int n);
/// The same in FP16 x FP16 with FP32 accumulation: products and sums are FP32, never rounded to FP16.
void mxmAccumulateFp16(const std::uint16_t* x, const std::uint16_t* w, float* acc, int rows, int k, int n);
/// FP32 accumulators to FP16 storage (when a compute with a destination emits its row).
void emitFp16(const float* acc, std::uint16_t* out, std::size_t count);

/// Whether a VXM function reads a second operand (Add, Sub, Mul, Div, Pow, Max, ScaleAdd).
bool isBinaryFunc(isa::VxmFunc func);
/// A VXM ALU op on FP16 vectors: lanes are computed in FP32 and stored back as FP16. `b` is read by
/// the binary functions only, the immediates by ScaleAdd (a * immediate + b * immediate2).
void vxmFp16(isa::VxmFunc func, const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* out,
             std::size_t count, float immediate = 0.0f, float immediate2 = 1.0f);
/// A VXM ALU op on FP32 lanes (the lanes of mixed-type operands widened to FP32); the caller
/// stores the result in its element type.
void vxmFloat(isa::VxmFunc func, const float* a, const float* b, float* out, std::size_t count, float immediate = 0.0f,
              float immediate2 = 1.0f);
/// A VXM ALU op on INT32 lanes (Add, Sub, Mul, Pow wrap as two's complement; Div truncates, x / 0 = 0;
/// Max; Relu; Equal gives 1 or 0; Convert is the identity). Transcendental functions have no integer form: an error
/// naming the function.
Status vxmInt32(isa::VxmFunc func, const std::int32_t* a, const std::int32_t* b, std::int32_t* out,
                std::size_t count);

/// The agreement rule of functional mode: |sim - ref| <= atol + rtol * |ref|.
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
};
/// FP16 storage: rtol = 2^-10 * sqrt(K), K the reduction length (1 for elementwise results), and
/// atol = 2^-14 (the smallest normal FP16: sums that cancel to near zero keep an absolute error).
Tolerance fp16Tolerance(std::int64_t reductionLength);
/// FP16 outputs of a graph: fp16Tolerance(K) with sqrt(D) FP16 units in the last place of the
/// tensor's largest magnitude added to atol (2^-10 sqrt(D) x largest), D the rounding depth: the most
/// rounded results (ops that round, not data movement) on a path into the output, 1 for one op. A
/// rounding that differs by one unit in an earlier tensor, or an input the chip stores rounded, moves
/// a later sum by an amount set by its operands, which a sum that cancels to near zero does not
/// shrink; D such roundings, independent, add up as a random walk (root sum of squares).
Tolerance fp16TensorTolerance(std::int64_t reductionLength, double largestMagnitude, std::int64_t roundingDepth = 1);
/// A BF16 output (7 stored mantissa bits): the FP16 rule with one BF16 unit, 2^-7, in place of 2^-10
/// (rtol = 2^-7 sqrt(K), atol = 2^-14 + 2^-7 sqrt(D) x largest).
Tolerance bf16TensorTolerance(std::int64_t reductionLength, double largestMagnitude, std::int64_t roundingDepth = 1);
/// Integers are exact.
Tolerance integerTolerance();

/// Compares a simulated tensor with the reference element by element; elements outside the
/// tolerance are a diagnostic with exit code 6 naming the tensor, how many, and the worst one's index and values.
Status compareWithReference(const std::string& tensor, const float* simulated, const float* reference,
                            std::size_t count, const Tolerance& tolerance);

/// compareWithReference over a tensor given in consecutive blocks (read from a chip a block at a
/// time): the same verdict and message as one call on the whole tensor.
class ReferenceComparison {
 public:
  explicit ReferenceComparison(Tolerance tolerance) : tolerance_(tolerance) {}
  /// The next `count` elements.
  void add(const float* simulated, const float* reference, std::size_t count);
  /// The verdict over every element added.
  Status result(const std::string& tensor) const;

 private:
  Tolerance tolerance_;
  std::size_t count_ = 0, outside_ = 0, worst_ = 0;
  double worstExcess_ = -1.0;
  float worstSimulated_ = 0.0f, worstReference_ = 0.0f;
};

}  // namespace tsp::sim
