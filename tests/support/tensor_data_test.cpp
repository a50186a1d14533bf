#include <cmath>
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

}  // namespace
}  // namespace tsp
