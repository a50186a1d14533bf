// The graph IR: tensors with shape and dtype, ops with attributes, in topological order.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "support/expected.h"

namespace tsp::ir {

/// Element types of tensors.
enum class DType : std::uint8_t { kF32, kF16, kBF16, kI8, kI32, kI64 };

/// Bytes per element of a dtype.
int dtypeBytes(DType type);
/// "fp32", "fp16", "bf16", "int8", "int32", "int64".
const char* dtypeName(DType type);
/// The dtype named by text, or an error.
Expected<DType> parseDType(const std::string& text);

/// Op kinds of this IR version (the IR issue extends the list).
enum class OpKind : std::uint8_t { kInput, kWeight, kMatMul, kAdd, kRelu, kGelu };

/// "Input", "Weight", "MatMul", "Add", "Relu", "Gelu".
const char* opKindName(OpKind kind);

using TensorId = int;
using OpId = int;

/// A tensor value of the graph (SSA: exactly one producer).
struct Tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  DType dtype = DType::kF16;
  OpId producer = -1;
  std::vector<OpId> users;

  std::int64_t elements() const;
  std::int64_t bytes() const { return elements() * dtypeBytes(dtype); }
};

/// One operation: kind, inputs, outputs and integer attributes.
struct Op {
  OpKind kind;
  std::string name;
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  std::map<std::string, std::int64_t> attrs;
  int layer = 0;  ///< the model layer this op belongs to, the unit the stage partitioner moves
};

/// An SSA tensor dataflow graph; ops are kept in topological order.
class Graph {
 public:
  /// Adds a graph input (activation) tensor.
  TensorId addInput(const std::string& name, std::vector<std::int64_t> shape, DType dtype);
  /// Adds a weight (parameter) tensor.
  TensorId addWeight(const std::string& name, std::vector<std::int64_t> shape, DType dtype);
  /// Adds an op on existing tensors; infers its output shape. Errors name the op.
  Expected<TensorId> addOp(OpKind kind, const std::string& name, std::vector<TensorId> inputs, int layer);
  /// Marks a tensor as a graph output.
  void markOutput(TensorId tensor) { outputs_.push_back(tensor); }

  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<Op>& ops() const { return ops_; }
  const std::vector<TensorId>& outputs() const { return outputs_; }
  const std::vector<TensorId>& weights() const { return weights_; }
  const std::vector<TensorId>& inputs() const { return inputs_; }
  const Tensor& tensor(TensorId id) const { return tensors_[id]; }
  const Op& op(OpId id) const { return ops_[id]; }
  /// Number of layers (1 + the largest layer index of any op).
  int layerCount() const;

  /// Parameter count (elements of all weights).
  std::int64_t parameters() const;
  /// Multiply-add FLOPs (2 per MAC) of all ops.
  std::int64_t flops() const;

  /// A readable text form, one op a line.
  std::string print() const;

 private:
  TensorId addTensor(const std::string& name, std::vector<std::int64_t> shape, DType dtype, OpId producer);

  std::vector<Tensor> tensors_;
  std::vector<Op> ops_;
  std::vector<TensorId> outputs_;
  std::vector<TensorId> weights_;
  std::vector<TensorId> inputs_;
};

}  // namespace tsp::ir
