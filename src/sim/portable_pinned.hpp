// Pinned host memory any sim device may map, as cudaHostAllocPortable / cudaHostRegisterPortable
// make it on CUDA: one process-wide set of ranges. A sim device adds its pinned allocations and
// registrations here and removes them when freed, and mapped_device_pointer accepts a pointer
// inside any of them, whichever sim device pinned it (a node's host tier is allocated through one
// GPU and mapped by all).
#pragma once

#include <cstddef>

namespace htp::sim::portable_pinned {

/// Records [ptr, ptr + bytes) as pinned and portable. Thread-safe.
void add(const void* ptr, std::size_t bytes);
/// Forgets the range starting at `ptr` (no-op when not recorded). Thread-safe.
void remove(const void* ptr) noexcept;
/// Whether [ptr, ptr + bytes) lies inside one recorded range. Thread-safe.
bool contains(const void* ptr, std::size_t bytes);

}  // namespace htp::sim::portable_pinned
