// The bytes Belady's MIN moves per step of a cyclic layer sweep: the reference the stream bench
// holds each policy's page-in bytes and step time against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace htp::bench {

/// Called for each access that misses: the sweep (0-based), the tensor, and the tensors Belady's
/// rule evicted to make room for it (farthest next use first).
using belady_miss_fn = std::function<void(std::size_t cycle, std::size_t tensor,
                                          const std::vector<std::size_t>& victims)>;

/// Sweeps the tensors of `sizes` in order, `cycles` times, through `capacity` bytes evicted by
/// Belady's rule, exact byte accounting, and reports every miss. A tensor larger than the capacity
/// is loaded after evicting everything (callers that care refuse it first).
void belady_walk(const std::vector<std::uint64_t>& sizes, std::uint64_t capacity,
                 std::size_t cycles, const belady_miss_fn& on_miss);

/// Bytes paged in per cycle, in steady state, when the tensors of `sizes` are accessed in order,
/// cyclically, through `capacity` bytes of memory evicted by Belady's rule (farthest next use),
/// with exact byte accounting (no slab rounding, no fragmentation, nothing pinned). For equal sizes
/// that is the minimum; for unequal sizes the farthest-next-use rule is the reference the issue
/// names, not a proven minimum (docs/pager.md). The mean over n - 1 cycles after two of warm-up
/// (for equal sizes: n (n - k) / (n - 1) tensors per cycle with room for k). 0 when everything
/// fits; -1 when one tensor alone exceeds the capacity.
double belady_bytes_per_cycle(const std::vector<std::uint64_t>& sizes, std::uint64_t capacity);

}  // namespace htp::bench
