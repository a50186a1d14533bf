// The graph IR: an SSA tensor dataflow graph of ops with attributes, kept in topological order.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "compile/ir/dtype.h"
#include "support/expected.h"
#include "support/tensor_data.h"

namespace tsp::ir {

/// A weight's or constant's values (support/tensor_data.h), shared.
using TensorData = tsp::TensorData;
using Data = SharedTensorData;
inline Data makeData(const std::vector<double>& values) { return shareTensorData(values); }

/// The dtype named by text, or an error.
Expected<DType> parseDType(const std::string& text);

/// Op kinds. kInput and kWeight name leaf tensors and are never the kind of an op in a graph.
enum class OpKind : std::uint8_t {
  kInput, kWeight,
  // Linear algebra.
  kMatMul, kGemm, kConv,
  // Elementwise, broadcasting.
  kAdd, kSub, kMul, kDiv, kPow, kEqual, kWhere,
  // Activations and math.
  kRelu, kGelu, kTanh, kSigmoid, kExp, kSqrt, kErf,
  // Normalisation and reductions.
  kSoftmax, kLayerNormalization, kBatchNormalization, kReduceMean, kReduceSum, kReduceMax,
  // Shape and data movement.
  kReshape, kTranspose, kFlatten, kConcat, kSplit, kSlice, kGather, kUnsqueeze, kSqueeze, kCast, kExpand,
  kIdentity,
  // Pooling.
  kMaxPool, kAveragePool, kGlobalAveragePool,
  // Shape computation (folded when their inputs are constant).
  kShape, kConstantOfShape, kRange,
  // Communication inserted by the partitioner.
  kAllReduce, kAllGather, kReduceScatter, kSend, kRecv,
  // Made by the fusion pass.
  kFusedMatMul, kFusedElementwise,
  // Communication inserted by the sharding pass: split_axis chunks exchanged, joined on concat_axis.
  kAllToAll,
  // Training (src/compile/ir/autodiff.h): the loss and the gradient kernels the backward pass needs.
  kSoftmaxCrossEntropyLoss, kSoftmaxCrossEntropyLossGrad, kConvInputGrad, kConvWeightGrad, kGatherGrad,
  kMaxPoolGrad, kAveragePoolGrad,
  // Elementwise kinds of imported models (src/compile/ir/op_table.cpp defines every kind's entries).
  kNeg, kAbs, kReciprocal, kFloor, kCeil, kLog, kSin, kCos, kNot, kSoftplus,
  kLeakyRelu, kElu, kHardSigmoid, kHardSwish,
  kMin, kMax, kMod, kLess, kGreater, kLessOrEqual, kGreaterOrEqual, kAnd, kOr,
  // Data movement of imported models: rows of data replaced (or combined) at constant indices.
  kScatterND,
  kCount  ///< number of kinds, not a kind
};

/// The kind's name, as in ONNX where ONNX has the op ("MatMul", "LayerNormalization").
const char* opKindName(OpKind kind);
/// The kind named by text (an IR name), or nullopt.
std::optional<OpKind> parseOpKind(const std::string& text);
/// Ops whose effect is more than their outputs (communication): DCE keeps them.
bool hasSideEffects(OpKind kind);

using TensorId = int;
using OpId = int;

/// One attribute value: integer, float, integer list, float list or string.
using AttrValue = std::variant<std::int64_t, double, std::vector<std::int64_t>, std::vector<double>, std::string>;
/// Attributes by name; a std::map so that printing and hashing see them in canonical order.
using Attrs = std::map<std::string, AttrValue>;

/// What a leaf tensor is; an op result is kActivation.
enum class TensorRole : std::uint8_t {
  kActivation,  ///< produced by an op
  kInput,       ///< a graph input, fed per iteration
  kWeight,      ///< a trained parameter (counted in parameters())
  kConstant,    ///< a constant that is not a parameter: folded shapes, masks, running statistics
  kState,       ///< state kept on chip across iterations, e.g. a KV cache
};

/// A tensor value of the graph (SSA: exactly one producer, or none for leaves).
/// The largest tensor a model may declare or an op may produce: 2^48 bytes (256 TiB) is more than the
/// SRAM of the largest cluster this build simulates (2^20 chips of 220 MiB), so a larger one is a
/// mistake, and sizes below it never overflow when multiplied by an element width or a small count.
inline constexpr std::int64_t kMaxTensorBytes = std::int64_t{1} << 48;

/// The elements of a shape of `width`-byte values, or nullopt when a dimension is negative or they
/// hold more than kMaxTensorBytes.
std::optional<std::int64_t> boundedElements(const std::vector<std::int64_t>& shape, int width);

struct Tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  DType dtype = DType::kF16;
  OpId producer = -1;
  std::vector<OpId> users;
  TensorRole role = TensorRole::kActivation;
  /// Element values in row-major order (exact for every dtype used here), when known: constants
  /// always, weights when their data was loaded. Held compactly (TensorData) and shared, because
  /// passes copy graphs.
  Data data;

  std::int64_t elements() const;
  std::int64_t bytes() const { return elements() * dtypeBytes(dtype); }
};

/// One operation: kind, inputs, outputs and attributes.
struct Op {
  OpKind kind;
  std::string name;
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  Attrs attrs;
  int layer = 0;  ///< the model layer this op belongs to, the unit the stage partitioner moves

  /// The integer attribute key, or fallback when absent.
  std::int64_t intAttr(const std::string& key, std::int64_t fallback) const;
  /// The float attribute key (an integer one is converted), or fallback when absent.
  double floatAttr(const std::string& key, double fallback) const;
  /// The integer-list attribute key, or fallback when absent.
  std::vector<std::int64_t> intsAttr(const std::string& key, std::vector<std::int64_t> fallback = {}) const;
  /// The string attribute key, or fallback when absent.
  std::string stringAttr(const std::string& key, const std::string& fallback) const;
  bool hasAttr(const std::string& key) const { return attrs.count(key) > 0; }
};

/// The window of a Conv or pooling op with ONNX's defaults: the kernel (kernel_shape, else the
/// weight's trailing dimensions), strides and dilations (1) and pads (0; all begins, then all ends).
/// The one decoding of these attributes: shape inference, the interpreter, iteration spaces, the
/// lowering and the functional image all read it.
struct WindowAttrs {
  std::vector<std::int64_t> kernel, strides, dilations, pads;
  /// Do the four lists all have `spatial` entries (pads 2 x spatial)?
  bool matches(size_t spatial) const {
    return kernel.size() == spatial && strides.size() == spatial && dilations.size() == spatial &&
           pads.size() == 2 * spatial;
  }
  std::int64_t padBegin(size_t i) const { return pads[i]; }
  std::int64_t padEnd(size_t i) const { return pads[kernel.size() + i]; }
};
/// Decodes the window attributes of an op over `spatial` spatial dimensions; `weightShape` (a Conv's
/// W) gives the kernel when kernel_shape is absent.
WindowAttrs windowAttrs(const Op& op, size_t spatial, const std::vector<std::int64_t>& weightShape = {});

/// Shape and dtype of an op result, as shape inference computes it.
struct TensorType {
  std::vector<std::int64_t> shape;
  DType dtype = DType::kF32;
};

/// An SSA tensor dataflow graph; ops are kept in topological order (an op only reads tensors
/// that exist when it is added), and every tensor knows its producer and users (use-def chains).
class Graph {
 public:
  /// Adds a graph input (activation) tensor.
  TensorId addInput(const std::string& name, std::vector<std::int64_t> shape, DType dtype);
  /// Adds a weight (parameter) tensor, with its values when they are known.
  TensorId addWeight(const std::string& name, std::vector<std::int64_t> shape, DType dtype, Data data = nullptr);
  /// Adds a constant tensor with its values (data must hold one value per element).
  TensorId addConstant(const std::string& name, std::vector<std::int64_t> shape, DType dtype, Data data);
  /// The same, with its values given as doubles.
  TensorId addConstant(const std::string& name, std::vector<std::int64_t> shape, DType dtype,
                       const std::vector<double>& values) {
    return addConstant(name, std::move(shape), dtype, makeData(values));
  }
  /// Adds a state tensor kept on chip across iterations (a KV cache).
  TensorId addState(const std::string& name, std::vector<std::int64_t> shape, DType dtype);
  /// Adds an op on existing tensors; infers its output shape. Errors name the op.
  Expected<TensorId> addOp(OpKind kind, const std::string& name, std::vector<TensorId> inputs, int layer);
  /// Adds an op with attributes; returns its first output.
  Expected<TensorId> addOp(OpKind kind, const std::string& name, std::vector<TensorId> inputs, Attrs attrs,
                           int layer);
  /// Adds an op with attributes and returns all its outputs, named outputNames when given
  /// (else NAME.out, NAME.out1, ...).
  Expected<std::vector<TensorId>> addMultiOp(OpKind kind, const std::string& name, std::vector<TensorId> inputs,
                                             Attrs attrs, int layer, std::vector<std::string> outputNames = {});
  /// Marks a tensor as a graph output.
  void markOutput(TensorId tensor) { outputs_.push_back(tensor); }
  /// Marks `value` as the new value of the leaf `leaf` (a weight or state that an optimizer update
  /// replaces): a shard that computes `value` may give the leaf's space to other tensors once the
  /// leaf's last reader in it has run, as an in-place update would. Not carried by print().
  void markOverwrites(TensorId value, TensorId leaf) { overwrites_[value] = leaf; }
  /// The leaf that `value` replaces (markOverwrites), or -1.
  TensorId overwrites(TensorId value) const {
    const auto it = overwrites_.find(value);
    return it == overwrites_.end() ? -1 : it->second;
  }
  /// Sets a tensor's dtype (the importer narrows and re-types leaves before ops use them).
  void setDType(TensorId tensor, DType dtype) { tensors_[tensor].dtype = dtype; }
  /// Reshapes a leaf no op reads yet to a shape of the same elements (the importer gives a 1-D
  /// convolution's weight its 2-D form).
  void setLeafShape(TensorId tensor, std::vector<std::int64_t> shape) { tensors_[tensor].shape = std::move(shape); }
  /// Attaches values to a weight whose data was not loaded when it was added.
  void setData(TensorId tensor, Data data) { tensors_[tensor].data = std::move(data); }

  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<Op>& ops() const { return ops_; }
  const std::vector<TensorId>& outputs() const { return outputs_; }
  const std::vector<TensorId>& weights() const { return weights_; }
  const std::vector<TensorId>& inputs() const { return inputs_; }
  /// Constant and state tensors, in the order they were added.
  const std::vector<TensorId>& constants() const { return constants_; }
  const std::vector<TensorId>& states() const { return states_; }
  const Tensor& tensor(TensorId id) const { return tensors_[id]; }
  const Op& op(OpId id) const { return ops_[id]; }
  /// The tensor called name, if any.
  std::optional<TensorId> findTensor(const std::string& name) const;
  /// Number of layers (1 + the largest layer index of any op).
  int layerCount() const;

  /// Parameter count (elements of all weights).
  std::int64_t parameters() const;
  /// FLOPs of all ops: 2 per multiply-accumulate for MatMul, Gemm and Conv, and the per-element
  /// counts of docs/ir.md for the others.
  std::int64_t flops() const;
  /// FLOPs of the multiply-accumulate ops only (MatMul, Gemm, Conv, FusedMatMul): 2 x MACs.
  std::int64_t macFlops() const;
  /// Bytes of weights and constants.
  std::int64_t weightBytes() const;
  /// Bytes of state tensors (the KV cache).
  std::int64_t stateBytes() const;

  /// The readable text form (docs/ir.md); parseGraph reads it back.
  std::string print() const;

 private:
  TensorId addTensor(const std::string& name, std::vector<std::int64_t> shape, DType dtype, OpId producer,
                     TensorRole role);

  std::vector<Tensor> tensors_;
  std::vector<Op> ops_;
  std::vector<TensorId> outputs_;
  std::vector<TensorId> weights_;
  std::vector<TensorId> inputs_;
  std::vector<TensorId> constants_;
  std::vector<TensorId> states_;
  std::unordered_map<std::string, TensorId> byName_;
  std::unordered_map<TensorId, TensorId> overwrites_;  // new value -> the leaf it replaces
};

/// Output shapes and dtypes of an op of kind on inputs of graph, or a model error naming the op.
Expected<std::vector<TensorType>> inferTypes(const Graph& graph, OpKind kind, const std::string& name,
                                             const std::vector<TensorId>& inputs, const Attrs& attrs);

/// FLOPs of one op of graph (see Graph::flops).
std::int64_t opFlops(const Graph& graph, const Op& op);
/// True for MatMul, Gemm, Conv, FusedMatMul and the two convolution gradients.
bool isMacOp(OpKind kind);

/// The first index a Slice reads on an axis of size dim (ONNX clamping rules).
std::int64_t sliceStart(std::int64_t start, std::int64_t dim, std::int64_t step);

/// Numpy broadcasting of two shapes, or nullopt when they do not broadcast.
std::optional<std::vector<std::int64_t>> broadcastShapes(const std::vector<std::int64_t>& a,
                                                         const std::vector<std::int64_t>& b);

}  // namespace tsp::ir
