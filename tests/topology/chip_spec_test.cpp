// Tests of the chip spec: published figures of the preset, layout and YAML overrides.
#include "topology/chip_spec.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "topology/yaml_reader.h"

namespace tsp::topology {
namespace {

TEST(ChipSpec, PresetHasPublishedFigures) {
  const ChipSpec spec = *chipPreset("groq-tsp-v1");
  EXPECT_EQ(spec.sramBytes(), 220LL * 1024 * 1024);  // 220 MiB
  EXPECT_EQ(spec.int8MacsPerCycle(), 409600);
  EXPECT_EQ(static_cast<int>(spec.units().size()), 144);  // ICU queues
  EXPECT_EQ(spec.sliceCount(), 4 + 2 + 88 + 1);
  // The VXM sits in the middle with 44 MEM slices on each side.
  const auto units = spec.units();
  EXPECT_EQ(units[spec.firstUnit(UnitKind::kVxm)].slice, 2 + 1 + 44);
}

TEST(ChipSpec, UnknownPresetIsAnError) { EXPECT_FALSE(chipPreset("tpu-v4").ok()); }

TEST(ChipSpec, OverridesFromYaml) {
  YamlReader reader("c.yaml");
  const auto node = YAML::Load("{preset: groq-tsp-v1, clock_mhz: 1000, mxm: {weight_install_cycles: 36}}");
  auto spec = loadChipSpec(reader, node);
  ASSERT_TRUE(spec.ok()) << spec.error().format();
  EXPECT_EQ(spec->clockMhz, 1000);
  EXPECT_EQ(spec->mxmWeightInstallCycles, 36);
  EXPECT_NE(spec->hash(), ChipSpec{}.hash());
}

TEST(ChipSpec, UnknownKeySuggestsTheRightOne) {
  YamlReader reader("c.yaml");
  const auto node = YAML::Load("{clock_mzh: 1000}");
  auto spec = loadChipSpec(reader, node);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.error().format(), "c.yaml:1:2: unknown key 'clock_mzh' in 'cluster.chip' (did you mean 'clock_mhz'?)");
}

TEST(ChipSpec, QueueCountMustMatchUnits) {
  YamlReader reader("c.yaml");
  auto spec = loadChipSpec(reader, YAML::Load("{c2c: {ports: 8}}"));
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.error().message.find("icu_queues is 144"), std::string::npos);
}

TEST(ChipSpec, BankMappingsSpreadAddresses) {
  ChipSpec spec;
  for (auto mapping : {BankMapping::kLinear, BankMapping::kPrimeModulo, BankMapping::kXor}) {
    spec.bankMapping = mapping;
    int counts[2] = {0, 0};
    for (int a = 0; a < spec.addressesPerSlice; ++a) ++counts[spec.bankOf(a)];
    EXPECT_GT(counts[0], spec.addressesPerSlice / 4);
    EXPECT_GT(counts[1], spec.addressesPerSlice / 4);
  }
}

}  // namespace
}  // namespace tsp::topology
