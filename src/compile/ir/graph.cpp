// The graph IR: construction, shape inference, printing and whole-graph figures.
#include "compile/ir/graph.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tsp::ir {

int dtypeBytes(DType type) {
  switch (type) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kI8: return 1;
    case DType::kI64: return 8;
  }
  return 1;
}

const char* dtypeName(DType type) {
  switch (type) {
    case DType::kF32: return "fp32";
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
    case DType::kI8: return "int8";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
  }
  return "?";
}

Expected<DType> parseDType(const std::string& text) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8, DType::kI32, DType::kI64})
    if (text == dtypeName(t)) return t;
  return makeError(ExitCode::kModel, fmt::format("unknown dtype '{}'", text));
}

const char* opKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kInput: return "Input";
    case OpKind::kWeight: return "Weight";
    case OpKind::kMatMul: return "MatMul";
    case OpKind::kAdd: return "Add";
    case OpKind::kRelu: return "Relu";
    case OpKind::kGelu: return "Gelu";
  }
  return "?";
}

std::int64_t Tensor::elements() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

TensorId Graph::addTensor(const std::string& name, std::vector<std::int64_t> shape, DType dtype, OpId producer) {
  Tensor t;
  t.name = name;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.producer = producer;
  tensors_.push_back(std::move(t));
  return static_cast<TensorId>(tensors_.size() - 1);
}

TensorId Graph::addInput(const std::string& name, std::vector<std::int64_t> shape, DType dtype) {
  const TensorId id = addTensor(name, std::move(shape), dtype, -1);
  inputs_.push_back(id);
  return id;
}

TensorId Graph::addWeight(const std::string& name, std::vector<std::int64_t> shape, DType dtype) {
  const TensorId id = addTensor(name, std::move(shape), dtype, -1);
  weights_.push_back(id);
  return id;
}

Expected<TensorId> Graph::addOp(OpKind kind, const std::string& name, std::vector<TensorId> inputs, int layer) {
  for (TensorId in : inputs)
    if (in < 0 || in >= static_cast<TensorId>(tensors_.size()))
      return modelError(name, "input tensor does not exist");
  std::vector<std::int64_t> shape;
  const DType dtype = tensors_[inputs.at(0)].dtype;
  switch (kind) {
    case OpKind::kMatMul: {
      if (inputs.size() != 2) return modelError(name, "MatMul takes 2 inputs");
      const auto& a = tensors_[inputs[0]].shape;
      const auto& b = tensors_[inputs[1]].shape;
      if (a.size() < 2 || b.size() != 2) return modelError(name, "MatMul needs a [..,M,K] x [K,N] pair");
      if (a.back() != b[0])
        return modelError(name, fmt::format("MatMul inner dimensions differ: {} vs {}", a.back(), b[0]));
      shape = a;
      shape.back() = b[1];
      break;
    }
    case OpKind::kAdd: {
      if (inputs.size() != 2) return modelError(name, "Add takes 2 inputs");
      const auto& a = tensors_[inputs[0]].shape;
      const auto& b = tensors_[inputs[1]].shape;
      // Numpy-style broadcasting from the right.
      const size_t rank = std::max(a.size(), b.size());
      shape.assign(rank, 1);
      for (size_t i = 0; i < rank; ++i) {
        const std::int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
        const std::int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
        if (da != db && da != 1 && db != 1)
          return modelError(name, fmt::format("Add shapes do not broadcast: [{}] and [{}]", fmt::join(a, ","),
                                              fmt::join(b, ",")));
        shape[i] = std::max(da, db);
      }
      break;
    }
    case OpKind::kRelu:
    case OpKind::kGelu:
      if (inputs.size() != 1) return modelError(name, fmt::format("{} takes 1 input", opKindName(kind)));
      shape = tensors_[inputs[0]].shape;
      break;
    default:
      return modelError(name, "not an op kind that computes");
  }
  const OpId opId = static_cast<OpId>(ops_.size());
  const TensorId out = addTensor(name + ".out", shape, dtype, opId);
  for (TensorId in : inputs) tensors_[in].users.push_back(opId);
  ops_.push_back(Op{kind, name, std::move(inputs), {out}, {}, layer});
  return out;
}

int Graph::layerCount() const {
  int layers = 0;
  for (const auto& op : ops_) layers = std::max(layers, op.layer + 1);
  return layers;
}

std::int64_t Graph::parameters() const {
  std::int64_t n = 0;
  for (TensorId w : weights_) n += tensors_[w].elements();
  return n;
}

std::int64_t Graph::flops() const {
  std::int64_t total = 0;
  for (const auto& op : ops_) {
    const auto& out = tensors_[op.outputs[0]];
    if (op.kind == OpKind::kMatMul) total += 2 * out.elements() * tensors_[op.inputs[1]].shape[0];
    else total += out.elements();
  }
  return total;
}

std::string Graph::print() const {
  std::string text;
  auto describe = [&](TensorId id) {
    const auto& t = tensors_[id];
    return fmt::format("%{}: {}[{}]", t.name, dtypeName(t.dtype), fmt::join(t.shape, "x"));
  };
  for (TensorId w : weights_) text += fmt::format("weight {}\n", describe(w));
  for (const auto& op : ops_) {
    std::vector<std::string> ins;
    for (TensorId in : op.inputs) ins.push_back("%" + tensors_[in].name);
    text += fmt::format("{} = {} {}  // layer {}\n", describe(op.outputs[0]), opKindName(op.kind), fmt::join(ins, ", "),
                        op.layer);
  }
  return text;
}

}  // namespace tsp::ir
