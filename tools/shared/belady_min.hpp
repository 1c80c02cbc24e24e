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

/// An offline oracle on an arbitrary access sequence: `trace` holds indices into `footprint` (the
/// memory each tensor takes, e.g. page-rounded as htp stores it) and `counted` (the bytes a miss
/// of it counts, e.g. as requested). Belady's rule through `capacity` bytes: on a miss, the
/// resident tensors used farthest in the future (or never again) are evicted first until it fits.
/// Returns the bytes counted for the misses at positions >= `from` (earlier ones warm up). For
/// equal sizes that is the minimum; for unequal sizes, the reference (not a proven minimum). A
/// tensor larger than the capacity is loaded after evicting everything.
std::uint64_t belady_trace_bytes(const std::vector<std::uint64_t>& footprint,
                                 const std::vector<std::uint64_t>& counted,
                                 const std::vector<std::size_t>& trace, std::uint64_t capacity,
                                 std::size_t from = 0);

}  // namespace htp::bench
