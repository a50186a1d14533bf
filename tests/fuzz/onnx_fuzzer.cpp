// libFuzzer target: the ONNX importer (protobuf parse, initializers, shape inference, folding) on arbitrary bytes.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include <unistd.h>

#include "compile/frontend/onnx_importer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/tsp-fuzz-model-" + std::to_string(::getpid()) + ".onnx";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  // Symbolic dimensions named like the usual exports are bound, so that graphs past their inputs are reached.
  tsp::frontend::ImportOptions options;
  options.overrides = {{"batch", 2}, {"N", 2}, {"seq", 4}, {"sequence", 4}};
  options.loadWeights = true;
  auto graph = tsp::frontend::importOnnx(path, options);
  if (!graph && graph.error().message.empty()) __builtin_trap();
  return 0;
}
