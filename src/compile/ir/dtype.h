// Element types of tensors: what the IR, the Program's functional operands and the simulator share.
#pragma once

#include <cstdint>

namespace tsp::ir {

/// Element types of tensors. kI64 is for shape and index tensors of imported models, kBool for masks.
enum class DType : std::uint8_t { kF32, kF16, kBF16, kI8, kI32, kI64, kBool };

/// Bytes per element of a dtype.
constexpr int dtypeBytes(DType type) {
  switch (type) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kI8: case DType::kBool: return 1;
    case DType::kI64: return 8;
  }
  return 1;
}

/// "fp32", "fp16", "bf16", "int8", "int32", "int64", "bool".
constexpr const char* dtypeName(DType type) {
  switch (type) {
    case DType::kF32: return "fp32";
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
    case DType::kI8: return "int8";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kBool: return "bool";
  }
  return "?";
}

/// True for fp32, fp16 and bf16.
constexpr bool isFloat(DType type) { return type == DType::kF32 || type == DType::kF16 || type == DType::kBF16; }

}  // namespace tsp::ir
