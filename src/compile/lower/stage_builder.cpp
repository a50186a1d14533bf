// StageBuilder: chains of stream-connected instructions placed at their earliest legal cycle.
#include "compile/lower/stage_builder.h"

#include <algorithm>
#include <optional>
#include <set>

#include <fmt/format.h>

namespace tsp::lower {

using isa::Direction;
using isa::Instruction;
using isa::Opcode;
using topology::UnitKind;

std::pair<std::int64_t, int> vectorShape(const topology::ChipSpec& chip, const ir::Tensor& tensor) {
  const std::int64_t cols = tensor.shape.empty() ? 1 : tensor.shape.back();
  const std::int64_t rows = tensor.shape.empty() ? 1 : tensor.elements() / std::max<std::int64_t>(cols, 1);
  const int tiles = static_cast<int>(ceilDiv(cols * ir::dtypeBytes(tensor.dtype), chip.vectorBytes));
  return {rows, tiles};
}

StageBuilder::StageBuilder(const topology::ChipSpec& chip, const ir::Graph& graph)
    : chip_(chip), graph_(graph), units_(chip.units()) {
  unitFree_.assign(units_.size(), 0);
  linkFree_.assign(chip.c2cPorts, 0);
  for (auto& s : streamFree_) s.assign(chip.streamsPerDirection, 0);
  memNextAddress_.assign(chip.memSlices, 0);
  program_.chipSpecHash = chip.hash();
}

Expected<TensorPlacement> StageBuilder::allocate(ir::TensorId tensor, std::int64_t rows, int tiles,
                                                 const std::string& what) {
  // Units already holding this op's operands are avoided so that one chain never issues a read
  // and a write on the same MEM queue at once.
  std::set<int> avoid;
  for (const auto& [id, placement] : placements_)
    if (id != tensor) avoid.insert(placement.memUnit.begin(), placement.memUnit.end());
  TensorPlacement placement;
  placement.name = graph_.tensor(tensor).name;
  placement.dtype = static_cast<std::int32_t>(graph_.tensor(tensor).dtype);
  placement.resident = what == "tensor";
  placement.rows = rows;
  placement.tiles = tiles;
  const int memFirst = chip_.firstUnit(UnitKind::kMem);
  for (int t = 0; t < tiles; ++t) {
    int chosen = -1;
    for (int pass = 0; pass < 2 && chosen < 0; ++pass)
      for (int tried = 0; tried < chip_.memSlices; ++tried) {
        const int slice = (nextMemSlice_ + tried) % chip_.memSlices;
        if (memNextAddress_[slice] + rows > chip_.addressesPerSlice) continue;
        if (pass == 0 && avoid.count(memFirst + slice)) continue;
        chosen = slice;
        break;
      }
    if (chosen < 0)
      return makeError(ExitCode::kDoesNotFit,
                       fmt::format("{} '{}' does not fit in SRAM ({} MiB per chip): a tile of {} vectors has no room",
                                   what, graph_.tensor(tensor).name, chip_.sramBytes() >> 20, rows));
    nextMemSlice_ = (chosen + 1) % chip_.memSlices;
    placement.memUnit.push_back(memFirst + chosen);
    placement.address.push_back(memNextAddress_[chosen]);
    memNextAddress_[chosen] += static_cast<int>(rows);
    program_.sramBytes += rows * chip_.vectorBytes;
  }
  placements_[tensor] = placement;
  return placement;
}

Cycle StageBuilder::readyAt(ir::TensorId tensor) const {
  auto found = ready_.find(tensor);
  return found == ready_.end() ? 0 : found->second;
}

Status StageBuilder::placeResident(ir::TensorId tensor) {
  if (placed(tensor)) return {};
  const auto [rows, tiles] = vectorShape(chip_, graph_.tensor(tensor));
  auto placement = allocate(tensor, rows, tiles, graph_.tensor(tensor).producer < 0 ? "tensor" : "activation");
  if (!placement) return placement.error();
  ready_[tensor] = 0;
  return {};
}

std::vector<Cycle> StageBuilder::placeChain(std::vector<Step>& steps, Cycle earliest) {
  // 1. Offsets from the time-of-flight rule; side roots (producer2 of a binary op) are aligned
  //    backwards from their consumer.
  std::vector<std::optional<Cycle>> offset(steps.size());
  offset[0] = 0;
  auto arrivalOffset = [&](int p, int k) {
    return *offset[p] + isa::resultLatency(chip_, steps[p].inst) +
           std::abs(sliceOf(steps[p].inst.unit) - sliceOf(steps[k].inst.unit));
  };
  for (size_t k = 0; k < steps.size(); ++k) {
    if (steps[k].producer >= 0) offset[k] = arrivalOffset(steps[k].producer, static_cast<int>(k));
    if (steps[k].producer2 >= 0) {
      auto& side = steps[steps[k].producer2];
      offset[steps[k].producer2] = *offset[k] - isa::resultLatency(chip_, side.inst) -
                                   std::abs(sliceOf(side.inst.unit) - sliceOf(steps[k].inst.unit));
    }
    if (!offset[k]) offset[k] = 0;
  }
  Cycle minOffset = 0;
  for (auto& o : offset) minOffset = std::min(minOffset, *o);
  for (size_t k = 0; k < steps.size(); ++k) steps[k].offset = *offset[k] - minOffset;

  // 2. Stream per producer: direction towards its consumers; reach to the farthest one.
  struct Edge { int producer; Direction dir; int reach; int stream = -1; };
  std::vector<Edge> edges;
  auto edgeOf = [&](int p) -> Edge& {
    for (auto& e : edges) if (e.producer == p) return e;
    edges.push_back({p, Direction::kEast, 0});
    return edges.back();
  };
  for (size_t k = 0; k < steps.size(); ++k)
    for (int p : {steps[k].producer, steps[k].producer2}) {
      if (p < 0) continue;
      Edge& e = edgeOf(p);
      const int delta = sliceOf(steps[k].inst.unit) - sliceOf(steps[p].inst.unit);
      e.dir = delta >= 0 ? Direction::kEast : Direction::kWest;
      e.reach = std::max(e.reach, std::abs(delta));
    }
  std::set<std::pair<int, int>> taken;
  for (auto& e : edges) {
    auto& free = streamFree_[static_cast<int>(e.dir)];
    int best = -1;
    for (int id = 0; id < static_cast<int>(free.size()); ++id)
      if (!taken.count({static_cast<int>(e.dir), id}) && (best < 0 || free[id] < free[best])) best = id;
    e.stream = best;
    taken.insert({static_cast<int>(e.dir), best});
  }

  // 3. The earliest base cycle that every unit, stream and link allows.
  Cycle base = earliest;
  for (const auto& s : steps) {
    base = std::max(base, unitFree_[s.inst.unit] - s.offset);
    if (s.inst.op == Opcode::kC2cSend) base = std::max(base, linkFree_[s.inst.port] - s.offset);
  }
  for (const auto& e : edges) {
    const Cycle firstValue = steps[e.producer].offset + isa::resultLatency(chip_, steps[e.producer].inst);
    base = std::max(base, streamFree_[static_cast<int>(e.dir)][e.stream] - firstValue);
  }

  // 4. Commit.
  std::vector<Cycle> issues;
  for (size_t k = 0; k < steps.size(); ++k) {
    Instruction& inst = steps[k].inst;
    inst.issue = base + steps[k].offset;
    for (const auto& e : edges) {
      const isa::StreamRef ref{static_cast<std::int16_t>(e.stream), e.dir};
      if (e.producer == static_cast<int>(k)) inst.dst = {ref.id, ref.dir};
      if (steps[k].producer == e.producer) inst.src = {ref.id, ref.dir};
      if (steps[k].producer2 == e.producer) inst.src2 = {ref.id, ref.dir};
    }
    if (inst.address >= 0) inst.bank = chip_.bankOf(inst.address);
    unitFree_[inst.unit] = isa::unitFreeAt(chip_, inst);
    if (inst.op == Opcode::kC2cSend) linkFree_[inst.port] = inst.issue + Cycle{inst.repeat} * inst.interval;
    issues.push_back(inst.issue);
  }
  for (const auto& e : edges) {
    const Instruction& p = steps[e.producer].inst;
    const Cycle lastValue = p.issue + isa::resultLatency(chip_, p) + Cycle{p.repeat - 1} * p.interval;
    streamFree_[static_cast<int>(e.dir)][e.stream] = lastValue + e.reach + 1;
  }
  for (const auto& s : steps) program_.instructions.push_back(s.inst);
  return issues;
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

isa::VxmFunc funcOf(ir::OpKind kind) {
  switch (kind) {
    case ir::OpKind::kAdd: return isa::VxmFunc::kAdd;
    case ir::OpKind::kRelu: return isa::VxmFunc::kRelu;
    case ir::OpKind::kGelu: return isa::VxmFunc::kGelu;
    default: return isa::VxmFunc::kNone;
  }
}

}  // namespace

Status StageBuilder::receive(ir::TensorId tensor, int port, const std::vector<Cycle>& arrivals, int interval) {
  const auto [rows, tiles] = vectorShape(chip_, graph_.tensor(tensor));
  auto placement = allocate(tensor, rows, tiles, "received activation");
  if (!placement) return placement.error();
  assert(static_cast<int>(arrivals.size()) == tiles && "one burst per tile");
  const int unit = chip_.firstUnit(UnitKind::kC2c) + port;
  Cycle done = 0;
  for (int t = 0; t < tiles; ++t) {
    std::vector<Step> steps(2);
    steps[0].inst = makeInst(unit, Opcode::kC2cReceive, rows, interval);
    steps[0].inst.port = port;
    steps[1].inst = makeInst(placement->memUnit[t], Opcode::kMemWrite, rows, interval);
    steps[1].inst.address = placement->address[t];
    steps[1].inst.stride = 1;
    steps[1].producer = 0;
    placeChain(steps, arrivals[t]);
    done = std::max(done, isa::completion(chip_, steps[1].inst));
  }
  ready_[tensor] = done;
  return {};
}

Expected<std::vector<OutboundBurst>> StageBuilder::send(ir::TensorId tensor, int port, int interval) {
  if (!placed(tensor)) return makeError(ExitCode::kInternal, "send of a tensor that is not on this chip");
  const TensorPlacement placement = placements_.at(tensor);
  const int unit = chip_.firstUnit(UnitKind::kC2c) + port;
  std::vector<OutboundBurst> bursts;
  for (int t = 0; t < placement.tiles; ++t) {
    std::vector<Step> steps(2);
    steps[0].inst = makeInst(placement.memUnit[t], Opcode::kMemRead, placement.rows, interval);
    steps[0].inst.address = placement.address[t];
    steps[0].inst.stride = 1;
    steps[1].inst = makeInst(unit, Opcode::kC2cSend, placement.rows, interval);
    steps[1].inst.port = port;
    steps[1].producer = 0;
    const auto issues = placeChain(steps, readyAt(tensor));
    bursts.push_back({port, issues[1], static_cast<int>(placement.rows), interval});
  }
  return bursts;
}

Expected<int> StageBuilder::lowerOp(ir::OpId opId, const std::vector<ir::OpId>& stageOps, size_t position) {
  const ir::Op& op = graph_.op(opId);
  for (ir::TensorId in : op.inputs)
    if (!placed(in)) {
      if (graph_.tensor(in).producer >= 0)
        return makeError(ExitCode::kInternal, fmt::format("op '{}' reads '{}' which is not on this chip", op.name,
                                                          graph_.tensor(in).name));
      if (auto s = placeResident(in); !s) return s.error();
    }

  // Epilogue fusion: a bias Add of a 1-D weight and an activation that are the sole users.
  auto soleUserIs = [&](ir::TensorId t, size_t at, std::initializer_list<ir::OpKind> kinds) -> const ir::Op* {
    if (at >= stageOps.size() || graph_.tensor(t).users.size() != 1 || graph_.tensor(t).users[0] != stageOps[at])
      return nullptr;
    const ir::Op& next = graph_.op(stageOps[at]);
    return std::find(kinds.begin(), kinds.end(), next.kind) != kinds.end() ? &next : nullptr;
  };

  const int vxmFirst = chip_.firstUnit(UnitKind::kVxm);
  // The least busy ALU group not already used by the chain being built.
  auto pickVxm = [&](const std::vector<Step>& chain) {
    int best = -1;
    for (int u = vxmFirst; u < vxmFirst + chip_.vxmAluGroups; ++u) {
      const bool inChain = std::any_of(chain.begin(), chain.end(), [&](const Step& s) { return s.inst.unit == u; });
      if (!inChain && (best < 0 || unitFree_[u] < unitFree_[best])) best = u;
    }
    return best < 0 ? vxmFirst : best;
  };

  if (op.kind == ir::OpKind::kMatMul) {
    const ir::Tensor& x = graph_.tensor(op.inputs[0]);
    const ir::Tensor& w = graph_.tensor(op.inputs[1]);
    if (ir::dtypeBytes(x.dtype) != ir::dtypeBytes(w.dtype))
      return modelError(op.name, "activations and weights must have the same storage width");
    size_t consumed = 1;
    ir::TensorId out = op.outputs[0];
    const ir::Op* bias = nullptr;
    if (const ir::Op* add = soleUserIs(out, position + 1, {ir::OpKind::kAdd})) {
      const ir::TensorId other = add->inputs[0] == out ? add->inputs[1] : add->inputs[0];
      if (graph_.tensor(other).producer < 0 && graph_.tensor(other).shape.size() == 1) {
        bias = add;
        out = add->outputs[0];
        ++consumed;
        if (auto s = placeResident(other); !s) return s.error();
      }
    }
    const ir::Op* activation = soleUserIs(out, position + consumed, {ir::OpKind::kRelu, ir::OpKind::kGelu});
    if (activation) {
      out = activation->outputs[0];
      ++consumed;
    }
    const TensorPlacement xp = placements_.at(op.inputs[0]);
    const TensorPlacement wp = placements_.at(op.inputs[1]);
    const std::int64_t rows = xp.rows;
    const int kTiles = xp.tiles;
    const auto [outRows, nTiles] = vectorShape(chip_, graph_.tensor(out));
    auto yp = allocate(out, outRows, nTiles, "activation");
    if (!yp) return yp.error();
    std::optional<TensorPlacement> bp;
    if (bias) bp = placements_.at(bias->inputs[0] == op.outputs[0] ? bias->inputs[1] : bias->inputs[0]);

    // Each plane is an engine: INT8 takes [1x320]x[320x320] per cycle, FP16 [1x160]x[160x160]
    // (a quarter of the MACs), so a 320-byte activation vector in and one out per cycle.
    const int engines = chip_.mxmPlanes;
    const int mxmFirst = chip_.firstUnit(UnitKind::kMxm);
    const int weightVectorsPerTile = static_cast<int>(std::max<std::int64_t>(1, wp.rows / kTiles));
    Cycle done = 0;
    for (int n = 0; n < nTiles; ++n) {
      const int engine = n % engines;
      const int installUnit = mxmFirst + 2 * engine, computeUnit = installUnit + 1;
      for (int step = 0; step < kTiles; ++step) {
        // Engines start at different K tiles so that they read different MEM slices at once.
        const int k = (step + engine * kTiles / engines + n / engines) % kTiles;
        std::vector<Step> install(1);
        install[0].inst = makeInst(installUnit, Opcode::kMxmInstall, 1);
        install[0].inst.address = wp.address[n % wp.tiles] + (k * weightVectorsPerTile) % std::max<std::int64_t>(1, wp.rows);
        const Cycle installIssue = placeChain(install, unitFree_[computeUnit])[0];

        std::vector<Step> steps;
        Step read;
        read.inst = makeInst(xp.memUnit[k], Opcode::kMemRead, rows);
        read.inst.address = xp.address[k];
        read.inst.stride = 1;
        steps.push_back(read);
        Step mxm;
        mxm.inst = makeInst(computeUnit, Opcode::kMxmCompute, rows);
        mxm.producer = 0;
        steps.push_back(mxm);
        if (step + 1 == kTiles) {
          int last = 1;
          if (bias) {
            Step add;
            add.inst = makeInst(pickVxm(steps), Opcode::kVxmBinary, rows);
            add.inst.func = isa::VxmFunc::kAdd;
            add.producer = last;
            add.producer2 = static_cast<int>(steps.size()) + 1;
            steps.push_back(add);
            last = static_cast<int>(steps.size()) - 1;
            Step biasRead;
            biasRead.inst = makeInst(bp->memUnit[n % bp->tiles], Opcode::kMemRead, rows);
            biasRead.inst.address = bp->address[n % bp->tiles];
            biasRead.inst.stride = 0;  // the same bias vector for every row
            steps.push_back(biasRead);
          }
          if (activation) {
            Step act;
            act.inst = makeInst(pickVxm(steps), Opcode::kVxmUnary, rows);
            act.inst.func = funcOf(activation->kind);
            act.producer = last;
            steps.push_back(act);
            last = static_cast<int>(steps.size()) - 1;
          }
          Step write;
          write.inst = makeInst(yp->memUnit[n], Opcode::kMemWrite, rows);
          write.inst.address = yp->address[n];
          write.inst.stride = 1;
          write.producer = last;
          steps.push_back(write);
        }
        placeChain(steps, std::max(readyAt(op.inputs[0]), installIssue + chip_.mxmWeightInstallCycles));
        done = std::max(done, isa::completion(chip_, steps.back().inst));
      }
    }
    ready_[out] = done;
    return static_cast<int>(consumed);
  }

  if (op.kind == ir::OpKind::kAdd || op.kind == ir::OpKind::kRelu || op.kind == ir::OpKind::kGelu) {
    const ir::TensorId out = op.outputs[0];
    const auto [rows, tiles] = vectorShape(chip_, graph_.tensor(out));
    auto yp = allocate(out, rows, tiles, "activation");
    if (!yp) return yp.error();
    Cycle earliest = 0, done = 0;
    for (ir::TensorId in : op.inputs) earliest = std::max(earliest, readyAt(in));
    for (int t = 0; t < tiles; ++t) {
      std::vector<Step> steps;
      auto readOf = [&](ir::TensorId in) {
        const TensorPlacement& p = placements_.at(in);
        Step read;
        read.inst = makeInst(p.memUnit[t % p.tiles], Opcode::kMemRead, rows);
        read.inst.address = p.address[t % p.tiles];
        read.inst.stride = p.rows == rows ? 1 : 0;  // broadcast a single row
        return read;
      };
      steps.push_back(readOf(op.inputs[0]));
      Step alu;
      alu.inst = makeInst(pickVxm(steps), op.inputs.size() == 2 ? Opcode::kVxmBinary : Opcode::kVxmUnary, rows);
      alu.inst.func = funcOf(op.kind);
      alu.producer = 0;
      if (op.inputs.size() == 2) alu.producer2 = 2;
      steps.push_back(alu);
      if (op.inputs.size() == 2) steps.push_back(readOf(op.inputs[1]));
      Step write;
      write.inst = makeInst(yp->memUnit[t], Opcode::kMemWrite, rows);
      write.inst.address = yp->address[t];
      write.inst.stride = 1;
      write.producer = 1;
      steps.push_back(write);
      placeChain(steps, earliest);
      done = std::max(done, isa::completion(chip_, steps.back().inst));
    }
    ready_[out] = done;
    return 1;
  }
  return modelError(op.name, fmt::format("op kind {} cannot be lowered", ir::opKindName(op.kind)));
}

isa::Program StageBuilder::finish() {
  isa::canonicalize(program_);
  Cycle last = 0;
  std::vector<Cycle> busy(units_.size(), 0);
  for (const auto& inst : program_.instructions) {
    last = std::max(last, isa::completion(chip_, inst));
    busy[inst.unit] += isa::busyPerIssue(chip_, inst) * inst.repeat;
  }
  const bool empty = program_.instructions.empty();
  program_.predictedCycles = empty ? 0 : last + chip_.rippleCycles;
  program_.lowerBoundCycles = empty ? 0 : *std::max_element(busy.begin(), busy.end()) + chip_.rippleCycles;
  program_.tensors.clear();
  for (const auto& [id, placement] : placements_) program_.tensors.push_back(placement);
  return program_;
}

}  // namespace tsp::lower
