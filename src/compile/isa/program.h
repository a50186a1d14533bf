// The Program: one chip's cycle-stamped instruction list, the contract between compiler and simulator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/expected.h"
#include "support/units.h"
#include "topology/chip_spec.h"

namespace tsp::isa {

/// Program format version; the on-disk form records it and the simulator refuses others.
/// Version 2 added the tensor placement table and the binary form; version 3 tile segments and
/// replicas (TensorPlacement::segmentRows, replicas).
inline constexpr int kProgramVersion = 3;

/// Instruction opcodes. Each runs on a unit of one kind (unitKindOf).
enum class Opcode : std::uint8_t {
  kNop,         ///< any unit: wait; busy for repeat*interval cycles
  kMemRead,     ///< MEM: SRAM vector at address (+stride per repeat) onto dst stream
  kMemWrite,    ///< MEM: src stream vector into SRAM at address (+stride per repeat)
  kVxmUnary,    ///< VXM: func(src) onto dst
  kVxmBinary,   ///< VXM: func(src, src2) onto dst
  kMxmInstall,  ///< MXM install queue: load a weight tile from SRAM into the plane's buffer
  kMxmCompute,  ///< MXM compute queue: src vector x installed weights; dst set on the last K tile
  kSxmShift,    ///< SXM: shift/permute src onto dst
  kC2cSend,     ///< C2C: src stream vector out of port
  kC2cReceive,  ///< C2C: vector arrived on port onto dst stream
  kC2cForward,  ///< C2C, on the queue of the port vectors arrive on: pass them on out of `port`, using no
                ///< streams (a transit chip of a multi-hop route; c2c.forward_cycles)
  kCount
};

/// Name of an opcode ("MemRead", ...); the order is the trace's opcode_names.
const char* opcodeName(Opcode op);
/// Unit kind that executes an opcode (kNop: any).
topology::UnitKind unitKindOf(Opcode op);

/// Functions of the VXM ALUs.
enum class VxmFunc : std::uint8_t { kNone, kAdd, kSub, kMul, kRelu, kGelu, kTanh, kExp, kRsqrt, kConvert };

/// What an SXM instruction does to each vector in functional mode. kUnspecified: the lowering gives
/// only its timing (a permute it does not spell out), which functional mode refuses.
enum class SxmFunc : std::uint8_t { kUnspecified, kCopy };

/// Stream directions along the east-west axis.
enum class Direction : std::uint8_t { kEast = 0, kWest = 1 };

/// A stream register operand; id < 0 means none.
struct StreamRef {
  std::int16_t id = -1;
  Direction dir = Direction::kEast;
  bool valid() const { return id >= 0; }
  friend bool operator==(const StreamRef&, const StreamRef&) = default;
};

/// One instruction: issued on `unit` at `issue` (superlane 0, relative to the program start),
/// repeated `repeat` times every `interval` cycles, advancing `address` by `stride` each time.
struct Instruction {
  std::int32_t unit = 0;
  Cycle issue = 0;
  Opcode op = Opcode::kNop;
  VxmFunc func = VxmFunc::kNone;
  // What functional mode needs beyond the timing (defaults: not known); the two bytes sit here and
  // the two words at the end so that an instruction stays 64 bytes.
  SxmFunc sxm = SxmFunc::kUnspecified;  ///< SxmShift: what it does to a vector
  bool timingOnly = false;       ///< stands in for an op's cost without computing its values (Div as a Mul, ...)
  StreamRef src, src2, dst;
  std::int32_t address = -1;  ///< SRAM address within the unit's MEM slice
  std::int32_t bank = -1;     ///< bank of the first address under the chip's bank mapping
  std::int32_t stride = 0;
  std::int32_t port = -1;     ///< C2C port
  std::int32_t repeat = 1;
  std::int32_t interval = 1;
  std::int32_t weightUnit = -1;  ///< MxmInstall: the MEM queue whose slice holds the weight tile at `address`
  std::int32_t weightRows = 0;   ///< MxmInstall: weight vectors (K rows) the tile has; the plane's rows past it are zero
  /// True when one of the functional fields above differs from its default.
  bool hasFunctionalFields() const {
    return weightUnit >= 0 || weightRows != 0 || sxm != SxmFunc::kUnspecified || timingOnly;
  }
  friend bool operator==(const Instruction&, const Instruction&) = default;
};

/// Cycles from an instruction's issue to its result (d_func), taken from the chip spec: the one
/// latency table shared by compiler and simulator.
Cycle resultLatency(const topology::ChipSpec& chip, const Instruction& inst);
/// Cycles a unit stays busy for one repeat iteration of an instruction.
Cycle busyPerIssue(const topology::ChipSpec& chip, const Instruction& inst);
/// Cycle at which the last repeat iteration's result is ready.
Cycle completion(const topology::ChipSpec& chip, const Instruction& inst);
/// First cycle at which the unit may issue again.
Cycle unitFreeAt(const topology::ChipSpec& chip, const Instruction& inst);

/// Where one tensor sits in SRAM: `tiles` column blocks of `rows` vectors each, tile t at
/// (memUnit[t], address[t]) with consecutive addresses per row. Functional mode reads values from here.
struct TensorPlacement {
  std::string name;          ///< the graph tensor's name
  std::int32_t dtype = 0;    ///< ir::DType as an integer (isa does not depend on the IR)
  std::int64_t rows = 0;
  std::int32_t tiles = 0;
  /// Rows per MEM slice when a tile is longer than a slice (0: each tile on one slice). Tile t's
  /// segment g holds rows [g*segmentRows, (g+1)*segmentRows); memUnit and address then have one
  /// entry per (tile, segment), index t * segments + g.
  std::int64_t segmentRows = 0;
  /// Identical copies of the tensor (a small broadcast operand read by several MXM planes or ALUs at
  /// once, or a feature map read once per tap of a window op, whose producer writes every copy from
  /// one stream); memUnit and address hold replicas x tiles x segments entries, copy-major.
  std::int32_t replicas = 1;
  std::vector<std::int32_t> memUnit;  ///< MEM queue id of each tile (or tile segment)
  std::vector<std::int32_t> address;  ///< first address of each tile (or tile segment)
  bool resident = false;     ///< in SRAM before the program starts (a weight or a graph input)
  friend bool operator==(const TensorPlacement&, const TensorPlacement&) = default;
};

/// One chip's program. Carries no end cycles: the simulator derives them from the chip spec.
struct Program {
  int version = kProgramVersion;
  std::uint64_t chipSpecHash = 0;
  std::vector<Instruction> instructions;  ///< ordered by (issue, unit)
  Cycle predictedCycles = 0;              ///< compiler's prediction of the chip's completion
  Cycle lowerBoundCycles = 0;             ///< a bound no schedule can beat (busiest unit)
  Bytes sramBytes = 0;                    ///< SRAM the program allocates
  std::vector<TensorPlacement> tensors;   ///< every tensor the program keeps in SRAM, by name

  /// Content hash: identical shards share one program.
  std::uint64_t contentHash() const;
  friend bool operator==(const Program&, const Program&) = default;
};

/// Sorts instructions by (issue, unit).
void canonicalize(Program& program);

/// The versioned on-disk form (JSON).
std::string serialize(const Program& program);
/// Reads the on-disk form; refuses another version or a program made for another chip.
Expected<Program> deserialize(const std::string& text, const topology::ChipSpec& chip, const std::string& file);

/// The compact binary on-disk form (little-endian, magic "TSPPROG\0", same content as the JSON form).
std::string serializeBinary(const Program& program);
/// Reads the binary form; the same refusals as deserialize().
Expected<Program> deserializeBinary(const std::string& bytes, const topology::ChipSpec& chip, const std::string& file);

/// A readable listing, one instruction a line with its unit's kind, index and slice (not read back).
std::string toText(const Program& program, const topology::ChipSpec& chip);

}  // namespace tsp::isa
