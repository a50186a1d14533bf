// Figures both report formats give: a collective's bandwidths, a topology's name, a unit kind's issue slots.
#include "runtime/report/report.h"

#include <algorithm>

#include <fmt/format.h>

namespace tsp::runtime::report {

CollectiveFigures collectiveFigures(const schedule::CollectiveSchedule& c, const ir::Graph& graph, double seconds) {
  const auto bytes = graph.op(0).intAttr("bytes", 0);
  const int chips = static_cast<int>(c.plan.group.size());
  const double algbw = seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
  return {schedule::collectiveOpName(c.plan.op),
          schedule::collectiveAlgorithmName(c.plan.algorithm),
          chips,
          bytes,
          seconds * 1e6,
          algbw,
          algbw * schedule::busBandwidthFactor(c.plan.op, chips),
          c.cycles};
}

int planCopies(const RunState& state) {
  return std::max(1, state.config.cluster->chipCount() / std::max(1, state.choice.plan.candidate().chips()));
}

std::string topologyName(const topology::Cluster& cluster) {
  const auto& d = cluster.description();
  return fmt::format("{} of {} chips", d.kind, cluster.chipCount());
}

double workUtilisation(const WorkRow& row, const topology::ChipSpec& spec, int k) {
  const double capacity =
      static_cast<double>(row.chipCycles) * issueSlots(spec, static_cast<topology::UnitKind>(k));
  return capacity > 0 ? static_cast<double>(row.busy[k]) / capacity : 0.0;
}

double workShare(const WorkRow& row, const Attribution& attribution) {
  std::int64_t total = 0;
  for (const auto& layer : attribution.layers) total += layer.busyTotal();
  return total > 0 ? static_cast<double>(row.busyTotal()) / static_cast<double>(total) : 0.0;
}

namespace {

std::string kib(std::int64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / 1024.0); }

}  // namespace

void printAttributionText(const Attribution& attribution, const topology::ChipSpec& spec, int topOps) {
  if (attribution.layers.empty()) return;
  const auto share = [&](const WorkRow& row) { return 100.0 * workShare(row, attribution); };
  fmt::print("\n{:>6} {:>6} {:>12} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>12} {:>12} {:>10}\n", "layer", "chips",
             "cycles", "share%", "MEM%", "VXM%", "MXM%", "SXM%", "C2C%", "MEM-KiB", "C2C-KiB", "SRAM-KiB");
  for (const auto& row : attribution.layers) {
    fmt::print("{:>6} {:>6} {:>12} {:>7.2f}", row.id < 0 ? std::string("-") : std::to_string(row.id), row.chips,
               row.cycles, share(row));
    for (int k = 0; k < topology::kUnitKindCount - 1; ++k)
      fmt::print(" {:>7.2f}", 100.0 * workUtilisation(row, spec, k));
    fmt::print(" {:>7.2f}", 100.0 * row.linkBusy);
    fmt::print(" {:>12} {:>12} {:>10}\n", kib(row.memBytes), kib(row.c2cBytes), kib(row.sramBytes));
  }
  fmt::print("(cycles: the layer's active cycles, some unit busy with it, on its busiest chip; share: of all busy "
             "unit-cycles; utilisation: busy unit-cycles over its active cycles x the units, on all its chips; C2C%: its busiest C2C "
             "queue (a port's direction) over its active cycles on that chip; MEM-KiB: SRAM read and written; C2C-KiB: sent; "
             "SRAM-KiB: distinct SRAM addresses it writes)\n");
  std::vector<const WorkRow*> ops;
  for (const auto& row : attribution.ops)
    if (row.instructions > 0) ops.push_back(&row);
  std::stable_sort(ops.begin(), ops.end(),
                   [](const WorkRow* a, const WorkRow* b) { return a->busyTotal() > b->busyTotal(); });
  if (ops.size() > static_cast<size_t>(topOps)) ops.resize(static_cast<size_t>(topOps));
  fmt::print("\ntop {} ops by busy unit-cycles:\n{:>7} {:>6} {:<14} {:>12} {:>12} {:>12}  {}\n", ops.size(), "share%",
             "layer", "kind", "busy", "cycles", "C2C-KiB", "op");
  for (const WorkRow* row : ops) {
    const isa::OpOrigin& name = attribution.names[row->id];
    fmt::print("{:>7.2f} {:>6} {:<14} {:>12} {:>12} {:>12}  {}\n", share(*row),
               name.layer < 0 ? std::string("-") : std::to_string(name.layer), name.kind, row->busyTotal(),
               row->cycles, kib(row->c2cBytes), name.op);
  }
}

int issueSlots(const topology::ChipSpec& spec, topology::UnitKind kind) {
  return spec.unitCount(kind) * (kind == topology::UnitKind::kMem ? 2 : 1);
}

}  // namespace tsp::runtime::report
