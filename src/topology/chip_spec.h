// ChipSpec: every figure of the TSP machine model, filled from a preset and overridden from YAML.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/expected.h"
#include "support/units.h"

namespace YAML { class Node; }

namespace tsp::topology {

class YamlReader;

/// The kinds of functional unit an ICU queue can feed.
enum class UnitKind : std::uint8_t { kMem = 0, kVxm = 1, kMxm = 2, kSxm = 3, kC2c = 4 };
inline constexpr int kUnitKindCount = 5;

/// "MEM", "VXM", "MXM", "SXM" or "C2C".
const char* unitKindName(UnitKind kind);

/// How logical SRAM addresses are spread over banks (a compiler allocation policy, docs/machine-model.md).
enum class BankMapping : std::uint8_t { kLinear, kPrimeModulo, kXor };

/// One instruction queue of the ICU: the unit it feeds and where that unit sits on the east-west axis.
struct UnitInfo {
  UnitKind kind;
  int slice;        ///< position along the east-west axis, 0 = westmost.
  int indexInKind;  ///< 0-based among units of the same kind.
};

/// The machine model of one TSP (docs/machine-model.md). Fields are added with a version bump, never
/// silently re-purposed (version 2 added the C2C lane figures). The per-op energies came without a
/// bump: the version enters the hash, and figures that do not change timing must not invalidate programs.
struct ChipSpec {
  static constexpr int kInterfaceVersion = 2;

  std::string preset = "groq-tsp-v1";
  double clockMhz = 900.0;
  int superlanes = 20;
  int lanesPerSuperlane = 16;
  int vectorBytes = 320;
  int icuQueues = 144;
  int streamsPerDirection = 32;
  /// Eq. 4's N: an instruction ripples north through the superlanes; added once to the last completion.
  Cycle rippleCycles = 20;

  // MEM
  int memSlices = 88;
  int banksPerSlice = 2;
  int addressesPerSlice = 8192;
  BankMapping bankMapping = BankMapping::kPrimeModulo;
  int bankPrime = 173;
  Cycle memReadCycles = 2;   ///< d_func of a MEM read (assumed; docs/machine-model.md).
  Cycle memWriteCycles = 1;  ///< d_func of a MEM write (assumed).

  // VXM
  int vxmAluGroups = 16;
  Cycle vxmCycles = 4;  ///< d_func of a VXM ALU op (assumed).

  // MXM
  int mxmPlanes = 4;
  int mxmPlaneDim = 320;
  Cycle mxmWeightInstallCycles = 40;  ///< installing 320x320 weights in every plane (published: < 40).
  int mxmFp16RateDivisor = 4;         ///< FP16 runs at a quarter of the INT8 MAC rate.
  Cycle mxmCycles = 16;               ///< d_func of an MXM vector-matrix step (assumed).

  // SXM
  int sxmUnits = 16;
  Cycle sxmCycles = 4;  ///< d_func of a shift/permute/transpose (assumed).

  // C2C
  int c2cPorts = 16;
  Cycle c2cSendCycles = 8;      ///< d_func of a C2C send: stream to serdes (assumed).
  Cycle c2cReceiveCycles = 8;   ///< d_func of a C2C receive: serdes to stream (assumed).
  Cycle c2cForwardCycles = 12;  ///< per-hop cost of a transit chip forwarding a vector (assumed).
  double c2cFramingOverhead = 0.025;
  int c2cLanesPerLink = 4;              ///< serdes lanes per C2C link: the default of every link.
  double c2cGbpsPerLane = 30.0;         ///< lane rate on the board (node-local links).
  double c2cCabledGbpsPerLane = 28.0;   ///< lane rate over a cable (dragonfly rack and system links).

  /// Energy per operation (assumed 14 nm figures, docs/machine-model.md). Energy does not change
  /// timing, so it is left out of canonical(): a program stays valid when only these change.
  struct Energy {
    double memReadPj = 400;       ///< one 320-byte SRAM read
    double memWritePj = 450;      ///< one 320-byte SRAM write
    double streamHopPj = 65;      ///< one vector moving one slice on a stream register
    double vxmOpPj = 320;         ///< one ALU-group op on a vector (320 lanes, 32-bit)
    double mxmVectorPj = 10240;   ///< one vector through one plane (102,400 MACs at 0.1 pJ)
    double mxmInstallPj = 102400; ///< installing one plane's weights (1 pJ per weight byte)
    double sxmOpPj = 150;         ///< one shift/permute of a vector
    double c2cPjPerByte = 40;     ///< serdes and framing, 5 pJ/bit
    double staticWatts = 60;      ///< leakage and clock tree while the program runs
  } energy;

  /// Number of functional-slice positions on the east-west axis.
  int sliceCount() const;
  /// The ICU queue table: one entry per unit, in queue-id order (MEM, VXM, MXM, SXM, C2C).
  std::vector<UnitInfo> units() const;
  /// First queue id of a unit kind.
  int firstUnit(UnitKind kind) const;
  /// Number of queues of a unit kind.
  int unitCount(UnitKind kind) const;
  /// d_func of a unit kind, the cycles from issue to the result on a stream.
  Cycle dfunc(UnitKind kind) const;
  /// SRAM capacity of the whole chip in bytes.
  Bytes sramBytes() const { return Bytes{memSlices} * addressesPerSlice * vectorBytes; }
  /// INT8 multiply-accumulates per cycle over all planes.
  std::int64_t int8MacsPerCycle() const { return std::int64_t{mxmPlanes} * mxmPlaneDim * mxmPlaneDim; }
  /// Bank index of an SRAM address of one slice under the configured mapping.
  int bankOf(int address) const;

  /// A canonical text of every field; its hash identifies the chip a program was compiled for.
  std::string canonical() const;
  std::uint64_t hash() const;
};

/// The chip of a named preset ("groq-tsp-v1"); an error for an unknown name.
Expected<ChipSpec> chipPreset(const std::string& name);

/// Reads the `cluster.chip` section: a preset, then any field overridden; validated.
Expected<ChipSpec> loadChipSpec(const YamlReader& reader, const YAML::Node& node);

}  // namespace tsp::topology
