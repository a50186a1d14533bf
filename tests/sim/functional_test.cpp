// Tests of the functional-mode kernels against hand-computed values, and of the tolerance rule.
#include "sim/functional.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "compile/ir/dtype.h"
#include "sim/chip.h"
#include "sim/functional_state.h"
#include "sim/kokkos_environment.h"

namespace tsp::sim {
namespace {

const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new KokkosEnvironment);

TEST(Half, KnownEncodings) {
  EXPECT_EQ(floatToHalf(0.0f), 0x0000);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(0.5f), 0x3800);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);                      // largest finite
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);                      // rounds down
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);                      // the tie goes to infinity (even)
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -14)), 0x0400);         // smallest normal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);         // smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);         // the tie to even is zero
  EXPECT_EQ(floatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(floatToHalf(std::nanf("")) & 0x7c00, 0x7c00);
  EXPECT_NE(floatToHalf(std::nanf("")) & 0x03ff, 0);
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(floatToHalf(2049.0f), floatToHalf(2048.0f));  // halfway between 2048 and 2050: even
  EXPECT_EQ(floatToHalf(2051.0f), floatToHalf(2052.0f));  // halfway between 2050 and 2052: even
  EXPECT_EQ(halfToFloat(floatToHalf(2050.0f)), 2050.0f);
  EXPECT_EQ(halfToFloat(floatToHalf(1.0f + std::ldexp(1.0f, -11))), 1.0f);  // tie below, even
  EXPECT_EQ(halfToFloat(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
}

TEST(Half, EveryHalfRoundTrips) {
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float f = halfToFloat(h);
    if (std::isnan(f)) {
      EXPECT_EQ((h & 0x7c00), 0x7c00);
      continue;
    }
    ASSERT_EQ(floatToHalf(f), h) << "bits " << bits;
  }
  EXPECT_EQ(halfToFloat(0x3555), 0.333251953125f);
}

TEST(Bf16, RoundsToNearestEvenAndEveryEncodingRoundTrips) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(floatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // the tie below: even
  EXPECT_EQ(floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // the tie above: even
  EXPECT_EQ(floatToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(floatToBf16(std::nanf("")) & 0x7f80, 0x7f80);
  EXPECT_NE(floatToBf16(std::nanf("")) & 0x007f, 0);
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    if (std::isnan(bf16ToFloat(b))) continue;
    ASSERT_EQ(floatToBf16(bf16ToFloat(b)), b) << "bits " << bits;
  }
}

TEST(ElementTypes, EncodeAndDecodeEachType) {
  // Each type in its own width: floats rounded, integers wrapped, bool as 0 or 1.
  std::uint8_t bytes[8] = {};
  const auto roundTrip = [&](double v, ir::DType t) {
    encodeElement(v, t, bytes);
    return decodeElement(bytes, t);
  };
  EXPECT_EQ(roundTrip(1.0 / 3, ir::DType::kF16), static_cast<double>(halfToFloat(floatToHalf(1.0f / 3))));
  EXPECT_EQ(roundTrip(1.0 / 3, ir::DType::kBF16), static_cast<double>(bf16ToFloat(floatToBf16(1.0f / 3))));
  EXPECT_EQ(roundTrip(1.0 / 3, ir::DType::kF32), static_cast<double>(1.0f / 3));
  EXPECT_EQ(roundTrip(-129, ir::DType::kI8), 127);
  EXPECT_EQ(roundTrip(2147483648.0, ir::DType::kI32), -2147483648.0);
  EXPECT_EQ(roundTrip(-7, ir::DType::kI64), -7);
  EXPECT_EQ(roundTrip(-0.5, ir::DType::kBool), 1);
  EXPECT_EQ(roundTrip(0, ir::DType::kBool), 0);
}

TEST(MxmKernels, Int8AccumulatesInInt32) {
  // x: 2 x 3, w: 3 x 2, by hand: [1 2 3; -4 5 -6] x [7 8; 9 10; 11 -12].
  const std::vector<std::int8_t> x = {1, 2, 3, -4, 5, -6};
  const std::vector<std::int8_t> w = {7, 8, 9, 10, 11, -12};
  std::vector<std::int32_t> acc = {100, 0, 0, -1};
  mxmAccumulateInt8(x.data(), w.data(), acc.data(), 2, 3, 2);
  // Rows: 7+18+33 = 58, 8+20-36 = -8; -28+45-66 = -49, -32+50+72 = 90; added to the accumulators.
  EXPECT_EQ(acc, (std::vector<std::int32_t>{100 + 58, 0 - 8, 0 - 49, -1 + 90}));
}

TEST(MxmKernels, Int8ExtremesOverAFullPlaneDoNotOverflow) {
  const int k = 320;
  const std::vector<std::int8_t> x(k, -128), w(k, -128);
  std::int32_t acc = 0;
  mxmAccumulateInt8(x.data(), w.data(), &acc, 1, k, 1);
  EXPECT_EQ(acc, 320 * 16384);
  mxmAccumulateInt8(x.data(), w.data(), &acc, 1, k, 1);  // the second K tile adds on
  EXPECT_EQ(acc, 2 * 320 * 16384);
}

TEST(MxmKernels, Fp16AccumulatesInFp32) {
  // 2048 + 1 + 1 + 1 + 1: FP16 accumulation would stay at 2048 (spacing 2 there); FP32 gives 2052.
  const std::vector<std::uint16_t> x = {floatToHalf(2048), floatToHalf(1), floatToHalf(1), floatToHalf(1),
                                        floatToHalf(1)};
  const std::vector<std::uint16_t> w(5, floatToHalf(1));
  float acc = 0;
  mxmAccumulateFp16(x.data(), w.data(), &acc, 1, 5, 1);
  EXPECT_EQ(acc, 2052.0f);
  std::uint16_t out = 0;
  emitFp16(&acc, &out, 1);
  EXPECT_EQ(halfToFloat(out), 2052.0f);
}

TEST(MxmKernels, Fp16MatrixByHand) {
  // [0.5 -1.5] x [2 0.25; 4 -8] = [0.5*2 - 1.5*4, 0.5*0.25 + 1.5*8] = [-5, 12.125]
  const std::vector<std::uint16_t> x = {floatToHalf(0.5f), floatToHalf(-1.5f)};
  const std::vector<std::uint16_t> w = {floatToHalf(2), floatToHalf(0.25f), floatToHalf(4), floatToHalf(-8)};
  std::vector<float> acc(2, 0.0f);
  mxmAccumulateFp16(x.data(), w.data(), acc.data(), 1, 2, 2);
  EXPECT_EQ(acc, (std::vector<float>{-5.0f, 12.125f}));
}

TEST(VxmKernels, Fp16Functions) {
  const std::vector<std::uint16_t> a = {floatToHalf(-1.0f), floatToHalf(0.0f), floatToHalf(1.0f), floatToHalf(4.0f)};
  const std::vector<std::uint16_t> b = {floatToHalf(0.5f), floatToHalf(2.0f), floatToHalf(-3.0f), floatToHalf(0.25f)};
  std::vector<std::uint16_t> out(4);
  auto values = [&] {
    std::vector<float> v;
    for (auto h : out) v.push_back(halfToFloat(h));
    return v;
  };
  vxmFp16(isa::VxmFunc::kAdd, a.data(), b.data(), out.data(), 4);
  EXPECT_EQ(values(), (std::vector<float>{-0.5f, 2.0f, -2.0f, 4.25f}));
  vxmFp16(isa::VxmFunc::kMul, a.data(), b.data(), out.data(), 4);
  EXPECT_EQ(values(), (std::vector<float>{-0.5f, 0.0f, -3.0f, 1.0f}));
  vxmFp16(isa::VxmFunc::kSub, a.data(), b.data(), out.data(), 4);
  EXPECT_EQ(values(), (std::vector<float>{-1.5f, -2.0f, 4.0f, 3.75f}));
  vxmFp16(isa::VxmFunc::kRelu, a.data(), nullptr, out.data(), 4);
  EXPECT_EQ(values(), (std::vector<float>{0.0f, 0.0f, 1.0f, 4.0f}));
  vxmFp16(isa::VxmFunc::kRsqrt, a.data() + 3, nullptr, out.data(), 1);
  EXPECT_EQ(halfToFloat(out[0]), 0.5f);
  // Gelu(1) = 0.5 * (1 + erf(1/sqrt 2)) = 0.841345, stored as FP16 0.8413 (0x3abb).
  vxmFp16(isa::VxmFunc::kGelu, a.data() + 2, nullptr, out.data(), 1);
  EXPECT_EQ(out[0], floatToHalf(0.8413447f));
  vxmFp16(isa::VxmFunc::kExp, a.data() + 1, nullptr, out.data(), 1);
  EXPECT_EQ(halfToFloat(out[0]), 1.0f);
  vxmFp16(isa::VxmFunc::kTanh, a.data() + 1, nullptr, out.data(), 1);
  EXPECT_EQ(halfToFloat(out[0]), 0.0f);
}

TEST(VxmKernels, Int32FunctionsAndTheirLimits) {
  const std::vector<std::int32_t> a = {-7, 0, 2147483647, 5};
  const std::vector<std::int32_t> b = {3, -2, 1, 5};
  std::vector<std::int32_t> out(4);
  ASSERT_TRUE(vxmInt32(isa::VxmFunc::kAdd, a.data(), b.data(), out.data(), 4).ok());
  EXPECT_EQ(out, (std::vector<std::int32_t>{-4, -2, -2147483647 - 1, 10}));  // wraps
  ASSERT_TRUE(vxmInt32(isa::VxmFunc::kMul, a.data(), b.data(), out.data(), 4).ok());
  EXPECT_EQ(out, (std::vector<std::int32_t>{-21, 0, 2147483647, 25}));
  ASSERT_TRUE(vxmInt32(isa::VxmFunc::kRelu, a.data(), nullptr, out.data(), 4).ok());
  EXPECT_EQ(out, (std::vector<std::int32_t>{0, 0, 2147483647, 5}));
  // Division truncates toward zero, x / 0 = 0; pow multiplies (wrapping), a negative exponent gives
  // 1 for a base of 1 and 0 otherwise; max.
  ASSERT_TRUE(vxmInt32(isa::VxmFunc::kDiv, a.data(), b.data(), out.data(), 4).ok());
  EXPECT_EQ(out, (std::vector<std::int32_t>{-2, 0, 2147483647, 1}));
  const std::vector<std::int32_t> zero = {0, 0, 0, 0};
  ASSERT_TRUE(vxmInt32(isa::VxmFunc::kDiv, a.data(), zero.data(), out.data(), 4).ok());
  EXPECT_EQ(out, zero);
  const std::vector<std::int32_t> base = {-3, 1, 2, 7}, exponent = {3, -1, -1, 0};
  ASSERT_TRUE(vxmInt32(isa::VxmFunc::kPow, base.data(), exponent.data(), out.data(), 4).ok());
  EXPECT_EQ(out, (std::vector<std::int32_t>{-27, 1, 0, 1}));
  ASSERT_TRUE(vxmInt32(isa::VxmFunc::kMax, a.data(), b.data(), out.data(), 4).ok());
  EXPECT_EQ(out, (std::vector<std::int32_t>{3, 0, 2147483647, 5}));
  for (const auto func : {isa::VxmFunc::kExp, isa::VxmFunc::kSigmoid, isa::VxmFunc::kSqrt, isa::VxmFunc::kErf}) {
    auto s = vxmInt32(func, a.data(), nullptr, out.data(), 4);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code, ExitCode::kModel);
    EXPECT_NE(s.error().message.find(fmt::format("VXM function {} has no integer form", isa::vxmFuncName(func))),
              std::string::npos);
  }
}

TEST(VxmKernels, EqualInFp32AndInt32) {
  const std::vector<float> a = {1.0f, -0.0f, 2.5f, std::nanf("")}, b = {1.0f, 0.0f, 2.25f, std::nanf("")};
  std::vector<float> f(a.size());
  vxmFloat(isa::VxmFunc::kEqual, a.data(), b.data(), f.data(), a.size());
  EXPECT_EQ(f, (std::vector<float>{1.0f, 1.0f, 0.0f, 0.0f}));  // -0 == 0; NaN equals nothing
  const std::vector<std::int32_t> x = {5, -5, 7}, y = {5, 5, -7};
  std::vector<std::int32_t> r(x.size());
  ASSERT_TRUE(vxmInt32(isa::VxmFunc::kEqual, x.data(), y.data(), r.data(), x.size()).ok());
  EXPECT_EQ(r, (std::vector<std::int32_t>{1, 0, 0}));
}

TEST(VxmKernels, Fp16DivisionAndTranscendentalFunctions) {
  const std::vector<std::uint16_t> a = {floatToHalf(1.0f), floatToHalf(-2.0f), floatToHalf(4.0f), floatToHalf(0.5f)};
  const std::vector<std::uint16_t> b = {floatToHalf(4.0f), floatToHalf(8.0f), floatToHalf(0.5f), floatToHalf(3.0f)};
  std::vector<std::uint16_t> out(4);
  vxmFp16(isa::VxmFunc::kDiv, a.data(), b.data(), out.data(), 4);
  EXPECT_EQ(halfToFloat(out[0]), 0.25f);
  EXPECT_EQ(halfToFloat(out[1]), -0.25f);
  EXPECT_EQ(halfToFloat(out[2]), 8.0f);
  vxmFp16(isa::VxmFunc::kPow, a.data(), b.data(), out.data(), 4);
  EXPECT_EQ(halfToFloat(out[1]), 256.0f);
  EXPECT_EQ(halfToFloat(out[2]), 2.0f);
  EXPECT_EQ(halfToFloat(out[3]), 0.125f);
  vxmFp16(isa::VxmFunc::kMax, a.data(), b.data(), out.data(), 4);
  EXPECT_EQ(halfToFloat(out[2]), 4.0f);
  EXPECT_EQ(halfToFloat(out[3]), 3.0f);
  vxmFp16(isa::VxmFunc::kSqrt, a.data() + 2, nullptr, out.data(), 1);
  EXPECT_EQ(halfToFloat(out[0]), 2.0f);
  vxmFp16(isa::VxmFunc::kSigmoid, a.data(), nullptr, out.data(), 1);
  EXPECT_EQ(out[0], floatToHalf(0.7310586f));
  vxmFp16(isa::VxmFunc::kErf, a.data() + 3, nullptr, out.data(), 1);
  EXPECT_EQ(out[0], floatToHalf(0.5204999f));
  vxmFp16(isa::VxmFunc::kScaleAdd, a.data(), b.data(), out.data(), 4, 0.5f);  // a * 0.5 + b
  EXPECT_EQ(halfToFloat(out[0]), 4.5f);
  EXPECT_EQ(halfToFloat(out[1]), 7.0f);
}

TEST(Tolerance, Fp16GrowsWithTheReductionLength) {
  EXPECT_DOUBLE_EQ(fp16Tolerance(1).rtol, 1.0 / 1024);
  EXPECT_DOUBLE_EQ(fp16Tolerance(4096).rtol, 64.0 / 1024);
  EXPECT_DOUBLE_EQ(integerTolerance().rtol, 0.0);
  EXPECT_DOUBLE_EQ(integerTolerance().atol, 0.0);
}

TEST(Tolerance, TensorScaleAddsOneUnitOfTheLargestElement) {
  const Tolerance t = fp16TensorTolerance(16, 8.0);
  EXPECT_DOUBLE_EQ(t.rtol, 4.0 / 1024);
  EXPECT_DOUBLE_EQ(t.atol, std::ldexp(1.0, -14) + 8.0 / 1024);
  // A sum that cancels to 0.001 in a tensor whose largest element is 8 may be 0.008 off, not 0.02.
  const std::vector<float> ref = {8.0f, 0.001f};
  std::vector<float> sim = {8.0f, 0.008f};
  EXPECT_TRUE(compareWithReference("y", sim.data(), ref.data(), 2, t).ok());
  EXPECT_FALSE(compareWithReference("y", sim.data(), ref.data(), 2, fp16Tolerance(16)).ok());
  sim[1] = 0.02f;
  EXPECT_FALSE(compareWithReference("y", sim.data(), ref.data(), 2, t).ok());
}

TEST(Tolerance, AtolGrowsWithTheSquareRootOfTheRoundingDepth) {
  // D roundings, each up to a unit of the largest element, add up as sqrt(D) units; rtol keeps K.
  EXPECT_DOUBLE_EQ(fp16TensorTolerance(16, 8.0, 1).atol, fp16TensorTolerance(16, 8.0).atol);
  const Tolerance deep = fp16TensorTolerance(16, 8.0, 64);
  EXPECT_DOUBLE_EQ(deep.rtol, 4.0 / 1024);
  EXPECT_DOUBLE_EQ(deep.atol, std::ldexp(1.0, -14) + 8 * 8.0 / 1024);
  EXPECT_DOUBLE_EQ(bf16TensorTolerance(16, 8.0, 64).atol, std::ldexp(1.0, -14) + 8 * 8.0 / 128);
  // Two units off near zero: outside at depth 1, inside at depth 64; a tenth of the largest is outside both.
  const std::vector<float> ref = {8.0f, 0.001f};
  std::vector<float> sim = {8.0f, 0.001f + 2 * 8.0f / 1024};
  EXPECT_FALSE(compareWithReference("y", sim.data(), ref.data(), 2, fp16TensorTolerance(16, 8.0, 1)).ok());
  EXPECT_TRUE(compareWithReference("y", sim.data(), ref.data(), 2, deep).ok());
  sim[1] = 0.8f;
  EXPECT_FALSE(compareWithReference("y", sim.data(), ref.data(), 2, deep).ok());
}

TEST(Tolerance, MismatchNamesTheWorstElement) {
  const std::vector<float> ref = {1.0f, 2.0f, 3.0f, 4.0f};
  const std::vector<float> sim = {1.1f, 2.0f, 3.9f, 4.2f};
  auto s = compareWithReference("z", sim.data(), ref.data(), 4, fp16Tolerance(1));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("at element 2 (the worst of 3 of 4 elements outside the tolerance)"),
            std::string::npos)
      << s.error().message;
}

TEST(Tolerance, ComparisonInBlocksGivesTheWholeTensorsVerdict) {
  // The output check reads a large output a block of rows at a time: the worst element's index,
  // the count outside and the total are the whole tensor's.
  const std::vector<float> ref = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  const std::vector<float> sim = {1.1f, 2.0f, 3.0f, 4.0f, 5.9f, 6.0f};
  const Status whole = compareWithReference("z", sim.data(), ref.data(), 6, fp16Tolerance(1));
  ASSERT_FALSE(whole.ok());
  ReferenceComparison blocks(fp16Tolerance(1));
  for (size_t at = 0; at < 6; at += 2) blocks.add(sim.data() + at, ref.data() + at, 2);
  const Status inBlocks = blocks.result("z");
  ASSERT_FALSE(inBlocks.ok());
  EXPECT_EQ(inBlocks.error().format(), whole.error().format());
  EXPECT_NE(whole.error().message.find("at element 4 (the worst of 2 of 6 elements"), std::string::npos)
      << whole.error().message;
  ReferenceComparison same(fp16Tolerance(1));
  same.add(ref.data(), ref.data(), 3);
  same.add(ref.data() + 3, ref.data() + 3, 3);
  EXPECT_TRUE(same.result("z").ok());
}

TEST(Tolerance, MismatchIsExitCodeSix) {
  const std::vector<float> ref = {1.0f, -100.0f, 0.0f};
  std::vector<float> sim = {1.0f + 1.0f / 1024, -100.0f * (1 + 1.0f / 1100), 0.00006f};
  EXPECT_TRUE(compareWithReference("y", sim.data(), ref.data(), 3, fp16Tolerance(1)).ok());
  sim[1] = -100.0f * (1 + 1.0f / 1000);  // beyond 2^-10 relative
  auto s = compareWithReference("y", sim.data(), ref.data(), 3, fp16Tolerance(1));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ExitCode::kFunctionalMismatch);
  EXPECT_NE(s.error().message.find("functional output 'y' differs from the reference at element 1 (the worst of 1"),
            std::string::npos)
      << s.error().message;
  EXPECT_TRUE(compareWithReference("y", sim.data(), ref.data(), 3, fp16Tolerance(4)).ok());  // K = 4 doubles rtol
  const std::vector<float> ints = {3.0f, -5.0f};
  std::vector<float> off = {3.0f, -4.0f};
  EXPECT_FALSE(compareWithReference("q", off.data(), ints.data(), 2, integerTolerance()).ok());
  const std::vector<float> nan = {std::nanf("")};
  EXPECT_TRUE(compareWithReference("n", nan.data(), nan.data(), 1, integerTolerance()).ok());
  EXPECT_FALSE(compareWithReference("n", ints.data(), nan.data(), 1, integerTolerance()).ok());
}

}  // namespace
}  // namespace tsp::sim

namespace tsp::sim {
namespace {

// A resident placement of `rows` x one tile at `address` of the first MEM slice.
isa::TensorPlacement placementAt(const topology::ChipSpec& spec, const std::string& name, ir::DType dtype,
                                 std::int64_t rows, std::int32_t address) {
  isa::TensorPlacement t;
  t.name = name;
  t.dtype = static_cast<std::int32_t>(dtype);
  t.rows = rows;
  t.tiles = 1;
  t.memUnit = {spec.firstUnit(topology::UnitKind::kMem)};
  t.address = {address};
  t.resident = true;
  return t;
}

TEST(FunctionalState, RowBlocksOfASegmentedPlacementReadItsRows) {
  // Two tiles, each in segments of 3 rows on two MEM slices: every block of rows within a segment
  // reads the rows the whole placement holds there.
  const topology::ChipSpec spec;
  FunctionalState state(spec, ElementType::kFp16);
  const int lanes = state.lanes(), mem = spec.firstUnit(topology::UnitKind::kMem);
  const std::int64_t rows = 7, cols = lanes + 5;
  isa::TensorPlacement t = placementAt(spec, "y", ir::DType::kF16, rows, 0);
  t.tiles = 2;
  t.segmentRows = 3;
  t.memUnit = {mem, mem + 1, mem + 2, mem + 3, mem + 4, mem + 5};  // tile-major: 2 tiles x 3 segments
  t.address = {0, 10, 20, 30, 40, 50};
  std::vector<double> values(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i % 1000);
  ASSERT_TRUE(state.place(t, {cols, shareTensorData(values), {}}).ok());
  ASSERT_EQ(state.read(t, cols), values);
  for (const auto& [row0, n] : {std::pair{0, 3}, std::pair{3, 2}, std::pair{5, 1}, std::pair{6, 1}}) {
    const std::vector<double> block = state.read(rowBlock(t, row0, n), cols);
    EXPECT_EQ(block, std::vector<double>(values.begin() + row0 * cols, values.begin() + (row0 + n) * cols))
        << "rows " << row0 << " to " << row0 + n;
  }
}

TEST(FunctionalState, APlacementThatConsumesItsValuesGivesTheirMemoryBack) {
  // 4,096 rows of 160 FP16 values (1.3 MB): placed exactly, and the values' pages are returned as
  // their rows are written (they read as 0 after).
  const topology::ChipSpec spec;
  FunctionalState state(spec, ElementType::kFp16);
  const std::int64_t rows = 4096, cols = state.lanes();
  const isa::TensorPlacement t = placementAt(spec, "w", ir::DType::kF16, rows, 0);
  std::vector<double> values(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i % 1000) + 1;
  const auto data = shareTensorData(values);
  ASSERT_TRUE(state.place(t, {cols, data, {}}, /*consume=*/true).ok());
  EXPECT_EQ(state.read(t, cols), values);
  EXPECT_EQ((*data)[values.size() / 2], 0.0);
}

TEST(FunctionalState, APlacementWithAMapStoresEachElementMapped) {
  // A folded weight is placed as map(i, data[i]), i the element's index in data, also when the
  // chip's order reads data through an index map (here reversed, the last position a zero).
  const topology::ChipSpec spec;
  FunctionalState state(spec, ElementType::kFp16);
  const std::int64_t rows = 3, cols = state.lanes(), n = rows * cols;
  const isa::TensorPlacement t = placementAt(spec, "w", ir::DType::kF16, rows, 0);
  std::vector<double> values(static_cast<size_t>(n - 1));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i % 50) / 8;
  TensorValues v{cols, shareTensorData(values), [n](std::int64_t i) { return i + 1 == n ? -1 : n - 2 - i; }, n};
  v.map = [cols](std::int64_t i, double x) { return x * static_cast<double>(1 + i / cols) + 1.0 / 3; };
  ASSERT_TRUE(state.place(t, v).ok());
  const auto held = state.read(t, cols);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t from = i + 1 == n ? -1 : n - 2 - i;
    const double expected = from < 0 ? 0.0 : v.map(from, values[static_cast<size_t>(from)]);
    EXPECT_EQ(held[static_cast<size_t>(i)], static_cast<double>(halfToFloat(floatToHalf(static_cast<float>(expected))))) << i;
  }
}

// Lines of /proc/self/maps: the process's memory mappings, which vm.max_map_count bounds.
int mappingCount() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int lines = 0;
  while (std::getline(maps, line)) ++lines;
  return lines;
}

TEST(FunctionalState, AChipWritingEveryMemSliceHoldsOneMapping) {
  // 100 chips each write vectors of all their 88 MEM slices: at most one new mapping per chip
  // (a mapping per slice would be 8,800, and 745 such chips would pass vm.max_map_count's 65,530),
  // and every vector reads back as written, the rows never written as 0.
  const topology::ChipSpec spec;
  const int chips = 100, mem = spec.firstUnit(topology::UnitKind::kMem);
  const int before = mappingCount();
  std::vector<std::unique_ptr<FunctionalState>> states;
  auto write = [&](FunctionalState& state, int slice, std::int32_t address, std::uint8_t value) {
    isa::Instruction inst;
    inst.unit = mem + slice;
    inst.address = address;
    inst.repeat = 1;
    inst.stride = 1;
    state.memWrite(inst, std::vector<std::uint8_t>(static_cast<size_t>(spec.vectorBytes), value));
  };
  for (int c = 0; c < chips; ++c) {
    states.push_back(std::make_unique<FunctionalState>(spec, ElementType::kInt8));
    // A low address of every slice, then a high one of every other slice: writes reaching past
    // what a slice held, between slices that hold less.
    for (int s = 0; s < spec.memSlices; ++s) write(*states.back(), s, s * 7, static_cast<std::uint8_t>(c + s));
    for (int s = 0; s < spec.memSlices; s += 2) write(*states.back(), s, spec.addressesPerSlice - 1, 1);
  }
  EXPECT_LE(mappingCount() - before, chips);
  for (int c = 0; c < chips; c += 33)
    for (int s = 0; s < spec.memSlices; s += 29) {
      isa::Instruction read;
      read.unit = mem + s;
      read.address = s * 7;
      read.repeat = 2;
      read.stride = 1;
      const VectorRun run = states[static_cast<size_t>(c)]->memRead(read);
      std::vector<std::uint8_t> expected(static_cast<size_t>(spec.vectorBytes), static_cast<std::uint8_t>(c + s));
      expected.resize(2 * expected.size(), 0);
      EXPECT_EQ(*run, expected) << "chip " << c << " slice " << s;
    }
}

TEST(FunctionalState, GatherPermuteReadsInt32IdsAndRefusesOneOutOfRange) {
  // A 4 x 8 FP16 table and INT32 ids [1, -1] (4-byte lanes): the permute's rows are table rows 1
  // and 3; an id of 9 is refused naming the indices, the element and the table.
  const topology::ChipSpec spec;
  FunctionalState state(spec, ElementType::kFp16);
  isa::Program program;
  program.tensors = {placementAt(spec, "table", ir::DType::kF16, 4, 0), placementAt(spec, "ids", ir::DType::kI32, 1, 10)};
  std::vector<double> table(32);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<double>(i);
  ASSERT_TRUE(state.place(program.tensors[0], {8, shareTensorData(table), {}}).ok());
  ASSERT_TRUE(state.place(program.tensors[1], {2, shareTensorData({1, -1}), {}}).ok());
  EXPECT_EQ(state.read(program.tensors[1], 2), (std::vector<double>{1, -1}));
  isa::ElementMap gather;
  gather.sources = {"table"};
  gather.sourceDims = {4, 8};
  gather.sourceCols = {8};
  gather.outDims = {2, 8};
  gather.outCols = 8;
  gather.from = {0, 1};
  gather.starts = {0, 0};
  gather.steps = {1, 1};
  gather.indices = "ids";
  gather.indexDims = {2};
  gather.indexAxis = 0;
  program.maps = {gather};
  isa::FunctionalOperand operand;
  operand.map = 0;
  auto rows = state.permute(program, operand, 2);
  ASSERT_TRUE(rows.ok()) << rows.error().format();
  const auto* halves = reinterpret_cast<const std::uint16_t*>((*rows)->data());
  const int lanes = state.lanes();
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(halfToFloat(halves[c]), 8.0f + static_cast<float>(c));
    EXPECT_EQ(halfToFloat(halves[lanes + c]), 24.0f + static_cast<float>(c));
  }
  EXPECT_EQ(halves[8], 0);  // lanes past the values stay zero
  ASSERT_TRUE(state.place(program.tensors[1], {2, shareTensorData({1, 9}), {}}).ok());
  auto bad = state.permute(program, operand, 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ExitCode::kModel);
  EXPECT_EQ(bad.error().message, "Gather index 9 of 'ids' (element 1) is out of range [0, 4) of 'table'");
}

}  // namespace
}  // namespace tsp::sim
