// The reference interpreter: executes an ir::Graph on the CPU, the oracle the simulator is checked against.
//
// Floating-point tensors are computed in FP32 (every result rounded to float, whatever the storage
// dtype); integer tensors exactly, wrapped to their width. It shares no kernel code with the simulator.
#pragma once

#include <map>
#include <vector>

#include "compile/ir/graph.h"
#include "support/expected.h"

namespace tsp::ir {

/// A tensor value: dtype, shape and one element per entry, row-major.
struct Value {
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::vector<double> data;

  std::int64_t elements() const;
};

/// Runs one op on its input values; outTypes are the shapes inferred for its outputs.
/// Errors name the op (name).
Expected<std::vector<Value>> evaluateOp(OpKind kind, const std::string& name, const Attrs& attrs,
                                        const std::vector<const Value*>& inputs, const std::vector<TensorType>& outTypes);

/// Runs graph on inputs (in graph.inputs() order; state tensors follow the inputs, in
/// graph.states() order). Weights and constants must have data. Returns the graph outputs in order.
Expected<std::vector<Value>> interpret(const Graph& graph, const std::vector<Value>& inputs);

/// Rounds or wraps v into dtype: float for fp32/fp16/bf16 (the interpreter computes in FP32),
/// two's-complement wrap for integers, 0/1 for bool.
double castTo(double v, DType dtype);

/// A value as the chip stores a tensor of `dtype`: rounded to FP16, BF16 or FP32 (nearest, ties to
/// even), or wrapped to its integer width (INT64 truncated, bool 0/1). Functional mode's reference
/// side and the importer (initializers held as stored) round with the compiler's _Float16, not with
/// the simulator's conversion, so that the two check each other.
double toStorage(double v, DType dtype);

}  // namespace tsp::ir
