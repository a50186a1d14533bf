// The allocator policy of tsp-sim's processes.
#pragma once

namespace tsp::support {

/// Keeps freed heap memory in the process instead of handing it back to the kernel at once, and
/// serves blocks up to 32 MiB from the heap. A compile builds and drops the same large vectors
/// hundreds of times (every list schedule of the annealer and the plane-order search); with glibc's
/// defaults each of them faults fresh pages in, which costs as much as the compile itself on a
/// virtual machine. Call once at the start of main; a no-op off glibc.
void keepFreedMemory();

}  // namespace tsp::support
