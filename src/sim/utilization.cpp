// The utilisation timeline and the kernel back end's lifetime.
#include "sim/utilization.h"

#include <algorithm>

#include <Kokkos_Core.hpp>

namespace tsp::sim {

std::vector<float> normalizeTimeline(const std::vector<double>& timeline, const SimOptions& options,
                                     const int unitsPerKind[]) {
  const int bins = options.bins;
  const double width = static_cast<double>(std::max<Cycle>(1, options.binCycles));
  Kokkos::View<const double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> in(timeline.data(),
                                                                                              timeline.size());
  std::vector<float> out(timeline.size(), 0.0f);
  Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> result(out.data(), out.size());
  // The capacity of a bin per kind, captured by value: no allocation per chip.
  struct Capacity {
    double of[topology::kUnitKindCount];
  } perKind;
  for (int k = 0; k < topology::kUnitKindCount; ++k) perKind.of[k] = width * (unitsPerKind[k] > 0 ? unitsPerKind[k] : 1);
  Kokkos::parallel_for(
      "tsp.normalize_timeline", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, timeline.size()),
      KOKKOS_LAMBDA(const size_t i) {
        const double capacity = perKind.of[i / bins];
        result(i) = static_cast<float>(std::min(1.0, in(i) / capacity));
      });
  Kokkos::fence();
  return out;
}

KernelRuntime::KernelRuntime() {
  if (!Kokkos::is_initialized()) Kokkos::initialize();
}

KernelRuntime::~KernelRuntime() {
  if (Kokkos::is_initialized()) Kokkos::finalize();
}

}  // namespace tsp::sim
