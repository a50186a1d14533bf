// ChipSpec: presets, the unit layout along the east-west axis, YAML overrides and validation.
#include "topology/chip_spec.h"

#include <fmt/format.h>

#include "topology/yaml_reader.h"

namespace tsp::topology {

const char* unitKindName(UnitKind kind) {
  switch (kind) {
    case UnitKind::kMem: return "MEM";
    case UnitKind::kVxm: return "VXM";
    case UnitKind::kMxm: return "MXM";
    case UnitKind::kSxm: return "SXM";
    case UnitKind::kC2c: return "C2C";
  }
  return "?";
}

// Layout (docs/machine-model.md, "Layout along the east-west axis"): MXM.. | SXM | MEM x(n/2) | VXM | MEM x(n/2) | SXM | ..MXM.
// Half the MXM planes sit at the west edge, half at the east edge, one slice each.
int ChipSpec::sliceCount() const { return mxmPlanes + 2 + memSlices + 1; }

int ChipSpec::unitCount(UnitKind kind) const {
  switch (kind) {
    case UnitKind::kMem: return memSlices;
    case UnitKind::kVxm: return vxmAluGroups;
    case UnitKind::kMxm: return 2 * mxmPlanes;  // per plane: a weight-install queue and a compute queue
    case UnitKind::kSxm: return sxmUnits;
    case UnitKind::kC2c: return c2cPorts;
  }
  return 0;
}

int ChipSpec::firstUnit(UnitKind kind) const {
  int first = 0;
  for (int k = 0; k < static_cast<int>(kind); ++k) first += unitCount(static_cast<UnitKind>(k));
  return first;
}

std::vector<UnitInfo> ChipSpec::units() const {
  const int westMxm = mxmPlanes / 2;
  const int sxmWest = westMxm;
  const int memWestFirst = sxmWest + 1;
  const int memWest = memSlices / 2;
  const int vxmSlice = memWestFirst + memWest;
  const int memEastFirst = vxmSlice + 1;
  const int sxmEast = memEastFirst + (memSlices - memWest);
  const int mxmEastFirst = sxmEast + 1;

  std::vector<UnitInfo> table;
  table.reserve(icuQueues);
  for (int i = 0; i < memSlices; ++i)
    table.push_back({UnitKind::kMem, i < memWest ? memWestFirst + i : memEastFirst + (i - memWest), i});
  for (int i = 0; i < vxmAluGroups; ++i) table.push_back({UnitKind::kVxm, vxmSlice, i});
  for (int i = 0; i < 2 * mxmPlanes; ++i) {
    const int plane = i / 2;
    table.push_back({UnitKind::kMxm, plane < westMxm ? plane : mxmEastFirst + (plane - westMxm), i});
  }
  for (int i = 0; i < sxmUnits; ++i) table.push_back({UnitKind::kSxm, i < sxmUnits / 2 ? sxmWest : sxmEast, i});
  // C2C ports sit beside the SXM slices at the two edges, half on each side.
  for (int i = 0; i < c2cPorts; ++i) table.push_back({UnitKind::kC2c, i < c2cPorts / 2 ? sxmWest : sxmEast, i});
  return table;
}

Cycle ChipSpec::dfunc(UnitKind kind) const {
  switch (kind) {
    case UnitKind::kMem: return memReadCycles;
    case UnitKind::kVxm: return vxmCycles;
    case UnitKind::kMxm: return mxmCycles;
    case UnitKind::kSxm: return sxmCycles;
    case UnitKind::kC2c: return c2cSendCycles;
  }
  return 0;
}

int ChipSpec::bankOf(int address) const {
  switch (bankMapping) {
    case BankMapping::kLinear: return (address / (addressesPerSlice / banksPerSlice)) % banksPerSlice;
    case BankMapping::kPrimeModulo: return (address % bankPrime) % banksPerSlice;
    case BankMapping::kXor: return (address ^ (address >> 1) ^ (address >> 7)) % banksPerSlice;
  }
  return 0;
}

std::string ChipSpec::canonical() const {
  return fmt::format(
      "v{};clock={};superlanes={};lanes={};vector={};queues={};streams={};ripple={};"
      "mem={},{},{},{},{},{},{};vxm={},{};mxm={},{},{},{},{};sxm={},{};c2c={},{},{},{},{},{},{},{}",
      kInterfaceVersion, clockMhz, superlanes, lanesPerSuperlane, vectorBytes, icuQueues, streamsPerDirection,
      rippleCycles, memSlices, banksPerSlice, addressesPerSlice, static_cast<int>(bankMapping), bankPrime,
      memReadCycles, memWriteCycles, vxmAluGroups, vxmCycles, mxmPlanes, mxmPlaneDim, mxmWeightInstallCycles,
      mxmFp16RateDivisor, mxmCycles, sxmUnits, sxmCycles, c2cPorts, c2cSendCycles, c2cReceiveCycles,
      c2cForwardCycles, c2cFramingOverhead, c2cLanesPerLink, c2cGbpsPerLane, c2cCabledGbpsPerLane);
}

std::uint64_t ChipSpec::hash() const { return fnv1a(canonical()); }

Expected<ChipSpec> chipPreset(const std::string& name) {
  if (name == "groq-tsp-v1") return ChipSpec{};
  return makeError(ExitCode::kConfig, fmt::format("unknown chip preset '{}'", name));
}

namespace {

// Reads one integer field into a ChipSpec member, keeping the preset value as default.
template <typename T>
Status readInto(const YamlReader& reader, const YAML::Node& map, const std::string& key, T& field,
                std::int64_t lo, std::int64_t hi) {
  auto value = reader.integer(map, key, static_cast<std::int64_t>(field), lo, hi);
  if (!value) return value.error();
  field = static_cast<T>(*value);
  return {};
}

Status readNumber(const YamlReader& reader, const YAML::Node& map, const std::string& key, double& field,
                  double lo, double hi) {
  auto value = reader.number(map, key, field, lo, hi);
  if (!value) return value.error();
  field = *value;
  return {};
}

}  // namespace

Expected<ChipSpec> loadChipSpec(const YamlReader& reader, const YAML::Node& node) {
  if (auto s = reader.checkKeys(node, {"preset", "clock_mhz", "superlanes", "lanes_per_superlane", "vector_bytes",
                                       "icu_queues", "streams_per_direction", "ripple_cycles", "mem", "vxm", "mxm",
                                       "sxm", "c2c", "energy"},
                                "cluster.chip");
      !s)
    return s.error();
  auto presetName = reader.text(node, "preset", "groq-tsp-v1", {"groq-tsp-v1"});
  if (!presetName) return presetName.error();
  ChipSpec spec = *chipPreset(*presetName);
  spec.preset = *presetName;

  constexpr std::int64_t kBig = 1 << 30;
  Status s;
  if (!(s = readNumber(reader, node, "clock_mhz", spec.clockMhz, 1, 1e5))) return s.error();
  if (!(s = readInto(reader, node, "superlanes", spec.superlanes, 1, 1024))) return s.error();
  if (!(s = readInto(reader, node, "lanes_per_superlane", spec.lanesPerSuperlane, 1, 1024))) return s.error();
  if (!(s = readInto(reader, node, "vector_bytes", spec.vectorBytes, 8, 1 << 20))) return s.error();
  if (!(s = readInto(reader, node, "icu_queues", spec.icuQueues, 1, 4096))) return s.error();
  if (!(s = readInto(reader, node, "streams_per_direction", spec.streamsPerDirection, 1, 1024))) return s.error();
  if (!(s = readInto(reader, node, "ripple_cycles", spec.rippleCycles, 0, 1 << 16))) return s.error();

  const YAML::Node mem = reader.child(node, "mem");
  if (!(s = reader.checkKeys(mem, {"slices", "banks_per_slice", "addresses_per_slice", "bank_mapping", "bank_prime",
                                   "read_cycles", "write_cycles"},
                             "cluster.chip.mem")))
    return s.error();
  if (mem) {
    if (!(s = readInto(reader, mem, "slices", spec.memSlices, 2, 4096))) return s.error();
    if (!(s = readInto(reader, mem, "banks_per_slice", spec.banksPerSlice, 1, 64))) return s.error();
    if (!(s = readInto(reader, mem, "addresses_per_slice", spec.addressesPerSlice, 1, kBig))) return s.error();
    if (!(s = readInto(reader, mem, "bank_prime", spec.bankPrime, 2, kBig))) return s.error();
    if (!(s = readInto(reader, mem, "read_cycles", spec.memReadCycles, 0, 1 << 16))) return s.error();
    if (!(s = readInto(reader, mem, "write_cycles", spec.memWriteCycles, 0, 1 << 16))) return s.error();
    auto mapping = reader.text(mem, "bank_mapping", "prime-modulo", {"linear", "prime-modulo", "xor"});
    if (!mapping) return mapping.error();
    spec.bankMapping = *mapping == "linear" ? BankMapping::kLinear
                       : *mapping == "xor"  ? BankMapping::kXor
                                            : BankMapping::kPrimeModulo;
  }
  const YAML::Node vxm = reader.child(node, "vxm");
  if (!(s = reader.checkKeys(vxm, {"alu_groups", "cycles"}, "cluster.chip.vxm"))) return s.error();
  if (vxm) {
    if (!(s = readInto(reader, vxm, "alu_groups", spec.vxmAluGroups, 1, 1024))) return s.error();
    if (!(s = readInto(reader, vxm, "cycles", spec.vxmCycles, 1, 1 << 16))) return s.error();
  }
  const YAML::Node mxm = reader.child(node, "mxm");
  if (!(s = reader.checkKeys(mxm, {"planes", "plane_dim", "weight_install_cycles", "fp16_rate_divisor", "cycles"},
                             "cluster.chip.mxm")))
    return s.error();
  if (mxm) {
    if (!(s = readInto(reader, mxm, "planes", spec.mxmPlanes, 2, 64))) return s.error();
    if (!(s = readInto(reader, mxm, "plane_dim", spec.mxmPlaneDim, 1, 1 << 16))) return s.error();
    if (!(s = readInto(reader, mxm, "weight_install_cycles", spec.mxmWeightInstallCycles, 1, 1 << 20)))
      return s.error();
    if (!(s = readInto(reader, mxm, "fp16_rate_divisor", spec.mxmFp16RateDivisor, 1, 64))) return s.error();
    if (!(s = readInto(reader, mxm, "cycles", spec.mxmCycles, 1, 1 << 16))) return s.error();
  }
  const YAML::Node sxm = reader.child(node, "sxm");
  if (!(s = reader.checkKeys(sxm, {"units", "cycles"}, "cluster.chip.sxm"))) return s.error();
  if (sxm) {
    if (!(s = readInto(reader, sxm, "units", spec.sxmUnits, 1, 1024))) return s.error();
    if (!(s = readInto(reader, sxm, "cycles", spec.sxmCycles, 1, 1 << 16))) return s.error();
  }
  const YAML::Node c2c = reader.child(node, "c2c");
  if (!(s = reader.checkKeys(c2c, {"ports", "send_cycles", "receive_cycles", "forward_cycles", "framing_overhead",
                                   "lanes_per_link", "gbps_per_lane", "cabled_gbps_per_lane"},
                             "cluster.chip.c2c")))
    return s.error();
  if (c2c) {
    if (!(s = readInto(reader, c2c, "ports", spec.c2cPorts, 1, 1024))) return s.error();
    if (!(s = readInto(reader, c2c, "send_cycles", spec.c2cSendCycles, 0, 1 << 16))) return s.error();
    if (!(s = readInto(reader, c2c, "receive_cycles", spec.c2cReceiveCycles, 0, 1 << 16))) return s.error();
    if (!(s = readInto(reader, c2c, "forward_cycles", spec.c2cForwardCycles, 0, 1 << 16))) return s.error();
    if (!(s = readNumber(reader, c2c, "framing_overhead", spec.c2cFramingOverhead, 0, 0.99))) return s.error();
    if (!(s = readInto(reader, c2c, "lanes_per_link", spec.c2cLanesPerLink, 1, 64))) return s.error();
    if (!(s = readNumber(reader, c2c, "gbps_per_lane", spec.c2cGbpsPerLane, 1e-3, 1e4))) return s.error();
    if (!(s = readNumber(reader, c2c, "cabled_gbps_per_lane", spec.c2cCabledGbpsPerLane, 1e-3, 1e4))) return s.error();
  }
  const YAML::Node energy = reader.child(node, "energy");
  if (!(s = reader.checkKeys(energy, {"mem_read_pj", "mem_write_pj", "stream_hop_pj", "vxm_op_pj", "mxm_vector_pj",
                                      "mxm_install_pj", "sxm_op_pj", "c2c_pj_per_byte", "static_watts"},
                             "cluster.chip.energy")))
    return s.error();
  if (energy) {
    auto& e = spec.energy;
    const std::pair<const char*, double*> fields[] = {
        {"mem_read_pj", &e.memReadPj},       {"mem_write_pj", &e.memWritePj},   {"stream_hop_pj", &e.streamHopPj},
        {"vxm_op_pj", &e.vxmOpPj},           {"mxm_vector_pj", &e.mxmVectorPj}, {"mxm_install_pj", &e.mxmInstallPj},
        {"sxm_op_pj", &e.sxmOpPj},           {"c2c_pj_per_byte", &e.c2cPjPerByte}, {"static_watts", &e.staticWatts}};
    for (const auto& [key, field] : fields)
      if (!(s = readNumber(reader, energy, key, *field, 0, 1e12))) return s.error();
  }

  int queues = 0;
  for (int k = 0; k < kUnitKindCount; ++k) queues += spec.unitCount(static_cast<UnitKind>(k));
  if (queues != spec.icuQueues)
    return reader.error(node, fmt::format("cluster.chip: the units need {} ICU queues (MEM {} + VXM {} + MXM {} + "
                                          "SXM {} + C2C {}) but icu_queues is {}",
                                          queues, spec.unitCount(UnitKind::kMem), spec.unitCount(UnitKind::kVxm),
                                          spec.unitCount(UnitKind::kMxm), spec.unitCount(UnitKind::kSxm),
                                          spec.unitCount(UnitKind::kC2c), spec.icuQueues));
  return spec;
}

}  // namespace tsp::topology
