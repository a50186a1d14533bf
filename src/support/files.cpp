// Input files: what may be read as one.
#include "support/files.h"

#include <sys/stat.h>

namespace tsp {

bool existsButNotRegular(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode);
}

}  // namespace tsp
