// Functional runs: seeded or file-given values for the resident tensors, the reference outputs, the final check.
#include "runtime/functional_run.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "compile/frontend/onnx_importer.h"
#include "compile/ir/interpreter.h"
#include "compile/ir/op_table.h"
#include "compile/lower/lowering.h"
#include "sim/functional_state.h"

namespace tsp::runtime {

namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t nameHash(const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Deterministic values from (seed, tensor name, element), exact in the storage type: FP16 values
// k/64 (|k| <= 64) scaled by a power of two near 1/sqrt(fan-in) for matrices, so that sums stay in
// range layer after layer; INT8 values in [-3, 3].
std::vector<double> seededValues(std::uint64_t seed, const ir::Tensor& t, std::int64_t indexRange = 0) {
  std::vector<double> out(static_cast<size_t>(t.elements()));
  const std::uint64_t base = mix(seed ^ nameHash(t.name));
  if (indexRange > 0) {  // Gather indices: rows of the table, in [0, indexRange)
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(mix(base + i) % static_cast<std::uint64_t>(indexRange));
    return out;
  }
  double scale = 1.0;
  if (t.shape.size() >= 2) scale = std::ldexp(1.0, -static_cast<int>(std::lround(0.5 * std::log2(static_cast<double>(std::max<std::int64_t>(1, t.shape[t.shape.size() - 2]))))));
  for (size_t i = 0; i < out.size(); ++i) {
    const std::uint64_t h = mix(base + i);
    out[i] = ir::isFloat(t.dtype) ? static_cast<double>(static_cast<std::int64_t>(h % 129) - 64) / 64.0 * scale
                                  : static_cast<double>(static_cast<std::int64_t>(h % 7) - 3);
  }
  return out;
}

// An INT32 or INT64 graph input or constant that only Gathers read, as their indices: stored on
// chip in its own type (no ALU op computes one).
bool indexTensor(const ir::Graph& graph, const std::string& name) {
  const auto id = graph.findTensor(name);
  if (!id) return false;
  const ir::Tensor& t = graph.tensor(*id);
  if ((t.dtype != ir::DType::kI32 && t.dtype != ir::DType::kI64) || t.users.empty() || t.producer >= 0) return false;
  return std::all_of(t.users.begin(), t.users.end(), [&](ir::OpId u) {
    const ir::Op& op = graph.op(u);
    return op.kind == ir::OpKind::kGather && op.inputs.size() > 1 && op.inputs[1] == *id && op.inputs[0] != *id;
  });
}

// The rows of the table axis a Gather's indices select (0: not Gather indices).
std::int64_t indexRange(const ir::Graph& graph, ir::TensorId id) {
  if (!indexTensor(graph, graph.tensor(id).name)) return 0;
  std::int64_t range = 0;
  for (ir::OpId u : graph.tensor(id).users) {
    const ir::Op& op = graph.op(u);
    const auto& shape = graph.tensor(op.inputs[0]).shape;
    std::int64_t axis = op.intAttr("axis", 0);
    if (axis < 0) axis += static_cast<std::int64_t>(shape.size());
    const std::int64_t n = shape.at(static_cast<size_t>(axis));
    range = range == 0 ? n : std::min(range, n);
  }
  return range;
}

std::int64_t lastDim(const ir::Tensor& t) { return t.shape.empty() ? 1 : std::max<std::int64_t>(1, t.shape.back()); }

// The values per storage row of a tensor in the lowering's storage order (storageOrder's rows).
std::int64_t storedCols(const topology::ChipSpec& chip, const ir::Graph& graph, const std::vector<bool>& channelsLast,
                        ir::TensorId id) {
  const ir::Tensor& t = graph.tensor(id);
  if (!channelsLast[static_cast<size_t>(id)] || t.shape.size() != 4) return lastDim(t);
  for (ir::OpId u : t.users) {
    const ir::Op& op = graph.op(u);
    if (op.kind == ir::OpKind::kConv && op.inputs.size() >= 2 && op.inputs[1] == id) return t.shape[0];
  }
  if (const ir::Op* conv = lower::gatheringConv(chip, graph, id)) {
    const auto& w = graph.tensor(conv->inputs[1]).shape;
    return w[1] * w[2] * w[3];
  }
  return t.shape[1];
}

// Elements of an output read from its chip at a time by the final check.
constexpr std::int64_t kCheckBlockElements = std::int64_t{1} << 16;

// Whether storageOrder reorders a tensor's values (a channels-last 4-D tensor) or keeps them row-major in its shape.
bool reorderedInStorage(const ir::Graph& graph, const std::vector<bool>& channelsLast, ir::TensorId id) {
  return channelsLast[static_cast<size_t>(id)] && graph.tensor(id).shape.size() == 4;
}

// Where the values of a tensor's storage order come from: storage position i (rows of `cols`)
// holds row-major element source(i), or 0 where source(i) < 0 (a grouped Conv's off-diagonal
// blocks, an im2col tap in the padding); no source: the row-major values as they are.
struct StorageIndex {
  std::int64_t cols = 0;
  std::int64_t stored = 0;  ///< storage positions
  std::function<std::int64_t(std::int64_t)> source;
};

// The storage order of a tensor of `elements` row-major values.
StorageIndex storageIndex(const topology::ChipSpec& chip, const ir::Graph& graph, const std::vector<bool>& channelsLast,
                          ir::TensorId id, std::int64_t elements) {
  const ir::Tensor& t = graph.tensor(id);
  if (!reorderedInStorage(graph, channelsLast, id) || elements != t.elements()) return {lastDim(t), elements, {}};
  const std::int64_t cols = storedCols(chip, graph, channelsLast, id);
  const auto& s = t.shape;
  for (ir::OpId u : t.users) {
    const ir::Op& op = graph.op(u);
    if (op.kind != ir::OpKind::kConv || op.inputs.size() < 2 || op.inputs[1] != id) continue;
    // [Cout, Cin, kh, kw] as kh*kw*Cin rows of Cout: row tap*Cin + ci. A grouped Conv's weights
    // [Cout, Cin / G, kh, kw] block-diagonal: zero where ci and co are in different groups.
    const std::int64_t groups = lower::blockDiagonalGroups(graph, op), cinPerGroup = s[1], cin = groups * s[1];
    const std::int64_t cout = s[0], coutPerGroup = s[0] / groups, taps = s[2] * s[3];
    return {cols, taps * cin * cout, [=](std::int64_t i) -> std::int64_t {
              const std::int64_t co = i % cout, row = i / cout, ci = row % cin, tap = row / cin;
              return ci / cinPerGroup != co / coutPerGroup ? -1 : (co * cinPerGroup + ci % cinPerGroup) * taps + tap;
            }};
  }
  if (const ir::Op* conv = lower::gatheringConv(chip, graph, id)) {
    // im2col: output pixel (n, oy, ox), column tap*Cin + ci; zero where the tap falls in the padding.
    const auto y = graph.tensor(conv->outputs[0]).shape;
    const auto w = graph.tensor(conv->inputs[1]).shape;
    const ir::WindowAttrs window = ir::windowAttrs(*conv, 2, w);
    return {cols, y[0] * y[2] * y[3] * w[2] * w[3] * w[1], [=](std::int64_t i) -> std::int64_t {
              const std::int64_t ci = i % w[1], kx = i / w[1] % w[3], ky = i / (w[1] * w[3]) % w[2];
              const std::int64_t pixel = i / (w[1] * w[3] * w[2]), ox = pixel % y[3], oy = pixel / y[3] % y[2];
              const std::int64_t n = pixel / (y[3] * y[2]);
              const std::int64_t iy = oy * window.strides[0] + ky * window.dilations[0] - window.pads[0];
              const std::int64_t ix = ox * window.strides[1] + kx * window.dilations[1] - window.pads[1];
              return iy >= 0 && iy < s[2] && ix >= 0 && ix < s[3] ? ((n * s[1] + ci) * s[2] + iy) * s[3] + ix : -1;
            }};
  }
  // A feature map [N, C, H, W] channels-last: N*H*W rows of C.
  const std::int64_t c = s[1], hw = s[2] * s[3];
  return {cols, elements, [=](std::int64_t i) { return (i / c / hw * c + i % c) * hw + i / c % hw; }};
}

// A tensor's values (row-major in its shape) in the lowering's storage order; `cols` gets the values per row.
std::vector<double> storageOrder(const topology::ChipSpec& chip, const ir::Graph& graph,
                                 const std::vector<bool>& channelsLast, ir::TensorId id,
                                 const std::vector<double>& data, std::int64_t& cols) {
  const StorageIndex index = storageIndex(chip, graph, channelsLast, id, static_cast<std::int64_t>(data.size()));
  cols = index.cols;
  if (!index.source) return data;
  std::vector<double> out(static_cast<size_t>(index.stored));
  for (std::int64_t i = 0; i < index.stored; ++i)
    if (const std::int64_t from = index.source(i); from >= 0) out[static_cast<size_t>(i)] = data[static_cast<size_t>(from)];
  return out;
}

// The values file of graph input or output `index` (input_N.pb, output_N.pb) read by `read` (exit 1
// when it is missing or holds other than the tensor's elements).
template <typename Read>
auto readPbWith(const std::string& dir, const char* kind, size_t index, const ir::Tensor& tensor, const Read& read)
    -> decltype(read(std::string())) {
  const std::string path = (std::filesystem::path(dir) / fmt::format("{}_{}.pb", kind, index)).string();
  if (!std::filesystem::exists(path))
    return makeError(ExitCode::kConfig, fmt::format("{}: missing: graph {} {} ('{}') has no values file", path,
                                                    kind, index, tensor.name));
  auto value = read(path);
  if (!value) return value.error();
  const std::int64_t elements = value->elements();
  if (elements != tensor.elements())
    return makeError(ExitCode::kConfig, fmt::format("{}: holds {} elements, graph {} '{}' has {}", path, elements,
                                                    kind, tensor.name, tensor.elements()));
  return value;
}

Expected<frontend::TensorFileValues> readPb(const std::string& dir, const char* kind, size_t index,
                                            const ir::Tensor& tensor) {
  return readPbWith(dir, kind, index, tensor, [&](const std::string& path) {
    return frontend::readTensorProtoValues(path, tensor.dtype == ir::DType::kBF16);
  });
}

// The reference interpreter op by op, each result stored as the chip stores a tensor of its type
// (FP16 or BF16 rounding, integer wrap); inside an op it computes in FP32 or exactly, as interpret() does.
Expected<std::vector<ir::Value>> interpretStored(const ir::Graph& graph, const std::vector<ir::Value>& inputs) {
  std::vector<ir::Value> values(graph.tensors().size());
  std::vector<bool> known(graph.tensors().size(), false);
  size_t next = 0;
  for (const auto& list : {graph.inputs(), graph.states()})
    for (ir::TensorId id : list) {
      values[id] = inputs.at(next++);
      known[id] = true;
    }
  // Weights are copied into values when an op first reads them, and every value but the outputs
  // is dropped after its last use, so that at most the live tensors are held twice.
  std::vector<size_t> lastUse(graph.tensors().size(), 0);
  for (size_t i = 0; i < graph.ops().size(); ++i)
    for (ir::TensorId in : graph.op(static_cast<ir::OpId>(i)).inputs) lastUse[in] = i;
  std::vector<bool> isOutput(graph.tensors().size(), false);
  for (ir::TensorId id : graph.outputs()) isOutput[id] = true;
  for (size_t i = 0; i < graph.ops().size(); ++i) {
    const ir::Op& op = graph.op(static_cast<ir::OpId>(i));
    std::vector<const ir::Value*> ins;
    for (ir::TensorId in : op.inputs) {
      if (!known[in]) {
        const ir::Tensor& t = graph.tensor(in);
        if (!t.data) return makeError(ExitCode::kInternal, fmt::format("{}: values were not loaded", t.name));
        values[in] = ir::Value{t.dtype, t.shape, *t.data};
        known[in] = true;
      }
      ins.push_back(&values[in]);
    }
    std::vector<ir::TensorType> types;
    for (ir::TensorId out : op.outputs) types.push_back({graph.tensor(out).shape, graph.tensor(out).dtype});
    auto outs = ir::evaluateOp(op.kind, op.name, op.attrs, ins, types);
    if (!outs) return outs.error();
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      for (double& v : (*outs)[k].data) v = ir::toStorage(v, graph.tensor(op.outputs[k]).dtype);
      values[op.outputs[k]] = std::move((*outs)[k]);
      known[op.outputs[k]] = true;
    }
    for (ir::TensorId in : op.inputs)
      if (lastUse[in] == i && !isOutput[in]) values[in] = ir::Value{};
  }
  std::vector<ir::Value> outputs;
  for (ir::TensorId id : graph.outputs()) {
    if (!known[id]) {  // an output that no op makes: a leaf
      const ir::Tensor& t = graph.tensor(id);
      if (t.data) values[id] = ir::Value{t.dtype, t.shape, *t.data};
    }
    outputs.push_back(values[id]);
  }
  return outputs;
}

// A fold's values from the stored graph values (isa::WeightFold): per channel c, scale =
// gamma / sqrt(var + eps) and shift = beta - mean * scale, integers rounded ties to even for INT8
// (the interpreter's INT8 BatchNormalization) and wrapped; Conv weights [Cout, ...] times scale[co].
// A scale or a shift is made here (one value per channel); folded weights are the source's values
// and a function of (element, value) that the chip applies as it places them, so that no folded
// copy of a weight is held beside the graph's.
struct Folded {
  ir::Data data;                                  // the values, or kWeights: the source's
  std::function<double(std::int64_t, double)> map;  // kWeights: element i's folded value from data[i]
};

Expected<Folded> foldedValues(const isa::WeightFold& fold, const std::map<std::string, ir::Data>& leaves,
                              sim::ElementType element) {
  auto find = [&](const std::string& name) -> ir::Data {
    auto it = leaves.find(name);
    return it == leaves.end() ? nullptr : it->second;
  };
  const ir::Data gamma = find(fold.gamma), beta = find(fold.beta), mean = find(fold.mean), var = find(fold.var);
  const ir::Data source = fold.kind == isa::WeightFold::Kind::kWeights ? find(fold.source) : gamma;
  if (!gamma || !beta || !mean || !var || !source || gamma->empty() || beta->size() != gamma->size() ||
      mean->size() != gamma->size() || var->size() != gamma->size() || source->size() % gamma->size() != 0)
    return makeError(ExitCode::kInternal, fmt::format("functional mode: the fold of '{}' names tensors without matching "
                                                      "values", fold.tensor));
  const bool integer = element == sim::ElementType::kInt8;
  const ir::DType type = integer ? ir::DType::kI8 : ir::DType::kF16;
  const size_t channels = gamma->size();
  std::vector<double> scale(channels), shift(channels);
  for (size_t c = 0; c < channels; ++c) {
    scale[c] = (*gamma)[c] / std::sqrt((*var)[c] + fold.epsilon);
    if (integer) scale[c] = std::nearbyint(scale[c]);
    shift[c] = (*beta)[c] - (*mean)[c] * scale[c];
    if (integer) shift[c] = std::nearbyint(shift[c]);
  }
  if (fold.kind == isa::WeightFold::Kind::kWeights) {
    const auto perChannel = static_cast<std::int64_t>(source->size() / channels);
    return Folded{source, [scale = std::move(scale), perChannel, type](std::int64_t i, double v) {
                    return ir::toStorage(v * scale[static_cast<size_t>(i / perChannel)], type);
                  }};
  }
  std::vector<double> out = fold.kind == isa::WeightFold::Kind::kScale ? std::move(scale) : std::move(shift);
  for (double& v : out) v = ir::toStorage(v, type);
  return Folded{ir::makeData(out), {}};
}

}  // namespace

namespace {

// A memoised fold over the producers of a tensor: a tensor no op produces has `leaf`; one that an
// op produces has step(op, its tensor, the largest value of the op's inputs, `leaf` for none).
// The walk keeps its own stack, so a chain of any length does not exhaust the thread's.
template <typename Step>
std::int64_t foldProducers(const ir::Graph& graph, ir::TensorId id, std::map<ir::TensorId, std::int64_t>& memo,
                           std::int64_t leaf, const Step& step) {
  std::vector<std::pair<ir::TensorId, bool>> stack{{id, false}};  // tensor, its inputs pushed
  while (!stack.empty()) {
    auto [t, expanded] = stack.back();
    if (memo.count(t)) {
      stack.pop_back();
      continue;
    }
    const ir::Tensor& tensor = graph.tensor(t);
    if (tensor.producer < 0) {
      memo[t] = leaf;
      stack.pop_back();
      continue;
    }
    const ir::Op& op = graph.op(tensor.producer);
    if (!expanded) {
      stack.back().second = true;
      for (ir::TensorId in : op.inputs)
        if (!memo.count(in)) stack.emplace_back(in, false);
      continue;
    }
    std::int64_t inputs = leaf;
    for (ir::TensorId in : op.inputs) inputs = std::max(inputs, memo.at(in));
    memo[t] = step(op, tensor, inputs);
    stack.pop_back();
  }
  return memo.at(id);
}

}  // namespace

std::int64_t reductionLength(const ir::Graph& graph, ir::TensorId id, std::map<ir::TensorId, std::int64_t>& memo) {
  return foldProducers(graph, id, memo, 1, [&](const ir::Op& op, const ir::Tensor&, std::int64_t inputs) {
    std::int64_t k = 1;
    if (ir::isMacOp(op.kind) && !op.inputs.empty()) k = lastDim(graph.tensor(op.inputs[0]));
    if (op.kind == ir::OpKind::kAveragePool) {
      k = 1;
      for (std::int64_t n : op.intsAttr("kernel_shape")) k *= n;
    }
    return std::max(k, inputs);
  });
}

std::int64_t roundingDepth(const ir::Graph& graph, ir::TensorId id, std::map<ir::TensorId, std::int64_t>& memo) {
  return foldProducers(graph, id, memo, 0, [](const ir::Op& op, const ir::Tensor& t, std::int64_t inputs) {
    return inputs + (ir::isFloat(t.dtype) && ir::roundsItsResult(op.kind) ? 1 : 0);
  });
}

Expected<FunctionalSetup> prepareFunctional(const ir::Graph& graph,
                                            const std::vector<std::shared_ptr<const isa::Program>>& programs,
                                            const FunctionalSources& sources) {
  // An op the lowering timed without its values is refused before anything runs.
  for (const auto& p : programs)
    if (!p->refusals.empty())
      return makeError(ExitCode::kModel, fmt::format("{}; functional mode does not compute this op (the program "
                                                     "stands in for its cost)",
                                                     p->refusals.front()));
  // The MXM's and the reductions' storage type: FP16 or INT8, not both. INT32, FP32, BF16 and bool
  // tensors are stored in their own types (elementwise ops compute on them); INT64 only as Gather indices.
  std::optional<ir::DType> stored;
  std::string first;
  for (const auto& p : programs)
    for (const auto& t : p->tensors) {
      const auto dtype = static_cast<ir::DType>(t.dtype);
      if (indexTensor(graph, t.name)) continue;  // INT32 / INT64 Gather indices, stored as such
      const bool primary = dtype == ir::DType::kF16 || dtype == ir::DType::kI8;
      if (primary && !stored) {
        stored = dtype;
        first = t.name;
      }
      if ((primary && dtype != *stored) || dtype == ir::DType::kI64) {
        // The ops that read the tensor (a Gather's INT32 indices, ...), to name what is refused.
        std::vector<std::string> readers;
        if (const auto id = graph.findTensor(t.name))
          for (ir::OpId u : graph.tensor(*id).users)
            readers.push_back(fmt::format("{} '{}'", ir::opKindName(graph.op(u).kind), graph.op(u).name));
        return makeError(ExitCode::kModel,
                         fmt::format("{}: functional mode stores FP16 or INT8 on chip, not both, and INT64 only as "
                                     "Gather indices; this tensor is stored as {}{}{}",
                                     t.name, ir::dtypeName(dtype),
                                     stored ? fmt::format(" ('{}' as {})", first, ir::dtypeName(*stored)) : std::string(),
                                     readers.empty() ? std::string() : fmt::format(", read by {}", fmt::join(readers, ", "))));
      }
    }
  FunctionalSetup setup;
  const topology::ChipSpec defaultChip;
  const topology::ChipSpec& chip = sources.chip ? *sources.chip : defaultChip;
  const std::vector<bool> channelsLast = lower::channelsLastTensors(graph);
  const sim::ElementType element = stored == ir::DType::kI8 ? sim::ElementType::kInt8 : sim::ElementType::kFp16;
  setup.options.enabled = true;
  setup.options.element = element;

  // Every leaf's values as the chip stores them; the reference graph gets the same values.
  ir::Graph reference = graph;
  std::map<std::string, ir::Data> leaves;  // one copy, shared
  std::map<std::string, Folded> folded;
  std::vector<ir::Value> inputs;
  auto stateAndInputs = graph.inputs();
  stateAndInputs.insert(stateAndInputs.end(), graph.states().begin(), graph.states().end());
  for (size_t i = 0; i < stateAndInputs.size(); ++i) {
    const ir::Tensor& t = graph.tensor(stateAndInputs[i]);
    std::vector<double> data;
    if (sources.inputsDir && i < graph.inputs().size()) {
      auto value = readPb(*sources.inputsDir, "input", i, t);
      if (!value) return value.error();
      data = value->data->values();
    } else {
      data = seededValues(sources.seed, t, indexRange(graph, stateAndInputs[i]));
    }
    if (!indexTensor(graph, t.name))
      for (double& v : data) v = ir::toStorage(v, t.dtype);
    inputs.push_back({t.dtype, t.shape, data});
    leaves[t.name] = ir::makeData(data);
  }
  for (ir::TensorId id = 0; id < static_cast<ir::TensorId>(graph.tensors().size()); ++id) {
    const ir::Tensor& t = graph.tensor(id);
    if (t.role != ir::TensorRole::kWeight && t.role != ir::TensorRole::kConstant) continue;
    // Values already as stored (the importer rounds weights to their storage type) are shared, not copied.
    const bool index = indexTensor(graph, t.name);
    ir::Data shared;
    if (t.data && (index || std::all_of(t.data->begin(), t.data->end(), [&](double v) {
                     const double s = ir::toStorage(v, t.dtype);
                     return s == v || (std::isnan(s) && std::isnan(v));
                   }))) {
      shared = t.data;
    } else {
      std::vector<double> data = t.data ? t.data->values() : seededValues(sources.seed, t, indexRange(graph, id));
      if (!index)
        for (double& v : data) v = ir::toStorage(v, t.dtype);
      shared = ir::makeData(data);
    }
    reference.setData(id, shared);
    leaves[t.name] = std::move(shared);
  }

  // Tensors the compiler folded (BatchNormalization into a Conv's weights and bias, or into its own
  // scale and shift) get the folded values in the chip's image; the reference keeps the graph's.
  for (const auto& p : programs)
    for (const auto& fold : p->folds) {
      if (folded.count(fold.tensor)) continue;
      auto values = foldedValues(fold, leaves, element);
      if (!values) return values.error();
      folded[fold.tensor] = std::move(*values);
    }
  // The placements the process's chips make of each resident tensor: a tensor only other processes'
  // chips hold is not given, and the others are dropped after their last placement.
  std::map<std::string, int> placements;
  if (sources.localChips)
    for (int c : *sources.localChips)
      for (const auto& placement : programs.at(static_cast<size_t>(c))->tensors)
        if (placement.resident) ++placements[placement.name];
  auto resident = std::make_shared<std::map<std::string, sim::TensorValues>>();
  for (const auto& p : programs)
    for (const auto& placement : p->tensors) {
      if (!placement.resident || resident->count(placement.name)) continue;
      if (sources.localChips && !placements.count(placement.name)) continue;
      Folded values;
      if (auto f = folded.find(placement.name); f != folded.end()) values = f->second;
      else if (auto l = leaves.find(placement.name); l != leaves.end()) values.data = l->second;
      const auto id = graph.findTensor(placement.name);
      if (!values.data || !id)
        return makeError(ExitCode::kInternal,
                         fmt::format("functional mode: resident tensor '{}' is not a graph input or weight", placement.name));
      const std::int64_t cols = storedCols(chip, graph, channelsLast, *id);
      const int count = sources.localChips ? placements.at(placement.name) : 0;
      sim::TensorValues& entry = (*resident)[placement.name];
      entry = {cols, values.data, {}, 0, count, std::move(values.map)};
      // Channels-last: read in storage order as a chip places it, from the one copy of the values
      // (else row-major in its shape: the values as they are).
      if (channelsLast[static_cast<size_t>(*id)]) {
        StorageIndex index = storageIndex(chip, graph, channelsLast, *id, static_cast<std::int64_t>(values.data->size()));
        entry.source = std::move(index.source);
        entry.stored = index.stored;
      }
    }
  // What only the chips' placements need is not kept past them here.
  leaves.clear();
  folded.clear();
  setup.options.resident = resident;

  // The reference: the interpreter on the stored values, or the expected files.
  std::vector<ir::Value> expected;
  if (!sources.expectDir) {
    auto outputs = interpretStored(reference, inputs);
    if (!outputs) return outputs.error();
    expected = std::move(*outputs);
  }
  std::map<ir::TensorId, std::int64_t> memo, depthMemo;
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const ir::Tensor& t = graph.tensor(graph.outputs()[i]);
    OutputCheck check;
    check.name = t.name;
    const bool reordered = reorderedInStorage(graph, channelsLast, graph.outputs()[i]);
    if (sources.expectDir) check.against = (std::filesystem::path(*sources.expectDir) / fmt::format("output_{}.pb", i)).string();
    else check.against = "the reference interpreter";
    if (sources.expectDir && !reordered) {
      // An output stored row-major in its shape is compared with its file a block at a time: the run
      // holds none of the expected values (when they are the file's raw data).
      auto blocks = readPbWith(*sources.expectDir, "output", i, t, [&](const std::string& path) {
        return frontend::readTensorProtoBlocks(path, t.dtype == ir::DType::kBF16);
      });
      if (!blocks) return blocks.error();
      if (blocks->read) {
        check.blockElements = blocks->count;
        check.referenceBlocks = [read = std::move(blocks->read)](std::int64_t first, std::int64_t count, float* out) {
          std::vector<double> values(static_cast<size_t>(count));
          read(first, count, values.data());
          std::copy(values.begin(), values.end(), out);
        };
      }
    }
    double largest = 0.0;
    if (check.referenceBlocks) {
      check.cols = lastDim(t);
      std::vector<float> block;
      for (std::int64_t first = 0; first < check.blockElements; first += kCheckBlockElements) {
        block.resize(static_cast<size_t>(std::min(kCheckBlockElements, check.blockElements - first)));
        check.referenceBlocks(first, static_cast<std::int64_t>(block.size()), block.data());
        for (float v : block)
          if (std::isfinite(v)) largest = std::max(largest, static_cast<double>(std::fabs(v)));
      }
    } else {
      std::vector<double> reference;
      ir::Data file;  // an expected file's values, compact
      if (sources.expectDir) {
        auto value = readPb(*sources.expectDir, "output", i, t);
        if (!value) return value.error();
        file = std::move(value->data);
      } else {
        reference = std::move(expected[i].data);
      }
      // Compared in the order the chip stores the output (channels-last for a conv graph's 4-D maps).
      if (reordered) {
        if (file) reference = file->values();
        file.reset();
        reference = storageOrder(chip, graph, channelsLast, graph.outputs()[i], reference, check.cols);
      } else {
        check.cols = lastDim(t);
      }
      if (file) check.reference.assign(file->begin(), file->end());
      else check.reference.assign(reference.begin(), reference.end());
      for (float v : check.reference)
        if (std::isfinite(v)) largest = std::max(largest, static_cast<double>(std::fabs(v)));
    }
    // Integers and bool are exact; floats derive from FP16 storage (a BF16 result within one of its units).
    const std::int64_t k = reductionLength(graph, graph.outputs()[i], memo);
    const std::int64_t depth = roundingDepth(graph, graph.outputs()[i], depthMemo);
    check.tolerance = !ir::isFloat(t.dtype)     ? sim::integerTolerance()
                      : t.dtype == ir::DType::kBF16 ? sim::bf16TensorTolerance(k, largest, depth)
                                                    : sim::fp16TensorTolerance(k, largest, depth);
    setup.outputs.push_back(std::move(check));
  }
  return setup;
}

void releaseGraphWeights(ir::Graph& graph) {
  for (ir::TensorId id = 0; id < static_cast<ir::TensorId>(graph.tensors().size()); ++id)
    if (graph.tensor(id).role == ir::TensorRole::kWeight) graph.setData(id, nullptr);
}

int outputChip(const std::vector<std::shared_ptr<const isa::Program>>& programs, const std::string& name) {
  int written = -1, held = -1;  // an output that is also an input or a weight is only held
  for (size_t c = 0; c < programs.size(); ++c)
    for (const auto& t : programs[c]->tensors)
      if (t.name == name) (t.resident ? held : written) = static_cast<int>(c);
  return written >= 0 ? written : held;
}


Status checkFunctionalOutputs(const FunctionalSetup& setup,
                              const std::vector<std::shared_ptr<const isa::Program>>& programs,
                              const std::function<const sim::Chip*(int)>& chipOf) {
  for (const auto& check : setup.outputs) {
    const int chip = outputChip(programs, check.name);
    if (chip < 0)
      return makeError(ExitCode::kModel,
                       fmt::format("{}: functional mode reads outputs from SRAM, and no chip's program holds this "
                                   "graph output (folded away at compile time)",
                                   check.name));
    const sim::Chip* owner = chipOf(chip);
    if (!owner) continue;  // another rank checks it
    // The placement the chip wrote (a received copy or a written tensor), else the one it holds.
    const auto& tensors = programs[chip]->tensors;
    auto placement = std::find_if(tensors.begin(), tensors.end(),
                                  [&](const isa::TensorPlacement& t) { return t.name == check.name && !t.resident; });
    if (placement == tensors.end())
      placement = std::find_if(tensors.begin(), tensors.end(),
                               [&](const isa::TensorPlacement& t) { return t.name == check.name; });
    const std::int64_t elements = placement->rows * check.cols;
    if (elements != check.elements())
      return makeError(ExitCode::kFunctionalMismatch,
                       fmt::format("functional output '{}' has {} elements on chip {}, {} has {}", check.name,
                                   elements, chip, check.against, check.elements()));
    // Read and compared a block of rows at a time (within one segment), so that the check holds one
    // block of the chip's values beside the reference, not a second copy of the tensor.
    const std::int64_t segment = placement->segmentRows > 0 ? placement->segmentRows : placement->rows;
    const std::int64_t blockRows = std::max<std::int64_t>(1, kCheckBlockElements / std::max<std::int64_t>(1, check.cols));
    sim::ReferenceComparison comparison(check.tolerance);
    for (std::int64_t row0 = 0; row0 < placement->rows;) {
      const std::int64_t rows = std::min({blockRows, placement->rows - row0, segment - row0 % segment});
      const std::vector<double> values = owner->readTensor(sim::rowBlock(*placement, row0, rows), check.cols);
      const std::vector<float> simulated(values.begin(), values.end());
      if (static_cast<std::int64_t>(simulated.size()) != rows * check.cols)
        return makeError(ExitCode::kInternal, fmt::format("functional output '{}': chip {} returned {} values for "
                                                          "{} rows of {}", check.name, chip, simulated.size(), rows,
                                                          check.cols));
      std::vector<float> block;
      const float* reference = check.reference.data() + row0 * check.cols;
      if (check.referenceBlocks) {
        block.resize(simulated.size());
        check.referenceBlocks(row0 * check.cols, static_cast<std::int64_t>(block.size()), block.data());
        reference = block.data();
      }
      comparison.add(simulated.data(), reference, simulated.size());
      row0 += rows;
    }
    if (auto s = comparison.result(check.name); !s) {
      Diagnostic d = s.error();
      d.message += fmt::format(" (chip {}, against {})", chip, check.against);
      return d;
    }
  }
  return {};
}

}  // namespace tsp::runtime
