// Fragmentation figures, statistics, the out-of-memory diagnostic and the audit that recomputes all
// of them from the page bitmap and the records.
#include "slab/state.hpp"

#include <htp/detail/check.hpp>

#include <algorithm>
#include <cstdio>

namespace htp {

std::size_t slab_allocator::state::largest_free_run() const noexcept {
  if (largest_dirty) {
    largest_run = free_runs.longest();
    largest_dirty = false;
  }
  return largest_run;
}

namespace {
struct frag_inputs {
  std::size_t free_pages, largest, bin_pages, bin_block_bytes, full_tails, page_bytes, total_pages;
  std::size_t ready_pages, live_bytes;
};

fragmentation_report make_report(const frag_inputs& in) {
  fragmentation_report f;
  f.free_pages = in.free_pages;
  f.largest_free_extent_bytes = in.largest * in.page_bytes;
  f.external = in.free_pages == 0 ? 0.0 : 1.0 - double(in.largest) / double(in.free_pages);
  const std::size_t bin_bytes = in.bin_pages * in.page_bytes;
  // Unused bytes inside bin pages that are not full; a full page's tail is bounded by the class
  // design (docs/slab_allocator.md) and no compaction can use it.
  const std::size_t unused = bin_bytes - in.bin_block_bytes - in.full_tails;
  f.internal = bin_bytes == 0 ? 0.0 : double(unused) / double(bin_bytes);
  f.combined = double((in.free_pages - in.largest) * in.page_bytes + unused) /
               double(in.total_pages * in.page_bytes);
  const double ready = double(in.ready_pages * in.page_bytes);
  f.waste =
      ready == 0
          ? 0.0
          : std::max(0.0,
                     1.0 - (double(in.live_bytes) + double(f.largest_free_extent_bytes)) / ready);
  return f;
}

std::string percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", v * 100.0);
  return buf;
}
}  // namespace

fragmentation_report slab_allocator::state::fragmentation() const noexcept {
  return make_report({free_pages, largest_free_run(), bin_pages, bin_block_bytes, full_tail_bytes,
                      page_bytes, total_pages, ready_pages, bytes_in_use + dest_bytes});
}

std::string slab_allocator::state::oom_message(std::size_t bytes) const {
  const fragmentation_report f = fragmentation();
  const std::size_t cap = total_pages << page_shift;
  const std::size_t used_bytes = (run_pages + bin_pages) << page_shift;
  std::string need =
      is_run_request(bytes)
          ? detail::concat(pages_for(bytes), " contiguous page(s) of ", page_bytes, " bytes")
          : detail::concat("a block of ", rounded(bytes), " bytes");
  return detail::concat(
      "slab_allocator(", to_string(cfg.t), "): cannot allocate ", bytes, " bytes (needs ", need,
      "): tier ", to_string(cfg.t), " holds ", cap, " bytes, ", used_bytes, " in pages in use (",
      bytes_in_use, " requested by ", live, " live allocations), ", f.free_pages * page_bytes,
      " free in ", f.free_pages, " free pages",
      ready_pages < total_pages
          ? detail::concat(" (", total_pages - ready_pages, " pages not reserved yet)")
          : std::string(),
      "; pending stream-ordered releases ", pending_bytes, " bytes; fragmentation ",
      percent(f.combined), " combined (external ", percent(f.external), ", internal ",
      percent(f.internal), "); largest free extent ", f.largest_free_extent_bytes,
      " bytes. Release or evict allocations, wait for pending releases (synchronize_pending), "
      "compact (plan_compaction with this request, then commit the moves), or configure a larger "
      "budget_bytes.");
}

slab_allocator_stats slab_allocator::state::stats() const {
  slab_allocator_stats s;
  s.t = cfg.t;
  s.slab_bytes = slab_bytes;
  s.page_bytes = page_bytes;
  s.total_pages = total_pages;
  s.ready_pages = ready_pages;
  s.free_pages = free_pages;
  s.run_pages = run_pages;
  s.bin_pages = bin_pages;
  s.pages_in_use = run_pages + bin_pages;
  s.pages_in_use_peak = pages_peak;
  s.bytes_in_use = bytes_in_use;
  s.bytes_in_use_peak = bytes_peak;
  s.live_allocations = live;
  s.pending_releases = pending.size();
  s.pending_release_bytes = pending_bytes;
  s.move_destinations = dest_count;
  s.move_destination_bytes = dest_bytes;
  s.allocations = n_alloc;
  s.deallocations = n_free;
  s.failed_requests = n_failed;
  s.moves_committed = n_moves;
  s.classes.resize(classes.count());
  for (std::size_t c = 0; c < classes.count(); ++c)
    s.classes[c].block_bytes = classes.block_bytes(c);
  for (const bin_page& b : bins) {
    if (b.page == npos) continue;
    slab_class_stats& c = s.classes[b.cls];
    ++c.pages;
    c.blocks_in_use += b.used;
    c.blocks_capacity += b.capacity;
  }
  s.fragmentation = fragmentation();
  s.pin_seconds = pin_seconds;
  s.pin_seconds_per_gib =
      reserved_bytes == 0 ? 0.0 : pin_seconds / (double(reserved_bytes) / double(1u << 30));
  s.reservation_complete = reservation_done;
  return s;
}

fragmentation_report slab_allocator::state::audit() const {
  std::size_t n_free_pages = 0, n_run = 0, n_bin = 0, n_ready = 0, block_bytes = 0;
  std::size_t requested = 0, n_live = 0, n_pending = 0, p_bytes = 0, n_dest = 0, d_bytes = 0;
  std::size_t largest = 0, tails = 0, free_run_count = 0;
  std::vector<std::size_t> nonfull_count(classes.count(), 0);
  slab::bitmap run_starts(total_pages, false);
  auto kind_at = [&](std::size_t i) { return pages[i].kind; };
  auto count_live = [&](std::size_t bytes, std::uint32_t flags) {
    if (flags & flag_dest) {
      ++n_dest;
      d_bytes += bytes;
      return;
    }
    ++n_live;
    requested += bytes;
    if (flags & flag_pending) {
      ++n_pending;
      p_bytes += bytes;
    }
  };
  // Walk each reservation segment by segment: a free run, a run of pages, or a bin page.
  for (const reservation& r : reservations) {
    const std::size_t end = r.first + r.pages;
    if (!r.ready) continue;
    n_ready += r.pages;
    bool previous_free = false;
    for (std::size_t i = r.first; i < end;) {
      const slab::page_record& rec = pages[i];
      const bool is_free = rec.kind == slab::page_kind::free;
      HTP_ASSERT(!(is_free && previous_free), "free run at page ", i,
                 " follows another: not merged");
      previous_free = is_free;
      if (is_free) {
        const std::size_t len = rec.len;
        HTP_ASSERT(len >= 1 && i + len <= end, "free run at page ", i);
        HTP_ASSERT(pages[i + len - 1].len == len && kind_at(i + len - 1) == slab::page_kind::free,
                   "free run at page ", i, ": its last page's record");
        for (std::size_t k = i + 1; k + 1 < i + len; ++k) {
          HTP_ASSERT(kind_at(k) != slab::page_kind::run_head && kind_at(k) != slab::page_kind::bin,
                     "page ", k, " inside the free run at page ", i, " has a live-looking record");
        }
        run_starts.set(i);
        ++free_run_count;
        n_free_pages += len;
        largest = std::max(largest, len);
        i += len;
      } else if (rec.kind == slab::page_kind::run_head) {
        const std::size_t n = rec.len;
        HTP_ASSERT(n >= 1 && i + n <= end, "run at page ", i);
        HTP_ASSERT(n == 1 || (kind_at(i + n - 1) == slab::page_kind::run_tail &&
                              pages[i + n - 1].len == n),
                   "run at page ", i, ": its last page's record");
        for (std::size_t k = i + 1; k < i + n; ++k) {
          HTP_ASSERT(kind_at(k) != slab::page_kind::run_head && kind_at(k) != slab::page_kind::bin,
                     "page ", k, " inside the run at page ", i, " has a live-looking record");
        }
        const std::size_t bytes = run_requested(i);
        HTP_ASSERT(is_run_request(bytes) && pages_for(bytes) == n, "run at page ", i, " has ", n,
                   " pages for ", bytes, " bytes");
        n_run += n;
        count_live(bytes, flags_at({i, npos}));
        i += n;
      } else if (rec.kind == slab::page_kind::bin) {
        const bin_page& b = bin_of(i);
        HTP_ASSERT(b.page == i, "bin page ", i, " slot names page ", b.page);
        ++n_bin;
        const std::size_t free_count = b.free_blocks.count(0, b.capacity);
        HTP_ASSERT(b.used + free_count == b.capacity, "bin page ", i, " used count");
        HTP_ASSERT(b.used > 0 || empty_cached[b.cls] == i, "empty bin page ", i, " not cached");
        HTP_ASSERT((b.used < b.capacity && b.used > 0 && !b.evacuating) == (b.nonfull_pos != npos),
                   "bin page ", i, " non-full list");
        if (b.nonfull_pos != npos) {
          HTP_ASSERT(nonfull[b.cls][b.nonfull_pos] == i, "bin page ", i, " non-full position");
          ++nonfull_count[b.cls];
        }
        HTP_ASSERT(b.free_blocks.find_next(0, b.hint, true) == npos, "bin page ", i, " hint");
        block_bytes += b.used * classes.block_bytes(b.cls);
        if (b.used == b.capacity) tails += page_bytes - b.capacity * classes.block_bytes(b.cls);
        for (std::size_t k = b.free_blocks.find_next(0, b.capacity, false); k != npos;
             k = b.free_blocks.find_next(k + 1, b.capacity, false)) {
          const std::size_t bytes = b.sizes[k] & size_mask;
          HTP_ASSERT(bytes > 0 && classes.index_for(bytes) == b.cls, "block ", k, " of page ", i);
          count_live(bytes, b.sizes[k] & ~size_mask);
        }
        ++i;
      } else {
        HTP_ASSERT(false, "page ", i, " starts no segment (its record says ", int(rec.kind), ")");
      }
    }
  }
  std::size_t indexed = 0;
  free_runs.for_each([&](std::uint32_t start, std::uint32_t) {
    HTP_ASSERT(run_starts.test(start), "the free index holds page ", start,
               ", which starts no free run");
    ++indexed;
  });
  HTP_ASSERT(indexed == free_run_count && free_runs.runs() == free_run_count, "free index holds ",
             indexed, " runs, the pages ", free_run_count);
  for (std::size_t c = 0; c < classes.count(); ++c) {
    HTP_ASSERT(nonfull_count[c] == nonfull[c].size(), "class ", c, " non-full list length");
  }
  HTP_ASSERT(n_free_pages == free_pages, "free pages ", n_free_pages, " vs counter ", free_pages);
  HTP_ASSERT(n_run == run_pages, "run pages ", n_run, " vs counter ", run_pages);
  HTP_ASSERT(n_bin == bin_pages, "bin pages ", n_bin, " vs counter ", bin_pages);
  HTP_ASSERT(n_ready == ready_pages, "ready pages ", n_ready, " vs counter ", ready_pages);
  HTP_ASSERT(block_bytes == bin_block_bytes, "bin block bytes ", block_bytes, " vs ",
             bin_block_bytes);
  HTP_ASSERT(requested == bytes_in_use, "bytes in use ", requested, " vs counter ", bytes_in_use);
  HTP_ASSERT(n_live == live, "live allocations ", n_live, " vs counter ", live);
  HTP_ASSERT(n_pending == pending.size() && p_bytes == pending_bytes, "pending releases");
  HTP_ASSERT(n_dest == dest_count && d_bytes == dest_bytes && planned.size() == dest_count,
             "move destinations");
  HTP_ASSERT(largest == largest_free_run(), "largest free run ", largest, " vs ",
             largest_free_run());
  HTP_ASSERT(tails == full_tail_bytes, "full page tails ", tails, " vs ", full_tail_bytes);
  return make_report({n_free_pages, largest, n_bin, block_bytes, tails, page_bytes, total_pages,
                      n_ready, requested + d_bytes});
}

}  // namespace htp
