// The ONNX importer: initializers (inline or external), inputs with bound dimensions, nodes in
// topological order, shape inputs turned into attributes and shape subgraphs folded to constants.
#include "compile/frontend/onnx_importer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <queue>
#include <set>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/version_converter/convert.h>

#include "compile/ir/op_table.h"

#include "support/files.h"
#include "compile/frontend/onnx_file.h"

namespace tsp::frontend {

namespace {

using ir::DType;
using ir::OpKind;
using ir::TensorId;
using Shape = std::vector<std::int64_t>;
using ir::Data;

// Models below kMinOpset are upgraded to it by ONNX's version converter first.
constexpr int kMinOpset = 11;
constexpr int kMaxOpset = 21;
// Folded results larger than this stay ops: a constant of this size is a tensor, not a shape.
constexpr std::int64_t kMaxFoldElements = std::int64_t{1} << 22;

std::optional<DType> dtypeOf(int onnxType) {
  switch (onnxType) {
    case onnx::TensorProto::FLOAT: return DType::kF32;
    case onnx::TensorProto::FLOAT16: return DType::kF16;
    case onnx::TensorProto::BFLOAT16: return DType::kBF16;
    case onnx::TensorProto::INT8: return DType::kI8;
    case onnx::TensorProto::INT32: return DType::kI32;
    case onnx::TensorProto::INT64: return DType::kI64;
    case onnx::TensorProto::BOOL: return DType::kBool;
    default: return std::nullopt;
  }
}

std::string onnxTypeName(int onnxType) {
  return onnx::TensorProto_DataType_IsValid(onnxType)
             ? onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(onnxType))
             : fmt::format("type {}", onnxType);
}

double halfToDouble(std::uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double v;
  if (exponent == 0) v = std::ldexp(mantissa, -24);
  else if (exponent == 31) v = mantissa ? std::nan("") : HUGE_VAL;
  else v = std::ldexp(mantissa + 1024, exponent - 25);
  return sign ? -v : v;
}

double bf16ToDouble(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Element i of little-endian raw bytes of an ONNX tensor of type `dtype`.
double rawElement(const char* p, DType dtype) {
  switch (dtype) {
    case DType::kF32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::kF16: { std::uint16_t h; std::memcpy(&h, p, 2); return halfToDouble(h); }
    case DType::kBF16: { std::uint16_t h; std::memcpy(&h, p, 2); return bf16ToDouble(h); }
    case DType::kI8: return static_cast<std::int8_t>(*p);
    case DType::kI32: { std::int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::kI64: { std::int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DType::kBool: return *p != 0;
  }
  return 0.0;
}

// The values of little-endian raw bytes, rounded to `storeAs` when given, decoded straight into the
// graph's compact form (never all held as doubles). Raw bytes in `mapping` have their pages dropped
// a block at a time as they are read, so that decoding holds one block of the file, not the tensor.
Expected<Data> decodeRaw(std::string_view raw, int onnxType, std::int64_t elements, const std::string& what,
                         std::optional<DType> storeAs, const MappedFile* mapping = nullptr) {
  auto dtype = dtypeOf(onnxType);
  if (!dtype) return modelError(what, fmt::format("tensor type {} is not supported", onnxTypeName(onnxType)));
  const int width = ir::dtypeBytes(*dtype);
  if (static_cast<std::int64_t>(raw.size()) != elements * width)
    return modelError(what, fmt::format("tensor data has {} bytes, its shape needs {}", raw.size(), elements * width));
  return std::make_shared<const ir::TensorData>(
      ir::TensorData::generate(static_cast<std::size_t>(elements), [&, dtype = *dtype](std::size_t i) {
        const double v = rawElement(raw.data() + i * static_cast<std::size_t>(width), dtype);
        return storeAs ? ir::toStorage(v, *storeAs) : v;
      }, [&](std::size_t begin, std::size_t end) {
        if (mapping) mapping->release(raw.substr(begin * static_cast<std::size_t>(width), (end - begin) * static_cast<std::size_t>(width)));
      }));
}

// The elements of a tensor's shape: an error when a dimension is negative or the tensor would hold
// more than ir::kMaxTensorBytes at the widest element (8 bytes).
Expected<std::int64_t> elementsOf(const onnx::TensorProto& t, const std::string& what) {
  for (auto d : t.dims())
    if (d < 0) return modelError(what, fmt::format("tensor shape [{}] has a negative dimension", fmt::join(t.dims(), ", ")));
  const auto n = ir::boundedElements(Shape(t.dims().begin(), t.dims().end()), 8);
  if (!n)
    return modelError(what, fmt::format("tensor shape [{}] holds more than 2^48 bytes, more than the SRAM of any "
                                        "cluster this build simulates",
                                        fmt::join(t.dims(), ", ")));
  return *n;
}

// Inline data (raw bytes or typed fields) must hold exactly the shape's elements; external data is
// checked when it is read.
Status checkInlineSize(const onnx::TensorProto& t, std::int64_t n, const std::string& what,
                       std::optional<std::string_view> mapped) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL) return {};
  auto dtype = dtypeOf(t.data_type());
  if (!dtype) return {};  // refused with its type where the values are read
  if (mapped || !t.raw_data().empty()) {
    const auto bytes = static_cast<std::int64_t>(mapped ? mapped->size() : t.raw_data().size());
    const std::int64_t needed = n * ir::dtypeBytes(*dtype);
    if (bytes != needed) return modelError(what, fmt::format("tensor data has {} bytes, its shape needs {}", bytes, needed));
    return {};
  }
  std::int64_t count = -1;
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: count = t.float_data_size(); break;
    case onnx::TensorProto::INT64: count = t.int64_data_size(); break;
    case onnx::TensorProto::INT32: case onnx::TensorProto::INT8: case onnx::TensorProto::BOOL:
    case onnx::TensorProto::FLOAT16: case onnx::TensorProto::BFLOAT16:
      count = t.int32_data_size();
      break;
    default: break;
  }
  if (count >= 0 && count != n) return modelError(what, fmt::format("tensor has {} values, its shape needs {}", count, n));
  return {};
}

// Values of a TensorProto: inline (raw or typed fields; `mapped` is its raw_data kept in `mapping`,
// the mapped model file) or from its external file, rounded to `storeAs` when given (the type the chip stores
// them in: the graph then holds them once, as stored). Returns nullptr when loading was not asked
// for. A missing external file is an error naming the tensor and the file: there are no values to
// stand in for it.
Expected<Data> tensorValues(const onnx::TensorProto& t, const std::filesystem::path& dir, bool load,
                            const std::string& what, std::optional<std::string_view> mapped = std::nullopt,
                            std::optional<DType> storeAs = std::nullopt, const MappedFile* mapping = nullptr) {
  auto stored = [&](const std::vector<double>& values) -> Data {
    return std::make_shared<const ir::TensorData>(ir::TensorData::generate(
        values.size(), [&](std::size_t i) { return storeAs ? ir::toStorage(values[i], *storeAs) : values[i]; }));
  };
  const auto elements = elementsOf(t, what);
  if (!elements) return elements.error();
  const std::int64_t n = *elements;
  // Inline data of the wrong size is refused even when its values are not read (timing runs).
  if (auto s = checkInlineSize(t, n, what, mapped); !s) return s.error();
  if (!load) return Data{};
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    std::int64_t offset = 0, length = -1;
    for (const auto& entry : t.external_data()) {
      if (entry.key() == "location") location = entry.value();
      if (entry.key() != "offset" && entry.key() != "length") continue;
      const std::string& text = entry.value();
      std::int64_t value = -1;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (ec != std::errc() || end != text.data() + text.size() || value < 0)
        return modelError(what, fmt::format("external data {} '{}' is not a byte count", entry.key(), text));
      (entry.key() == "offset" ? offset : length) = value;
    }
    if (location.empty()) return modelError(what, "external data names no file (its 'location' is empty)");
    const auto file = dir / location;
    if (existsButNotRegular(file.string()))
      return modelError(what, fmt::format("external data file '{}' is not a regular file", file.string()));
    // Mapped, and decoded a block of pages at a time: the tensor is never held at its file's type.
    auto external = MappedFile::open(file.string());
    if (!external)
      return modelError(what, fmt::format("external data file '{}' cannot be read; its values are needed to compute "
                                          "(timing runs do not read it)",
                                          file.string()));
    auto dtype = dtypeOf(t.data_type());
    if (!dtype) return modelError(what, fmt::format("tensor type {} is not supported", onnxTypeName(t.data_type())));
    if (length < 0) length = n * ir::dtypeBytes(*dtype);
    if (length != n * ir::dtypeBytes(*dtype))
      return modelError(what, fmt::format("external data length {} differs from the {} bytes of its shape", length,
                                          n * ir::dtypeBytes(*dtype)));
    const auto size = static_cast<std::int64_t>((*external)->bytes().size());
    if (offset > size || length > size - offset)
      return modelError(what, fmt::format("external data {} is shorter than offset {} + length {}", file.string(),
                                          offset, length));
    const auto raw = (*external)->bytes().substr(static_cast<size_t>(offset), static_cast<size_t>(length));
    return decodeRaw(raw, t.data_type(), n, what, storeAs, external->get());
  }
  if (mapped || !t.raw_data().empty())
    return decodeRaw(mapped ? *mapped : std::string_view(t.raw_data()), t.data_type(), n, what, storeAs, mapping);
  std::vector<double> values;
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: values.assign(t.float_data().begin(), t.float_data().end()); break;
    case onnx::TensorProto::INT64: for (auto v : t.int64_data()) values.push_back(static_cast<double>(v)); break;
    case onnx::TensorProto::INT32: case onnx::TensorProto::INT8: case onnx::TensorProto::BOOL:
      values.assign(t.int32_data().begin(), t.int32_data().end());
      break;
    case onnx::TensorProto::FLOAT16:
      for (auto v : t.int32_data()) values.push_back(halfToDouble(static_cast<std::uint16_t>(v)));
      break;
    case onnx::TensorProto::BFLOAT16:
      for (auto v : t.int32_data()) values.push_back(bf16ToDouble(static_cast<std::uint16_t>(v)));
      break;
    default:
      return modelError(what, fmt::format("tensor type {} is not supported", onnxTypeName(t.data_type())));
  }
  if (static_cast<std::int64_t>(values.size()) != n)
    return modelError(what, fmt::format("tensor has {} values, its shape needs {}", values.size(), n));
  return stored(values);
}

// The layer of a node from a block index in its name ("/model/layers.3/...", "h.11", "blocks_2").
std::optional<int> blockIndexOf(const std::string& name) {
  static const std::set<std::string> kBlockWords = {"layers", "layer", "h", "blocks", "block"};
  std::vector<std::string> parts;
  std::string current;
  for (char c : name) {
    if (c == '/' || c == '.' || c == ':') {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  parts.push_back(current);
  auto number = [](const std::string& s) -> std::optional<int> {
    if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), ::isdigit)) return std::nullopt;
    return std::stoi(s);
  };
  for (size_t i = 0; i < parts.size(); ++i) {
    if (kBlockWords.count(parts[i]) && i + 1 < parts.size())
      if (auto n = number(parts[i + 1])) return n;
    const auto underscore = parts[i].rfind('_');
    if (underscore != std::string::npos && kBlockWords.count(parts[i].substr(0, underscore)))
      if (auto n = number(parts[i].substr(underscore + 1))) return n;
  }
  return std::nullopt;
}

// Explicit pads for an auto_pad mode (SAME_UPPER, SAME_LOWER, VALID) over the spatial dims.
Shape resolveAutoPad(const std::string& mode, const Shape& in, const Shape& kernel, const Shape& strides,
                     const Shape& dilations) {
  const size_t n = kernel.size();
  Shape pads(2 * n, 0);
  if (mode != "SAME_UPPER" && mode != "SAME_LOWER") return pads;
  for (size_t i = 0; i < n; ++i) {
    const std::int64_t out = (in[i] + strides[i] - 1) / strides[i];
    const std::int64_t total = std::max<std::int64_t>(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in[i]);
    const std::int64_t small = total / 2;
    pads[i] = mode == "SAME_UPPER" ? small : total - small;
    pads[n + i] = total - pads[i];
  }
  return pads;
}

class Importer {
 public:
  Importer(const OnnxFile& onnxFile, std::filesystem::path dir, std::string file, const ImportOptions& options)
      : model_(onnxFile.model), raw_(onnxFile.initializerRaw), mapping_(onnxFile.mapping), dir_(std::move(dir)),
        file_(std::move(file)), options_(options) {}

  Expected<ir::Graph> run() {
    if (auto s = checkOpset(); !s) return s.error();
    if (auto s = checkSupported(); !s) return s.error();
    const auto& g = model_.graph();
    for (int i = 0; i < g.initializer_size(); ++i)
      if (auto s = addInitializer(g.initializer(i), raw_[static_cast<size_t>(i)]); !s) return s.error();
    for (const auto& input : g.input())
      if (auto s = addInput(input); !s) return s.error();
    auto order = topologicalOrder();
    if (!order) return order.error();
    assignLayers(*order);
    for (int index : *order)
      if (auto s = addNode(g.node(index), layer_[index]); !s) return s.error();
    for (const auto& output : g.output()) {
      auto id = lookup(output.name());
      if (!id) return modelError(output.name(), "graph output is not produced by any node");
      graph_.markOutput(*id);
    }
    return std::move(graph_);
  }

 private:
  Status checkOpset() {
    bool found = false;
    for (const auto& opset : model_.opset_import()) {
      if (!opset.domain().empty() && opset.domain() != "ai.onnx") continue;
      found = true;
      opset_ = static_cast<int>(opset.version());
    }
    if (!found) return modelError(file_, "the model imports no ONNX opset");
    if (opset_ < kMinOpset || opset_ > kMaxOpset)
      return modelError(file_, fmt::format("opset {} is not supported (supported: {} to {}; older ones are upgraded to "
                                           "{})", opset_, kMinOpset, kMaxOpset, kMinOpset));
    return {};
  }

  // The ONNX ops imported one to one, from the op table.
  static const std::map<std::string, OpKind>& directKinds() {
    static const std::map<std::string, OpKind> kinds = [] {
      std::map<std::string, OpKind> m;
      for (const auto& def : ir::opDefinitions())
        if (def.onnx) m[def.onnx] = def.kind;
      return m;
    }();
    return kinds;
  }

  static bool composed(const std::string& type) {
    for (const auto& c : ir::onnxCompositions())
      if (type == c.onnx) return true;
    return false;
  }

  // Every op kind of the graph the importer has no rule for, in one error: kind, count, first node.
  Status checkSupported() const {
    std::map<std::string, std::pair<int, std::string>> missing;  // kind -> (count, first node)
    std::vector<std::string> order;
    const auto& g = model_.graph();
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& node = g.node(i);
      const bool foreign = !node.domain().empty() && node.domain() != "ai.onnx";
      const std::string kind = foreign ? node.domain() + "::" + node.op_type() : node.op_type();
      if (!foreign && (kind == "Constant" || directKinds().count(kind) || composed(kind))) continue;
      auto [it, fresh] = missing.try_emplace(kind, 0, nodeName(node, i));
      ++it->second.first;
      if (fresh) order.push_back(kind);
    }
    if (missing.empty()) return {};
    std::vector<std::string> parts;
    for (const auto& kind : order)
      parts.push_back(fmt::format("{} x {} (first node '{}')", kind, missing[kind].first, missing[kind].second));
    return modelError(file_, fmt::format("opset {}: {} unsupported op kind{}: {}", opset_, order.size(),
                                         order.size() == 1 ? "" : "s", fmt::join(parts, ", ")));
  }

  // Float storage dtype of imported FP32 tensors: the configured precision, or FP32.
  DType storage(DType dtype, bool weight) const {
    if (dtype != DType::kF32 || !options_.precision) return dtype;
    return weight ? options_.precision->weights : options_.precision->activations;
  }

  // With values asked for, an FP32 tensor stored as INT8 would hold its values cast to integers: a
  // float model carries no quantization scales, so only timing runs (which need no values) take it.
  Status checkValuesStorable(DType dtype, DType stored, const std::string& name) const {
    if (!options_.loadWeights || !ir::isFloat(dtype) || stored != DType::kI8) return {};
    return modelError(name, fmt::format("{} tensor stored as int8 (model.precision) and the model has no quantization "
                                        "scales: its values cannot be computed on; run a float model at fp16 or bf16 "
                                        "precision, or in timing mode",
                                        ir::dtypeName(dtype)));
  }

  Status addInitializer(const onnx::TensorProto& t, std::optional<std::string_view> raw) {
    auto dtype = dtypeOf(t.data_type());
    if (!dtype)
      return modelError(t.name(), fmt::format("initializer type {} is not supported", onnxTypeName(t.data_type())));
    const Shape shape(t.dims().begin(), t.dims().end());
    const bool parameter = ir::isFloat(*dtype) || *dtype == DType::kI8;
    const DType storedAs = parameter ? storage(*dtype, true) : *dtype;
    auto data = tensorValues(t, dir_, !parameter || options_.loadWeights, t.name(), raw,
                             storedAs != *dtype ? std::optional<DType>(storedAs) : std::nullopt, mapping_.get());
    if (!data) return data.error();
    // The graph holds the decoded values: the file's pages that held them are not needed again.
    if (raw && *data) mapping_->release(*raw);
    if (parameter) {
      initializers_.insert(t.name());
      if (auto s = checkValuesStorable(*dtype, storage(*dtype, true), t.name()); !s) return s.error();
      return bindName(t.name(), graph_.addWeight(t.name(), shape, storage(*dtype, true), *data));
    }
    initializers_.insert(t.name());
    return bindName(t.name(), graph_.addConstant(t.name(), shape, *dtype, *data));
  }

  Status addInput(const onnx::ValueInfoProto& input) {
    if (initializers_.count(input.name())) return {};
    const std::string& name = input.name();
    if (!input.type().has_tensor_type()) return modelError(name, "graph input is not a tensor");
    const auto& tt = input.type().tensor_type();
    auto dtype = dtypeOf(tt.elem_type());
    if (!dtype)
      return modelError(name, fmt::format("graph input type {} is not supported", onnxTypeName(tt.elem_type())));
    auto known = options_.constantInputs.find(name);
    if (known != options_.constantInputs.end()) {
      return bindName(name, graph_.addConstant(name, known->second.shape, *dtype,
                                               known->second.data));
    }
    Shape shape;
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const auto& dim = tt.shape().dim(i);
      if (dim.has_dim_value()) {
        if (dim.dim_value() < 0)
          return modelError(name, fmt::format("dimension {} of input '{}' is {}, a negative size", i, name, dim.dim_value()));
        shape.push_back(dim.dim_value());
        continue;
      }
      const std::string symbol = dim.has_dim_param() ? dim.dim_param() : "";
      auto bound = options_.overrides.find(symbol);
      if (symbol.empty() || bound == options_.overrides.end())
        return modelError(name, fmt::format("dimension {} of input '{}' is dynamic ({}) and has no value{}; bind it "
                                            "with --override {}=N{}",
                                            i, name, symbol.empty() ? "unnamed" : "'" + symbol + "'", firstUser(name),
                                            symbol.empty() ? "NAME" : symbol,
                                            symbol.empty() ? " after naming it in the model" : ""));
      shape.push_back(bound->second);
    }
    // Index inputs are narrowed to INT32, the widest integer the chip computes with.
    const DType stored = *dtype == DType::kI64 ? DType::kI32 : storage(*dtype, false);
    if (!ir::boundedElements(shape, ir::dtypeBytes(stored)))
      return modelError(name, fmt::format("input '{}' of shape [{}] holds more than 2^48 bytes, more than the SRAM of "
                                          "any cluster this build simulates",
                                          name, fmt::join(shape, ", ")));
    if (auto s = checkValuesStorable(*dtype, stored, name); !s) return s.error();
    return bindName(name, graph_.addInput(name, shape, stored));
  }

  // " (used by node N, op T, opset V)" for the first node reading tensor, or "".
  std::string firstUser(const std::string& tensor) const {
    for (int i = 0; i < model_.graph().node_size(); ++i) {
      const auto& node = model_.graph().node(i);
      for (const auto& in : node.input())
        if (in == tensor) return fmt::format(" (used by node '{}', op {}, opset {})", nodeName(node, i), node.op_type(), opset_);
    }
    return "";
  }

  static std::string nodeName(const onnx::NodeProto& node, int index) {
    if (!node.name().empty()) return node.name();
    return fmt::format("{}_{}", node.op_type(), index);
  }

  Status bindName(const std::string& name, TensorId id) {
    byName_[name] = id;
    return {};
  }

  std::optional<TensorId> lookup(const std::string& name) const {
    auto found = byName_.find(name);
    if (found == byName_.end()) return std::nullopt;
    return found->second;
  }

  // Kahn's algorithm, ready nodes taken in file order: exporters write topological files, and
  // this keeps their order while accepting files that are not.
  Expected<std::vector<int>> topologicalOrder() {
    const auto& g = model_.graph();
    std::unordered_map<std::string, int> producer;
    for (int i = 0; i < g.node_size(); ++i)
      for (const auto& out : g.node(i).output()) {
        if (out.empty()) continue;
        auto [first, added] = producer.emplace(out, i);
        if (!added || byName_.count(out))
          return modelError(nodeName(g.node(i), i),
                            fmt::format("{} (opset {}): output '{}' is already produced by {}", g.node(i).op_type(),
                                        opset_, out,
                                        added ? std::string("a graph input or initializer")
                                              : fmt::format("node '{}'", nodeName(g.node(first->second), first->second))));
      }
    std::vector<int> pending(g.node_size(), 0);
    std::vector<std::vector<int>> users(g.node_size());
    for (int i = 0; i < g.node_size(); ++i) {
      std::set<int> seen;
      for (const auto& in : g.node(i).input()) {
        if (in.empty()) continue;
        auto p = producer.find(in);
        if (p != producer.end()) {
          if (seen.insert(p->second).second) {
            ++pending[i];
            users[p->second].push_back(i);
          }
        } else if (!byName_.count(in)) {
          return modelError(nodeName(g.node(i), i), fmt::format("{} (opset {}): input '{}' is not defined",
                                                               g.node(i).op_type(), opset_, in));
        }
      }
    }
    std::priority_queue<int, std::vector<int>, std::greater<>> ready;
    for (int i = 0; i < g.node_size(); ++i)
      if (pending[i] == 0) ready.push(i);
    std::vector<int> order;
    while (!ready.empty()) {
      const int i = ready.top();
      ready.pop();
      order.push_back(i);
      for (int u : users[i])
        if (--pending[u] == 0) ready.push(u);
    }
    if (static_cast<int>(order.size()) != g.node_size())
      return modelError(file_, "the graph has a cycle");
    return order;
  }

  // Layers: the block index in node names (layers.N, h.N, blocks.N) + 1, the stem being layer 0
  // and unnamed nodes following their predecessor; without such names every MatMul, Gemm or Conv
  // starts a new layer. Layers never decrease along the topological order.
  void assignLayers(const std::vector<int>& order) {
    const auto& g = model_.graph();
    layer_.assign(g.node_size(), 0);
    std::vector<std::optional<int>> named(g.node_size());
    bool anyNamed = false;
    for (int i : order) {
      const auto& node = g.node(i);
      named[i] = blockIndexOf(node.name());
      if (!named[i] && node.output_size() > 0) named[i] = blockIndexOf(node.output(0));
      anyNamed = anyNamed || named[i].has_value();
    }
    int current = 0, macs = 0;
    for (int i : order) {
      const std::string& type = g.node(i).op_type();
      if (anyNamed) {
        if (named[i]) current = std::max(current, *named[i] + 1);
      } else if (type == "MatMul" || type == "Gemm" || type == "Conv") {
        current = macs++;
      }
      layer_[i] = current;
    }
  }

  // Values of a constant input, or an error saying the node needs it constant.
  Expected<std::vector<std::int64_t>> constInts(const onnx::NodeProto& node, const std::string& nodeId, int input) {
    const auto& name = node.input(input);
    auto id = lookup(name);
    if (!id || !graph_.tensor(*id).data)
      return modelError(nodeId, fmt::format("{} (opset {}): input {} ('{}') must be a constant; it depends on "
                                            "values only known at run time",
                                            node.op_type(), opset_, input, name));
    std::vector<std::int64_t> out;
    for (double v : *graph_.tensor(*id).data)
      out.push_back(v >= 9.2e18 ? std::numeric_limits<std::int64_t>::max()
                                : v <= -9.2e18 ? std::numeric_limits<std::int64_t>::min() : static_cast<std::int64_t>(v));
    return out;
  }

  bool hasInput(const onnx::NodeProto& node, int i) const { return node.input_size() > i && !node.input(i).empty(); }

  Expected<ir::Attrs> convertAttributes(const onnx::NodeProto& node, const std::string& nodeId) {
    ir::Attrs attrs;
    for (const auto& a : node.attribute()) {
      switch (a.type()) {
        case onnx::AttributeProto::INT: attrs[a.name()] = static_cast<std::int64_t>(a.i()); break;
        case onnx::AttributeProto::FLOAT: attrs[a.name()] = static_cast<double>(a.f()); break;
        case onnx::AttributeProto::STRING: attrs[a.name()] = a.s(); break;
        case onnx::AttributeProto::INTS:
          attrs[a.name()] = std::vector<std::int64_t>(a.ints().begin(), a.ints().end());
          break;
        case onnx::AttributeProto::FLOATS:
          attrs[a.name()] = std::vector<double>(a.floats().begin(), a.floats().end());
          break;
        case onnx::AttributeProto::TENSOR: break;  // read by the op that has one (Constant, ConstantOfShape)
        default:
          return modelError(nodeId, fmt::format("{} (opset {}): attribute '{}' has an unsupported type",
                                                node.op_type(), opset_, a.name()));
      }
    }
    return attrs;
  }

  Status unsupported(const onnx::NodeProto& node, const std::string& nodeId, const std::string& why) {
    return modelError(nodeId, fmt::format("{} (opset {}): {}", node.op_type(), opset_, why));
  }

  Status addConstantTensor(const std::string& name, const ir::Value& value) {
    return bindName(name, graph_.addConstant(name, value.shape, value.dtype,
                                             value.data));
  }

  // The values of an op whose inputs are all known (Shape needs only its input's shape) and whose
  // result is small: it becomes constants. nullopt when it stays an op.
  Expected<std::optional<std::vector<ir::Value>>> foldValues(OpKind kind, const std::string& nodeId,
                                                             const std::vector<TensorId>& inputs, const ir::Attrs& attrs) {
    bool foldable = kind != OpKind::kMatMul && kind != OpKind::kGemm && kind != OpKind::kConv;
    for (TensorId in : inputs) foldable = foldable && graph_.tensor(in).data != nullptr;
    if (kind == OpKind::kShape || kind == OpKind::kConstantOfShape || kind == OpKind::kRange) foldable = true;
    if (!foldable) return std::optional<std::vector<ir::Value>>{};
    auto types = ir::inferTypes(graph_, kind, nodeId, inputs, attrs);
    if (!types) return types.error();
    std::int64_t elements = 0;
    for (const auto& t : *types) {
      std::int64_t n = 1;
      for (auto d : t.shape)
        if (__builtin_mul_overflow(n, d, &n)) n = std::numeric_limits<std::int64_t>::max();
      if (__builtin_add_overflow(elements, n, &elements)) elements = std::numeric_limits<std::int64_t>::max();
    }
    if (elements > kMaxFoldElements && kind != OpKind::kShape) return std::optional<std::vector<ir::Value>>{};
    std::vector<ir::Value> values;
    std::vector<const ir::Value*> pointers;
    values.reserve(inputs.size());
    for (TensorId in : inputs) {
      const auto& t = graph_.tensor(in);
      values.push_back(ir::Value{t.dtype, t.shape, t.data ? *t.data : std::vector<double>{}});
    }
    for (const auto& v : values) pointers.push_back(&v);
    auto outs = ir::evaluateOp(kind, nodeId, attrs, pointers, *types);
    if (!outs) return outs.error();
    return std::optional<std::vector<ir::Value>>(std::move(*outs));
  }

  // The inputs an op cannot do without, and at least one output: a node with fewer is refused
  // before any of its inputs or outputs is read.
  Status checkArity(const onnx::NodeProto& node, const std::string& nodeId) {
    static const std::map<std::string, int> kRequiredInputs = {
        {"MatMul", 2}, {"Gemm", 2}, {"Conv", 2}, {"Add", 2}, {"Sub", 2}, {"Mul", 2}, {"Div", 2}, {"Pow", 2},
        {"Equal", 2}, {"Where", 3}, {"LayerNormalization", 2}, {"BatchNormalization", 5}, {"Reshape", 2},
        {"Expand", 2}, {"Slice", 3}, {"Gather", 2}, {"Range", 3}, {"ScatterND", 3}};
    auto found = kRequiredInputs.find(node.op_type());
    const int required = found == kRequiredInputs.end() ? 1 : found->second;
    if (node.input_size() < required || node.input(0).empty())
      return unsupported(node, nodeId, fmt::format("takes at least {} input{}, got {}", required,
                                                   required == 1 ? "" : "s", node.input_size()));
    if (node.output_size() < 1 || node.output(0).empty()) return unsupported(node, nodeId, "needs an output");
    return {};
  }

  Status addNode(const onnx::NodeProto& node, int layer) {
    const int index = nodeIndex_++;
    const std::string nodeId = nodeName(node, index);
    const std::string& type = node.op_type();
    if (!node.domain().empty() && node.domain() != "ai.onnx")
      return unsupported(node, nodeId, fmt::format("op domain '{}' is not supported", node.domain()));
    auto converted = convertAttributes(node, nodeId);
    if (!converted) return converted.error();
    ir::Attrs attrs = std::move(*converted);

    if (type == "Constant") {
      if (node.output_size() != 1) return unsupported(node, nodeId, "needs exactly 1 output");
      return addConstantNode(node, nodeId);
    }

    if (auto s = checkArity(node, nodeId); !s) return s;
    if (auto done = addComposition(node, nodeId, attrs, layer)) return *done;
    const auto found = directKinds().find(type);
    if (found == directKinds().end()) return unsupported(node, nodeId, fmt::format("unsupported op '{}'", type));
    const OpKind kind = found->second;

    // Inputs that are data: the rest are shape inputs turned into attributes below.
    int dataInputs = node.input_size();
    auto intsFrom = [&](int input, const std::string& key) -> Status {
      if (!hasInput(node, input)) return {};
      auto values = constInts(node, nodeId, input);
      if (!values) return values.error();
      attrs[key] = *values;
      return {};
    };
    switch (kind) {
      case OpKind::kReshape: case OpKind::kExpand:
        if (node.input_size() != 2) return unsupported(node, nodeId, "takes 2 inputs");
        if (auto s = intsFrom(1, "shape"); !s) return s;
        dataInputs = 1;
        break;
      case OpKind::kUnsqueeze: case OpKind::kSqueeze: case OpKind::kReduceSum:
        if (auto s = intsFrom(1, "axes"); !s) return s;
        dataInputs = 1;
        break;
      case OpKind::kSlice:
        if (node.input_size() < 3) return unsupported(node, nodeId, "takes 3 to 5 inputs");
        if (auto s = intsFrom(1, "starts"); !s) return s;
        if (auto s = intsFrom(2, "ends"); !s) return s;
        if (auto s = intsFrom(3, "axes"); !s) return s;
        if (auto s = intsFrom(4, "steps"); !s) return s;
        dataInputs = 1;
        break;
      case OpKind::kSplit: {
        // num_outputs (opset 18) is the output count, split as below.
        if (ir::Op{kind, "", {}, {}, attrs, 0}.intAttr("num_outputs", node.output_size()) != node.output_size())
          return unsupported(node, nodeId, "num_outputs differs from the node's output count");
        attrs.erase("num_outputs");
        if (hasInput(node, 1)) {
          if (auto s = intsFrom(1, "split"); !s) return s;
        } else if (!attrs.count("split")) {
          auto in = lookup(node.input(0));
          if (!in) return unsupported(node, nodeId, "input is not defined");
          const auto& shape = graph_.tensor(*in).shape;
          std::int64_t axis = ir::Op{kind, "", {}, {}, attrs, 0}.intAttr("axis", 0);
          if (axis < 0) axis += static_cast<std::int64_t>(shape.size());
          if (axis < 0 || axis >= static_cast<std::int64_t>(shape.size()))
            return unsupported(node, nodeId, fmt::format("axis {} is out of range", axis));
          const std::int64_t parts = node.output_size();
          const std::int64_t each = (shape[axis] + parts - 1) / parts;
          std::vector<std::int64_t> split;
          for (std::int64_t p = 0, left = shape[axis]; p < parts; ++p, left -= each) split.push_back(std::min(each, left));
          attrs["split"] = split;
        }
        dataInputs = 1;
        break;
      }
      case OpKind::kConstantOfShape: {
        if (auto s = intsFrom(0, "shape"); !s) return s;
        dataInputs = 0;
        attrs["dtype"] = std::string("fp32");
        for (const auto& a : node.attribute())
          if (a.name() == "value") {
            auto v = tensorValues(a.t(), dir_, true, nodeId);
            if (!v) return v.error();
            auto dtype = dtypeOf(a.t().data_type());
            if (!dtype || !*v || (*v)->size() != 1) return unsupported(node, nodeId, "value must be a 1-element tensor");
            attrs["value"] = (**v)[0];
            attrs["dtype"] = std::string(ir::dtypeName(*dtype));
          }
        break;
      }
      case OpKind::kCast: {
        const auto given = attrs.find("to");
        if (given == attrs.end() || !std::holds_alternative<std::int64_t>(given->second))
          return unsupported(node, nodeId, "needs an integer 'to' attribute (an ONNX tensor type)");
        const std::int64_t toType = std::get<std::int64_t>(given->second);
        auto to = toType == static_cast<int>(toType) ? dtypeOf(static_cast<int>(toType)) : std::nullopt;
        if (!to)
          return unsupported(node, nodeId, fmt::format("cast to {} is not supported",
                                                       toType == static_cast<int>(toType)
                                                           ? onnxTypeName(static_cast<int>(toType))
                                                           : fmt::format("type {}", toType)));
        attrs["to"] = std::string(ir::dtypeName(*to));
        break;
      }
      case OpKind::kGemm:
        break;
      case OpKind::kConv: case OpKind::kMaxPool: case OpKind::kAveragePool:
        if (auto s = normalizeWindow(node, nodeId, kind, attrs); !s) return s;
        break;
      case OpKind::kReduceMean: case OpKind::kReduceMax:  // axes an input from opset 18
        if (auto s = intsFrom(1, "axes"); !s) return s;
        dataInputs = 1;
        break;
      case OpKind::kBatchNormalization:
        if (ir::Op{kind, "", {}, {}, attrs, 0}.intAttr("training_mode", 0) != 0)
          return unsupported(node, nodeId, "training_mode is not supported (inference only)");
        attrs.erase("training_mode");
        attrs.erase("momentum");
        break;
      default:
        break;
    }
    if (kind == OpKind::kMaxPool && node.output_size() > 1 && !node.output(1).empty())
      return unsupported(node, nodeId, "the Indices output is not supported");
    if (kind == OpKind::kMaxPool) attrs.erase("storage_order");
    if (kind == OpKind::kBatchNormalization && node.output_size() > 1)
      return unsupported(node, nodeId, "running mean and variance outputs are training outputs, not supported");
    if (kind == OpKind::kLayerNormalization) attrs.erase("stash_type");
    if (kind == OpKind::kSoftmax && opset_ < 13) return softmaxOverFlattened(node, nodeId, attrs, layer);
    if (kind == OpKind::kSoftmax && !attrs.count("axis")) attrs["axis"] = std::int64_t{-1};

    std::vector<TensorId> inputs;
    for (int i = 0; i < dataInputs; ++i) {
      if (node.input(i).empty()) {
        if (kind == OpKind::kGemm || kind == OpKind::kConv || kind == OpKind::kLayerNormalization) continue;
        return unsupported(node, nodeId, fmt::format("optional input {} left empty is not supported", i));
      }
      auto id = lookup(node.input(i));
      if (!id) return unsupported(node, nodeId, fmt::format("input '{}' is not defined", node.input(i)));
      inputs.push_back(*id);
    }
    if ((kind == OpKind::kConv || kind == OpKind::kMaxPool || kind == OpKind::kAveragePool) && !inputs.empty() &&
        graph_.tensor(inputs[0]).shape.size() == 3)
      return windowOverOneDimension(node, nodeId, kind, inputs, std::move(attrs), layer);
    if (kind == OpKind::kAveragePool && !inputs.empty() && graph_.tensor(inputs[0]).shape.size() == 4 &&
        averageNeedsPositionDivisors(attrs))
      return averagePoolByPosition(node, nodeId, inputs[0], std::move(attrs), layer);
    // Gemm's transA is an explicit Transpose of A (an SXM permute on chip): the MXM streams the rows
    // of A, and A^T's rows are columns of the stored A.
    if (kind == OpKind::kGemm && ir::Op{kind, "", {}, {}, attrs, 0}.intAttr("transA", 0) != 0 && !inputs.empty() &&
        graph_.tensor(inputs[0]).shape.size() == 2) {
      auto transposed = graph_.addMultiOp(OpKind::kTranspose, nodeId + "/transA", {inputs[0]},
                                          {{"perm", std::vector<std::int64_t>{1, 0}}}, layer, {""});
      if (!transposed) return withOp(transposed.error(), node);
      inputs[0] = transposed->front();
      attrs.erase("transA");
    }
    if (kind == OpKind::kCast && options_.precision && std::get<std::string>(attrs["to"]) == "fp32")
      attrs["to"] = std::string(ir::dtypeName(options_.precision->activations));

    std::vector<std::string> outNames;
    const int primaryOutputs = kind == OpKind::kLayerNormalization ? 1 : node.output_size();
    for (int i = 0; i < primaryOutputs; ++i) outNames.push_back(node.output(i));

    auto folded = foldValues(kind, nodeId, inputs, attrs);
    if (!folded) return withOp(folded.error(), node);
    if (*folded) {
      for (size_t i = 0; i < (*folded)->size() && i < outNames.size(); ++i)
        if (!outNames[i].empty())
          if (auto s = addConstantTensor(outNames[i], (**folded)[i]); !s) return s;
      if (kind == OpKind::kLayerNormalization) return layerNormStatistics(node, nodeId, inputs, attrs, layer);
      return {};
    }
    if (kind == OpKind::kScatterND) return scatterByGather(node, nodeId, inputs, attrs, layer);
    auto outs = graph_.addMultiOp(kind, nodeId, inputs, attrs, layer, outNames);
    if (!outs) return withOp(outs.error(), node);
    for (size_t i = 0; i < outs->size(); ++i)
      if (!outNames[i].empty()) byName_[outNames[i]] = (*outs)[i];
    if (kind == OpKind::kLayerNormalization) return layerNormStatistics(node, nodeId, inputs, attrs, layer);
    return {};
  }

  // --- ONNX ops built from several IR ops (ir::onnxCompositions) ---

  // One op of a composition, folded to a constant when its inputs are known; named outName when
  // given (the ONNX node's output), else NAME.out.
  Expected<TensorId> emit(const onnx::NodeProto& node, OpKind kind, const std::string& name, std::vector<TensorId> inputs,
                          ir::Attrs attrs, int layer, const std::string& outName = "") {
    auto folded = foldValues(kind, name, inputs, attrs);
    if (!folded) return withOp(folded.error(), node);
    TensorId id;
    if (*folded) {
      const ir::Value& v = (**folded)[0];
      id = graph_.addConstant(outName.empty() ? name + ".out" : outName, v.shape, v.dtype,
                              v.data);
    } else {
      auto outs = graph_.addMultiOp(kind, name, std::move(inputs), std::move(attrs), layer, {outName});
      if (!outs) return withOp(outs.error(), node);
      id = outs->front();
    }
    if (!outName.empty()) byName_[outName] = id;
    return id;
  }

  static Status statusOf(const Expected<TensorId>& e) { return e ? Status{} : Status{e.error()}; }

  TensorId constant(const std::string& name, Shape shape, DType dtype, std::vector<double> values) {
    return graph_.addConstant(name, std::move(shape), dtype, std::move(values));
  }

  Expected<TensorId> inputOf(const onnx::NodeProto& node, const std::string& nodeId, int i) {
    if (!hasInput(node, i)) return unsupported(node, nodeId, fmt::format("input {} is missing", i)).error();
    auto id = lookup(node.input(i));
    if (!id) return unsupported(node, nodeId, fmt::format("input '{}' is not defined", node.input(i))).error();
    return *id;
  }

  // The node's output as another name of `tensor` (a composition that is the identity).
  Status alias(const onnx::NodeProto& node, TensorId tensor) {
    byName_[node.output(0)] = tensor;
    return {};
  }

  // The ops built for ONNX ops without an IR kind of their own; nullopt for the others.
  std::optional<Status> addComposition(const onnx::NodeProto& node, const std::string& nodeId, const ir::Attrs& attrs,
                                       int layer) {
    const std::string& type = node.op_type();
    const ir::Op view{OpKind::kIdentity, "", {}, {}, attrs, 0};
    if (type == "Dropout") {
      auto x = inputOf(node, nodeId, 0);
      if (!x) return x.error();
      // training_mode: inference only, unless the ratio is a constant 0, which drops nothing in training either
      // (torchvision's Swin applies F.dropout(p=0.0) in training form).
      auto constantIs = [&](int input, double value) {
        auto id = lookup(node.input(input));
        return id && graph_.tensor(*id).data && graph_.tensor(*id).elements() == 1 &&
               graph_.tensor(*id).data->front() == value;
      };
      if (hasInput(node, 2) && !constantIs(2, 0.0) && !(hasInput(node, 1) && constantIs(1, 0.0)))
        return unsupported(node, nodeId, "training_mode is not supported (inference only)");
      if (node.output_size() > 1 && !node.output(1).empty()) {  // the mask keeps every element in inference
        auto mask = emit(node, OpKind::kConstantOfShape, nodeId + "/mask", {},
                         {{"shape", graph_.tensor(*x).shape}, {"value", 1.0}, {"dtype", std::string("bool")}}, layer,
                         node.output(1));
        if (!mask) return mask.error();
      }
      return alias(node, *x);
    }
    if (type == "Sum" || ((type == "Min" || type == "Max") && node.input_size() != 2)) {
      const OpKind kind = type == "Sum" ? OpKind::kAdd : type == "Min" ? OpKind::kMin : OpKind::kMax;
      auto acc = inputOf(node, nodeId, 0);
      if (!acc) return acc.error();
      if (node.input_size() == 1) return alias(node, *acc);
      for (int i = 1; i < node.input_size(); ++i) {
        auto next = inputOf(node, nodeId, i);
        if (!next) return next.error();
        acc = emit(node, kind, fmt::format("{}/{}", nodeId, i), {*acc, *next}, {}, layer,
                   i + 1 == node.input_size() ? node.output(0) : "");
        if (!acc) return acc.error();
      }
      return Status{};
    }
    if (type == "Mean") {  // a chain of Add, then times 1 / n
      auto acc = inputOf(node, nodeId, 0);
      if (!acc) return acc.error();
      for (int i = 1; i < node.input_size(); ++i) {
        auto next = inputOf(node, nodeId, i);
        if (!next) return next.error();
        acc = emit(node, OpKind::kAdd, fmt::format("{}/{}", nodeId, i), {*acc, *next}, {}, layer);
        if (!acc) return acc.error();
      }
      const DType type = graph_.tensor(*acc).dtype;
      const TensorId scale = constant(nodeId + "/scale", {}, type, {ir::castTo(1.0 / node.input_size(), type)});
      return statusOf(emit(node, OpKind::kMul, nodeId, {*acc, scale}, {}, layer, node.output(0)));
    }
    if (type == "Size") {
      auto x = inputOf(node, nodeId, 0);
      if (!x) return x.error();
      return addConstantTensor(node.output(0), ir::Value{DType::kI64, {}, {static_cast<double>(graph_.tensor(*x).elements())}});
    }
    if (type == "CastLike") {
      auto x = inputOf(node, nodeId, 0);
      auto like = inputOf(node, nodeId, 1);
      if (!x) return x.error();
      if (!like) return like.error();
      return statusOf(emit(node, OpKind::kCast, nodeId, {*x}, {{"to", std::string(ir::dtypeName(graph_.tensor(*like).dtype))}},
                           layer, node.output(0)));
    }
    if (type == "GlobalMaxPool") {
      auto x = inputOf(node, nodeId, 0);
      if (!x) return x.error();
      Shape axes;
      for (size_t d = 2; d < graph_.tensor(*x).shape.size(); ++d) axes.push_back(static_cast<std::int64_t>(d));
      return statusOf(emit(node, OpKind::kReduceMax, nodeId, {*x}, {{"axes", axes}, {"keepdims", std::int64_t{1}}}, layer,
                           node.output(0)));
    }
    if (type == "LogSoftmax") return logSoftmax(node, nodeId, view, layer);
    if (type == "ReduceMin" || type == "ReduceSumSquare" || type == "ReduceL1" || type == "ReduceL2" ||
        type == "ReduceLogSum" || type == "ReduceLogSumExp")
      return reduction(node, nodeId, attrs, layer);
    if (type == "Clip") return clip(node, nodeId, view, layer);
    if (type == "Einsum") return einsum(node, nodeId, view.stringAttr("equation", ""), layer);
    if (type == "Pad") return pad(node, nodeId, view, layer);
    if (type == "Tile") return tile(node, nodeId, layer);
    if (type == "Trilu") return trilu(node, nodeId, view, layer);
    if (type == "CumSum") return cumSum(node, nodeId, view, layer);
    if (type == "InstanceNormalization") return channelNorm(node, nodeId, view, false, layer);
    if (type == "GroupNormalization") return channelNorm(node, nodeId, view, true, layer);
    if (type == "Resize") return resize(node, nodeId, view, layer);
    return std::nullopt;
  }

  // The reductions ONNX defines over ReduceSum and ReduceMax: an elementwise op before (Neg, Mul, Abs,
  // Exp) and after (Neg, Sqrt, Log) the reduction, its axes and keepdims kept.
  Status reduction(const onnx::NodeProto& node, const std::string& nodeId, ir::Attrs attrs, int layer) {
    const std::string& type = node.op_type();
    auto x = inputOf(node, nodeId, 0);
    if (!x) return x.error();
    if (hasInput(node, 1)) {
      auto axes = constInts(node, nodeId, 1);
      if (!axes) return axes.error();
      attrs["axes"] = *axes;
    }
    const OpKind before = type == "ReduceMin" ? OpKind::kNeg : type == "ReduceSumSquare" || type == "ReduceL2" ? OpKind::kMul
                          : type == "ReduceL1" ? OpKind::kAbs : type == "ReduceLogSumExp" ? OpKind::kExp : OpKind::kIdentity;
    const OpKind after = type == "ReduceMin" ? OpKind::kNeg : type == "ReduceL2" ? OpKind::kSqrt
                         : type == "ReduceLogSum" || type == "ReduceLogSumExp" ? OpKind::kLog : OpKind::kIdentity;
    TensorId cur = *x;
    if (before != OpKind::kIdentity) {
      auto pre = emit(node, before, nodeId + "/pre", before == OpKind::kMul ? std::vector<TensorId>{cur, cur}
                                                                              : std::vector<TensorId>{cur}, {}, layer);
      if (!pre) return pre.error();
      cur = *pre;
    }
    const OpKind reduce = type == "ReduceMin" ? OpKind::kReduceMax : OpKind::kReduceSum;
    auto reduced = emit(node, reduce, nodeId, {cur}, std::move(attrs), layer, after == OpKind::kIdentity ? node.output(0) : "");
    if (!reduced || after == OpKind::kIdentity) return statusOf(reduced);
    return statusOf(emit(node, after, nodeId + "/post", {*reduced}, {}, layer, node.output(0)));
  }

  // LogSoftmax: (x - max) - log(sum(exp(x - max))) over the axis.
  Status logSoftmax(const onnx::NodeProto& node, const std::string& nodeId, const ir::Op& view, int layer) {
    auto x = inputOf(node, nodeId, 0);
    if (!x) return x.error();
    const auto rank = static_cast<std::int64_t>(graph_.tensor(*x).shape.size());
    std::int64_t axis = view.intAttr("axis", opset_ < 13 ? 1 : -1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return unsupported(node, nodeId, fmt::format("axis {} is out of range", axis));
    if (opset_ < 13 && axis != rank - 1)
      return unsupported(node, nodeId, "before opset 13 only the last axis is supported (the input coerced to 2-D)");
    const ir::Attrs over = {{"axes", Shape{axis}}, {"keepdims", std::int64_t{1}}};
    auto top = emit(node, OpKind::kReduceMax, nodeId + "/max", {*x}, over, layer);
    if (!top) return top.error();
    auto shifted = emit(node, OpKind::kSub, nodeId + "/shifted", {*x, *top}, {}, layer);
    if (!shifted) return shifted.error();
    auto exps = emit(node, OpKind::kExp, nodeId + "/exp", {*shifted}, {}, layer);
    if (!exps) return exps.error();
    auto sum = emit(node, OpKind::kReduceSum, nodeId + "/sum", {*exps}, over, layer);
    if (!sum) return sum.error();
    auto logSum = emit(node, OpKind::kLog, nodeId + "/log", {*sum}, {}, layer);
    if (!logSum) return logSum.error();
    return statusOf(emit(node, OpKind::kSub, nodeId, {*shifted, *logSum}, {}, layer, node.output(0)));
  }

  // A scalar bound of Clip or Pad: a constant of the data's dtype when its value is known, else the tensor.
  Expected<TensorId> scalarOf(const onnx::NodeProto& node, const std::string& nodeId, int input, DType dtype) {
    auto id = inputOf(node, nodeId, input);
    if (!id) return id;
    const ir::Tensor& t = graph_.tensor(*id);
    if (t.elements() != 1) return unsupported(node, nodeId, fmt::format("input {} must hold one value", input)).error();
    if (!t.data) return *id;
    return constant(fmt::format("{}/bound{}", nodeId, input), {}, dtype, {ir::castTo(t.data->front(), dtype)});
  }

  Status clip(const onnx::NodeProto& node, const std::string& nodeId, const ir::Op& view, int layer) {
    auto x = inputOf(node, nodeId, 0);
    if (!x) return x.error();
    const DType type = graph_.tensor(*x).dtype;
    std::vector<std::pair<OpKind, TensorId>> steps;  // Max with the lower bound, then Min with the upper
    for (int i = 1; i <= 2; ++i) {
      const OpKind kind = i == 1 ? OpKind::kMax : OpKind::kMin;
      if (hasInput(node, i)) {
        auto bound = scalarOf(node, nodeId, i, type);
        if (!bound) return bound.error();
        steps.push_back({kind, *bound});
      } else if (view.hasAttr(i == 1 ? "min" : "max")) {  // before opset 11
        steps.push_back({kind, constant(fmt::format("{}/bound{}", nodeId, i), {}, type,
                                        {ir::castTo(view.floatAttr(i == 1 ? "min" : "max", 0.0), type)})});
      }
    }
    if (steps.empty()) return alias(node, *x);
    TensorId cur = *x;
    for (size_t i = 0; i < steps.size(); ++i) {
      auto next = emit(node, steps[i].first, fmt::format("{}/{}", nodeId, i == 0 && steps[i].first == OpKind::kMax ? "min" : "max"),
                       {cur, steps[i].second}, {}, layer, i + 1 == steps.size() ? node.output(0) : "");
      if (!next) return next.error();
      cur = *next;
    }
    return {};
  }

  // Transpose of `x` by perm (none when perm is the identity).
  Expected<TensorId> permute(const onnx::NodeProto& node, const std::string& name, TensorId x, const Shape& perm,
                             int layer, const std::string& outName = "") {
    Shape identity(perm.size());
    std::iota(identity.begin(), identity.end(), 0);
    if (perm == identity && outName.empty()) return x;
    if (perm == identity) return emit(node, OpKind::kIdentity, name, {x}, {}, layer, outName);
    return emit(node, OpKind::kTranspose, name, {x}, {{"perm", perm}}, layer, outName);
  }

  // Reshape of `x` to shape (none when it has that shape already).
  Expected<TensorId> reshape(const onnx::NodeProto& node, const std::string& name, TensorId x, const Shape& shape,
                             int layer, const std::string& outName = "") {
    if (graph_.tensor(x).shape == shape && outName.empty()) return x;
    return emit(node, OpKind::kReshape, name, {x}, {{"shape", shape}}, layer, outName);
  }

  // Einsum: the equation's labels (an ellipsis as digits) per operand, then one batched MatMul.
  Status einsum(const onnx::NodeProto& node, const std::string& nodeId, std::string equation, int layer) {
    equation.erase(std::remove(equation.begin(), equation.end(), ' '), equation.end());
    const auto arrow = equation.find("->");
    const std::string lhs = equation.substr(0, arrow);
    std::vector<std::string> terms;
    for (size_t start = 0;;) {
      const auto comma = lhs.find(',', start);
      terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (terms.size() != static_cast<size_t>(node.input_size()) || terms.empty() || terms.size() > 2)
      return unsupported(node, nodeId, fmt::format("equation '{}': one or two operands are supported", equation));
    std::vector<TensorId> xs;
    size_t ellipsis = 0;
    for (int i = 0; i < node.input_size(); ++i) {
      auto x = inputOf(node, nodeId, i);
      if (!x) return x.error();
      xs.push_back(*x);
      const auto dots = terms[i].find("...");
      if (dots != std::string::npos)
        ellipsis = std::max(ellipsis, graph_.tensor(*x).shape.size() - (terms[i].size() - 3));
    }
    std::string ellipsisLabels;
    for (size_t k = 0; k < ellipsis; ++k) ellipsisLabels += static_cast<char>('0' + k);
    auto expand = [&](std::string term, size_t rank) {
      const auto dots = term.find("...");
      if (dots == std::string::npos) return term;
      const size_t own = rank >= term.size() - 3 ? rank - (term.size() - 3) : 0;
      return term.substr(0, dots) + ellipsisLabels.substr(ellipsis - own) + term.substr(dots + 3);
    };
    std::map<char, std::int64_t> size;
    std::map<char, int> uses;
    for (size_t i = 0; i < terms.size(); ++i) {
      const Shape& shape = graph_.tensor(xs[i]).shape;
      terms[i] = expand(terms[i], shape.size());
      if (terms[i].size() != shape.size())
        return unsupported(node, nodeId, fmt::format("equation '{}' does not match operand {} of rank {}", equation, i,
                                                     shape.size()));
      for (size_t d = 0; d < shape.size(); ++d) {
        const char c = terms[i][d];
        if (std::count(terms[i].begin(), terms[i].end(), c) > 1)
          return unsupported(node, nodeId, fmt::format("equation '{}': a label repeated in one operand (a diagonal) is "
                                                       "not supported", equation));
        auto [it, fresh] = size.try_emplace(c, shape[d]);
        if (!fresh && it->second != shape[d])
          return unsupported(node, nodeId, fmt::format("equation '{}': label '{}' has sizes {} and {}", equation, c,
                                                       it->second, shape[d]));
        ++uses[c];
      }
    }
    std::string out;
    if (arrow != std::string::npos) {
      out = expand(equation.substr(arrow + 2), ellipsis + equation.size() - arrow - 2 - 3);
      if (out.find("...") == std::string::npos) out = equation.substr(arrow + 2);
      const auto dots = out.find("...");
      if (dots != std::string::npos) out = out.substr(0, dots) + ellipsisLabels + out.substr(dots + 3);
    } else {
      out = ellipsisLabels;
      std::string once;
      for (const auto& [c, n] : uses)
        if (n == 1 && !std::isdigit(static_cast<unsigned char>(c))) once += c;
      out += once;
    }
    for (char c : out)
      if (!size.count(c)) return unsupported(node, nodeId, fmt::format("equation '{}': output label '{}' is not an input's", equation, c));
    auto inOut = [&](char c) { return out.find(c) != std::string::npos; };
    // Labels of one operand that are not in the output are summed first.
    for (size_t i = 0; i < terms.size(); ++i) {
      Shape axes;
      std::string kept;
      for (size_t d = 0; d < terms[i].size(); ++d) {
        const char c = terms[i][d];
        const bool other = terms.size() == 2 && terms[1 - i].find(c) != std::string::npos;
        if (!inOut(c) && !other) axes.push_back(static_cast<std::int64_t>(d));
        else kept += c;
      }
      if (axes.empty()) continue;
      auto summed = emit(node, OpKind::kReduceSum, fmt::format("{}/sum{}", nodeId, i), {xs[i]},
                         {{"axes", axes}, {"keepdims", std::int64_t{0}}}, layer);
      if (!summed) return summed.error();
      xs[i] = *summed;
      terms[i] = kept;
    }
    auto permOf = [](const std::string& from, const std::string& to) {
      Shape perm;
      for (char c : to) perm.push_back(static_cast<std::int64_t>(from.find(c)));
      return perm;
    };
    if (terms.size() == 1) return statusOf(permute(node, nodeId + "/transpose", xs[0], permOf(terms[0], out), layer, node.output(0)));
    std::string batch, left, right, contracted;
    for (char c : terms[0]) {
      const bool inB = terms[1].find(c) != std::string::npos;
      (inB ? (inOut(c) ? batch : contracted) : left) += c;
    }
    for (char c : terms[1])
      if (terms[0].find(c) == std::string::npos) right += c;
    auto product = [&](const std::string& labels) {
      std::int64_t n = 1;
      for (char c : labels) n *= size[c];
      return n;
    };
    Shape batchDims;
    for (char c : batch) batchDims.push_back(size[c]);
    auto a = permute(node, nodeId + "/a", xs[0], permOf(terms[0], batch + left + contracted), layer);
    if (!a) return a.error();
    Shape aShape = batchDims;
    aShape.insert(aShape.end(), {product(left), product(contracted)});
    a = reshape(node, nodeId + "/a_matrix", *a, aShape, layer);
    if (!a) return a.error();
    auto b = permute(node, nodeId + "/b", xs[1], permOf(terms[1], batch + contracted + right), layer);
    if (!b) return b.error();
    Shape bShape = batchDims;
    bShape.insert(bShape.end(), {product(contracted), product(right)});
    b = reshape(node, nodeId + "/b_matrix", *b, bShape, layer);
    if (!b) return b.error();
    const std::string produced = batch + left + right;
    const bool last = produced == out;
    Shape producedShape = batchDims;
    for (char c : left + right) producedShape.push_back(size[c]);
    Shape matShape = batchDims;
    matShape.insert(matShape.end(), {product(left), product(right)});
    const bool sameShape = matShape == producedShape;
    auto y = emit(node, OpKind::kMatMul, nodeId, {*a, *b}, {}, layer, last && sameShape ? node.output(0) : "");
    if (!y) return y.error();
    if (last && sameShape) return {};
    if (last) return statusOf(reshape(node, nodeId + "/shape", *y, producedShape, layer, node.output(0)));
    y = reshape(node, nodeId + "/shape", *y, producedShape, layer);
    if (!y) return y.error();
    return statusOf(permute(node, nodeId + "/transpose", *y, permOf(produced, out), layer, node.output(0)));
  }

  Status pad(const onnx::NodeProto& node, const std::string& nodeId, const ir::Op& view, int layer) {
    auto x = inputOf(node, nodeId, 0);
    if (!x) return x.error();
    const Shape shape = graph_.tensor(*x).shape;
    const DType type = graph_.tensor(*x).dtype;
    const auto rank = static_cast<std::int64_t>(shape.size());
    const std::string mode = view.stringAttr("mode", "constant");
    if (mode != "constant" && mode != "reflect" && mode != "edge")
      return unsupported(node, nodeId, fmt::format("mode '{}' is not supported (constant, reflect, edge)", mode));
    if (hasInput(node, 3)) return unsupported(node, nodeId, "the axes input is not supported");
    Shape pads = view.intsAttr("pads");
    if (hasInput(node, 1)) {
      auto values = constInts(node, nodeId, 1);
      if (!values) return values.error();
      pads = *values;
    }
    if (static_cast<std::int64_t>(pads.size()) != 2 * rank)
      return unsupported(node, nodeId, fmt::format("pads has {} values, the input's rank {} needs {}", pads.size(), rank,
                                                   2 * rank));
    double value = view.floatAttr("value", 0.0);
    if (hasInput(node, 2)) {
      auto id = lookup(node.input(2));
      if (!id || !graph_.tensor(*id).data || graph_.tensor(*id).elements() != 1)
        return unsupported(node, nodeId, "constant_value must be a constant of one value");
      value = graph_.tensor(*id).data->front();
    }
    std::vector<std::int64_t> axes;
    for (std::int64_t a = 0; a < rank; ++a)
      if (pads[a] != 0 || pads[rank + a] != 0) axes.push_back(a);
    if (axes.empty()) return alias(node, *x);
    TensorId cur = *x;
    for (size_t k = 0; k < axes.size(); ++k) {
      const std::int64_t a = axes[k];
      std::int64_t begin = pads[a], end = pads[rank + a];
      const bool last = k + 1 == axes.size();
      std::int64_t n = graph_.tensor(cur).shape[a];
      if (begin < 0 || end < 0) {  // negative pads crop
        const bool grows = begin > 0 || end > 0;
        auto cropped = emit(node, OpKind::kSlice, fmt::format("{}/crop{}", nodeId, a), {cur},
                            {{"starts", Shape{std::max<std::int64_t>(0, -begin)}},
                             {"ends", Shape{n - std::max<std::int64_t>(0, -end)}}, {"axes", Shape{a}}},
                            layer, last && !grows ? node.output(0) : "");
        if (!cropped) return cropped.error();
        cur = *cropped;
        begin = std::max<std::int64_t>(0, begin);
        end = std::max<std::int64_t>(0, end);
        n = graph_.tensor(cur).shape[a];
        if (!grows) continue;
      }
      const std::string outName = last ? node.output(0) : "";
      Expected<TensorId> padded = cur;
      if (mode == "constant") {
        std::vector<TensorId> parts;
        for (int side = 0; side < 2; ++side) {
          const std::int64_t width = side == 0 ? begin : end;
          if (side == 1) parts.push_back(cur);
          if (width == 0) continue;
          Shape block = graph_.tensor(cur).shape;
          block[a] = width;
          std::int64_t count = 1;
          for (auto d : block) count *= d;
          parts.push_back(constant(fmt::format("{}/fill{}_{}", nodeId, a, side), block, type,
                                   std::vector<double>(static_cast<size_t>(count), ir::castTo(value, type))));
        }
        padded = emit(node, OpKind::kConcat, fmt::format("{}/axis{}", nodeId, a), parts, {{"axis", a}}, layer, outName);
      } else {
        // Edge repeats the border element, reflect mirrors about it: one Gather of constant indices.
        std::vector<double> index;
        for (std::int64_t i = -begin; i < n + end; ++i) {
          std::int64_t j = i;
          if (mode == "edge" || n == 1) {
            j = std::clamp<std::int64_t>(i, 0, n - 1);
          } else {
            while (j < 0 || j >= n) j = j < 0 ? -j : 2 * (n - 1) - j;
          }
          index.push_back(static_cast<double>(j));
        }
        const std::int64_t length = n + begin + end;
        const TensorId indices = constant(fmt::format("{}/index{}", nodeId, a), {length}, DType::kI32, std::move(index));
        padded = emit(node, OpKind::kGather, fmt::format("{}/axis{}", nodeId, a), {cur, indices}, {{"axis", a}}, layer,
                      outName);
      }
      if (!padded) return padded.error();
      cur = *padded;
    }
    return {};
  }

  // Tile: each axis d of x becomes [repeats[d], d] by an Expand over interleaved unit axes, then merged.
  Status tile(const onnx::NodeProto& node, const std::string& nodeId, int layer) {
    auto x = inputOf(node, nodeId, 0);
    if (!x) return x.error();
    auto repeats = constInts(node, nodeId, 1);
    if (!repeats) return repeats.error();
    const Shape shape = graph_.tensor(*x).shape;
    if (repeats->size() != shape.size())
      return unsupported(node, nodeId, fmt::format("repeats has {} values for rank {}", repeats->size(), shape.size()));
    if (std::all_of(repeats->begin(), repeats->end(), [](std::int64_t r) { return r == 1; })) return alias(node, *x);
    Shape interleaved, expanded, merged;
    for (size_t d = 0; d < shape.size(); ++d) {
      interleaved.insert(interleaved.end(), {1, shape[d]});
      expanded.insert(expanded.end(), {(*repeats)[d], shape[d]});
      merged.push_back((*repeats)[d] * shape[d]);
    }
    auto split = reshape(node, nodeId + "/interleave", *x, interleaved, layer);
    if (!split) return split.error();
    auto wide = emit(node, OpKind::kExpand, nodeId + "/expand", {*split}, {{"shape", expanded}}, layer);
    if (!wide) return wide.error();
    return statusOf(reshape(node, nodeId, *wide, merged, layer, node.output(0)));
  }

  // Trilu: Where with a constant mask of the last two axes (upper: j - i >= k; lower: j - i <= k).
  Status trilu(const onnx::NodeProto& node, const std::string& nodeId, const ir::Op& view, int layer) {
    auto x = inputOf(node, nodeId, 0);
    if (!x) return x.error();
    std::int64_t k = 0;
    if (hasInput(node, 1)) {
      auto values = constInts(node, nodeId, 1);
      if (!values) return values.error();
      if (values->size() != 1) return unsupported(node, nodeId, "k must hold one value");
      k = values->front();
    }
    const Shape shape = graph_.tensor(*x).shape;
    if (shape.size() < 2) return unsupported(node, nodeId, "needs an input of rank >= 2");
    const std::int64_t rows = shape[shape.size() - 2], cols = shape.back();
    const bool upper = view.intAttr("upper", 1) != 0;
    std::vector<double> keep;
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) keep.push_back(upper ? (j - i >= k) : (j - i <= k));
    const TensorId mask = constant(nodeId + "/mask", {rows, cols}, DType::kBool, std::move(keep));
    const DType type = graph_.tensor(*x).dtype;
    const TensorId zero = constant(nodeId + "/zero", {}, type, {0.0});
    return statusOf(emit(node, OpKind::kWhere, nodeId, {mask, *x, zero}, {}, layer, node.output(0)));
  }

  // CumSum over an axis: x (axis moved last) times a constant 0/1 triangle T, T[i][j] = 1 when
  // element i is summed into j (i <= j; < for exclusive; reversed: >=, >).
  Status cumSum(const onnx::NodeProto& node, const std::string& nodeId, const ir::Op& view, int layer) {
    auto x = inputOf(node, nodeId, 0);
    if (!x) return x.error();
    auto axisValues = constInts(node, nodeId, 1);
    if (!axisValues) return axisValues.error();
    const Shape shape = graph_.tensor(*x).shape;
    const auto rank = static_cast<std::int64_t>(shape.size());
    std::int64_t axis = axisValues->empty() ? 0 : axisValues->front();
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return unsupported(node, nodeId, fmt::format("axis {} is out of range", axis));
    const std::int64_t n = shape[axis];
    const bool exclusive = view.intAttr("exclusive", 0) != 0, reverse = view.intAttr("reverse", 0) != 0;
    std::vector<double> triangle;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        triangle.push_back(reverse ? (exclusive ? i > j : i >= j) : (exclusive ? i < j : i <= j));
    const DType type = graph_.tensor(*x).dtype;
    const TensorId sums = constant(nodeId + "/triangle", {n, n}, type, std::move(triangle));
    Shape perm(static_cast<size_t>(rank));
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[axis], perm.back());
    const bool moved = axis != rank - 1;
    auto last = permute(node, nodeId + "/to_last", *x, perm, layer);
    if (!last) return last.error();
    auto summed = emit(node, OpKind::kMatMul, nodeId, {*last, sums}, {}, layer, moved ? "" : node.output(0));
    if (!summed || !moved) return statusOf(summed);
    return statusOf(permute(node, nodeId + "/back", *summed, perm, layer, node.output(0)));
  }

  // LayerNormalization over the last axis of [N, K, L], with no scale of its own.
  Expected<TensorId> normalizeRows(const onnx::NodeProto& node, const std::string& nodeId, const ir::Op& view,
                                   TensorId rows, int layer) {
    const std::int64_t length = graph_.tensor(rows).shape.back();
    const TensorId ones = constant(nodeId + "/ones", {length}, graph_.tensor(rows).dtype,
                                   std::vector<double>(static_cast<size_t>(length), 1.0));
    return emit(node, OpKind::kLayerNormalization, nodeId, {rows, ones},
                {{"axis", std::int64_t{-1}}, {"epsilon", view.floatAttr("epsilon", 1e-5)}}, layer);
  }

  // The K values of scale and of bias applied to the rows of [N, K, L]; the result reshaped to
  // `shape`, the node's output.
  Status scaleRows(const onnx::NodeProto& node, const std::string& nodeId, TensorId rows, TensorId scale, TensorId bias,
                   const Shape& shape, int layer) {
    const Shape rowShape = graph_.tensor(rows).shape;
    const std::int64_t k = rowShape[1];
    for (TensorId v : {scale, bias})
      if (graph_.tensor(v).elements() != k)
        return unsupported(node, nodeId, fmt::format("scale and bias need {} values each, '{}' has {}", k,
                                                     graph_.tensor(v).name, graph_.tensor(v).elements()));
    auto column = [&](TensorId v, const char* what) { return reshape(node, nodeId + "/" + what, v, {k, 1}, layer); };
    auto scaleColumn = column(scale, "scale");
    if (!scaleColumn) return scaleColumn.error();
    auto biasColumn = column(bias, "bias");
    if (!biasColumn) return biasColumn.error();
    auto scaled = emit(node, OpKind::kMul, nodeId + "/scaled", {rows, *scaleColumn}, {}, layer);
    if (!scaled) return scaled.error();
    const bool same = shape == rowShape;
    auto shifted = emit(node, OpKind::kAdd, nodeId + "/shifted", {*scaled, *biasColumn}, {}, layer, same ? node.output(0) : "");
    if (!shifted || same) return statusOf(shifted);
    return statusOf(reshape(node, nodeId + "/shape", *shifted, shape, layer, node.output(0)));
  }

  // InstanceNormalization and GroupNormalization: LayerNormalization over each (n, group)'s
  // channels and spatial elements (a group is one channel for InstanceNormalization), then the
  // scale and bias: one per channel, except GroupNormalization's before opset 21 (one per group).
  Status channelNorm(const onnx::NodeProto& node, const std::string& nodeId, const ir::Op& view, bool grouped,
                     int layer) {
    auto x = inputOf(node, nodeId, 0);
    auto scale = inputOf(node, nodeId, 1);
    auto bias = inputOf(node, nodeId, 2);
    if (!x) return x.error();
    if (!scale) return scale.error();
    if (!bias) return bias.error();
    const Shape shape = graph_.tensor(*x).shape;
    if (shape.size() < 3) return unsupported(node, nodeId, "needs an input [N, C, spatial...]");
    const std::int64_t channels = shape[1], groups = grouped ? view.intAttr("num_groups", 0) : channels;
    if (groups < 1 || channels % groups != 0)
      return unsupported(node, nodeId, fmt::format("num_groups {} must be at least 1 and divide the {} channels", groups,
                                                   channels));
    std::int64_t spatial = 1;
    for (size_t d = 2; d < shape.size(); ++d) spatial *= shape[d];
    auto rows = reshape(node, nodeId + "/rows", *x, {shape[0], groups, channels / groups * spatial}, layer);
    if (!rows) return rows.error();
    auto normed = normalizeRows(node, nodeId, view, *rows, layer);
    if (!normed) return normed.error();
    if (groups != channels && opset_ >= 21) {
      normed = reshape(node, nodeId + "/channels", *normed, {shape[0], channels, spatial}, layer);
      if (!normed) return normed.error();
    }
    return scaleRows(node, nodeId, *normed, *scale, *bias, shape, layer);
  }

  // Resize (nearest, linear), one axis after another: the source coordinate of every output index
  // by the coordinate transformation, then a Gather of constant indices (nearest) or two Gathers
  // weighted by constant factors and added (linear).
  Status resize(const onnx::NodeProto& node, const std::string& nodeId, const ir::Op& view, int layer) {
    auto x = inputOf(node, nodeId, 0);
    if (!x) return x.error();
    const Shape shape = graph_.tensor(*x).shape;
    const auto rank = static_cast<std::int64_t>(shape.size());
    const std::string mode = view.stringAttr("mode", "nearest");
    const std::string transform = view.stringAttr("coordinate_transformation_mode", "half_pixel");
    const std::string nearestMode = view.stringAttr("nearest_mode", "round_prefer_floor");
    if (mode != "nearest" && mode != "linear" && mode != "cubic")
      return unsupported(node, nodeId, fmt::format("mode '{}' is not supported (nearest, linear, cubic)", mode));
    const double cubicA = view.floatAttr("cubic_coeff_a", -0.75);
    const bool excludeOutside = view.intAttr("exclude_outside", 0) != 0;
    if (transform != "half_pixel" && transform != "pytorch_half_pixel" && transform != "align_corners" &&
        transform != "asymmetric" && transform != "tf_half_pixel_for_nn")
      return unsupported(node, nodeId, fmt::format("coordinate_transformation_mode '{}' is not supported", transform));
    if (view.intAttr("antialias", 0) != 0) return unsupported(node, nodeId, "antialias is not supported");
    if (view.stringAttr("keep_aspect_ratio_policy", "stretch") != "stretch")
      return unsupported(node, nodeId, "keep_aspect_ratio_policy other than 'stretch' is not supported");
    if (view.hasAttr("axes")) return unsupported(node, nodeId, "the axes attribute is not supported");
    std::vector<double> scales;
    Shape sizes;
    const int scalesInput = opset_ < 11 ? 1 : 2, sizesInput = 3;
    if (hasInput(node, sizesInput)) {
      auto values = constInts(node, nodeId, sizesInput);
      if (!values) return values.error();
      sizes = *values;
    } else if (hasInput(node, scalesInput)) {
      auto id = lookup(node.input(scalesInput));
      if (!id || !graph_.tensor(*id).data)
        return modelError(nodeId, fmt::format("Resize (opset {}): input {} ('{}') must be a constant; it depends on "
                                              "values only known at run time", opset_, scalesInput, node.input(scalesInput)));
      scales = *graph_.tensor(*id).data;
    }
    if (sizes.empty() && static_cast<std::int64_t>(scales.size()) != rank)
      return unsupported(node, nodeId, fmt::format("needs {} scales or sizes", rank));
    if (!sizes.empty() && static_cast<std::int64_t>(sizes.size()) != rank)
      return unsupported(node, nodeId, fmt::format("sizes has {} values for rank {}", sizes.size(), rank));
    const DType type = graph_.tensor(*x).dtype;
    std::vector<std::int64_t> axes;
    Shape outShape(shape);
    for (std::int64_t a = 0; a < rank; ++a) {
      if (sizes.empty() && !(scales[a] > 0 && scales[a] * static_cast<double>(shape[a]) < 0x1p62))
        return modelError(nodeId, fmt::format("Resize scale {} of axis {} (size {}) is not a positive size factor",
                                              scales[a], a, shape[a]));
      outShape[a] = sizes.empty() ? static_cast<std::int64_t>(std::floor(shape[a] * scales[a])) : sizes[a];
      if (outShape[a] > 0 && shape[a] == 0)
        return modelError(nodeId, fmt::format("Resize of the empty axis {} to size {}", a, outShape[a]));
      const double scale = sizes.empty() ? scales[a] : static_cast<double>(outShape[a]) / shape[a];
      if (outShape[a] != shape[a] || scale != 1.0) axes.push_back(a);
    }
    if (!ir::boundedElements(outShape, ir::dtypeBytes(graph_.tensor(*x).dtype)))
      return modelError(nodeId, fmt::format("Resize result [{}] has a negative dimension or holds more than 2^48 bytes",
                                            fmt::join(outShape, ", ")));
    if (axes.empty()) return alias(node, *x);
    TensorId cur = *x;
    for (size_t k = 0; k < axes.size(); ++k) {
      const std::int64_t a = axes[k], in = shape[a], out = outShape[a];
      const double scale = sizes.empty() ? scales[a] : static_cast<double>(out) / in;
      const std::string outName = k + 1 == axes.size() ? node.output(0) : "";
      auto source = [&](std::int64_t i) {
        if (transform == "align_corners") return out == 1 ? 0.0 : i * static_cast<double>(in - 1) / (out - 1);
        if (transform == "asymmetric") return i / scale;
        if (transform == "tf_half_pixel_for_nn") return (i + 0.5) / scale;
        if (transform == "pytorch_half_pixel" && out == 1) return 0.0;
        return (i + 0.5) / scale - 0.5;  // half_pixel, pytorch_half_pixel
      };
      // Per tap: the source index of every output index and its weight (linear 2 taps, cubic 4).
      const size_t taps = mode == "cubic" ? 4 : 2;
      std::vector<std::vector<double>> index(taps), weight(taps);
      std::vector<double>& low = index[0];
      for (std::int64_t i = 0; i < out; ++i) {
        const double s = source(i);
        if (mode == "nearest") {
          double r;
          if (nearestMode == "floor") r = std::floor(s);
          else if (nearestMode == "ceil") r = std::ceil(s);
          else if (s - std::floor(s) == 0.5) r = nearestMode == "round_prefer_ceil" ? std::ceil(s) : std::floor(s);
          else r = std::round(s);
          low.push_back(static_cast<double>(std::clamp<std::int64_t>(static_cast<std::int64_t>(r), 0, in - 1)));
          continue;
        }
        if (mode == "cubic") {
          // Keys' cubic convolution over taps floor(s) - 1 .. floor(s) + 2, the indices clamped to the
          // edge; exclude_outside drops the taps outside the input and renormalises the rest.
          const double f = std::floor(s), r = s - f, A = cubicA;
          const double w[4] = {((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A,
                               ((A + 2) * r - (A + 3)) * r * r + 1,
                               ((A + 2) * (1 - r) - (A + 3)) * (1 - r) * (1 - r) + 1,
                               ((A * (2 - r) - 5 * A) * (2 - r) + 8 * A) * (2 - r) - 4 * A};
          double total = 0.0;
          for (size_t t = 0; t < 4; ++t) {
            const auto j = static_cast<std::int64_t>(f) - 1 + static_cast<std::int64_t>(t);
            const bool outside = j < 0 || j >= in;
            index[t].push_back(static_cast<double>(std::clamp<std::int64_t>(j, 0, in - 1)));
            weight[t].push_back(excludeOutside && outside ? 0.0 : w[t]);
            total += weight[t].back();
          }
          if (excludeOutside && total != 0.0)
            for (size_t t = 0; t < 4; ++t) weight[t].back() /= total;
          continue;
        }
        const double c = std::clamp(s, 0.0, static_cast<double>(in - 1));
        const auto i0 = static_cast<std::int64_t>(std::floor(c));
        index[0].push_back(static_cast<double>(i0));
        index[1].push_back(static_cast<double>(std::min(i0 + 1, in - 1)));
        weight[1].push_back(c - static_cast<double>(i0));
        weight[0].push_back(1.0 - weight[1].back());
      }
      auto gather = [&](std::vector<double> index, const char* what, const std::string& name) {
        const TensorId indices = constant(fmt::format("{}/{}{}", nodeId, what, a), {out}, DType::kI32, std::move(index));
        return emit(node, OpKind::kGather, fmt::format("{}/{}{}", nodeId, what, a), {cur, indices}, {{"axis", a}},
                    layer, name);
      };
      if (mode == "nearest") {
        auto picked = gather(low, "nearest", outName);
        if (!picked) return picked.error();
        cur = *picked;
        continue;
      }
      Shape weightShape(static_cast<size_t>(rank), 1);
      weightShape[a] = out;
      auto weighted = [&](std::vector<double> index, std::vector<double> weights, const char* what) -> Expected<TensorId> {
        auto taken = gather(std::move(index), what, "");
        if (!taken) return taken;
        const TensorId w = constant(fmt::format("{}/{}_weight{}", nodeId, what, a), weightShape, type, std::move(weights));
        return emit(node, OpKind::kMul, fmt::format("{}/{}_weighted{}", nodeId, what, a), {*taken, w}, {}, layer);
      };
      static const char* const kTapNames[2][4] = {{"low", "high"}, {"tap0", "tap1", "tap2", "tap3"}};
      const bool cubic = mode == "cubic";
      auto sum = weighted(index[0], weight[0], kTapNames[cubic][0]);
      for (size_t t = 1; t < taps && sum; ++t) {
        auto next = weighted(index[t], weight[t], kTapNames[cubic][t]);
        if (!next) return next.error();
        sum = emit(node, OpKind::kAdd, fmt::format("{}/{}{}{}", nodeId, mode, a, t + 1 == taps ? "" : fmt::format("_{}", t)),
                   {*sum, *next}, {}, layer, t + 1 == taps ? outName : "");
      }
      if (!sum) return sum.error();
      cur = *sum;
    }
    return {};
  }

  // A window over one spatial dimension [N, C, L] as the 2-D window over [N, C, 1, L] between two
  // Reshapes (kernel [1, k], strides [1, s], dilations [1, d], pads [0, begin, 0, end]); a
  // convolution's weight initializer [M, C, k] takes the shape [M, C, 1, k], the same elements.
  Status windowOverOneDimension(const onnx::NodeProto& node, const std::string& nodeId, OpKind kind,
                                std::vector<TensorId> inputs, ir::Attrs attrs, int layer) {
    const ir::Op view{kind, "", {}, {}, attrs, 0};
    const Shape kernel = view.intsAttr("kernel_shape"), strides = view.intsAttr("strides", {1});
    const Shape dilations = view.intsAttr("dilations", {1}), pads = view.intsAttr("pads", {0, 0});
    if (kernel.size() != 1 || strides.size() != 1 || dilations.size() != 1 || pads.size() != 2)
      return unsupported(node, nodeId, "kernel_shape, strides, dilations and pads must match one spatial dimension");
    attrs["kernel_shape"] = Shape{1, kernel[0]};
    attrs["strides"] = Shape{1, strides[0]};
    attrs["dilations"] = Shape{1, dilations[0]};
    attrs["pads"] = Shape{0, pads[0], 0, pads[1]};
    if (kind == OpKind::kConv) {
      const ir::Tensor& w = graph_.tensor(inputs[1]);
      if (w.producer >= 0 || !w.users.empty() || w.shape.size() != 3)
        return unsupported(node, nodeId, "a 1-D convolution's weight must be an initializer no other node reads");
      graph_.setLeafShape(inputs[1], Shape{w.shape[0], w.shape[1], 1, w.shape[2]});
    }
    const Shape x = graph_.tensor(inputs[0]).shape;
    auto planar = graph_.addMultiOp(OpKind::kReshape, nodeId + "/2d", {inputs[0]}, {{"shape", Shape{x[0], x[1], 1, x[2]}}},
                                    layer, {""});
    if (!planar) return withOp(planar.error(), node);
    inputs[0] = planar->front();
    auto window = graph_.addMultiOp(kind, nodeId, inputs, std::move(attrs), layer, {""});
    if (!window) return withOp(window.error(), node);
    const Shape y = graph_.tensor(window->front()).shape;
    auto out = graph_.addMultiOp(OpKind::kReshape, nodeId + "/1d", {window->front()}, {{"shape", Shape{y[0], y[1], y[3]}}},
                                 layer, {node.output(0)});
    if (!out) return withOp(out.error(), node);
    byName_[node.output(0)] = out->front();
    return {};
  }

  // An average pool whose divisor varies with the position: padding that does not count, or
  // ceil_mode's windows past the end (ONNX divides by the taps inside the padded input).
  static bool averageNeedsPositionDivisors(const ir::Attrs& attrs) {
    const ir::Op view{OpKind::kAveragePool, "", {}, {}, attrs, 0};
    const Shape pads = view.intsAttr("pads", {});
    const bool padded = std::any_of(pads.begin(), pads.end(), [](std::int64_t p) { return p != 0; });
    return view.intAttr("ceil_mode", 0) != 0 || (padded && view.intAttr("count_include_pad", 0) == 0);
  }

  // ScatterND with constant indices and computed data or updates, as data movement the chip has: data and
  // updates as rows ([M, S] and [U, S], S the elements below the index depth), then per output row a Gather
  // of the row that ends there. Without a reduction that is data's row or the last update to it, taken
  // from Concat(data, updates); with one, layer j gathers each row's j-th update (or a row of the
  // reduction's identity) and combines it into data.
  Status scatterByGather(const onnx::NodeProto& node, const std::string& nodeId, const std::vector<TensorId>& inputs,
                         const ir::Attrs& attrs, int layer) {
    auto types = ir::inferTypes(graph_, OpKind::kScatterND, nodeId, inputs, attrs);
    if (!types) return withOp(types.error(), node);
    const auto& indices = graph_.tensor(inputs[1]);
    if (!indices.data)
      return unsupported(node, nodeId, "indices computed at run time are not supported (they must be constants)");
    const Shape data = graph_.tensor(inputs[0]).shape;
    const DType dtype = graph_.tensor(inputs[0]).dtype;
    const auto depth = static_cast<size_t>(indices.shape.back());
    std::int64_t rows = 1, row = 1;
    for (size_t a = 0; a < data.size(); ++a) (a < depth ? rows : row) *= data[a];
    const std::int64_t updates = depth == 0 ? 0 : indices.elements() / static_cast<std::int64_t>(depth);
    // hits[m]: the updates that land on row m, in order.
    std::vector<std::vector<std::int64_t>> hits(static_cast<size_t>(rows));
    for (std::int64_t u = 0; u < updates; ++u) {
      std::int64_t target = 0;
      for (size_t a = 0; a < depth; ++a) {
        auto k = static_cast<std::int64_t>((*indices.data)[u * static_cast<std::int64_t>(depth) + static_cast<std::int64_t>(a)]);
        if (k < 0) k += data[a];
        if (k < 0 || k >= data[a])
          return unsupported(node, nodeId, fmt::format("index {} of axis {} is out of range [0, {})", k, a, data[a]));
        target = target * data[a] + k;
      }
      hits[static_cast<size_t>(target)].push_back(u);
    }
    auto reshape = [&](const std::string& name, TensorId x, Shape shape, const std::string& outName = "") {
      return emit(node, OpKind::kReshape, nodeId + name, {x}, {{"shape", std::move(shape)}}, layer, outName);
    };
    auto data2 = reshape("/data_rows", inputs[0], {rows, row});
    if (!data2) return data2.error();
    auto updates2 = reshape("/update_rows", inputs[2], {updates, row});
    if (!updates2) return updates2.error();
    const std::string reduction = ir::Op{OpKind::kScatterND, "", {}, {}, attrs, 0}.stringAttr("reduction", "none");
    auto gatherRows = [&](const std::string& name, TensorId source, std::vector<double> index) {
      const TensorId at = constant(nodeId + name + "_index", {rows}, DType::kI32, std::move(index));
      return emit(node, OpKind::kGather, nodeId + name, {source, at}, {{"axis", std::int64_t{0}}}, layer);
    };
    Expected<TensorId> result = *data2;
    if (reduction == "none") {
      auto source = emit(node, OpKind::kConcat, nodeId + "/rows", {*data2, *updates2}, {{"axis", std::int64_t{0}}}, layer);
      if (!source) return source.error();
      std::vector<double> index(static_cast<size_t>(rows));
      for (std::int64_t m = 0; m < rows; ++m)
        index[m] = static_cast<double>(hits[m].empty() ? m : rows + hits[m].back());
      result = gatherRows("/gather", *source, std::move(index));
    } else {
      const double identity = reduction == "add" ? 0.0 : reduction == "mul" ? 1.0
                              : reduction == "max" ? -std::numeric_limits<double>::infinity()
                                                   : std::numeric_limits<double>::infinity();
      const OpKind combine = reduction == "add" ? OpKind::kAdd : reduction == "mul" ? OpKind::kMul
                             : reduction == "max" ? OpKind::kMax : OpKind::kMin;
      const TensorId pad = constant(nodeId + "/identity_row", {1, row}, dtype,
                                    std::vector<double>(static_cast<size_t>(row), identity));
      auto source = emit(node, OpKind::kConcat, nodeId + "/rows", {*updates2, pad}, {{"axis", std::int64_t{0}}}, layer);
      if (!source) return source.error();
      size_t layers = 0;
      for (const auto& h : hits) layers = std::max(layers, h.size());
      for (size_t j = 0; j < layers && result; ++j) {
        std::vector<double> index(static_cast<size_t>(rows));
        for (std::int64_t m = 0; m < rows; ++m)
          index[m] = static_cast<double>(j < hits[m].size() ? hits[m][j] : updates);
        auto gathered = gatherRows(fmt::format("/gather{}", j), *source, std::move(index));
        if (!gathered) return gathered.error();
        result = emit(node, combine, fmt::format("{}/combine{}", nodeId, j), {*result, *gathered}, {}, layer);
      }
    }
    if (!result) return result.error();
    return statusOf(reshape("", *result, data, node.output(0)));
  }

  // Such a pool as the pool over the kernel's size on zeros padded to ceil_mode's extent (which the
  // chip computes), times a constant [1, C, Ho, Wo] of kernel size / divisor at each position: the
  // ratio of the two pools' results on ones.
  Status averagePoolByPosition(const onnx::NodeProto& node, const std::string& nodeId, TensorId in, ir::Attrs attrs,
                               int layer) {
    const Shape x = graph_.tensor(in).shape;
    auto outType = ir::inferTypes(graph_, OpKind::kAveragePool, nodeId, {in}, attrs);
    if (!outType) return withOp(outType.error(), node);
    const Shape y = outType->front().shape;
    ir::Attrs whole = attrs;
    const ir::Op view{OpKind::kAveragePool, "", {}, {}, attrs, 0};
    const Shape kernel = view.intsAttr("kernel_shape"), strides = view.intsAttr("strides", {1, 1});
    const Shape dilations = view.intsAttr("dilations", {1, 1});
    Shape pads = view.intsAttr("pads", {0, 0, 0, 0});
    for (size_t i = 0; i < 2; ++i) {
      const std::int64_t reach = (y[2 + i] - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1;
      pads[2 + i] = std::max(pads[2 + i], reach - x[2 + i] - pads[i]);
    }
    whole["pads"] = pads;
    whole["ceil_mode"] = std::int64_t{0};
    whole["count_include_pad"] = std::int64_t{1};
    // The divisor ratio on one plane of ones.
    const ir::Value ones{DType::kF32, {1, 1, x[2], x[3]}, std::vector<double>(static_cast<size_t>(x[2] * x[3]), 1.0)};
    const std::vector<ir::TensorType> planeType{{{1, 1, y[2], y[3]}, DType::kF32}};
    auto byModel = ir::evaluateOp(OpKind::kAveragePool, nodeId, attrs, {&ones}, planeType);
    auto byKernel = ir::evaluateOp(OpKind::kAveragePool, nodeId, whole, {&ones}, planeType);
    if (!byModel) return withOp(byModel.error(), node);
    if (!byKernel) return withOp(byKernel.error(), node);
    ir::Value scale{DType::kF32, {1, x[1], y[2], y[3]}, {}};
    for (std::int64_t c = 0; c < x[1]; ++c)
      for (size_t i = 0; i < byModel->front().data.size(); ++i) {
        const double k = byKernel->front().data[i];
        scale.data.push_back(k > 0 ? byModel->front().data[i] / k : 0.0);
      }
    auto pooled = graph_.addMultiOp(OpKind::kAveragePool, nodeId, {in}, std::move(whole), layer, {""});
    if (!pooled) return withOp(pooled.error(), node);
    const DType type = graph_.tensor(pooled->front()).dtype;
    const TensorId divisors = graph_.addConstant(nodeId + "/divisors", scale.shape, type,
                                                 std::move(scale.data));
    auto out = graph_.addMultiOp(OpKind::kMul, nodeId + "/by_position", {pooled->front(), divisors}, {}, layer,
                                 {node.output(0)});
    if (!out) return withOp(out.error(), node);
    byName_[node.output(0)] = out->front();
    return {};
  }

  // Softmax before opset 13: the input as a matrix [d0 x ... x d(axis-1), d(axis) x ... x dn]
  // (axis 1 by default), normalised over its rows; one IR Softmax over the last axis when the
  // rows are the last axis, else between two Reshapes.
  Status softmaxOverFlattened(const onnx::NodeProto& node, const std::string& nodeId, ir::Attrs attrs, int layer) {
    if (node.input_size() != 1 || node.output_size() != 1) return unsupported(node, nodeId, "takes 1 input and 1 output");
    auto in = lookup(node.input(0));
    if (!in) return unsupported(node, nodeId, fmt::format("input '{}' is not defined", node.input(0)));
    const Shape shape = graph_.tensor(*in).shape;
    const auto rank = static_cast<std::int64_t>(shape.size());
    std::int64_t axis = ir::Op{OpKind::kSoftmax, "", {}, {}, attrs, 0}.intAttr("axis", 1);
    if (axis < 0) axis += rank;
    if (rank == 0 || axis < 0 || axis >= rank)
      return unsupported(node, nodeId, fmt::format("axis {} is out of range for rank {}", axis, rank));
    auto add = [&](OpKind kind, const std::string& suffix, TensorId x, ir::Attrs a,
                   const std::string& outName) -> Expected<TensorId> {
      auto outs = graph_.addMultiOp(kind, nodeId + suffix, {x}, std::move(a), layer, {outName});
      if (!outs) return withOp(outs.error(), node);
      return outs->front();
    };
    Expected<TensorId> out = *in;
    if (axis == rank - 1) {
      out = add(OpKind::kSoftmax, "", *in, {{"axis", std::int64_t{-1}}}, node.output(0));
    } else {
      std::int64_t rows = 1, columns = 1;
      for (std::int64_t d = 0; d < rank; ++d) (d < axis ? rows : columns) *= shape[d];
      auto matrix = add(OpKind::kReshape, "/rows", *in, {{"shape", Shape{rows, columns}}}, "");
      if (!matrix) return matrix.error();
      auto normalised = add(OpKind::kSoftmax, "", *matrix, {{"axis", std::int64_t{-1}}}, "");
      if (!normalised) return normalised.error();
      out = add(OpKind::kReshape, "/shape", *normalised, {{"shape", shape}}, node.output(0));
    }
    if (!out) return out.error();
    byName_[node.output(0)] = *out;
    return {};
  }

  // LayerNormalization's optional Mean and InvStdDev outputs, built from primitive ops.
  Status layerNormStatistics(const onnx::NodeProto& node, const std::string& nodeId, const std::vector<TensorId>& inputs,
                             const ir::Attrs& attrs, int layer) {
    const bool wantMean = node.output_size() > 1 && !node.output(1).empty();
    const bool wantInv = node.output_size() > 2 && !node.output(2).empty();
    if (!wantMean && !wantInv) return {};
    const ir::Op op{OpKind::kLayerNormalization, "", {}, {}, attrs, 0};
    const auto& shape = graph_.tensor(inputs[0]).shape;
    const auto rank = static_cast<std::int64_t>(shape.size());
    std::int64_t axis = op.intAttr("axis", -1);
    if (axis < 0) axis += rank;
    std::vector<std::int64_t> axes;
    for (std::int64_t a = axis; a < rank; ++a) axes.push_back(a);
    const DType statType = DType::kF32;
    auto step = [&](OpKind kind, const std::string& suffix, std::vector<TensorId> ins, ir::Attrs a,
                    const std::string& outName = "") -> Expected<TensorId> {
      auto outs = graph_.addMultiOp(kind, nodeId + suffix, std::move(ins), std::move(a), layer, {outName});
      if (!outs) return withOp(outs.error(), node);
      return outs->front();
    };
    auto mean = step(OpKind::kReduceMean, "/mean", {inputs[0]}, {{"axes", axes}, {"keepdims", std::int64_t{1}}},
                     wantMean ? node.output(1) : "");
    if (!mean) return mean.error();
    if (wantMean) byName_[node.output(1)] = *mean;
    if (!wantInv) return {};
    auto centered = step(OpKind::kSub, "/centered", {inputs[0], *mean}, {});
    if (!centered) return centered.error();
    auto squared = step(OpKind::kMul, "/squared", {*centered, *centered}, {});
    if (!squared) return squared.error();
    auto var = step(OpKind::kReduceMean, "/var", {*squared}, {{"axes", axes}, {"keepdims", std::int64_t{1}}});
    if (!var) return var.error();
    const TensorId eps = graph_.addConstant(nodeId + "/epsilon", {}, statType,
                                            std::vector<double>{op.floatAttr("epsilon", 1e-5)});
    const TensorId one = graph_.addConstant(nodeId + "/one", {}, statType, std::vector<double>{1.0});
    auto sum = step(OpKind::kAdd, "/var_eps", {*var, eps}, {});
    if (!sum) return sum.error();
    auto root = step(OpKind::kSqrt, "/std", {*sum}, {});
    if (!root) return root.error();
    auto inv = step(OpKind::kDiv, "/inv_std", {one, *root}, {}, node.output(2));
    if (!inv) return inv.error();
    byName_[node.output(2)] = *inv;
    return {};
  }

  // Conv and pools: explicit kernel_shape, strides, dilations and pads; auto_pad resolved.
  Status normalizeWindow(const onnx::NodeProto& node, const std::string& nodeId, OpKind kind, ir::Attrs& attrs) {
    auto in = lookup(node.input(0));
    if (!in) return unsupported(node, nodeId, fmt::format("input '{}' is not defined", node.input(0)));
    const auto& x = graph_.tensor(*in).shape;
    if (x.size() < 3) return unsupported(node, nodeId, "needs an input [N,C,spatial...]");
    const size_t spatial = x.size() - 2;
    const ir::Op view{kind, "", {}, {}, attrs, 0};
    Shape kernel = view.intsAttr("kernel_shape");
    if (kind == OpKind::kConv && kernel.empty()) {
      auto w = lookup(node.input(1));
      if (!w) return unsupported(node, nodeId, "weight is not defined");
      const auto& ws = graph_.tensor(*w).shape;
      if (ws.size() == x.size()) kernel.assign(ws.begin() + 2, ws.end());
    }
    if (kernel.size() != spatial) return unsupported(node, nodeId, "kernel_shape does not match the input's rank");
    const Shape strides = view.intsAttr("strides", Shape(spatial, 1));
    const Shape dilations = view.intsAttr("dilations", Shape(spatial, 1));
    const std::string autoPad = view.stringAttr("auto_pad", "NOTSET");
    if (autoPad != "NOTSET") {
      if (strides.size() != spatial || dilations.size() != spatial)
        return unsupported(node, nodeId, "strides and dilations must match the spatial rank");
      for (size_t i = 0; i < spatial; ++i)
        if (strides[i] < 1 || dilations[i] < 1 || kernel[i] < 1)
          return unsupported(node, nodeId, "kernel_shape, strides and dilations must be >= 1");
      attrs["pads"] = resolveAutoPad(autoPad, Shape(x.begin() + 2, x.end()), kernel, strides, dilations);
    }
    attrs.erase("auto_pad");
    attrs["kernel_shape"] = kernel;
    return {};
  }

  Status addConstantNode(const onnx::NodeProto& node, const std::string& nodeId) {
    if (node.attribute_size() != 1) return unsupported(node, nodeId, "needs exactly one value attribute");
    const auto& a = node.attribute(0);
    ir::Value v;
    if (a.name() == "value") {
      auto dtype = dtypeOf(a.t().data_type());
      if (!dtype)
        return unsupported(node, nodeId, fmt::format("constant type {} is not supported", onnxTypeName(a.t().data_type())));
      auto data = tensorValues(a.t(), dir_, true, nodeId);
      if (!data) return data.error();
      if (!*data) return unsupported(node, nodeId, "external constant data is missing");
      v = ir::Value{*dtype, Shape(a.t().dims().begin(), a.t().dims().end()), **data};
    } else if (a.name() == "value_float") {
      v = ir::Value{DType::kF32, {}, {a.f()}};
    } else if (a.name() == "value_floats") {
      v = ir::Value{DType::kF32, {a.floats_size()}, std::vector<double>(a.floats().begin(), a.floats().end())};
    } else if (a.name() == "value_int") {
      v = ir::Value{DType::kI64, {}, {static_cast<double>(a.i())}};
    } else if (a.name() == "value_ints") {
      v = ir::Value{DType::kI64, {a.ints_size()}, {}};
      for (auto i : a.ints()) v.data.push_back(static_cast<double>(i));
    } else {
      return unsupported(node, nodeId, fmt::format("attribute '{}' is not supported", a.name()));
    }
    return addConstantTensor(node.output(0), v);
  }

  Diagnostic withOp(Diagnostic d, const onnx::NodeProto& node) const {
    const std::string prefix = fmt::format("{} (opset {}): ", node.op_type(), opset_);
    if (d.message.rfind(prefix, 0) != 0) d.message = prefix + d.message;
    return d;
  }

  const onnx::ModelProto& model_;
  const std::vector<std::optional<std::string_view>>& raw_;
  std::shared_ptr<const MappedFile> mapping_;
  std::filesystem::path dir_;
  std::string file_;
  const ImportOptions& options_;
  ir::Graph graph_;
  int opset_ = 0;
  int nodeIndex_ = 0;
  std::set<std::string> initializers_;
  std::unordered_map<std::string, TensorId> byName_;
  std::vector<int> layer_;
};

}  // namespace

// True when the model imports an ONNX opset below kMinOpset.
bool needsUpgrade(const onnx::ModelProto& model) {
  for (const auto& opset : model.opset_import())
    if ((opset.domain().empty() || opset.domain() == "ai.onnx") && opset.version() < kMinOpset) return true;
  return false;
}

// ONNX's version converter takes every name as defined (it dereferences the value a name stands
// for): every node input and graph output must be a graph input, an initializer or an earlier
// node's output before it runs.
Status checkNamesDefined(const onnx::GraphProto& graph, const std::string& path) {
  std::set<std::string> known;
  for (const auto& in : graph.input()) known.insert(in.name());
  for (const auto& init : graph.initializer()) known.insert(init.name());
  for (const auto& node : graph.node()) {
    for (const auto& in : node.input())
      if (!in.empty() && !known.count(in))
        return modelError(node.name().empty() ? path : node.name(),
                          fmt::format("input '{}' is not a graph input, an initializer or an earlier node's output", in));
    for (const auto& out : node.output()) known.insert(out);
  }
  for (const auto& out : graph.output())
    if (!known.count(out.name())) return modelError(path, fmt::format("graph output '{}' is produced by no node", out.name()));
  return {};
}

// A model below kMinOpset upgraded by ONNX's own version converter (every op's adapter chain).
Status upgradeOpset(onnx::ModelProto& model, const std::string& path) {
  for (const auto& opset : model.opset_import()) {
    if (!opset.domain().empty() && opset.domain() != "ai.onnx") continue;
    if (opset.version() >= kMinOpset) return {};
    const auto from = opset.version();
    if (auto s = checkNamesDefined(model.graph(), path); !s) return s;
    // The converter's adapters read the inputs and outputs an op's schema promises: a node with
    // fewer (or more) is refused before it runs.
    int index = 0;
    for (const auto& node : model.graph().node()) {
      const auto* schema = onnx::OpSchemaRegistry::Schema(node.op_type(), static_cast<int>(from), node.domain());
      const std::string name = node.name().empty() ? fmt::format("{} #{}", node.op_type(), index) : node.name();
      ++index;
      if (!schema) continue;  // an op the opset does not define: the converter says so
      if (node.input_size() < schema->min_input() || node.input_size() > schema->max_input() ||
          node.output_size() < schema->min_output() || node.output_size() > schema->max_output())
        return modelError(name, fmt::format("{} at opset {} takes {} to {} inputs and {} to {} outputs, got {} and {}",
                                            node.op_type(), from, schema->min_input(), schema->max_input(),
                                            schema->min_output(), schema->max_output(), node.input_size(),
                                            node.output_size()));
    }
    try {
      model = onnx::version_conversion::ConvertVersion(model, kMinOpset);
    } catch (const std::exception& e) {
      return modelError(path, fmt::format("opset {} could not be upgraded to opset {} by ONNX's version converter: {}",
                                          from, kMinOpset, e.what()));
    }
    return {};
  }
  return {};
}

Expected<ir::Graph> importOnnx(const std::string& path, const ImportOptions& options) {
  auto file = readOnnxFile(path);
  if (!file) return file.error();
  if (needsUpgrade(file->model)) {
    // The version converter rewrites the whole model, initializers' values included: it gets them all.
    if (!file->model.ParseFromArray(file->mapping->bytes().data(), static_cast<int>(file->mapping->bytes().size())))
      return modelError(path, "not a valid ONNX model (the protobuf does not parse or has no graph)");
    if (auto s = upgradeOpset(file->model, path); !s) return s.error();
    file->initializerRaw.assign(static_cast<size_t>(file->model.graph().initializer_size()), std::nullopt);
  }
  const auto dir = std::filesystem::path(path).parent_path();
  return Importer(*file, dir, path, options).run();
}

Expected<std::vector<std::string>> onnxInputNames(const std::string& path) {
  auto file = readOnnxFile(path);
  if (!file) return file.error();
  std::set<std::string> initializers;
  for (const auto& init : file->model.graph().initializer()) initializers.insert(init.name());
  std::vector<std::string> names;
  for (const auto& input : file->model.graph().input())
    if (!initializers.count(input.name())) names.push_back(input.name());
  return names;
}

namespace {

// A tensor file mapped and parsed, with its element type (errors name the file).
Expected<std::pair<TensorFile, DType>> openTensorFile(const std::string& path, bool bf16Bits) {
  if (existsButNotRegular(path)) return modelError(path, "the tensor file is not a regular file");
  auto file = readTensorFile(path);
  if (!file) return file.error();
  onnx::TensorProto& t = file->tensor;
  // The ONNX backend tests store bfloat16 values as their bits in a UINT16 tensor (numpy has no bfloat16).
  if (t.data_type() == onnx::TensorProto::UINT16 && bf16Bits) t.set_data_type(onnx::TensorProto::BFLOAT16);
  auto dtype = dtypeOf(t.data_type());
  if (!dtype) return modelError(path, fmt::format("tensor type {} is not supported", onnxTypeName(t.data_type())));
  return std::make_pair(std::move(*file), *dtype);
}

}  // namespace

Expected<TensorFileBlocks> readTensorProtoBlocks(const std::string& path, bool bf16Bits) {
  auto opened = openTensorFile(path, bf16Bits);
  if (!opened) return opened.error();
  auto& [file, dtype] = *opened;
  const onnx::TensorProto& t = file.tensor;
  const auto n = elementsOf(t, path);
  if (!n) return n.error();
  if (auto s = checkInlineSize(t, *n, path, file.raw); !s) return s.error();
  TensorFileBlocks blocks{dtype, Shape(t.dims().begin(), t.dims().end()), *n, nullptr};
  if (!file.raw || t.data_location() == onnx::TensorProto::EXTERNAL) return blocks;
  blocks.read = [mapping = file.mapping, raw = *file.raw, type = dtype](std::int64_t first, std::int64_t count,
                                                                         double* out) {
    const auto width = static_cast<std::size_t>(ir::dtypeBytes(type));
    for (std::int64_t i = 0; i < count; ++i)
      out[i] = rawElement(raw.data() + static_cast<std::size_t>(first + i) * width, type);
    mapping->release(raw.substr(static_cast<std::size_t>(first) * width, static_cast<std::size_t>(count) * width));
  };
  return blocks;
}

Expected<TensorFileValues> readTensorProtoValues(const std::string& path, bool bf16Bits) {
  auto opened = openTensorFile(path, bf16Bits);
  if (!opened) return opened.error();
  auto& [file, dtype] = *opened;
  onnx::TensorProto& t = file.tensor;
  auto data = tensorValues(t, std::filesystem::path(path).parent_path(), true, path, file.raw, std::nullopt,
                           file.mapping.get());
  if (!data) return data.error();
  if (!*data) return modelError(path, "external tensor data is missing");
  return TensorFileValues{dtype, Shape(t.dims().begin(), t.dims().end()), std::move(*data)};
}

Expected<ir::Value> readTensorProtoFile(const std::string& path, bool bf16Bits) {
  auto file = readTensorProtoValues(path, bf16Bits);
  if (!file) return file.error();
  return ir::Value{file->dtype, std::move(file->shape), file->data->values()};
}

}  // namespace tsp::frontend
