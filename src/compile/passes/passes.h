// Graph passes (CSE, DCE, constant folding, fusion, layout normalisation), the liveness analysis,
// and the pass manager that runs a pipeline named by a string such as "fold,cse,dce".
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compile/ir/graph.h"
#include "support/expected.h"

namespace tsp::passes {

/// Common-subexpression elimination: ops hashed by a Merkle-style signature (kind, input value
/// numbers, attributes), then checked for exact equivalence before one replaces the other.
Expected<ir::Graph> eliminateCommonSubexpressions(const ir::Graph& graph);
/// Dead-code elimination from the outputs back; ops with side effects (communication) are kept.
Expected<ir::Graph> eliminateDeadCode(const ir::Graph& graph);
/// Constant folding: ops whose inputs are all constants become constants; Identity, x*1 and x+0 vanish.
Expected<ir::Graph> foldConstants(const ir::Graph& graph);
/// Fusion: MatMul + bias Add + activation into FusedMatMul, chains of elementwise ops into FusedElementwise.
Expected<ir::Graph> fuseOps(const ir::Graph& graph);
/// Layout normalisation: Gemm into MatMul with [K,N] weights, transposes composed or dropped,
/// Flatten/Squeeze/Unsqueeze/Reshape chains into one Reshape.
Expected<ir::Graph> normalizeLayout(const ir::Graph& graph);

/// Live range of every tensor over op positions, and a first-fit memory plan that reuses the
/// space of dead activations.
struct Liveness {
  std::vector<int> first;              ///< op index defining the tensor (-1: live from the start)
  std::vector<int> last;               ///< op index of the last use (ops().size(): a graph output)
  std::vector<std::int64_t> offset;    ///< arena offset of each activation (-1 for weights, constants, state)
  std::int64_t peakLiveBytes = 0;      ///< the largest sum of live activation bytes at any op
  std::int64_t arenaBytes = 0;         ///< size of the arena the plan needs (>= peakLiveBytes)
  std::int64_t totalActivationBytes = 0;  ///< bytes without any reuse
};

/// Computes live ranges and the memory plan of graph's activations (graph inputs included).
Liveness analyzeLiveness(const ir::Graph& graph);

/// One named pass of the pass manager.
struct Pass {
  std::string name;
  std::string summary;
  std::function<Expected<ir::Graph>(const ir::Graph&)> run;
};

/// Every pass, in the order `--passes=help` lists them. The list is explicit: no static registration.
const std::vector<Pass>& allPasses();

/// The pipeline run when --passes is not given: transformations the lowering understands.
const char* defaultPipeline();

/// The passes of a comma-separated list ("" is no pass); an unknown name is a config error with a
/// "did you mean".
Expected<std::vector<const Pass*>> parsePipeline(const std::string& list);

/// Called after each pass with its name and the graph it produced.
using AfterPass = std::function<void(const std::string& pass, const ir::Graph& graph)>;

/// Runs the passes in order; errors name the pass.
Expected<ir::Graph> runPipeline(ir::Graph graph, const std::vector<const Pass*>& pipeline, const AfterPass& after = {});

}  // namespace tsp::passes
