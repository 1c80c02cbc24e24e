// Pinned host memory any sim device may map, as cudaHostAllocPortable / cudaHostRegisterPortable
// make it on CUDA: one process-wide set of ranges. A sim device adds its pinned allocations and
// registrations here and removes them when freed (or when it is destroyed), and
// mapped_device_pointer accepts a pointer inside any of them, whichever sim device pinned it (a
// node's host tier is allocated through one GPU and mapped by all). The same range may be added
// by several devices; each add is removed by its own remove.
#pragma once

#include <cstddef>

namespace htp::sim::portable_pinned {

/// Records [ptr, ptr + bytes) as pinned and portable. Thread-safe.
void add(const void* ptr, std::size_t bytes);
/// Forgets one record of [ptr, ptr + bytes) (no-op when there is none). Thread-safe.
void remove(const void* ptr, std::size_t bytes) noexcept;
/// Whether [ptr, ptr + bytes) lies inside one recorded range. Thread-safe; linear in the ranges
/// that start at or below ptr (a process has a few hundred at most: slabs, not tensors).
bool contains(const void* ptr, std::size_t bytes);

}  // namespace htp::sim::portable_pinned
