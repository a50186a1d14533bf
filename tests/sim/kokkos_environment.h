// One Kokkos lifetime for a whole GoogleTest binary of the simulator's tests.
#pragma once

#include <memory>

#include <gtest/gtest.h>

#include "sim/chip.h"

namespace tsp::sim {

/// Initialises the kernel back end before the first test and finalises it after the last.
class KokkosEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { runtime_ = std::make_unique<KernelRuntime>(); }
  void TearDown() override { runtime_.reset(); }

 private:
  std::unique_ptr<KernelRuntime> runtime_;
};

}  // namespace tsp::sim
