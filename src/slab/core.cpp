// Slabs, runs, bins and the lock-held request paths of the slab allocator.
#include "slab/state.hpp"

#include <htp/detail/check.hpp>

#include <algorithm>

namespace htp {

namespace {
bool is_power_of_two(std::size_t v) { return v != 0 && (v & (v - 1)) == 0; }
}  // namespace

slab_allocator::state::state(device& d, const slab_allocator_config& c)
    : dev(d),
      cfg(c),
      kind(memory_kind_of(c.t)),
      slab_bytes(c.slab_bytes),
      slab_shift(0),
      total_slabs(0),
      per_reservation(0),
      classes(is_power_of_two(c.slab_bytes) && c.slab_bytes >= (std::size_t{64} << 10)
                  ? c.slab_bytes
                  : std::size_t{64} << 10) {
  HTP_EXPECTS(is_power_of_two(c.slab_bytes) && c.slab_bytes >= (std::size_t{64} << 10) &&
                  c.slab_bytes <= (std::size_t{1} << 30),
              invalid_argument, "slab_allocator(", to_string(c.t), "): slab_bytes=", c.slab_bytes,
              " must be a power of two from 65536 (64 KiB) to 1073741824 (1 GiB)");
  HTP_EXPECTS(c.budget_bytes >= c.slab_bytes, invalid_argument, "slab_allocator(", to_string(c.t),
              "): budget_bytes=", c.budget_bytes, " must hold at least one slab of ", c.slab_bytes,
              " bytes");
  HTP_EXPECTS(c.compaction_threshold >= 0.0 && c.compaction_threshold <= 1.0, invalid_argument,
              "slab_allocator(", to_string(c.t), "): compaction_threshold=", c.compaction_threshold,
              " must be within [0, 1]");
  slab_shift = static_cast<unsigned>(__builtin_ctzll(c.slab_bytes));
  total_slabs = c.budget_bytes >> slab_shift;
  per_reservation = c.slabs_per_reservation;
  if (per_reservation == 0) {
    per_reservation = c.t == tier::hbm ? total_slabs : std::max<std::size_t>(1, (std::size_t{1} << 30) >> slab_shift);
  }
  per_reservation = std::min(per_reservation, total_slabs);
  if (cfg.pin_threads == 0) cfg.pin_threads = 4;
  for (std::size_t first = 0; first < total_slabs; first += per_reservation) {
    reservations.push_back({nullptr, first, std::min(per_reservation, total_slabs - first), false});
  }
  slabs.resize(total_slabs);
  used = slab::bitmap(total_slabs, true);
  nonfull.resize(classes.count());
  empty_cached.assign(classes.count(), npos);
}

// ---- slabs and runs ----------------------------------------------------------------------------

std::size_t slab_allocator::state::reservation_of(std::size_t slab) const noexcept {
  return slab / per_reservation;
}

char* slab_allocator::state::slab_address(std::size_t slab) const noexcept {
  const reservation& r = reservations[reservation_of(slab)];
  return r.base + ((slab - r.first) << slab_shift);
}

std::size_t slab_allocator::state::find_run(std::size_t n) const noexcept {
  std::size_t best = npos, best_len = npos;
  for (const reservation& r : reservations) {
    if (!r.ready || r.slabs < n) continue;
    const std::size_t end = r.first + r.slabs;
    for (std::size_t i = used.find_next(r.first, end, false); i != npos;) {
      std::size_t j = used.find_next(i, end, true);
      if (j == npos) j = end;
      const std::size_t len = j - i;
      if (len >= n && len < best_len) {
        best = i;
        best_len = len;
        if (len == n) return best;
      }
      i = used.find_next(j, end, false);
    }
  }
  return best;
}

std::size_t slab_allocator::state::find_top_slab() const noexcept {
  if (free_slabs == 0) return npos;
  const auto& w = used.words();
  for (std::size_t k = w.size(); k-- > 0;) {
    std::uint64_t free_bits = ~w[k];
    if (k == w.size() - 1 && (total_slabs & 63) != 0) free_bits &= (std::uint64_t{1} << (total_slabs & 63)) - 1;
    if (free_bits != 0) return (k << 6) + 63 - static_cast<std::size_t>(__builtin_clzll(free_bits));
  }
  return npos;
}

void slab_allocator::state::take_slabs(std::size_t first, std::size_t n) noexcept {
  used.assign_range(first, first + n, true);
  free_slabs -= n;
  largest_dirty = true;
}

void slab_allocator::state::give_slabs(std::size_t first, std::size_t n) noexcept {
  for (std::size_t i = first; i < first + n; ++i) {
    slabs[i].kind = slab_kind::free;
    slabs[i].flags = 0;
  }
  used.assign_range(first, first + n, false);
  free_slabs += n;
  largest_dirty = true;
}

void* slab_allocator::state::take_run(std::size_t head, std::size_t n, std::size_t requested,
                                      std::uint32_t flags) {
  take_slabs(head, n);
  slab_record& h = slabs[head];
  h.kind = slab_kind::run_head;
  h.flags = flags;
  h.run_slabs = n;
  h.requested = requested;
  for (std::size_t i = head + 1; i < head + n; ++i) {
    slabs[i].kind = slab_kind::run_body;
    slabs[i].head = head;
  }
  run_slabs += n;
  return slab_address(head);
}

void slab_allocator::state::free_run(std::size_t head) noexcept {
  const std::size_t n = slabs[head].run_slabs;
  run_slabs -= n;
  give_slabs(head, n);
}

// ---- bins --------------------------------------------------------------------------------------

void slab_allocator::state::nonfull_add(bin_slab& b, std::size_t slab) {
  b.nonfull_pos = nonfull[b.cls].size();
  nonfull[b.cls].push_back(slab);
}

void slab_allocator::state::nonfull_remove(bin_slab& b) noexcept {
  auto& list = nonfull[b.cls];
  const std::size_t last = list.back();
  list[b.nonfull_pos] = last;
  slabs[last].bin->nonfull_pos = b.nonfull_pos;
  list.pop_back();
  b.nonfull_pos = npos;
}

std::size_t slab_allocator::state::make_bin_slab(std::size_t slab, std::size_t cls) {
  slab_record& rec = slabs[slab];
  if (!rec.bin || rec.bin->cls != cls) {
    auto b = std::make_unique<bin_slab>();
    b->cls = cls;
    b->capacity = classes.blocks_per_slab(cls);
    b->free_blocks = slab::bitmap(b->capacity, true);
    b->sizes.assign(b->capacity, 0);
    rec.bin = std::move(b);
  } else {
    rec.bin->used = 0;
    rec.bin->hint = 0;
    rec.bin->free_blocks = slab::bitmap(rec.bin->capacity, true);
  }
  take_slabs(slab, 1);
  rec.kind = slab_kind::bin;
  rec.flags = 0;
  ++bin_slabs;
  nonfull_add(*rec.bin, slab);
  return slab;
}

std::size_t slab_allocator::state::bin_slab_for(std::size_t cls) {
  if (!nonfull[cls].empty()) return nonfull[cls].back();
  if (empty_cached[cls] != npos) {
    const std::size_t s = empty_cached[cls];
    empty_cached[cls] = npos;
    nonfull_add(*slabs[s].bin, s);
    return s;
  }
  std::size_t s = find_top_slab();
  if (s == npos && drop_cached_empties() > 0) s = find_top_slab();
  return s == npos ? npos : make_bin_slab(s, cls);
}

std::size_t slab_allocator::state::first_free_block(const bin_slab& b) const noexcept {
  return b.free_blocks.find_next(b.hint, b.capacity, true);
}

void* slab_allocator::state::take_block(std::size_t slab, std::size_t block, std::size_t requested,
                                        std::uint32_t flags) {
  bin_slab& b = *slabs[slab].bin;
  b.free_blocks.reset(block);
  b.sizes[block] = static_cast<std::uint32_t>(requested) | flags;
  if (block == b.hint) b.hint = block + 1;
  ++b.used;
  bin_block_bytes += classes.block_bytes(b.cls);
  if (b.used == b.capacity) full_tail_bytes += slab_bytes - b.capacity * classes.block_bytes(b.cls);
  if (b.used == b.capacity && b.nonfull_pos != npos) nonfull_remove(b);
  return slab_address(slab) + block * classes.block_bytes(b.cls);
}

void slab_allocator::state::drop_empty_slab(std::size_t slab) noexcept {
  bin_slab& b = *slabs[slab].bin;
  if (b.nonfull_pos != npos) nonfull_remove(b);
  if (empty_cached[b.cls] == slab) empty_cached[b.cls] = npos;
  --bin_slabs;
  give_slabs(slab, 1);
}

void slab_allocator::state::free_block(std::size_t slab, std::size_t block, bool keep_empty) noexcept {
  bin_slab& b = *slabs[slab].bin;
  b.free_blocks.set(block);
  b.sizes[block] = 0;
  b.hint = std::min(b.hint, block);
  --b.used;
  bin_block_bytes -= classes.block_bytes(b.cls);
  if (b.used + 1 == b.capacity) {
    full_tail_bytes -= slab_bytes - b.capacity * classes.block_bytes(b.cls);
    // Was full: back on the non-full list. Cannot throw in practice: the vector had room for it.
    try {
      nonfull_add(b, slab);
    } catch (...) {
    }
  }
  if (b.used == 0) {
    if (keep_empty && empty_cached[b.cls] == npos) {
      nonfull_remove(b);
      empty_cached[b.cls] = slab;
    } else {
      drop_empty_slab(slab);
    }
  }
}

std::size_t slab_allocator::state::drop_cached_empties() noexcept {
  std::size_t n = 0;
  for (std::size_t c = 0; c < empty_cached.size(); ++c) {
    if (empty_cached[c] != npos) {
      drop_empty_slab(empty_cached[c]);
      ++n;
    }
  }
  return n;
}

// ---- requests ----------------------------------------------------------------------------------

std::size_t slab_allocator::state::rounded(std::size_t bytes) const noexcept { return classes.rounded(bytes); }

void* slab_allocator::state::try_allocate(std::size_t bytes) {
  void* p = nullptr;
  if (bytes * 2 >= slab_bytes) {
    const std::size_t n = (bytes + slab_bytes - 1) >> slab_shift;
    std::size_t head = find_run(n);
    if (head == npos && drop_cached_empties() > 0) head = find_run(n);
    if (head == npos) return nullptr;
    p = take_run(head, n, bytes, 0);
  } else {
    const std::size_t cls = classes.index_for(bytes);
    const std::size_t s = bin_slab_for(cls);
    if (s == npos) return nullptr;
    p = take_block(s, first_free_block(*slabs[s].bin), bytes, 0);
  }
  bytes_in_use += bytes;
  ++live;
  ++n_alloc;
  bytes_peak = std::max(bytes_peak, bytes_in_use);
  slabs_peak = std::max(slabs_peak, run_slabs + bin_slabs);
  return p;
}

slab_allocator::state::location slab_allocator::state::resolve(void* ptr, std::size_t bytes,
                                                               const char* call) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  HTP_EXPECTS(ptr != nullptr, invalid_argument, "slab_allocator(", to_string(cfg.t), ")::", call,
              "(nullptr, ", bytes, "): the pointer is null; pass a pointer returned by allocate");
  HTP_EXPECTS(addr % device::alignment == 0, invalid_argument, "slab_allocator(", to_string(cfg.t),
              ")::", call, "(", ptr, ", ", bytes, "): the pointer is misaligned (every allocation is ",
              device::alignment, "-byte aligned), so it was not returned by allocate");
  auto it = std::upper_bound(by_address.begin(), by_address.end(), std::make_pair(addr, npos));
  const reservation* r = nullptr;
  if (it != by_address.begin()) {
    const reservation& cand = reservations[std::prev(it)->second];
    if (addr < std::prev(it)->first + (cand.slabs << slab_shift)) r = &cand;
  }
  HTP_EXPECTS(r != nullptr, invalid_argument, "slab_allocator(", to_string(cfg.t), ")::", call, "(",
              ptr, ", ", bytes, "): unknown pointer, not inside this tier's memory");
  const std::size_t off = static_cast<std::size_t>(addr - reinterpret_cast<std::uintptr_t>(r->base));
  location loc;
  loc.slab = r->first + (off >> slab_shift);
  const slab_record& rec = slabs[loc.slab];
  const std::size_t in_slab = off & (slab_bytes - 1);
  std::size_t recorded = 0;
  std::uint32_t flags = 0;
  if (rec.kind == slab_kind::run_head && in_slab == 0) {
    recorded = rec.requested;
    flags = rec.flags;
  } else if (rec.kind == slab_kind::bin) {
    const bin_slab& b = *rec.bin;
    const std::size_t bb = classes.block_bytes(b.cls);
    HTP_EXPECTS(in_slab % bb == 0 && in_slab / bb < b.capacity, invalid_argument, "slab_allocator(",
                to_string(cfg.t), ")::", call, "(", ptr, ", ", bytes,
                "): unknown pointer, it points inside a block of ", bb,
                " bytes rather than at its start");
    loc.block = in_slab / bb;
    HTP_EXPECTS(!b.free_blocks.test(loc.block), invalid_argument, "slab_allocator(",
                to_string(cfg.t), ")::", call, "(", ptr, ", ", bytes,
                "): not a live allocation (already released - a double release - or never allocated)");
    recorded = b.sizes[loc.block] & size_mask;
    flags = b.sizes[loc.block] & ~size_mask;
  } else {
    HTP_EXPECTS(false, invalid_argument, "slab_allocator(", to_string(cfg.t), ")::", call, "(", ptr,
                ", ", bytes,
                rec.kind == slab_kind::free
                    ? "): not a live allocation (already released - a double release - or never allocated)"
                    : "): unknown pointer, it points inside an allocation rather than at its start");
  }
  HTP_EXPECTS((flags & flag_pending) == 0, invalid_argument, "slab_allocator(", to_string(cfg.t),
              ")::", call, "(", ptr, ", ", bytes,
              "): double release, it was already released with deallocate_after and is pending");
  HTP_EXPECTS((flags & flag_dest) == 0, invalid_argument, "slab_allocator(", to_string(cfg.t), ")::",
              call, "(", ptr, ", ", bytes,
              "): the pointer is a planned move destination; commit_move or cancel_move it");
  HTP_EXPECTS(recorded == bytes, invalid_argument, "slab_allocator(", to_string(cfg.t), ")::", call,
              "(", ptr, ", ", bytes, "): wrong size, it was allocated with ", recorded,
              " bytes; pass the size given to allocate");
  return loc;
}

std::uint32_t slab_allocator::state::flags_at(const location& loc) const noexcept {
  if (loc.block == npos) return slabs[loc.slab].flags;
  return slabs[loc.slab].bin->sizes[loc.block] & ~size_mask;
}

void slab_allocator::state::set_flags(const location& loc, std::uint32_t flags) noexcept {
  if (loc.block == npos) {
    slabs[loc.slab].flags = flags;
  } else {
    std::uint32_t& s = slabs[loc.slab].bin->sizes[loc.block];
    s = (s & size_mask) | flags;
  }
}

std::size_t slab_allocator::state::requested_at(const location& loc) const noexcept {
  if (loc.block == npos) return slabs[loc.slab].requested;
  return slabs[loc.slab].bin->sizes[loc.block] & size_mask;
}

void slab_allocator::state::free_at(const location& loc, bool keep_empty) noexcept {
  const std::size_t bytes = requested_at(loc);
  if (flags_at(loc) & flag_pending) pending_bytes -= bytes;
  bytes_in_use -= bytes;
  --live;
  ++n_free;
  if (loc.block == npos) {
    free_run(loc.slab);
  } else {
    free_block(loc.slab, loc.block, keep_empty);
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
