// Compaction planning and committing. The allocator plans and reserves destinations; the caller
// (the pager) copies the bytes and commits each move. See docs/slab_allocator.md, "Compaction".
#include "slab/state.hpp"

#include <htp/detail/check.hpp>

#include <algorithm>

namespace htp {

namespace {
using movable_fn = std::function<bool(const extent&)>;
}

bool slab_allocator::state::run_movable(std::size_t head, const movable_fn& movable) const {
  const slab_record& h = slabs[head];
  return h.kind == slab_kind::run_head && h.flags == 0 &&
         movable(extent{slab_address(head), h.requested});
}

void slab_allocator::state::reserve_run_dest(std::size_t head, std::size_t n, void* src,
                                             std::size_t bytes, compaction_plan& p) {
  void* to = take_run(head, n, bytes, flag_dest);
  planned.emplace(to, src);
  ++dest_count;
  dest_bytes += bytes;
  p.moves.push_back({extent{src, bytes}, extent{to, bytes}});
  p.bytes_to_copy += bytes;
}

void slab_allocator::state::plan_bins(const movable_fn& movable, compaction_plan& p) {
  std::vector<std::vector<std::size_t>> by_class(classes.count());
  for (std::size_t i = 0; i < slabs.size(); ++i) {
    if (slabs[i].kind == slab_kind::bin) by_class[slabs[i].bin->cls].push_back(i);
  }
  enum : std::uint8_t { none, source, received };
  for (std::size_t c = 0; c < by_class.size(); ++c) {
    auto& list = by_class[c];
    if (list.size() < 2) continue;
    const std::size_t bb = classes.block_bytes(c);
    std::vector<std::size_t> sources;
    std::size_t free_blocks_total = 0;
    for (std::size_t s : list) {
      const bin_slab& b = *slabs[s].bin;
      free_blocks_total += b.capacity - b.used;
      bool ok = true;
      char* base = slab_address(s);
      for (std::size_t k = b.free_blocks.find_next(0, b.capacity, false); ok && k != npos;
           k = b.free_blocks.find_next(k + 1, b.capacity, false)) {
        ok = (b.sizes[k] & ~size_mask) == 0 && movable(extent{base + k * bb, b.sizes[k] & size_mask});
      }
      if (ok) sources.push_back(s);
    }
    auto used_of = [&](std::size_t s) { return slabs[s].bin->used; };
    std::stable_sort(sources.begin(), sources.end(), [&](std::size_t a, std::size_t b) { return used_of(a) < used_of(b); });
    // Destinations: slabs that cannot be evacuated first (they stay anyway), then the fullest.
    std::vector<std::uint8_t> evacuable(slabs.size(), 0);
    for (std::size_t s : sources) evacuable[s] = 1;
    std::vector<std::size_t> dests = list;
    std::stable_sort(dests.begin(), dests.end(), [&](std::size_t a, std::size_t b) {
      if (evacuable[a] != evacuable[b]) return evacuable[a] < evacuable[b];
      return used_of(a) > used_of(b);
    });
    std::unordered_map<std::size_t, std::uint8_t> role;
    std::size_t cursor = 0;
    for (std::size_t src : sources) {
      if (role[src] != none) continue;
      bin_slab& sb = *slabs[src].bin;
      const std::size_t own_free = sb.capacity - sb.used;
      if (free_blocks_total - own_free < sb.used) break;  // sources come sparsest first
      role[src] = source;
      free_blocks_total -= own_free;
      char* base = slab_address(src);
      for (std::size_t k = sb.free_blocks.find_next(0, sb.capacity, false); k != npos;
           k = sb.free_blocks.find_next(k + 1, sb.capacity, false)) {
        while (role[dests[cursor]] == source || slabs[dests[cursor]].bin->used == slabs[dests[cursor]].bin->capacity) ++cursor;
        const std::size_t d = dests[cursor];
        const std::size_t bytes = sb.sizes[k] & size_mask;
        void* to = take_block(d, first_free_block(*slabs[d].bin), bytes, flag_dest);
        void* from = base + k * bb;
        planned.emplace(to, from);
        ++dest_count;
        dest_bytes += bytes;
        --free_blocks_total;
        role[d] = received;
        p.moves.push_back({extent{from, bytes}, extent{to, bytes}});
        p.bytes_to_copy += bytes;
      }
      ++p.slabs_freed;
    }
  }
}

void slab_allocator::state::plan_pack(const movable_fn& movable, compaction_plan& p) {
  // Highest runs first, each into the lowest free gap below it that fits: runs settle at the
  // bottom of each reservation, bins live at the top, free space gathers between them.
  for (std::size_t head = slabs.size(); head-- > 0;) {
    if (!run_movable(head, movable)) continue;
    const std::size_t n = slabs[head].run_slabs;
    std::size_t dest = npos;
    for (const reservation& r : reservations) {
      if (!r.ready || r.slabs < n || r.first > head) continue;
      const std::size_t end = std::min(r.first + r.slabs, head);
      for (std::size_t i = used.find_next(r.first, end, false); i != npos && dest == npos;) {
        std::size_t j = used.find_next(i, end, true);
        if (j == npos) j = end;
        if (j - i >= n) dest = i;
        i = used.find_next(j, end, false);
      }
      if (dest != npos) break;
    }
    if (dest != npos) reserve_run_dest(dest, n, slab_address(head), slabs[head].requested, p);
  }
}

bool slab_allocator::state::plan_window(const movable_fn& movable, std::size_t n, compaction_plan& p) {
  // Candidate windows of n slabs containing only free slabs and movable runs, cheapest first.
  std::vector<std::uint8_t> movable_run(slabs.size(), 0);
  for (std::size_t i = 0; i < slabs.size(); ++i) {
    if (slabs[i].kind == slab_kind::run_head) movable_run[i] = run_movable(i, movable) ? 1 : 0;
  }
  auto obstacle = [&](std::size_t i) {
    const slab_record& r = slabs[i];
    if (r.kind == slab_kind::free) return false;
    if (r.kind == slab_kind::run_head) return movable_run[i] == 0;
    if (r.kind == slab_kind::run_body) return movable_run[r.head] == 0;
    return true;
  };
  std::vector<std::pair<std::size_t, std::size_t>> candidates;  // (cost, first slab)
  for (const reservation& r : reservations) {
    if (!r.ready || r.slabs < n) continue;
    std::size_t obstacles = 0, cost = 0;
    for (std::size_t i = r.first; i < r.first + r.slabs; ++i) {
      obstacles += obstacle(i);
      cost += used.test(i);
      if (i >= r.first + n) {
        obstacles -= obstacle(i - n);
        cost -= used.test(i - n);
      }
      if (i + 1 >= r.first + n && obstacles == 0) candidates.emplace_back(cost, i + 1 - n);
    }
  }
  std::stable_sort(candidates.begin(), candidates.end());
  if (candidates.size() > 8) candidates.resize(8);
  for (const auto& [cost, w] : candidates) {
    std::vector<std::size_t> heads;
    for (std::size_t i = w; i < w + n; ++i) {
      const slab_record& r = slabs[i];
      const std::size_t h = r.kind == slab_kind::run_body ? r.head : i;
      if (r.kind != slab_kind::free && (heads.empty() || heads.back() != h)) heads.push_back(h);
    }
    std::stable_sort(heads.begin(), heads.end(), [&](std::size_t a, std::size_t b) {
      return slabs[a].run_slabs > slabs[b].run_slabs;
    });
    // Block the window's free slabs so no destination lands inside it.
    std::vector<std::size_t> blocked;
    for (std::size_t i = w; i < w + n; ++i) {
      if (!used.test(i)) {
        used.set(i);
        blocked.push_back(i);
      }
    }
    const std::size_t first_move = p.moves.size();
    bool ok = true;
    for (std::size_t h : heads) {
      const std::size_t d = find_run(slabs[h].run_slabs);
      if (d == npos) {
        ok = false;
        break;
      }
      reserve_run_dest(d, slabs[h].run_slabs, slab_address(h), slabs[h].requested, p);
    }
    for (std::size_t i : blocked) used.reset(i);
    largest_dirty = true;
    if (ok) return true;
    while (p.moves.size() > first_move) {  // roll back this candidate's reservations
      cancel(p.moves.back());
      p.bytes_to_copy -= p.moves.back().from.bytes;
      p.moves.pop_back();
    }
  }
  return false;
}

compaction_plan slab_allocator::state::plan(const movable_fn& movable, std::size_t request) {
  compaction_plan p;
  p.slabs_freed += drop_cached_empties();
  if (request == 0) {
    plan_bins(movable, p);
    plan_pack(movable, p);
    p.satisfies_request = true;
  } else if (request * 2 < slab_bytes) {
    if (!nonfull[classes.index_for(request)].empty() || free_slabs > 0) {
      p.satisfies_request = true;
    } else {
      plan_bins(movable, p);
      p.satisfies_request = p.slabs_freed > 0;
    }
  } else {
    const std::size_t n = (request + slab_bytes - 1) >> slab_shift;
    if (n > per_reservation) return p;
    if (largest_free_run() >= n) {
      p.satisfies_request = true;
    } else if (plan_window(movable, n, p)) {
      p.satisfies_request = true;
    } else {
      plan_bins(movable, p);
      plan_pack(movable, p);
    }
  }
  return p;
}

slab_allocator::state::location slab_allocator::state::resolve_dest(const slab_move& m,
                                                                    const char* call) const {
  auto it = planned.find(m.to.ptr);
  HTP_EXPECTS(it != planned.end() && it->second == m.from.ptr, invalid_argument, "slab_allocator(",
              to_string(cfg.t), ")::", call, "(", m.from.ptr, " -> ", m.to.ptr,
              "): not a planned, uncommitted move of this allocator (each move commits or "
              "cancels once)");
  const auto addr = reinterpret_cast<std::uintptr_t>(m.to.ptr);
  auto r = std::prev(std::upper_bound(by_address.begin(), by_address.end(), std::make_pair(addr, npos)));
  const reservation& res = reservations[r->second];
  const std::size_t off = static_cast<std::size_t>(addr - r->first);
  location loc;
  loc.slab = res.first + (off >> slab_shift);
  if (slabs[loc.slab].kind == slab_kind::bin) {
    loc.block = (off & (slab_bytes - 1)) / classes.block_bytes(slabs[loc.slab].bin->cls);
  }
  HTP_EXPECTS(requested_at(loc) == m.to.bytes && m.from.bytes == m.to.bytes, invalid_argument,
              "slab_allocator(", to_string(cfg.t), ")::", call, "(", m.from.ptr, " -> ", m.to.ptr,
              "): wrong size ", m.to.bytes, ", the move is of ", requested_at(loc), " bytes");
  return loc;
}

void slab_allocator::state::commit(const slab_move& m) {
  const location to = resolve_dest(m, "commit_move");
  const location from = resolve(m.from.ptr, m.from.bytes, "commit_move");
  set_flags(to, 0);
  planned.erase(m.to.ptr);
  --dest_count;
  dest_bytes -= m.to.bytes;
  bytes_in_use += m.to.bytes;
  ++live;
  free_at(from, false);  // an emptied source slab returns to the free slabs at once
  --n_free;
  ++n_moves;
}

void slab_allocator::state::cancel(const slab_move& m) {
  const location to = resolve_dest(m, "cancel_move");
  planned.erase(m.to.ptr);
  --dest_count;
  dest_bytes -= m.to.bytes;
  if (to.block == npos) {
    free_run(to.slab);
  } else {
    free_block(to.slab, to.block, false);
  }
}

}  // namespace htp
