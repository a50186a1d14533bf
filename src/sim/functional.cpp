// Functional-mode arithmetic: binary16 conversion, MXM and VXM kernels on Kokkos, the tolerance check.
#include "sim/functional.h"

#include <cmath>
#include <cstring>
#include <vector>

#include <Kokkos_Core.hpp>
#include <fmt/format.h>

namespace tsp::sim {

namespace {

using Host = Kokkos::DefaultHostExecutionSpace;
template <typename T>
using HostView = Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// The FP32 lane function of a VXM op; binary functions read b, kScaleAdd the immediates.
KOKKOS_INLINE_FUNCTION float applyFloat(isa::VxmFunc func, float a, float b, float immediate, float immediate2) {
  switch (func) {
    case isa::VxmFunc::kAdd: return a + b;
    case isa::VxmFunc::kSub: return a - b;
    case isa::VxmFunc::kMul: return a * b;
    case isa::VxmFunc::kDiv: return a / b;
    case isa::VxmFunc::kPow: return std::pow(a, b);
    case isa::VxmFunc::kMax: return a != a || a > b ? a : b;  // a NaN operand gives NaN
    case isa::VxmFunc::kScaleAdd: return a * immediate + b * immediate2;
    case isa::VxmFunc::kEqual: return a == b ? 1.0f : 0.0f;
    case isa::VxmFunc::kMaskSet: return b != 0.0f ? a : 0.0f;
    case isa::VxmFunc::kMaskClear: return b == 0.0f ? a : 0.0f;
    case isa::VxmFunc::kRelu: return a > 0.0f ? a : 0.0f;
    case isa::VxmFunc::kGelu: return 0.5f * a * (1.0f + std::erf(a * 0.70710678118654752f));  // ONNX Gelu (erf form)
    case isa::VxmFunc::kTanh: return std::tanh(a);
    case isa::VxmFunc::kExp: return std::exp(a);
    case isa::VxmFunc::kRsqrt: return 1.0f / std::sqrt(a);
    case isa::VxmFunc::kSigmoid: return 1.0f / (1.0f + std::exp(-a));
    case isa::VxmFunc::kSqrt: return std::sqrt(a);
    case isa::VxmFunc::kErf: return std::erf(a);
    case isa::VxmFunc::kNeg: return -a;
    case isa::VxmFunc::kAbs: return std::fabs(a);
    case isa::VxmFunc::kReciprocal: return 1.0f / a;
    case isa::VxmFunc::kFloor: return std::floor(a);
    case isa::VxmFunc::kCeil: return std::ceil(a);
    case isa::VxmFunc::kLog: return std::log(a);
    case isa::VxmFunc::kSin: return std::sin(a);
    case isa::VxmFunc::kCos: return std::cos(a);
    case isa::VxmFunc::kNot: return a == 0.0f ? 1.0f : 0.0f;
    case isa::VxmFunc::kSoftplus: return a > 30.0f ? a : std::log1p(std::exp(a));
    case isa::VxmFunc::kLeakyRelu: return a >= 0.0f ? a : immediate * a;
    case isa::VxmFunc::kElu: return a > 0.0f ? a : immediate * (std::exp(a) - 1.0f);
    case isa::VxmFunc::kHardSigmoid: return std::fmin(1.0f, std::fmax(0.0f, immediate * a + immediate2));
    case isa::VxmFunc::kHardSwish: return a * std::fmin(1.0f, std::fmax(0.0f, a / 6.0f + 0.5f));
    case isa::VxmFunc::kMin: return a != a || a < b ? a : b;  // a NaN operand gives NaN
    case isa::VxmFunc::kFmod: return std::fmod(a, b);
    case isa::VxmFunc::kMod: {
      const float r = std::fmod(a, b);
      return r != 0.0f && ((r < 0.0f) != (b < 0.0f)) ? r + b : r;
    }
    case isa::VxmFunc::kLess: return a < b ? 1.0f : 0.0f;
    case isa::VxmFunc::kGreater: return a > b ? 1.0f : 0.0f;
    case isa::VxmFunc::kLessOrEqual: return a <= b ? 1.0f : 0.0f;
    case isa::VxmFunc::kGreaterOrEqual: return a >= b ? 1.0f : 0.0f;
    case isa::VxmFunc::kAnd: return a != 0.0f && b != 0.0f ? 1.0f : 0.0f;
    case isa::VxmFunc::kOr: return a != 0.0f || b != 0.0f ? 1.0f : 0.0f;
    default: return a;  // kConvert: FP16 to FP16 is the identity
  }
}

}  // namespace

bool isBinaryFunc(isa::VxmFunc func) {
  return func == isa::VxmFunc::kAdd || func == isa::VxmFunc::kSub || func == isa::VxmFunc::kMul ||
         func == isa::VxmFunc::kDiv || func == isa::VxmFunc::kPow || func == isa::VxmFunc::kMax ||
         func == isa::VxmFunc::kScaleAdd || func == isa::VxmFunc::kEqual || func == isa::VxmFunc::kMaskSet ||
         func == isa::VxmFunc::kMaskClear || func == isa::VxmFunc::kMin || func == isa::VxmFunc::kMod ||
         func == isa::VxmFunc::kFmod || func == isa::VxmFunc::kLess || func == isa::VxmFunc::kGreater ||
         func == isa::VxmFunc::kLessOrEqual || func == isa::VxmFunc::kGreaterOrEqual || func == isa::VxmFunc::kAnd ||
         func == isa::VxmFunc::kOr;
}

std::uint16_t floatToBf16(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  const std::uint32_t rest = bits & 0xffffu, upper = bits >> 16;
  return static_cast<std::uint16_t>(upper + (rest > 0x8000u || (rest == 0x8000u && (upper & 1u)) ? 1u : 0u));
}

float bf16ToFloat(std::uint16_t bits) {
  const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

std::uint16_t floatToHalf(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u)  // infinity, or NaN kept quiet
    return static_cast<std::uint16_t>(sign | (magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to infinity
  if (magnitude < 0x38800000u) {
    // Below 2^-14: a subnormal, value / 2^-24 rounded to nearest even (the scaling is exact).
    float scaled;
    std::memcpy(&scaled, &magnitude, sizeof scaled);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(scaled * 16777216.0f)));
  }
  std::uint32_t half = ((((magnitude >> 23) - 127 + 15) << 10) | ((magnitude & 0x7fffffu) >> 13));
  const std::uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // a carry moves into the exponent
  return static_cast<std::uint16_t>(sign | half);
}

float halfToFloat(std::uint16_t bits) {
  const std::uint32_t sign = (bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  const std::uint32_t out =
      exponent == 31 ? (sign | 0x7f800000u | (mantissa << 13)) : (sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
  float value;
  std::memcpy(&value, &out, sizeof value);
  return value;
}

void mxmAccumulateInt8(const std::int8_t* x, const std::int8_t* w, std::int32_t* acc, int rows, int k, int n) {
  // W transposed once so that each dot product reads both operands contiguously.
  std::vector<std::int8_t> wt(static_cast<size_t>(k) * n);
  const HostView<std::int8_t> tv(wt.data(), wt.size());
  const HostView<const std::int8_t> xv(x, static_cast<size_t>(rows) * k), wv(w, wt.size());
  Kokkos::parallel_for(
      "tsp.mxm_int8_transpose", Kokkos::MDRangePolicy<Host, Kokkos::Rank<2>>({0, 0}, {k, n}),
      KOKKOS_LAMBDA(const int i, const int j) { tv(static_cast<size_t>(j) * k + i) = wv(static_cast<size_t>(i) * n + j); });
  const HostView<std::int32_t> av(acc, static_cast<size_t>(rows) * n);
  Kokkos::parallel_for(
      "tsp.mxm_int8", Kokkos::MDRangePolicy<Host, Kokkos::Rank<2>>({0, 0}, {rows, n}),
      KOKKOS_LAMBDA(const int r, const int j) {
        std::int32_t sum = 0;  // |sum| <= 320 * 128 * 128: no overflow
        const size_t xr = static_cast<size_t>(r) * k, wc = static_cast<size_t>(j) * k;
        for (int i = 0; i < k; ++i) sum += static_cast<std::int32_t>(xv(xr + i)) * tv(wc + i);
        av(static_cast<size_t>(r) * n + j) += sum;
      });
  Kokkos::fence();
}

void mxmAccumulateFp16(const std::uint16_t* x, const std::uint16_t* w, float* acc, int rows, int k, int n) {
  // The FP16 operands are widened once (exact), W transposed so that each dot product reads both
  // operands contiguously; every sum still runs over i in ascending order, in FP32.
  std::vector<float> xf(static_cast<size_t>(rows) * k), wt(static_cast<size_t>(k) * n);
  const HostView<float> xv(xf.data(), xf.size()), wv(wt.data(), wt.size());
  const HostView<const std::uint16_t> xh(x, xf.size()), wh(w, wt.size());
  Kokkos::parallel_for(
      "tsp.mxm_fp16_widen_x", Kokkos::RangePolicy<Host>(0, xf.size()),
      KOKKOS_LAMBDA(const std::size_t i) { xv(i) = halfToFloat(xh(i)); });
  Kokkos::parallel_for(
      "tsp.mxm_fp16_widen_w", Kokkos::MDRangePolicy<Host, Kokkos::Rank<2>>({0, 0}, {k, n}),
      KOKKOS_LAMBDA(const int i, const int j) {
        wv(static_cast<size_t>(j) * k + i) = halfToFloat(wh(static_cast<size_t>(i) * n + j));
      });
  const HostView<float> av(acc, static_cast<size_t>(rows) * n);
  Kokkos::parallel_for(
      "tsp.mxm_fp16", Kokkos::MDRangePolicy<Host, Kokkos::Rank<2>>({0, 0}, {rows, n}),
      KOKKOS_LAMBDA(const int r, const int j) {
        float sum = av(static_cast<size_t>(r) * n + j);
        const size_t xr = static_cast<size_t>(r) * k, wc = static_cast<size_t>(j) * k;
        for (int i = 0; i < k; ++i) sum += xv(xr + i) * wv(wc + i);
        av(static_cast<size_t>(r) * n + j) = sum;
      });
  Kokkos::fence();
}

void emitFp16(const float* acc, std::uint16_t* out, std::size_t count) {
  const HostView<const float> av(acc, count);
  const HostView<std::uint16_t> ov(out, count);
  Kokkos::parallel_for(
      "tsp.emit_fp16", Kokkos::RangePolicy<Host>(0, count),
      KOKKOS_LAMBDA(const std::size_t i) { ov(i) = floatToHalf(av(i)); });
  Kokkos::fence();
}

void vxmFp16(isa::VxmFunc func, const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* out,
             std::size_t count, float immediate, float immediate2) {
  const HostView<const std::uint16_t> av(a, count), bv(isBinaryFunc(func) ? b : a, count);
  const HostView<std::uint16_t> ov(out, count);
  Kokkos::parallel_for(
      "tsp.vxm_fp16", Kokkos::RangePolicy<Host>(0, count), KOKKOS_LAMBDA(const std::size_t i) {
        ov(i) = floatToHalf(applyFloat(func, halfToFloat(av(i)), halfToFloat(bv(i)), immediate, immediate2));
      });
  Kokkos::fence();
}

void vxmFloat(isa::VxmFunc func, const float* a, const float* b, float* out, std::size_t count, float immediate,
              float immediate2) {
  const HostView<const float> av(a, count), bv(isBinaryFunc(func) ? b : a, count);
  const HostView<float> ov(out, count);
  Kokkos::parallel_for(
      "tsp.vxm_fp32", Kokkos::RangePolicy<Host>(0, count),
      KOKKOS_LAMBDA(const std::size_t i) { ov(i) = applyFloat(func, av(i), bv(i), immediate, immediate2); });
  Kokkos::fence();
}

Status vxmInt32(isa::VxmFunc func, const std::int32_t* a, const std::int32_t* b, std::int32_t* out,
                std::size_t count) {
  if (func != isa::VxmFunc::kAdd && func != isa::VxmFunc::kSub && func != isa::VxmFunc::kMul &&
      func != isa::VxmFunc::kDiv && func != isa::VxmFunc::kPow && func != isa::VxmFunc::kMax &&
      func != isa::VxmFunc::kRelu && func != isa::VxmFunc::kConvert && func != isa::VxmFunc::kEqual &&
      func != isa::VxmFunc::kMaskSet && func != isa::VxmFunc::kMaskClear && func != isa::VxmFunc::kNeg &&
      func != isa::VxmFunc::kAbs && func != isa::VxmFunc::kNot && func != isa::VxmFunc::kMin &&
      func != isa::VxmFunc::kMod && func != isa::VxmFunc::kFmod && func != isa::VxmFunc::kLess &&
      func != isa::VxmFunc::kGreater && func != isa::VxmFunc::kLessOrEqual && func != isa::VxmFunc::kGreaterOrEqual &&
      func != isa::VxmFunc::kAnd && func != isa::VxmFunc::kOr)
    return makeError(ExitCode::kModel, fmt::format("VXM function {} has no integer form", isa::vxmFuncName(func)));
  const HostView<const std::int32_t> av(a, count), bv(isBinaryFunc(func) ? b : a, count);
  const HostView<std::int32_t> ov(out, count);
  Kokkos::parallel_for(
      "tsp.vxm_int32", Kokkos::RangePolicy<Host>(0, count), KOKKOS_LAMBDA(const std::size_t i) {
        // Two's-complement wrap, computed unsigned so that overflow is defined.
        const auto x = static_cast<std::uint32_t>(av(i)), y = static_cast<std::uint32_t>(bv(i));
        std::uint32_t r = x;
        if (func == isa::VxmFunc::kAdd) r = x + y;
        if (func == isa::VxmFunc::kSub) r = x - y;
        if (func == isa::VxmFunc::kMul) r = x * y;
        if (func == isa::VxmFunc::kRelu) r = av(i) > 0 ? x : 0u;
        if (func == isa::VxmFunc::kMax) r = av(i) > bv(i) ? x : y;
        if (func == isa::VxmFunc::kEqual) r = x == y ? 1u : 0u;
        if (func == isa::VxmFunc::kMaskSet) r = y != 0 ? x : 0u;
        if (func == isa::VxmFunc::kMaskClear) r = y == 0 ? x : 0u;
        if (func == isa::VxmFunc::kNeg) r = 0u - x;
        if (func == isa::VxmFunc::kAbs) r = av(i) < 0 ? 0u - x : x;
        if (func == isa::VxmFunc::kNot) r = x == 0 ? 1u : 0u;
        if (func == isa::VxmFunc::kMin) r = av(i) < bv(i) ? x : y;
        if (func == isa::VxmFunc::kLess) r = av(i) < bv(i) ? 1u : 0u;
        if (func == isa::VxmFunc::kGreater) r = av(i) > bv(i) ? 1u : 0u;
        if (func == isa::VxmFunc::kLessOrEqual) r = av(i) <= bv(i) ? 1u : 0u;
        if (func == isa::VxmFunc::kGreaterOrEqual) r = av(i) >= bv(i) ? 1u : 0u;
        if (func == isa::VxmFunc::kAnd) r = x != 0 && y != 0 ? 1u : 0u;
        if (func == isa::VxmFunc::kOr) r = x != 0 || y != 0 ? 1u : 0u;
        // Mod: a divisor of zero gives zero; fmod keeps the dividend's sign, mod takes the divisor's.
        if (func == isa::VxmFunc::kMod || func == isa::VxmFunc::kFmod) {
          const std::int64_t d = bv(i), m = d == 0 ? 0 : static_cast<std::int64_t>(av(i)) % d;
          const bool flip = func == isa::VxmFunc::kMod && m != 0 && ((m < 0) != (d < 0));
          r = static_cast<std::uint32_t>(flip ? m + d : m);
        }
        // Truncating division; a divisor of zero gives zero (the IR's integer rule).
        if (func == isa::VxmFunc::kDiv)
          r = bv(i) == 0 ? 0u : static_cast<std::uint32_t>(static_cast<std::int64_t>(av(i)) / bv(i));
        if (func == isa::VxmFunc::kPow) {
          // Repeated multiplication, wrapping; a negative exponent gives 1 for a base of 1, else 0.
          r = bv(i) < 0 ? (av(i) == 1 ? 1u : 0u) : 1u;
          for (std::int32_t e = 0; e < bv(i); ++e) r *= x;
        }
        ov(i) = static_cast<std::int32_t>(r);
      });
  Kokkos::fence();
  return {};
}

namespace {
// sqrt(n) for a count of at least 1.
double rootOf(std::int64_t n) { return std::sqrt(static_cast<double>(std::max<std::int64_t>(1, n))); }
}  // namespace

Tolerance fp16Tolerance(std::int64_t reductionLength) {
  return {std::ldexp(1.0, -14), std::ldexp(1.0, -10) * rootOf(reductionLength)};
}

Tolerance fp16TensorTolerance(std::int64_t reductionLength, double largestMagnitude, std::int64_t roundingDepth) {
  Tolerance t = fp16Tolerance(reductionLength);
  t.atol += std::ldexp(std::fabs(largestMagnitude), -10) * rootOf(roundingDepth);
  return t;
}

Tolerance bf16TensorTolerance(std::int64_t reductionLength, double largestMagnitude, std::int64_t roundingDepth) {
  return {std::ldexp(1.0, -14) + std::ldexp(std::fabs(largestMagnitude), -7) * rootOf(roundingDepth),
          std::ldexp(1.0, -7) * rootOf(reductionLength)};
}

Tolerance integerTolerance() { return {0.0, 0.0}; }

void ReferenceComparison::add(const float* simulated, const float* reference, std::size_t count) {
  // Every element is checked; the message names the worst one (the largest excess over its allowance,
  // a NaN or infinity that does not match counting as the worst).
  for (std::size_t i = 0; i < count; ++i) {
    const double s = simulated[i], r = reference[i];
    double excess = 0.0;
    bool ok;
    if (std::isnan(r) || std::isnan(s)) ok = std::isnan(r) && std::isnan(s);
    else if (std::isinf(r) || std::isinf(s)) ok = s == r;
    else {
      const double allowed = tolerance_.atol + tolerance_.rtol * std::fabs(r);
      ok = std::fabs(s - r) <= allowed;
      excess = allowed > 0 ? std::fabs(s - r) / allowed : std::fabs(s - r);
    }
    if (ok) continue;
    if (!std::isfinite(excess) || excess == 0.0) excess = HUGE_VAL;
    if (outside_++ == 0 || excess > worstExcess_) {
      worst_ = count_ + i;
      worstExcess_ = excess;
      worstSimulated_ = simulated[i];
      worstReference_ = reference[i];
    }
  }
  count_ += count;
}

Status ReferenceComparison::result(const std::string& tensor) const {
  if (outside_ == 0) return {};
  return makeError(ExitCode::kFunctionalMismatch,
                   fmt::format("functional output '{}' differs from the reference at element {} (the worst of {} of "
                               "{} elements outside the tolerance): simulated {}, reference {}, allowed |difference| "
                               "<= {} + {} * |reference|",
                               tensor, worst_, outside_, count_, worstSimulated_, worstReference_, tolerance_.atol,
                               tolerance_.rtol));
}

Status compareWithReference(const std::string& tensor, const float* simulated, const float* reference,
                            std::size_t count, const Tolerance& tolerance) {
  ReferenceComparison comparison(tolerance);
  comparison.add(simulated, reference, count);
  return comparison.result(tensor);
}

}  // namespace tsp::sim
