// Lowering of the training kernels: SoftmaxCrossEntropyLoss and its gradient on the VXM, and the scatter-add of GatherGrad.
#include <algorithm>

#include <fmt/format.h>

#include "compile/lower/lowering_internal.h"

namespace tsp::lower::detail {

using isa::Opcode;
using schedule::Step;
using schedule::Task;
using topology::UnitKind;

namespace {

// One timing-only VXM step of a chain: the kernels' values stay in the ALU or are not spelled out.
Step aluStep(int vxm, Opcode opcode, isa::VxmFunc func, std::int64_t rows, int producer, int producer2 = -1) {
  Step step;
  step.inst = makeInst(vxm, opcode, rows);
  step.inst.func = func;
  step.inst.timingOnly = true;
  step.producer = producer;
  step.producer2 = producer2;
  return step;
}

}  // namespace

Status Lowering::lowerLoss(const ir::Op& op) {
  // loss = mean over rows of (logsumexp(scores_row) - scores_row[label]): one statistics pass over
  // the scores (running max and exp-sum per row in the ALU), one over the labels (the label's score
  // picked per row), then one emitting task that writes the scalar mean once both passes are done.
  const ir::TensorId scores = op.inputs[0], labels = op.inputs[1], loss = op.outputs[0];
  alloc::SliceSet avoid = slicesOf(scores);
  avoid.insert(slicesOf(labels));
  if (auto s = place(loss, false, avoid); !s) return s;
  auto stats = statisticsPass(op, scores, isa::VxmFunc::kExp);
  const auto picks = statisticsPass(op, labels, isa::VxmFunc::kSub);
  stats.insert(stats.end(), picks.begin(), picks.end());
  Task task;
  task.name = fmt::format("{} emit", op.name);
  task.steps.push_back(aluStep(chip_.firstUnit(UnitKind::kVxm), Opcode::kVxmUnary, isa::VxmFunc::kMul, 1, -1));  // the mean's scale
  task.steps.push_back(writeStep(loss, 0, 0, 1, 0));
  const int id = addTask(std::move(task), {}, {{loss, 0, 0, 1, 1}});
  waitForStatistics(stats, id, 0, -1);
  return {};
}

Status Lowering::lowerLossGrad(const ir::Op& op) {
  // dScores = dLoss / rows * (softmax(scores) - onehot(labels)): the statistics pass over the scores
  // and the labels, then per tile and row piece one pass reading the scores: exp(x - lse), minus the
  // one-hot of the row's label (an iota compare in the ALU), times the broadcast dLoss / rows.
  const ir::TensorId seed = op.inputs[0], scores = op.inputs[1], labels = op.inputs[2], out = op.outputs[0];
  alloc::SliceSet avoid = slicesOf(scores);
  avoid.insert(slicesOf(labels));
  if (auto s = place(out, false, avoid); !s) return s;
  if (auto s = place(seed, graph_.tensor(seed).producer < 0, slicesOf(scores)); !s) return s;
  auto stats = statisticsPass(op, scores, isa::VxmFunc::kExp);
  const auto picks = statisticsPass(op, labels, isa::VxmFunc::kSub);
  const TensorState& xs = tensors_.at(scores);
  const TensorState& ys = tensors_.at(out);
  const int vxm = chip_.firstUnit(UnitKind::kVxm);
  for (int t = 0; t < ys.placement.tiles; ++t)
    for (const auto& [r0, n] : rowPieces(0, ys.placement.rows, {scores, out})) {
      Task task;
      task.name = fmt::format("{} tile {}", op.name, t);
      const int tile = t % xs.placement.tiles;
      task.steps.push_back(readStep(scores, tile, r0, n, false));
      std::vector<Access> reads{{scores, tile, r0, n, 0}};
      task.steps.push_back(aluStep(vxm, Opcode::kVxmUnary, isa::VxmFunc::kExp, n, 0));      // exp(x - lse)
      task.steps.push_back(aluStep(vxm, Opcode::kVxmUnary, isa::VxmFunc::kSub, n, 1));      // - onehot
      task.steps.push_back(aluStep(vxm, Opcode::kVxmBinary, isa::VxmFunc::kMul, n, 2, 4));  // x dLoss / rows
      task.steps.push_back(readStep(seed, 0, r0, n, true, sideReads_++));
      reads.push_back({seed, 0, 0, 1, 4});
      task.steps.push_back(writeStep(out, t, r0, n, 3));
      const int id = addTask(std::move(task), reads, {{out, t, r0, n, 5}});
      waitForStatistics(stats, id, r0, n);
      waitForStatistics(picks, id, 0, -1);
    }
  return {};
}

Status Lowering::lowerGatherGrad(const ir::Op& op) {
  // dTable[indices[j]] += dY[j]: the table's gradient is zeroed, then every row of dY is added into
  // a table row by a read-modify-write chain (dY read, table row read, VXM add, table row write).
  // The rows depend on run-time indices; the static schedule walks the table's rows in order
  // (row j of dY into row j mod V), as the Gather lowering does, so every chain touching one table
  // piece is ordered after the last one that wrote it.
  const ir::TensorId dy = op.inputs[0], indices = op.inputs[1], out = op.outputs[0];
  alloc::SliceSet avoid = slicesOf(dy);
  avoid.insert(slicesOf(indices));
  if (auto s = place(out, false, avoid); !s) return s;
  const TensorState& gs = tensors_.at(dy);
  const TensorState& ys = tensors_.at(out);
  const std::int64_t tableRows = ys.placement.rows;
  const int vxm = chip_.firstUnit(UnitKind::kVxm);
  const auto picks = statisticsPass(op, indices, isa::VxmFunc::kConvert);  // the indices, read once into the ALU
  for (int t = 0; t < ys.placement.tiles; ++t)
    for (const auto& [r0, n] : rowPieces(0, tableRows, {out})) {
      Task task;
      task.name = fmt::format("{} zero tile {} rows {}", op.name, t, r0);
      task.steps.push_back(aluStep(vxm, Opcode::kVxmUnary, isa::VxmFunc::kConvert, n, -1));
      task.steps.push_back(writeStep(out, t, r0, n, 0));
      addTask(std::move(task), {}, {{out, t, r0, n, 1}});
    }
  for (int t = 0; t < ys.placement.tiles; ++t) {
    const int tile = t % gs.placement.tiles;
    for (const auto& [g0, gn] : rowPieces(0, gs.placement.rows, {dy}))
      for (std::int64_t done = 0; done < gn;) {
        // The part of this dY piece that lands in one segment of the table, without wrapping.
        const std::int64_t row = (g0 + done) % tableRows;
        const std::int64_t segmentEnd = std::min(tableRows, (row / ys.segmentRows() + 1) * ys.segmentRows());
        const std::int64_t n = std::min(gn - done, segmentEnd - row);
        Task task;
        task.name = fmt::format("{} add tile {} rows {}", op.name, t, g0 + done);
        task.steps.push_back(readStep(dy, tile, g0 + done, n, false));
        task.steps.push_back(aluStep(vxm, Opcode::kVxmBinary, isa::VxmFunc::kAdd, n, 0, 2));
        task.steps.push_back(readStep(out, t, row, n, false));
        task.steps.push_back(writeStep(out, t, row, n, 1));
        const int id = addTask(std::move(task), {{dy, tile, g0 + done, n, 0}, {out, t, row, n, 2}}, {{out, t, row, n, 3}});
        if (done == 0 && g0 == 0) waitForStatistics(picks, id, 0, -1);
        done += n;
      }
  }
  return {};
}

}  // namespace tsp::lower::detail
