// Shape inference: the output shapes and dtypes of every op kind, or an error naming the op.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compile/ir/graph.h"
#include "compile/ir/op_table.h"

namespace tsp::ir {

namespace {

using Shape = std::vector<std::int64_t>;

std::string shapeText(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ",")); }

// An attribute reader bound to one op being added, for the kinds whose attributes decide shapes.
struct AttrView {
  const Attrs& attrs;
  std::int64_t integer(const std::string& key, std::int64_t fallback) const {
    Op op{OpKind::kIdentity, "", {}, {}, attrs, 0};
    return op.intAttr(key, fallback);
  }
  Shape ints(const std::string& key, Shape fallback = {}) const {
    Op op{OpKind::kIdentity, "", {}, {}, attrs, 0};
    return op.intsAttr(key, std::move(fallback));
  }
  std::string text(const std::string& key, const std::string& fallback) const {
    Op op{OpKind::kIdentity, "", {}, {}, attrs, 0};
    return op.stringAttr(key, fallback);
  }
};

// Normalises a possibly negative axis against rank; nullopt when out of range.
std::optional<std::int64_t> normAxis(std::int64_t axis, std::int64_t rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

__extension__ typedef __int128 Wide;  // exact sums and products of two int64 attributes

// Output spatial extent of a sliding window (stride and dilation >= 1); pads are all begins then all
// ends. Computed exactly: nullopt when the attributes make it larger than an int64.
std::optional<std::int64_t> windowOut(std::int64_t in, std::int64_t kernel, std::int64_t stride,
                                      std::int64_t dilation, std::int64_t padBegin, std::int64_t padEnd,
                                      bool ceilMode) {
  const Wide span = Wide{in} + padBegin + padEnd - Wide{dilation} * (Wide{kernel} - 1) - 1;
  if (span < 0) return 0;
  Wide out = (ceilMode ? (span + stride - 1) / stride : span / stride) + 1;
  // With ceil_mode the last window must start inside the input or its begin padding.
  if (ceilMode && (out - 1) * stride >= Wide{in} + padBegin) --out;
  if (out > std::numeric_limits<std::int64_t>::max()) return std::nullopt;
  return static_cast<std::int64_t>(out);
}

}  // namespace

std::int64_t sliceStart(std::int64_t start, std::int64_t dim, std::int64_t step) {
  if (start < 0) start += dim;
  return step > 0 ? std::clamp<std::int64_t>(start, 0, dim) : std::clamp<std::int64_t>(start, 0, dim - 1);
}

namespace {

// The output types of one op, before the checks every output gets (inferTypes below).
Expected<std::vector<TensorType>> inferOpTypes(const Graph& graph, OpKind kind, const std::string& name,
                                               const std::vector<TensorId>& inputs, const Attrs& attrs) {
  const AttrView at{attrs};
  const char* opName = opKindName(kind);
  auto need = [&](size_t lo, size_t hi) -> Status {
    if (inputs.size() < lo || inputs.size() > hi) {
      if (lo == hi) return modelError(name, fmt::format("{} takes {} input{}", opName, lo, lo == 1 ? "" : "s"));
      return modelError(name, fmt::format("{} takes {} to {} inputs, got {}", opName, lo, hi, inputs.size()));
    }
    return {};
  };
  auto shapeOf = [&](size_t i) -> const Shape& { return graph.tensor(inputs[i]).shape; };
  auto typeOf = [&](size_t i) { return graph.tensor(inputs[i]).dtype; };
  auto one = [](Shape s, DType t) { return std::vector<TensorType>{TensorType{std::move(s), t}}; };
  auto axisError = [&](std::int64_t axis, size_t rank) {
    return modelError(name, fmt::format("{} axis {} is out of range for rank {}", opName, axis, rank));
  };
  auto windowError = [&](size_t axis) {
    return modelError(name, fmt::format("{} pads make spatial axis {} longer than 2^63 elements", opName, axis));
  };

  // The op table's elementwise kinds: one rule per group.
  switch (opDefinition(kind).shape) {
    case ShapeRule::kUnary:
      if (auto s = need(1, 1); !s) return s.error();
      return one(shapeOf(0), typeOf(0));
    case ShapeRule::kBinary: case ShapeRule::kCompare: {
      if (auto s = need(2, 2); !s) return s.error();
      auto out = broadcastShapes(shapeOf(0), shapeOf(1));
      if (!out)
        return modelError(name, fmt::format("{} shapes do not broadcast: {} and {}", opName, shapeText(shapeOf(0)),
                                            shapeText(shapeOf(1))));
      return one(*out, opDefinition(kind).shape == ShapeRule::kCompare ? DType::kBool : typeOf(0));
    }
    case ShapeRule::kOwn: case ShapeRule::kNotAnOp:
      break;
  }
  switch (kind) {
    case OpKind::kMatMul:
    case OpKind::kFusedMatMul: {
      if (auto s = kind == OpKind::kMatMul ? need(2, 2) : need(2, 3); !s) return s.error();
      Shape a = shapeOf(0), b = shapeOf(1);
      if (a.empty() || b.empty()) return modelError(name, fmt::format("{} operands must have rank >= 1", opName));
      const bool aVec = a.size() == 1, bVec = b.size() == 1;
      if (aVec) a.insert(a.begin(), 1);
      if (bVec) b.push_back(1);
      const std::int64_t k = a.back(), kb = b[b.size() - 2];
      if (k != kb) return modelError(name, fmt::format("{} inner dimensions differ: {} vs {}", opName, k, kb));
      auto batch = broadcastShapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
      if (!batch)
        return modelError(name, fmt::format("{} batch dimensions do not broadcast: {} and {}", opName, shapeText(a),
                                            shapeText(b)));
      Shape out = *batch;
      if (!aVec) out.push_back(a[a.size() - 2]);
      if (!bVec) out.push_back(b.back());
      if (inputs.size() == 3 && !broadcastShapes(out, shapeOf(2)))
        return modelError(name, fmt::format("{} bias {} does not broadcast to {}", opName, shapeText(shapeOf(2)),
                                            shapeText(out)));
      return one(out, typeOf(0));
    }
    case OpKind::kGemm: {
      if (auto s = need(2, 3); !s) return s.error();
      const Shape& a = shapeOf(0);
      const Shape& b = shapeOf(1);
      if (a.size() != 2 || b.size() != 2) return modelError(name, "Gemm operands must be 2-D");
      const bool ta = at.integer("transA", 0) != 0, tb = at.integer("transB", 0) != 0;
      const std::int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
      const std::int64_t kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
      if (k != kb) return modelError(name, fmt::format("Gemm inner dimensions differ: {} vs {}", k, kb));
      if (inputs.size() == 3 && !broadcastShapes({m, n}, shapeOf(2)))
        return modelError(name, fmt::format("Gemm C {} does not broadcast to [{},{}]", shapeText(shapeOf(2)), m, n));
      return one({m, n}, typeOf(0));
    }
    case OpKind::kConv: {
      if (auto s = need(2, 3); !s) return s.error();
      const Shape& x = shapeOf(0);
      const Shape& w = shapeOf(1);
      if (x.size() < 3 || w.size() != x.size())
        return modelError(name, fmt::format("Conv needs X [N,C,spatial...] and W of the same rank, got {} and {}",
                                            shapeText(x), shapeText(w)));
      const size_t spatial = x.size() - 2;
      const std::int64_t group = at.integer("group", 1);
      if (group < 1 || x[1] % group != 0 || w[0] % group != 0)
        return modelError(name, fmt::format("Conv group {} does not divide channels {} and filters {}", group, x[1],
                                            w[0]));
      if (std::int64_t channels = 0; __builtin_mul_overflow(w[1], group, &channels) || channels != x[1])
        return modelError(name, fmt::format("Conv weight has {} input channels per group, the input {} in {} groups",
                                            w[1], x[1], group));
      if (inputs.size() == 3 && (shapeOf(2).size() != 1 || shapeOf(2)[0] != w[0]))
        return modelError(name, fmt::format("Conv bias must be [{}]", w[0]));
      const WindowAttrs win = windowAttrs(Op{kind, name, {}, {}, attrs, 0}, spatial, w);
      if (!win.matches(spatial))
        return modelError(name, "Conv strides, dilations, kernel_shape and pads must match the spatial rank");
      Shape out = {x[0], w[0]};
      for (size_t i = 0; i < spatial; ++i) {
        if (win.strides[i] < 1 || win.dilations[i] < 1) return modelError(name, "Conv strides and dilations must be >= 1");
        auto extent = windowOut(x[2 + i], win.kernel[i], win.strides[i], win.dilations[i], win.padBegin(i),
                                win.padEnd(i), false);
        if (!extent) return windowError(i);
        out.push_back(*extent);
      }
      return one(out, typeOf(0));
    }
    case OpKind::kWhere: {
      if (auto s = need(3, 3); !s) return s.error();
      auto out = broadcastShapes(shapeOf(0), shapeOf(1));
      if (out) out = broadcastShapes(*out, shapeOf(2));
      if (!out)
        return modelError(name, fmt::format("Where shapes do not broadcast: {}, {} and {}", shapeText(shapeOf(0)),
                                            shapeText(shapeOf(1)), shapeText(shapeOf(2))));
      return one(*out, typeOf(1));
    }
    case OpKind::kFusedElementwise: {
      if (inputs.empty()) return modelError(name, "FusedElementwise takes at least 1 input");
      Shape out = shapeOf(0);
      for (size_t i = 1; i < inputs.size(); ++i) {
        auto b = broadcastShapes(out, shapeOf(i));
        if (!b) return modelError(name, "FusedElementwise inputs do not broadcast");
        out = *b;
      }
      const auto steps = at.ints("steps");
      if (steps.empty() || steps.size() % 3 != 0) return modelError(name, "FusedElementwise needs steps (3 per op)");
      return one(out, at.text("dtype", "") == "bool" ? DType::kBool : typeOf(0));
    }
    case OpKind::kSoftmax: {
      if (auto s = need(1, 1); !s) return s.error();
      if (!normAxis(at.integer("axis", -1), static_cast<std::int64_t>(shapeOf(0).size())))
        return axisError(at.integer("axis", -1), shapeOf(0).size());
      return one(shapeOf(0), typeOf(0));
    }
    case OpKind::kLayerNormalization: {
      if (auto s = need(2, 3); !s) return s.error();
      const auto rank = static_cast<std::int64_t>(shapeOf(0).size());
      auto axis = normAxis(at.integer("axis", -1), rank);
      if (!axis) return axisError(at.integer("axis", -1), shapeOf(0).size());
      const Shape normalized(shapeOf(0).begin() + *axis, shapeOf(0).end());
      for (size_t i = 1; i < inputs.size(); ++i)
        if (!broadcastShapes(normalized, shapeOf(i)) || shapeOf(i).size() > normalized.size())
          return modelError(name, fmt::format("LayerNormalization scale/bias {} do not match the normalised shape {}",
                                              shapeText(shapeOf(i)), shapeText(normalized)));
      return one(shapeOf(0), typeOf(0));
    }
    case OpKind::kBatchNormalization: {
      if (auto s = need(5, 5); !s) return s.error();
      const Shape& x = shapeOf(0);
      if (x.size() < 2) return modelError(name, "BatchNormalization needs X of rank >= 2");
      for (size_t i = 1; i < 5; ++i)
        if (shapeOf(i) != Shape{x[1]})
          return modelError(name, fmt::format("BatchNormalization parameter {} must be [{}], got {}", i, x[1],
                                              shapeText(shapeOf(i))));
      return one(x, typeOf(0));
    }
    case OpKind::kReduceMean: case OpKind::kReduceSum: case OpKind::kReduceMax: {
      if (auto s = need(1, 1); !s) return s.error();
      const Shape& x = shapeOf(0);
      const auto rank = static_cast<std::int64_t>(x.size());
      Shape axes = at.ints("axes");
      const bool keep = at.integer("keepdims", 1) != 0;
      std::vector<bool> reduced(x.size(), axes.empty() && at.integer("noop_with_empty_axes", 0) == 0);
      for (auto a : axes) {
        auto n = normAxis(a, rank);
        if (!n) return axisError(a, x.size());
        reduced[*n] = true;
      }
      Shape out;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!reduced[i]) out.push_back(x[i]);
        else if (keep) out.push_back(1);
      }
      return one(out, typeOf(0));
    }
    case OpKind::kReshape: {
      if (auto s = need(1, 1); !s) return s.error();
      Shape target = at.ints("shape");
      if (!at.attrs.count("shape")) return modelError(name, "Reshape needs a constant target shape");
      const std::int64_t total = graph.tensor(inputs[0]).elements();
      const bool allowZero = at.integer("allowzero", 0) != 0;
      int inferred = -1;
      std::int64_t known = 1;
      for (size_t i = 0; i < target.size(); ++i) {
        if (target[i] == 0 && !allowZero) {
          if (i >= shapeOf(0).size()) return modelError(name, "Reshape copies a dimension the input does not have");
          target[i] = shapeOf(0)[i];
        }
        if (target[i] == -1) {
          if (inferred >= 0) return modelError(name, "Reshape has more than one -1 dimension");
          inferred = static_cast<int>(i);
          continue;
        }
        if (target[i] < 0) return modelError(name, fmt::format("Reshape dimension {} is negative", target[i]));
        if (__builtin_mul_overflow(known, target[i], &known))
          return modelError(name, fmt::format("Reshape target {} holds more elements than a tensor can",
                                              shapeText(at.ints("shape"))));
      }
      if (inferred >= 0) {
        if (known == 0 || total % known != 0)
          return modelError(name, fmt::format("Reshape cannot infer -1 from {} elements into {}", total,
                                              shapeText(at.ints("shape"))));
        target[inferred] = total / known;
        known *= target[inferred];
      }
      if (known != total)
        return modelError(name, fmt::format("Reshape of {} ({} elements) into {} ({} elements)", shapeText(shapeOf(0)),
                                            total, shapeText(target), known));
      return one(target, typeOf(0));
    }
    case OpKind::kTranspose: {
      if (auto s = need(1, 1); !s) return s.error();
      const Shape& x = shapeOf(0);
      Shape perm = at.ints("perm");
      if (perm.empty()) {
        perm.resize(x.size());
        std::iota(perm.rbegin(), perm.rend(), 0);
      }
      Shape sorted = perm;
      std::sort(sorted.begin(), sorted.end());
      Shape identity(x.size());
      std::iota(identity.begin(), identity.end(), 0);
      if (sorted != identity)
        return modelError(name, fmt::format("Transpose perm {} is not a permutation of rank {}", shapeText(perm),
                                            x.size()));
      Shape out;
      for (auto p : perm) out.push_back(x[p]);
      return one(out, typeOf(0));
    }
    case OpKind::kFlatten: {
      if (auto s = need(1, 1); !s) return s.error();
      const Shape& x = shapeOf(0);
      const auto rank = static_cast<std::int64_t>(x.size());
      std::int64_t axis = at.integer("axis", 1);
      if (axis < -rank || axis > rank) return axisError(axis, x.size());
      if (axis < 0) axis += rank;
      std::int64_t outer = 1, inner = 1;
      for (std::int64_t i = 0; i < rank; ++i) (i < axis ? outer : inner) *= x[i];
      return one({outer, inner}, typeOf(0));
    }
    case OpKind::kConcat: {
      if (inputs.empty()) return modelError(name, "Concat takes at least 1 input");
      Shape out = shapeOf(0);
      auto axis = normAxis(at.integer("axis", 0), static_cast<std::int64_t>(out.size()));
      if (!axis) return axisError(at.integer("axis", 0), out.size());
      for (size_t i = 1; i < inputs.size(); ++i) {
        const Shape& s = shapeOf(i);
        if (s.size() != out.size()) return modelError(name, "Concat inputs differ in rank");
        for (size_t d = 0; d < s.size(); ++d)
          if (static_cast<std::int64_t>(d) != *axis && s[d] != out[d])
            return modelError(name, fmt::format("Concat inputs differ outside axis {}: {} and {}", *axis,
                                                shapeText(shapeOf(0)), shapeText(s)));
        if (__builtin_add_overflow(out[*axis], s[*axis], &out[*axis]))
          return modelError(name, fmt::format("Concat along axis {} is longer than 2^63 elements", *axis));
      }
      return one(out, typeOf(0));
    }
    case OpKind::kSplit: {
      if (auto s = need(1, 1); !s) return s.error();
      const Shape& x = shapeOf(0);
      auto axis = normAxis(at.integer("axis", 0), static_cast<std::int64_t>(x.size()));
      if (!axis) return axisError(at.integer("axis", 0), x.size());
      const Shape split = at.ints("split");
      std::int64_t sum = 0;
      bool valid = !split.empty();
      for (auto part : split) valid = valid && part >= 0 && !__builtin_add_overflow(sum, part, &sum);
      if (!valid || sum != x[*axis])
        return modelError(name, fmt::format("Split sizes {} do not add up to dimension {}", shapeText(split), x[*axis]));
      std::vector<TensorType> outs;
      for (auto part : split) {
        Shape s = x;
        s[*axis] = part;
        outs.push_back({s, typeOf(0)});
      }
      return outs;
    }
    case OpKind::kSlice: {
      if (auto s = need(1, 1); !s) return s.error();
      Shape out = shapeOf(0);
      const auto rank = static_cast<std::int64_t>(out.size());
      const Shape starts = at.ints("starts"), ends = at.ints("ends");
      Shape axes = at.ints("axes"), steps = at.ints("steps");
      if (axes.empty())
        for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
      if (steps.empty()) steps.assign(starts.size(), 1);
      if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
        return modelError(name, "Slice starts, ends, axes and steps differ in length");
      for (size_t i = 0; i < starts.size(); ++i) {
        auto axis = normAxis(axes[i], rank);
        if (!axis) return axisError(axes[i], out.size());
        if (steps[i] == 0) return modelError(name, "Slice step is 0");
        const std::int64_t dim = shapeOf(0)[*axis];
        const std::int64_t b = sliceStart(starts[i], dim, steps[i]);
        std::int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
        e = steps[i] > 0 ? std::clamp<std::int64_t>(e, 0, dim) : std::clamp<std::int64_t>(e, -1, dim - 1);
        // Elements in the span taken every |step| (INT64_MIN's magnitude is past every dimension).
        const std::int64_t span = steps[i] > 0 ? e - b : b - e;
        const std::int64_t stride = steps[i] == std::numeric_limits<std::int64_t>::min()
                                        ? std::numeric_limits<std::int64_t>::max()
                                        : std::abs(steps[i]);
        out[*axis] = span <= 0 ? 0 : 1 + (span - 1) / stride;
      }
      return one(out, typeOf(0));
    }
    case OpKind::kGather: {
      if (auto s = need(2, 2); !s) return s.error();
      const Shape& data = shapeOf(0);
      auto axis = normAxis(at.integer("axis", 0), static_cast<std::int64_t>(data.size()));
      if (!axis) return axisError(at.integer("axis", 0), data.size());
      if (isFloat(typeOf(1))) return modelError(name, "Gather indices must be integers");
      Shape out(data.begin(), data.begin() + *axis);
      out.insert(out.end(), shapeOf(1).begin(), shapeOf(1).end());
      out.insert(out.end(), data.begin() + *axis + 1, data.end());
      return one(out, typeOf(0));
    }
    case OpKind::kScatterND: {
      if (auto s = need(3, 3); !s) return s.error();
      const Shape& data = shapeOf(0);
      const Shape& idx = shapeOf(1);
      if (isFloat(typeOf(1))) return modelError(name, "ScatterND indices must be integers");
      const std::string reduction = at.text("reduction", "none");
      if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" && reduction != "min")
        return modelError(name, fmt::format("ScatterND reduction '{}' is not none, add, mul, max or min", reduction));
      if (data.empty() || idx.empty() || idx.back() > static_cast<std::int64_t>(data.size()))
        return modelError(name, fmt::format("ScatterND indices {} do not index data {} (the last dimension is the "
                                            "index depth, at most the data's rank)", shapeText(idx), shapeText(data)));
      Shape updates(idx.begin(), idx.end() - 1);
      updates.insert(updates.end(), data.begin() + idx.back(), data.end());
      if (shapeOf(2) != updates || typeOf(2) != typeOf(0))
        return modelError(name, fmt::format("ScatterND updates must have the data's dtype and shape {}, got {}",
                                            shapeText(updates), shapeText(shapeOf(2))));
      return one(data, typeOf(0));
    }
    case OpKind::kUnsqueeze: {
      if (auto s = need(1, 1); !s) return s.error();
      const Shape axes = at.ints("axes");
      const auto rank = static_cast<std::int64_t>(shapeOf(0).size() + axes.size());
      std::vector<bool> inserted(rank, false);
      for (auto a : axes) {
        auto n = normAxis(a, rank);
        if (!n || inserted[*n]) return modelError(name, fmt::format("Unsqueeze axis {} is invalid for rank {}", a, rank));
        inserted[*n] = true;
      }
      Shape out;
      size_t next = 0;
      for (std::int64_t i = 0; i < rank; ++i) out.push_back(inserted[i] ? 1 : shapeOf(0)[next++]);
      return one(out, typeOf(0));
    }
    case OpKind::kSqueeze: {
      if (auto s = need(1, 1); !s) return s.error();
      const Shape& x = shapeOf(0);
      const Shape axes = at.ints("axes");
      std::vector<bool> drop(x.size(), false);
      if (axes.empty())
        for (size_t i = 0; i < x.size(); ++i) drop[i] = x[i] == 1;
      for (auto a : axes) {
        auto n = normAxis(a, static_cast<std::int64_t>(x.size()));
        if (!n) return axisError(a, x.size());
        if (x[*n] != 1) return modelError(name, fmt::format("Squeeze of axis {} whose size is {}", a, x[*n]));
        drop[*n] = true;
      }
      Shape out;
      for (size_t i = 0; i < x.size(); ++i)
        if (!drop[i]) out.push_back(x[i]);
      return one(out, typeOf(0));
    }
    case OpKind::kCast: {
      if (auto s = need(1, 1); !s) return s.error();
      auto to = parseDType(at.text("to", ""));
      if (!to) return modelError(name, fmt::format("Cast to unknown dtype '{}'", at.text("to", "")));
      return one(shapeOf(0), *to);
    }
    case OpKind::kExpand: {
      if (auto s = need(1, 1); !s) return s.error();
      auto out = broadcastShapes(shapeOf(0), at.ints("shape"));
      if (!out)
        return modelError(name, fmt::format("Expand of {} to {} does not broadcast", shapeText(shapeOf(0)),
                                            shapeText(at.ints("shape"))));
      return one(*out, typeOf(0));
    }
    case OpKind::kMaxPool: case OpKind::kAveragePool: {
      if (auto s = need(1, 1); !s) return s.error();
      const Shape& x = shapeOf(0);
      if (x.size() < 3) return modelError(name, fmt::format("{} needs X [N,C,spatial...]", opName));
      const size_t spatial = x.size() - 2;
      const WindowAttrs win = windowAttrs(Op{kind, name, {}, {}, attrs, 0}, spatial);
      if (!win.matches(spatial))
        return modelError(name, fmt::format("{} kernel_shape, strides, dilations and pads must match the spatial rank",
                                            opName));
      Shape out = {x[0], x[1]};
      const bool ceilMode = at.integer("ceil_mode", 0) != 0;
      for (size_t i = 0; i < spatial; ++i) {
        if (win.strides[i] < 1 || win.dilations[i] < 1) return modelError(name, "pool strides and dilations must be >= 1");
        auto extent = windowOut(x[2 + i], win.kernel[i], win.strides[i], win.dilations[i], win.padBegin(i),
                                win.padEnd(i), ceilMode);
        if (!extent) return windowError(i);
        out.push_back(*extent);
      }
      return one(out, typeOf(0));
    }
    case OpKind::kGlobalAveragePool: {
      if (auto s = need(1, 1); !s) return s.error();
      Shape out = shapeOf(0);
      if (out.size() < 3) return modelError(name, "GlobalAveragePool needs X [N,C,spatial...]");
      std::fill(out.begin() + 2, out.end(), 1);
      return one(out, typeOf(0));
    }
    case OpKind::kShape: {
      if (auto s = need(1, 1); !s) return s.error();
      const auto rank = static_cast<std::int64_t>(shapeOf(0).size());
      std::int64_t start = at.integer("start", 0), end = at.integer("end", rank);
      if (start < 0) start += rank;
      if (end < 0) end += rank;
      start = std::clamp<std::int64_t>(start, 0, rank);
      end = std::clamp<std::int64_t>(end, 0, rank);
      return one({std::max<std::int64_t>(0, end - start)}, DType::kI64);
    }
    case OpKind::kConstantOfShape: {
      if (auto s = need(0, 0); !s) return s.error();
      auto dtype = parseDType(at.text("dtype", "fp32"));
      if (!dtype) return modelError(name, "ConstantOfShape has an unknown dtype");
      return one(at.ints("shape"), *dtype);
    }
    case OpKind::kRange: {
      if (auto s = need(3, 3); !s) return s.error();
      for (size_t i = 0; i < 3; ++i)
        if (!graph.tensor(inputs[i]).data || graph.tensor(inputs[i]).elements() != 1)
          return modelError(name, "Range needs constant scalar start, limit and delta");
      const double start = graph.tensor(inputs[0]).data->at(0), limit = graph.tensor(inputs[1]).data->at(0),
                   delta = graph.tensor(inputs[2]).data->at(0);
      if (delta == 0) return modelError(name, "Range delta is 0");
      const double count = std::ceil((limit - start) / delta);
      // Past 2^48 no dtype fits the result (and a cast of a larger double or a NaN is undefined).
      if (!(count <= static_cast<double>(kMaxTensorBytes)))
        return modelError(name, fmt::format("Range from {} to {} by {} has more than 2^48 elements", start, limit, delta));
      return one({static_cast<std::int64_t>(std::max(0.0, count))}, typeOf(0));
    }
    case OpKind::kAllReduce: case OpKind::kAllGather: case OpKind::kReduceScatter: {
      if (auto s = need(1, 1); !s) return s.error();
      const std::int64_t group = at.integer("group", 1);
      if (group < 1) return modelError(name, fmt::format("{} group must be >= 1", opName));
      Shape out = shapeOf(0);
      if (kind == OpKind::kAllReduce) return one(out, typeOf(0));
      auto axis = normAxis(at.integer("axis", 0), static_cast<std::int64_t>(out.size()));
      if (!axis) return axisError(at.integer("axis", 0), out.size());
      if (kind == OpKind::kAllGather) {
        if (__builtin_mul_overflow(out[*axis], group, &out[*axis]))
          return modelError(name, fmt::format("AllGather of dimension {} over {} chips", shapeOf(0)[*axis], group));
      } else {
        if (out[*axis] % group != 0)
          return modelError(name, fmt::format("ReduceScatter of dimension {} over {} chips", out[*axis], group));
        out[*axis] /= group;
      }
      return one(out, typeOf(0));
    }
    case OpKind::kAllToAll: {
      if (auto s = need(1, 1); !s) return s.error();
      const std::int64_t group = at.integer("group", 1);
      Shape out = shapeOf(0);
      auto split = normAxis(at.integer("split_axis", 0), static_cast<std::int64_t>(out.size()));
      auto concat = normAxis(at.integer("concat_axis", 0), static_cast<std::int64_t>(out.size()));
      if (!split) return axisError(at.integer("split_axis", 0), out.size());
      if (!concat) return axisError(at.integer("concat_axis", 0), out.size());
      if (group < 1 || out[*split] % group != 0)
        return modelError(name, fmt::format("AllToAll of dimension {} over {} chips", out[*split], group));
      out[*split] /= group;
      if (__builtin_mul_overflow(out[*concat], group, &out[*concat]))
        return modelError(name, fmt::format("AllToAll of dimension {} over {} chips", shapeOf(0)[*concat], group));
      return one(out, typeOf(0));
    }
    case OpKind::kSend:
      if (auto s = need(1, 1); !s) return s.error();
      return std::vector<TensorType>{};
    case OpKind::kRecv: {
      if (auto s = need(0, 0); !s) return s.error();
      auto dtype = parseDType(at.text("dtype", "fp16"));
      if (!dtype) return modelError(name, "Recv has an unknown dtype");
      return one(at.ints("shape"), *dtype);
    }
    case OpKind::kSoftmaxCrossEntropyLoss: case OpKind::kSoftmaxCrossEntropyLossGrad: {
      const bool grad = kind == OpKind::kSoftmaxCrossEntropyLossGrad;
      if (auto s = grad ? need(3, 3) : need(2, 2); !s) return s.error();
      const Shape& scores = shapeOf(grad ? 1 : 0);
      const Shape& labels = shapeOf(grad ? 2 : 1);
      auto axis = normAxis(at.integer("axis", -1), static_cast<std::int64_t>(scores.size()));
      if (!axis) return axisError(at.integer("axis", -1), scores.size());
      Shape expected = scores;
      expected.erase(expected.begin() + *axis);
      if (labels != expected || isFloat(typeOf(grad ? 2 : 1)))
        return modelError(name, fmt::format("{} labels must be integers of shape {} (the scores {} without the class "
                                            "axis), got {}", opName, shapeText(expected), shapeText(scores),
                                            shapeText(labels)));
      if (grad && !shapeOf(0).empty()) return modelError(name, "SoftmaxCrossEntropyLossGrad takes a scalar loss gradient");
      return one(grad ? scores : Shape{}, typeOf(grad ? 1 : 0));
    }
    case OpKind::kConvInputGrad: case OpKind::kConvWeightGrad: case OpKind::kGatherGrad: {
      if (auto s = need(2, 2); !s) return s.error();
      const char* key = kind == OpKind::kConvInputGrad ? "input_shape"
                        : kind == OpKind::kConvWeightGrad ? "weight_shape" : "data_shape";
      const Shape out = at.ints(key);
      if (out.empty()) return modelError(name, fmt::format("{} needs the attribute {}", opName, key));
      if (kind == OpKind::kGatherGrad && isFloat(typeOf(1))) return modelError(name, "GatherGrad indices must be integers");
      return one(out, typeOf(kind == OpKind::kConvWeightGrad ? 1 : 0));
    }
    case OpKind::kMaxPoolGrad:
      if (auto s = need(2, 2); !s) return s.error();
      if (!at.attrs.count("kernel_shape")) return modelError(name, "MaxPoolGrad needs the pool's kernel_shape");
      return one(shapeOf(0), typeOf(1));
    case OpKind::kAveragePoolGrad: {
      if (auto s = need(1, 1); !s) return s.error();
      const Shape out = at.ints("input_shape");
      if (out.size() != shapeOf(0).size() || !at.attrs.count("kernel_shape"))
        return modelError(name, "AveragePoolGrad needs the pool's kernel_shape and input_shape");
      return one(out, typeOf(0));
    }
    default:  // the table's elementwise kinds (above), the leaves and kCount
      break;
  }
  return modelError(name, "not an op kind that computes");
}

}  // namespace

Expected<std::vector<TensorType>> inferTypes(const Graph& graph, OpKind kind, const std::string& name,
                                             const std::vector<TensorId>& inputs, const Attrs& attrs) {
  auto types = inferOpTypes(graph, kind, name, inputs, attrs);
  if (!types) return types;
  // Every output, whatever rule made its shape: no negative dimension, and no more than a tensor may hold.
  for (const auto& t : *types) {
    if (std::any_of(t.shape.begin(), t.shape.end(), [](std::int64_t d) { return d < 0; }))
      return modelError(name, fmt::format("{} output shape {} has a negative dimension", opKindName(kind),
                                          shapeText(t.shape)));
    if (!boundedElements(t.shape, dtypeBytes(t.dtype)))
      return modelError(name, fmt::format("{} output shape {} holds more than 2^48 bytes, more than the SRAM of any "
                                          "cluster this build simulates",
                                          opKindName(kind), shapeText(t.shape)));
  }
  return types;
}

}  // namespace tsp::ir
