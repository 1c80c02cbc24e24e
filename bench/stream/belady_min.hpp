// The bytes Belady's MIN moves per step of a cyclic layer sweep: the reference the stream bench
// holds each policy's page-in bytes and step time against.
#pragma once

#include <cstdint>
#include <vector>

namespace htp::bench {

/// Bytes paged in per cycle, in steady state, when the tensors of `sizes` are accessed in order,
/// cyclically, through `capacity` bytes of memory evicted by Belady's rule (farthest next use),
/// with exact byte accounting (no slab rounding, no fragmentation, nothing pinned). For equal sizes
/// that is the minimum; for unequal sizes the farthest-next-use rule is the reference the issue
/// names, not a proven minimum (docs/pager.md). The mean over n - 1 cycles after two of warm-up
/// (for equal sizes: n (n - k) / (n - 1) tensors per cycle with room for k). 0 when everything
/// fits; -1 when one tensor alone exceeds the capacity.
double belady_bytes_per_cycle(const std::vector<std::uint64_t>& sizes, std::uint64_t capacity);

}  // namespace htp::bench
