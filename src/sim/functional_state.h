// The values a functional-mode chip holds: SRAM contents per MEM slice and the MXM planes' weights and accumulators.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compile/ir/dtype.h"
#include "compile/isa/program.h"
#include "sim/accumulators.h"
#include "sim/chip.h"
#include "support/expected.h"
#include "topology/chip_spec.h"

namespace tsp::sim {

/// A run of vectors on a stream or a link: count x vector_bytes bytes, vector j at j x vector_bytes.
using VectorRun = std::shared_ptr<const std::vector<std::uint8_t>>;

/// The (MEM queue, address) of row `row` of tile `tile` in copy `replica` of a placement (Program v3:
/// entries copy x tile x segment).
std::pair<int, std::int64_t> vectorOf(const isa::TensorPlacement& tensor, int replica, int tile, std::int64_t row);

/// Rows [row0, row0 + rows) of a placement's first copy as a placement of their own (every tile),
/// for reading a large tensor a block at a time; the rows must lie in one segment (segmentRows).
isa::TensorPlacement rowBlock(const isa::TensorPlacement& tensor, std::int64_t row0, std::int64_t rows);

/// An element of `type` at p as a double (FP16, BF16, FP32 bits; INT8, INT32, INT64 two's complement; bool 0/1).
double decodeElement(const std::uint8_t* p, ir::DType type);
/// Stores value at p in `type`: floats rounded to nearest even, integers wrapped, bool nonzero as 1.
void encodeElement(double value, ir::DType type, std::uint8_t* p);

/// A chip's SRAM bytes: every MEM slice's image at a fixed stride in one anonymous mapping, which
/// the kernel hands out zeroed at the first touch of each page, so that SRAM starts cleared, rows
/// never written take no resident memory, and a chip holds one mapping however many slices it writes
/// (one mapping per slice would reach vm.max_map_count at a few hundred chips per rank).
class SramImage {
 public:
  explicit SramImage(int slices) : slices_(slices) {}
  SramImage(const SramImage&) = delete;
  SramImage& operator=(const SramImage&) = delete;
  ~SramImage();
  /// Bytes each slice holds (0 until the first grow).
  std::size_t sliceBytes() const { return sliceBytes_; }
  std::uint8_t* slice(int s) { return data_ + static_cast<std::size_t>(s) * sliceBytes_; }
  const std::uint8_t* slice(int s) const { return data_ + static_cast<std::size_t>(s) * sliceBytes_; }
  /// Each slice holds at least `bytes` (the bytes held keep their values, the new ones are zero).
  void grow(std::size_t bytes);

 private:
  int slices_ = 0;
  std::uint8_t* data_ = nullptr;
  std::size_t sliceBytes_ = 0;
};

/// One chip's values in functional mode. Every function computes what one instruction does to its
/// operands with the Kokkos kernels of functional.h; errors name the instruction and are exit 2
/// (the program asks for something functional mode does not compute) or 5 (a malformed program).
class FunctionalState {
 public:
  FunctionalState(const topology::ChipSpec& spec, ElementType element);

  /// Elements per vector (160 FP16, 320 INT8).
  int lanes() const { return lanes_; }

  /// Sizes each MEM slice's image to the highest address the program's tensors use, once, so that
  /// the image is not grown (and copied) as writes reach higher addresses.
  void reserve(const isa::Program& program);
  /// Writes a tensor's values (rows x cols) into its tiles, rounded to the element type. With
  /// `consume` (the caller holds the only reference and reads them no more), the values' memory is
  /// given back a block of rows at a time as they are written, so that they are not held twice.
  Status place(const isa::TensorPlacement& tensor, const TensorValues& values, bool consume = false);
  /// Reads a tensor back (rows x cols, row-major).
  std::vector<double> read(const isa::TensorPlacement& tensor, std::int64_t cols) const;

  /// MemRead: the vectors at address + j*stride of the instruction's slice.
  VectorRun memRead(const isa::Instruction& inst) const;
  /// MemWrite: stores the vectors at address + j*stride.
  void memWrite(const isa::Instruction& inst, const std::vector<std::uint8_t>& vectors);
  /// VxmUnary / VxmBinary on the element type (b is read by binary functions only), or on the
  /// element types the instruction's operand names (FunctionalOperand::types). kAccumulate to
  /// kScaleAdd read the operand of `program` (an immediate, a named accumulator), any function its
  /// splatted lanes; kAccumulate returns no vectors, kEmit reads no source (a null).
  Expected<VectorRun> vxm(const isa::Instruction& inst, const isa::Program& program, const std::vector<std::uint8_t>* a,
                          const std::vector<std::uint8_t>* b);
  /// MxmInstall on plane: loads inst.weightRows weight vectors from the weight slice, zero past them;
  /// the computes that follow use the plane's accumulators from the first on.
  /// With `transposed`, weight vector r is column r of the tile (its lane k is weight row k).
  Status install(int plane, const isa::Instruction& inst, bool transposed = false);
  /// MxmCompute on plane: accumulates x times the plane's weights into the next accumulator; with a
  /// destination it emits the rows in the element type (FP32 rounded to FP16, INT32 wrapped to INT8)
  /// and clears that accumulator.
  Expected<VectorRun> compute(int plane, const isa::Instruction& inst, const std::vector<std::uint8_t>& x);
  /// A window tap's vectors for its output pixels (isa::WindowRead): `vectors` are the stream's, the
  /// result has one vector per output pixel (`count`), padding filled, lanes shifted. A pixel the
  /// stream does not carry is an error naming it (exit 2).
  Expected<std::vector<std::uint8_t>> windowTap(const isa::WindowRead& window, const std::vector<std::uint8_t>& vectors,
                                                std::int64_t count) const;
  /// SXM lanes: each vector's lanes moved down by operand.laneShift, operand.laneCount kept, the rest zero.
  VectorRun shiftLanes(const isa::FunctionalOperand& operand, const std::vector<std::uint8_t>& vectors) const;
  /// SXM permute: `count` vectors, rows operand.row0 + j of output tile operand.tile, each element
  /// read from its source's SRAM image as the operand's isa::ElementMap says; an index out of its
  /// table's range or a source no placement holds is an error naming them (exit 2).
  Expected<VectorRun> permute(const isa::Program& program, const isa::FunctionalOperand& operand,
                              std::int64_t count) const;
  /// Bytes per element of a placement: 4 or 8 for INT32 or INT64 index tensors, else the run's element type.
  int bytesOf(const isa::TensorPlacement& tensor) const;
  /// The window of an instruction's operand (null: none), of src or with `second` of src2; an index
  /// out of the program's tables is exit 5.
  static Expected<const isa::WindowRead*> windowOf(const isa::Instruction& inst, const isa::Program& program,
                                                   bool second = false);

 private:
  // A VXM op whose operand names the element types of its sources and result (mixed or not the
  // storage type): lanes decoded per type, computed on the INT32 or FP32 ALUs, stored in the result's type.
  Expected<VectorRun> typedVxm(const isa::Instruction& inst, const isa::FunctionalOperand& operand,
                               const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>* b) const;
  std::uint8_t* vectorAt(int slice, std::int64_t address);
  const std::uint8_t* vectorAt(int slice, std::int64_t address) const;
  int sliceOf(int memUnit) const;

  const topology::ChipSpec& spec_;
  ElementType element_;
  int vectorBytes_ = 0, lanes_ = 0;
  int memFirst_ = 0;
  SramImage sram_;                               // every MEM slice, sized to the slice's addresses
  std::vector<std::uint8_t> zeros_;              // one vector of zeros: what an address never written holds
  struct Accumulator {
    std::vector<float> fp32;  // rows x lanes
    std::vector<std::int32_t> int32;
    std::int64_t rows = 0;    // rows in the accumulator (0: empty)
  };
  struct Plane {
    std::vector<std::uint8_t> weights;  // lanes x lanes elements, row k = weight row k of the tile
    // One partial sum per row block streamed under one installed tile: the j-th compute after an
    // install adds to accumulator j (a group of short blocks keeps its sums apart, as the lowering
    // streams the group's blocks in the same order under every K tile).
    std::vector<Accumulator> accumulators;
    std::size_t next = 0;
  };
  std::vector<Plane> planes_;
  AccumulatorBank accumulators_;
};

}  // namespace tsp::sim
