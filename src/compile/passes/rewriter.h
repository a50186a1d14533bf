// Rewriter: builds a new graph from an old one op by op, which is how every pass transforms a graph.
#pragma once

#include <vector>

#include "compile/ir/graph.h"
#include "support/expected.h"

namespace tsp::passes {

/// Copies a graph into a new one while a pass keeps, replaces or drops ops. Graph inputs and
/// state keep their order; weights and constants are copied when first read, so those no op
/// reads any more disappear.
class Rewriter {
 public:
  explicit Rewriter(const ir::Graph& source);

  /// The new graph's tensor for an old tensor (copying a leaf on first use).
  ir::TensorId map(ir::TensorId old);
  /// From now on the old tensor is the new graph's tensor now.
  void alias(ir::TensorId old, ir::TensorId now) { map_[old] = now; }
  /// Re-adds op of the source graph on the mapped inputs, keeping its names.
  Status copy(const ir::Op& op);
  /// Adds an op to the new graph (inputs are new-graph ids) and maps the old outputs to its results.
  Status replace(const ir::Op& old, ir::OpKind kind, const std::string& name, std::vector<ir::TensorId> inputs,
                 ir::Attrs attrs, int layer);
  /// Maps the outputs and returns the new graph.
  ir::Graph finish();

  ir::Graph& target() { return graph_; }
  const ir::Graph& source() const { return source_; }

 private:
  const ir::Graph& source_;
  ir::Graph graph_;
  std::vector<ir::TensorId> map_;
};

}  // namespace tsp::passes
