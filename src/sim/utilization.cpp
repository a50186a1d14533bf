// The utilisation timeline and the kernel back end's lifetime.
#include "sim/utilization.h"

#include <algorithm>

#include <Kokkos_Core.hpp>

namespace tsp::sim {

void Timeline::addGapped(Cycle* diff, Cycle first, Cycle start, Cycle end, std::int64_t repeat, Cycle interval,
                         Cycle perIssue) {
  Cycle before = 0, previous = 0;  // busy cycles before the bin; those of the bin before it
  Cycle bin = first;
  for (; bin < bins_ && bin * width_ < end; ++bin) {
    const Cycle upTo = busyCyclesBefore(std::min(end, (bin + 1) * width_) - start, repeat, interval, perIssue);
    diff[bin] += upTo - before - previous;
    previous = upTo - before;
    before = upTo;
  }
  diff[bin] -= previous;
}

std::vector<Cycle> Timeline::busyCycles() const {
  std::vector<Cycle> out;
  out.reserve(static_cast<size_t>(topology::kUnitKindCount) * bins_);
  for (int k = 0; k < topology::kUnitKindCount; ++k) {
    Cycle busy = 0;
    for (Cycle b = 0; b < bins_; ++b) out.push_back(busy += diff_[k * (bins_ + 1) + b]);
  }
  return out;
}

std::vector<float> Timeline::normalize(const int unitsPerKind[]) const {
  const Cycle bins = bins_;
  const double width = static_cast<double>(width_);
  Kokkos::View<const Cycle*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> in(diff_.data(), diff_.size());
  std::vector<float> out(static_cast<size_t>(topology::kUnitKindCount) * bins, 0.0f);
  Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> result(out.data(), out.size());
  // The capacity of a bin per kind, captured by value: no allocation per chip.
  struct Capacity {
    double of[topology::kUnitKindCount];
  } perKind;
  for (int k = 0; k < topology::kUnitKindCount; ++k) perKind.of[k] = width * (unitsPerKind[k] > 0 ? unitsPerKind[k] : 1);
  Kokkos::parallel_for(
      "tsp.normalize_timeline", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, topology::kUnitKindCount),
      KOKKOS_LAMBDA(const int kind) {
        // A kind's bins are the running sums of its differences.
        const double capacity = perKind.of[kind];
        Cycle busy = 0;
        for (Cycle b = 0; b < bins; ++b) {
          busy += in(kind * (bins + 1) + b);
          result(kind * bins + b) = static_cast<float>(std::min(1.0, static_cast<double>(busy) / capacity));
        }
      });
  Kokkos::fence();
  return out;
}

Bytes Timeline::bytes(const SimOptions& options) {
  const Bytes bins = std::max(0, options.bins);
  return Bytes{topology::kUnitKindCount} * ((bins + 1) * sizeof(Cycle) + bins * sizeof(float));
}

KernelRuntime::KernelRuntime() {
  if (!Kokkos::is_initialized()) Kokkos::initialize();
}

KernelRuntime::~KernelRuntime() {
  if (Kokkos::is_initialized()) Kokkos::finalize();
}

}  // namespace tsp::sim
