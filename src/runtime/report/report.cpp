// Figures both report formats give: a collective's bandwidths, a topology's name, a unit kind's issue slots.
#include "runtime/report/report.h"

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

std::string topologyName(const topology::Cluster& cluster) {
  const auto& d = cluster.description();
  return fmt::format("{} of {} chips", d.kind, cluster.chipCount());
}

int issueSlots(const topology::ChipSpec& spec, topology::UnitKind kind) {
  return spec.unitCount(kind) * (kind == topology::UnitKind::kMem ? 2 : 1);
}

}  // namespace tsp::runtime::report
