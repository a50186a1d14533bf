// Lowering of reductions (ReduceMean/Sum/Max, GlobalAveragePool) on the VXM and of Concat/Split/Slice on the SXM.
#include <algorithm>

#include <fmt/format.h>

#include "compile/lower/lowering_internal.h"

namespace tsp::lower::detail {

using isa::Opcode;
using schedule::Task;
using topology::UnitKind;

Status Lowering::lowerReduction(const ir::Op& op) {
  // Accumulate, then emit. Every input vector passes once through an ALU that keeps the running
  // sum (or maximum) of its output elements in a named accumulator; once all of them have, an
  // emitting pass puts the output rows (divided for a mean) on a stream to MEM. Input tile t' feeds
  // output tile t' mod T_out.
  const ir::TensorId in = op.inputs[0], out = op.outputs[0];
  if (auto s = place(out, false, slicesOf(in)); !s) return s;
  const TensorState& xs = tensors_.at(in);
  const TensorState& ys = tensors_.at(out);
  const int vxm = chip_.firstUnit(UnitKind::kVxm);
  const bool max = op.kind == ir::OpKind::kReduceMax;
  const bool mean = op.kind == ir::OpKind::kReduceMean || op.kind == ir::OpKind::kGlobalAveragePool;
  // The running sums (maxima) are a named accumulator with one value per output element.
  isa::Accumulator sums;
  sums.kind = max ? isa::Accumulator::Kind::kMax : isa::Accumulator::Kind::kSum;
  sums.dims = storageDims(in);
  sums.reduced.assign(sums.dims.size(), 0);
  sums.outCols = storageCols(out);
  const auto& shape = graph_.tensor(in).shape;
  const auto rank = static_cast<std::int64_t>(shape.size());
  std::vector<std::int64_t> axes;
  bool axesKnown = true;
  if (op.kind == ir::OpKind::kGlobalAveragePool) {
    for (std::int64_t a = 2; a < rank; ++a) axes.push_back(a);
  } else if (op.inputs.size() > 1) {
    // Opset 18 gives the axes as an input; a constant one is read here.
    const ir::Tensor& given = graph_.tensor(op.inputs[1]);
    axesKnown = given.data != nullptr;
    if (axesKnown)
      for (double a : *given.data) axes.push_back(static_cast<std::int64_t>(a));
  } else {
    axes = op.intsAttr("axes");
  }
  if (axes.empty() && op.intAttr("noop_with_empty_axes", 0) == 0)
    for (std::int64_t a = 0; a < rank; ++a) axes.push_back(a);
  for (std::int64_t a : axes) {
    const size_t at = storageAxis(in, a);
    if (rank > 0 && !sums.reduced[at]) sums.divisor *= sums.dims[at];
    sums.reduced[at] = 1;
  }
  if (rank == 0) sums.reduced[0] = 1;
  std::int64_t kept = 1;
  for (size_t d = 0; d < sums.dims.size(); ++d) kept *= sums.reduced[d] ? 1 : sums.dims[d];
  if (!mean) sums.divisor = 1;
  // Values are computed when the output holds the kept elements in order and every output tile's
  // emit waits for all the accumulations it reads (one output tile, or the values per row kept).
  const bool computes = axesKnown && kept == graph_.tensor(out).elements() &&
                        (ys.placement.tiles == 1 || !sums.reduced.back());
  const int acc = addAccumulator(sums);
  for (int t = 0; t < ys.placement.tiles; ++t) {
    std::vector<int> accumulated;
    for (int ti = t; ti < xs.placement.tiles; ti += ys.placement.tiles)
      for (const auto& [r0, n] : rowPieces(0, xs.placement.rows, {in})) {
        Task task;
        task.name = fmt::format("{} accumulate tile {} rows {}", op.name, ti, r0);
        task.steps.push_back(readStep(in, ti, r0, n, false));
        schedule::Step alu;
        alu.inst = makeInst(vxm, Opcode::kVxmUnary, n);
        alu.inst.func = isa::VxmFunc::kAccumulate;
        alu.inst.operand = addOperand({acc, ti, r0});
        alu.inst.timingOnly = !computes;
        alu.producer = 0;
        task.steps.push_back(alu);
        accumulated.push_back(addTask(std::move(task), {{in, ti, r0, n, 0}}, {}));
      }
    for (const auto& [r0, n] : rowPieces(0, ys.placement.rows, {out})) {
      Task task;
      task.name = fmt::format("{} emit tile {} rows {}", op.name, t, r0);
      schedule::Step emit;
      emit.inst = makeInst(vxm, Opcode::kVxmUnary, n);
      emit.inst.func = isa::VxmFunc::kEmit;
      emit.inst.operand = addOperand({acc, t, r0});
      emit.inst.timingOnly = !computes;
      task.steps.push_back(emit);
      task.steps.push_back(writeStep(out, t, r0, n, 0));
      const int id = addTask(std::move(task), {}, {{out, t, r0, n, 1}});
      for (int a : accumulated) {
        const isa::Instruction& ai = problem_.tasks()[a].steps[1].inst;
        problem_.addDependence({a, 1, id, 0, Cycle{ai.repeat} * ai.interval});
      }
    }
  }
  return {};
}

void Lowering::mergeLanes(const ir::Op& op, ir::TensorId part, ir::TensorId whole, int operand) {
  // Per row piece: read the part -> SXM lane shift -> VXM add with the output's row -> write it back.
  const TensorState& ps = tensors_.at(part);
  const int vxm = chip_.firstUnit(UnitKind::kVxm);
  const int vxmSlice = chip_.units()[vxm].slice;
  for (const auto& [r0, n] : rowPieces(0, ps.placement.rows, {part, whole})) {
    Task task;
    task.name = fmt::format("{} merge {} rows {}", op.name, ps.placement.name, r0);
    task.steps.push_back(readStep(part, 0, r0, n, false));
    schedule::Step shift;
    const bool west = chip_.units()[task.steps[0].inst.unit].slice < vxmSlice;
    shift.inst = makeInst(chip_.firstUnit(UnitKind::kSxm) + (west ? 0 : chip_.sxmUnits / 2), Opcode::kSxmShift, n);
    shift.inst.sxm = isa::SxmFunc::kLanes;
    shift.inst.operand = operand;
    shift.producer = 0;
    task.steps.push_back(shift);
    schedule::Step add;
    add.inst = makeInst(vxm, Opcode::kVxmBinary, n);
    add.inst.func = isa::VxmFunc::kAdd;
    add.producer = 1;
    add.producer2 = 3;
    task.steps.push_back(add);
    task.steps.push_back(readStep(whole, 0, r0, n, false));
    task.steps.push_back(writeStep(whole, 0, r0, n, 2));
    addTask(std::move(task), {{part, 0, r0, n, 0}, {whole, 0, r0, n, 3}}, {{whole, 0, r0, n, 4}});
  }
}

Status Lowering::lowerCopy(const ir::Op& op) {
  // Concat, Split and Slice move vectors through the SXM: along the vector axis (the channels of a
  // channels-last map, else the last dimension) by whole tiles, along any other axis by rows.
  const bool concat = op.kind == ir::OpKind::kConcat;
  const ir::TensorId first = op.inputs[0];
  const auto rank = static_cast<std::int64_t>(graph_.tensor(first).shape.size());
  std::int64_t axis = op.intAttr("axis", 0);
  if (axis < 0) axis += rank;
  const std::int64_t vectorAxis = spatial_ && rank == 4 ? 1 : rank - 1;
  const bool byTiles = op.kind != ir::OpKind::kSlice && axis == vectorAxis;
  std::set<int> avoid;
  for (ir::TensorId in : op.inputs)
    for (int s : slicesOf(in)) avoid.insert(s);
  for (ir::TensorId out : op.outputs)
    if (auto s = place(out, false, avoid); !s) return s;
  // Concat: input j lands at an offset of the output; Split: output j comes from an offset of the input.
  const std::vector<ir::TensorId>& parts = concat ? op.inputs : op.outputs;
  const ir::TensorId whole = concat ? op.outputs[0] : op.inputs[0];
  const TensorState& ws = tensors_.at(whole);
  std::int64_t offset = 0, valuesBefore = 0;
  const std::int64_t lanes = chip_.vectorBytes / std::max(1, ir::dtypeBytes(graph_.tensor(whole).dtype));
  for (ir::TensorId part : parts) {
    const TensorState& ps = tensors_.at(part);
    const std::int64_t size = byTiles ? ps.placement.tiles : ps.placement.rows;
    const std::int64_t limit = byTiles ? ws.placement.tiles : ws.placement.rows;
    const std::int64_t at = std::min(offset, std::max<std::int64_t>(0, limit - size));
    int tile0 = byTiles ? static_cast<int>(at) : 0;
    // A Split part inside one tile of the input (off tile boundaries): the SXM moves its lanes down
    // to lane 0 and keeps its values (functional mode), reading the input tile that holds them.
    const std::int64_t partCols = storageCols(part), shift = valuesBefore % lanes;
    const bool laneSplit = !concat && byTiles && ps.placement.tiles == 1 && shift + partCols <= lanes &&
                           (shift != 0 || partCols < lanes) && ps.placement.rows == ws.placement.rows;
    // A Concat part of a one-tile output off tile boundaries: the first is copied with its values'
    // lanes kept; each later one moves up to its lanes on the SXM and joins the output's row on the
    // VXM (the earlier parts' lanes are zero in it).
    const bool laneConcat = concat && byTiles && ws.placement.tiles == 1 && ps.placement.tiles == 1 &&
                            (shift != 0 || partCols < lanes) && ps.placement.rows == ws.placement.rows;
    valuesBefore += partCols;
    if (laneConcat) {
      isa::FunctionalOperand moved;
      moved.laneShift = static_cast<std::int32_t>(-(valuesBefore - partCols));
      moved.laneCount = static_cast<std::int32_t>(partCols);
      if (valuesBefore == partCols)
        copyVectors(op, part, whole, 0, 1, 0, ps.placement.rows, 0, 0, false, isa::SxmFunc::kLanes, addOperand(moved));
      else
        mergeLanes(op, part, whole, addOperand(moved));
      offset += size;
      continue;
    }
    if (laneSplit) {
      tile0 = static_cast<int>((valuesBefore - partCols) / lanes);
      isa::FunctionalOperand moved;
      moved.laneShift = static_cast<std::int32_t>(shift);
      moved.laneCount = static_cast<std::int32_t>(partCols);
      copyVectors(op, whole, part, 0, 1, 0, ps.placement.rows, tile0, 0, false, isa::SxmFunc::kLanes, addOperand(moved));
      offset += size;
      continue;
    }
    const std::int64_t row0 = byTiles ? 0 : at;
    // A copy of the values (functional mode) when the part sits at its offset: whole tiles along the
    // vector axis (the part's values fill its tiles), or whole rows along the outermost row axis.
    bool copies = op.kind != ir::OpKind::kSlice && at == offset;
    if (byTiles) {
      copies = copies && storageCols(part) * ir::dtypeBytes(graph_.tensor(part).dtype) % chip_.vectorBytes == 0;
    } else {
      const auto& shape = graph_.tensor(whole).shape;
      for (std::int64_t d = 0; d < axis; ++d) copies = copies && shape[static_cast<size_t>(d)] == 1;
      copies = copies && axis < vectorAxis && storageCols(part) == storageCols(whole) && (!spatial_ || rank != 4 || axis == 0);
    }
    const isa::SxmFunc func = copies ? isa::SxmFunc::kCopy : isa::SxmFunc::kUnspecified;
    if (concat)
      copyVectors(op, part, whole, tile0, ps.placement.tiles, row0, ps.placement.rows, 0, 0, false, func);
    else
      copyVectors(op, whole, part, 0, ps.placement.tiles, 0, ps.placement.rows, tile0, row0, false, func);
    offset += size;
  }
  return {};
}

}  // namespace tsp::lower::detail
