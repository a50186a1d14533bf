// Training graphs: reverse-mode automatic differentiation of an ir::Graph, activation recomputation
// and the optimizer step (SGD, Adam), all as ordinary IR ops appended to a copy of the forward graph.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "compile/ir/graph.h"
#include "support/expected.h"

namespace tsp::ir {

/// The optimizer step appended after the backward pass.
enum class Optimizer : std::uint8_t {
  kNone,  ///< no update: the gradients are the graph's outputs
  kSgd,   ///< w -= lr g
  kAdam,  ///< Adam with bias correction at step `step`; m and v are state tensors
};

/// Activation recomputation of the backward pass.
enum class Recompute : std::uint8_t {
  kNone,  ///< the backward pass reads the forward activations (all of them stay live)
  kFull,  ///< every layer but the last runs its forward again from its inputs just before its backward
};

/// "none", "sgd", "adam" / "none", "full".
const char* optimizerName(Optimizer optimizer);
const char* recomputeName(Recompute recompute);
/// Parses the names above; false when text names none.
bool parseOptimizer(const std::string& text, Optimizer& optimizer);
bool parseRecompute(const std::string& text, Recompute& recompute);

/// How the training graph is built.
struct TrainingOptions {
  Optimizer optimizer = Optimizer::kSgd;
  Recompute recompute = Recompute::kNone;
  double learningRate = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;  ///< Adam
  int step = 1;                                        ///< Adam's step count, for the bias correction
  /// The scores the loss reads (a tensor name); empty: the forward graph's last output.
  std::string scores;
  /// Tensors of a tensor-parallel device graph whose gradient is a partial sum over the TP group (a
  /// replicated activation read by column-parallel matmuls): once complete, the gradient is summed by
  /// an AllReduce with these attributes (Megatron's conjugate of the forward all-reduce). Keyed by the
  /// ids of the graph passed to differentiate or buildTrainingGraph.
  std::map<TensorId, Attrs> partialGradients;
  /// Float graph inputs get gradients too (a pipeline's first stage computing its input gradient).
  bool inputGradients = false;
};

/// Tensors of a training graph, by role.
struct TrainingTensors {
  TensorId loss = -1;                     ///< the scalar loss
  std::vector<TensorId> weights;          ///< every weight of the forward graph, in graph.weights() order
  std::vector<TensorId> gradients;        ///< the gradient of each weight (-1 where the loss does not depend on it)
  std::vector<TensorId> updatedWeights;   ///< the optimizer's new value of each weight (-1 as above, or kNone)
};

/// A training graph and where its tensors are.
struct TrainingGraph {
  Graph graph;
  TrainingTensors tensors;
};

/// Reverse-mode gradients of an output of `forward` (its first output, or `loss` when given) with
/// respect to every weight. A scalar output is the loss (seed 1); any other output's gradient is a
/// new input NAME.grad, as a pipeline stage receives it from the next stage. The result is the forward graph followed by the
/// backward ops (each in the layer of the forward op it differentiates) and, with an optimizer, the
/// update. Outputs: the loss, then each weight's new value (optimizer) or gradient (kNone), then
/// with Adam the new m and v. Errors name the op that has no gradient rule.
Expected<TrainingGraph> differentiate(const Graph& forward, const TrainingOptions& options,
                                      const std::string& loss = "");

/// A training step of a model: SoftmaxCrossEntropyLoss over options.scores against a new int32
/// input `labels` (the scores' shape without the last axis), then differentiate().
Expected<TrainingGraph> buildTrainingGraph(const Graph& forward, const TrainingOptions& options);

}  // namespace tsp::ir
