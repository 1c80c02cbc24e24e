// Fragmentation figures, statistics, the out-of-memory diagnostic and the audit that recomputes all
// of them from the bitmaps.
#include "slab/state.hpp"

#include <htp/detail/check.hpp>

#include <algorithm>
#include <cstdio>

namespace htp {

std::size_t slab_allocator::state::largest_free_run() const noexcept {
  if (!largest_dirty) return largest_run;
  std::size_t best = 0;
  for (const reservation& r : reservations) {
    if (!r.ready || r.slabs <= best) continue;
    const std::size_t end = r.first + r.slabs;
    for (std::size_t i = used.find_next(r.first, end, false); i != npos;) {
      std::size_t j = used.find_next(i, end, true);
      if (j == npos) j = end;
      best = std::max(best, j - i);
      i = used.find_next(j, end, false);
    }
  }
  largest_run = best;
  largest_dirty = false;
  return best;
}

namespace {
fragmentation_report make_report(std::size_t free_slabs, std::size_t largest, std::size_t bin_slabs,
                                 std::size_t bin_block_bytes, std::size_t full_tails, std::size_t slab_bytes,
                                 std::size_t total_slabs) {
  fragmentation_report f;
  f.free_slabs = free_slabs;
  f.largest_free_extent_bytes = largest * slab_bytes;
  f.external = free_slabs == 0 ? 0.0 : 1.0 - double(largest) / double(free_slabs);
  const std::size_t bin_bytes = bin_slabs * slab_bytes;
  // Unused bytes inside bin slabs that are not full; a full slab's tail is bounded by the class
  // design (docs/slab_allocator.md) and no compaction can use it.
  const std::size_t unused = bin_bytes - bin_block_bytes - full_tails;
  f.internal = bin_bytes == 0 ? 0.0 : double(unused) / double(bin_bytes);
  f.combined = double((free_slabs - largest) * slab_bytes + unused) / double(total_slabs * slab_bytes);
  return f;
}

std::string percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", v * 100.0);
  return buf;
}
}  // namespace

fragmentation_report slab_allocator::state::fragmentation() const noexcept {
  return make_report(free_slabs, largest_free_run(), bin_slabs, bin_block_bytes, full_tail_bytes, slab_bytes,
                     total_slabs);
}

std::string slab_allocator::state::oom_message(std::size_t bytes) const {
  const fragmentation_report f = fragmentation();
  const std::size_t cap = total_slabs << slab_shift;
  const std::size_t used_bytes = (run_slabs + bin_slabs) << slab_shift;
  std::string need = bytes * 2 >= slab_bytes
                         ? detail::concat(((bytes + slab_bytes - 1) >> slab_shift),
                                          " contiguous slab(s) of ", slab_bytes, " bytes")
                         : detail::concat("a block of ", rounded(bytes), " bytes");
  return detail::concat(
      "slab_allocator(", to_string(cfg.t), "): cannot allocate ", bytes, " bytes (needs ", need,
      "): tier ", to_string(cfg.t), " holds ", cap, " bytes, ", used_bytes, " in slabs in use (",
      bytes_in_use, " requested by ", live, " live allocations), ", f.free_slabs * slab_bytes,
      " free in ", f.free_slabs, " free slabs",
      ready_slabs < total_slabs ? detail::concat(" (", total_slabs - ready_slabs, " slabs not reserved yet)") : std::string(),
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
  s.total_slabs = total_slabs;
  s.ready_slabs = ready_slabs;
  s.free_slabs = free_slabs;
  s.run_slabs = run_slabs;
  s.bin_slabs = bin_slabs;
  s.slabs_in_use = run_slabs + bin_slabs;
  s.slabs_in_use_peak = slabs_peak;
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
  for (std::size_t c = 0; c < classes.count(); ++c) s.classes[c].block_bytes = classes.block_bytes(c);
  for (const slab_record& r : slabs) {
    if (r.kind != slab_kind::bin) continue;
    slab_class_stats& c = s.classes[r.bin->cls];
    ++c.slabs;
    c.blocks_in_use += r.bin->used;
    c.blocks_capacity += r.bin->capacity;
  }
  s.fragmentation = fragmentation();
  s.pin_seconds = pin_seconds;
  s.pin_seconds_per_gib = reserved_bytes == 0 ? 0.0 : pin_seconds / (double(reserved_bytes) / double(1u << 30));
  s.reservation_complete = reservation_done;
  return s;
}

fragmentation_report slab_allocator::state::audit() const {
  std::size_t n_free_slabs = 0, n_run = 0, n_bin = 0, n_ready = 0, block_bytes = 0;
  std::size_t requested = 0, n_live = 0, n_pending = 0, p_bytes = 0, n_dest = 0, d_bytes = 0;
  std::size_t largest = 0, tails = 0;
  std::vector<std::size_t> nonfull_count(classes.count(), 0);
  for (const reservation& r : reservations) {
    std::size_t run = 0;
    for (std::size_t i = r.first; i < r.first + r.slabs; ++i) {
      const slab_record& rec = slabs[i];
      HTP_ASSERT(r.ready || rec.kind == slab_kind::unavailable, "slab ", i, " of an unreserved chunk");
      if (r.ready) ++n_ready;
      const bool is_free = rec.kind == slab_kind::free;
      HTP_ASSERT(used.test(i) == !is_free, "slab ", i, ": bitmap disagrees with its record");
      run = is_free ? run + 1 : 0;
      largest = std::max(largest, run);
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
      switch (rec.kind) {
        case slab_kind::unavailable: break;
        case slab_kind::free: ++n_free_slabs; break;
        case slab_kind::run_head:
          HTP_ASSERT(rec.run_slabs >= 1 && i + rec.run_slabs <= r.first + r.slabs, "run at slab ", i);
          HTP_ASSERT(rec.requested * 2 >= slab_bytes && ((rec.requested + slab_bytes - 1) >> slab_shift) == rec.run_slabs,
                     "run at slab ", i, " has ", rec.run_slabs, " slabs for ", rec.requested, " bytes");
          n_run += rec.run_slabs;
          count_live(rec.requested, rec.flags);
          break;
        case slab_kind::run_body:
          HTP_ASSERT(slabs[rec.head].kind == slab_kind::run_head && rec.head < i &&
                         rec.head + slabs[rec.head].run_slabs > i,
                     "run body slab ", i);
          break;
        case slab_kind::bin: {
          const bin_slab& b = *rec.bin;
          ++n_bin;
          const std::size_t free_count = b.free_blocks.count(0, b.capacity);
          HTP_ASSERT(b.used + free_count == b.capacity, "bin slab ", i, " used count");
          HTP_ASSERT(b.used > 0 || empty_cached[b.cls] == i, "empty bin slab ", i, " not cached");
          HTP_ASSERT((b.used < b.capacity && b.used > 0) == (b.nonfull_pos != npos), "bin slab ", i, " non-full list");
          if (b.nonfull_pos != npos) {
            HTP_ASSERT(nonfull[b.cls][b.nonfull_pos] == i, "bin slab ", i, " non-full position");
            ++nonfull_count[b.cls];
          }
          HTP_ASSERT(b.free_blocks.find_next(0, b.hint, true) == npos, "bin slab ", i, " hint");
          block_bytes += b.used * classes.block_bytes(b.cls);
          if (b.used == b.capacity) tails += slab_bytes - b.capacity * classes.block_bytes(b.cls);
          for (std::size_t k = b.free_blocks.find_next(0, b.capacity, false); k != npos;
               k = b.free_blocks.find_next(k + 1, b.capacity, false)) {
            const std::size_t bytes = b.sizes[k] & size_mask;
            HTP_ASSERT(bytes > 0 && classes.index_for(bytes) == b.cls, "block ", k, " of slab ", i);
            count_live(bytes, b.sizes[k] & ~size_mask);
          }
          break;
        }
      }
    }
  }
  for (std::size_t c = 0; c < classes.count(); ++c) {
    HTP_ASSERT(nonfull_count[c] == nonfull[c].size(), "class ", c, " non-full list length");
  }
  HTP_ASSERT(n_free_slabs == free_slabs, "free slabs ", n_free_slabs, " vs counter ", free_slabs);
  HTP_ASSERT(n_run == run_slabs, "run slabs ", n_run, " vs counter ", run_slabs);
  HTP_ASSERT(n_bin == bin_slabs, "bin slabs ", n_bin, " vs counter ", bin_slabs);
  HTP_ASSERT(n_ready == ready_slabs, "ready slabs ", n_ready, " vs counter ", ready_slabs);
  HTP_ASSERT(block_bytes == bin_block_bytes, "bin block bytes ", block_bytes, " vs ", bin_block_bytes);
  HTP_ASSERT(requested == bytes_in_use, "bytes in use ", requested, " vs counter ", bytes_in_use);
  HTP_ASSERT(n_live == live, "live allocations ", n_live, " vs counter ", live);
  HTP_ASSERT(n_pending == pending.size() && p_bytes == pending_bytes, "pending releases");
  HTP_ASSERT(n_dest == dest_count && d_bytes == dest_bytes && planned.size() == dest_count, "move destinations");
  HTP_ASSERT(largest == largest_free_run(), "largest free run ", largest, " vs ", largest_free_run());
  HTP_ASSERT(tails == full_tail_bytes, "full slab tails ", tails, " vs ", full_tail_bytes);
  return make_report(n_free_slabs, largest, n_bin, block_bytes, tails, slab_bytes, total_slabs);
}

}  // namespace htp
