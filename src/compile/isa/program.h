// The Program: one chip's cycle-stamped instruction list, the contract between compiler and simulator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "support/expected.h"
#include "support/units.h"
#include "topology/chip_spec.h"

namespace tsp::isa {

/// Program format version; the on-disk form records it and the simulator refuses others.
/// Version 2 added the tensor placement table and the binary form; version 3 tile segments and
/// replicas (TensorPlacement::segmentRows, replicas); version 4 the op origins (Program::origins, originOf).
inline constexpr int kProgramVersion = 4;

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

/// Functions of the VXM ALUs. Every function takes one ALU pass (the latency table does not depend
/// on it); kAccumulate to kScaleAdd read their instruction's FunctionalOperand (Program::operands),
/// and any function may carry one (splatted lanes, element types).
enum class VxmFunc : std::uint8_t {
  kNone, kAdd, kSub, kMul, kRelu, kGelu, kTanh, kExp, kRsqrt, kConvert,
  kDiv,         ///< a / b (INT8: truncating, a / 0 = 0)
  kSigmoid,     ///< 1 / (1 + exp(-a))
  kSqrt,        ///< sqrt(a)
  kErf,         ///< erf(a)
  kPow,         ///< a ^ b (INT8: repeated multiplication, wrapping)
  kMax,         ///< max(a, b)
  kAccumulate,  ///< folds src into the operand's accumulator (sum, max, softmax or moment statistics); no result
  kEmit,        ///< the operand's accumulator values (a reduction's output rows) onto dst; no source
  kNormalize,   ///< src by its elements' statistics: exp(a - max) / sum (softmax), (a - mean) / sqrt(var + eps)
  kScaleAdd,    ///< a * operand.immediate + b * operand.immediate2 (Gemm's alpha and beta)
  kEqual,       ///< 1 where a == b, else 0 (a bool result)
  kMaskSet,     ///< a where the lane mask b is nonzero, else 0 (one half of a select)
  kMaskClear,   ///< a where the lane mask b is zero, else 0 (the other half of a select)
  kNeg, kAbs, kReciprocal, kFloor, kCeil, kLog, kSin, kCos,
  kNot,         ///< 1 where a is 0, else 0
  kSoftplus,    ///< log(1 + exp(a))
  kLeakyRelu,   ///< a >= 0 ? a : immediate * a
  kElu,         ///< a > 0 ? a : immediate * (exp(a) - 1)
  kHardSigmoid, ///< clamp(immediate * a + immediate2, 0, 1)
  kHardSwish,   ///< a * clamp(a / 6 + 1/2, 0, 1)
  kMin,         ///< min(a, b)
  kMod,         ///< a mod b with the divisor's sign (ONNX Mod, fmod = 0)
  kFmod,        ///< a mod b with the dividend's sign (C's fmod; ONNX Mod, fmod = 1)
  kLess, kGreater, kLessOrEqual, kGreaterOrEqual,  ///< 1 where the comparison holds, else 0
  kAnd, kOr,    ///< logical, on nonzero lanes
};
/// The last VxmFunc (the on-disk forms refuse larger codes).
inline constexpr VxmFunc kLastVxmFunc = VxmFunc::kOr;
/// Lower-case name of a VXM function ("add", ...; "" for kNone).
const char* vxmFuncName(VxmFunc func);

/// What an SXM instruction does to each vector in functional mode. kUnspecified: the lowering gives
/// only its timing (a permute it does not spell out), which functional mode refuses.
enum class SxmFunc : std::uint8_t {
  kUnspecified,
  kCopy,
  kWindow,  ///< the vectors of one window tap realigned to their output pixels, lanes shifted (its operand's window)
  kLanes,   ///< each vector's lanes moved down by the operand's laneShift (up when negative), laneCount kept
  kPermute, ///< output vectors re-formed element by element from their sources (the operand's ElementMap)
};

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
  /// VXM, MXM compute, SXM: index of the instruction's FunctionalOperand in Program::operands (-1: none). It sits in the
  /// padding after `unit`, so that an instruction stays 64 bytes.
  std::int32_t operand = -1;
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
  /// MEM: address step per repeat. C2cSend: the vectors of its stream sent before it (0: a stream of
  /// its own); m > 0 continues the link's stream of m vectors, entering the link the cycle its
  /// previous burst leaves it at the same spacing (topology::streamCycles).
  std::int32_t stride = 0;
  std::int32_t port = -1;     ///< C2C port
  std::int32_t repeat = 1;
  std::int32_t interval = 1;
  std::int32_t weightUnit = -1;  ///< MxmInstall: the MEM queue whose slice holds the weight tile at `address`
  std::int32_t weightRows = 0;   ///< MxmInstall: weight vectors (K rows) the tile has; the plane's rows past it are zero
  /// True when one of the functional fields above differs from its default.
  bool hasFunctionalFields() const {
    return weightUnit >= 0 || weightRows != 0 || sxm != SxmFunc::kUnspecified || timingOnly || operand >= 0;
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

/// What a VXM instruction reads beyond its streams (functional mode; the timing ignores it).
struct FunctionalOperand {
  std::int32_t accumulator = -1;  ///< Program::accumulators index (kAccumulate, kEmit, kNormalize)
  std::int32_t tile = 0;          ///< the tile (column block) of the instruction's vectors
  std::int64_t row0 = 0;          ///< the storage row of vector 0; vector j is row row0 + j
  float immediate = 0.0f;         ///< kScaleAdd's factor of a
  float immediate2 = 1.0f;        ///< kScaleAdd's factor of b
  bool splatA = false;            ///< lane 0 of src stands for every lane (a one-value-per-row operand)
  bool splatB = false;            ///< the same for src2
  std::int32_t window = -1;       ///< Program::windows index: src is one tap of a window read (below)
  bool transposed = false;        ///< MxmInstall: the weight vectors are the tile's columns (Gemm transB)
  std::int32_t laneShift = 0;     ///< SXM lanes: out lane l is in lane l + laneShift (a Split down, a Concat up)
  std::int32_t laneCount = 0;     ///< SXM lanes: lanes kept (the rest zero)
  std::int32_t window2 = -1;      ///< Program::windows index: src2 is one tap of a window read (two taps folded)
  std::int32_t map = -1;          ///< SXM permute: Program::maps index; the vectors are rows row0 + j of tile `tile`
  /// VXM: the element types of src, src2 and the result, one byte each from the low one (ir::DType
  /// + 1; 0: the run's storage type), for an op whose tensors are not all of the storage type.
  std::uint32_t types = 0;
  friend bool operator==(const FunctionalOperand&, const FunctionalOperand&) = default;
};

/// FunctionalOperand::types from the three element types (ir::DType as integers).
inline std::uint32_t packElementTypes(int a, int b, int out) {
  return static_cast<std::uint32_t>(a + 1) | (static_cast<std::uint32_t>(b + 1) << 8) |
         (static_cast<std::uint32_t>(out + 1) << 16);
}
/// Slot k (0 src, 1 src2, 2 result) of FunctionalOperand::types as an ir::DType integer, or -1 for
/// the run's storage type.
inline int elementTypeOf(std::uint32_t types, int k) { return static_cast<int>((types >> (8 * k)) & 0xffu) - 1; }

/// One tap of a window read (a Conv or pooling op over a channels-last map, pixels as rows): which
/// stream vector holds each output pixel's input pixel. Vector j of the instruction stands for
/// output pixel q = pixel0 + j (image, oy, ox); its tap reads input pixel (oy*sh + ky*dh - pt,
/// ox*sw + kx*dw - pl), which is padding outside the map (every value `fill` in the first `lanes`
/// lanes, zero past them) and otherwise stream vector (p - first) / stride, p its pixel index;
/// then the lanes move up by laneShift (packed taps). A pixel the stream does not carry is refused.
struct WindowRead {
  std::int64_t h = 1, w = 1, ho = 1, wo = 1;
  std::int64_t sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0;
  std::int64_t ky = 0, kx = 0;
  std::int64_t pixel0 = 0;  ///< output pixel of vector 0
  std::int64_t first = 0;   ///< input pixel of the stream's vector 0
  std::int64_t stride = 1;  ///< input pixels between stream vectors
  std::int32_t laneShift = 0;
  std::int32_t lanes = 0;   ///< lanes that hold values (the channels)
  float fill = 0.0f;        ///< a padding tap's value (0 for a Conv, the lowest FP16 for a max)
  friend bool operator==(const WindowRead&, const WindowRead&) = default;
};

/// Which source element each output element of an SXM permute takes (Transpose, Reshape across
/// tile layouts, Slice, Concat or Split along a row axis, Gather). Output storage element (row r,
/// value c) is element f = r x outCols + c of the output in row-major order; its
/// coordinates over outDims give source axis s the coordinate starts[s] + steps[s] x out[from[s]]
/// (for a Gather's table axis `indexAxis`: the value of `indices` at the output coordinates
/// [indexAxis, indexAxis + indexDims.size())); their row-major index over the source's dimensions
/// is element (flat / cols, flat mod cols) of the source stored rows x cols (sourceCols). With several sources (Concat along `concatAxis`) source k holds
/// coordinates [offsets[k], offsets[k+1]) of that axis, and the coordinate is taken relative to it.
struct ElementMap {
  std::vector<std::string> sources;       ///< the placements read (graph tensor names)
  std::vector<std::int64_t> sourceDims;   ///< the sources' shapes, one after another (each sourceRank long)
  std::vector<std::int64_t> outDims;      ///< the output's shape
  std::int64_t outCols = 1;               ///< the output's values per storage row
  std::vector<std::int64_t> sourceCols;   ///< per source: its values per storage row
  std::vector<std::int64_t> from, starts, steps;  ///< per source axis (sourceRank of each)
  std::int32_t concatAxis = -1;           ///< the source axis the sources split (-1: one source)
  std::vector<std::int64_t> offsets;      ///< per source: its first coordinate along concatAxis
  std::string indices;                    ///< Gather: the placement of the row indices ("" none)
  std::vector<std::int64_t> indexDims;    ///< Gather: the indices' shape
  std::int32_t indexAxis = -1;            ///< Gather: the table axis the indices select
  friend bool operator==(const ElementMap&, const ElementMap&) = default;
};

/// The element of a Gather's indices that output element f (row-major over map.outDims) reads.
std::int64_t indexElementOf(const ElementMap& map, std::int64_t f);
/// Which source output element f takes: (source k, its element's row-major index over its shape);
/// a Gather's table axis takes `index` (the value at indexElementOf, in range).
std::pair<size_t, std::int64_t> sourceElementOf(const ElementMap& map, std::int64_t f, std::int64_t index = 0);

/// A tensor whose initial SRAM image is folded at compile time from graph tensors: inference
/// BatchNormalization into a Conv's weights (column co of the tap-major weights times scale[co]) and
/// into its shift (the bias the epilogue adds), scale = gamma / sqrt(var + epsilon), shift =
/// beta - mean * scale. For INT8 storage scale and shift are rounded to integers (ties to even),
/// as the reference interpreter's INT8 BatchNormalization defines them, and weights wrap.
struct WeightFold {
  enum class Kind : std::uint8_t { kWeights, kShift, kScale };
  std::string tensor;  ///< the placement the folded values go to
  Kind kind = Kind::kWeights;
  std::string source;  ///< kWeights: the Conv weight the tensor holds folded
  std::string gamma, beta, mean, var;
  double epsilon = 1e-5;
  friend bool operator==(const WeightFold&, const WeightFold&) = default;
};

/// A named accumulator: the running values of one reduction or normalisation in the VXM, one per
/// output element. Input element (row, col) of a tensor stored as `dims` (the dimensions in storage
/// order, the last one the values per row) goes to the output element that drops the reduced
/// dimensions (row-major over the kept ones).
struct Accumulator {
  enum class Kind : std::uint8_t {
    kSum,      ///< sum (emitted divided by `divisor`: a mean)
    kMax,      ///< maximum
    kSoftmax,  ///< running maximum and sum of exp(x - maximum), one pass (Normalize reads them)
    kMoments,  ///< running mean and sum of squared deviations (Welford; Normalize reads them)
  };
  Kind kind = Kind::kSum;
  std::vector<std::int64_t> dims;      ///< the input's storage dimensions
  std::vector<std::uint8_t> reduced;   ///< per dimension: 1 when reduced
  std::int64_t outCols = 1;            ///< kEmit: values per output row
  std::int64_t divisor = 1;            ///< kEmit of a kSum: the sum is divided by it (a mean)
  double epsilon = 0.0;                ///< kMoments: added to the variance
  friend bool operator==(const Accumulator&, const Accumulator&) = default;
};

/// The model op an instruction comes from, for attributing time and traffic: an op the lowering
/// computed (`kind` its op kind), or a tensor it sent or received (`kind` "Send", "Receive") or a
/// collective moved ("Collective"), named by the op that produced the tensor.
struct OpOrigin {
  std::string op;           ///< the graph op's name
  std::string kind;         ///< op kind name, or Send, Receive, Collective
  std::int32_t layer = -1;  ///< the op's model layer (ir::Op::layer), -1: none
  std::string tensor;       ///< the tensor it writes or moves
  /// The tensor every MEM read of it reads, when an op makes it: a one-input op's or a collective's
  /// input, a Send's tensor; empty: none known. The simulator checks that it is written before it is read.
  std::string input;
  /// The op that made `input` (a graph input: its own name): an op's output and a neighbour's copy
  /// received under the same name are two tensors, told apart by their producers.
  std::string inputProducer;
  /// Which copy of `tensor` it writes and of `input` it reads: a training step's microbatch, a sharded
  /// plan's wave (one microbatch of one replica); -1: the only copy.
  std::int32_t instance = -1;
  friend bool operator==(const OpOrigin&, const OpOrigin&) = default;
  friend auto operator<=>(const OpOrigin&, const OpOrigin&) = default;
};

/// Instructions held once for several programs (a compiled training pass that many chips and
/// microbatches run), each program placing them at its own start cycle (ProgramPiece).
struct InstructionBody {
  std::vector<Instruction> instructions;  ///< ordered by (issue, unit), cycles from the body's start
  std::uint64_t hash = 0;                 ///< instructionsHash of the instructions
  /// Per instruction, its origin as an index into the placing piece's originMap (-1: none); empty: none known.
  std::vector<std::int32_t> originOf;
};

/// One placement of a shared body in a program: its instructions, `offset` cycles later.
struct ProgramPiece {
  std::shared_ptr<const InstructionBody> body;
  Cycle offset = 0;
  /// The body's origin ids as indices into Program::origins (one body placed for different ops).
  std::shared_ptr<const std::vector<std::int32_t>> originMap;
  friend bool operator==(const ProgramPiece&, const ProgramPiece&) = default;
};

/// One chip's program. Carries no end cycles: the simulator derives them from the chip spec.
struct Program {
  int version = kProgramVersion;
  std::uint64_t chipSpecHash = 0;
  std::vector<Instruction> instructions;  ///< ordered by (issue, unit)
  /// When not empty, the program's instructions are these pieces' (body after body, each shifted by
  /// its offset, together ordered by (issue, unit)) and `instructions` is empty: a chip running many
  /// instances of a few compiled passes holds each pass once (InstructionSequence reads them).
  std::vector<ProgramPiece> pieces;
  Cycle predictedCycles = 0;              ///< compiler's prediction of the chip's completion
  Cycle lowerBoundCycles = 0;             ///< a bound no schedule can beat (busiest unit)
  Bytes sramBytes = 0;                    ///< SRAM the program allocates
  std::vector<TensorPlacement> tensors;   ///< every tensor the program keeps in SRAM, by name
  std::vector<FunctionalOperand> operands;    ///< what VXM instructions read beyond their streams (Instruction::operand)
  std::vector<Accumulator> accumulators;  ///< the named accumulators FunctionalOperand::accumulator refers to
  std::vector<WindowRead> windows;        ///< the window taps FunctionalOperand::window refers to
  std::vector<WeightFold> folds;          ///< resident tensors whose values are folded from graph tensors
  std::vector<ElementMap> maps;           ///< the SXM permutes FunctionalOperand::map refers to
  /// The ops the lowering timed without computing their values ("node: reason"): functional mode
  /// refuses the program before it runs (exit 2).
  std::vector<std::string> refusals;
  /// The ops the instructions come from (a names table) and, parallel to `instructions`, each one's
  /// index into it (-1: none); originOf is empty when no origin is known (or the program has pieces).
  std::vector<OpOrigin> origins;
  std::vector<std::int32_t> originOf;

  /// Content hash: identical shards share one program.
  std::uint64_t contentHash() const;
  /// Instructions, in `instructions` or in the pieces.
  std::int64_t instructionCount() const;
  friend bool operator==(const Program&, const Program&) = default;
};

/// A content hash of an instruction list (every field; the body of a ProgramPiece).
std::uint64_t instructionsHash(const std::vector<Instruction>& instructions);
/// A shared body of the instructions, their hash computed (with their origin ids, if any).
std::shared_ptr<const InstructionBody> makeBody(std::vector<Instruction> instructions,
                                                std::vector<std::int32_t> originOf = {});
/// The program with its pieces written out into `instructions` (a program without pieces as it is).
Program expanded(const Program& program);

/// The instructions of a program in order, read in place from `instructions` or from its pieces
/// (a piece's instruction with its offset added). Indexing is fastest in order.
class InstructionSequence {
 public:
  /// The program must outlive the sequence.
  explicit InstructionSequence(const Program& program);
  /// Number of instructions.
  size_t size() const { return size_; }
  /// Instruction i, its issue cycle absolute.
  Instruction operator[](size_t i) const;
  /// Instruction i's index into Program::origins, or -1.
  std::int32_t originOf(size_t i) const;

 private:
  const Program* program_;
  std::vector<size_t> starts_;  // per piece: index of its first instruction
  size_t size_ = 0;
  mutable size_t piece_ = 0;    // the piece of the last index read
  // Makes piece_ the piece holding instruction i (pieces only).
  void seek(size_t i) const;
};

/// Names every instruction of a program (without pieces) as serving one op (a collective's chains).
void attributeAll(Program& program, const OpOrigin& origin);

/// Sorts instructions by (issue, unit), their origins with them.
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
