// Tests of the whole-config loader: sections handed to their layers, stored config without output.
#include "runtime/run_config.h"

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

namespace tsp::runtime {
namespace {

std::string writeTemp(const std::string& text) {
  char name[] = "/tmp/tsp-config-XXXXXX";
  const int fd = mkstemp(name);
  close(fd);
  std::ofstream(name) << text;
  return name;
}

TEST(RunConfig, LoadsTheQuickstart) {
  auto config = loadRunConfig(std::string(TSP_SOURCE_DIR) + "/configs/quickstart.yaml");
  ASSERT_TRUE(config.ok()) << config.error().format();
  EXPECT_EQ(config->cluster->chipCount(), 4);
  EXPECT_EQ(config->model.builtin, "mlp");
  EXPECT_EQ(config->output.trace, "out/quickstart.h5");
  EXPECT_EQ(config->resolvedYaml.find("output"), std::string::npos);
}

TEST(RunConfig, UnknownTopLevelSection) {
  const auto path = writeTemp("cluster: {topology: {kind: ring, chips: 2}}\nmodel: {builtin: mlp}\nsimulaton: {}\n");
  auto config = loadRunConfig(path);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().format(), path + ":3:1: unknown key 'simulaton' in 'config' (did you mean 'simulation'?)");
  std::remove(path.c_str());
}

TEST(RunConfig, CompileEffort) {
  const std::string base = "cluster: {topology: {kind: ring, chips: 2}}\nmodel: {builtin: mlp}\n";
  const auto fine = writeTemp(base + "compile: {effort: fast}\n");
  auto config = loadRunConfig(fine);
  ASSERT_TRUE(config.ok()) << config.error().format();
  EXPECT_EQ(config->compile.effort, "fast");
  std::remove(fine.c_str());
  const auto absent = writeTemp(base);
  config = loadRunConfig(absent);
  ASSERT_TRUE(config.ok()) << config.error().format();
  EXPECT_EQ(config->compile.effort, "default");
  std::remove(absent.c_str());
  const auto bad = writeTemp(base + "compile:\n  effort: fastest\n");
  config = loadRunConfig(bad);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().format(),
            bad + ":4:11: 'effort' is 'fastest', expected one of: fast, default, max (did you mean 'fast'?)");
  std::remove(bad.c_str());
}

TEST(RunConfig, MissingFile) {
  auto config = loadRunConfig("/nonexistent/c.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().format(), "/nonexistent/c.yaml: cannot open the config file");
}

}  // namespace
}  // namespace tsp::runtime
