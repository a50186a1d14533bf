// Lowering per op kind: MXM matmuls, VXM elementwise ops, C2C transfers; SRAM placement with reuse.
#include "compile/lower/lowering.h"

#include <algorithm>
#include <set>
#include <tuple>

#include <fmt/format.h>

namespace tsp::lower {

using isa::Instruction;
using isa::Opcode;
using schedule::Step;
using schedule::Task;
using topology::UnitKind;

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

namespace {

Instruction makeInst(int unit, Opcode op, std::int64_t repeat, int interval = 1) {
  Instruction inst;
  inst.unit = unit;
  inst.op = op;
  inst.repeat = static_cast<std::int32_t>(repeat);
  inst.interval = interval;
  return inst;
}

// The VXM function of an elementwise op kind; ops without their own ALU function use the one of
// the same cost (one pass through an ALU): Div multiplies by a reciprocal, Sigmoid and Erf are
// evaluated through Exp and TanH.
isa::VxmFunc funcOf(ir::OpKind kind) {
  switch (kind) {
    case ir::OpKind::kAdd: return isa::VxmFunc::kAdd;
    case ir::OpKind::kSub: return isa::VxmFunc::kSub;
    case ir::OpKind::kMul: case ir::OpKind::kDiv: case ir::OpKind::kPow: return isa::VxmFunc::kMul;
    case ir::OpKind::kRelu: return isa::VxmFunc::kRelu;
    case ir::OpKind::kGelu: return isa::VxmFunc::kGelu;
    case ir::OpKind::kTanh: case ir::OpKind::kErf: return isa::VxmFunc::kTanh;
    case ir::OpKind::kExp: case ir::OpKind::kSigmoid: return isa::VxmFunc::kExp;
    case ir::OpKind::kSqrt: return isa::VxmFunc::kRsqrt;
    case ir::OpKind::kCast: return isa::VxmFunc::kConvert;
    default: return isa::VxmFunc::kNone;
  }
}

// Whether the ALU function funcOf gives an op kind computes the op's values (functional mode), or
// only stands in for its cost.
bool computesValues(ir::OpKind kind) {
  switch (kind) {
    case ir::OpKind::kAdd: case ir::OpKind::kSub: case ir::OpKind::kMul: case ir::OpKind::kRelu:
    case ir::OpKind::kGelu: case ir::OpKind::kTanh: case ir::OpKind::kExp: case ir::OpKind::kIdentity: return true;
    default: return false;
  }
}

// A tensor's SRAM tiles with the tasks that write and read each of them.
struct TensorState {
  isa::TensorPlacement placement;
  std::vector<alloc::Block> blocks;
  std::vector<std::vector<std::pair<int, int>>> writers;  // per tile: (task, step)
  std::vector<std::pair<int, int>> readers;               // (task, step) of every read
  bool pinned = false;                                     // never freed (resident, sent, graph output)
};

class Lowering {
 public:
  Lowering(const topology::ChipSpec& chip, const ir::Graph& graph, LoweredShard& out)
      : chip_(chip), graph_(graph), out_(out), problem_(out.problem) {}

  Status place(ir::TensorId tensor, bool resident, const std::set<int>& avoid = {});
  // One tile's receive task; lowerShard makes them in arrival order per port.
  Status receive(const ReceivePlan& plan, int tile, int& task);
  Status lowerOp(ir::OpId op, const std::vector<ir::OpId>& ops, size_t position, int& consumed);
  Status send(const SendPlan& plan, std::vector<int>& tasks);
  void freeDead(const std::vector<ir::OpId>& ops, size_t done, const std::set<ir::TensorId>& keep);
  void finish();
  bool placed(ir::TensorId t) const { return tensors_.count(t) > 0; }
  std::set<int> slicesOf(ir::TensorId tensor) const;
  TensorState& state(ir::TensorId t) { return tensors_.at(t); }

 private:
  Status lowerMatMul(const ir::Op& op, const std::vector<ir::OpId>& ops, size_t position, int& consumed);
  Status lowerElementwise(const ir::Op& op);
  Status lowerNormalization(const ir::Op& op);
  Status lowerDataMovement(const ir::Op& op);
  // A read step of rows [row0, row0+rows) of tile `tile`, depending on the tile's writers.
  Step readStep(ir::TensorId tensor, int tile, std::int64_t row0, std::int64_t rows, bool broadcast);
  void dependOnWriters(ir::TensorId tensor, int tile, int task, int step);
  void noteWriter(ir::TensorId tensor, int tile, int task, int step);

  const topology::ChipSpec& chip_;
  const ir::Graph& graph_;
  LoweredShard& out_;
  schedule::Problem& problem_;
  std::map<ir::TensorId, TensorState> tensors_;
  // Readers of freed blocks, per MEM slice: a later tensor reusing the space waits for them (WAR).
  std::map<int, std::vector<std::pair<alloc::Block, std::vector<std::pair<int, int>>>>> freed_;
  std::map<int, int> lastReceive_;  // per port: the last receive task (receives consume in arrival order)
  std::vector<Cycle> planeLoad_;    // per MXM plane: compute cycles handed to it so far
  std::vector<std::pair<int, int>> planeLast_;  // per plane: last (install task, compute task)
};

std::set<int> Lowering::slicesOf(ir::TensorId tensor) const {
  std::set<int> s;
  auto it = tensors_.find(tensor);
  if (it != tensors_.end())
    for (const auto& b : it->second.blocks) s.insert(b.slice);
  return s;
}

Status Lowering::place(ir::TensorId tensor, bool resident, const std::set<int>& avoid) {
  if (placed(tensor)) return {};
  const ir::Tensor& t = graph_.tensor(tensor);
  const auto [rows, tiles] = vectorShape(chip_, t);
  if (rows > chip_.addressesPerSlice)
    return makeError(ExitCode::kDoesNotFit,
                     fmt::format("tensor '{}' does not fit in SRAM: a tile of {} rows needs {} bytes on one MEM slice, "
                                 "which has {} bytes",
                                 t.name, rows, rows * chip_.vectorBytes, Bytes{chip_.addressesPerSlice} * chip_.vectorBytes));
  TensorState st;
  st.placement.name = t.name;
  st.placement.dtype = static_cast<std::int32_t>(t.dtype);
  st.placement.rows = rows;
  st.placement.tiles = tiles;
  st.placement.resident = resident;
  st.pinned = resident;
  st.writers.resize(tiles);
  const int memFirst = chip_.firstUnit(UnitKind::kMem);
  const Bytes liveBefore = out_.sram.inUse();
  for (int k = 0; k < tiles; ++k) {
    auto block = out_.sram.allocate(static_cast<int>(rows), avoid);
    if (!block) {
      const Bytes needed = liveBefore + Bytes{rows} * tiles * chip_.vectorBytes;
      return makeError(ExitCode::kDoesNotFit,
                       fmt::format("shard does not fit in SRAM: needs {} bytes, {} bytes available (tensor '{}' of {} "
                                   "bytes with {} bytes live{})",
                                   needed, out_.sram.capacity(), t.name, Bytes{rows} * tiles * chip_.vectorBytes,
                                   liveBefore,
                                   needed <= out_.sram.capacity() ? ", no slice has a free run of its tile's rows" : ""));
    }
    st.blocks.push_back(*block);
    st.placement.memUnit.push_back(memFirst + block->slice);
    st.placement.address.push_back(block->address);
  }
  tensors_.emplace(tensor, std::move(st));
  return {};
}

void Lowering::dependOnWriters(ir::TensorId tensor, int tile, int task, int step) {
  for (const auto& [wt, ws] : tensors_.at(tensor).writers[tile]) problem_.addDataDependence(wt, ws, task, step);
}

void Lowering::noteWriter(ir::TensorId tensor, int tile, int task, int step) {
  TensorState& st = tensors_.at(tensor);
  st.writers[tile].push_back({task, step});
  // Write after read: space reused from a freed tensor is written only after its last read.
  const alloc::Block& mine = st.blocks[tile];
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

Step Lowering::readStep(ir::TensorId tensor, int tile, std::int64_t row0, std::int64_t rows, bool broadcast) {
  const TensorState& st = tensors_.at(tensor);
  Step s;
  s.inst = makeInst(st.placement.memUnit[tile], Opcode::kMemRead, rows);
  s.inst.address = st.placement.address[tile] + static_cast<int>(broadcast ? 0 : row0);
  s.inst.stride = broadcast ? 0 : 1;
  return s;
}

Status Lowering::receive(const ReceivePlan& plan, int t, int& taskId) {
  if (auto s = place(plan.tensor, false); !s) return s;
  TensorState& st = tensors_.at(plan.tensor);
  st.pinned = true;
  const int unit = chip_.firstUnit(UnitKind::kC2c) + plan.port;
  Task task;
  task.name = fmt::format("receive {} tile {}", st.placement.name, t);
  task.release = plan.mirrorsSend >= 0 ? 0 : plan.arrivals.at(t);
  Step rx;
  rx.inst = makeInst(unit, Opcode::kC2cReceive, st.placement.rows, plan.interval);
  rx.inst.port = plan.port;
  Step write;
  write.inst = makeInst(st.placement.memUnit[t], Opcode::kMemWrite, st.placement.rows, plan.interval);
  write.inst.address = st.placement.address[t];
  write.inst.stride = 1;
  write.producer = 0;
  task.steps = {rx, write};
  const int id = problem_.addTask(std::move(task));
  taskId = id;
  noteWriter(plan.tensor, t, id, 1);
  // The port hands out vectors in arrival order: receives on one port keep that order.
  auto last = lastReceive_.find(plan.port);
  if (last != lastReceive_.end()) problem_.addDependence({last->second, 0, id, 0, 1});
  lastReceive_[plan.port] = id;
  return {};
}

Status Lowering::send(const SendPlan& plan, std::vector<int>& tasks) {
  if (!placed(plan.tensor))
    return makeError(ExitCode::kInternal, fmt::format("send of '{}', which is not on this chip", graph_.tensor(plan.tensor).name));
  TensorState& st = tensors_.at(plan.tensor);
  const int unit = chip_.firstUnit(UnitKind::kC2c) + plan.port;
  for (int t = 0; t < st.placement.tiles; ++t) {
    Task task;
    task.name = fmt::format("send {} tile {}", st.placement.name, t);
    task.deadline = plan.deadline;
    Step read = readStep(plan.tensor, t, 0, st.placement.rows, false);
    read.inst.interval = plan.interval;
    Step tx;
    tx.inst = makeInst(unit, Opcode::kC2cSend, st.placement.rows, plan.interval);
    tx.inst.port = plan.port;
    tx.producer = 0;
    tx.linkBusy = plan.linkBusy;
    task.steps = {read, tx};
    const int id = problem_.addTask(std::move(task));
    dependOnWriters(plan.tensor, t, id, 0);
    st.readers.push_back({id, 0});
    tasks.push_back(id);
  }
  return {};
}

Status Lowering::lowerOp(ir::OpId opId, const std::vector<ir::OpId>& ops, size_t position, int& consumed) {
  const ir::Op& op = graph_.op(opId);
  for (ir::TensorId in : op.inputs)
    if (!placed(in)) {
      if (graph_.tensor(in).producer >= 0)
        return makeError(ExitCode::kInternal, fmt::format("op '{}' reads '{}', which is not on this chip", op.name,
                                                          graph_.tensor(in).name));
      // Not on the MEM slices of the op's other inputs: one task never reads one slice twice at once.
      std::set<int> avoid;
      for (ir::TensorId other : op.inputs)
        for (int s : slicesOf(other)) avoid.insert(s);
      if (auto s = place(in, true, avoid); !s) return s;
    }
  consumed = 1;
  // One lowering per family of op kinds; a new kind joins the family whose units it uses.
  switch (op.kind) {
    case ir::OpKind::kMatMul:
    case ir::OpKind::kGemm:
    case ir::OpKind::kFusedMatMul: return lowerMatMul(op, ops, position, consumed);
    case ir::OpKind::kAdd: case ir::OpKind::kSub: case ir::OpKind::kMul: case ir::OpKind::kDiv:
    case ir::OpKind::kPow: case ir::OpKind::kRelu: case ir::OpKind::kGelu: case ir::OpKind::kTanh:
    case ir::OpKind::kSigmoid: case ir::OpKind::kExp: case ir::OpKind::kSqrt: case ir::OpKind::kErf:
    case ir::OpKind::kCast: return lowerElementwise(op);
    case ir::OpKind::kSoftmax:
    case ir::OpKind::kLayerNormalization: return lowerNormalization(op);
    case ir::OpKind::kTranspose: case ir::OpKind::kReshape: case ir::OpKind::kFlatten:
    case ir::OpKind::kSqueeze: case ir::OpKind::kUnsqueeze: case ir::OpKind::kIdentity:
    case ir::OpKind::kExpand: return lowerDataMovement(op);
    default: break;
  }
  return modelError(op.name, fmt::format("op kind {} cannot be lowered", ir::opKindName(op.kind)));
}

Status Lowering::lowerMatMul(const ir::Op& op, const std::vector<ir::OpId>& ops, size_t position, int& consumed) {
  const ir::Tensor& x = graph_.tensor(op.inputs[0]);
  const ir::Tensor& w = graph_.tensor(op.inputs[1]);
  if (ir::dtypeBytes(x.dtype) != ir::dtypeBytes(w.dtype))
    return modelError(op.name, "activations and weights must have the same storage width");
  // Epilogue fusion: a bias Add of a 1-D weight and an activation that are the sole users.
  auto soleUserIs = [&](ir::TensorId t, size_t at, std::initializer_list<ir::OpKind> kinds) -> const ir::Op* {
    if (at >= ops.size() || graph_.tensor(t).users.size() != 1 || graph_.tensor(t).users[0] != ops[at]) return nullptr;
    const ir::Op& next = graph_.op(ops[at]);
    return std::find(kinds.begin(), kinds.end(), next.kind) != kinds.end() ? &next : nullptr;
  };
  ir::TensorId out = op.outputs[0];
  ir::TensorId biasTensor = -1;
  ir::OpKind activationKind = ir::OpKind::kIdentity;
  if (op.kind != ir::OpKind::kMatMul) {
    // Gemm's C and FusedMatMul's bias are the epilogue's bias; FusedMatMul names its activation.
    if (op.inputs.size() >= 3) {
      biasTensor = op.inputs[2];
      if (auto s = place(biasTensor, graph_.tensor(biasTensor).producer < 0); !s) return s;
    }
    if (op.hasAttr("activation")) {
      const auto kind = ir::parseOpKind(op.stringAttr("activation", ""));
      if (!kind) return modelError(op.name, fmt::format("activation '{}' cannot be fused", op.stringAttr("activation", "")));
      activationKind = *kind;
    }
  } else if (const ir::Op* add = soleUserIs(out, position + 1, {ir::OpKind::kAdd})) {
    const ir::TensorId other = add->inputs[0] == out ? add->inputs[1] : add->inputs[0];
    if (graph_.tensor(other).producer < 0 && graph_.tensor(other).shape.size() == 1) {
      biasTensor = other;
      out = add->outputs[0];
      ++consumed;
      if (auto s = place(other, true); !s) return s;
    }
  }
  if (op.kind == ir::OpKind::kMatMul)
    if (const ir::Op* act = soleUserIs(out, position + consumed, {ir::OpKind::kRelu, ir::OpKind::kGelu})) {
      out = act->outputs[0];
      activationKind = act->kind;
      ++consumed;
    }
  const bool activation = activationKind != ir::OpKind::kIdentity;
  std::set<int> avoid = slicesOf(op.inputs[0]);
  for (int s : slicesOf(biasTensor)) avoid.insert(s);
  if (auto s = place(out, false, avoid); !s) return s;

  const TensorState& xs = tensors_.at(op.inputs[0]);
  const TensorState& ws = tensors_.at(op.inputs[1]);
  const TensorState& ys = tensors_.at(out);
  const int eb = ir::dtypeBytes(x.dtype);
  // Batched weights ([..., K, N], attention's activations x activations): batch b multiplies rows
  // [b*m, (b+1)*m) of X by weight rows [b*K, (b+1)*K).
  const std::int64_t nDim = w.shape.back();
  const std::int64_t kDim = w.shape.size() >= 2 ? w.shape[w.shape.size() - 2] : w.shape.back();
  const std::int64_t batches = std::max<std::int64_t>(1, w.elements() / std::max<std::int64_t>(1, kDim * nDim));
  const std::int64_t m = xs.placement.rows / batches;
  const MatMulTiling tiling =
      chooseMatMulTiling(chip_, m, kDim, nDim, eb, chip_.sramBytes() / (3 * std::max(1, eb)));
  const int kTiles = xs.placement.tiles, nTiles = ys.placement.tiles;
  const int mxmFirst = chip_.firstUnit(UnitKind::kMxm);
  // Counted at the INT8 rate: an FP16 MAC takes the plane time of fp16_rate_divisor INT8 MACs.
  out_.macs += batches * m * kDim * nDim * (eb == 1 ? 1 : chip_.mxmFp16RateDivisor);
  if (planeLast_.empty()) planeLast_.assign(chip_.mxmPlanes, {-1, -1});
  const int weightRowsPerTile = tiling.tk;
  // Values (functional mode) are x W (+ bias): Gemm's transposes and scales, and a bias whose last
  // dimension is not N, are timed like the plain product but not computed.
  const bool plainProduct = op.kind != ir::OpKind::kGemm ||
                            (op.intAttr("transA", 0) == 0 && op.intAttr("transB", 0) == 0 &&
                             op.floatAttr("alpha", 1.0) == 1.0 && op.floatAttr("beta", 1.0) == 1.0);
  const bool biasLanesMatch = biasTensor < 0 || (!graph_.tensor(biasTensor).shape.empty() &&
                                                 graph_.tensor(biasTensor).shape.back() == nDim &&
                                                 (tensors_.at(biasTensor).placement.rows == 1 ||
                                                  tensors_.at(biasTensor).placement.rows == ys.placement.rows));

  // When the output tiles do not spread evenly over the planes, shorter row blocks let every plane
  // take an equal share, as long as a block still hides a weight install behind its stream.
  std::int64_t tm = tiling.tm;
  if ((batches * nTiles) % chip_.mxmPlanes != 0 && m >= std::int64_t{chip_.mxmPlanes} * 2 * chip_.mxmWeightInstallCycles)
    tm = std::min<std::int64_t>(tm, ceilDiv(m, chip_.mxmPlanes));
  if (planeLoad_.empty()) planeLoad_.assign(chip_.mxmPlanes, 0);

  for (std::int64_t batch = 0; batch < batches; ++batch)
  for (int n = 0; n < nTiles; ++n)
    for (std::int64_t m0 = 0; m0 < m; m0 += tm) {
      const std::int64_t rows = std::min<std::int64_t>(tm, m - m0);
      // Each (tile, row block) goes to the least loaded plane (lowest index on ties).
      const int plane = static_cast<int>(std::min_element(planeLoad_.begin(), planeLoad_.end()) - planeLoad_.begin());
      planeLoad_[plane] += kTiles * std::max<Cycle>(rows, chip_.mxmWeightInstallCycles);
      const int installUnit = mxmFirst + 2 * plane, computeUnit = installUnit + 1;
      // Planes start at different K tiles so that, running together, they read different MEM slices.
      const int rotation = (plane * kTiles / chip_.mxmPlanes + n / chip_.mxmPlanes) % kTiles;
      for (int step = 0; step < kTiles; ++step) {
        const int k = (step + rotation) % kTiles;
        // The weight tile (k, n) into the plane's free buffer (two buffers: installs overlap compute).
        Task install;
        install.name = fmt::format("{} install k{} n{}", op.name, k, n);
        Step ins;
        ins.inst = makeInst(installUnit, Opcode::kMxmInstall, 1);
        ins.inst.address = ws.placement.address[n % ws.placement.tiles] +
                           static_cast<int>(std::min<std::int64_t>(batch * kDim + std::int64_t{k} * weightRowsPerTile,
                                                                   ws.placement.rows - 1));
        ins.inst.weightUnit = ws.placement.memUnit[n % ws.placement.tiles];
        ins.inst.weightRows = static_cast<int>(std::min<std::int64_t>(weightRowsPerTile, kDim - std::int64_t{k} * weightRowsPerTile));
        install.steps = {ins};
        const int it = problem_.addTask(std::move(install));
        for (const auto& [wt, wst] : ws.writers[n % ws.placement.tiles]) problem_.addDataDependence(wt, wst, it, 0);

        Task compute;
        compute.name = fmt::format("{} m{} k{} n{}", op.name, m0, k, n);
        compute.steps.push_back(readStep(op.inputs[0], k, batch * m + m0, rows, false));
        Step mxm;
        mxm.inst = makeInst(computeUnit, Opcode::kMxmCompute, rows);
        mxm.inst.timingOnly = !plainProduct;
        mxm.producer = 0;
        compute.steps.push_back(mxm);
        int writeStep = -1;
        const bool last = step + 1 == kTiles;
        if (last) {
          int tail = 1;
          if (biasTensor >= 0) {
            Step add;
            add.inst = makeInst(chip_.firstUnit(UnitKind::kVxm), Opcode::kVxmBinary, rows);
            add.inst.func = isa::VxmFunc::kAdd;
            add.inst.timingOnly = !biasLanesMatch;
            add.producer = tail;
            add.producer2 = static_cast<int>(compute.steps.size()) + 1;
            compute.steps.push_back(add);
            tail = static_cast<int>(compute.steps.size()) - 1;
            const TensorState& bs = tensors_.at(biasTensor);
            compute.steps.push_back(readStep(biasTensor, n % bs.placement.tiles, batch * m + m0, rows,
                                             bs.placement.rows != ys.placement.rows));
          }
          if (activation) {
            Step act;
            act.inst = makeInst(chip_.firstUnit(UnitKind::kVxm), Opcode::kVxmUnary, rows);
            act.inst.func = funcOf(activationKind);
            act.inst.timingOnly = !computesValues(activationKind);
            act.producer = tail;
            compute.steps.push_back(act);
            tail = static_cast<int>(compute.steps.size()) - 1;
          }
          Step write;
          write.inst = makeInst(ys.placement.memUnit[n], Opcode::kMemWrite, rows);
          write.inst.address = ys.placement.address[n] + static_cast<int>(batch * m + m0);
          write.inst.stride = 1;
          write.producer = tail;
          compute.steps.push_back(write);
          writeStep = static_cast<int>(compute.steps.size()) - 1;
        }
        const int ct = problem_.addTask(std::move(compute));
        dependOnWriters(op.inputs[0], k, ct, 0);
        tensors_.at(op.inputs[0]).readers.push_back({ct, 0});
        if (biasTensor >= 0 && last) {
          const TensorState& bs = tensors_.at(biasTensor);
          dependOnWriters(biasTensor, n % bs.placement.tiles, ct, 3);
          tensors_.at(biasTensor).readers.push_back({ct, 3});
        }
        if (writeStep >= 0) noteWriter(out, n, ct, writeStep);
        // The plane's sequence: install j -> compute j -> install j+1 (issued after compute j, so
        // the simulator sees compute j use the weights installed before it) -> compute j+1.
        problem_.addDataDependence(it, 0, ct, 1);
        const auto [prevInstall, prevCompute] = planeLast_[plane];
        if (prevCompute >= 0) {
          problem_.addDependence({prevCompute, 1, it, 0, 1});
          const Instruction& pc = problem_.tasks()[prevCompute].steps[1].inst;
          problem_.addDependence({prevCompute, 1, ct, 1, Cycle{pc.repeat} * pc.interval});
        }
        (void)prevInstall;
        planeLast_[plane] = {it, ct};
      }
    }
  return {};
}

Status Lowering::lowerElementwise(const ir::Op& op) {
  const ir::TensorId out = op.outputs[0];
  std::set<int> avoid;
  for (ir::TensorId in : op.inputs)
    for (int s : slicesOf(in)) avoid.insert(s);
  if (auto s = place(out, false, avoid); !s) return s;
  const TensorState& ys = tensors_.at(out);
  const std::int64_t rows = ys.placement.rows;
  const std::int64_t chunk = std::min<std::int64_t>(rows, chip_.addressesPerSlice);
  for (int t = 0; t < ys.placement.tiles; ++t)
    for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const std::int64_t n = std::min(chunk, rows - r0);
      Task task;
      task.name = fmt::format("{} tile {}", op.name, t);
      auto input = [&](ir::TensorId in) {
        const TensorState& is = tensors_.at(in);
        return readStep(in, t % is.placement.tiles, r0, n, is.placement.rows != rows);
      };
      task.steps.push_back(input(op.inputs[0]));
      Step alu;
      alu.inst = makeInst(chip_.firstUnit(UnitKind::kVxm), op.inputs.size() == 2 ? Opcode::kVxmBinary : Opcode::kVxmUnary, n);
      alu.inst.func = funcOf(op.kind);
      // Lanes line up only when an input has the output's last dimension and its rows or one row
      // (read with stride 0); other broadcasts and stand-in functions are timing only.
      alu.inst.timingOnly = !computesValues(op.kind) && !(op.kind == ir::OpKind::kCast &&
                                                          graph_.tensor(op.inputs[0]).dtype == graph_.tensor(out).dtype);
      for (ir::TensorId in : op.inputs) {
        const ir::Tensor& it = graph_.tensor(in);
        const std::int64_t inRows = tensors_.at(in).placement.rows;
        if ((it.shape.empty() ? 1 : it.shape.back()) != (graph_.tensor(out).shape.empty() ? 1 : graph_.tensor(out).shape.back()) ||
            (inRows != rows && inRows != 1))
          alu.inst.timingOnly = true;
      }
      alu.producer = 0;
      if (op.inputs.size() == 2) alu.producer2 = 2;
      task.steps.push_back(alu);
      if (op.inputs.size() == 2) task.steps.push_back(input(op.inputs[1]));
      Step write;
      write.inst = makeInst(ys.placement.memUnit[t], Opcode::kMemWrite, n);
      write.inst.address = ys.placement.address[t] + static_cast<int>(r0);
      write.inst.stride = 1;
      write.producer = 1;
      task.steps.push_back(write);
      const int id = problem_.addTask(std::move(task));
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        const int step = i == 0 ? 0 : 2;
        const TensorState& is = tensors_.at(op.inputs[i]);
        dependOnWriters(op.inputs[i], t % is.placement.tiles, id, step);
        tensors_.at(op.inputs[i]).readers.push_back({id, step});
      }
      noteWriter(out, t, id, static_cast<int>(op.inputs.size()) + 1);
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
  std::vector<int> stats;
  for (int t = 0; t < xs.placement.tiles; ++t) {
    Task task;
    task.name = fmt::format("{} statistics tile {}", op.name, t);
    task.steps.push_back(readStep(in, t, 0, xs.placement.rows, false));
    Step alu;
    alu.inst = makeInst(vxm, Opcode::kVxmUnary, xs.placement.rows);
    alu.inst.func = layerNorm ? isa::VxmFunc::kMul : isa::VxmFunc::kExp;
    alu.inst.timingOnly = true;  // the statistics stay in the ALU: a cost, not values the program names
    alu.producer = 0;
    task.steps.push_back(alu);
    const int id = problem_.addTask(std::move(task));
    dependOnWriters(in, t, id, 0);
    tensors_.at(in).readers.push_back({id, 0});
    stats.push_back(id);
  }
  for (int t = 0; t < ys.placement.tiles; ++t) {
    Task task;
    task.name = fmt::format("{} normalise tile {}", op.name, t);
    task.steps.push_back(readStep(in, t % xs.placement.tiles, 0, rows, false));
    Step scale;
    scale.inst = makeInst(vxm, Opcode::kVxmUnary, rows);
    scale.inst.func = layerNorm ? isa::VxmFunc::kRsqrt : isa::VxmFunc::kMul;
    scale.inst.timingOnly = true;
    scale.producer = 0;
    task.steps.push_back(scale);
    int tail = 1;
    std::vector<std::pair<ir::TensorId, int>> sides;
    if (layerNorm)
      for (size_t i = 1; i < op.inputs.size() && i < 3; ++i) {
        if (auto s = place(op.inputs[i], graph_.tensor(op.inputs[i]).producer < 0); !s) return s;
        const TensorState& ps = tensors_.at(op.inputs[i]);
        Step alu;
        alu.inst = makeInst(vxm, Opcode::kVxmBinary, rows);
        alu.inst.func = i == 1 ? isa::VxmFunc::kMul : isa::VxmFunc::kAdd;
        alu.inst.timingOnly = true;
        alu.producer = tail;
        alu.producer2 = static_cast<int>(task.steps.size()) + 1;
        task.steps.push_back(alu);
        tail = static_cast<int>(task.steps.size()) - 1;
        task.steps.push_back(readStep(op.inputs[i], t % ps.placement.tiles, 0, rows, ps.placement.rows != rows));
        sides.push_back({op.inputs[i], static_cast<int>(task.steps.size()) - 1});
      }
    Step write;
    write.inst = makeInst(ys.placement.memUnit[t], Opcode::kMemWrite, rows);
    write.inst.address = ys.placement.address[t];
    write.inst.stride = 1;
    write.producer = tail;
    task.steps.push_back(write);
    const int writeStep = static_cast<int>(task.steps.size()) - 1;
    const int id = problem_.addTask(std::move(task));
    for (int st : stats) problem_.addDependence({st, 1, id, 0, Cycle{rows}});
    dependOnWriters(in, t % xs.placement.tiles, id, 0);
    tensors_.at(in).readers.push_back({id, 0});
    for (const auto& [tensor, step] : sides) {
      dependOnWriters(tensor, t % tensors_.at(tensor).placement.tiles, id, step);
      tensors_.at(tensor).readers.push_back({id, step});
    }
    noteWriter(out, t, id, writeStep);
  }
  return {};
}

Status Lowering::lowerDataMovement(const ir::Op& op) {
  // Transposes, reshapes and their kin move every vector of the tensor once through the SXM
  // (shift/permute/transpose), which re-forms vectors in the output's layout. The timing model
  // streams output tile t from input tile t mod T_in: the same number of vectors, read at the
  // input's real addresses (wrapping when the output has more rows than the input).
  const ir::TensorId in = op.inputs[0], out = op.outputs[0];
  if (auto s = place(out, false, slicesOf(in)); !s) return s;
  const TensorState& xs = tensors_.at(in);
  const TensorState& ys = tensors_.at(out);
  const int sxmFirst = chip_.firstUnit(UnitKind::kSxm);
  // The vectors are the output's as they are (a copy) when the last dimension and the rows stay,
  // or a single row is repeated; a transpose must keep its axes.
  const ir::Tensor& xt = graph_.tensor(in);
  const ir::Tensor& yt = graph_.tensor(out);
  bool copies = !xt.shape.empty() && !yt.shape.empty() && xt.shape.back() == yt.shape.back() &&
                xt.dtype == yt.dtype && (xs.placement.rows == ys.placement.rows || xs.placement.rows == 1);
  if (op.kind == ir::OpKind::kTranspose) {
    const auto perm = op.intsAttr("perm");
    if (perm.empty()) copies = copies && xt.shape.size() <= 1;  // no perm: the axes reversed
    for (size_t i = 0; i < perm.size(); ++i) copies = copies && perm[i] == static_cast<std::int64_t>(i);
  }
  for (int t = 0; t < ys.placement.tiles; ++t)
    for (std::int64_t r0 = 0; r0 < ys.placement.rows; r0 += xs.placement.rows) {
      const std::int64_t n = std::min(xs.placement.rows, ys.placement.rows - r0);
      const int tile = t % xs.placement.tiles;
      Task task;
      task.name = fmt::format("{} tile {} rows {}", op.name, t, r0);
      task.steps.push_back(readStep(in, tile, 0, n, false));
      Step shift;
      // West-half tiles use a west SXM, east-half tiles an east one: the shortest streams.
      const bool west = chip_.units()[xs.placement.memUnit[tile]].slice < chip_.units()[chip_.firstUnit(UnitKind::kVxm)].slice;
      shift.inst = makeInst(sxmFirst + (west ? 0 : chip_.sxmUnits / 2) + t % std::max(1, chip_.sxmUnits / 2),
                            Opcode::kSxmShift, n);
      shift.inst.sxm = copies ? isa::SxmFunc::kCopy : isa::SxmFunc::kUnspecified;
      shift.producer = 0;
      task.steps.push_back(shift);
      Step write;
      write.inst = makeInst(ys.placement.memUnit[t], Opcode::kMemWrite, n);
      write.inst.address = ys.placement.address[t] + static_cast<int>(r0);
      write.inst.stride = 1;
      write.producer = 1;
      task.steps.push_back(write);
      const int id = problem_.addTask(std::move(task));
      dependOnWriters(in, tile, id, 0);
      tensors_.at(in).readers.push_back({id, 0});
      noteWriter(out, t, id, 2);
    }
  return {};
}

void Lowering::freeDead(const std::vector<ir::OpId>& ops, size_t done, const std::set<ir::TensorId>& keep) {
  // A tensor is dead once every user among this shard's ops has been lowered.
  std::set<ir::OpId> pending(ops.begin() + static_cast<std::ptrdiff_t>(done), ops.end());
  for (auto it = tensors_.begin(); it != tensors_.end(); ++it) {
    TensorState& st = it->second;
    if (st.pinned || st.blocks.empty() || keep.count(it->first)) continue;
    const auto& users = graph_.tensor(it->first).users;
    if (std::any_of(users.begin(), users.end(), [&](ir::OpId u) { return pending.count(u) > 0; })) continue;
    if (st.writers.empty() || std::all_of(st.writers.begin(), st.writers.end(), [](const auto& w) { return w.empty(); }))
      continue;
    for (const auto& b : st.blocks) {
      out_.sram.release(b);
      freed_[b.slice].push_back({b, st.readers});
    }
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

}  // namespace

Expected<std::unique_ptr<LoweredShard>> lowerShard(const topology::ChipSpec& chip, const ir::Graph& graph,
                                                   const std::vector<ir::OpId>& ops, const ShardInterface& interface) {
  auto out = std::make_unique<LoweredShard>(chip);
  Lowering lowering(chip, graph, *out);
  // Long resident tensors first, longest tiles first (first fit decreasing): a weight tile may
  // need a whole slice, which small tensors placed earlier would have broken up. Short ones are
  // placed when an op first reads them, away from the slices of that op's other inputs.
  std::vector<ir::TensorId> resident = interface.resident;
  std::set<ir::TensorId> seen(resident.begin(), resident.end());
  for (ir::OpId op : ops)
    for (ir::TensorId in : graph.op(op).inputs)
      if (graph.tensor(in).producer < 0 && seen.insert(in).second &&
          vectorShape(chip, graph.tensor(in)).first >= chip.addressesPerSlice / 8)
        resident.push_back(in);
  for (const auto& r : interface.receives)
    resident.erase(std::remove(resident.begin(), resident.end(), r.tensor), resident.end());
  std::stable_sort(resident.begin(), resident.end(), [&](ir::TensorId a, ir::TensorId b) {
    return vectorShape(chip, graph.tensor(a)).first > vectorShape(chip, graph.tensor(b)).first;
  });
  for (ir::TensorId t : resident) {
    std::set<int> avoid;  // slices of tensors read by the same op
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
  // A port hands out bursts in arrival order, which need not be tile order (a sender's tiles go out
  // as its schedule has them): receive tasks are made, and chained per port, in arrival order, so
  // that each writes the tile its burst carries.
  std::vector<std::vector<int>> receiveTasks(receives.size());
  // Mirrored receives (no fixed arrivals) follow, in plan and tile order.
  std::vector<std::tuple<bool, Cycle, size_t, int>> receiveOrder;  // (mirrored, arrival, plan, tile)
  for (size_t i = 0; i < receives.size(); ++i) {
    const int tiles = vectorShape(chip, graph.tensor(receives[i].tensor)).second;
    receiveTasks[i].assign(tiles, -1);
    const bool mirrored = receives[i].mirrorsSend >= 0;
    for (int t = 0; t < tiles; ++t) receiveOrder.emplace_back(mirrored, mirrored ? 0 : receives[i].arrivals.at(t), i, t);
  }
  std::stable_sort(receiveOrder.begin(), receiveOrder.end());
  for (const auto& [mirrored, arrival, i, t] : receiveOrder)
    if (auto s = lowering.receive(receives[i], t, receiveTasks[i][t]); !s) return s.error();
  std::set<ir::TensorId> keep(graph.outputs().begin(), graph.outputs().end());
  for (const auto& s : interface.sends) keep.insert(s.tensor);
  for (size_t i = 0; i < ops.size();) {
    int consumed = 1;
    if (auto s = lowering.lowerOp(ops[i], ops, i, consumed); !s) return s.error();
    i += static_cast<size_t>(consumed);
    lowering.freeDead(ops, i, keep);
  }
  for (const auto& plan : interface.sends) {
    out->sendTasks.emplace_back();
    if (auto s = lowering.send(plan, out->sendTasks.back()); !s) return s.error();
  }
  for (size_t i = 0; i < receives.size(); ++i) {
    const int mirror = receives[i].mirrorsSend;
    if (mirror < 0) continue;
    if (mirror >= static_cast<int>(out->sendTasks.size()) || out->sendTasks[mirror].size() != receiveTasks[i].size())
      return makeError(ExitCode::kInternal, "a mirrored receive names a send of another shape");
    for (size_t t = 0; t < receiveTasks[i].size(); ++t)
      out->problem.addDependence({out->sendTasks[mirror][t], 1, receiveTasks[i][t], 0, receives[i].sendToArrival});
  }
  lowering.finish();
  out->problem.finalize();
  return out;
}

}  // namespace tsp::lower
