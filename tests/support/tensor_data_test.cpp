#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/tensor_data.h"

namespace tsp {
namespace {

TEST(TensorData, HoldsEachTensorAtTheNarrowestExactEncoding) {
  const std::vector<std::vector<double>> cases = {
      {1, -128, 127, 0},                       // INT8
      {0.5, -65504, 6.103515625e-05, -0.0},    // FP16 (a normal, the largest, the smallest normal, -0)
      {5.960464477539063e-08, HUGE_VAL, 1000}, // FP16 (the smallest subnormal, infinity)
      {70000, -3, 1},                          // INT32
      {0.1f, 1e30f},                           // FP32
      {0.1, 1.0},                              // FP64
  };
  const TensorData::Encoding expected[] = {TensorData::Encoding::kI8, TensorData::Encoding::kF16,
                                           TensorData::Encoding::kF16, TensorData::Encoding::kI32,
                                           TensorData::Encoding::kF32, TensorData::Encoding::kF64};
  const std::size_t width[] = {1, 2, 2, 4, 4, 8};
  for (size_t i = 0; i < cases.size(); ++i) {
    const TensorData d(cases[i]);
    EXPECT_EQ(d.encoding(), expected[i]) << i;
    EXPECT_EQ(d.bytes(), cases[i].size() * width[i]) << i;
    EXPECT_EQ(d.values(), cases[i]) << i;
    EXPECT_EQ(std::signbit(d[3 % d.size()]), std::signbit(cases[i][3 % d.size()])) << i;
  }
  const TensorData nan(std::vector<double>{std::nan(""), 2});
  EXPECT_EQ(nan.encoding(), TensorData::Encoding::kF16);
  EXPECT_TRUE(std::isnan(nan[0]));
}

// The process's resident anonymous memory (RssAnon of /proc/self/status), in KiB.
long residentAnonKiB() {
  std::ifstream status("/proc/self/status");
  std::string key;
  long kib = 0;
  while (status >> key)
    if (key == "RssAnon:" && status >> kib) return kib;
  return -1;
}

TEST(TensorData, DroppedTensorsGiveTheirMemoryBackWhateverTheHeapHolds) {
  // 48 tensors of 1 MiB, each followed by a small allocation that outlives it, as a graph's weights
  // sit among the compiler's data: once dropped, their pages are the kernel's again. (A heap that
  // has raised its mapping threshold, as glibc does after freeing a large block, would keep them.)
  {
    std::vector<char> large(std::size_t{16} << 20, 1);
    volatile char kept = large[large.size() / 2];  // the block is made, not optimised away
    (void)kept;
  }
  const long before = residentAnonKiB();
  ASSERT_GT(before, 0);
  std::vector<std::unique_ptr<TensorData>> tensors;
  std::vector<std::unique_ptr<std::string>> pins;
  for (int t = 0; t < 48; ++t) {
    tensors.push_back(std::make_unique<TensorData>(TensorData::generate(
        std::size_t{1} << 17, [t](std::size_t i) { return static_cast<double>(i) + 1.0 / (t + 3); })));
    pins.push_back(std::make_unique<std::string>(100, 'x'));
  }
  ASSERT_EQ(tensors.front()->encoding(), TensorData::Encoding::kF64);  // 8 bytes a value: 1 MiB each
  EXPECT_GT(residentAnonKiB() - before, 40 * 1024);
  tensors.clear();
  EXPECT_LT(residentAnonKiB() - before, 4 * 1024);
}

}  // namespace
}  // namespace tsp
