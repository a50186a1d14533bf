// Input files: what may be read as one.
#pragma once

#include <string>

namespace tsp {

/// True when path exists and is not a regular file (a directory, FIFO, socket or device): an input
/// is read only from a regular file, since a FIFO or a device would block or never end.
bool existsButNotRegular(const std::string& path);

}  // namespace tsp
