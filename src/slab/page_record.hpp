// One record per page of a tier: what the page is, and the links of the free-run index. Only the
// pages at the ends of a segment carry meaning (see docs/slab_allocator.md, "Pages"): a run's first
// and last page, a bin page, the first and last pages of a free run. So the page below a segment
// and the page above it always tell what their own segment is, which is all that merging free runs
// needs. The records of pages inside a segment are stale and never read; a page inside a segment
// never says run_head or bin (those are cleared when their segment is released).
#pragma once

#include <cstdint>

namespace htp::slab {

enum class page_kind : std::uint8_t { unavailable, free, run_head, run_tail, bin };

struct page_record {
  /// Free run (first and last page): its length in pages. Run head and tail: the run's length.
  /// Bin page: 1.
  std::uint32_t len = 0;
  /// Free run (first page): next run in its index bucket. Run head: bytes used in its last page.
  /// Bin page: its slot in the allocator's bin table.
  std::uint32_t b = 0;
  /// Free run (first page): previous run in its index bucket.
  std::uint32_t c = 0;
  page_kind kind = page_kind::unavailable;
  std::uint8_t flags = 0;  ///< run head: pending release / move destination.
};

}  // namespace htp::slab
