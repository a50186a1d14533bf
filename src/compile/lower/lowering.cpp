// Lowering per op kind: MXM matmuls, VXM elementwise ops, C2C transfers; SRAM placement with reuse.
#include "compile/lower/lowering.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "compile/ir/op_table.h"
#include "compile/lower/lowering_internal.h"

namespace tsp::lower {

using isa::Instruction;
using isa::Opcode;
using schedule::Step;
using schedule::Task;
using topology::UnitKind;
using detail::Lowering;
using detail::TensorState;

std::pair<std::int64_t, int> vectorShape(const topology::ChipSpec& chip, const ir::Tensor& tensor) {
  const std::int64_t cols = tensor.shape.empty() ? 1 : tensor.shape.back();
  const std::int64_t rows = tensor.shape.empty() ? 1 : tensor.elements() / std::max<std::int64_t>(cols, 1);
  const int tiles = static_cast<int>(ceilDiv(cols * ir::dtypeBytes(tensor.dtype), chip.vectorBytes));
  return {rows, tiles};
}

MatMulTiling chooseMatMulTiling(const topology::ChipSpec& chip, std::int64_t m, std::int64_t k, std::int64_t n,
                                int elementBytes, std::int64_t sramBudgetElements) {
  MatMulTiling best;
  const int plane = chip.vectorBytes / std::max(1, elementBytes);  // elements per vector and per plane side
  const int tk = plane, tn = plane;
  const std::int64_t maxTm = std::min<std::int64_t>(m, chip.addressesPerSlice);
  // The fill of one tile: MEM read, MXM and write latencies plus the widest slice distance.
  const Cycle fill = chip.memReadCycles + chip.mxmCycles + chip.memWriteCycles + chip.sliceCount();
  for (std::int64_t tm = maxTm; tm >= 1; tm = tm > 1 ? (tm + 1) / 2 : 0) {
    if (tm * tk + std::int64_t{tk} * tn + tm * tn > sramBudgetElements) continue;
    const std::int64_t tiles = ceilDiv(m, tm) * ceilDiv(n, tn) * ceilDiv(k, tk);
    // A tile streams tm rows; a weight install hides behind it (double buffer) unless it is longer.
    const Cycle tTile = std::max<Cycle>(tm, chip.mxmWeightInstallCycles);
    const Cycle cycles = tiles * tTile + fill;
    if (best.tm == 0 || cycles < best.cycles) best = {static_cast<int>(tm), tk, tn, cycles};
    if (tm == 1) break;
  }
  return best;
}

namespace detail {

Instruction makeInst(int unit, Opcode op, std::int64_t repeat, int interval) {
  Instruction inst;
  inst.unit = unit;
  inst.op = op;
  inst.repeat = static_cast<std::int32_t>(repeat);
  inst.interval = interval;
  return inst;
}

// Every elementwise function is one pass through an ALU (the latency table does not depend on the
// function).
isa::VxmFunc funcOf(ir::OpKind kind) {
  switch (kind) {
    case ir::OpKind::kAdd: return isa::VxmFunc::kAdd;
    case ir::OpKind::kSub: return isa::VxmFunc::kSub;
    case ir::OpKind::kEqual: return isa::VxmFunc::kEqual;
    case ir::OpKind::kMul: return isa::VxmFunc::kMul;
    case ir::OpKind::kDiv: return isa::VxmFunc::kDiv;
    case ir::OpKind::kPow: return isa::VxmFunc::kPow;
    case ir::OpKind::kRelu: return isa::VxmFunc::kRelu;
    case ir::OpKind::kGelu: return isa::VxmFunc::kGelu;
    case ir::OpKind::kTanh: return isa::VxmFunc::kTanh;
    case ir::OpKind::kErf: return isa::VxmFunc::kErf;
    case ir::OpKind::kExp: return isa::VxmFunc::kExp;
    case ir::OpKind::kSigmoid: return isa::VxmFunc::kSigmoid;
    case ir::OpKind::kSqrt: return isa::VxmFunc::kSqrt;
    case ir::OpKind::kCast: return isa::VxmFunc::kConvert;
    case ir::OpKind::kNeg: return isa::VxmFunc::kNeg;
    case ir::OpKind::kAbs: return isa::VxmFunc::kAbs;
    case ir::OpKind::kReciprocal: return isa::VxmFunc::kReciprocal;
    case ir::OpKind::kFloor: return isa::VxmFunc::kFloor;
    case ir::OpKind::kCeil: return isa::VxmFunc::kCeil;
    case ir::OpKind::kLog: return isa::VxmFunc::kLog;
    case ir::OpKind::kSin: return isa::VxmFunc::kSin;
    case ir::OpKind::kCos: return isa::VxmFunc::kCos;
    case ir::OpKind::kNot: return isa::VxmFunc::kNot;
    case ir::OpKind::kSoftplus: return isa::VxmFunc::kSoftplus;
    case ir::OpKind::kLeakyRelu: return isa::VxmFunc::kLeakyRelu;
    case ir::OpKind::kElu: return isa::VxmFunc::kElu;
    case ir::OpKind::kHardSigmoid: return isa::VxmFunc::kHardSigmoid;
    case ir::OpKind::kHardSwish: return isa::VxmFunc::kHardSwish;
    case ir::OpKind::kMin: return isa::VxmFunc::kMin;
    case ir::OpKind::kMax: return isa::VxmFunc::kMax;
    case ir::OpKind::kMod: return isa::VxmFunc::kMod;
    case ir::OpKind::kLess: return isa::VxmFunc::kLess;
    case ir::OpKind::kGreater: return isa::VxmFunc::kGreater;
    case ir::OpKind::kLessOrEqual: return isa::VxmFunc::kLessOrEqual;
    case ir::OpKind::kGreaterOrEqual: return isa::VxmFunc::kGreaterOrEqual;
    case ir::OpKind::kAnd: return isa::VxmFunc::kAnd;
    case ir::OpKind::kOr: return isa::VxmFunc::kOr;
    default: return isa::VxmFunc::kNone;
  }
}

std::optional<std::pair<float, float>> vxmImmediates(const ir::Op& op) {
  switch (op.kind) {
    case ir::OpKind::kLeakyRelu: return std::pair{static_cast<float>(op.floatAttr("alpha", 0.01)), 0.0f};
    case ir::OpKind::kElu: return std::pair{static_cast<float>(op.floatAttr("alpha", 1.0)), 0.0f};
    case ir::OpKind::kHardSigmoid:
      return std::pair{static_cast<float>(op.floatAttr("alpha", 0.2)), static_cast<float>(op.floatAttr("beta", 0.5))};
    default: return std::nullopt;
  }
}

bool storageTypeComputes(ir::DType type) { return type == ir::DType::kF16 || type == ir::DType::kI8; }

bool computesValues(ir::OpKind kind) {
  // Every elementwise kind's function is one the functional VXM computes (Where: a select of three).
  return kind == ir::OpKind::kWhere || kind == ir::OpKind::kIdentity || funcOf(kind) != isa::VxmFunc::kNone;
}

Lowering::Lowering(const topology::ChipSpec& chip, const ir::Graph& graph, LoweredShard& out)
    : chip_(chip), graph_(graph), out_(out), problem_(out.problem), spatial_(spatialGraph(graph)),
      channelsLast_(channelsLastTensors(graph)) {
  if (spatial_) spreadSegments_ = 16, minSegmentRows_ = 64;
}

std::pair<std::int64_t, int> Lowering::geometry(ir::TensorId tensor) const {
  return storageGeometry(chip_, graph_, tensor, channelsLast(tensor));
}

std::int64_t Lowering::storageCols(ir::TensorId tensor) const {
  const ir::Tensor& t = graph_.tensor(tensor);
  if (channelsLast(tensor)) return t.shape[1];
  return t.shape.empty() ? 1 : t.shape.back();
}

std::vector<std::int64_t> Lowering::storageDims(ir::TensorId tensor) const {
  const auto& shape = graph_.tensor(tensor).shape;
  if (shape.empty()) return {1};
  if (channelsLast(tensor)) return {shape[0], shape[2], shape[3], shape[1]};
  return shape;
}

size_t Lowering::storageAxis(ir::TensorId tensor, std::int64_t axis) const {
  const auto rank = static_cast<std::int64_t>(graph_.tensor(tensor).shape.size());
  if (axis < 0) axis += rank;
  if (channelsLast(tensor)) return static_cast<size_t>(axis == 0 ? 0 : axis == 1 ? 3 : axis - 1);
  return static_cast<size_t>(std::clamp<std::int64_t>(axis, 0, std::max<std::int64_t>(0, rank - 1)));
}

int Lowering::addOperand(const isa::FunctionalOperand& operand) {
  out_.operands.push_back(operand);
  return static_cast<int>(out_.operands.size()) - 1;
}

Task Lowering::accumulateTask(std::string name, ir::TensorId in, int acc, int tile, std::int64_t r0, std::int64_t n,
                              bool computes) {
  Task task;
  task.name = std::move(name);
  task.steps.push_back(readStep(in, tile, r0, n, false));
  Step alu;
  alu.inst = makeInst(chip_.firstUnit(UnitKind::kVxm), Opcode::kVxmUnary, n);
  alu.inst.func = isa::VxmFunc::kAccumulate;
  alu.inst.operand = addOperand({acc, tile, r0});
  alu.inst.timingOnly = !computes;
  alu.producer = 0;
  task.steps.push_back(alu);
  return task;
}

int Lowering::addAccumulator(const isa::Accumulator& accumulator) {
  out_.accumulators.push_back(accumulator);
  return static_cast<int>(out_.accumulators.size()) - 1;
}

alloc::SliceSet Lowering::slicesOf(ir::TensorId tensor) const {
  alloc::SliceSet s;
  auto it = tensors_.find(tensor);
  if (it != tensors_.end())
    for (const auto& b : it->second.blocks) s.insert(b.slice);
  return s;
}

std::int64_t Lowering::mxmWeightRows(ir::TensorId tensor) const {
  const auto& shape = graph_.tensor(tensor).shape;
  for (ir::OpId u : graph_.tensor(tensor).users) {
    const ir::Op& op = graph_.op(u);
    const bool matmul = op.kind == ir::OpKind::kMatMul || op.kind == ir::OpKind::kFusedMatMul ||
                        (op.kind == ir::OpKind::kGemm && op.intAttr("transB", 0) == 0);
    if (matmul && op.inputs.size() > 1 && op.inputs[1] == tensor && shape.size() >= 2) return shape[shape.size() - 2];
  }
  return 0;
}

bool Lowering::readTransposed(ir::TensorId tensor) const {
  for (const auto& [view, weights] : transposedWeights_)
    if (weights == tensor) return true;
  const auto& users = graph_.tensor(tensor).users;
  return std::any_of(users.begin(), users.end(), [&](ir::OpId u) {
    const ir::Op& op = graph_.op(u);
    return op.kind == ir::OpKind::kGemm && op.intAttr("transB", 0) != 0 && op.inputs.size() > 1 &&
           op.inputs[1] == tensor && graph_.tensor(tensor).shape.size() == 2;
  });
}

Status Lowering::place(ir::TensorId tensor, bool resident, const alloc::SliceSet& avoid, int copies) {
  if (placed(tensor)) return {};
  const ir::Tensor& t = graph_.tensor(tensor);
  const auto [rows, tiles] = geometry(tensor);
  TensorState st;
  st.placement.name = t.name;
  st.placement.dtype = static_cast<std::int32_t>(t.dtype);
  st.placement.rows = rows;
  st.placement.tiles = tiles;
  st.placement.resident = resident;
  // A tile longer than a slice is cut into equal segments, each on its own slice. Graph inputs and
  // tensors made on chip are also spread over up to spreadSegments_ slices (segments of at least minSegmentRows_),
  // so that the MXM planes and the row blocks of one op read and write different MEM queues.
  std::int64_t segments = ceilDiv(rows, chip_.addressesPerSlice);
  if ((t.role == ir::TensorRole::kActivation || t.role == ir::TensorRole::kInput) && !c2cTensors_.count(tensor))
    segments = std::max(segments, std::min<std::int64_t>(spreadSegments_, rows / minSegmentRows_));
  if (segments > 1) {
    // A feature map read by a window op keeps whole image rows in every segment (rounded down: the
    // more segments, the more row blocks read different MEM queues at once): the rows a tap of a
    // block needs then lie in one segment once the reads are cut at the bands (bandCuts).
    std::int64_t segRows = ceilDiv(rows, segments);
    if (const std::int64_t w = windowRowLength(tensor); w > 1 && w <= chip_.addressesPerSlice)
      segRows = std::max<std::int64_t>(1, segRows / w) * w;
    if (segRows < rows) st.placement.segmentRows = segRows;
  }
  // A tensor made on chip that an MXM installs as weights (attention's V) keeps each K tile on one
  // slice: its segments are whole K tiles of one matrix, or whole matrices of a batch of them.
  // Weights installed transposed (Gemm's transB, a Transpose read in place) keep each tile's rows
  // of one plane's lanes on one slice.
  const bool installedTransposed = readTransposed(tensor);
  if (const std::int64_t k = mxmWeightRows(tensor);
      st.placement.segmentRows > 0 && ((t.producer >= 0 && k > 0) || installedTransposed)) {
    const std::int64_t kLanes = chip_.vectorBytes / std::max(1, ir::dtypeBytes(t.dtype));
    const std::int64_t unit = !installedTransposed && rows > k ? k : kLanes;
    const std::int64_t aligned = ceilDiv(st.placement.segmentRows, unit) * unit;
    if (aligned <= chip_.addressesPerSlice) st.placement.segmentRows = aligned >= rows ? 0 : aligned;
  }
  st.pinned = resident;
  // A one-row parameter is read as a broadcast by every plane's epilogue at once: one copy per plane.
  if (resident && rows == 1 && t.producer < 0 && t.role != ir::TensorRole::kInput) st.placement.replicas = chip_.mxmPlanes;
  if (copies > 1) st.placement.replicas = copies;
  if (auto s = allocatePieces(st, avoid); !s) return s;
  if (copies > 1 && !copiesOnOneSide(st)) {
    // No room for every copy on the first one's side: one copy, as any other tensor.
    for (const auto& b : st.blocks) out_.sram.release(b);
    st.blocks.clear();
    st.placement.memUnit.clear();
    st.placement.address.clear();
    st.placement.replicas = 1;
    if (auto s = allocatePieces(st, avoid); !s) return s;
  }
  tensors_.emplace(tensor, std::move(st));
  return {};
}

bool Lowering::copiesOnOneSide(const TensorState& st) const {
  const int memFirst = chip_.firstUnit(UnitKind::kMem);
  const int vxmSlice = chip_.units()[chip_.firstUnit(UnitKind::kVxm)].slice;
  const size_t pieces = static_cast<size_t>(st.placement.tiles) * st.segments();
  for (size_t p = 0; p < pieces; ++p) {
    const bool west = chip_.units()[memFirst + st.blocks[p].slice].slice < vxmSlice;
    alloc::SliceSet slices;
    for (size_t c = 0; c < static_cast<size_t>(st.placement.replicas); ++c) {
      const int slice = st.blocks[c * pieces + p].slice;
      if ((chip_.units()[memFirst + slice].slice < vxmSlice) != west || !slices.insert(slice)) return false;
    }
  }
  return true;
}

Status Lowering::allocatePieces(TensorState& st, const alloc::SliceSet& avoid) {
  const std::int64_t rows = st.placement.rows;
  const int tiles = st.placement.tiles;
  // Copies of a map made on chip are written by one stream value (a resident parameter's copies
  // are placed like separate tensors).
  const int copies = st.placement.resident ? 1 : st.placement.replicas;
  const int pieces = st.segments();
  st.writers.resize(static_cast<size_t>(tiles) * pieces * st.placement.replicas);
  st.writerRows.resize(st.writers.size());
  st.readers.resize(static_cast<size_t>(tiles) * pieces * st.placement.replicas);
  const int memFirst = chip_.firstUnit(UnitKind::kMem);
  const Bytes liveBefore = out_.sram.inUse();
  const int vxmSlice = chip_.units()[chip_.firstUnit(UnitKind::kVxm)].slice;
  auto westOf = [&](int slice) { return chip_.units()[memFirst + slice].slice < vxmSlice; };
  // Copies written by one stream value lie on one hemisphere: the one the avoided slices crowd less.
  alloc::SliceSet base = avoid;
  if (copies > 1) {
    int westAvoided = 0;
    for (int sl : avoid) westAvoided += westOf(sl);
    const bool west = 2 * westAvoided < static_cast<int>(avoid.size());
    for (int sl = 0; sl < chip_.memSlices; ++sl)
      if (westOf(sl) != west) base.insert(sl);
  }
  for (int k = 0; k < tiles * st.placement.replicas; ++k) {
    alloc::SliceSet away = base;  // the segments of one tile on different slices
    for (int g = 0; g < pieces; ++g) {
      const std::int64_t segRows = std::min(st.segmentRows(), rows - g * st.segmentRows());
      // A copy of a segment avoids more slices; the first copy asks with `away` as it is.
      const bool copy = copies > 1 && k >= tiles;
      alloc::SliceSet here, apart;
      if (copy) {
        // A copy of a segment: on another slice of the first copy's hemisphere, so that the one
        // stream value that writes the first copy passes it on its way.
        here = away;
        const int firstSlice = st.blocks[static_cast<size_t>(k % tiles) * pieces + g].slice;
        for (int c = k % tiles; c < k; c += tiles) here.insert(st.blocks[static_cast<size_t>(c) * pieces + g].slice);
        for (int sl = 0; sl < chip_.memSlices; ++sl)
          if (westOf(sl) != westOf(firstSlice)) here.insert(sl);
        // Preferably off every slice of the tensor so far: a copy sharing a slice with another
        // segment shares its read port too.
        apart = here;
        for (const auto& b : st.blocks) apart.insert(b.slice);
      }
      const alloc::SliceSet& near = copy ? here : away;
      // (The allocator takes any slice when every one is to be avoided, so ask only while some remain.)
      const alloc::SliceSet& asked = copy && static_cast<int>(apart.size()) < chip_.memSlices ? apart : near;
      // A resident tensor holds its values from the program's start: not in space an earlier
      // tensor of this program has used (when the SRAM has such space).
      auto block = out_.sram.allocate(static_cast<int>(segRows), asked, st.placement.resident);
      if (!block) {
        const Bytes needed = liveBefore + Bytes{rows} * tiles * chip_.vectorBytes;
        return makeError(ExitCode::kDoesNotFit,
                         fmt::format("shard does not fit in SRAM: needs {} bytes, {} bytes available (tensor '{}' of {} "
                                     "bytes with {} bytes live{})",
                                     needed, out_.sram.capacity(), st.placement.name, Bytes{rows} * tiles * chip_.vectorBytes,
                                     liveBefore,
                                     needed <= out_.sram.capacity() ? ", no slice has a free run of its tile's rows" : ""));
      }
      away.insert(block->slice);
      st.blocks.push_back(*block);
      st.placement.memUnit.push_back(memFirst + block->slice);
      st.placement.address.push_back(block->address);
    }
  }
  return {};
}

void Lowering::dependOnWriters(const Access& read, int task) {
  const TensorState& st = tensors_.at(read.tensor);
  const int first = st.pieceOf(read.tile, read.row0, read.replica);
  const int last = st.pieceOf(read.tile, std::max<std::int64_t>(read.row0, read.row0 + read.rows - 1), read.replica);
  for (int p = first; p <= last; ++p)
    for (size_t w = 0; w < st.writers[p].size(); ++w) {
      const auto [r0, r1] = st.writerRows[p][w];
      if (r0 < read.row0 + std::max<std::int64_t>(1, read.rows) && read.row0 < r1)
        problem_.addDataDependence(st.writers[p][w].first, st.writers[p][w].second, task, read.step);
    }
}

void Lowering::noteReader(const Access& read, int task) {
  // Per piece, so that space reused from a freed piece waits only for the reads of that piece.
  TensorState& st = tensors_.at(read.tensor);
  const int first = st.pieceOf(read.tile, read.row0, read.replica);
  const int last = st.pieceOf(read.tile, std::max<std::int64_t>(read.row0, read.row0 + read.rows - 1), read.replica);
  for (int p = first; p <= last; ++p) st.readers[p].push_back({task, read.step});
}

void Lowering::noteWriter(const Access& write, int task) {
  TensorState& st = tensors_.at(write.tensor);
  const int piece = st.pieceOf(write.tile, write.row0, write.replica);
  st.writers[piece].push_back({task, write.step});
  st.writerRows[piece].push_back({write.row0, write.row0 + std::max<std::int64_t>(1, write.rows)});
  waitForFreedReaders(st.blocks[piece], task, write.step);
}

void Lowering::waitForFreedReaders(const alloc::Block& mine, int task, int step) {
  // Write after read: space reused from a freed tensor is written only after its last read (write
  // after write when nothing read it).
  auto it = freed_.find(mine.slice);
  if (it == freed_.end()) return;
  for (const auto& [block, readers] : it->second) {
    if (block.address >= mine.address + mine.rows || mine.address >= block.address + block.rows) continue;
    for (const auto& [rt, rs] : readers) {
      const Instruction& r = problem_.tasks()[rt].steps[rs].inst;
      problem_.addDependence({rt, rs, task, step, Cycle{r.repeat} * r.interval});
    }
  }
}

int Lowering::addTask(Task task, const std::vector<Access>& reads, const std::vector<Access>& writes) {
  // A chain cannot read a slice that another of its MEM steps uses at the same time (one queue per
  // slice). When placement could not keep them apart, the read takes a detour: a task of its own
  // copies the rows to scratch on a free slice, and the chain reads the copy.
  const int memFirst = chip_.firstUnit(UnitKind::kMem);
  auto isMem = [](const Step& st) { return st.inst.op == Opcode::kMemRead || st.inst.op == Opcode::kMemWrite; };
  std::vector<std::pair<int, int>> detours;  // (copy task, step of the chain reading the copy)
  std::vector<bool> detoured(reads.size(), false);
  for (size_t i = 0; i < reads.size(); ++i) {
    if (reads[i].tensor < 0) continue;  // scratch: its caller placed it off the chain's slices
    Step& st = task.steps[reads[i].step];
    alloc::SliceSet used;
    bool clash = false;
    for (size_t j = 0; j < task.steps.size(); ++j) {
      if (!isMem(task.steps[j])) continue;
      used.insert(task.steps[j].inst.unit - memFirst);
      clash |= static_cast<int>(j) != reads[i].step && task.steps[j].inst.unit == st.inst.unit;
    }
    if (!clash) continue;
    auto block = scratch(st.inst.repeat, used);
    if (!block) continue;  // no room for a copy: check() names the clash
    Task copy;
    copy.name = task.name + " detour";
    Step read = st;
    read.producer = read.producer2 = -1;
    Step alu;
    alu.inst = makeInst(chip_.firstUnit(UnitKind::kVxm), Opcode::kVxmUnary, st.inst.repeat, st.inst.interval);
    alu.inst.func = isa::VxmFunc::kConvert;
    alu.producer = 0;
    Step write = makeWriteOf(*block, st.inst.repeat, 1);
    write.inst.interval = st.inst.interval;
    copy.steps = {read, alu, write};
    const int cid = problem_.addTask(std::move(copy));
    Access original = reads[i];
    original.step = 0;
    dependOnWriters(original, cid);
    noteReader(original, cid);
    waitForFreedReaders(*block, cid, 2);
    st.inst.unit = memFirst + block->slice;
    st.inst.address = block->address;
    st.inst.stride = 1;
    detours.push_back({cid, reads[i].step});
    opScratch_.push_back({*block, {}});
    detoured[i] = true;
  }
  const int id = problem_.addTask(std::move(task));
  for (size_t i = 0; i < reads.size(); ++i) {
    if (detoured[i] || reads[i].tensor < 0) continue;
    dependOnWriters(reads[i], id);
    noteReader(reads[i], id);
  }
  for (size_t d = 0; d < detours.size(); ++d) {
    problem_.addDataDependence(detours[d].first, 2, id, detours[d].second);
    opScratch_[opScratch_.size() - detours.size() + d].second.push_back({id, detours[d].second});
  }
  for (const Access& w : writes) noteWriter(w, id);
  return id;
}

void Lowering::noteCrossing(const char* access, const TensorState& st, std::int64_t row0, std::int64_t rows) const {
  if (!crossing_.empty()) return;
  crossing_ = fmt::format("lowering made a {} of '{}' rows {} to {} that crosses the end of its segment of {} rows",
                          access, st.placement.name, row0, row0 + rows - 1, st.segmentRows());
}

Step Lowering::readStep(ir::TensorId tensor, int tile, std::int64_t row0, std::int64_t rows, bool broadcast,
                        int replica) const {
  const TensorState& st = tensors_.at(tensor);
  const std::int64_t first = broadcast ? 0 : row0;
  const int piece = st.pieceOf(tile, first, replica);
  if (!broadcast && (row0 % st.segmentRows()) + rows > st.segmentRows()) noteCrossing("read", st, row0, rows);
  Step s;
  s.inst = makeInst(st.placement.memUnit[piece], Opcode::kMemRead, rows);
  s.inst.address = st.placement.address[piece] + static_cast<int>(first % st.segmentRows());
  s.inst.stride = broadcast ? 0 : 1;
  s.reads = tensor;
  return s;
}

Step Lowering::writeStep(ir::TensorId tensor, int tile, std::int64_t row0, std::int64_t rows, int producer,
                         int replica) const {
  const TensorState& st = tensors_.at(tensor);
  const int piece = st.pieceOf(tile, row0, replica);
  if ((row0 % st.segmentRows()) + rows > st.segmentRows()) noteCrossing("write", st, row0, rows);
  Step s;
  s.inst = makeInst(st.placement.memUnit[piece], Opcode::kMemWrite, rows);
  s.inst.address = st.placement.address[piece] + static_cast<int>(row0 % st.segmentRows());
  s.inst.stride = 1;
  s.producer = producer;
  return s;
}

Step Lowering::makeReadOf(const alloc::Block& block, std::int64_t rows) const {
  Step s;
  s.inst = makeInst(chip_.firstUnit(UnitKind::kMem) + block.slice, Opcode::kMemRead, rows);
  s.inst.address = block.address;
  s.inst.stride = 1;
  return s;
}

Step Lowering::makeWriteOf(const alloc::Block& block, std::int64_t rows, int producer) const {
  Step s;
  s.inst = makeInst(chip_.firstUnit(UnitKind::kMem) + block.slice, Opcode::kMemWrite, rows);
  s.inst.address = block.address;
  s.inst.stride = 1;
  s.producer = producer;
  return s;
}

std::vector<std::pair<std::int64_t, std::int64_t>> Lowering::rowPieces(std::int64_t begin, std::int64_t end,
                                                                       const std::vector<ir::TensorId>& tensors) const {
  std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
  for (std::int64_t r = begin; r < end;) {
    std::int64_t next = end;
    for (ir::TensorId t : tensors) {
      const TensorState& st = tensors_.at(t);
      if (st.placement.rows < end) continue;  // a broadcast operand reads its row 0
      next = std::min(next, (r / st.segmentRows() + 1) * st.segmentRows());
    }
    pieces.push_back({r, next - r});
    r = next;
  }
  return pieces;
}

alloc::SliceSet Lowering::tailSlicesOf(const MxmJob& job, int tile, std::int64_t row0, int replica) const {
  const TensorState& ys = tensors_.at(job.out);
  alloc::SliceSet slices;
  for (int c = 0; c < ys.placement.replicas; ++c) slices.insert(ys.blocks[ys.pieceOf(tile, row0, c)].slice);
  for (ir::TensorId side : {job.bias, job.residual})
    if (side >= 0) {
      const TensorState& bs = tensors_.at(side);
      const int piece = sidePiece(job, side, tile, row0, replica, slices);
      slices.insert(bs.blocks[piece].slice);
    }
  return slices;
}

int Lowering::sidePiece(const MxmJob& job, ir::TensorId side, int tile, std::int64_t row0, int replica,
                        const alloc::SliceSet& busy) const {
  // The plane's own copy, or the next one whose slice the chain does not use already.
  const TensorState& bs = tensors_.at(side);
  const bool broadcast = bs.placement.rows != tensors_.at(job.out).placement.rows;
  const int t = tile % bs.placement.tiles;
  const std::int64_t row = broadcast ? 0 : row0;
  for (int c = 0; c < bs.placement.replicas; ++c) {
    const int piece = bs.pieceOf(t, row, replica + c);
    if (!busy.count(bs.blocks[piece].slice)) return piece;
  }
  return bs.pieceOf(t, row, replica);
}

Expected<alloc::Block> Lowering::scratch(std::int64_t rows, const alloc::SliceSet& avoid) {
  auto block = out_.sram.allocate(static_cast<int>(rows), avoid);
  if (!block)
    return makeError(ExitCode::kDoesNotFit,
                     fmt::format("shard does not fit in SRAM: needs {} bytes of scratch with {} bytes live, {} bytes "
                                 "available",
                                 rows * chip_.vectorBytes, out_.sram.inUse(), out_.sram.capacity()));
  return *block;
}

void Lowering::releaseScratch(const alloc::Block& block, const std::vector<std::pair<int, int>>& readers,
                              const std::vector<std::pair<int, int>>& writers) {
  // The block's last access (tasks are numbered in the order they are lowered): its last read, or
  // its last write when that is later (a value nothing reads still lands there). A block that
  // records neither was used by the op just lowered.
  std::int64_t lastAccess = -1;
  for (const auto& accesses : {readers, writers})
    for (const auto& a : accesses) lastAccess = std::max<std::int64_t>(lastAccess, a.first);
  if (lastAccess < 0) lastAccess = static_cast<std::int64_t>(problem_.tasks().size()) - 1;
  out_.sram.release(block, lastAccess);
  // What a later write to this space waits for: the reads, or the writes of a value nothing reads
  // (else a late write of the dead value could land over the new one).
  freed_[block.slice].push_back({block, readers.empty() ? writers : readers});
}

const ir::Op* Lowering::soleUser(ir::TensorId t, const std::vector<ir::OpId>& ops, size_t at,
                                 std::initializer_list<ir::OpKind> kinds) const {
  if (at >= ops.size() || graph_.tensor(t).users.size() != 1 || graph_.tensor(t).users[0] != ops[at]) return nullptr;
  if (std::find(graph_.outputs().begin(), graph_.outputs().end(), t) != graph_.outputs().end()) return nullptr;
  const ir::Op& next = graph_.op(ops[at]);
  return std::find(kinds.begin(), kinds.end(), next.kind) != kinds.end() ? &next : nullptr;
}

Status Lowering::receive(const ReceivePlan& plan, int t, int& taskId) {
  alloc::SliceSet late;  // slices an earlier program still uses when the first tile arrives
  const Cycle first = plan.mirrorsSend >= 0 || plan.arrivals.empty() ? 0 : plan.arrivals.front();
  for (size_t slice = 0; slice < sliceFree_.size(); ++slice)
    if (sliceFree_[slice] > first) late.insert(static_cast<int>(slice));
  if (auto s = place(plan.tensor, false, late); !s) return s;
  TensorState& st = tensors_.at(plan.tensor);
  st.pinned = true;
  const int unit = chip_.firstUnit(UnitKind::kC2c) + plan.port;
  {
    // One burst per tile; a tile of several segments is written segment by segment, each read of
    // the port released so that its last vector is read no earlier than it arrives.
    for (const auto& [r0, n] : rowPieces(0, st.placement.rows, {plan.tensor})) {
      Task task;
      task.name = fmt::format("receive {} tile {}{}", st.placement.name, t, r0 > 0 ? fmt::format(" rows {}", r0) : "");
      task.release = plan.mirrorsSend >= 0 ? 0 : std::max<Cycle>(0, plan.arrivals.at(t) + plan.readLag(r0, n));
      Step rx;
      rx.inst = makeInst(unit, Opcode::kC2cReceive, n, plan.interval);
      rx.inst.port = plan.port;
      Step write = writeStep(plan.tensor, t, r0, n, 0);
      write.inst.interval = plan.interval;
      task.steps = {rx, write};
      const int id = addTask(std::move(task), {}, {{plan.tensor, t, r0, n, 1}});
      if (r0 == 0) taskId = id;
      // The port hands out vectors in arrival order: receives on one port keep that order.
      auto last = lastReceive_.find(plan.port);
      if (last != lastReceive_.end()) problem_.addDependence({last->second, 0, id, 0, 1});
      lastReceive_[plan.port] = id;
    }
  }
  return {};
}

Status Lowering::send(const SendPlan& plan, std::vector<int>& tasks) {
  if (!placed(plan.tensor))
    return makeError(ExitCode::kInternal, fmt::format("send of '{}', which is not on this chip", graph_.tensor(plan.tensor).name));
  const TensorState& st = tensors_.at(plan.tensor);
  const int unit = chip_.firstUnit(UnitKind::kC2c) + plan.port;
  for (int t = 0; t < st.placement.tiles; ++t) {
    // One task per tile: a tile longer than a slice leaves in segments (one MEM read each), every
    // segment's send issuing the cycle the previous one's vectors leave the link and going on with
    // the stream's fraction of a cycle (Step::linkFrom), so the tile crosses as one stream of
    // ceil(rows x spacing) cycles, as the receiver's release times assume.
    const auto pieces = rowPieces(0, st.placement.rows, {plan.tensor});
    Task task;
    task.name = fmt::format("send {} tile {}", st.placement.name, t);
    task.deadline = plan.deadline;
    task.untimed = plan.atProgramEnd;
    std::vector<Access> reads;
    int previousSend = -1;
    for (const auto& [r0, n] : pieces) {
      Step read = readStep(plan.tensor, t, r0, n, false);
      read.inst.interval = plan.interval;
      Step tx;
      tx.inst = makeInst(unit, Opcode::kC2cSend, n, plan.interval);
      tx.inst.port = plan.port;
      tx.producer = static_cast<int>(task.steps.size());
      tx.linkSpacing = plan.spacing;
      tx.linkFrom = r0;
      if (previousSend >= 0) {
        tx.follows = previousSend;
        tx.followGap = schedule::linkCycles(task.steps[previousSend]);
      }
      reads.push_back({plan.tensor, t, r0, n, static_cast<int>(task.steps.size())});
      task.steps.push_back(read);
      task.steps.push_back(tx);
      previousSend = static_cast<int>(task.steps.size()) - 1;
    }
    const int id = addTask(std::move(task), reads, {});
    // Tiles leave in tile order, the order the receiver's chain of receives reads them in.
    if (auto last = lastSend_.find(plan.port); last != lastSend_.end())
      problem_.addDependence({last->second, lastSendStep_[plan.port], id, 1, 1});
    lastSend_[plan.port] = id;
    lastSendStep_[plan.port] = previousSend;
    tasks.push_back(id);
  }
  return {};
}

void Lowering::findTransposedWeights(const std::vector<ir::OpId>& ops, const std::set<ir::TensorId>& keep) {
  const std::set<ir::OpId> inShard(ops.begin(), ops.end());
  for (ir::OpId id : ops) {
    const ir::Op& op = graph_.op(id);
    if (op.kind != ir::OpKind::kTranspose || op.inputs.size() != 1 || op.outputs.size() != 1) continue;
    const ir::Tensor& w = graph_.tensor(op.inputs[0]);
    const ir::TensorId out = op.outputs[0];
    const auto perm = op.intsAttr("perm");
    if (w.producer >= 0 || w.shape.size() != 2 || !(perm.empty() || perm == std::vector<std::int64_t>{1, 0}) || keep.count(out) ||
        c2cTensors_.count(out) || graph_.tensor(out).users.empty())
      continue;
    const auto& users = graph_.tensor(out).users;
    if (std::all_of(users.begin(), users.end(), [&](ir::OpId u) {
          const ir::Op& user = graph_.op(u);
          return inShard.count(u) && (user.kind == ir::OpKind::kMatMul || user.kind == ir::OpKind::kFusedMatMul) &&
                 user.inputs.size() >= 2 && user.inputs[1] == out &&
                 std::count(user.inputs.begin(), user.inputs.end(), out) == 1;
        }))
      transposedWeights_[out] = op.inputs[0];
  }
}

Status Lowering::lowerOp(ir::OpId opId, const std::vector<ir::OpId>& ops, size_t position, int& consumed) {
  const ir::Op& op = graph_.op(opId);
  consumed = 1;
  // Read in place by its matmuls (findTransposedWeights).
  if (op.outputs.size() == 1 && transposedWeights_.count(op.outputs[0])) return {};
  for (ir::TensorId read : op.inputs)
    // A Transpose read in place: its matmul reads the weights it transposes.
    if (const ir::TensorId in = transposedWeights_.count(read) ? transposedWeights_.at(read) : read; !placed(in)) {
      if (graph_.tensor(in).producer >= 0)
        return makeError(ExitCode::kInternal, fmt::format("op '{}' reads '{}', which is not on this chip", op.name,
                                                          graph_.tensor(in).name));
      // Not on the MEM slices of the op's other inputs: one task never reads one slice twice at once.
      alloc::SliceSet avoid;
      for (ir::TensorId other : op.inputs)
        avoid.insert(slicesOf(other));
      if (auto s = place(in, true, avoid); !s) return s;
    }
  const size_t firstTask = problem_.tasks().size();
  timingReason_.clear();
  const Status lowered = lowerFamily(op, ops, position, consumed);
  // An op some of whose instructions only stand in for its cost (or move vectors on the SXM in a
  // way the program does not spell out) is named for functional mode.
  for (size_t t = firstTask; t < problem_.tasks().size() && lowered.ok(); ++t)
    if (std::any_of(problem_.tasks()[t].steps.begin(), problem_.tasks()[t].steps.end(), [](const Step& st) {
          return st.inst.timingOnly || (st.inst.op == Opcode::kSxmShift && st.inst.sxm == isa::SxmFunc::kUnspecified);
        })) {
      const std::string why =
          !timingReason_.empty() ? timingReason_
          : op.inputs.empty()    ? fmt::format("the lowering gives only the timing of {}", ir::opKindName(op.kind))
                                 : fmt::format("the lowering gives only its timing or does not say which permutation it "
                                               "applies, on '{}'",
                                               graph_.tensor(op.inputs[0]).name);
      out_.refusals.push_back(fmt::format("{} '{}': {}", ir::opKindName(op.kind), op.name, why));
      break;
    }
  for (const auto& [block, readers] : opScratch_) releaseScratch(block, readers);
  opScratch_.clear();
  return lowered;
}

Status Lowering::lowerFamily(const ir::Op& op, const std::vector<ir::OpId>& ops, size_t position, int& consumed) {
  // One lowering per family of op kinds (the op table's entry); a new kind joins the family whose units it uses.
  const ir::OpDefinition& def = ir::opDefinition(op.kind);
  switch (def.lowering) {
    case ir::LoweringFamily::kMatMul: return lowerMatMul(op, ops, position, consumed);
    case ir::LoweringFamily::kConv: return lowerConv(op, ops, position, consumed);
    case ir::LoweringFamily::kElementwise: return lowerElementwise(op);
    case ir::LoweringFamily::kBatchNorm: return lowerBatchNorm(op);
    case ir::LoweringFamily::kNormalization: return lowerNormalization(op);
    case ir::LoweringFamily::kPool: return lowerPool(op);
    case ir::LoweringFamily::kReduction: return lowerReduction(op);
    case ir::LoweringFamily::kDataMovement: return lowerDataMovement(op);
    case ir::LoweringFamily::kCopy: return lowerCopy(op);
    case ir::LoweringFamily::kLoss: return lowerLoss(op);
    case ir::LoweringFamily::kLossGrad: return lowerLossGrad(op);
    case ir::LoweringFamily::kGatherGrad: return lowerGatherGrad(op);
    case ir::LoweringFamily::kCommunication: case ir::LoweringFamily::kNone: break;
  }
  return modelError(op.name, fmt::format("op kind {} cannot be lowered{}", ir::opKindName(op.kind),
                                         def.noLowering ? fmt::format(" ({})", def.noLowering) : std::string()));
}

Status Lowering::lowerMatMul(const ir::Op& op, const std::vector<ir::OpId>& ops, size_t position, int& consumed) {
  const ir::Tensor& x = graph_.tensor(op.inputs[0]);
  // The weights of a Transpose read in place are that Transpose's input, stored [N, K].
  const auto transposed = transposedWeights_.find(op.inputs[1]);
  const ir::TensorId weights = transposed != transposedWeights_.end() ? transposed->second : op.inputs[1];
  const ir::Tensor& w = graph_.tensor(weights);
  if (ir::dtypeBytes(x.dtype) != ir::dtypeBytes(w.dtype))
    return modelError(op.name, "activations and weights must have the same storage width");
  // A channels-last map ([N, C, H, W] as N*H*W rows of C: one a window op also reads or writes, or
  // an elementwise op ties to one) is not in the rows and columns a matmul reads.
  for (ir::TensorId t : {op.inputs[0], op.inputs[1], op.outputs[0]})
    if (channelsLast(t))
      return modelError(op.name, fmt::format("{} on the 4-D tensor '{}', which is stored channels-last (a window op or "
                                             "an elementwise op joined to one reads or writes it), cannot be lowered",
                                             ir::opKindName(op.kind), graph_.tensor(t).name));
  MxmJob job;
  job.op = &op;
  job.weights = weights;
  job.out = op.outputs[0];
  // Epilogue fusion: a bias Add of a 1-D weight and an activation that are the sole users.
  if (op.kind != ir::OpKind::kMatMul) {
    // Gemm's C and FusedMatMul's bias are the epilogue's bias; FusedMatMul names its activation.
    if (op.inputs.size() >= 3) {
      job.bias = op.inputs[2];
      // Not on the input's slices: the last K tile's chain reads both at once.
      if (auto s = place(job.bias, graph_.tensor(job.bias).producer < 0, slicesOf(op.inputs[0])); !s) return s;
    }
    if (op.hasAttr("activation")) {
      const auto kind = ir::parseOpKind(op.stringAttr("activation", ""));
      if (!kind) return modelError(op.name, fmt::format("activation '{}' cannot be fused", op.stringAttr("activation", "")));
      job.activation = *kind;
    }
  } else if (const ir::Op* add = soleUser(job.out, ops, position + 1, {ir::OpKind::kAdd})) {
    const ir::TensorId other = add->inputs[0] == job.out ? add->inputs[1] : add->inputs[0];
    if (graph_.tensor(other).producer < 0 && graph_.tensor(other).shape.size() == 1) {
      job.bias = other;
      job.out = add->outputs[0];
      ++consumed;
      if (auto s = place(other, true, slicesOf(op.inputs[0])); !s) return s;
    }
  }
  if (op.kind == ir::OpKind::kMatMul)
    if (const ir::Op* act = soleUser(job.out, ops, position + consumed, {ir::OpKind::kRelu, ir::OpKind::kGelu})) {
      job.out = act->outputs[0];
      job.activation = act->kind;
      ++consumed;
    }
  alloc::SliceSet avoid = slicesOf(op.inputs[0]);
  avoid.insert(slicesOf(job.bias));
  if (auto s = place(job.out, false, avoid); !s) return s;

  const ir::TensorId in = op.inputs[0];
  const TensorState& xs = tensors_.at(in);
  const int eb = ir::dtypeBytes(x.dtype);
  // Batched weights ([..., K, N], attention's activations x activations): batch b multiplies rows
  // [b*m, (b+1)*m) of X by weight rows [b*K, (b+1)*K).
  // Gemm's transB and a Transpose read in place store the weights [N, K].
  job.transposedWeights = transposed != transposedWeights_.end() ||
                          (op.kind == ir::OpKind::kGemm && op.intAttr("transB", 0) != 0 && w.shape.size() == 2);
  const std::int64_t nDim = job.transposedWeights ? w.shape[0] : w.shape.back();
  const std::int64_t kDim = job.transposedWeights ? w.shape[1]
                                                  : w.shape.size() >= 2 ? w.shape[w.shape.size() - 2] : w.shape.back();
  const std::int64_t batches = std::max<std::int64_t>(1, w.elements() / std::max<std::int64_t>(1, kDim * nDim));
  const std::int64_t m = xs.placement.rows / batches;
  const MatMulTiling tiling =
      chooseMatMulTiling(chip_, m, kDim, nDim, eb, chip_.sramBytes() / (3 * std::max(1, eb)));
  job.kTiles = xs.placement.tiles;
  // Counted at the INT8 rate: an FP16 MAC takes the plane time of fp16_rate_divisor INT8 MACs.
  job.macs = batches * m * kDim * nDim * (eb == 1 ? 1 : chip_.mxmFp16RateDivisor);
  // When the output tiles do not spread evenly over the planes, shorter row blocks let every plane
  // take an equal share, as long as a block still hides a weight install behind its stream.
  const int nTiles = tensors_.at(job.out).placement.tiles;
  std::int64_t tm = tiling.tm;
  if ((batches * nTiles) % chip_.mxmPlanes != 0 && m >= std::int64_t{chip_.mxmPlanes} * 2 * chip_.mxmWeightInstallCycles)
    tm = std::min<std::int64_t>(tm, ceilDiv(m, chip_.mxmPlanes));
  for (std::int64_t batch = 0; batch < batches; ++batch)
    for (const auto& [r0, n] : rowPieces(batch * m, (batch + 1) * m, {in, job.out}))
      for (std::int64_t b0 = r0; b0 < r0 + n; b0 += tm) job.blocks.push_back({batch, b0, std::min(tm, r0 + n - b0)});
  job.source = [this, in](int k, const std::array<std::int64_t, 3>& block) {
    return std::make_pair(readStep(in, k, block[1], block[2], false), Access{in, k, block[1], block[2], 0});
  };
  const int tk = tiling.tk;
  job.weightRow = [kDim, tk](std::int64_t batch, int k) { return batch * kDim + std::int64_t{k} * tk; };
  job.weightRows = [kDim, tk](int k) { return std::min<std::int64_t>(tk, kDim - std::int64_t{k} * tk); };
  // Values (functional mode) are alpha x (x W) + beta x bias, W installed transposed for transB:
  // Gemm's transA, alpha or beta without a bias (no epilogue step to scale in), and a bias whose last
  // dimension is neither N nor one or whose rows are neither one nor the output's, are timed alike
  // but not computed.
  if (op.kind == ir::OpKind::kGemm) {
    job.alpha = static_cast<float>(op.floatAttr("alpha", 1.0));
    job.beta = static_cast<float>(op.floatAttr("beta", 1.0));
    job.timingOnly = op.intAttr("transA", 0) != 0 || (op.intAttr("transB", 0) != 0 && !job.transposedWeights) ||
                     ((job.alpha != 1.0f || job.beta != 1.0f) && job.bias < 0);
    if (job.timingOnly)
      timingReason_ = op.intAttr("transA", 0) != 0 ? "Gemm's transA is timed, not computed (its activations are not transposed)"
                                                   : "Gemm's transB or alpha and beta without a bias are timed, not computed";
  }
  // The MXM multiplies FP16 or INT8 (storageTypeComputes); other element types are timed alike.
  if (!storageTypeComputes(x.dtype)) {
    job.timingOnly = true;
    timingReason_ = fmt::format("the MXM multiplies FP16 or INT8 values, not {}", ir::dtypeName(x.dtype));
  }
  if (job.bias >= 0) {
    const std::int64_t biasRows = tensors_.at(job.bias).placement.rows;
    job.biasSplat = storageCols(job.bias) == 1 && nDim > 1;
    job.biasTimingOnly = (storageCols(job.bias) != nDim && !job.biasSplat) ||
                         (biasRows != 1 && biasRows != tensors_.at(job.out).placement.rows) ||
                         graph_.tensor(job.bias).dtype != graph_.tensor(job.out).dtype;
    if (job.biasTimingOnly)
      timingReason_ = fmt::format("its bias '{}' does not line up with the output's rows, values per row or type",
                                  graph_.tensor(job.bias).name);
  }
  return lowerMxm(job);
}

std::vector<std::pair<size_t, size_t>> Lowering::blockGroups(const MxmJob& job, size_t first, size_t last, int nTiles) const {
  const auto rowsOf = [&](size_t g0, size_t g1) {
    std::int64_t rows = 0;
    for (size_t b = g0; b < g1; ++b) rows += job.blocks[b][2];
    return rows;
  };
  // The plane loads after every (tile, group) went to the least loaded plane: the most of them.
  const auto busiestPlane = [&](const std::vector<std::pair<size_t, size_t>>& groups) {
    std::vector<Cycle> load = planeLoad_;
    for (int n = 0; n < nTiles; ++n)
      for (const auto& [g0, g1] : groups)
        *std::min_element(load.begin(), load.end()) +=
            static_cast<Cycle>(job.kTilesOf(n).size()) * std::max<Cycle>(rowsOf(g0, g1), chip_.mxmWeightInstallCycles);
    return *std::max_element(load.begin(), load.end());
  };
  // Greedy: blocks join a group until its rows hide an install (the last group may not).
  std::vector<std::pair<size_t, size_t>> best;
  for (size_t g = first; g < last;) {
    size_t e = g;
    std::int64_t rows = 0;
    while (e < last && (rows < chip_.mxmWeightInstallCycles || e == g)) rows += job.blocks[e++][2];
    best.push_back({g, e});
    g = e;
  }
  const size_t blocks = last - first;
  // Regrouped only when a greedy group (the last) is too short to hide its install.
  if (best.size() < 2 || rowsOf(best.back().first, best.back().second) >= chip_.mxmWeightInstallCycles || job.blockRuns)
    return best;
  // Or G groups of as equal block counts, each hiding an install: the count whose groups leave the
  // busiest plane least loaded (ResNet-50 layer3.0's strided 3 x 3 Conv: 16 blocks of up to 14 rows
  // in 5 greedy groups, the last of 28 rows, give one of the four planes two groups; in 4 groups of
  // 4 blocks each plane takes one).
  Cycle least = busiestPlane(best);
  for (size_t count = 2; count <= blocks; ++count) {
    std::vector<std::pair<size_t, size_t>> groups;
    bool hides = true;
    for (size_t i = 0, b = first; i < count; ++i) {
      const size_t e = b + blocks / count + (i < blocks % count ? 1 : 0);
      hides = hides && rowsOf(b, e) >= chip_.mxmWeightInstallCycles;
      groups.push_back({b, e});
      b = e;
    }
    if (!hides) break;  // more groups are shorter still
    if (const Cycle load = busiestPlane(groups); load < least) least = load, best = std::move(groups);
  }
  return best;
}

Status Lowering::lowerMxm(const MxmJob& job) {
  const ir::Op& op = *job.op;
  const TensorState& ws = tensors_.at(job.weights);
  const TensorState& ys = tensors_.at(job.out);
  const int nTiles = ys.placement.tiles;
  const int mxmFirst = chip_.firstUnit(UnitKind::kMxm);
  const int vxm = chip_.firstUnit(UnitKind::kVxm);
  out_.macs += job.macs;
  if (planeLast_.empty()) planeLast_.assign(chip_.mxmPlanes, {-1, -1});
  if (planeLoad_.empty()) planeLoad_.assign(chip_.mxmPlanes, 0);

  // Blocks in batch order; within a batch, every output tile over every group of row blocks. Blocks
  // shorter than a weight install are grouped until the group's rows hide one: the plane streams
  // every block of the group under one installed weight tile (their partial sums wait in the
  // accumulators), so short blocks (a strided Conv's output rows) do not pay an install each.
  for (size_t first = 0; first < job.blocks.size();) {
    size_t last = first;
    while (last < job.blocks.size() && job.blocks[last][0] == job.blocks[first][0]) ++last;
    const auto groups = blockGroups(job, first, last, nTiles);
    for (int n = 0; n < nTiles; ++n) {
      const std::vector<int> ks = job.kTilesOf(n);
      const int kTiles = static_cast<int>(ks.size());
      for (const auto& group : groups) {
        const auto g0 = std::get<0>(group);
        const auto g1 = std::get<1>(group);
        const std::int64_t batch = job.blocks[g0][0];
        std::int64_t groupRows = 0;
        for (size_t bi = g0; bi < g1; ++bi) groupRows += job.blocks[bi][2];
        // Each (tile, row group) goes to the least loaded plane (lowest index on ties).
        const int plane = static_cast<int>(std::min_element(planeLoad_.begin(), planeLoad_.end()) - planeLoad_.begin());
        planeLoad_[plane] += kTiles * std::max<Cycle>(groupRows, chip_.mxmWeightInstallCycles);
        const int installUnit = mxmFirst + 2 * plane, computeUnit = installUnit + 1;
        // Planes start at different K tiles so that, running together, they read different MEM slices.
        int rotation = (plane * kTiles / chip_.mxmPlanes + n / chip_.mxmPlanes) % kTiles;
        // The last K tile's chain also reads the bias and residual and writes the output: its input
        // must sit on another slice (one MEM queue cannot do both at once). The allocator avoids
        // that when it can; when it could not, another K tile goes last.
        auto clashes = [&](int k) {
          for (size_t bi = g0; bi < g1; ++bi) {
            const int sourceSlice = job.source(k, job.blocks[bi]).first.inst.unit - chip_.firstUnit(UnitKind::kMem);
            if (tailSlicesOf(job, n, job.blocks[bi][1], plane).count(sourceSlice)) return true;
          }
          return false;
        };
        for (int tries = 0; tries < kTiles && clashes(ks[static_cast<size_t>((kTiles - 1 + rotation) % kTiles)]); ++tries)
          rotation = (rotation + 1) % kTiles;
        PlaneRun run;
        for (int step = 0; step < kTiles; ++step) {
          const int k = ks[static_cast<size_t>((step + rotation) % kTiles)];
          // The weight tile (k, n) into the plane's free buffer (two buffers: installs overlap compute).
          Task install;
          install.name = fmt::format("{} install k{} n{}", op.name, k, n);
          Step ins;
          ins.inst = makeInst(installUnit, Opcode::kMxmInstall, 1);
          // Transposed weights: tile (k, n) is the rows n x lanes on of column tile k.
          const std::int64_t planeLanes = chip_.vectorBytes / std::max(1, ir::dtypeBytes(graph_.tensor(job.weights).dtype));
          const int wTile = job.transposedWeights ? k % ws.placement.tiles : n % ws.placement.tiles;
          const std::int64_t wRow = std::min<std::int64_t>(
              job.transposedWeights ? n * planeLanes : job.weightRow(batch, k), ws.placement.rows - 1);
          const int wPiece = ws.piece(wTile, wRow);
          ins.inst.address = ws.placement.address[wPiece] + static_cast<int>(wRow % ws.segmentRows());
          ins.inst.weightUnit = ws.placement.memUnit[wPiece];
          ins.inst.weightRows = static_cast<int>(
              job.transposedWeights ? std::min(planeLanes, ws.placement.rows - wRow) : job.weightRows ? job.weightRows(k) : 0);
          if (job.transposedWeights) {
            isa::FunctionalOperand transposed;
            transposed.transposed = true;
            ins.inst.operand = addOperand(transposed);
          }
          // The tile's rows must lie in one segment for the plane to load them from one slice.
          ins.inst.timingOnly = !job.weightRows || wRow + ins.inst.weightRows > ws.placement.rows ||
                                (wRow % ws.segmentRows()) + ins.inst.weightRows > ws.segmentRows();
          install.steps = {ins};
          const int it = problem_.addTask(std::move(install));
          for (const auto& [wt, wst] : ws.writers[wPiece]) problem_.addDataDependence(wt, wst, it, 0);
          // A reader of the weights' rows: space reused once they are freed (attention's V, a tied
          // head's transposed embedding) is written only after the install.
          noteReader({job.weights, wTile, wRow,
                      std::clamp<std::int64_t>(ins.inst.weightRows, 1, ws.placement.rows - wRow), 0},
                     it);
          // The plane's sequence: install j -> computes j -> install j+1 (issued after the last
          // compute j, so the simulator sees every compute j use the weights installed before it)
          // -> computes j+1.
          if (planeLast_[plane].second >= 0) problem_.addDependence({planeLast_[plane].second, 1, it, 0, 1});
          if (step == 0) run.firstInstall = it;
          for (size_t bi = g0; bi < g1; ++bi) {
            const int ct = addMxmCompute(job, k, n, job.blocks[bi], job.blocks[first][1], computeUnit,
                                         step + 1 == kTiles, vxm);
            if (run.firstCompute < 0) run.firstCompute = ct;
            problem_.addDataDependence(it, 0, ct, 1);
            const int prevCompute = planeLast_[plane].second;
            if (prevCompute >= 0) {
              const Instruction& pc = problem_.tasks()[prevCompute].steps[1].inst;
              problem_.addDependence({prevCompute, 1, ct, 1, Cycle{pc.repeat} * pc.interval});
            }
            planeLast_[plane] = {it, ct};
          }
        }
        run.lastCompute = planeLast_[plane].second;
        out_.planeRuns.resize(chip_.mxmPlanes);
        out_.planeRuns[plane].push_back(run);
      }
    }
    first = last;
  }
  return {};
}

int Lowering::addMxmCompute(const MxmJob& job, int k, int n, const std::array<std::int64_t, 3>& block,
                            std::int64_t batchRow0, int computeUnit, bool last, int vxm) {
  const std::int64_t row0 = block[1], rows = block[2];
  const TensorState& ys = tensors_.at(job.out);
  Task compute;
  compute.name = fmt::format("{} m{} k{} n{}", job.op->name, row0 - batchRow0, k, n);
  auto [read, readAccess] = job.source(k, block);
  compute.steps.push_back(read);
  Step mxm;
  mxm.inst = makeInst(computeUnit, Opcode::kMxmCompute, rows);
  mxm.inst.timingOnly = job.timingOnly;
  if (job.window && !job.timingOnly) mxm.inst.operand = job.window(k, block);
  mxm.producer = 0;
  compute.steps.push_back(mxm);
  std::vector<Access> reads{readAccess}, writes;
  if (last) {
    // Epilogue: + bias, + residual, activation, write.
    const int plane = (computeUnit - chip_.firstUnit(UnitKind::kMxm)) / 2;
    alloc::SliceSet busy;
    for (int c = 0; c < ys.placement.replicas; ++c) busy.insert(ys.blocks[ys.pieceOf(n, row0, c)].slice);
    int tailStep = 1;
    for (ir::TensorId side : {job.bias, job.residual}) {
      if (side < 0) continue;
      Step add;
      add.inst = makeInst(vxm, Opcode::kVxmBinary, rows);
      add.inst.func = isa::VxmFunc::kAdd;
      add.inst.timingOnly = side == job.bias && job.biasTimingOnly;
      if (side == job.bias && !job.biasTimingOnly && (job.biasSplat || job.alpha != 1.0f || job.beta != 1.0f)) {
        isa::FunctionalOperand operand;
        operand.splatB = job.biasSplat;
        if (job.alpha != 1.0f || job.beta != 1.0f) {
          add.inst.func = isa::VxmFunc::kScaleAdd;
          operand.immediate = job.alpha;
          operand.immediate2 = job.beta;
        }
        add.inst.operand = addOperand(operand);
      }
      add.producer = tailStep;
      add.producer2 = static_cast<int>(compute.steps.size()) + 1;
      compute.steps.push_back(add);
      tailStep = static_cast<int>(compute.steps.size()) - 1;
      const TensorState& bs = tensors_.at(side);
      const bool broadcast = bs.placement.rows != ys.placement.rows;
      // A replicated operand: each plane reads its own copy (or one off the chain's other slices).
      const int piece = sidePiece(job, side, n, row0, plane, busy);
      busy.insert(bs.blocks[piece].slice);
      Step read = readStep(side, n % bs.placement.tiles, row0, rows, broadcast);
      read.inst.unit = bs.placement.memUnit[piece];
      read.inst.address = bs.placement.address[piece] + static_cast<int>(broadcast ? 0 : row0 % bs.segmentRows());
      compute.steps.push_back(read);
      reads.push_back({side, n % bs.placement.tiles, broadcast ? 0 : row0, broadcast ? 1 : rows,
                       static_cast<int>(compute.steps.size()) - 1, piece / (bs.placement.tiles * bs.segments())});
    }
    if (job.activation != ir::OpKind::kIdentity) {
      Step act;
      act.inst = makeInst(vxm, Opcode::kVxmUnary, rows);
      act.inst.func = funcOf(job.activation);
      act.inst.timingOnly = !computesValues(job.activation);
      act.producer = tailStep;
      compute.steps.push_back(act);
      tailStep = static_cast<int>(compute.steps.size()) - 1;
    }
    // A feature map stored in several copies: the one result is written by every copy's slice.
    for (int c = 0; c < ys.placement.replicas; ++c) {
      compute.steps.push_back(writeStep(job.out, n, row0, rows, tailStep, c));
      writes.push_back({job.out, n, row0, rows, static_cast<int>(compute.steps.size()) - 1, c});
    }
  }
  const int id = addTask(std::move(compute), reads, writes);
  if (readAccess.tensor < 0) {
    for (const auto& [wt, ws] : job.scratchSource(readAccess, id)) problem_.addDataDependence(wt, ws, id, 0);
  }
  return id;
}

Status Lowering::lowerElementwise(const ir::Op& op) {
  // A chain read -> ALU [-> ALU ...] -> write per tile and row piece; every operand after the first
  // joins through a binary ALU step as a side read. Where(c, x, y) is a select on three ALUs of the
  // mesh: x masked by c, y masked by not c (each with its own read of c), then their sum (one of the
  // two is 0, so the sum is exact).
  std::vector<ir::TensorId> operands = op.inputs;
  std::vector<isa::VxmFunc> funcs;
  if (op.kind == ir::OpKind::kWhere) {
    operands = {op.inputs[1], op.inputs[0], op.inputs[2], op.inputs[0]};
    funcs = {isa::VxmFunc::kMaskSet, isa::VxmFunc::kMaskClear, isa::VxmFunc::kAdd};
  } else {
    // Mod's fmod = 1 takes the dividend's sign (C's fmod), fmod = 0 the divisor's.
    const bool fmod = op.kind == ir::OpKind::kMod && op.intAttr("fmod", 0) != 0;
    funcs.assign(std::max<size_t>(1, operands.size() - 1), fmod ? isa::VxmFunc::kFmod : funcOf(op.kind));
  }
  return lowerVxmChain(op, operands, funcs, computesValues(op.kind));
}

namespace {

// Output row r of a broadcast operand reads its row (r / repeat) mod its rows when the operand keeps
// one contiguous block of the output's row dimensions and has 1 in the others (a ReduceMax over a
// middle axis with keepdims, subtracted from its input): `repeat` is the product of the output's
// row dimensions after the block (0: the operand is not of this form).
std::int64_t rowRepeat(const std::vector<std::int64_t>& in, const std::vector<std::int64_t>& out) {
  if (out.size() < 2 || in.size() > out.size()) return 0;
  std::vector<std::int64_t> e(out.size() - in.size(), 1);
  e.insert(e.end(), in.begin(), in.end());
  int first = -1, last = -1;
  for (size_t d = 0; d + 1 < out.size(); ++d) {
    if (out[d] == 1) continue;
    if (e[d] != out[d] && e[d] != 1) return 0;
    if (e[d] != out[d]) continue;
    if (last >= 0 && last != static_cast<int>(d) - 1) {
      // a kept dimension after a broadcast one: the block is contiguous only across size-1 dimensions
      for (size_t g = static_cast<size_t>(last) + 1; g < d; ++g)
        if (out[g] != 1) return 0;
    }
    if (first < 0) first = static_cast<int>(d);
    last = static_cast<int>(d);
  }
  if (first < 0) return 0;
  std::int64_t repeat = 1;
  for (size_t d = static_cast<size_t>(last) + 1; d + 1 < out.size(); ++d) repeat *= out[d];
  return repeat;
}

}  // namespace

Status Lowering::lowerVxmChain(const ir::Op& op, const std::vector<ir::TensorId>& operands,
                               const std::vector<isa::VxmFunc>& funcs, bool valuesKnown) {
  const ir::TensorId out = op.outputs[0];
  alloc::SliceSet avoid;
  for (ir::TensorId in : operands)
    avoid.insert(slicesOf(in));
  if (auto s = place(out, false, avoid); !s) return s;
  const TensorState& ys = tensors_.at(out);
  const std::int64_t rows = ys.placement.rows;
  std::vector<ir::TensorId> aligned{out};
  for (ir::TensorId in : operands) aligned.push_back(in);
  const int vxm = chip_.firstUnit(UnitKind::kVxm);
  // Lanes line up when every operand has the output's values per row, or one value per row (its lane
  // 0 splatted over the lanes), and the output's rows or one row (read with stride 0); other
  // broadcasts are timed alike but not computed.
  bool timingOnly = !valuesKnown;
  std::vector<bool> splat(operands.size(), false);
  // An operand whose shape is the output's trailing dimensions (an attention mask [S, T] added to
  // scores [B, heads, S, T]) repeats every `its rows` output rows: row r reads its row r mod rows.
  std::vector<std::int64_t> period(operands.size(), 0);
  // An operand that keeps a block of the output's row dimensions and broadcasts the later ones
  // (rowRepeat) gives `repeat` consecutive output rows one of its rows, read with stride 0.
  std::vector<std::int64_t> repeat(operands.size(), 0);
  std::vector<int> channelMap(operands.size(), -1);  // per operand: its per-channel element map (BatchNormalization)
  const auto& outShape = graph_.tensor(out).shape;
  for (size_t i = 0; i < operands.size(); ++i) {
    const std::int64_t inRows = tensors_.at(operands[i]).placement.rows;
    const auto& inShape = graph_.tensor(operands[i]).shape;
    // A row-major operand with channels ([C, 1, 1]) has one value per channel, a column of a
    // channels-last output, not one per row, even when it has as many rows as the output (H x W = C).
    const bool perChannel = channelsLast(out) && !channelsLast(operands[i]) && inShape.size() >= 3 &&
                            inShape[inShape.size() - 3] != 1;
    splat[i] = storageCols(operands[i]) == 1 && storageCols(out) > 1 && !perChannel;
    // BatchNormalization's per-channel operand [C] in a graph without convolutions, whose channel
    // axis is a row axis ([N, C, ...] stored rows of the last axis): an SXM permute (an element map
    // [C] -> [N, C, ..., 1]) puts each row's channel value in lane 0, splatted over the lanes.
    if (op.kind == ir::OpKind::kBatchNormalization && i > 0 && !channelsLast(out) && outShape.size() >= 3 &&
        inShape.size() == 1 && inShape[0] == outShape[1] && tensors_.at(operands[i]).placement.tiles == 1) {
      isa::ElementMap map;
      map.sources = {graph_.tensor(operands[i]).name};
      map.sourceDims = inShape;
      map.outDims.assign(outShape.begin(), outShape.end() - 1);
      map.outDims.push_back(1);
      map.outCols = 1;
      map.sourceCols = {storageCols(operands[i])};
      map.from = {1};
      map.starts = {0};
      map.steps = {1};
      channelMap[i] = static_cast<int>(out_.maps.size());
      out_.maps.push_back(std::move(map));
      mapReads_.push_back({operands[i]});
      splat[i] = storageCols(out) > 1;
      continue;
    }
    if (inRows > 1 && inRows < rows && rows % inRows == 0 && inShape.size() < outShape.size() &&
        std::equal(inShape.begin(), inShape.end(), outShape.end() - static_cast<std::ptrdiff_t>(inShape.size())) &&
        !channelsLast(out))
      period[i] = inRows;
    // A per-image channel vector [N, C, 1, 1] on a channels-last map [N, C, H, W] (squeeze-excitation's
    // gate): image n's H*W rows take its row n.
    if (channelsLast(out) && inShape.size() == 4 && inShape[0] == outShape[0] &&
        inShape[1] == outShape[1] && inShape[2] == 1 && inShape[3] == 1 && inRows > 1 && inRows < rows &&
        rows == inRows * outShape[2] * outShape[3])
      repeat[i] = outShape[2] * outShape[3];
    if (inRows > 1 && inRows < rows && !period[i] && !repeat[i] && !channelsLast(out)) {
      const std::int64_t r = rowRepeat(inShape, outShape);
      if (r == 1 && rows % inRows == 0) period[i] = inRows;  // leading dimensions of 1, then the output's trailing ones
      if (r > 1 && rows % (r * inRows) == 0) repeat[i] = r;
    }
    if ((storageCols(operands[i]) != storageCols(out) && !splat[i]) ||
        (inRows != rows && inRows != 1 && !period[i] && !repeat[i])) {
      // Any other broadcast (ConvNeXt's layer scale [C, 1, 1] on a channels-last map): each row of
      // the operand's values for the output's rows re-formed on the SXM from an element map.
      if (const int map = timingOnly ? -1 : broadcastMap(operands[i], out); map >= 0) {
        channelMap[i] = map;
        splat[i] = false;
        continue;
      }
      if (!timingOnly)
        timingReason_ = fmt::format("operand '{}' is a broadcast whose lanes or rows do not line up with the output's",
                                    graph_.tensor(operands[i]).name);
      timingOnly = true;
    }
  }
  // Tensors of other element types than the storage type's (INT32, FP32, BF16, bool) name their
  // types in the operand; lane l of a vector is the same column in every operand only when the
  // element widths of the operands that are not splatted (one value per row) agree with the
  // output's, or the output and each of them are one tile.
  const auto dtypeOf = [&](ir::TensorId t) { return graph_.tensor(t).dtype; };
  const ir::DType outType = dtypeOf(out);
  bool typed = outType != ir::DType::kF16 && outType != ir::DType::kI8;
  bool widths = true, oneTile = ys.placement.tiles == 1;
  for (size_t i = 0; i < operands.size(); ++i) {
    typed = typed || dtypeOf(operands[i]) != outType;
    if (splat[i]) continue;
    widths = widths && ir::dtypeBytes(dtypeOf(operands[i])) == ir::dtypeBytes(outType);
    oneTile = oneTile && tensors_.at(operands[i]).placement.tiles == 1;
  }
  if (!timingOnly && !widths && !oneTile) {
    timingReason_ = "its operands' element widths differ and they span several tiles (their lanes do not line up)";
    timingOnly = true;
  }
  // Pieces do not cross a period's end or a segment end of a periodic operand.
  std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
  for (const auto& [p0, pn] : rowPieces(0, rows, aligned))
    for (std::int64_t r = p0; r < p0 + pn;) {
      std::int64_t end = p0 + pn;
      for (size_t i = 0; i < operands.size(); ++i) {
        if (period[i]) {
          const std::int64_t seg = std::min(period[i], tensors_.at(operands[i]).segmentRows());
          end = std::min({end, (r / period[i] + 1) * period[i], r - r % period[i] + (r % period[i] / seg + 1) * seg});
        }
        if (repeat[i] && !timingOnly) end = std::min(end, (r / repeat[i] + 1) * repeat[i]);
      }
      pieces.push_back({r, end - r});
      r = end;
    }
  for (int t = 0; t < ys.placement.tiles; ++t)
    for (const auto& piece : pieces) {
      const auto r0 = std::get<0>(piece);
      const auto n = std::get<1>(piece);
      Task task;
      task.name = fmt::format("{} tile {}", op.name, t);
      std::vector<Access> reads;
      auto input = [&](ir::TensorId in) {
        const TensorState& is = tensors_.at(in);
        const auto k = static_cast<size_t>(std::find(operands.begin(), operands.end(), in) - operands.begin());
        const int tile = t % is.placement.tiles;
        if (channelMap[k] >= 0) {  // the operand's rows streamed once per output row, re-formed on the SXM
          task.steps.push_back(readStep(in, 0, 0, n, true, sideReads_++));
          reads.push_back({in, 0, 0, 1, static_cast<int>(task.steps.size()) - 1});
          Step permute;
          const bool west = chip_.units()[task.steps.back().inst.unit].slice < chip_.units()[vxm].slice;
          permute.inst = makeInst(chip_.firstUnit(UnitKind::kSxm) + (west ? 0 : chip_.sxmUnits / 2), Opcode::kSxmShift, n);
          permute.inst.sxm = isa::SxmFunc::kPermute;
          isa::FunctionalOperand where;
          where.row0 = r0;
          where.map = channelMap[k];
          // A map of the output's values per row makes each tile's lanes; BatchNormalization's (one per row) lane 0.
          where.tile = out_.maps[static_cast<size_t>(channelMap[k])].outCols > 1 ? t : 0;
          permute.inst.operand = addOperand(where);
          permute.producer = static_cast<int>(task.steps.size()) - 1;
          task.steps.push_back(permute);
          permuteReads(channelMap[k], out, where.tile, r0, n, reads);
          return static_cast<int>(task.steps.size()) - 1;
        }
        if (!timingOnly && repeat[k]) {  // one row for the piece's rows, read with stride 0
          const std::int64_t row = (r0 / repeat[k]) % is.placement.rows;
          Step one = readStep(in, tile, row, 1, false);
          one.inst.repeat = static_cast<std::int32_t>(n);
          one.inst.stride = 0;
          task.steps.push_back(one);
          reads.push_back({in, tile, row, 1, static_cast<int>(task.steps.size()) - 1});
          return static_cast<int>(task.steps.size()) - 1;
        }
        const bool periodic = !timingOnly && period[k] > 0;
        const bool broadcast = is.placement.rows != rows && !periodic;
        const std::int64_t from = periodic ? r0 % is.placement.rows : r0;
        task.steps.push_back(readStep(in, tile, from, n, broadcast, broadcast ? sideReads_++ : 0));
        reads.push_back({in, tile, broadcast ? 0 : from, broadcast ? 1 : n, static_cast<int>(task.steps.size()) - 1});
        return static_cast<int>(task.steps.size()) - 1;
      };
      int tail = input(operands[0]);
      // A select's second ALU starts a branch of its own (operands 2 and 3); its third joins the two.
      const bool select = op.kind == ir::OpKind::kWhere;
      int branch = -1;
      for (size_t i = 0; i < funcs.size(); ++i) {
        if (select && i == 1) {
          branch = tail;
          tail = input(operands[2]);
        }
        // An operand already read by this chain is not read twice from one slice at once: x * x takes
        // both ALU operands from the one stream it reads; a later repeat applies the function to the
        // chain's own value.
        const std::size_t side = select && i == 1 ? 3 : i + 1;  // the operand this step reads beside its chain value
        const bool joins = select && i == 2;                     // the select's sum of its two branches
        const bool next = joins || side < operands.size();
        const bool seen = next && !select && std::find(operands.begin(), operands.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                                       operands[side]) != operands.begin() + static_cast<std::ptrdiff_t>(i) + 1;
        const bool square = seen && i == 0;
        const bool binary = next && (!seen || square);
        // The step's first operand is a fresh read (step 0, a select's second branch) or the chain's value.
        const bool fresh = i == 0 || (select && i == 1);
        const std::size_t first = i == 0 ? 0 : 2;
        const bool splatSide = binary && !square && !joins && splat[side];
        Step alu;
        alu.inst = makeInst(vxm, binary ? Opcode::kVxmBinary : Opcode::kVxmUnary, n);
        alu.inst.func = funcs[i];
        alu.inst.timingOnly = timingOnly;
        const auto immediates = vxmImmediates(op);
        if (!timingOnly && ((fresh && splat[first]) || splatSide || typed || immediates)) {
          isa::FunctionalOperand operand;
          if (immediates) std::tie(operand.immediate, operand.immediate2) = *immediates;
          operand.splatA = fresh && splat[first];
          operand.splatB = splatSide;
          // A fresh read is of the op's operand's type, the chain's value of the output's.
          const ir::DType a = fresh ? dtypeOf(operands[first]) : outType;
          const ir::DType b = binary && !square && !joins ? dtypeOf(operands[side]) : joins ? outType : a;
          if (typed) operand.types = isa::packElementTypes(static_cast<int>(a), static_cast<int>(b), static_cast<int>(outType));
          alu.inst.operand = addOperand(operand);
        }
        alu.producer = tail;
        task.steps.push_back(alu);
        tail = static_cast<int>(task.steps.size()) - 1;
        if (binary)
          task.steps[tail].producer2 = joins ? branch : square ? task.steps[tail].producer : input(operands[side]);
      }
      task.steps.push_back(writeStep(out, t, r0, n, tail));
      addTask(std::move(task), reads, {{out, t, r0, n, static_cast<int>(task.steps.size()) - 1}});
    }
  return {};
}

Status Lowering::lowerNormalization(const ir::Op& op) {
  // Two passes over the row (DESIGN: VXM): a statistics pass per tile (Softmax: exp and sum;
  // LayerNorm: mean and variance) whose results stay in the ALU, then, once every tile of the
  // row has been seen, a normalising pass per tile (scale, plus LayerNorm's gamma and beta).
  const ir::TensorId in = op.inputs[0], out = op.outputs[0];
  if (auto s = place(out, false, slicesOf(in)); !s) return s;
  const TensorState& xs = tensors_.at(in);
  const TensorState& ys = tensors_.at(out);
  const std::int64_t rows = ys.placement.rows;
  const int vxm = chip_.firstUnit(UnitKind::kVxm);
  const bool layerNorm = op.kind == ir::OpKind::kLayerNormalization;
  // The statistics go to a named accumulator: Softmax reduces its axis (running maximum and sum of
  // exponentials), LayerNormalization every axis from its axis on (running mean and variance).
  isa::Accumulator stat;
  stat.kind = layerNorm ? isa::Accumulator::Kind::kMoments : isa::Accumulator::Kind::kSoftmax;
  stat.dims = storageDims(in);
  stat.reduced.assign(stat.dims.size(), 0);
  const auto rank = static_cast<std::int64_t>(graph_.tensor(in).shape.size());
  std::int64_t axis = op.intAttr("axis", -1);
  if (axis < 0) axis += rank;
  for (std::int64_t a = layerNorm ? axis : std::max<std::int64_t>(0, axis); a < (layerNorm ? rank : axis + 1); ++a)
    stat.reduced[storageAxis(in, a)] = 1;
  if (rank == 0) stat.reduced[0] = 1;
  stat.epsilon = op.floatAttr("epsilon", 1e-5);
  const int acc = addAccumulator(stat);
  const bool typeComputes = storageTypeComputes(graph_.tensor(in).dtype) && graph_.tensor(in).dtype == graph_.tensor(out).dtype;
  if (!typeComputes)
    timingReason_ = fmt::format("its statistics are accumulated for FP16 or INT8 values, not {}",
                                ir::dtypeName(graph_.tensor(in).dtype));
  // Statistics over the values of a row only: a normalising task waits for the statistics of its own
  // rows; over other axes too, for every statistics task.
  bool rowsOnly = stat.reduced.back() != 0;
  for (size_t d = 0; d + 1 < stat.dims.size(); ++d) rowsOnly = rowsOnly && !stat.reduced[d];
  std::vector<RowStatistics> stats;
  for (int t = 0; t < xs.placement.tiles; ++t)
    for (const auto& [r0, n] : rowPieces(0, xs.placement.rows, {in})) {
      Task task = accumulateTask(fmt::format("{} statistics tile {}", op.name, t), in, acc, t, r0, n, typeComputes);
      stats.push_back({addTask(std::move(task), {{in, t, r0, n, 0}}, {}), r0, n});
    }
  std::vector<ir::TensorId> params;
  // LayerNormalization's scale and bias line up with the output's lanes when they have its values
  // per row, and one row, its rows, or the rows of its trailing dimensions (normalised over more
  // than the last axis: output row r reads their row r mod theirs).
  bool paramsAligned = true;
  std::vector<std::int64_t> period;  // per parameter: its rows when they repeat over the output's, else 0
  const auto& outShape = graph_.tensor(out).shape;
  if (layerNorm)
    for (size_t i = 1; i < op.inputs.size() && i < 3; ++i) {
      if (auto s = place(op.inputs[i], graph_.tensor(op.inputs[i]).producer < 0); !s) return s;
      params.push_back(op.inputs[i]);
      const std::int64_t prow = tensors_.at(op.inputs[i]).placement.rows;
      auto shape = graph_.tensor(op.inputs[i]).shape;
      while (!shape.empty() && shape.front() == 1) shape.erase(shape.begin());
      const bool trailing = shape.size() <= outShape.size() &&
                            std::equal(shape.begin(), shape.end(), outShape.end() - static_cast<std::ptrdiff_t>(shape.size()));
      period.push_back(prow > 1 && prow < rows && rows % prow == 0 && trailing ? prow : 0);
      paramsAligned = paramsAligned && storageCols(op.inputs[i]) == storageCols(out) &&
                      (prow == 1 || prow == rows || period.back() > 0) &&
                      graph_.tensor(op.inputs[i]).dtype == graph_.tensor(out).dtype;
    }
  if (!paramsAligned)
    timingReason_ = "its scale or bias does not line up with the output's rows and values per row";
  // Pieces do not cross a period's end or a segment end of a periodic parameter.
  std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
  for (const auto& [p0, pn] : rowPieces(0, rows, {in, out}))
    for (std::int64_t r = p0; r < p0 + pn;) {
      std::int64_t end = p0 + pn;
      for (size_t i = 0; i < params.size() && paramsAligned; ++i)
        if (period[i]) {
          const std::int64_t seg = std::min(period[i], tensors_.at(params[i]).segmentRows());
          end = std::min({end, (r / period[i] + 1) * period[i], r - r % period[i] + (r % period[i] / seg + 1) * seg});
        }
      pieces.push_back({r, end - r});
      r = end;
    }
  for (int t = 0; t < ys.placement.tiles; ++t)
    for (const auto& [r0, n] : pieces) {
      Task task;
      task.name = fmt::format("{} normalise tile {}", op.name, t);
      const int tile = t % xs.placement.tiles;
      task.steps.push_back(readStep(in, tile, r0, n, false));
      std::vector<Access> reads{{in, tile, r0, n, 0}};
      Step scale;
      scale.inst = makeInst(vxm, Opcode::kVxmUnary, n);
      scale.inst.func = isa::VxmFunc::kNormalize;
      scale.inst.operand = addOperand({acc, tile, r0});
      scale.producer = 0;
      task.steps.push_back(scale);
      int tail = 1;
      for (size_t i = 0; i < params.size(); ++i) {
        const TensorState& ps = tensors_.at(params[i]);
        Step alu;
        alu.inst = makeInst(vxm, Opcode::kVxmBinary, n);
        alu.inst.func = i == 0 ? isa::VxmFunc::kMul : isa::VxmFunc::kAdd;
        alu.inst.timingOnly = !paramsAligned;
        alu.producer = tail;
        alu.producer2 = static_cast<int>(task.steps.size()) + 1;
        task.steps.push_back(alu);
        tail = static_cast<int>(task.steps.size()) - 1;
        const bool periodic = paramsAligned && period[i] > 0;
        const bool broadcast = ps.placement.rows != rows && !periodic;
        const std::int64_t from = periodic ? r0 % period[i] : r0;
        task.steps.push_back(readStep(params[i], t % ps.placement.tiles, from, n, broadcast, broadcast ? sideReads_++ : 0));
        reads.push_back({params[i], t % ps.placement.tiles, broadcast ? 0 : from, broadcast ? 1 : n,
                         static_cast<int>(task.steps.size()) - 1});
      }
      task.steps.push_back(writeStep(out, t, r0, n, tail));
      const int id = addTask(std::move(task), reads, {{out, t, r0, n, static_cast<int>(task.steps.size()) - 1}});
      waitForStatistics(stats, id, r0, rowsOnly ? n : -1);
    }
  return {};
}

std::vector<Lowering::RowStatistics> Lowering::statisticsPass(const ir::Op& op, ir::TensorId in, isa::VxmFunc func) {
  const TensorState& xs = tensors_.at(in);
  const int vxm = chip_.firstUnit(UnitKind::kVxm);
  std::vector<RowStatistics> stats;
  for (int t = 0; t < xs.placement.tiles; ++t)
    for (const auto& [r0, n] : rowPieces(0, xs.placement.rows, {in})) {
      Task task;
      task.name = fmt::format("{} statistics {} tile {}", op.name, graph_.tensor(in).name, t);
      task.steps.push_back(readStep(in, t, r0, n, false));
      Step alu;
      alu.inst = makeInst(vxm, Opcode::kVxmUnary, n);
      alu.inst.func = func;
      alu.inst.timingOnly = true;  // the statistics stay in the ALU: a cost, not values the program names
      alu.producer = 0;
      task.steps.push_back(alu);
      stats.push_back({addTask(std::move(task), {{in, t, r0, n, 0}}, {}), r0, n});
    }
  return stats;
}

void Lowering::waitForStatistics(const std::vector<RowStatistics>& stats, int task, std::int64_t row0,
                                 std::int64_t rows) {
  for (const auto& st : stats) {
    if (rows >= 0 && (st.row0 >= row0 + rows || row0 >= st.row0 + st.rows)) continue;
    const Instruction& si = problem_.tasks()[st.task].steps[1].inst;
    problem_.addDependence({st.task, 1, task, 0, Cycle{si.repeat} * si.interval});
  }
}

Status Lowering::lowerDataMovement(const ir::Op& op) {
  // Transposes, reshapes, gathers and their kin move every vector of the output once through the
  // SXM (shift/permute/transpose), which re-forms vectors in the output's layout. The timing model
  // streams output tile t from input tile t mod T_in: the same number of vectors, read at the
  // input's real addresses (wrapping when the output has more rows than the input). A Gather's
  // rows depend on run-time indices; the static schedule streams the table's rows in order.
  const ir::TensorId in = op.inputs[0], out = op.outputs[0];
  if (auto s = place(out, false, slicesOf(in)); !s) return s;
  // The output's vectors are the input's in order (a copy, functional mode) when the values per
  // row, the type, the rows and the storage order stay, or one row of one tile is repeated; a
  // transpose must keep its axes, and a Gather's rows are the run-time indices' (timed as the table
  // in order). A channels-last map [N, C, H, W] reshaped to a row-major [N, C, H x W] keeps its
  // values per row and rows when C = H x W, but not their order.
  const TensorState& xs = tensors_.at(in);
  const TensorState& ys = tensors_.at(out);
  const auto& inShape = graph_.tensor(in).shape;
  const auto& outShape = graph_.tensor(out).shape;
  const bool sameOrder = channelsLast(in) == channelsLast(out) &&
                         (!channelsLast(in) || (inShape[0] == outShape[0] && inShape[1] == outShape[1]));
  bool copies = op.kind != ir::OpKind::kGather && storageCols(in) == storageCols(out) && sameOrder &&
                graph_.tensor(in).dtype == graph_.tensor(out).dtype &&
                (xs.placement.rows == ys.placement.rows || (xs.placement.rows == 1 && xs.placement.tiles == 1));
  if (op.kind == ir::OpKind::kTranspose) {
    const auto perm = op.intsAttr("perm");
    if (perm.empty()) copies = copies && graph_.tensor(in).shape.size() <= 1;  // no perm: the axes reversed
    for (size_t i = 0; i < perm.size(); ++i) copies = copies && perm[i] == static_cast<std::int64_t>(i);
  }
  const int map = copies ? -1 : elementMap(op, out);
  copyVectors(op, in, out, 0, ys.placement.tiles, 0, ys.placement.rows, 0, 0, true,
              copies ? isa::SxmFunc::kCopy : isa::SxmFunc::kUnspecified, -1, map);
  return {};
}

void Lowering::copyVectors(const ir::Op& op, ir::TensorId in, ir::TensorId out, int outTile0, int outTiles,
                           std::int64_t outRow0, std::int64_t outRows, int inTile0, std::int64_t inRow0, bool walk,
                           isa::SxmFunc func, int operand, int map) {
  const TensorState& xs = tensors_.at(in);
  const TensorState& ys = tensors_.at(out);
  const int sxmFirst = chip_.firstUnit(UnitKind::kSxm);
  const int vxmSlice = chip_.units()[chip_.firstUnit(UnitKind::kVxm)].slice;
  const int sxmHalf = std::max(1, chip_.sxmUnits / 2);
  const std::int64_t inRows = xs.placement.rows;
  int piece = 0;
  for (int t = outTile0; t < outTile0 + outTiles; ++t)
    for (std::int64_t r = outRow0; r < outRow0 + outRows;) {
      // Walking: the output's vectors in order take the input's in order (a reshape re-forms rows
      // from every input tile); otherwise output tile t takes input tile inTile0 + t - outTile0.
      const std::int64_t g = walk ? std::int64_t{t - outTile0} * outRows + (r - outRow0) + inRow0 : inRow0 + r - outRow0;
      const int tile = static_cast<int>((inTile0 + (walk ? g / inRows : t - outTile0)) % xs.placement.tiles);
      const std::int64_t ir0 = g % inRows;
      const std::int64_t n = std::min({outRow0 + outRows - r, (r / ys.segmentRows() + 1) * ys.segmentRows() - r,
                                       (ir0 / xs.segmentRows() + 1) * xs.segmentRows() - ir0, inRows - ir0});
      Task task;
      task.name = fmt::format("{} tile {} rows {}", op.name, t, r);
      task.steps.push_back(readStep(in, tile, ir0, n, false));
      Step shift;
      // West-half reads use a west SXM, east-half reads an east one (the shortest streams), the
      // pieces taking the units of their half in turn.
      const bool west = chip_.units()[task.steps[0].inst.unit].slice < vxmSlice;
      shift.inst = makeInst(sxmFirst + (west ? 0 : chip_.sxmUnits / 2) + piece++ % sxmHalf, Opcode::kSxmShift, n);
      shift.inst.sxm = map >= 0 ? isa::SxmFunc::kPermute : func;
      shift.inst.operand = operand;
      std::vector<Access> reads = {{in, tile, ir0, n, 0}};
      if (map >= 0) {
        isa::FunctionalOperand where;
        where.tile = t;
        where.row0 = r;
        where.map = map;
        shift.inst.operand = addOperand(where);
        permuteReads(map, out, t, r, n, reads);
      }
      shift.producer = 0;
      task.steps.push_back(shift);
      task.steps.push_back(writeStep(out, t, r, n, 1));
      addTask(std::move(task), reads, {{out, t, r, n, 2}});
      r += n;
    }
}

void Lowering::permuteReads(int map, ir::TensorId out, int tile, std::int64_t row0, std::int64_t rows, std::vector<Access>& reads) const {
  // The source rows the piece's elements take, per source tile (a Gather's rows are the run-time
  // indices': the whole table and the whole index tensor).
  const isa::ElementMap& m = out_.maps[static_cast<size_t>(map)];
  const auto& sources = mapReads_[static_cast<size_t>(map)];
  auto whole = [&](ir::TensorId src) {
    for (int st = 0; st < tensors_.at(src).placement.tiles; ++st) reads.push_back({src, st, 0, tensors_.at(src).placement.rows, 1});
  };
  const TensorState& ys = tensors_.at(out);
  std::int64_t elements = 1;
  for (std::int64_t d : m.outDims) elements *= d;
  // Past kPreciseElements output elements the piece waits for its sources whole (a bound on the
  // compile's work, counted in elements).
  constexpr std::int64_t kPreciseElements = std::int64_t{1} << 22;
  if (!m.indices.empty() || elements > kPreciseElements) {
    for (ir::TensorId src : sources) whole(src);
    return;
  }
  const std::int64_t outLanes = chip_.vectorBytes / std::max(1, ir::dtypeBytes(static_cast<ir::DType>(ys.placement.dtype)));
  std::map<std::pair<size_t, int>, std::pair<std::int64_t, std::int64_t>> span;  // (source, tile) -> rows [lo, hi]
  for (std::int64_t r = row0; r < row0 + rows; ++r)
    for (std::int64_t c = std::int64_t{tile} * outLanes; c < std::min(m.outCols, std::int64_t{tile + 1} * outLanes); ++c) {
      const std::int64_t f = r * m.outCols + c;
      if (f >= elements) break;
      const auto [k, flat] = isa::sourceElementOf(m, f);
      const std::int64_t cols = std::max<std::int64_t>(1, m.sourceCols[k]);
      const TensorState& ss = tensors_.at(sources[k]);
      const std::int64_t srcLanes = chip_.vectorBytes / std::max(1, ir::dtypeBytes(static_cast<ir::DType>(ss.placement.dtype)));
      const std::pair<size_t, int> key{k, static_cast<int>(flat % cols / srcLanes)};
      const std::int64_t row = flat / cols;
      auto it = span.find(key);
      if (it == span.end()) span[key] = {row, row};
      else it->second = {std::min(it->second.first, row), std::max(it->second.second, row)};
    }
  for (const auto& [key, rowsOf] : span)
    reads.push_back({sources[key.first], key.second, rowsOf.first, rowsOf.second - rowsOf.first + 1, 1});
}

void Lowering::freeDead(const std::vector<ir::OpId>& ops, size_t done, const std::set<ir::TensorId>& keep) {
  // A tensor is dead once every user among this shard's ops has been lowered.
  std::set<ir::OpId> pending(ops.begin() + static_cast<std::ptrdiff_t>(done), ops.end());
  for (auto it = tensors_.begin(); it != tensors_.end(); ++it) {
    TensorState& st = it->second;
    // A resident leaf stays for the program, unless a value this shard computes replaces it.
    const bool overwritten = overwritten_.count(it->first) > 0;
    if ((st.pinned && !overwritten) || st.blocks.empty() || keep.count(it->first)) continue;
    const auto& users = graph_.tensor(it->first).users;
    if (std::any_of(users.begin(), users.end(), [&](ir::OpId u) { return pending.count(u) > 0; })) continue;
    if (!overwritten &&
        (st.writers.empty() || std::all_of(st.writers.begin(), st.writers.end(), [](const auto& w) { return w.empty(); })))
      continue;
    for (size_t p = 0; p < st.blocks.size(); ++p) releaseScratch(st.blocks[p], st.readers[p], st.writers[p]);
    st.blocks.clear();
  }
}

void Lowering::finish() {
  for (const auto& [id, st] : tensors_) out_.tensors.push_back(st.placement);
  std::vector<Cycle> planeBusy(chip_.mxmPlanes, 0);
  for (const auto& task : problem_.tasks())
    for (const auto& s : task.steps)
      if (s.inst.op == Opcode::kMxmCompute)
        planeBusy[(s.inst.unit - chip_.firstUnit(UnitKind::kMxm)) / 2] += Cycle{s.inst.repeat} * s.inst.interval;
  out_.matmulLowerBound = planeBusy.empty() ? 0 : *std::max_element(planeBusy.begin(), planeBusy.end());
}

}  // namespace detail

namespace {

bool isMxmOp(const ir::Op& op) {
  return op.kind == ir::OpKind::kMatMul || op.kind == ir::OpKind::kGemm || op.kind == ir::OpKind::kConv;
}

// The shard's ops with each short branch of a two-branch Add (a ResNet downsample shortcut: fewer
// matmuls and Convs than the other branch) lowered just before the other branch's last matmul or
// Conv, so that the Add fuses into that op's epilogue (its residual is the short branch's output,
// already placed) and the short branch's MXM runs do not wait for the long one: in the order given
// (a ResNet block's: conv c, its BN, the downsample, its BN, the Add) the Add would fuse into the
// downsample, whose computes would then follow conv c's. Orders that would break a dependence are
// left as they are.
std::vector<ir::OpId> shortBranchesFirst(const ir::Graph& graph, std::vector<ir::OpId> ops) {
  std::map<ir::OpId, size_t> position;
  for (size_t k = 0; k < ops.size(); ++k) position[ops[k]] = k;
  for (size_t i = 0; i < ops.size(); ++i) {
    const ir::Op& add = graph.op(ops[i]);
    if (add.kind != ir::OpKind::kAdd || add.inputs.size() != 2) continue;
    // The shard's ops each input depends on, itself included.
    const auto ancestors = [&](ir::TensorId t) {
      std::set<ir::OpId> seen;
      std::vector<ir::OpId> work;
      if (const int p = graph.tensor(t).producer; p >= 0 && position.count(p)) work.push_back(p);
      while (!work.empty()) {
        const ir::OpId o = work.back();
        work.pop_back();
        if (!seen.insert(o).second) continue;
        for (ir::TensorId in : graph.op(o).inputs)
          if (const int p = graph.tensor(in).producer; p >= 0 && position.count(p)) work.push_back(p);
      }
      return seen;
    };
    const ir::TensorId a = add.inputs[0], b = add.inputs[1];
    const int pa = graph.tensor(a).producer, pb = graph.tensor(b).producer;
    if (pa < 0 || pb < 0 || !position.count(pa) || !position.count(pb)) continue;
    const bool aLast = position[pa] > position[pb];
    const std::set<ir::OpId> last = ancestors(aLast ? a : b), first = ancestors(aLast ? b : a);
    std::vector<ir::OpId> moved, kept;  // the last-lowered branch's own ops, in order, and the rest
    size_t movedMxm = 0, firstMxm = 0;
    ir::OpId target = -1;  // the first branch's last matmul or Conv
    for (ir::OpId o : ops) {
      const bool own = last.count(o) && !first.count(o), other = first.count(o) && !last.count(o);
      (own ? moved : kept).push_back(o);
      if (own && isMxmOp(graph.op(o))) ++movedMxm;
      if (other && isMxmOp(graph.op(o))) ++firstMxm, target = o;
    }
    if (movedMxm == 0 || movedMxm >= firstMxm) continue;
    std::vector<ir::OpId> order;
    for (ir::OpId o : kept) {
      if (o == target) order.insert(order.end(), moved.begin(), moved.end());
      order.push_back(o);
    }
    std::set<ir::OpId> done;
    bool valid = true;
    for (ir::OpId o : order) {
      for (ir::TensorId in : graph.op(o).inputs)
        if (const int p = graph.tensor(in).producer; p >= 0 && position.count(p) && !done.count(p)) valid = false;
      done.insert(o);
    }
    if (!valid) continue;
    ops = std::move(order);
    for (size_t k = 0; k < ops.size(); ++k) position[ops[k]] = k;
  }
  return ops;
}

// lowerShard with the given reuse policy of its SRAM allocator.
Expected<std::unique_ptr<LoweredShard>> lowerShardWith(const topology::ChipSpec& chip, const ir::Graph& graph,
                                                       const std::vector<ir::OpId>& given,
                                                       const ShardInterface& interface, alloc::Reuse reuse) {
  const std::vector<ir::OpId> ops = shortBranchesFirst(graph, given);
  auto out = std::make_unique<LoweredShard>(chip, reuse);
  detail::Lowering lowering(chip, graph, *out);
  for (const auto& send : interface.sends) lowering.markC2c(send.tensor);
  for (const auto& receive : interface.receives) lowering.markC2c(receive.tensor);
  lowering.setSliceFree(interface.sliceFree);
  for (ir::OpId op : ops)
    for (ir::TensorId out : graph.op(op).outputs)
      if (const ir::TensorId leaf = graph.overwrites(out); leaf >= 0) lowering.markOverwritten(leaf);
  std::set<ir::TensorId> keep(graph.outputs().begin(), graph.outputs().end());
  for (const auto& s : interface.sends) keep.insert(s.tensor);
  lowering.findTransposedWeights(ops, keep);
  // Long resident tensors first, longest tiles first (first fit decreasing): a weight tile may
  // need a whole slice, which small tensors placed earlier would have broken up. Short ones are
  // placed when an op first reads them, away from the slices of that op's other inputs.
  std::vector<ir::TensorId> resident = interface.resident;
  std::set<ir::TensorId> seen(resident.begin(), resident.end());
  for (ir::OpId op : ops)
    for (ir::TensorId in : graph.op(op).inputs)
      if (graph.tensor(in).producer < 0 && seen.insert(in).second &&
          lowering.geometry(in).first >= chip.addressesPerSlice / 8)
        resident.push_back(in);
  for (const auto& r : interface.receives)
    resident.erase(std::remove(resident.begin(), resident.end(), r.tensor), resident.end());
  std::stable_sort(resident.begin(), resident.end(), [&](ir::TensorId a, ir::TensorId b) {
    return lowering.geometry(a).first > lowering.geometry(b).first;
  });
  for (ir::TensorId t : resident) {
    alloc::SliceSet avoid;  // slices of tensors read by the same op
    for (ir::OpId op : ops) {
      const auto& ins = graph.op(op).inputs;
      if (std::find(ins.begin(), ins.end(), t) == ins.end()) continue;
      for (ir::TensorId other : ins)
        if (other != t)
          for (int s : lowering.slicesOf(other)) avoid.insert(s);
    }
    if (auto s = lowering.place(t, true, avoid); !s) return s.error();
  }
  // Receives in arrival order per port, so that receive j consumes burst j.
  std::vector<ReceivePlan> receives = interface.receives;
  std::stable_sort(receives.begin(), receives.end(), [](const ReceivePlan& a, const ReceivePlan& b) {
    if ((a.mirrorsSend >= 0) != (b.mirrorsSend >= 0)) return a.mirrorsSend < 0;
    if (a.mirrorsSend >= 0) return a.mirrorsSend < b.mirrorsSend;
    return a.arrivals.front() < b.arrivals.front();
  });
  // A port hands out bursts in arrival order, which need not be tile order across the tensors that
  // share it: receive tasks are made, and chained per port, in arrival order, so that each writes
  // the tile its burst carries. Mirrored receives (no fixed arrivals) follow, in plan and tile order.
  std::vector<std::vector<int>> receiveTasks(receives.size());
  std::vector<std::tuple<bool, Cycle, size_t, int>> receiveOrder;  // (mirrored, arrival, plan, tile)
  for (size_t i = 0; i < receives.size(); ++i) {
    const int tiles = lowering.geometry(receives[i].tensor).second;
    receiveTasks[i].assign(tiles, -1);
    const bool mirrored = receives[i].mirrorsSend >= 0;
    for (int t = 0; t < tiles; ++t) receiveOrder.emplace_back(mirrored, mirrored ? 0 : receives[i].arrivals.at(t), i, t);
  }
  std::stable_sort(receiveOrder.begin(), receiveOrder.end());
  // Every task is stamped with the origin of the op, send or receive that made it, numbered in the
  // caller's order of the ops (which names a shared program's ops by position), not the lowering's.
  out->origins = originsOf(graph, given, interface);
  std::map<ir::OpId, size_t> givenPosition;
  for (size_t k = 0; k < given.size(); ++k) givenPosition.emplace(given[k], k);
  // The MEM reads of an op with several inputs name the input they read (inputReads).
  std::map<std::pair<size_t, ir::TensorId>, int> readOrigin;
  {
    int next = static_cast<int>(given.size() + interface.sends.size() + interface.receives.size());
    for (const auto& read : inputReads(graph, given)) readOrigin.emplace(read, next++);
  }
  size_t stamped = 0;
  const auto stamp = [&](size_t origin) {
    auto& tasks = out->problem.mutableTasks();
    for (; stamped < tasks.size(); ++stamped) {
      tasks[stamped].origin = static_cast<int>(origin);
      if (readOrigin.empty() || origin >= given.size()) continue;
      for (Step& step : tasks[stamped].steps)
        if (const auto it = readOrigin.find({origin, step.reads}); step.reads >= 0 && it != readOrigin.end())
          step.origin = it->second;
    }
  };
  const size_t firstSend = ops.size(), firstReceive = ops.size() + interface.sends.size();
  for (const auto& [mirrored, arrival, i, t] : receiveOrder) {
    if (auto s = lowering.receive(receives[i], t, receiveTasks[i][t]); !s) return s.error();
    size_t k = 0;  // the receive's position in the interface (`receives` is sorted)
    while (k + 1 < interface.receives.size() && interface.receives[k].tensor != receives[i].tensor) ++k;
    stamp(firstReceive + k);
  }
  for (size_t i = 0; i < ops.size();) {
    int consumed = 1;
    if (auto s = lowering.lowerOp(ops[i], ops, i, consumed); !s) return s.error();
    stamp(givenPosition.at(ops[i]));  // ops fused into op i (consumed > 1) are named by it
    i += static_cast<size_t>(consumed);
    lowering.freeDead(ops, i, keep);
  }
  for (const auto& plan : interface.sends) {
    out->sendTasks.emplace_back();
    if (auto s = lowering.send(plan, out->sendTasks.back()); !s) return s.error();
    stamp(firstSend + out->sendTasks.size() - 1);
  }
  for (size_t i = 0; i < receives.size(); ++i) {
    const int mirror = receives[i].mirrorsSend;
    if (mirror < 0) continue;
    if (mirror >= static_cast<int>(out->sendTasks.size()) || out->sendTasks[mirror].size() != receiveTasks[i].size())
      return makeError(ExitCode::kInternal, "a mirrored receive names a send of another shape");
    for (size_t t = 0; t < receiveTasks[i].size(); ++t)
      out->problem.addDependence({out->sendTasks[mirror][t], 1, receiveTasks[i][t], 0, receives[i].sendToArrival});
  }
  // A task reads or writes inside one segment; a range past its end would touch another tensor's
  // addresses, so the program would compute wrong values: an internal error, never a program.
  if (!lowering.crossing().empty()) return makeError(ExitCode::kInternal, lowering.crossing());
  lowering.finish();
  out->problem.finalize();
  return out;
}

}  // namespace

Expected<std::unique_ptr<LoweredShard>> lowerShard(const topology::ChipSpec& chip, const ir::Graph& graph,
                                                   const std::vector<ir::OpId>& ops, const ShardInterface& interface) {
  // Never-used SRAM first, so that a tensor's writes do not wait for the last reads of a freed
  // one (a recomputed layer's activations in the space the next layer's backward read last would
  // wait for that backward); a shard that does not fit so is lowered again with first fit, the
  // smallest footprint.
  auto lowered = lowerShardWith(chip, graph, ops, interface, alloc::Reuse::kFreshFirst);
  if (lowered || lowered.error().code != ExitCode::kDoesNotFit) return lowered;
  return lowerShardWith(chip, graph, ops, interface, alloc::Reuse::kFirstFit);
}

bool readsInputValues(const ir::Op& op, size_t input) {
  // Lowering::elementMap (a Slice's parameters) and lowerReduction (opset 18's axes input).
  if (op.kind == ir::OpKind::kSlice) return input > 0;
  return input == 1 && op.kind != ir::OpKind::kGlobalAveragePool &&
         ir::opDefinition(op.kind).lowering == ir::LoweringFamily::kReduction;
}

ir::TensorId madeInput(const ir::Graph& graph, const ir::Op& op) {
  if (op.inputs.empty()) return -1;
  // Every MEM read of the op then reads it (or the op's own scratch, written first).
  for (ir::TensorId in : op.inputs)
    if (in != op.inputs.front()) return -1;
  return graph.tensor(op.inputs.front()).producer >= 0 ? op.inputs.front() : -1;
}

std::string producerName(const ir::Graph& graph, ir::TensorId tensor) {
  const ir::Tensor& t = graph.tensor(tensor);
  return t.producer >= 0 ? graph.op(t.producer).name : t.name;
}

isa::OpOrigin opOrigin(const ir::Graph& graph, const ir::Op& op, ir::TensorId tensor) {
  isa::OpOrigin origin{op.name, ir::opKindName(op.kind), op.layer, tensor >= 0 ? graph.tensor(tensor).name : std::string(),
                       "", ""};
  if (const ir::TensorId in = madeInput(graph, op); in >= 0) {
    origin.input = graph.tensor(in).name;
    origin.inputProducer = producerName(graph, in);
  }
  return origin;
}

std::vector<isa::OpOrigin> originsOf(const ir::Graph& graph, const std::vector<ir::OpId>& ops,
                                     const ShardInterface& interface, std::int32_t instance) {
  std::vector<isa::OpOrigin> origins;
  origins.reserve(ops.size() + interface.sends.size() + interface.receives.size());
  for (ir::OpId id : ops) {
    const ir::Op& op = graph.op(id);
    origins.push_back(opOrigin(graph, op, op.outputs.empty() ? -1 : op.outputs[0]));
  }
  for (const auto& plan : interface.sends) origins.push_back(movedOrigin(graph, plan.tensor, "Send"));
  for (const auto& plan : interface.receives) origins.push_back(movedOrigin(graph, plan.tensor, "Receive"));
  for (const auto& [position, in] : inputReads(graph, ops)) {
    const ir::Op& op = graph.op(ops[position]);
    isa::OpOrigin read = opOrigin(graph, op, op.outputs.empty() ? -1 : op.outputs[0]);
    read.input = graph.tensor(in).name;
    read.inputProducer = producerName(graph, in);
    origins.push_back(std::move(read));
  }
  for (auto& origin : origins) origin.instance = instance;
  return origins;
}

std::vector<std::pair<size_t, ir::TensorId>> inputReads(const ir::Graph& graph, const std::vector<ir::OpId>& ops) {
  std::vector<std::pair<size_t, ir::TensorId>> reads;
  for (size_t i = 0; i < ops.size(); ++i) {
    const ir::Op& op = graph.op(ops[i]);
    if (madeInput(graph, op) >= 0) continue;  // its origin names its one input
    std::vector<ir::TensorId> seen;
    for (ir::TensorId in : op.inputs)
      if (graph.tensor(in).producer >= 0 && std::find(seen.begin(), seen.end(), in) == seen.end()) {
        seen.push_back(in);
        reads.push_back({i, in});
      }
  }
  return reads;
}

isa::OpOrigin movedOrigin(const ir::Graph& graph, ir::TensorId tensor, const char* kind, std::int32_t instance) {
  const ir::Tensor& t = graph.tensor(tensor);
  const ir::Op* producer = t.producer >= 0 ? &graph.op(t.producer) : nullptr;
  isa::OpOrigin origin{producer ? producer->name : t.name, kind, producer ? producer->layer : -1, t.name, "", ""};
  if (std::string_view(kind) == "Send") {  // a Send reads what it sends
    origin.input = t.name;
    origin.inputProducer = origin.op;
  }
  origin.instance = instance;
  return origin;
}

}  // namespace tsp::lower
