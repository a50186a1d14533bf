// libFuzzer target: the config loader (YAML parse, every section's checks) on arbitrary bytes.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include <unistd.h>

#include "runtime/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The loader reads a path: the input goes to a file of this process's own.
  static const std::string path = "/tmp/tsp-fuzz-config-" + std::to_string(::getpid()) + ".yaml";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  // Any input ends in a config or a located diagnostic; a throw, a crash or a sanitizer report is a finding.
  auto config = tsp::runtime::loadRunConfig(path);
  if (!config && config.error().message.empty()) __builtin_trap();
  return 0;
}
