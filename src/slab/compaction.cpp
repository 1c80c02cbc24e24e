// Compaction planning and committing. The allocator plans and reserves destinations; the caller
// (the pager) copies the bytes and commits each move. See docs/slab_allocator.md, "Compaction".
#include "slab/state.hpp"

#include <htp/detail/check.hpp>

#include <algorithm>
#include <memory>
#include <set>
#include <unordered_set>

namespace htp {

namespace {
using movable_fn = std::function<bool(const extent&)>;

/// One stretch of a reservation: a free run, a run of pages, or a bin page.
struct segment {
  std::size_t start, len;
  enum kind_t : std::uint8_t { free, movable_run, movable_bin, obstacle } kind;
};

/// `movable`, but false for the sources of the moves `p` already holds (blocks plan_bins moves:
/// their page is not relocated as well). The set of sources is taken now and owned by the result.
movable_fn excluding_sources(const compaction_plan& p, const movable_fn& movable) {
  auto moving = std::make_shared<std::unordered_set<const void*>>();
  for (const slab_move& m : p.moves) moving->insert(m.from.ptr);
  return [moving, &movable](const extent& e) { return moving->count(e.ptr) == 0 && movable(e); };
}
}  // namespace

void slab_allocator::state::record_move(void* from, void* to, std::size_t bytes,
                                        compaction_plan& p) {
  planned.emplace(to, from);
  ++dest_count;
  dest_bytes += bytes;
  p.moves.push_back({extent{from, bytes}, extent{to, bytes}});
  p.bytes_to_copy += bytes;
}

void slab_allocator::state::move_item(std::size_t head, std::size_t dest, compaction_plan& p) {
  if (pages[head].kind == slab::page_kind::bin) {
    relocate_bin_page(head, dest, p);
  } else {
    reserve_run_dest(dest, pages[head].len, page_address(head), run_requested(head), p);
  }
}

bool slab_allocator::state::run_movable(std::size_t head, const movable_fn& movable) const {
  const slab::page_record& h = pages[head];
  return h.kind == slab::page_kind::run_head && h.flags == 0 &&
         movable(extent{page_address(head), run_requested(head)});
}

bool slab_allocator::state::bin_page_movable(std::size_t page, const movable_fn& movable) const {
  const bin_page& b = bin_of(page);
  if (b.used == 0) return false;  // an empty cached page is dropped, not moved
  const std::size_t bb = classes.block_bytes(b.cls);
  char* base = page_address(page);
  for (std::size_t k = b.free_blocks.find_next(0, b.capacity, false); k != npos;
       k = b.free_blocks.find_next(k + 1, b.capacity, false)) {
    if ((b.sizes[k] & ~size_mask) != 0 || !movable(extent{base + k * bb, b.sizes[k] & size_mask}))
      return false;
  }
  return true;
}

void slab_allocator::state::relocate_bin_page(std::size_t from, std::size_t to,
                                              compaction_plan& p) {
  evacuate(from);
  const std::size_t cls = bin_of(from).cls;
  make_bin_page(to, cls);
  const bin_page& src = bin_of(from);  // after make_bin_page: it may grow the slot table
  const std::size_t bb = classes.block_bytes(cls);
  char* base = page_address(from);
  for (std::size_t k = src.free_blocks.find_next(0, src.capacity, false); k != npos;
       k = src.free_blocks.find_next(k + 1, src.capacity, false)) {
    const std::size_t bytes = src.sizes[k] & size_mask;
    void* dst = take_block(to, k, bytes, flag_dest);  // the same block: keeps the hint rule
    record_move(base + k * bb, dst, bytes, p);
  }
}

void slab_allocator::state::reserve_run_dest(std::size_t head, std::size_t n, void* src,
                                             std::size_t bytes, compaction_plan& p) {
  record_move(src, take_run(head, n, bytes, run_dest), bytes, p);
}

void slab_allocator::state::plan_bins(const movable_fn& movable, compaction_plan& p) {
  enum : std::uint8_t { none_role, source, received };
  for (std::size_t c = 0; c < nonfull.size(); ++c) {
    const std::vector<std::size_t> list = nonfull[c];  // copy: taking blocks edits the list
    if (list.size() < 2) continue;
    const std::size_t bb = classes.block_bytes(c);
    std::vector<std::size_t> sources;
    std::size_t free_blocks_total = 0;
    for (std::size_t pg : list) {
      free_blocks_total += bin_of(pg).capacity - bin_of(pg).used;
      if (bin_page_movable(pg, movable)) sources.push_back(pg);
    }
    auto used_of = [&](std::size_t pg) { return bin_of(pg).used; };
    std::stable_sort(sources.begin(), sources.end(),
                     [&](std::size_t a, std::size_t b) { return used_of(a) < used_of(b); });
    // Destinations: pages that cannot be evacuated first (they stay anyway), then the fullest.
    std::unordered_map<std::size_t, std::uint8_t> role;
    for (std::size_t pg : sources) role[pg] = none_role;
    std::vector<std::size_t> dests = list;
    std::stable_sort(dests.begin(), dests.end(), [&](std::size_t a, std::size_t b) {
      const bool ea = role.count(a) != 0, eb = role.count(b) != 0;
      if (ea != eb) return ea < eb;
      return used_of(a) > used_of(b);
    });
    std::size_t cursor = 0;
    for (std::size_t src : sources) {
      if (role[src] != none_role) continue;
      bin_page& sb = bin_of(src);
      const std::size_t own_free = sb.capacity - sb.used;
      if (free_blocks_total - own_free < sb.used) break;  // sources come sparsest first
      role[src] = source;
      evacuate(src);
      free_blocks_total -= own_free;
      char* base = page_address(src);
      for (std::size_t k = sb.free_blocks.find_next(0, sb.capacity, false); k != npos;
           k = sb.free_blocks.find_next(k + 1, sb.capacity, false)) {
        auto is_source = [&](std::size_t pg) {
          auto it = role.find(pg);
          return it != role.end() && it->second == source;
        };
        while (is_source(dests[cursor]) ||
               bin_of(dests[cursor]).used == bin_of(dests[cursor]).capacity)
          ++cursor;
        const std::size_t d = dests[cursor];
        const std::size_t bytes = sb.sizes[k] & size_mask;
        record_move(base + k * bb, take_block(d, first_free_block(bin_of(d)), bytes, flag_dest),
                    bytes, p);
        --free_blocks_total;
        if (role.count(d) != 0) role[d] = received;
      }
      ++p.pages_freed;
    }
  }
}

namespace {
/// The segments of pages [first, end), read from the page records.
template <class State>
std::vector<segment> segments_of(const State& s, std::size_t first, std::size_t end,
                                 const movable_fn& movable) {
  std::vector<segment> out;
  for (std::size_t i = first; i < end;) {
    const slab::page_record& rec = s.pages[i];
    if (rec.kind == slab::page_kind::free) {
      out.push_back({i, rec.len, segment::free});
    } else if (rec.kind == slab::page_kind::run_head) {
      out.push_back(
          {i, rec.len, s.run_movable(i, movable) ? segment::movable_run : segment::obstacle});
    } else {
      out.push_back(
          {i, 1, s.bin_page_movable(i, movable) ? segment::movable_bin : segment::obstacle});
    }
    i += out.back().len;
  }
  return out;
}
}  // namespace

bool slab_allocator::state::plan_evacuate(const movable_fn& movable_in, compaction_plan& p) {
  // Free the top of each reservation in one plan: the lowest cut such that every movable item above
  // it (runs, and bin pages of one page) fits best-fit-decreasing into the free gaps below it.
  // Sources and destinations never overlap (items move only below the cut), each item moves once,
  // and the bytes copied are at most the free bytes below the cut.
  const movable_fn movable = excluding_sources(p, movable_in);
  bool planned_any = false;
  for (const reservation& r : reservations) {
    if (!r.ready) continue;
    const std::vector<segment> segs = segments_of(*this, r.first, r.first + r.pages, movable);
    const std::size_t n = segs.size();
    std::size_t floor = 0, longest = 0;  // the cut stays above every obstacle
    for (std::size_t k = 0; k < n; ++k) {
      if (segs[k].kind == segment::obstacle) floor = k + 1;
      if (segs[k].kind == segment::free) longest = std::max(longest, segs[k].len);
    }
    auto items_above = [&](std::size_t cut) {
      std::vector<std::pair<std::size_t, std::size_t>> items;  // (pages, first page), longest first
      for (std::size_t k = cut; k < n; ++k) {
        if (segs[k].kind != segment::free) items.emplace_back(segs[k].len, segs[k].start);
      }
      std::sort(items.rbegin(), items.rend());
      return items;
    };
    auto fits = [&](std::size_t cut) {
      std::multiset<std::size_t> holes;
      for (std::size_t k = 0; k < cut; ++k) {
        if (segs[k].kind == segment::free) holes.insert(segs[k].len);
      }
      for (const auto& item : items_above(cut)) {
        const auto h = holes.lower_bound(item.first);
        if (h == holes.end()) return false;
        const std::size_t rest = *h - item.first;
        holes.erase(h);
        if (rest > 0) holes.insert(rest);
      }
      return true;
    };
    std::size_t lo = floor, hi = n;  // the cut at n (nothing above) always fits
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (fits(mid)) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    if (hi == n || r.first + r.pages - segs[hi].start <= longest) continue;  // nothing gained
    std::set<std::pair<std::size_t, std::size_t>> holes;  // (pages, first page) below the cut
    for (std::size_t k = 0; k < hi; ++k) {
      if (segs[k].kind == segment::free) holes.emplace(segs[k].len, segs[k].start);
    }
    for (const auto& [len, head] : items_above(hi)) {
      const auto h = holes.lower_bound({len, 0});
      const auto [hole_len, hole_start] = *h;  // fits() said every item has one
      holes.erase(h);
      take_free(hole_start, len, false);
      if (hole_len > len) holes.emplace(hole_len - len, hole_start + len);
      move_item(head, hole_start, p);
    }
    planned_any = true;
  }
  return planned_any;
}

void slab_allocator::state::plan_pack(const movable_fn& movable_in, compaction_plan& p) {
  // Gaps from the bottom up, each filled best-fit-decreasing with the movable items above it (runs,
  // and bin pages of one page): the longest item that fits the rest of the gap, the highest of
  // equals. Items settle at the bottom of each reservation and free space gathers above them; the
  // sources freed by one plan are the gaps of the next.
  const movable_fn movable = excluding_sources(p, movable_in);
  for (const reservation& r : reservations) {
    if (!r.ready) continue;
    const std::vector<segment> segs = segments_of(*this, r.first, r.first + r.pages, movable);
    // (pages, first page) of items above the gap
    std::set<std::pair<std::size_t, std::size_t>> above;
    auto is_item = [](const segment& s) {
      return s.kind == segment::movable_run || s.kind == segment::movable_bin;
    };
    for (const segment& s : segs) {
      if (is_item(s)) above.emplace(s.len, s.start);
    }
    std::size_t k = 0;  // segments below the current gap leave `above`
    for (const segment& gap : segs) {
      if (gap.kind != segment::free) continue;
      for (; k < segs.size() && segs[k].start < gap.start; ++k) {
        if (is_item(segs[k])) above.erase({segs[k].len, segs[k].start});
      }
      if (above.empty()) break;
      std::size_t pos = gap.start, rem = gap.len;
      while (rem > 0) {
        auto it = above.upper_bound({rem, npos});
        if (it == above.begin()) break;
        --it;
        const auto [n, head] = *it;
        above.erase(it);
        take_free(pos, n, false);  // pos starts the rest of this gap
        move_item(head, pos, p);
        pos += n;
        rem -= n;
      }
    }
  }
}

bool slab_allocator::state::plan_window(const movable_fn& movable, std::size_t n,
                                        compaction_plan& p) {
  // Candidate windows of n pages holding only free pages, movable runs and movable bin pages,
  // cheapest (fewest pages to copy) first. A window starts at a segment; prefix sums give its cost
  // in O(log segments).
  struct candidate {
    std::size_t cost, reservation, first_seg, end_seg;
  };
  std::vector<candidate> candidates;
  std::vector<std::vector<segment>> all_segs(reservations.size());
  for (std::size_t ri = 0; ri < reservations.size(); ++ri) {
    const reservation& r = reservations[ri];
    if (!r.ready || r.pages < n) continue;
    std::vector<segment>& segs = all_segs[ri] =
        segments_of(*this, r.first, r.first + r.pages, movable);
    std::vector<std::size_t> obstacles(segs.size() + 1, 0), cost(segs.size() + 1, 0),
        starts(segs.size());
    for (std::size_t i = 0; i < segs.size(); ++i) {
      obstacles[i + 1] = obstacles[i] + (segs[i].kind == segment::obstacle);
      cost[i + 1] = cost[i] + (segs[i].kind == segment::free ? 0 : segs[i].len);
      starts[i] = segs[i].start;
    }
    for (std::size_t i = 0; i < segs.size(); ++i) {
      const std::size_t wend = segs[i].start + n;
      if (wend > r.first + r.pages) break;
      const std::size_t j = static_cast<std::size_t>(
          std::lower_bound(starts.begin(), starts.end(), wend) - starts.begin());
      if (obstacles[j] - obstacles[i] == 0) candidates.push_back({cost[j] - cost[i], ri, i, j});
    }
  }
  const std::size_t keep = std::min<std::size_t>(8, candidates.size());
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(keep),
                    candidates.end(),
                    [](const candidate& a, const candidate& b) { return a.cost < b.cost; });
  candidates.resize(keep);
  for (const candidate& c : candidates) {
    const std::vector<segment>& segs = all_segs[c.reservation];
    std::vector<segment> runs, blocked;
    for (std::size_t i = c.first_seg; i < c.end_seg; ++i) {
      (segs[i].kind == segment::free ? blocked : runs).push_back(segs[i]);
    }
    std::stable_sort(runs.begin(), runs.end(),
                     [](const segment& a, const segment& b) { return a.len > b.len; });
    // Take the window's free runs out of the index so no destination lands inside it.
    for (const segment& s : blocked) free_runs.remove(static_cast<std::uint32_t>(s.start));
    const std::size_t first_move = p.moves.size();
    bool ok = true;
    for (const segment& s : runs) {
      const std::uint32_t d = free_runs.find(static_cast<std::uint32_t>(s.len));
      if (d == none) {
        ok = false;
        break;
      }
      // A bin page takes the top end of its free run (as any new bin page), a run the bottom end.
      move_item(s.start, take_free(d, s.len, s.kind == segment::movable_bin), p);
    }
    for (const segment& s : blocked) {
      free_runs.insert(static_cast<std::uint32_t>(s.start), static_cast<std::uint32_t>(s.len));
    }
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

std::size_t slab_allocator::state::longest_run_after(const compaction_plan& p) const {
  std::vector<std::pair<std::size_t, std::size_t>> runs;  // (start, len)
  free_runs.for_each([&](std::uint32_t s, std::uint32_t len) { runs.emplace_back(s, len); });
  for (const slab_move& m : p.moves) {
    const location from = locate(m.from.ptr);
    if (from.block == npos) runs.emplace_back(from.page, pages[from.page].len);
  }
  std::sort(runs.begin(), runs.end());
  std::size_t best = 0, cur_start = npos, cur_len = 0;
  for (const auto& [s, len] : runs) {
    if (cur_start != npos && s == cur_start + cur_len &&
        reservation_of(s) == reservation_of(cur_start)) {
      cur_len += len;
    } else {
      cur_start = s;
      cur_len = len;
    }
    best = std::max(best, cur_len);
  }
  return best;
}

void slab_allocator::state::plan_gather(const movable_fn& movable, compaction_plan& p) {
  // Fill gaps from above while that moves anything; once it is stuck (every gap smaller than each
  // item above it), evacuate the top in one step.
  const std::size_t before = p.moves.size();
  plan_pack(movable, p);
  if (p.moves.size() == before) plan_evacuate(movable, p);
}

compaction_plan slab_allocator::state::plan(const movable_fn& movable, std::size_t request) {
  compaction_plan p;
  p.pages_freed += drop_cached_empties();
  if (request == 0) {
    plan_bins(movable, p);
    plan_gather(movable, p);
    p.satisfies_request = true;
  } else if (!is_run_request(request)) {
    if (!nonfull[classes.index_for(request)].empty() || free_pages > 0) {
      p.satisfies_request = true;
    } else {
      plan_bins(movable, p);
      p.satisfies_request = p.pages_freed > 0;
    }
  } else {
    const std::size_t n = pages_for(request);
    if (n > per_reservation) return p;
    if (largest_free_run() >= n) {
      p.satisfies_request = true;
    } else if (plan_window(movable, n, p)) {
      p.satisfies_request = true;
    } else {
      plan_bins(movable, p);
      plan_gather(movable, p);
      p.satisfies_request = longest_run_after(p) >= n;
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
  const location loc = locate(m.to.ptr);
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
  free_at(from, false);  // an emptied source page returns to the free pages at once
  --n_free;
  ++n_moves;
}

void slab_allocator::state::cancel(const slab_move& m) {
  const location to = resolve_dest(m, "cancel_move");
  planned.erase(m.to.ptr);
  --dest_count;
  dest_bytes -= m.to.bytes;
  if (to.block == npos) {
    free_run(to.page);
  } else {
    free_block(to.page, to.block, false);
    // The source stays: its page takes blocks again (with several moves out of it, the first
    // cancel already gives it back).
    const location from = locate(m.from.ptr);
    if (from.block != npos && bin_of(from.page).evacuating) {
      bin_page& b = bin_of(from.page);
      b.evacuating = false;
      if (b.used < b.capacity && b.nonfull_pos == npos) nonfull_add(b);
    }
  }
}

void slab_allocator::state::evacuate(std::size_t page) noexcept {
  bin_page& b = bin_of(page);
  b.evacuating = true;
  if (b.nonfull_pos != npos) nonfull_remove(b);
  if (empty_cached[b.cls] == page) empty_cached[b.cls] = npos;
}

}  // namespace htp
