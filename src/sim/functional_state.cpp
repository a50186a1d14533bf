// Functional-mode values of one chip: SRAM per MEM slice, MXM plane weights and accumulators, instruction semantics.
#include "sim/functional_state.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

#include <Kokkos_Core.hpp>

#include <fmt/format.h>

#include "compile/ir/dtype.h"
#include "sim/functional.h"

namespace tsp::sim {

using isa::Instruction;

namespace {

std::vector<std::uint16_t> asHalves(const std::uint8_t* bytes, std::size_t count) {
  std::vector<std::uint16_t> out(count);
  std::memcpy(out.data(), bytes, count * sizeof(std::uint16_t));
  return out;
}

std::shared_ptr<std::vector<std::uint8_t>> fromHalves(const std::vector<std::uint16_t>& halves) {
  auto out = std::make_shared<std::vector<std::uint8_t>>(halves.size() * sizeof(std::uint16_t));
  std::memcpy(out->data(), halves.data(), out->size());
  return out;
}

std::vector<std::int32_t> widen(const std::uint8_t* bytes, std::size_t count) {
  std::vector<std::int32_t> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<std::int8_t>(bytes[i]);
  return out;
}

// INT32 lanes to INT8 storage: two's-complement wrap (the low byte), as the interpreter wraps.
std::shared_ptr<std::vector<std::uint8_t>> narrow(const std::vector<std::int32_t>& lanes) {
  auto out = std::make_shared<std::vector<std::uint8_t>>(lanes.size());
  for (std::size_t i = 0; i < lanes.size(); ++i) (*out)[i] = static_cast<std::uint8_t>(lanes[i] & 0xff);
  return out;
}

// Integer element types (and bool) compute on the INT32 ALUs; the float ones in FP32.
bool integerType(ir::DType t) { return t == ir::DType::kI8 || t == ir::DType::kI32 || t == ir::DType::kI64 || t == ir::DType::kBool; }

// An integer lane's value from a float the way the IR converts (toward zero; NaN gives 0).
std::int32_t truncated(double v) {
  if (!(v == v)) return 0;
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::int64_t>(std::max(-9.2e18, std::min(9.2e18, v)))));
}

}  // namespace

double decodeElement(const std::uint8_t* p, ir::DType type) {
  switch (type) {
    case ir::DType::kF16: { std::uint16_t h; std::memcpy(&h, p, sizeof h); return halfToFloat(h); }
    case ir::DType::kBF16: { std::uint16_t h; std::memcpy(&h, p, sizeof h); return bf16ToFloat(h); }
    case ir::DType::kF32: { float f; std::memcpy(&f, p, sizeof f); return f; }
    case ir::DType::kI8: return static_cast<std::int8_t>(*p);
    case ir::DType::kBool: return *p != 0 ? 1.0 : 0.0;
    case ir::DType::kI32: { std::int32_t i; std::memcpy(&i, p, sizeof i); return i; }
    case ir::DType::kI64: { std::int64_t i; std::memcpy(&i, p, sizeof i); return static_cast<double>(i); }
  }
  return 0.0;
}

void encodeElement(double value, ir::DType type, std::uint8_t* p) {
  switch (type) {
    case ir::DType::kF16: { const std::uint16_t h = floatToHalf(static_cast<float>(value)); std::memcpy(p, &h, sizeof h); return; }
    case ir::DType::kBF16: { const std::uint16_t h = floatToBf16(static_cast<float>(value)); std::memcpy(p, &h, sizeof h); return; }
    case ir::DType::kF32: { const auto f = static_cast<float>(value); std::memcpy(p, &f, sizeof f); return; }
    case ir::DType::kBool: *p = value != 0.0 ? 1 : 0; return;
    case ir::DType::kI8: case ir::DType::kI32: case ir::DType::kI64: {
      // Little-endian two's complement, wrapped to the type's width.
      const auto i = static_cast<std::int64_t>(value);
      std::memcpy(p, &i, static_cast<std::size_t>(ir::dtypeBytes(type)));
      return;
    }
  }
}

int elementBytes(ElementType type) { return type == ElementType::kFp16 ? 2 : 1; }

FunctionalState::FunctionalState(const topology::ChipSpec& spec, ElementType element)
    : spec_(spec), element_(element), vectorBytes_(spec.vectorBytes), lanes_(spec.vectorBytes / elementBytes(element)),
      memFirst_(spec.firstUnit(topology::UnitKind::kMem)), sram_(spec.memSlices),
      accumulators_(element, spec.vectorBytes / elementBytes(element)) {
  zeros_.assign(static_cast<std::size_t>(vectorBytes_), 0);
  planes_.resize(spec.mxmPlanes);
  for (auto& p : planes_) p.weights.assign(static_cast<std::size_t>(lanes_) * lanes_ * elementBytes(element), 0);
}

int FunctionalState::sliceOf(int memUnit) const { return memUnit - memFirst_; }

std::pair<int, std::int64_t> vectorOf(const isa::TensorPlacement& tensor, int replica, int tile, std::int64_t row) {
  const std::int64_t segRows = tensor.segmentRows > 0 ? tensor.segmentRows : std::max<std::int64_t>(1, tensor.rows);
  const std::int64_t segments = (tensor.rows + segRows - 1) / segRows;
  const auto piece = static_cast<std::size_t>((std::int64_t{replica} * tensor.tiles + tile) * segments + row / segRows);
  return {tensor.memUnit.at(piece), tensor.address.at(piece) + row % segRows};
}

SramImage::~SramImage() {
  if (data_) munmap(data_, sliceBytes_ * static_cast<std::size_t>(slices_));
}

void SramImage::grow(std::size_t bytes) {
  if (bytes <= sliceBytes_) return;
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  bytes = (bytes + page - 1) / page * page;
  // MAP_NORESERVE: the address space of the whole SRAM is not charged against the commit limit,
  // only the pages written are.
  void* p = mmap(nullptr, bytes * static_cast<std::size_t>(slices_), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  auto* fresh = static_cast<std::uint8_t*>(p);
  if (data_) {
    for (int s = 0; s < slices_; ++s) std::memcpy(fresh + static_cast<std::size_t>(s) * bytes, slice(s), sliceBytes_);
    munmap(data_, sliceBytes_ * static_cast<std::size_t>(slices_));
  }
  data_ = fresh;
  sliceBytes_ = bytes;
}

isa::TensorPlacement rowBlock(const isa::TensorPlacement& tensor, std::int64_t row0, std::int64_t rows) {
  isa::TensorPlacement block = tensor;
  block.rows = rows;
  block.segmentRows = 0;
  block.replicas = 1;
  block.memUnit.clear();
  block.address.clear();
  for (int t = 0; t < tensor.tiles; ++t) {
    const auto [unit, address] = vectorOf(tensor, 0, t, row0);
    block.memUnit.push_back(unit);
    block.address.push_back(static_cast<std::int32_t>(address));
  }
  return block;
}

std::uint8_t* FunctionalState::vectorAt(int slice, std::int64_t address) {
  if (slice < 0 || slice >= spec_.memSlices) throw std::out_of_range(fmt::format("MEM slice {}", slice));
  const std::size_t end = static_cast<std::size_t>(address + 1) * vectorBytes_;
  // The whole slice at once: the image is not grown (and copied) as writes reach higher addresses.
  if (sram_.sliceBytes() < end)
    sram_.grow(std::max(end, static_cast<std::size_t>(spec_.addressesPerSlice) * vectorBytes_));
  return sram_.slice(slice) + static_cast<std::size_t>(address) * vectorBytes_;
}

const std::uint8_t* FunctionalState::vectorAt(int slice, std::int64_t address) const {
  if (slice < 0 || slice >= spec_.memSlices) throw std::out_of_range(fmt::format("MEM slice {}", slice));
  const std::size_t end = static_cast<std::size_t>(address + 1) * vectorBytes_;
  // Never written: SRAM starts cleared.
  return sram_.sliceBytes() < end ? zeros_.data() : sram_.slice(slice) + static_cast<std::size_t>(address) * vectorBytes_;
}

void FunctionalState::reserve(const isa::Program& program) {
  std::int64_t end = 0;  // vectors: the highest address any tensor's piece reaches
  for (const auto& tensor : program.tensors) {
    const std::int64_t segRows = tensor.segmentRows > 0 ? tensor.segmentRows : std::max<std::int64_t>(1, tensor.rows);
    for (size_t piece = 0; piece < tensor.memUnit.size() && piece < tensor.address.size(); ++piece) {
      const int slice = sliceOf(tensor.memUnit[piece]);
      if (slice >= 0 && slice < spec_.memSlices) end = std::max(end, tensor.address[piece] + segRows);
    }
  }
  if (end > 0)
    sram_.grow(static_cast<std::size_t>(std::max<std::int64_t>(end, spec_.addressesPerSlice)) *
               static_cast<std::size_t>(vectorBytes_));
}

int FunctionalState::bytesOf(const isa::TensorPlacement& tensor) const {
  return ir::dtypeBytes(static_cast<ir::DType>(tensor.dtype));
}

Status FunctionalState::place(const isa::TensorPlacement& tensor, const TensorValues& values, bool consume) {
  const std::int64_t cols = values.cols;
  if (!values.data)
    return makeError(ExitCode::kInternal, fmt::format("functional mode: no values for '{}'", tensor.name));
  const TensorData& data = *values.data;
  const std::size_t count = values.source ? static_cast<std::size_t>(values.stored) : data.size();
  const auto element = [&](std::size_t i) {
    return values.map ? values.map(static_cast<std::int64_t>(i), data[i]) : data[i];
  };
  const auto value = [&](std::size_t i) {
    if (!values.source) return element(i);
    const std::int64_t from = values.source(static_cast<std::int64_t>(i));
    return from < 0 ? 0.0 : element(static_cast<std::size_t>(from));
  };
  const int eb = bytesOf(tensor);
  const int lanes = vectorBytes_ / eb;
  if (cols <= 0 || static_cast<std::int64_t>(count) != tensor.rows * cols || (cols + lanes - 1) / lanes > tensor.tiles)
    return makeError(ExitCode::kInternal,
                     fmt::format("functional mode: {} values of '{}' do not fill its placement of {} rows x {} tiles",
                                 count, tensor.name, tensor.rows, tensor.tiles));
  const int copies = std::max(1, tensor.replicas);
  // Rows written between two discards of the values' memory (about 1 MiB of values).
  const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t{1} << 20) / std::max<std::int64_t>(1, cols * 2));
  for (int copy = 0; copy < copies; ++copy)
    for (std::int64_t r = 0; r < tensor.rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const auto [unit, address] = vectorOf(tensor, copy, static_cast<int>(c / lanes), r);
        std::uint8_t* v = vectorAt(sliceOf(unit), address) + (c % lanes) * eb;
        encodeElement(value(static_cast<std::size_t>(r * cols + c)), static_cast<ir::DType>(tensor.dtype), v);
      }
      if (consume && !values.source && copy + 1 == copies && ((r + 1) % block == 0 || r + 1 == tensor.rows))
        values.data->discard(static_cast<std::size_t>((r - r % block) * cols),
                             static_cast<std::size_t>((r + 1) * cols));
    }
  return {};
}

std::vector<double> FunctionalState::read(const isa::TensorPlacement& tensor, std::int64_t cols) const {
  std::vector<double> out(static_cast<std::size_t>(tensor.rows * cols));
  const int eb = bytesOf(tensor);
  const int lanes = vectorBytes_ / eb;
  for (std::int64_t r = 0; r < tensor.rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto [unit, address] = vectorOf(tensor, 0, static_cast<int>(c / lanes), r);
      const std::uint8_t* v = vectorAt(sliceOf(unit), address) + (c % lanes) * eb;
      out[static_cast<std::size_t>(r * cols + c)] = decodeElement(v, static_cast<ir::DType>(tensor.dtype));
    }
  return out;
}

VectorRun FunctionalState::memRead(const Instruction& inst) const {
  auto out = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(inst.repeat) * vectorBytes_);
  for (std::int32_t j = 0; j < inst.repeat; ++j)
    std::memcpy(out->data() + static_cast<std::size_t>(j) * vectorBytes_,
                vectorAt(sliceOf(inst.unit), inst.address + std::int64_t{j} * inst.stride), vectorBytes_);
  return out;
}

void FunctionalState::memWrite(const Instruction& inst, const std::vector<std::uint8_t>& vectors) {
  for (std::int32_t j = 0; j < inst.repeat; ++j)
    std::memcpy(vectorAt(sliceOf(inst.unit), inst.address + std::int64_t{j} * inst.stride),
                vectors.data() + static_cast<std::size_t>(j) * vectorBytes_, vectorBytes_);
}

namespace {

// Lane 0 of every vector repeated over its lanes (an operand with one value per row).
std::vector<std::uint8_t> splat(const std::vector<std::uint8_t>& vectors, int vectorBytes, int eb) {
  std::vector<std::uint8_t> out(vectors.size());
  for (std::size_t v = 0; v < vectors.size(); v += static_cast<std::size_t>(vectorBytes))
    for (int l = 0; l < vectorBytes; l += eb) std::memcpy(out.data() + v + l, vectors.data() + v, static_cast<std::size_t>(eb));
  return out;
}

}  // namespace

Expected<VectorRun> FunctionalState::vxm(const Instruction& inst, const isa::Program& program,
                                         const std::vector<std::uint8_t>* a, const std::vector<std::uint8_t>* b) {
  const int eb = elementBytes(element_);
  const isa::FunctionalOperand* operand = nullptr;
  if (inst.operand >= 0) {
    if (inst.operand >= static_cast<std::int32_t>(program.operands.size()))
      return makeError(ExitCode::kInternal, fmt::format("operand {} is not in the program's table of {}", inst.operand,
                                                        program.operands.size()));
    operand = &program.operands[static_cast<size_t>(inst.operand)];
  }
  const bool accumulates = inst.func == isa::VxmFunc::kAccumulate || inst.func == isa::VxmFunc::kEmit ||
                           inst.func == isa::VxmFunc::kNormalize;
  if (accumulates || inst.func == isa::VxmFunc::kScaleAdd) {
    if (!operand || (accumulates && (operand->accumulator < 0 ||
                                     operand->accumulator >= static_cast<std::int32_t>(program.accumulators.size()))))
      return makeError(ExitCode::kInternal, fmt::format("VXM function {} without its operand or accumulator",
                                                        isa::vxmFuncName(inst.func)));
  }
  if (inst.func == isa::VxmFunc::kEmit) {
    auto out = accumulators_.emit(operand->accumulator, program.accumulators[static_cast<size_t>(operand->accumulator)],
                                  *operand, inst.repeat);
    if (!out) return out.error();
    return VectorRun(std::make_shared<std::vector<std::uint8_t>>(std::move(*out)));
  }
  if (!a || (isBinaryFunc(inst.func) && inst.op == isa::Opcode::kVxmBinary && !b))
    return makeError(ExitCode::kModel, "an ALU op without its operands");
  if (operand && operand->types != 0 && !accumulates) return typedVxm(inst, *operand, *a, b);
  std::vector<std::uint8_t> splatA, splatB;
  if (operand && operand->splatA) a = &(splatA = splat(*a, vectorBytes_, eb));
  if (operand && operand->splatB && b) b = &(splatB = splat(*b, vectorBytes_, eb));
  const std::size_t count = a->size() / eb;
  if (inst.func == isa::VxmFunc::kAccumulate || inst.func == isa::VxmFunc::kNormalize) {
    const auto id = operand->accumulator;
    const isa::Accumulator& acc = program.accumulators[static_cast<size_t>(id)];
    const std::int64_t vectors = static_cast<std::int64_t>(a->size()) / vectorBytes_;
    if (inst.func == isa::VxmFunc::kAccumulate) {
      if (auto s = accumulators_.accumulate(id, acc, *operand, a->data(), vectors); !s) return s.error();
      return VectorRun();
    }
    auto out = accumulators_.normalize(id, acc, *operand, a->data(), vectors);
    if (!out) return out.error();
    return VectorRun(std::make_shared<std::vector<std::uint8_t>>(std::move(*out)));
  }
  if (element_ == ElementType::kFp16) {
    const auto x = asHalves(a->data(), count);
    const auto y = b ? asHalves(b->data(), count) : x;
    std::vector<std::uint16_t> out(count);
    vxmFp16(inst.func, x.data(), y.data(), out.data(), count, operand ? operand->immediate : 0.0f,
            operand ? operand->immediate2 : 1.0f);
    return VectorRun(fromHalves(out));
  }
  if (inst.func == isa::VxmFunc::kScaleAdd) return makeError(ExitCode::kModel, "VXM function scale_add has no integer form");
  const auto x = widen(a->data(), count);
  const auto y = b ? widen(b->data(), count) : x;
  std::vector<std::int32_t> out(count);
  if (auto s = vxmInt32(inst.func, x.data(), y.data(), out.data(), count); !s) return s.error();
  return VectorRun(narrow(out));
}

Expected<VectorRun> FunctionalState::typedVxm(const Instruction& inst, const isa::FunctionalOperand& operand,
                                              const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>* b) const {
  // Each operand's lanes in its own element type; lane l of every vector is the same column (the
  // lowering computes mixed widths only on one tile), lanes past an operand's width read 0.
  const ir::DType runType = element_ == ElementType::kFp16 ? ir::DType::kF16 : ir::DType::kI8;
  auto typeOf = [&](int k) {
    const int t = isa::elementTypeOf(operand.types, k);
    return t < 0 ? runType : static_cast<ir::DType>(t);
  };
  const ir::DType ta = typeOf(0), tb = typeOf(1), to = typeOf(2);
  if (inst.func == isa::VxmFunc::kScaleAdd || inst.func == isa::VxmFunc::kAccumulate ||
      inst.func == isa::VxmFunc::kEmit || inst.func == isa::VxmFunc::kNormalize)
    return makeError(ExitCode::kModel, fmt::format("VXM function {} has no mixed-type form", isa::vxmFuncName(inst.func)));
  const int vb = vectorBytes_, ea = ir::dtypeBytes(ta), ebb = ir::dtypeBytes(tb), eo = ir::dtypeBytes(to);
  const std::int64_t vectors = static_cast<std::int64_t>(a.size()) / vb, lanesOut = vb / eo;
  const std::size_t count = static_cast<std::size_t>(vectors * lanesOut);
  const bool binary = b && isBinaryFunc(inst.func) && inst.op == isa::Opcode::kVxmBinary;
  auto lane = [&](const std::vector<std::uint8_t>& src, ir::DType t, int e, bool splatted, std::int64_t v, std::int64_t l) {
    if (splatted) l = 0;
    return l < vb / e ? decodeElement(src.data() + v * vb + l * e, t) : 0.0;
  };
  // The interpreter's rule: the output's type decides integer or float arithmetic (Equal: its operands').
  const bool compare = inst.func == isa::VxmFunc::kEqual || inst.func == isa::VxmFunc::kLess ||
                       inst.func == isa::VxmFunc::kGreater || inst.func == isa::VxmFunc::kLessOrEqual ||
                       inst.func == isa::VxmFunc::kGreaterOrEqual;
  const bool integer = compare ? integerType(ta) && (!binary || integerType(tb))
                                                          : integerType(to) && to != ir::DType::kBool;
  auto out = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(vectors) * vb, 0);
  if (inst.func == isa::VxmFunc::kConvert && !integer) {  // a cast: the value in the result's type
    for (std::int64_t v = 0; v < vectors; ++v)
      for (std::int64_t l = 0; l < lanesOut; ++l)
        encodeElement(lane(a, ta, ea, operand.splatA, v, l), to, out->data() + v * vb + l * eo);
    return VectorRun(out);
  }
  std::vector<float> fx, fy, fr;
  std::vector<std::int32_t> ix, iy, ir32;
  if (integer) {
    ix.resize(count), iy.resize(count), ir32.resize(count);
  } else {
    fx.resize(count), fy.resize(count), fr.resize(count);
  }
  for (std::int64_t v = 0; v < vectors; ++v)
    for (std::int64_t l = 0; l < lanesOut; ++l) {
      const auto i = static_cast<std::size_t>(v * lanesOut + l);
      const double x = lane(a, ta, ea, operand.splatA, v, l), y = binary ? lane(*b, tb, ebb, operand.splatB, v, l) : x;
      if (integer) {
        ix[i] = truncated(x);
        iy[i] = truncated(y);
      } else {
        fx[i] = static_cast<float>(x);
        fy[i] = static_cast<float>(y);
      }
    }
  if (integer) {
    if (auto s = vxmInt32(inst.func, ix.data(), iy.data(), ir32.data(), count); !s) return s.error();
  } else {
    vxmFloat(inst.func, fx.data(), fy.data(), fr.data(), count, operand.immediate, operand.immediate2);
  }
  for (std::size_t i = 0; i < count; ++i)
    encodeElement(integer ? static_cast<double>(ir32[i]) : static_cast<double>(fr[i]), to,
                  out->data() + (i / static_cast<std::size_t>(lanesOut)) * vb + (i % static_cast<std::size_t>(lanesOut)) * eo);
  return VectorRun(out);
}

VectorRun FunctionalState::shiftLanes(const isa::FunctionalOperand& operand, const std::vector<std::uint8_t>& vectors) const {
  const int eb = elementBytes(element_);
  auto out = std::make_shared<std::vector<std::uint8_t>>(vectors.size(), 0);
  // Down by laneShift (a negative shift moves up): out lane l = in lane l + shift for the kept lanes.
  const std::int64_t shift = std::int64_t{operand.laneShift} * eb;
  const std::int64_t from = std::max<std::int64_t>(0, shift), to = std::max<std::int64_t>(0, -shift);
  const std::int64_t keep = std::min<std::int64_t>(std::int64_t{operand.laneCount} * eb, vectorBytes_ - std::max(from, to));
  if (keep <= 0) return out;
  for (std::size_t v = 0; v < vectors.size(); v += static_cast<std::size_t>(vectorBytes_))
    std::memcpy(out->data() + v + to, vectors.data() + v + from, static_cast<std::size_t>(keep));
  return out;
}

Expected<const isa::WindowRead*> FunctionalState::windowOf(const Instruction& inst, const isa::Program& program,
                                                           bool second) {
  if (inst.operand < 0) return static_cast<const isa::WindowRead*>(nullptr);
  if (inst.operand >= static_cast<std::int32_t>(program.operands.size()))
    return makeError(ExitCode::kInternal, fmt::format("operand {} is not in the program's table of {}", inst.operand,
                                                      program.operands.size()));
  const isa::FunctionalOperand& operand = program.operands[static_cast<size_t>(inst.operand)];
  const std::int32_t w = second ? operand.window2 : operand.window;
  if (w < 0) return static_cast<const isa::WindowRead*>(nullptr);
  if (w >= static_cast<std::int32_t>(program.windows.size()))
    return makeError(ExitCode::kInternal, fmt::format("window {} is not in the program's table of {}", w,
                                                      program.windows.size()));
  return &program.windows[static_cast<size_t>(w)];
}

Expected<std::vector<std::uint8_t>> FunctionalState::windowTap(const isa::WindowRead& win,
                                                               const std::vector<std::uint8_t>& vectors,
                                                               std::int64_t count) const {
  using Host = Kokkos::DefaultHostExecutionSpace;
  const int eb = elementBytes(element_), vb = vectorBytes_;
  const std::int64_t carried = static_cast<std::int64_t>(vectors.size()) / vb;
  std::vector<std::uint8_t> out(static_cast<size_t>(count) * vb, 0);
  std::vector<std::int64_t> source(static_cast<size_t>(count), -1);  // stream vector, -1 padding, -2 missing
  // The fill's bytes (FP16 bits, or an INT8 value).
  std::uint8_t fill[2] = {0, 0};
  if (element_ == ElementType::kFp16) {
    const std::uint16_t h = floatToHalf(win.fill);
    std::memcpy(fill, &h, sizeof h);
  } else {
    fill[0] = static_cast<std::uint8_t>(static_cast<std::int64_t>(std::max(-128.0f, std::min(127.0f, win.fill))) & 0xff);
  }
  const std::int64_t shift = std::int64_t{win.laneShift} * eb, valid = std::int64_t{win.lanes} * eb;
  Kokkos::parallel_for(
      "tsp.window_tap", Kokkos::RangePolicy<Host>(0, count), [&](const std::int64_t j) {
        const std::int64_t q = win.pixel0 + j, plane = win.ho * win.wo;
        const std::int64_t image = q / plane, oy = (q % plane) / win.wo, ox = q % win.wo;
        const std::int64_t iy = oy * win.sh + win.ky * win.dh - win.pt, ix = ox * win.sw + win.kx * win.dw - win.pl;
        std::uint8_t* v = out.data() + static_cast<size_t>(j) * vb;
        if (iy < 0 || iy >= win.h || ix < 0 || ix >= win.w) {
          for (std::int64_t b = 0; b < valid && b + shift < vb; b += eb) std::memcpy(v + shift + b, fill, static_cast<size_t>(eb));
          return;
        }
        const std::int64_t p = (image * win.h + iy) * win.w + ix, off = p - win.first;
        const std::int64_t k = win.stride > 0 && off % win.stride == 0 ? off / win.stride : -1;
        if (k < 0 || k >= carried) {
          source[static_cast<size_t>(j)] = -2;
          return;
        }
        source[static_cast<size_t>(j)] = k;
        std::memcpy(v + shift, vectors.data() + static_cast<size_t>(k) * vb, static_cast<size_t>(vb - shift));
      });
  Kokkos::fence();
  for (std::int64_t j = 0; j < count; ++j)
    if (source[static_cast<size_t>(j)] == -2)
      return makeError(ExitCode::kModel,
                       fmt::format("tap ({}, {}) of output pixel {} reads an input pixel its stream of {} vectors from "
                                   "pixel {} does not carry (the read was moved into its segment)",
                                   win.ky, win.kx, win.pixel0 + j, carried, win.first));
  return out;
}

Status FunctionalState::install(int plane, const Instruction& inst, bool transposed) {
  Plane& p = planes_.at(plane);
  const int eb = elementBytes(element_);
  std::fill(p.weights.begin(), p.weights.end(), 0);
  for (int r = 0; r < std::min(inst.weightRows, lanes_); ++r) {
    const std::uint8_t* v = vectorAt(sliceOf(inst.weightUnit), inst.address + r);
    if (!transposed) {
      std::memcpy(p.weights.data() + static_cast<std::size_t>(r) * lanes_ * eb, v, vectorBytes_);
      continue;
    }
    // Vector r is column r of the tile: lane k goes to weight row k.
    for (int k = 0; k < lanes_; ++k)
      std::memcpy(p.weights.data() + (static_cast<std::size_t>(k) * lanes_ + r) * eb, v + static_cast<std::size_t>(k) * eb,
                  static_cast<std::size_t>(eb));
  }
  p.next = 0;
  return {};
}

Expected<VectorRun> FunctionalState::compute(int plane, const Instruction& inst, const std::vector<std::uint8_t>& x) {
  Plane& p = planes_.at(plane);
  if (p.next >= p.accumulators.size()) p.accumulators.resize(p.next + 1);
  Accumulator& acc = p.accumulators[p.next++];
  const std::int64_t rows = inst.repeat;
  const std::size_t cells = static_cast<std::size_t>(rows) * lanes_;
  if (acc.rows == 0) {
    acc.rows = rows;
    acc.fp32.assign(element_ == ElementType::kFp16 ? cells : 0, 0.0f);
    acc.int32.assign(element_ == ElementType::kInt8 ? cells : 0, 0);
  } else if (acc.rows != rows) {
    return makeError(ExitCode::kInternal,
                     fmt::format("functional mode: an MXM compute of {} rows meets an accumulator of {} rows on plane {}",
                                 rows, acc.rows, plane));
  }
  VectorRun out;
  if (element_ == ElementType::kFp16) {
    const auto xs = asHalves(x.data(), cells);
    const auto ws = asHalves(p.weights.data(), static_cast<std::size_t>(lanes_) * lanes_);
    mxmAccumulateFp16(xs.data(), ws.data(), acc.fp32.data(), static_cast<int>(rows), lanes_, lanes_);
    if (inst.dst.valid()) {
      std::vector<std::uint16_t> emitted(cells);
      emitFp16(acc.fp32.data(), emitted.data(), cells);
      out = fromHalves(emitted);
    }
  } else {
    mxmAccumulateInt8(reinterpret_cast<const std::int8_t*>(x.data()),
                      reinterpret_cast<const std::int8_t*>(p.weights.data()), acc.int32.data(), static_cast<int>(rows),
                      lanes_, lanes_);
    if (inst.dst.valid()) out = narrow(acc.int32);
  }
  if (inst.dst.valid()) acc.rows = 0;  // the row block is emitted: the next compute starts a new sum
  return out;
}

}  // namespace tsp::sim
