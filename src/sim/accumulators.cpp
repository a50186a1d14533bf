// Named accumulators of the VXM in functional mode: sums, maxima, softmax and moment statistics, emit and normalise.
#include "sim/accumulators.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <Kokkos_Core.hpp>
#include <fmt/format.h>

#include "sim/functional.h"

namespace tsp::sim {

namespace {

using Host = Kokkos::DefaultHostExecutionSpace;
template <typename T>
using HostView = Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using Kind = isa::Accumulator::Kind;

std::int64_t outputElements(const isa::Accumulator& acc) {
  std::int64_t n = 1;
  for (size_t d = 0; d < acc.dims.size(); ++d)
    if (!acc.reduced[d]) n *= acc.dims[d];
  return n;
}

Status malformedAccumulator(int id, const isa::Accumulator& acc) {
  if (acc.dims.empty() || acc.reduced.size() != acc.dims.size())
    return makeError(ExitCode::kInternal, fmt::format("accumulator {} has {} dimensions and {} reduced flags", id,
                                                      acc.dims.size(), acc.reduced.size()));
  return {};
}

}  // namespace

std::vector<std::int64_t> AccumulatorBank::outputIndex(const isa::Accumulator& acc, const isa::FunctionalOperand& operand,
                                                       std::int64_t count) const {
  // Output strides of the input's dimensions (0 for a reduced one), row-major over the kept ones.
  const size_t rank = acc.dims.size();
  std::vector<std::int64_t> stride(rank, 0);
  std::int64_t s = 1;
  for (size_t d = rank; d-- > 0;)
    if (!acc.reduced[d]) {
      stride[d] = s;
      s *= acc.dims[d];
    }
  const std::int64_t cols = acc.dims.back();
  std::vector<std::int64_t> out(static_cast<size_t>(count) * lanes_, -1);
  for (std::int64_t j = 0; j < count; ++j) {
    std::int64_t row = operand.row0 + j, base = 0;
    for (size_t d = rank - 1; d-- > 0;) {
      base += (row % acc.dims[d]) * stride[d];
      row /= acc.dims[d];
    }
    for (int l = 0; l < lanes_; ++l) {
      const std::int64_t col = std::int64_t{operand.tile} * lanes_ + l;
      if (col < cols && row == 0) out[static_cast<size_t>(j * lanes_ + l)] = base + col * stride[rank - 1];
    }
  }
  return out;
}

AccumulatorBank::Values& AccumulatorBank::state(int id, const isa::Accumulator& acc) {
  Values& v = values_[id];
  const auto n = static_cast<size_t>(outputElements(acc));
  if (v.a.size() != n && v.i.size() != n) {
    const float start = acc.kind == Kind::kMax || acc.kind == Kind::kSoftmax ? -std::numeric_limits<float>::infinity() : 0.0f;
    if (element_ == ElementType::kInt8) {
      v.i.assign(n, acc.kind == Kind::kMax ? std::numeric_limits<std::int32_t>::min() : 0);
    } else {
      v.a.assign(n, start);
      v.b.assign(n, 0.0f);
      v.n.assign(n, 0.0f);
    }
  }
  return v;
}

Status AccumulatorBank::accumulate(int id, const isa::Accumulator& acc, const isa::FunctionalOperand& operand,
                                   const std::uint8_t* vectors, std::int64_t count) {
  if (auto s = malformedAccumulator(id, acc); !s) return s;
  if (element_ == ElementType::kInt8 && acc.kind != Kind::kSum && acc.kind != Kind::kMax)
    return makeError(ExitCode::kModel, "softmax and moment statistics have no integer form");
  Values& v = state(id, acc);
  const std::vector<std::int64_t> index = outputIndex(acc, operand, count);
  const int lanes = lanes_;
  const Kind kind = acc.kind;
  // One work item per lane position when the values per row are not reduced (each lane keeps its own
  // outputs, the vectors in order inside); otherwise one per vector when rows are not reduced; else
  // one item. Every output element sees its inputs in (vector, lane) order either way.
  const bool lanesApart = !acc.reduced.back();
  bool rowsApart = true;
  for (size_t d = 0; d + 1 < acc.dims.size(); ++d) rowsApart = rowsApart && !acc.reduced[d];
  const std::int64_t items = lanesApart ? lanes : rowsApart ? count : 1;
  const std::int64_t inner = lanesApart ? count : rowsApart ? lanes : count * lanes;
  const HostView<const std::int64_t> iv(index.data(), index.size());
  if (element_ == ElementType::kInt8) {
    const HostView<const std::uint8_t> xv(vectors, index.size());
    const HostView<std::int32_t> sv(v.i.data(), v.i.size());
    Kokkos::parallel_for(
        "tsp.accumulate_int32", Kokkos::RangePolicy<Host>(0, items), KOKKOS_LAMBDA(const std::int64_t item) {
          for (std::int64_t k = 0; k < inner; ++k) {
            const std::int64_t e = lanesApart ? k * lanes + item : rowsApart ? item * lanes + k : k;
            const std::int64_t o = iv(e);
            if (o < 0) continue;
            const std::int32_t x = static_cast<std::int8_t>(xv(e));
            if (kind == Kind::kMax) sv(o) = x > sv(o) ? x : sv(o);
            else sv(o) = static_cast<std::int32_t>(static_cast<std::uint32_t>(sv(o)) + static_cast<std::uint32_t>(x));
          }
        });
    Kokkos::fence();
    return {};
  }
  std::vector<std::uint16_t> halves(index.size());
  std::memcpy(halves.data(), vectors, halves.size() * sizeof(std::uint16_t));
  const HostView<const std::uint16_t> xv(halves.data(), halves.size());
  const HostView<float> av(v.a.data(), v.a.size()), bv(v.b.data(), v.b.size()), nv(v.n.data(), v.n.size());
  Kokkos::parallel_for(
      "tsp.accumulate_fp32", Kokkos::RangePolicy<Host>(0, items), KOKKOS_LAMBDA(const std::int64_t item) {
        for (std::int64_t k = 0; k < inner; ++k) {
          const std::int64_t e = lanesApart ? k * lanes + item : rowsApart ? item * lanes + k : k;
          const std::int64_t o = iv(e);
          if (o < 0) continue;
          const float x = halfToFloat(xv(e));
          switch (kind) {
            case Kind::kSum: av(o) += x; break;
            case Kind::kMax: av(o) = (x != x || x > av(o)) ? x : av(o); break;
            case Kind::kSoftmax:
              // Online softmax: a new maximum rescales the running sum of exponentials.
              if (x > av(o)) {
                bv(o) = bv(o) * std::exp(av(o) - x) + 1.0f;
                av(o) = x;
              } else {
                bv(o) += std::exp(x - av(o));
              }
              break;
            case Kind::kMoments: {
              // Welford: running mean and sum of squared deviations.
              nv(o) += 1.0f;
              const float d = x - av(o);
              av(o) += d / nv(o);
              bv(o) += d * (x - av(o));
              break;
            }
          }
        }
      });
  Kokkos::fence();
  return {};
}

Expected<std::vector<std::uint8_t>> AccumulatorBank::emit(int id, const isa::Accumulator& acc,
                                                          const isa::FunctionalOperand& operand, std::int64_t count) {
  if (auto s = malformedAccumulator(id, acc); !s) return s.error();
  if (acc.kind != Kind::kSum && acc.kind != Kind::kMax)
    return makeError(ExitCode::kInternal, fmt::format("accumulator {} holds statistics, which are not emitted", id));
  Values& v = state(id, acc);
  const std::int64_t elements = outputElements(acc), outCols = acc.outCols, lanes = lanes_;
  const std::int64_t row0 = operand.row0, col0 = std::int64_t{operand.tile} * lanes_;
  const std::int64_t divisor = std::max<std::int64_t>(1, acc.kind == Kind::kSum ? acc.divisor : 1);
  std::vector<std::uint8_t> out(static_cast<size_t>(count * lanes) * elementBytes(element_), 0);
  if (element_ == ElementType::kInt8) {
    const HostView<const std::int32_t> sv(v.i.data(), v.i.size());
    const HostView<std::uint8_t> ov(out.data(), out.size());
    Kokkos::parallel_for(
        "tsp.emit_int8", Kokkos::RangePolicy<Host>(0, count * lanes), KOKKOS_LAMBDA(const std::int64_t e) {
          const std::int64_t col = col0 + e % lanes, o = (row0 + e / lanes) * outCols + col;
          if (col < outCols && o < elements) ov(e) = static_cast<std::uint8_t>((sv(o) / divisor) & 0xff);
        });
  } else {
    std::vector<std::uint16_t> halves(static_cast<size_t>(count * lanes), 0);
    const HostView<const float> av(v.a.data(), v.a.size());
    const HostView<std::uint16_t> ov(halves.data(), halves.size());
    Kokkos::parallel_for(
        "tsp.emit_fp16", Kokkos::RangePolicy<Host>(0, count * lanes), KOKKOS_LAMBDA(const std::int64_t e) {
          const std::int64_t col = col0 + e % lanes, o = (row0 + e / lanes) * outCols + col;
          if (col < outCols && o < elements) ov(e) = floatToHalf(divisor == 1 ? av(o) : av(o) / static_cast<float>(divisor));
        });
    Kokkos::fence();
    std::memcpy(out.data(), halves.data(), out.size());
  }
  Kokkos::fence();
  return out;
}

Expected<std::vector<std::uint8_t>> AccumulatorBank::normalize(int id, const isa::Accumulator& acc,
                                                               const isa::FunctionalOperand& operand,
                                                               const std::uint8_t* vectors, std::int64_t count) const {
  if (auto s = malformedAccumulator(id, acc); !s) return s.error();
  if (element_ == ElementType::kInt8) return makeError(ExitCode::kModel, "normalisation has no integer form");
  if (acc.kind != Kind::kSoftmax && acc.kind != Kind::kMoments)
    return makeError(ExitCode::kInternal, fmt::format("accumulator {} holds no statistics to normalise by", id));
  auto it = values_.find(id);
  if (it == values_.end())
    return makeError(ExitCode::kInternal, fmt::format("normalisation by accumulator {} before its statistics", id));
  const Values& v = it->second;
  const std::vector<std::int64_t> index = outputIndex(acc, operand, count);
  std::vector<std::uint16_t> halves(index.size());
  std::memcpy(halves.data(), vectors, halves.size() * sizeof(std::uint16_t));
  const HostView<const std::int64_t> iv(index.data(), index.size());
  const HostView<std::uint16_t> xv(halves.data(), halves.size());
  const HostView<const float> av(v.a.data(), v.a.size()), bv(v.b.data(), v.b.size()), nv(v.n.data(), v.n.size());
  const bool softmax = acc.kind == Kind::kSoftmax;
  const float epsilon = static_cast<float>(acc.epsilon);
  Kokkos::parallel_for(
      "tsp.normalize_fp16", Kokkos::RangePolicy<Host>(0, index.size()), KOKKOS_LAMBDA(const std::size_t e) {
        const std::int64_t o = iv(e);
        if (o < 0) {
          xv(e) = 0;  // lanes past the values stay zero
          return;
        }
        const float x = halfToFloat(xv(e));
        const float y = softmax ? std::exp(x - av(o)) / bv(o)
                                : (x - av(o)) / std::sqrt(bv(o) / (nv(o) > 0.0f ? nv(o) : 1.0f) + epsilon);
        xv(e) = floatToHalf(y);
      });
  Kokkos::fence();
  std::vector<std::uint8_t> out(halves.size() * sizeof(std::uint16_t));
  std::memcpy(out.data(), halves.data(), out.size());
  return out;
}

}  // namespace tsp::sim
