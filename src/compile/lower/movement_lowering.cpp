// Lowering of reductions (ReduceMean/Sum/Max, GlobalAveragePool) on the VXM and of Concat/Split/Slice on the SXM.
#include <algorithm>
#include <optional>

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
  const bool typeComputes = storageTypeComputes(graph_.tensor(in).dtype) && graph_.tensor(in).dtype == graph_.tensor(out).dtype;
  const bool computes = axesKnown && typeComputes && kept == graph_.tensor(out).elements() &&
                        (ys.placement.tiles == 1 || !sums.reduced.back());
  if (!computes)
    timingReason_ = !axesKnown ? "its axes are not a constant"
                    : !typeComputes ? fmt::format("its sums are accumulated for FP16 or INT8 values, not {}",
                                                  ir::dtypeName(graph_.tensor(in).dtype))
                    : kept != graph_.tensor(out).elements() ? "its output rows are not its kept elements in order"
                                                            : "it reduces the values per row into several output tiles";
  const int acc = addAccumulator(sums);
  for (int t = 0; t < ys.placement.tiles; ++t) {
    std::vector<int> accumulated;
    for (int ti = t; ti < xs.placement.tiles; ti += ys.placement.tiles)
      for (const auto& [r0, n] : rowPieces(0, xs.placement.rows, {in})) {
        Task task = accumulateTask(fmt::format("{} accumulate tile {} rows {}", op.name, ti, r0), in, acc, ti, r0, n,
                                   computes);
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
    shift.inst.sxm = storageTypeComputes(graph_.tensor(whole).dtype) ? isa::SxmFunc::kLanes : isa::SxmFunc::kUnspecified;
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
  const std::int64_t vectorAxis = channelsLast(first) ? 1 : rank - 1;
  const bool byTiles = op.kind != ir::OpKind::kSlice && axis == vectorAxis;
  alloc::SliceSet avoid;
  for (ir::TensorId in : op.inputs)
    avoid.insert(slicesOf(in));
  for (ir::TensorId out : op.outputs)
    if (auto s = place(out, false, avoid); !s) return s;
  // Concat: input j lands at an offset of the output; Split: output j comes from an offset of the input.
  const std::vector<ir::TensorId>& parts = concat ? op.inputs : op.outputs;
  const ir::TensorId whole = concat ? op.outputs[0] : op.inputs[0];
  const TensorState& ws = tensors_.at(whole);
  std::int64_t offset = 0, valuesBefore = 0;
  const std::int64_t lanes = chip_.vectorBytes / std::max(1, ir::dtypeBytes(graph_.tensor(whole).dtype));
  int concatMap = -2;  // not made yet
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
    // The SXM's lane shifts move lanes of the storage type (FP16, INT8); others are timed only.
    const isa::SxmFunc laneFunc = storageTypeComputes(graph_.tensor(whole).dtype) ? isa::SxmFunc::kLanes
                                                                                 : isa::SxmFunc::kUnspecified;
    if ((laneConcat || laneSplit) && laneFunc == isa::SxmFunc::kUnspecified)
      timingReason_ = fmt::format("its lane shifts move FP16 or INT8 lanes, not {}",
                                  ir::dtypeName(graph_.tensor(whole).dtype));
    if (laneConcat) {
      isa::FunctionalOperand moved;
      moved.laneShift = static_cast<std::int32_t>(-(valuesBefore - partCols));
      moved.laneCount = static_cast<std::int32_t>(partCols);
      if (valuesBefore == partCols)
        copyVectors(op, part, whole, 0, 1, 0, ps.placement.rows, 0, 0, false, laneFunc, addOperand(moved));
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
      copyVectors(op, whole, part, 0, 1, 0, ps.placement.rows, tile0, 0, false, laneFunc, addOperand(moved));
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
      copies = copies && axis < vectorAxis && storageCols(part) == storageCols(whole) && (!channelsLast(whole) || axis == 0);
    }
    const isa::SxmFunc func = copies ? isa::SxmFunc::kCopy : isa::SxmFunc::kUnspecified;
    // Otherwise the output's vectors are re-formed from the element map (one for a Concat's output).
    if (!copies && (!concat || concatMap == -2)) concatMap = elementMap(op, concat ? whole : part);
    const int map = copies ? -1 : concatMap;
    if (concat)
      copyVectors(op, part, whole, tile0, ps.placement.tiles, row0, ps.placement.rows, 0, 0, false, func, -1, map);
    else
      copyVectors(op, whole, part, 0, ps.placement.tiles, 0, ps.placement.rows, tile0, row0, false, func, -1, map);
    offset += size;
  }
  return {};
}

}  // namespace tsp::lower::detail

namespace tsp::lower::detail {

int Lowering::elementMap(const ir::Op& op, ir::TensorId out) {
  // The map is built over the tensors' shapes, then re-expressed over the storage order of a
  // channels-last map ([N, C, H, W] stored as [N, H, W, C]).
  const bool gather = op.kind == ir::OpKind::kGather;
  const bool slice = op.kind == ir::OpKind::kSlice;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if ((gather || slice) && i > 0) continue;  // indices, starts, ends, ...
    if (!tensors_.count(op.inputs[i]) || (gather && channelsLast(op.inputs[i]))) return -1;
  }
  if (!tensors_.count(out)) return -1;
  const auto& outShape = graph_.tensor(out).shape;
  isa::ElementMap map;
  map.outDims = outShape;
  map.outCols = storageCols(out);
  std::vector<ir::TensorId> reads;
  auto addSource = [&](ir::TensorId t) {
    map.sources.push_back(graph_.tensor(t).name);
    const auto& shape = graph_.tensor(t).shape;
    map.sourceDims.insert(map.sourceDims.end(), shape.begin(), shape.end());
    map.sourceCols.push_back(storageCols(t));
    reads.push_back(t);
  };
  auto identity = [&](size_t rank) {
    for (size_t s = 0; s < rank; ++s) {
      map.from.push_back(static_cast<std::int64_t>(s));
      map.starts.push_back(0);
      map.steps.push_back(1);
    }
  };
  const ir::TensorId in = op.inputs[0];
  const auto& inShape = graph_.tensor(in).shape;
  const auto rank = static_cast<std::int64_t>(inShape.size());
  auto axisOf = [&](std::int64_t a) { return a < 0 ? a + rank : a; };
  switch (op.kind) {
    case ir::OpKind::kTranspose: {
      // out axis i is in axis perm[i] (no perm: the axes reversed).
      std::vector<std::int64_t> perm = op.intsAttr("perm");
      if (perm.empty())
        for (std::int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
      addSource(in);
      identity(inShape.size());
      for (size_t i = 0; i < perm.size(); ++i) map.from[static_cast<size_t>(perm[i])] = static_cast<std::int64_t>(i);
      break;
    }
    case ir::OpKind::kReshape: case ir::OpKind::kFlatten: case ir::OpKind::kSqueeze: case ir::OpKind::kUnsqueeze:
    case ir::OpKind::kIdentity: {
      // Axes of extent 1 added or dropped, the others kept in order ([N, C, L] <-> [N, C, 1, L]):
      // each source axis keeps its coordinate on its output axis, a map like a transpose's, which
      // re-forms a channels-last tensor too.
      std::vector<std::int64_t> outAxis;
      size_t o = 0;
      bool unitAxesOnly = true;
      for (std::int64_t d : inShape) {
        if (d == 1) {
          outAxis.push_back(-1);
          continue;
        }
        while (o < outShape.size() && outShape[o] == 1) ++o;
        if (o == outShape.size() || outShape[o] != d) {
          unitAxesOnly = false;
          break;
        }
        outAxis.push_back(static_cast<std::int64_t>(o++));
      }
      for (; o < outShape.size() && unitAxesOnly; ++o) unitAxesOnly = outShape[o] == 1;
      if (unitAxesOnly && (channelsLast(in) || channelsLast(out))) {
        addSource(in);
        identity(inShape.size());
        for (size_t a = 0; a < outAxis.size(); ++a) {
          map.from[a] = std::max<std::int64_t>(outAxis[a], 0);
          if (outAxis[a] < 0) map.steps[a] = 0;
        }
        break;
      }
      // Otherwise the values in row-major order stay: the output's element f is the input's
      // element f. Into a tensor stored row-major f is counted over the input's shape (which
      // re-forms a channels-last input); from a row-major input into a channels-last output, over
      // the output's shape, the input read as having it (its storage is its row-major order).
      if (channelsLast(out) && channelsLast(in)) return -1;
      addSource(in);
      if (channelsLast(out)) {
        map.sourceDims = outShape;
        identity(outShape.size());
        break;
      }
      map.outDims = inShape;
      identity(inShape.size());
      break;
    }
    case ir::OpKind::kExpand: {
      // Right-aligned broadcast: a source axis of one reads coordinate 0.
      addSource(in);
      const auto shift = static_cast<std::int64_t>(outShape.size()) - rank;
      if (shift < 0) return -1;
      for (std::int64_t s = 0; s < rank; ++s) {
        map.from.push_back(s + shift);
        map.starts.push_back(0);
        map.steps.push_back(inShape[static_cast<size_t>(s)] == 1 ? 0 : 1);
      }
      break;
    }
    case ir::OpKind::kGather: {
      // out = table[:axis] + indices + table[axis+1:]; the table's axis takes the indices' values.
      const ir::TensorId ids = op.inputs[1];
      if (!tensors_.count(ids) || channelsLast(ids)) return -1;
      const auto axis = axisOf(op.intAttr("axis", 0));
      const auto& idShape = graph_.tensor(ids).shape;
      addSource(in);
      identity(inShape.size());
      for (std::int64_t s = axis + 1; s < rank; ++s)
        map.from[static_cast<size_t>(s)] = s + static_cast<std::int64_t>(idShape.size()) - 1;
      map.indices = graph_.tensor(ids).name;
      map.indexDims = idShape;
      map.indexAxis = static_cast<std::int32_t>(axis);
      reads.push_back(ids);
      break;
    }
    case ir::OpKind::kConcat: {
      const auto axis = axisOf(op.intAttr("axis", 0));
      std::int64_t offset = 0;
      for (ir::TensorId part : op.inputs) {
        map.offsets.push_back(offset);
        offset += graph_.tensor(part).shape[static_cast<size_t>(axis)];
        addSource(part);
      }
      map.concatAxis = static_cast<std::int32_t>(axis);
      identity(inShape.size());
      break;
    }
    case ir::OpKind::kSplit: {
      // Output k starts where the outputs before it end along the axis.
      const auto axis = axisOf(op.intAttr("axis", 0));
      addSource(in);
      identity(inShape.size());
      for (ir::TensorId part : op.outputs) {
        if (part == out) break;
        map.starts[static_cast<size_t>(axis)] += graph_.tensor(part).shape[static_cast<size_t>(axis)];
      }
      break;
    }
    case ir::OpKind::kSlice: {
      // starts, ends, axes, steps: attributes (opset 1) or constant inputs (opset 10).
      auto param = [&](size_t input, const char* name) -> std::optional<std::vector<std::int64_t>> {
        if (op.inputs.size() <= 1) return op.intsAttr(name);
        if (op.inputs.size() <= input) return std::vector<std::int64_t>{};
        const ir::Tensor& t = graph_.tensor(op.inputs[input]);
        if (!t.data) return std::nullopt;
        std::vector<std::int64_t> v;
        for (double x : *t.data) v.push_back(static_cast<std::int64_t>(x));
        return v;
      };
      const auto starts = param(1, "starts"), axes = param(3, "axes"), steps = param(4, "steps");
      if (!starts || !axes || !steps) return -1;
      addSource(in);
      identity(inShape.size());
      for (size_t i = 0; i < starts->size(); ++i) {
        const std::int64_t a = axisOf(i < axes->size() ? (*axes)[i] : static_cast<std::int64_t>(i));
        const std::int64_t dim = inShape[static_cast<size_t>(a)];
        const std::int64_t step = i < steps->size() ? (*steps)[i] : 1;
        std::int64_t start = (*starts)[i];
        if (start < 0) start += dim;
        start = step > 0 ? std::clamp<std::int64_t>(start, 0, dim) : std::clamp<std::int64_t>(start, 0, dim - 1);
        map.starts[static_cast<size_t>(a)] = start;
        map.steps[static_cast<size_t>(a)] = step;
      }
      break;
    }
    default: return -1;
  }
  return addElementMap(std::move(map), in, out, std::move(reads));
}

int Lowering::broadcastMap(ir::TensorId in, ir::TensorId out) {
  // Numpy's right-aligned broadcast, as Expand's map: a source axis of one reads coordinate 0. The map's
  // vectors hold the source's elements: of another width than the output's, they line up with its lanes
  // when a row of the output fits one vector at either width (an FP32 attention mask on FP16 scores).
  const auto& inShape = graph_.tensor(in).shape;
  const auto& outShape = graph_.tensor(out).shape;
  const auto shift = static_cast<std::int64_t>(outShape.size()) - static_cast<std::int64_t>(inShape.size());
  const int inBytes = ir::dtypeBytes(graph_.tensor(in).dtype), outBytes = ir::dtypeBytes(graph_.tensor(out).dtype);
  if (shift < 0 || inShape.empty() || !tensors_.count(in) ||
      (inBytes != outBytes && storageCols(out) * std::max(inBytes, outBytes) > chip_.vectorBytes))
    return -1;
  isa::ElementMap map;
  map.sources = {graph_.tensor(in).name};
  map.sourceDims = inShape;
  map.sourceCols = {storageCols(in)};
  map.outDims = outShape;
  map.outCols = storageCols(out);
  for (std::int64_t s = 0; s < static_cast<std::int64_t>(inShape.size()); ++s) {
    const std::int64_t d = inShape[static_cast<size_t>(s)];
    if (d != 1 && d != outShape[static_cast<size_t>(s + shift)]) return -1;
    map.from.push_back(s + shift);
    map.starts.push_back(0);
    map.steps.push_back(d == 1 ? 0 : 1);
  }
  return addElementMap(std::move(map), in, out, {in});
}

int Lowering::addElementMap(isa::ElementMap map, ir::TensorId in, ir::TensorId out, std::vector<ir::TensorId> reads) {
  // Storage axis a of a channels-last map is shape axis kShapeAxis[a]; shape axis a is storage axis kStorageAxis[a].
  static constexpr std::int64_t kShapeAxis[4] = {0, 2, 3, 1}, kStorageAxis[4] = {0, 3, 1, 2};
  if (channelsLast(out)) {
    map.outDims = storageDims(out);
    for (auto& f : map.from) f = kStorageAxis[f];
  }
  if (channelsLast(in)) {
    auto reorder = [](std::vector<std::int64_t>& v, size_t at) {
      const std::vector<std::int64_t> old(v.begin() + static_cast<std::ptrdiff_t>(at), v.begin() + static_cast<std::ptrdiff_t>(at) + 4);
      for (size_t a = 0; a < 4; ++a) v[at + a] = old[static_cast<size_t>(kShapeAxis[a])];
    };
    reorder(map.from, 0);
    reorder(map.starts, 0);
    reorder(map.steps, 0);
    for (size_t k = 0; k < map.sources.size(); ++k) reorder(map.sourceDims, 4 * k);
    if (map.concatAxis >= 0) map.concatAxis = static_cast<std::int32_t>(kStorageAxis[map.concatAxis]);
  }
  out_.maps.push_back(std::move(map));
  mapReads_.push_back(std::move(reads));
  return static_cast<int>(out_.maps.size()) - 1;
}

}  // namespace tsp::lower::detail
