// The reference interpreter: straightforward loops over row-major data, one kernel per op kind.
#include "compile/ir/interpreter.h"

#include "compile/ir/op_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include <fmt/format.h>

namespace tsp::ir {

namespace {

using Shape = std::vector<std::int64_t>;

std::int64_t product(const Shape& s, std::int64_t from = 0, std::int64_t to = -1) {
  const auto rank = static_cast<std::int64_t>(s.size());
  if (to < 0 || to > rank) to = rank;
  std::int64_t n = 1;
  for (std::int64_t i = std::max<std::int64_t>(from, 0); i < to; ++i) n *= s[static_cast<size_t>(i)];
  return n;
}

std::int64_t normAxis(std::int64_t axis, size_t rank) {
  return axis < 0 ? axis + static_cast<std::int64_t>(rank) : axis;
}

// Strides of in as seen from an output of shape out under numpy broadcasting (0 on broadcast axes).
std::vector<std::int64_t> broadcastStrides(const Shape& in, const Shape& out) {
  std::vector<std::int64_t> strides(out.size(), 0);
  std::int64_t stride = 1;
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t inAxis = in.size() - 1 - i, outAxis = out.size() - 1 - i;
    strides[outAxis] = in[inAxis] == 1 ? 0 : stride;
    stride *= in[inAxis];
  }
  return strides;
}

// Calls fn(outIndex, inOffsets...) for every element of out, with each input broadcast to out.
void forEachBroadcast(const Shape& out, const std::vector<const Shape*>& ins,
                      const std::function<void(std::int64_t, const std::vector<std::int64_t>&)>& fn) {
  std::vector<std::vector<std::int64_t>> strides;
  for (const Shape* s : ins) strides.push_back(broadcastStrides(*s, out));
  std::vector<std::int64_t> index(out.size(), 0), offsets(ins.size(), 0);
  const std::int64_t total = product(out);
  for (std::int64_t flat = 0; flat < total; ++flat) {
    fn(flat, offsets);
    for (size_t axis = out.size(); axis-- > 0;) {
      ++index[axis];
      for (size_t k = 0; k < ins.size(); ++k) offsets[k] += strides[k][axis];
      if (index[axis] < out[axis]) break;
      for (size_t k = 0; k < ins.size(); ++k) offsets[k] -= strides[k][axis] * out[axis];
      index[axis] = 0;
    }
  }
}

std::int64_t asInt(double v) {
  if (!(v == v)) return 0;
  if (v >= 9.2e18) return std::numeric_limits<std::int64_t>::max();
  if (v <= -9.2e18) return std::numeric_limits<std::int64_t>::min();
  return static_cast<std::int64_t>(v);
}

// The elementwise kinds' reference functions are the op table's (op_table.cpp).
double unaryOp(OpKind kind, double x, const Attrs& attrs) {
  return opDefinition(kind).unary(x, Op{kind, "", {}, {}, attrs, 0});
}

double binaryOp(OpKind kind, double a, double b, DType dtype, const Attrs& attrs = {}) {
  const bool integer = !isFloat(dtype) && dtype != DType::kBool;
  return opDefinition(kind).binary(a, b, Op{kind, "", {}, {}, attrs, 0}, integer);
}

bool isUnary(OpKind kind) { return opDefinition(kind).unary != nullptr; }

bool isBinary(OpKind kind) { return opDefinition(kind).binary != nullptr; }

Value make(const TensorType& type) {
  Value v;
  v.dtype = type.dtype;
  v.shape = type.shape;
  v.data.assign(static_cast<size_t>(product(type.shape)), 0.0);
  return v;
}

// Batched matmul with numpy broadcasting of the batch dimensions; accumulates in double.
void matmul(const Value& a0, const Value& b0, Value& out) {
  Shape a = a0.shape, b = b0.shape;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  const std::int64_t m = a[a.size() - 2], k = a.back(), n = b.back();
  const Shape aBatch(a.begin(), a.end() - 2), bBatch(b.begin(), b.end() - 2);
  Shape batch = *broadcastShapes(aBatch, bBatch);
  const bool integer = !isFloat(out.dtype);
  std::int64_t block = 0;
  forEachBroadcast(batch, {&aBatch, &bBatch}, [&](std::int64_t, const std::vector<std::int64_t>& off) {
    const double* pa = a0.data.data() + off[0] * m * k;
    const double* pb = b0.data.data() + off[1] * k * n;
    double* po = out.data.data() + block * m * n;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        if (integer) {
          std::int64_t acc = 0;
          for (std::int64_t q = 0; q < k; ++q) acc += asInt(pa[i * k + q]) * asInt(pb[q * n + j]);
          po[i * n + j] = static_cast<double>(acc);
        } else {
          double acc = 0;
          for (std::int64_t q = 0; q < k; ++q) acc += pa[i * k + q] * pb[q * n + j];
          po[i * n + j] = acc;
        }
      }
    ++block;
  });
}

// Spatial geometry of a conv or pool, padded out to three spatial axes.
struct Window {
  std::int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1},
               dilation[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, padEnd[3] = {0, 0, 0};
};

Window windowOf(const Op& op, const Shape& x, const Shape& y, const Shape& kernel) {
  Window w;
  const size_t spatial = x.size() - 2, shift = 3 - spatial;
  const WindowAttrs attrs = windowAttrs(op, spatial);
  for (size_t i = 0; i < spatial; ++i) {
    w.in[shift + i] = x[2 + i];
    w.out[shift + i] = y[2 + i];
    w.kernel[shift + i] = kernel[i];
    w.stride[shift + i] = attrs.strides[i];
    w.dilation[shift + i] = attrs.dilations[i];
    w.pad[shift + i] = attrs.padBegin(i);
    w.padEnd[shift + i] = attrs.padEnd(i);
  }
  return w;
}

// Calls tap(xIndex, wIndex, yIndex) for every multiply of a convolution with input shape x, weight
// shape w and output shape y: the one loop nest both convolution gradients are made of.
void forEachConvTap(const Op& op, const Shape& x, const Shape& w, const Shape& y,
                    const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& tap) {
  const std::int64_t group = op.intAttr("group", 1);
  const Window g = windowOf(op, x, y, Shape(w.begin() + 2, w.end()));
  const std::int64_t batch = x[0], cin = x[1], cout = w[0], cinG = cin / group, coutG = cout / group;
  const std::int64_t inPlane = g.in[0] * g.in[1] * g.in[2], kPlane = g.kernel[0] * g.kernel[1] * g.kernel[2];
  for (std::int64_t nb = 0; nb < batch; ++nb)
    for (std::int64_t co = 0; co < cout; ++co)
      for (std::int64_t od = 0; od < g.out[0]; ++od)
        for (std::int64_t oh = 0; oh < g.out[1]; ++oh)
          for (std::int64_t ow = 0; ow < g.out[2]; ++ow) {
            const std::int64_t yi = ((nb * cout + co) * g.out[0] + od) * g.out[1] * g.out[2] + oh * g.out[2] + ow;
            for (std::int64_t ci = 0; ci < cinG; ++ci)
              for (std::int64_t kd = 0; kd < g.kernel[0]; ++kd) {
                const std::int64_t id = od * g.stride[0] - g.pad[0] + kd * g.dilation[0];
                if (id < 0 || id >= g.in[0]) continue;
                for (std::int64_t kh = 0; kh < g.kernel[1]; ++kh) {
                  const std::int64_t ih = oh * g.stride[1] - g.pad[1] + kh * g.dilation[1];
                  if (ih < 0 || ih >= g.in[1]) continue;
                  for (std::int64_t kw = 0; kw < g.kernel[2]; ++kw) {
                    const std::int64_t iw = ow * g.stride[2] - g.pad[2] + kw * g.dilation[2];
                    if (iw < 0 || iw >= g.in[2]) continue;
                    tap((nb * cin + co / coutG * cinG + ci) * inPlane + (id * g.in[1] + ih) * g.in[2] + iw,
                        (co * cinG + ci) * kPlane + (kd * g.kernel[1] + kh) * g.kernel[2] + kw, yi);
                  }
                }
              }
          }
}

void conv(const Op& op, const Value& x, const Value& w, const Value* bias, Value& y) {
  const std::int64_t cout = w.shape[0], plane = product(y.shape, 2);
  const bool integer = !isFloat(y.dtype);
  // Integers accumulate exactly in 64 bits; floating point in double, in the same tap order.
  std::vector<std::int64_t> iacc(integer ? y.data.size() : 0, 0);
  if (bias)
    for (size_t i = 0; i < y.data.size(); ++i) {
      const std::int64_t co = static_cast<std::int64_t>(i) / plane % cout;
      if (integer) iacc[i] = asInt(bias->data[co]);
      else y.data[i] = bias->data[co];
    }
  forEachConvTap(op, x.shape, w.shape, y.shape, [&](std::int64_t xi, std::int64_t wi, std::int64_t yi) {
    if (integer) iacc[yi] += asInt(x.data[xi]) * asInt(w.data[wi]);
    else y.data[yi] += x.data[xi] * w.data[wi];
  });
  if (integer)
    for (size_t i = 0; i < y.data.size(); ++i) y.data[i] = static_cast<double>(iacc[i]);
}

// Softmax cross-entropy over the class axis: calls row(base, stride, classes, label) for every
// position; returns an error message for a label out of range.
std::string forEachLossRow(const Value& scores, const Value& labels, std::int64_t axis,
                           const std::function<void(std::int64_t, std::int64_t, std::int64_t, std::int64_t)>& row) {
  const std::int64_t n = scores.shape[axis], inner = product(scores.shape, axis + 1),
                     outer = product(scores.shape, 0, axis);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      const std::int64_t label = asInt(labels.data[o * inner + i]);
      if (label < 0 || label >= n) return fmt::format("label {} is out of range [0, {})", label, n);
      row(o * n * inner + i, inner, n, label);
    }
  return "";
}

// log(sum(exp(x))) over one row of a loss, computed stably.
double logSumExp(const Value& x, std::int64_t base, std::int64_t stride, std::int64_t n) {
  double m = -std::numeric_limits<double>::infinity(), sum = 0;
  for (std::int64_t k = 0; k < n; ++k) m = std::max(m, x.data[base + k * stride]);
  for (std::int64_t k = 0; k < n; ++k) sum += std::exp(x.data[base + k * stride] - m);
  return m + std::log(sum);
}

// Calls window(yIndex, taps, padded) for every output of a pool with input shape x and output
// shape y: taps are the input indices the window covers (in loop order), padded the positions it
// covers in the explicit padding (which count for count_include_pad; ceil_mode windows may
// overhang the padding, and those positions do not count).
void forEachPoolWindow(const Op& op, const Shape& x, const Shape& y,
                       const std::function<void(std::int64_t, const std::vector<std::int64_t>&, std::int64_t)>& window) {
  const Window g = windowOf(op, x, y, op.intsAttr("kernel_shape"));
  const std::int64_t planes = x[0] * x[1];
  const std::int64_t inPlane = g.in[0] * g.in[1] * g.in[2], outPlane = g.out[0] * g.out[1] * g.out[2];
  std::vector<std::int64_t> taps;
  for (std::int64_t p = 0; p < planes; ++p)
    for (std::int64_t od = 0; od < g.out[0]; ++od)
      for (std::int64_t oh = 0; oh < g.out[1]; ++oh)
        for (std::int64_t ow = 0; ow < g.out[2]; ++ow) {
          taps.clear();
          std::int64_t padded = 0;
          for (std::int64_t kd = 0; kd < g.kernel[0]; ++kd)
            for (std::int64_t kh = 0; kh < g.kernel[1]; ++kh)
              for (std::int64_t kw = 0; kw < g.kernel[2]; ++kw) {
                const std::int64_t id = od * g.stride[0] - g.pad[0] + kd * g.dilation[0];
                const std::int64_t ih = oh * g.stride[1] - g.pad[1] + kh * g.dilation[1];
                const std::int64_t iw = ow * g.stride[2] - g.pad[2] + kw * g.dilation[2];
                const bool inPadded = id < g.in[0] + g.padEnd[0] && ih < g.in[1] + g.padEnd[1] &&
                                      iw < g.in[2] + g.padEnd[2];
                if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1] || iw < 0 || iw >= g.in[2]) {
                  padded += inPadded;
                  continue;
                }
                taps.push_back(p * inPlane + (id * g.in[1] + ih) * g.in[2] + iw);
              }
          window(p * outPlane + (od * g.out[1] + oh) * g.out[2] + ow, taps, padded);
        }
}

// The divisor of an average pool window.
double averageDivisor(const Op& op, size_t taps, std::int64_t padded) {
  const bool includePad = op.intAttr("count_include_pad", 0) != 0;
  return static_cast<double>(std::max<std::int64_t>(1, static_cast<std::int64_t>(taps) + (includePad ? padded : 0)));
}

// The first tap holding the window's largest value (the one a max pool passes on).
std::int64_t argmaxTap(const Value& x, const std::vector<std::int64_t>& taps) {
  std::int64_t best = -1;
  for (std::int64_t t : taps)
    if (best < 0 || x.data[t] > x.data[best]) best = t;
  return best;
}

void pool(const Op& op, const Value& x, Value& y) {
  const bool isMax = op.kind == OpKind::kMaxPool;
  forEachPoolWindow(op, x.shape, y.shape, [&](std::int64_t yi, const std::vector<std::int64_t>& taps, std::int64_t padded) {
    if (isMax) {
      const std::int64_t best = argmaxTap(x, taps);
      y.data[yi] = best < 0 ? -std::numeric_limits<double>::infinity() : x.data[best];
      return;
    }
    double acc = 0;
    for (std::int64_t t : taps) acc += x.data[t];
    y.data[yi] = acc / averageDivisor(op, taps.size(), padded);
  });
}

Value transpose(const Value& x, const Shape& perm, const TensorType& outType) {
  Value y = make(outType);
  const size_t rank = x.shape.size();
  std::vector<std::int64_t> inStrides(rank, 1);
  for (size_t i = rank; i-- > 1;) inStrides[i - 1] = inStrides[i] * x.shape[i];
  Shape permutedStrides(rank);
  for (size_t i = 0; i < rank; ++i) permutedStrides[i] = inStrides[perm[i]];
  std::vector<std::int64_t> index(rank, 0);
  std::int64_t offset = 0;
  for (std::int64_t flat = 0; flat < y.elements(); ++flat) {
    y.data[flat] = x.data[offset];
    for (size_t axis = rank; axis-- > 0;) {
      ++index[axis];
      offset += permutedStrides[axis];
      if (index[axis] < y.shape[axis]) break;
      offset -= permutedStrides[axis] * y.shape[axis];
      index[axis] = 0;
    }
  }
  return y;
}

// Applies one FusedElementwise step: kind on the running value and the extra operand.
double fusedStep(std::int64_t kind, double running, double extra, std::int64_t position, DType dtype,
                 const Attrs& attrs) {
  const auto k = static_cast<OpKind>(kind);
  if (isUnary(k)) return unaryOp(k, running, attrs);
  return position == 0 ? binaryOp(k, running, extra, dtype, attrs) : binaryOp(k, extra, running, dtype, attrs);
}

}  // namespace

std::int64_t Value::elements() const { return product(shape); }

namespace {

// bfloat16 rounding (nearest, ties to even) on the value's float bits.
double toBf16(double v) {
  const auto f = static_cast<float>(v);
  if (!std::isfinite(f)) return f;
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

#if defined(__clang__) && __clang_major__ < 15
// clang 14 (the fuzz build) has no _Float16 on x86-64: the same rounding written out (to nearest
// even, 11 significant bits, subnormal steps of 2^-24 below 2^-14, infinity from 65520 up).
double roundToHalf(double v) {
  if (!std::isfinite(v) || v == 0.0) return v;
  int e = 0;
  std::frexp(v, &e);  // |v| = m 2^e, m in [0.5, 1)
  const double quantum = std::ldexp(1.0, std::max(e, -13) - 11);
  const double r = std::nearbyint(v / quantum) * quantum;
  return std::fabs(r) >= 65520.0 ? std::copysign(HUGE_VAL, v) : r;
}
#else
double roundToHalf(double v) { return static_cast<double>(static_cast<_Float16>(v)); }
#endif

}  // namespace

double toStorage(double v, DType dtype) {
  switch (dtype) {
    case DType::kF16: return roundToHalf(v);
    case DType::kBF16: return toBf16(v);
    case DType::kF32: return static_cast<double>(static_cast<float>(v));
    case DType::kBool: return v != 0.0 ? 1.0 : 0.0;
    case DType::kI8: return static_cast<double>(static_cast<std::int8_t>(static_cast<std::uint8_t>(asInt(v) & 0xff)));
    case DType::kI32:
      return static_cast<double>(static_cast<std::int32_t>(static_cast<std::uint32_t>(asInt(v) & 0xffffffffLL)));
    case DType::kI64: return std::trunc(v);
  }
  return v;
}

double castTo(double v, DType dtype) {
  switch (dtype) {
    case DType::kF32: case DType::kF16: case DType::kBF16: return static_cast<double>(static_cast<float>(v));
    case DType::kBool: return v != 0 ? 1.0 : 0.0;
    case DType::kI8: return static_cast<double>(static_cast<std::int8_t>(static_cast<std::uint8_t>(asInt(v) & 0xff)));
    case DType::kI32:
      return static_cast<double>(static_cast<std::int32_t>(static_cast<std::uint32_t>(asInt(v) & 0xffffffffLL)));
    case DType::kI64: return static_cast<double>(asInt(v));
  }
  return v;
}

Expected<std::vector<Value>> evaluateOp(OpKind kind, const std::string& name, const Attrs& attrs,
                                        const std::vector<const Value*>& in, const std::vector<TensorType>& outTypes) {
  const Op op{kind, name, {}, {}, attrs, 0};
  std::vector<Value> outs;
  for (const auto& t : outTypes) outs.push_back(make(t));
  auto finish = [&]() -> Expected<std::vector<Value>> {
    for (auto& v : outs)
      for (double& d : v.data) d = castTo(d, v.dtype);
    return std::move(outs);
  };
  static const Value kNoInput;
  const Value& x = in.empty() ? kNoInput : *in[0];
  Value* y = outs.empty() ? nullptr : &outs[0];

  if (isUnary(kind)) {
    for (size_t i = 0; i < x.data.size(); ++i) y->data[i] = unaryOp(kind, x.data[i], attrs);
    return finish();
  }
  if (isBinary(kind)) {
    const DType dtype = opDefinition(kind).shape == ShapeRule::kCompare ? in[0]->dtype : y->dtype;
    forEachBroadcast(y->shape, {&in[0]->shape, &in[1]->shape}, [&](std::int64_t i, const std::vector<std::int64_t>& o) {
      y->data[i] = binaryOp(kind, in[0]->data[o[0]], in[1]->data[o[1]], dtype, attrs);
    });
    return finish();
  }
  switch (kind) {
    case OpKind::kWhere:
      forEachBroadcast(y->shape, {&in[0]->shape, &in[1]->shape, &in[2]->shape},
                       [&](std::int64_t i, const std::vector<std::int64_t>& o) {
                         y->data[i] = in[0]->data[o[0]] != 0 ? in[1]->data[o[1]] : in[2]->data[o[2]];
                       });
      return finish();
    case OpKind::kFusedElementwise: {
      const auto steps = op.intsAttr("steps");
      std::vector<const Shape*> shapes;
      for (const Value* v : in) shapes.push_back(&v->shape);
      forEachBroadcast(y->shape, shapes, [&](std::int64_t i, const std::vector<std::int64_t>& o) {
        double running = in[0]->data[o[0]];
        for (size_t s = 0; s < steps.size(); s += 3) {
          const std::int64_t extra = steps[s + 1];
          running = castTo(fusedStep(steps[s], running, extra >= 0 ? in[extra]->data[o[extra]] : 0.0, steps[s + 2],
                                     in[0]->dtype, attrs),
                           static_cast<OpKind>(steps[s]) == OpKind::kEqual ? DType::kBool : in[0]->dtype);
        }
        y->data[i] = running;
      });
      return finish();
    }
    case OpKind::kMatMul:
      matmul(*in[0], *in[1], *y);
      return finish();
    case OpKind::kFusedMatMul: {
      matmul(*in[0], *in[1], *y);
      if (in.size() > 2) {
        Value biased = *y;
        forEachBroadcast(y->shape, {&y->shape, &in[2]->shape}, [&](std::int64_t i, const std::vector<std::int64_t>& o) {
          biased.data[i] = binaryOp(OpKind::kAdd, castTo(y->data[o[0]], y->dtype), in[2]->data[o[1]], y->dtype);
        });
        *y = std::move(biased);
      }
      if (op.hasAttr("activation")) {
        auto act = parseOpKind(op.stringAttr("activation", ""));
        if (!act || !isUnary(*act)) return modelError(name, "FusedMatMul has an unknown activation");
        for (double& d : y->data) d = unaryOp(*act, castTo(d, y->dtype), attrs);
      }
      return finish();
    }
    case OpKind::kGemm: {
      const bool ta = op.intAttr("transA", 0) != 0, tb = op.intAttr("transB", 0) != 0;
      const double alpha = op.floatAttr("alpha", 1.0), beta = op.floatAttr("beta", 1.0);
      const Value a = ta ? transpose(*in[0], {1, 0}, {{in[0]->shape[1], in[0]->shape[0]}, in[0]->dtype}) : *in[0];
      const Value b = tb ? transpose(*in[1], {1, 0}, {{in[1]->shape[1], in[1]->shape[0]}, in[1]->dtype}) : *in[1];
      matmul(a, b, *y);
      if (alpha != 1.0)
        for (double& d : y->data) d *= alpha;
      if (in.size() > 2) {
        const Value product = *y;
        forEachBroadcast(y->shape, {&y->shape, &in[2]->shape}, [&](std::int64_t i, const std::vector<std::int64_t>& o) {
          y->data[i] = product.data[o[0]] + beta * in[2]->data[o[1]];
        });
      }
      return finish();
    }
    case OpKind::kConv:
      conv(op, *in[0], *in[1], in.size() > 2 ? in[2] : nullptr, *y);
      return finish();
    case OpKind::kMaxPool: case OpKind::kAveragePool:
      pool(op, x, *y);
      return finish();
    case OpKind::kGlobalAveragePool: {
      const std::int64_t plane = product(x.shape, 2), planes = x.shape[0] * x.shape[1];
      for (std::int64_t p = 0; p < planes; ++p) {
        double acc = 0;
        for (std::int64_t i = 0; i < plane; ++i) acc += x.data[p * plane + i];
        y->data[p] = acc / static_cast<double>(plane);
      }
      return finish();
    }
    case OpKind::kSoftmax: {
      const std::int64_t axis = normAxis(op.intAttr("axis", -1), x.shape.size());
      const std::int64_t n = x.shape[axis], inner = product(x.shape, axis + 1), outer = product(x.shape, 0, axis);
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t i = 0; i < inner; ++i) {
          const std::int64_t base = o * n * inner + i;
          double m = -std::numeric_limits<double>::infinity(), sum = 0;
          for (std::int64_t k = 0; k < n; ++k) m = std::max(m, x.data[base + k * inner]);
          for (std::int64_t k = 0; k < n; ++k) sum += std::exp(x.data[base + k * inner] - m);
          for (std::int64_t k = 0; k < n; ++k) y->data[base + k * inner] = std::exp(x.data[base + k * inner] - m) / sum;
        }
      return finish();
    }
    case OpKind::kLayerNormalization: {
      const std::int64_t axis = normAxis(op.intAttr("axis", -1), x.shape.size());
      const double eps = op.floatAttr("epsilon", 1e-5);
      const std::int64_t n = product(x.shape, axis), outer = product(x.shape, 0, axis);
      const Shape normalized(x.shape.begin() + axis, x.shape.end());
      const auto scaleStrides = broadcastStrides(in[1]->shape, normalized);
      std::vector<std::int64_t> biasStrides;
      if (in.size() > 2) biasStrides = broadcastStrides(in[2]->shape, normalized);
      std::vector<std::int64_t> scaleIndex(n), biasIndex(n);
      forEachBroadcast(normalized, {&in[1]->shape}, [&](std::int64_t i, const std::vector<std::int64_t>& o) {
        scaleIndex[i] = o[0];
      });
      if (in.size() > 2)
        forEachBroadcast(normalized, {&in[2]->shape}, [&](std::int64_t i, const std::vector<std::int64_t>& o) {
          biasIndex[i] = o[0];
        });
      for (std::int64_t o = 0; o < outer; ++o) {
        const double* px = x.data.data() + o * n;
        double mean = 0, var = 0;
        for (std::int64_t i = 0; i < n; ++i) mean += px[i];
        mean /= static_cast<double>(n);
        for (std::int64_t i = 0; i < n; ++i) var += (px[i] - mean) * (px[i] - mean);
        var /= static_cast<double>(n);
        const double inv = 1 / std::sqrt(var + eps);
        for (std::int64_t i = 0; i < n; ++i)
          y->data[o * n + i] = (px[i] - mean) * inv * in[1]->data[scaleIndex[i]] +
                               (in.size() > 2 ? in[2]->data[biasIndex[i]] : 0.0);
      }
      return finish();
    }
    case OpKind::kBatchNormalization: {
      // On integers the scale and shift are integers: S = round(gamma / sqrt(var + eps)), T =
      // round(beta - mean * S) (ties to even), y = x * S + T, so that folding S into a Conv's integer
      // weights and T into its bias is exact under wrapping.
      const double eps = op.floatAttr("epsilon", 1e-5);
      const bool integer = !isFloat(y->dtype);
      const std::int64_t c = x.shape[1], inner = product(x.shape, 2), outer = x.shape[0];
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t ch = 0; ch < c; ++ch) {
          double scale = in[1]->data[ch] / std::sqrt(in[4]->data[ch] + eps);
          double shift = in[2]->data[ch] - in[3]->data[ch] * scale;
          if (integer) {
            scale = std::nearbyint(scale);
            shift = std::nearbyint(in[2]->data[ch] - in[3]->data[ch] * scale);
          }
          for (std::int64_t i = 0; i < inner; ++i) {
            const std::int64_t at = (o * c + ch) * inner + i;
            y->data[at] = integer ? x.data[at] * scale + shift : (x.data[at] - in[3]->data[ch]) * scale + in[2]->data[ch];
          }
        }
      return finish();
    }
    case OpKind::kReduceMean: case OpKind::kReduceSum: case OpKind::kReduceMax: {
      // Reduce by mapping every input element to its output element.
      const size_t rank = x.shape.size();
      std::vector<bool> reduced(rank, false);
      const auto axes = op.intsAttr("axes");
      if (axes.empty() && op.intAttr("noop_with_empty_axes", 0) == 0) reduced.assign(rank, true);
      for (auto a : axes) reduced[normAxis(a, rank)] = true;
      Shape kept(rank);
      for (size_t i = 0; i < rank; ++i) kept[i] = reduced[i] ? 1 : x.shape[i];
      const bool isMax = kind == OpKind::kReduceMax;
      std::fill(y->data.begin(), y->data.end(), isMax ? -std::numeric_limits<double>::infinity() : 0.0);
      std::vector<std::int64_t> count(y->data.size(), 0);
      const auto outStrides = broadcastStrides(kept, x.shape);
      forEachBroadcast(x.shape, {&kept}, [&](std::int64_t i, const std::vector<std::int64_t>& o) {
        if (isMax) y->data[o[0]] = std::max(y->data[o[0]], x.data[i]);
        else y->data[o[0]] += x.data[i];
        ++count[o[0]];
      });
      (void)outStrides;
      if (kind == OpKind::kReduceMean)
        for (size_t i = 0; i < y->data.size(); ++i) y->data[i] /= static_cast<double>(std::max<std::int64_t>(1, count[i]));
      return finish();
    }
    case OpKind::kReshape: case OpKind::kFlatten: case OpKind::kSqueeze: case OpKind::kUnsqueeze:
      y->data = x.data;
      return finish();
    case OpKind::kCast:
      for (size_t i = 0; i < x.data.size(); ++i)
        y->data[i] = isFloat(y->dtype) || y->dtype == DType::kBool ? x.data[i] : std::trunc(x.data[i]);
      return finish();
    case OpKind::kExpand:
      forEachBroadcast(y->shape, {&x.shape}, [&](std::int64_t i, const std::vector<std::int64_t>& o) {
        y->data[i] = x.data[o[0]];
      });
      return finish();
    case OpKind::kTranspose: {
      Shape perm = op.intsAttr("perm");
      if (perm.empty()) {
        perm.resize(x.shape.size());
        std::iota(perm.rbegin(), perm.rend(), 0);
      }
      outs[0] = transpose(x, perm, outTypes[0]);
      return finish();
    }
    case OpKind::kConcat: {
      const std::int64_t axis = normAxis(op.intAttr("axis", 0), x.shape.size());
      const std::int64_t outer = product(y->shape, 0, axis), inner = product(y->shape, axis + 1);
      std::int64_t offset = 0;
      for (const Value* v : in) {
        const std::int64_t n = v->shape[axis];
        for (std::int64_t o = 0; o < outer; ++o)
          std::copy_n(v->data.begin() + o * n * inner, n * inner,
                      y->data.begin() + (o * y->shape[axis] + offset) * inner);
        offset += n;
      }
      return finish();
    }
    case OpKind::kSplit: {
      const std::int64_t axis = normAxis(op.intAttr("axis", 0), x.shape.size());
      const std::int64_t outer = product(x.shape, 0, axis), inner = product(x.shape, axis + 1);
      std::int64_t offset = 0;
      for (auto& part : outs) {
        const std::int64_t n = part.shape[axis];
        for (std::int64_t o = 0; o < outer; ++o)
          std::copy_n(x.data.begin() + (o * x.shape[axis] + offset) * inner, n * inner, part.data.begin() + o * n * inner);
        offset += n;
      }
      return finish();
    }
    case OpKind::kSlice: {
      const size_t rank = x.shape.size();
      std::vector<std::int64_t> start(rank, 0), step(rank, 1);
      const auto starts = op.intsAttr("starts");
      auto axes = op.intsAttr("axes"), steps = op.intsAttr("steps");
      for (size_t i = 0; i < starts.size(); ++i) {
        const std::int64_t axis = normAxis(axes.empty() ? static_cast<std::int64_t>(i) : axes[i], rank);
        step[axis] = steps.empty() ? 1 : steps[i];
        start[axis] = sliceStart(starts[i], x.shape[axis], step[axis]);
      }
      std::vector<std::int64_t> strides(rank, 1);
      for (size_t i = rank; i-- > 1;) strides[i - 1] = strides[i] * x.shape[i];
      std::vector<std::int64_t> index(rank, 0);
      for (std::int64_t flat = 0; flat < y->elements(); ++flat) {
        std::int64_t offset = 0;
        for (size_t a = 0; a < rank; ++a) offset += (start[a] + index[a] * step[a]) * strides[a];
        y->data[flat] = x.data[offset];
        for (size_t a = rank; a-- > 0;) {
          if (++index[a] < y->shape[a]) break;
          index[a] = 0;
        }
      }
      return finish();
    }
    case OpKind::kGather: {
      const std::int64_t axis = normAxis(op.intAttr("axis", 0), x.shape.size());
      const std::int64_t outer = product(x.shape, 0, axis), inner = product(x.shape, axis + 1), n = x.shape[axis];
      const Value& idx = *in[1];
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t j = 0; j < idx.elements(); ++j) {
          std::int64_t k = asInt(idx.data[j]);
          if (k < 0) k += n;
          if (k < 0 || k >= n) return modelError(name, fmt::format("Gather index {} is out of range [0, {})", k, n));
          std::copy_n(x.data.begin() + (o * n + k) * inner, inner, y->data.begin() + (o * idx.elements() + j) * inner);
        }
      return finish();
    }
    case OpKind::kScatterND: {
      // Rows of data (its first k axes, k the index depth) replaced or combined with rows of updates, in order.
      const Value& idx = *in[1];
      const Value& updates = *in[2];
      const auto depth = static_cast<size_t>(idx.shape.back());
      const std::int64_t row = product(x.shape, static_cast<std::int64_t>(depth));
      const std::string reduction = op.stringAttr("reduction", "none");
      y->data = x.data;
      const std::int64_t rows = product(idx.shape, 0, static_cast<std::int64_t>(idx.shape.size()) - 1);
      for (std::int64_t u = 0; u < rows; ++u) {
        std::int64_t target = 0;
        for (size_t a = 0; a < depth; ++a) {
          std::int64_t k = asInt(idx.data[u * static_cast<std::int64_t>(depth) + static_cast<std::int64_t>(a)]);
          if (k < 0) k += x.shape[a];
          if (k < 0 || k >= x.shape[a])
            return modelError(name, fmt::format("ScatterND index {} of axis {} is out of range [0, {})", k, a,
                                                x.shape[a]));
          target = target * x.shape[a] + k;
        }
        for (std::int64_t i = 0; i < row; ++i) {
          double& to = y->data[target * row + i];
          const double v = updates.data[u * row + i];
          to = reduction == "add" ? binaryOp(OpKind::kAdd, to, v, x.dtype)
               : reduction == "mul" ? binaryOp(OpKind::kMul, to, v, x.dtype)
               : reduction == "max" ? std::max(to, v)
               : reduction == "min" ? std::min(to, v) : v;
        }
      }
      return finish();
    }
    case OpKind::kShape: {
      const auto rank = static_cast<std::int64_t>(x.shape.size());
      std::int64_t start = op.intAttr("start", 0);
      if (start < 0) start += rank;
      start = std::clamp<std::int64_t>(start, 0, rank);
      for (size_t i = 0; i < y->data.size(); ++i) y->data[i] = static_cast<double>(x.shape[start + i]);
      return finish();
    }
    case OpKind::kConstantOfShape:
      std::fill(y->data.begin(), y->data.end(), op.floatAttr("value", 0.0));
      return finish();
    case OpKind::kRange: {
      const double start = in[0]->data[0], delta = in[2]->data[0];
      for (size_t i = 0; i < y->data.size(); ++i) y->data[i] = start + static_cast<double>(i) * delta;
      return finish();
    }
    case OpKind::kAllReduce: case OpKind::kAllGather: case OpKind::kReduceScatter: case OpKind::kAllToAll:
      if (op.intAttr("group", 1) != 1)
        return modelError(name, fmt::format("{} over {} chips needs the other chips' values; the reference "
                                            "interpreter runs the unpartitioned graph", opKindName(kind),
                                            op.intAttr("group", 1)));
      y->data = x.data;
      return finish();
    case OpKind::kSoftmaxCrossEntropyLoss: case OpKind::kSoftmaxCrossEntropyLossGrad: {
      const bool grad = kind == OpKind::kSoftmaxCrossEntropyLossGrad;
      const Value& scores = *in[grad ? 1 : 0];
      const Value& labels = *in[grad ? 2 : 1];
      const std::int64_t axis = normAxis(op.intAttr("axis", -1), scores.shape.size());
      const double count = static_cast<double>(std::max<std::int64_t>(1, labels.elements()));
      const double seed = grad ? in[0]->data[0] / count : 0.0;
      double total = 0;
      const std::string bad = forEachLossRow(scores, labels, axis, [&](std::int64_t base, std::int64_t stride,
                                                                       std::int64_t n, std::int64_t label) {
        const double lse = logSumExp(scores, base, stride, n);
        total += lse - scores.data[base + label * stride];
        if (grad)
          for (std::int64_t k = 0; k < n; ++k)
            y->data[base + k * stride] = seed * (std::exp(scores.data[base + k * stride] - lse) - (k == label ? 1 : 0));
      });
      if (!bad.empty()) return modelError(name, bad);
      if (!grad) y->data[0] = total / count;
      return finish();
    }
    case OpKind::kConvInputGrad:
      forEachConvTap(op, y->shape, in[1]->shape, x.shape, [&](std::int64_t xi, std::int64_t wi, std::int64_t yi) {
        y->data[xi] += x.data[yi] * in[1]->data[wi];
      });
      return finish();
    case OpKind::kConvWeightGrad:
      forEachConvTap(op, x.shape, y->shape, in[1]->shape, [&](std::int64_t xi, std::int64_t wi, std::int64_t yi) {
        y->data[wi] += x.data[xi] * in[1]->data[yi];
      });
      return finish();
    case OpKind::kMaxPoolGrad:  // inputs x, dY: dY goes to the tap the forward window passed on
      forEachPoolWindow(op, x.shape, in[1]->shape, [&](std::int64_t yi, const std::vector<std::int64_t>& taps, std::int64_t) {
        if (const std::int64_t best = argmaxTap(x, taps); best >= 0) y->data[best] += in[1]->data[yi];
      });
      return finish();
    case OpKind::kAveragePoolGrad:  // input dY: spread over the window's taps
      forEachPoolWindow(op, y->shape, x.shape, [&](std::int64_t yi, const std::vector<std::int64_t>& taps, std::int64_t padded) {
        const double share = x.data[yi] / averageDivisor(op, taps.size(), padded);
        for (std::int64_t t : taps) y->data[t] += share;
      });
      return finish();
    case OpKind::kGatherGrad: {
      const std::int64_t axis = normAxis(op.intAttr("axis", 0), y->shape.size());
      const std::int64_t outer = product(y->shape, 0, axis), inner = product(y->shape, axis + 1), n = y->shape[axis];
      const Value& idx = *in[1];
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t j = 0; j < idx.elements(); ++j) {
          std::int64_t k = asInt(idx.data[j]);
          if (k < 0) k += n;
          if (k < 0 || k >= n) return modelError(name, fmt::format("GatherGrad index {} is out of range [0, {})", k, n));
          for (std::int64_t i = 0; i < inner; ++i)
            y->data[(o * n + k) * inner + i] += x.data[(o * idx.elements() + j) * inner + i];
        }
      return finish();
    }
    case OpKind::kSend: case OpKind::kRecv:
      return modelError(name, fmt::format("{} needs another chip; the reference interpreter runs the unpartitioned "
                                          "graph", opKindName(kind)));
    default:
      break;
  }
  return modelError(name, fmt::format("the reference interpreter cannot run {}", opKindName(kind)));
}

Expected<std::vector<Value>> interpret(const Graph& graph, const std::vector<Value>& inputs) {
  std::vector<const Value*> values(graph.tensors().size(), nullptr);
  std::vector<Value> owned(graph.tensors().size());
  const size_t fed = graph.inputs().size() + graph.states().size();
  if (inputs.size() != fed)
    return makeError(ExitCode::kModel, fmt::format("the graph takes {} inputs and states, {} were given", fed,
                                                   inputs.size()));
  auto bind = [&](TensorId id, const Value& v) -> Status {
    const Tensor& t = graph.tensor(id);
    if (v.shape != t.shape) return modelError(t.name, "input value has the wrong shape");
    owned[id] = v;
    for (double& d : owned[id].data) d = castTo(d, t.dtype);
    owned[id].dtype = t.dtype;
    values[id] = &owned[id];
    return {};
  };
  size_t next = 0;
  for (TensorId id : graph.inputs())
    if (auto s = bind(id, inputs[next++]); !s) return s.error();
  for (TensorId id : graph.states())
    if (auto s = bind(id, inputs[next++]); !s) return s.error();
  for (const auto& list : {graph.weights(), graph.constants()})
    for (TensorId id : list) {
      const Tensor& t = graph.tensor(id);
      if (!t.data) return modelError(t.name, "weight values were not loaded; the interpreter needs them");
      owned[id] = Value{t.dtype, t.shape, *t.data};
      values[id] = &owned[id];
    }
  // Values die after their last use so that large graphs run in bounded memory.
  std::vector<OpId> lastUse(graph.tensors().size(), -1);
  for (size_t i = 0; i < graph.ops().size(); ++i)
    for (TensorId in : graph.op(i).inputs) lastUse[in] = static_cast<OpId>(i);
  std::vector<bool> isOutput(graph.tensors().size(), false);
  for (TensorId id : graph.outputs()) isOutput[id] = true;
  for (size_t i = 0; i < graph.ops().size(); ++i) {
    const Op& op = graph.op(i);
    std::vector<const Value*> ins;
    for (TensorId in : op.inputs) ins.push_back(values[in]);
    std::vector<TensorType> types;
    for (TensorId out : op.outputs) types.push_back({graph.tensor(out).shape, graph.tensor(out).dtype});
    auto outs = evaluateOp(op.kind, op.name, op.attrs, ins, types);
    if (!outs) return outs.error();
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      owned[op.outputs[k]] = std::move((*outs)[k]);
      values[op.outputs[k]] = &owned[op.outputs[k]];
    }
    for (TensorId in : op.inputs)
      if (lastUse[in] == static_cast<OpId>(i) && !isOutput[in] && graph.tensor(in).producer >= 0)
        owned[in] = Value{};
  }
  std::vector<Value> results;
  for (TensorId id : graph.outputs()) results.push_back(*values[id]);
  return results;
}

}  // namespace tsp::ir
