// An ONNX file read for import: the model without its initializers' raw data, which stays in the mapped file.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

#include "support/expected.h"

namespace tsp::frontend {

/// A file mapped read-only into memory; its pages are read from disk only when touched.
class MappedFile {
 public:
  /// Maps path, or an error naming it.
  static Expected<std::shared_ptr<const MappedFile>> open(const std::string& path);
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  std::string_view bytes() const { return {data_, size_}; }
  /// Lets the kernel drop the resident pages wholly inside `range` (a view into bytes()) once its
  /// values were decoded: reading them again reads the file again. The mapping's contents do not change.
  void release(std::string_view range) const;

 private:
  MappedFile(const char* data, size_t size) : data_(data), size_(size) {}
  const char* data_;
  size_t size_;
};

/// A parsed ONNX model whose initializers carry no raw_data: their bytes are views into the mapping,
/// so that reading a model costs memory for its graph, not for its parameters.
struct OnnxFile {
  onnx::ModelProto model;
  /// The raw_data of graph().initializer(i) in the mapped file, or nullopt when it has none.
  std::vector<std::optional<std::string_view>> initializerRaw;
  std::shared_ptr<const MappedFile> mapping;
};

/// Reads the ONNX file at path (exit 2 naming it when it cannot be opened or does not parse).
Expected<OnnxFile> readOnnxFile(const std::string& path);

/// A serialized onnx.TensorProto read for its values: the tensor without its raw_data, whose bytes
/// stay in the mapped file.
struct TensorFile {
  onnx::TensorProto tensor;
  std::optional<std::string_view> raw;  ///< the tensor's raw_data in the mapping, or nullopt
  std::shared_ptr<const MappedFile> mapping;
};

/// Reads the TensorProto file at path (exit 2 naming it when it cannot be opened or does not parse).
Expected<TensorFile> readTensorFile(const std::string& path);

}  // namespace tsp::frontend
