// Slabs, runs, bins and the lock-held request paths of the slab allocator.
#include "slab/state.hpp"

#include <htp/detail/check.hpp>

#include <algorithm>

namespace htp {

namespace {
bool is_power_of_two(std::size_t v) { return v != 0 && (v & (v - 1)) == 0; }

/// The configured page size, or the automatic one: the smallest power of two from 64 KiB that keeps
/// the tier at or under 2^21 pages (32 MiB of page records), at most a slab. Invalid configs yield
/// a harmless placeholder; the constructor rejects them.
bool valid_slab_bytes(const slab_allocator_config& c) {
  return is_power_of_two(c.slab_bytes) && c.slab_bytes >= (std::size_t{64} << 10) &&
         c.slab_bytes <= (std::size_t{1} << 30);
}

bool valid_page_bytes(const slab_allocator_config& c) {
  return c.page_bytes == 0 ||
         (is_power_of_two(c.page_bytes) && c.page_bytes >= 4096 && c.page_bytes <= c.slab_bytes);
}

std::size_t automatic_page_bytes(const slab_allocator_config& c) {
  if (!valid_slab_bytes(c)) return std::size_t{64} << 10;
  if (c.page_bytes != 0) return valid_page_bytes(c) ? c.page_bytes : c.slab_bytes;
  std::size_t p = std::size_t{64} << 10;
  while (p < c.slab_bytes && (c.budget_bytes / p) > (std::size_t{1} << 21)) p <<= 1;
  return std::min(p, c.slab_bytes);
}
}  // namespace

slab_allocator::state::state(device& d, const slab_allocator_config& c)
    : dev(d), cfg(c), kind(memory_kind_of(c.t)), slab_bytes(c.slab_bytes),
      page_bytes(automatic_page_bytes(c)),  // checked below; a placeholder when invalid
      page_shift(0), total_pages(0), per_reservation(0), classes(page_bytes) {
  HTP_EXPECTS(valid_slab_bytes(c), invalid_argument, "slab_allocator(", to_string(c.t),
              "): slab_bytes=", c.slab_bytes,
              " must be a power of two from 65536 (64 KiB) to 1073741824 (1 GiB)");
  HTP_EXPECTS(valid_page_bytes(c), invalid_argument, "slab_allocator(", to_string(c.t),
              "): page_bytes=", c.page_bytes,
              " must be 0 (automatic) or a power of two from 4096 (4 KiB) to slab_bytes (",
              c.slab_bytes, ")");
  HTP_EXPECTS(c.budget_bytes >= c.slab_bytes, invalid_argument, "slab_allocator(", to_string(c.t),
              "): budget_bytes=", c.budget_bytes, " must hold at least one slab of ", c.slab_bytes,
              " bytes");
  HTP_EXPECTS(c.compaction_threshold >= 0.0 && c.compaction_threshold <= 1.0, invalid_argument,
              "slab_allocator(", to_string(c.t), "): compaction_threshold=", c.compaction_threshold,
              " must be within [0, 1]");
  page_shift = static_cast<unsigned>(__builtin_ctzll(page_bytes));
  // The budget in whole pages: every reservation is whole slabs but the last, which may end
  // within a slab, so no byte of the budget is lost to slab rounding.
  HTP_EXPECTS(c.budget_bytes / page_bytes <= std::size_t{0xfffffffe}, invalid_argument,
              "slab_allocator(", to_string(c.t), "): budget_bytes=", c.budget_bytes,
              " is more than 2^32 - 2 pages of page_bytes=", page_bytes, "; choose larger pages");
  total_pages = c.budget_bytes / page_bytes;
  const std::size_t pages_per_slab = c.slab_bytes / page_bytes;
  std::size_t slabs_per = c.slabs_per_reservation;
  if (slabs_per == 0) {
    slabs_per = c.t == tier::hbm ? (total_pages + pages_per_slab - 1) / pages_per_slab
                                 : std::max<std::size_t>(1, (std::size_t{1} << 30) / c.slab_bytes);
  }
  per_reservation = std::min(slabs_per * pages_per_slab, total_pages);
  if (cfg.pin_threads == 0) cfg.pin_threads = 4;
  for (std::size_t first = 0; first < total_pages; first += per_reservation) {
    reservations.push_back({nullptr, first, std::min(per_reservation, total_pages - first), false});
  }
  pages.resize(total_pages);
  nonfull.resize(classes.count());
  empty_cached.assign(classes.count(), npos);
}

// ---- pages and runs ----------------------------------------------------------------------------

char* slab_allocator::state::page_address(std::size_t page) const noexcept {
  const reservation& r = reservations[reservation_of(page)];
  return r.base + ((page - r.first) << page_shift);
}

std::size_t slab_allocator::state::take_free(std::size_t start, std::size_t n,
                                             bool from_top) noexcept {
  const std::size_t len = pages[start].len;
  free_runs.remove(static_cast<std::uint32_t>(start));
  std::size_t first = start;
  if (from_top) {
    first = start + len - n;
    if (len > n)
      free_runs.insert(static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(len - n));
  } else if (len > n) {
    free_runs.insert(static_cast<std::uint32_t>(start + n), static_cast<std::uint32_t>(len - n));
  }
  free_pages -= n;
  largest_dirty = true;
  return first;
}

void slab_allocator::state::give_pages(std::size_t first, std::size_t n) noexcept {
  const reservation& r = reservations[reservation_of(first)];
  std::size_t lo = first, hi = first + n;
  // The page below is the last page of its segment and the page above the first of its own, so
  // their records are current (page_record.hpp): a free one carries its run's length.
  if (lo > r.first && pages[lo - 1].kind == slab::page_kind::free) {
    lo -= pages[lo - 1].len;
    free_runs.remove(static_cast<std::uint32_t>(lo));
  }
  if (hi < r.first + r.pages && pages[hi].kind == slab::page_kind::free) {
    const std::size_t next = pages[hi].len;
    free_runs.remove(static_cast<std::uint32_t>(hi));
    hi += next;
  }
  pages[first].kind = slab::page_kind::free;  // no stale head or bin record stays behind
  free_runs.insert(static_cast<std::uint32_t>(lo), static_cast<std::uint32_t>(hi - lo));
  free_pages += n;
  largest_dirty = true;
}

void* slab_allocator::state::take_run(std::size_t head, std::size_t n, std::size_t requested,
                                      std::uint8_t flags) noexcept {
  slab::page_record& h = pages[head];
  h.kind = slab::page_kind::run_head;
  h.flags = flags;
  h.len = static_cast<std::uint32_t>(n);
  h.b = static_cast<std::uint32_t>(requested - ((n - 1) << page_shift));
  if (n > 1) {
    slab::page_record& t = pages[head + n - 1];
    t.kind = slab::page_kind::run_tail;
    t.len = static_cast<std::uint32_t>(n);
  }
  run_pages += n;
  return page_address(head);
}

void slab_allocator::state::free_run(std::size_t head) noexcept {
  const std::size_t n = pages[head].len;
  run_pages -= n;
  give_pages(head, n);
}

// ---- bins --------------------------------------------------------------------------------------

void slab_allocator::state::nonfull_add(bin_page& b) {
  b.nonfull_pos = nonfull[b.cls].size();
  nonfull[b.cls].push_back(b.page);
}

void slab_allocator::state::nonfull_remove(bin_page& b) noexcept {
  auto& list = nonfull[b.cls];
  const std::size_t last = list.back();
  list[b.nonfull_pos] = last;
  bin_of(last).nonfull_pos = b.nonfull_pos;
  list.pop_back();
  b.nonfull_pos = npos;
}

std::size_t slab_allocator::state::make_bin_page(std::size_t page, std::size_t cls) {
  std::size_t slot;
  if (!free_bin_slots.empty()) {
    slot = free_bin_slots.back();
    free_bin_slots.pop_back();
  } else {
    slot = bins.size();
    bins.emplace_back();
  }
  bin_page& b = bins[slot];
  if (b.capacity == 0 || b.cls != cls) {
    b.cls = cls;
    b.capacity = classes.blocks_per_page(cls);
    b.sizes.assign(b.capacity, 0);
  }
  b.free_blocks = slab::bitmap(b.capacity, true);
  b.page = page;
  b.used = 0;
  b.hint = 0;
  b.evacuating = false;
  slab::page_record& rec = pages[page];
  rec.kind = slab::page_kind::bin;
  rec.flags = 0;
  rec.len = 1;
  rec.b = static_cast<std::uint32_t>(slot);
  ++bin_pages;
  nonfull_add(b);
  return page;
}

std::size_t slab_allocator::state::bin_page_for(std::size_t cls) {
  if (!nonfull[cls].empty()) return nonfull[cls].back();
  if (empty_cached[cls] != npos) {
    const std::size_t p = empty_cached[cls];
    empty_cached[cls] = npos;
    nonfull_add(bin_of(p));
    return p;
  }
  // A fresh page from the top end of the shortest free run: small tensors fill holes first and
  // never split a free run in two.
  std::uint32_t run = free_runs.find(1);
  if (run == none && drop_cached_empties() > 0) run = free_runs.find(1);
  if (run == none) return npos;
  free_bin_slots.reserve(free_bin_slots.size() + 1);  // so the drop path never allocates
  nonfull[cls].reserve(nonfull[cls].size() + 1);
  return make_bin_page(take_free(run, 1, true), cls);
}

std::size_t slab_allocator::state::first_free_block(const bin_page& b) const noexcept {
  return b.free_blocks.find_next(b.hint, b.capacity, true);
}

void* slab_allocator::state::take_block(std::size_t page, std::size_t block, std::size_t requested,
                                        std::uint32_t flags) {
  bin_page& b = bin_of(page);
  b.free_blocks.reset(block);
  b.sizes[block] = static_cast<std::uint32_t>(requested) | flags;
  if (block == b.hint) b.hint = block + 1;
  ++b.used;
  bin_block_bytes += classes.block_bytes(b.cls);
  if (b.used == b.capacity) full_tail_bytes += page_bytes - b.capacity * classes.block_bytes(b.cls);
  if (b.used == b.capacity && b.nonfull_pos != npos) nonfull_remove(b);
  return page_address(page) + block * classes.block_bytes(b.cls);
}

void slab_allocator::state::drop_empty_page(std::size_t page) noexcept {
  bin_page& b = bin_of(page);
  if (b.nonfull_pos != npos) nonfull_remove(b);
  if (empty_cached[b.cls] == page) empty_cached[b.cls] = npos;
  b.page = npos;
  free_bin_slots.push_back(pages[page].b);  // capacity reserved when the page was made
  --bin_pages;
  give_pages(page, 1);
}

void slab_allocator::state::free_block(std::size_t page, std::size_t block,
                                       bool keep_empty) noexcept {
  bin_page& b = bin_of(page);
  b.free_blocks.set(block);
  b.sizes[block] = 0;
  b.hint = std::min(b.hint, block);
  --b.used;
  bin_block_bytes -= classes.block_bytes(b.cls);
  if (b.used + 1 == b.capacity) {
    full_tail_bytes -= page_bytes - b.capacity * classes.block_bytes(b.cls);
    // Was full: back on the non-full list (unless it is being emptied by compaction).
    if (!b.evacuating) {
      try {
        nonfull_add(b);
      } catch (...) {
      }
    }
  }
  if (b.used == 0) {
    if (keep_empty && !b.evacuating && empty_cached[b.cls] == npos) {
      nonfull_remove(b);
      empty_cached[b.cls] = page;
    } else {
      drop_empty_page(page);
    }
  }
}

std::size_t slab_allocator::state::drop_cached_empties() noexcept {
  std::size_t n = 0;
  for (std::size_t c = 0; c < empty_cached.size(); ++c) {
    if (empty_cached[c] != npos) {
      drop_empty_page(empty_cached[c]);
      ++n;
    }
  }
  return n;
}

// ---- requests ----------------------------------------------------------------------------------

void* slab_allocator::state::try_allocate(std::size_t bytes) {
  void* p = nullptr;
  if (is_run_request(bytes)) {
    const std::size_t n = pages_for(bytes);
    std::uint32_t run = free_runs.find(static_cast<std::uint32_t>(n));
    if (run == none && drop_cached_empties() > 0)
      run = free_runs.find(static_cast<std::uint32_t>(n));
    if (run == none) return nullptr;
    p = take_run(take_free(run, n, false), n, bytes, 0);
  } else {
    const std::size_t cls = classes.index_for(bytes);
    const std::size_t pg = bin_page_for(cls);
    if (pg == npos) return nullptr;
    p = take_block(pg, first_free_block(bin_of(pg)), bytes, 0);
  }
  bytes_in_use += bytes;
  ++live;
  ++n_alloc;
  bytes_peak = std::max(bytes_peak, bytes_in_use);
  pages_peak = std::max(pages_peak, run_pages + bin_pages);
  return p;
}

// For pointers known to be live allocations (move destinations): their page and block.
slab_allocator::state::location slab_allocator::state::locate(const void* ptr) const noexcept {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  auto it = std::upper_bound(by_address.begin(), by_address.end(), std::make_pair(addr, npos));
  if (it == by_address.begin()) return {};
  const reservation& r = reservations[std::prev(it)->second];
  const std::size_t off = static_cast<std::size_t>(addr - std::prev(it)->first);
  if (off >= (r.pages << page_shift)) return {};
  location loc;
  loc.page = r.first + (off >> page_shift);
  const std::size_t in_page = off & (page_bytes - 1);
  if (pages[loc.page].kind == slab::page_kind::bin) {
    loc.block = in_page / classes.block_bytes(bin_of(loc.page).cls);
  }
  return loc;
}

slab_allocator::state::location slab_allocator::state::resolve(void* ptr, std::size_t bytes,
                                                               const char* call) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  HTP_EXPECTS(ptr != nullptr, invalid_argument, "slab_allocator(", to_string(cfg.t), ")::", call,
              "(nullptr, ", bytes, "): the pointer is null; pass a pointer returned by allocate");
  HTP_EXPECTS(addr % device::alignment == 0, invalid_argument, "slab_allocator(", to_string(cfg.t),
              ")::", call, "(", ptr, ", ", bytes,
              "): the pointer is misaligned (every allocation is ", device::alignment,
              "-byte aligned), so it was not returned by allocate");
  auto it = std::upper_bound(by_address.begin(), by_address.end(), std::make_pair(addr, npos));
  const reservation* r = nullptr;
  if (it != by_address.begin()) {
    const reservation& cand = reservations[std::prev(it)->second];
    if (addr < std::prev(it)->first + (cand.pages << page_shift)) r = &cand;
  }
  HTP_EXPECTS(r != nullptr, invalid_argument, "slab_allocator(", to_string(cfg.t), ")::", call, "(",
              ptr, ", ", bytes, "): unknown pointer, not inside this tier's memory");
  const std::size_t off =
      static_cast<std::size_t>(addr - reinterpret_cast<std::uintptr_t>(r->base));
  location loc;
  loc.page = r->first + (off >> page_shift);
  const slab::page_record& rec = pages[loc.page];
  const std::size_t in_page = off & (page_bytes - 1);
  std::size_t recorded = 0;
  std::uint32_t flags = 0;
  // A page that says run_head or bin is one (page_record.hpp); any other record may be stale.
  if (rec.kind == slab::page_kind::run_head && in_page == 0) {
    recorded = run_requested(loc.page);
    flags = flags_at(loc);
  } else if (rec.kind == slab::page_kind::bin) {
    const bin_page& b = bin_of(loc.page);
    const std::size_t bb = classes.block_bytes(b.cls);
    HTP_EXPECTS(in_page % bb == 0 && in_page / bb < b.capacity, invalid_argument, "slab_allocator(",
                to_string(cfg.t), ")::", call, "(", ptr, ", ", bytes,
                "): unknown pointer, it points inside a block of ", bb,
                " bytes rather than at its start");
    loc.block = in_page / bb;
    HTP_EXPECTS(
        !b.free_blocks.test(loc.block), invalid_argument, "slab_allocator(", to_string(cfg.t),
        ")::", call, "(", ptr, ", ", bytes,
        "): not a live allocation (already released - a double release - or never allocated)");
    recorded = b.sizes[loc.block] & size_mask;
    flags = b.sizes[loc.block] & ~size_mask;
  } else {
    HTP_EXPECTS(
        false, invalid_argument, "slab_allocator(", to_string(cfg.t), ")::", call, "(", ptr, ", ",
        bytes,
        "): not the start of a live allocation (never allocated, already released - a double "
        "release - or a pointer inside an allocation rather than at its start)");
  }
  HTP_EXPECTS((flags & flag_pending) == 0, invalid_argument, "slab_allocator(", to_string(cfg.t),
              ")::", call, "(", ptr, ", ", bytes,
              "): double release, it was already released with deallocate_after and is pending");
  HTP_EXPECTS((flags & flag_dest) == 0, invalid_argument, "slab_allocator(", to_string(cfg.t),
              ")::", call, "(", ptr, ", ", bytes,
              "): the pointer is a planned move destination; commit_move or cancel_move it");
  HTP_EXPECTS(recorded == bytes, invalid_argument, "slab_allocator(", to_string(cfg.t), ")::", call,
              "(", ptr, ", ", bytes, "): wrong size, it was allocated with ", recorded,
              " bytes; pass the size given to allocate");
  return loc;
}

std::uint32_t slab_allocator::state::flags_at(const location& loc) const noexcept {
  if (loc.block == npos) {
    const std::uint8_t f = pages[loc.page].flags;
    return ((f & run_pending) ? flag_pending : 0u) | ((f & run_dest) ? flag_dest : 0u);
  }
  return bins[pages[loc.page].b].sizes[loc.block] & ~size_mask;
}

void slab_allocator::state::set_flags(const location& loc, std::uint32_t flags) noexcept {
  if (loc.block == npos) {
    pages[loc.page].flags = static_cast<std::uint8_t>(((flags & flag_pending) ? run_pending : 0) |
                                                      ((flags & flag_dest) ? run_dest : 0));
  } else {
    std::uint32_t& s = bins[pages[loc.page].b].sizes[loc.block];
    s = (s & size_mask) | flags;
  }
}

std::size_t slab_allocator::state::requested_at(const location& loc) const noexcept {
  if (loc.block == npos) return run_requested(loc.page);
  return bins[pages[loc.page].b].sizes[loc.block] & size_mask;
}

void slab_allocator::state::free_at(const location& loc, bool keep_empty) noexcept {
  const std::size_t bytes = requested_at(loc);
  if (flags_at(loc) & flag_pending) pending_bytes -= bytes;
  bytes_in_use -= bytes;
  --live;
  ++n_free;
  if (loc.block == npos) {
    free_run(loc.page);
  } else {
    free_block(loc.page, loc.block, keep_empty);
  }
}

event_ref slab_allocator::state::pooled_event() {
  if (!event_pool.empty()) {
    const event_ref e = event_pool.back();
    event_pool.pop_back();
    return e;
  }
  return dev.create_event();
}

std::size_t slab_allocator::state::reap_locked() {
  std::size_t n = 0;
  for (std::size_t i = 0; i < pending.size();) {
    if (dev.query(pending[i].ev)) {
      free_at(pending[i].loc, true);
      event_pool.push_back(pending[i].ev);
      pending[i] = pending.back();
      pending.pop_back();
      ++n;
    } else {
      ++i;
    }
  }
  return n;
}

}  // namespace htp
