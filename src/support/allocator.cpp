// glibc malloc tuning: larger trim and mmap thresholds (see allocator.h).
#include "support/allocator.h"

#include <cstdlib>  // defines __GLIBC__ on glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tsp::support {

void keepFreedMemory() {
#if defined(__GLIBC__)
  // Trimmed back to the kernel only past 256 MiB free at the heap's top; blocks below 32 MiB (the
  // largest threshold glibc accepts on 64-bit) from the heap, so they are reused once freed.
  mallopt(M_TRIM_THRESHOLD, 256 * 1024 * 1024);
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
#endif
}

}  // namespace tsp::support
