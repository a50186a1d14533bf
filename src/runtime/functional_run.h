// Functional runs: the values placed in SRAM at program start, and the outputs checked against the reference.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compile/ir/graph.h"
#include "compile/isa/program.h"
#include "sim/chip.h"
#include "sim/functional.h"
#include "support/expected.h"
#include "topology/chip_spec.h"

namespace tsp::runtime {

/// One graph output and what it must match.
struct OutputCheck {
  std::string name;
  std::int64_t cols = 1;            ///< last dimension (rows x cols as the placement stores it)
  std::vector<float> reference;     ///< row-major (compared in FP32, as the chip's results are read)
  /// An expected file's values read when compared, a block at a time from the mapped file, so that
  /// no copy of them is held: `count` values from element `first`. Null: `reference` holds them.
  std::function<void(std::int64_t first, std::int64_t count, float* out)> referenceBlocks = nullptr;
  std::int64_t blockElements = 0;   ///< the values referenceBlocks reads
  /// The values compared.
  std::int64_t elements() const {
    return referenceBlocks ? blockElements : static_cast<std::int64_t>(reference.size());
  }
  sim::Tolerance tolerance;
  std::string against;              ///< "the reference interpreter" or the output_N.pb path
};

/// What a functional run feeds the chips and checks at the end.
struct FunctionalSetup {
  sim::FunctionalOptions options;
  std::vector<OutputCheck> outputs;
};

/// Where functional values come from: seeded, or ONNX TensorProto files (the backend test layout).
struct FunctionalSources {
  std::uint64_t seed = 0;
  std::optional<std::string> inputsDir;  ///< input_N.pb for graph input N
  std::optional<std::string> expectDir;  ///< output_N.pb for graph output N
  /// The chip the programs were compiled for (its vector width decides which Conv inputs arrive
  /// window-gathered); null: the default chip.
  const topology::ChipSpec* chip = nullptr;
  /// The chips this process simulates: the resident values are those of their tensors, each dropped
  /// by the chip that makes its last placement (sim::TensorValues::placements). nullopt: every
  /// chip's, kept for the run.
  std::optional<std::vector<int>> localChips = std::nullopt;
};

/// Values are given to the chips, and outputs read back, in the lowering's storage order
/// (lower::storageGeometry): rows x cols row-major, where a conv graph's 4-D feature maps are
/// channels-last (N*H*W rows of C), a Conv's weights tap-major (kh*kw*Cin rows of Cout) and a Conv
/// input that arrives window-gathered is im2col (N*Ho*Wo rows of kh*kw*Cin, zero where padded).
/// Chooses the element type from the programs' tensors (all FP16 or all INT8), gives every resident
/// tensor its values (graph inputs from inputsDir or the seed; weights from their data, e.g. ONNX
/// initializers, or the seed), rounds them to the storage type, and computes the reference outputs
/// by interpreting the graph on those values (or reads them from expectDir). Errors: exit 1 for a
/// missing or misshapen .pb file, 2 for a tensor type functional mode does not compute. The graph
/// must outlive the setup: channels-last resident tensors are reordered from it when a chip places them.
Expected<FunctionalSetup> prepareFunctional(const ir::Graph& graph,
                                            const std::vector<std::shared_ptr<const isa::Program>>& programs,
                                            const FunctionalSources& sources);

/// The rounding depth of a tensor: the most ops on one path into it whose float result rounds a
/// computed value (ir::roundsItsResult; data movement and selections do not count), 0 for a leaf.
/// The FP16 and BF16 tolerances grow with its square root (sim::fp16TensorTolerance).
std::int64_t roundingDepth(const ir::Graph& graph, ir::TensorId id, std::map<ir::TensorId, std::int64_t>& memo);

/// The longest reduction behind a tensor: K of the last MAC op on any path into it, or the taps of
/// an average pool (its sum of taps rounds once per tap), 1 for none (sim::fp16TensorTolerance's K).
std::int64_t reductionLength(const ir::Graph& graph, ir::TensorId id, std::map<ir::TensorId, std::int64_t>& memo);

/// Drops the graph's weight values once the setup holds them (its resident values, which the chips
/// drop as they place them), so that a run holds each weight once: in the graph until the setup is
/// made, then in the setup until its chip places it, then in SRAM.
void releaseGraphWeights(ir::Graph& graph);

/// The chip that holds a graph output at the end: the last chip whose program writes it, else the last
/// that holds it as an input or weight (-1: none).
int outputChip(const std::vector<std::shared_ptr<const isa::Program>>& programs, const std::string& name);

/// Reads each output this rank's chips hold and compares it with its reference (exit 6 naming the
/// output and its worst element). chipOf(chip) is the local chip object, or null for another rank's.
Status checkFunctionalOutputs(const FunctionalSetup& setup,
                              const std::vector<std::shared_ptr<const isa::Program>>& programs,
                              const std::function<const sim::Chip*(int)>& chipOf);

}  // namespace tsp::runtime
