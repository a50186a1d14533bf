// The ONNX importer: an ONNX file (opsets 11 to 17; older ones upgraded) into an ir::Graph with static shapes.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "compile/frontend/model_config.h"
#include "compile/ir/graph.h"
#include "compile/ir/interpreter.h"
#include "support/expected.h"

namespace tsp::frontend {

/// Choices of one import.
struct ImportOptions {
  /// Values of symbolic dimensions (dim_param), e.g. batch=8, seq=2048.
  std::map<std::string, std::int64_t> overrides;
  /// Load floating-point initializer values (inline or external) when they are present. Without
  /// them the graph has shapes and dtypes only, enough for timing runs and --describe.
  bool loadWeights = true;
  /// How FP32 tensors are stored on chip; nullopt keeps FP32 (the reference interpreter's view).
  std::optional<Precision> precision;
  /// Graph inputs whose values are known at import: they become constants and fold.
  std::map<std::string, ir::Value> constantInputs;
};

/// Imports the ONNX model at path. Errors are model errors naming the node, its op type and the
/// opset (or the file when it cannot be read or parsed).
Expected<ir::Graph> importOnnx(const std::string& path, const ImportOptions& options = {});

/// Reads a serialized onnx.TensorProto (the ONNX backend tests' input_N.pb / output_N.pb). With
/// `bf16Bits`, a UINT16 tensor holds bfloat16 bit patterns (how the backend tests store bfloat16
/// values) and is read as BF16.
Expected<ir::Value> readTensorProtoFile(const std::string& path, bool bf16Bits = false);

/// A tensor file's values held compactly (ir::TensorData), as the graph holds a weight's.
struct TensorFileValues {
  ir::DType dtype = ir::DType::kF32;
  std::vector<std::int64_t> shape;
  ir::Data data;
  std::int64_t elements() const { return data ? static_cast<std::int64_t>(data->size()) : 0; }
};

/// readTensorProtoFile's values without a copy as doubles: the file is mapped and decoded a block
/// of pages at a time, so that reading holds the compact values and one block of the file.
Expected<TensorFileValues> readTensorProtoValues(const std::string& path, bool bf16Bits = false);

/// A tensor file read a block at a time: read(first, count, out) decodes elements [first, first +
/// count) of its raw data from the mapped file and drops the pages that held them, so that nothing
/// holds all its values. read is null when the values are not raw data in the file (typed fields,
/// external data: readTensorProtoValues reads those).
struct TensorFileBlocks {
  ir::DType dtype = ir::DType::kF32;
  std::vector<std::int64_t> shape;
  std::int64_t count = 0;  ///< elements
  std::function<void(std::int64_t first, std::int64_t count, double* out)> read = nullptr;
  std::int64_t elements() const { return count; }
};

/// Opens a tensor file for TensorFileBlocks (errors as readTensorProtoValues).
Expected<TensorFileBlocks> readTensorProtoBlocks(const std::string& path, bool bf16Bits = false);

/// The names of a model's graph inputs that are not initializers, in order.
Expected<std::vector<std::string>> onnxInputNames(const std::string& path);

}  // namespace tsp::frontend
