// The op-definition table: per op kind, its ONNX import rule, shape rule, reference evaluation, gradient and lowering entry.
#pragma once

#include <vector>

#include "compile/ir/graph.h"

namespace tsp::ir {

/// How the shape and dtype of a kind's output follow from its inputs.
enum class ShapeRule : std::uint8_t {
  kUnary,      ///< one input; the output has its shape and dtype
  kBinary,     ///< two inputs, numpy broadcasting; the output has the first input's dtype
  kCompare,    ///< two inputs, numpy broadcasting; a bool output
  kOwn,        ///< a rule of its own in inferTypes (shape_inference.cpp)
  kNotAnOp,    ///< a leaf (Input, Weight): no op has this kind
};

/// Which lowering family lowers the kind (src/compile/lower/); kNone says why not in `noLowering`.
enum class LoweringFamily : std::uint8_t {
  kMatMul, kConv, kElementwise, kBatchNorm, kNormalization, kPool, kReduction, kDataMovement, kCopy, kLoss,
  kLossGrad, kGatherGrad, kCommunication, kNone,
};

/// Reference evaluation of one element of an elementwise kind (attributes as given to the op).
using UnaryFunction = double (*)(double x, const Op& op);
/// Reference evaluation of a binary kind; integer is true when the output dtype is an integer type.
using BinaryFunction = double (*)(double a, double b, const Op& op, bool integer);

/// One row of the table.
struct OpDefinition {
  OpKind kind;
  const char* name;            ///< the IR name, the ONNX op's where ONNX has it
  const char* onnx;            ///< the ONNX op imported as this kind one to one, or nullptr
  const char* notImported;     ///< nullptr when `onnx` is set, else why no ONNX op maps to it
  ShapeRule shape;
  UnaryFunction unary;         ///< kUnary kinds of this table's elementwise group, else nullptr
  BinaryFunction binary;       ///< kBinary/kCompare kinds of this group, else nullptr
  int flopsPerElement;         ///< per output element (elementwise kinds), -1: opFlops has a rule of its own
  bool gradient;               ///< ir::differentiate has a rule for it
  const char* noGradient;      ///< nullptr when `gradient`, else why not
  LoweringFamily lowering;
  const char* noLowering;      ///< nullptr unless `lowering` is kNone: why the kind is not lowered
};

/// The row of kind (every kind below kCount has one).
const OpDefinition& opDefinition(OpKind kind);
/// Every row, in OpKind order.
const std::vector<OpDefinition>& opDefinitions();

/// Whether the kind's result is a rounding of a computed value: false for data movement, copies,
/// communication and selections (Relu, Max, Where, MaxPool, ...), whose results are operand values.
/// Functional mode's tolerance counts the rounding ops on the path into an output.
bool roundsItsResult(OpKind kind);

/// ONNX ops the importer builds from several IR ops (Einsum, Pad, Resize, ...), with the form it builds.
struct OnnxComposition {
  const char* onnx;
  const char* builds;  ///< the IR ops it becomes, for docs/ir.md and error messages
};
/// Every composition the importer knows (onnx_importer.cpp implements them).
const std::vector<OnnxComposition>& onnxCompositions();

}  // namespace tsp::ir
