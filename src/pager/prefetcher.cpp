// The prefetcher (prefetcher.hpp): hints, the walk over the upcoming accesses, and the pace and
// timeliness marks an acquire records. Under the pager's mutex unless said otherwise.
#include "pager/prefetcher.hpp"

#include <algorithm>

namespace htp::detail {

prefetcher::prefetcher(device& dev, const pager_config& config, tensor_table& tensors,
                       transfer_engine& engine, pager_observer& observe)
    : dev_(dev), config_(config), tensors_(tensors), engine_(engine), observe_(observe),
      future_(config), pace_(dev), probes_(dev) {}

// ---- hints -------------------------------------------------------------------------------------

void prefetcher::set_schedule(std::vector<std::uint32_t> slots, bool cyclic, room_maker& room) {
  future_.schedule.set(std::move(slots), cyclic);
  pace_.reset(future_.schedule.size());
  tensors_.reindex_all();  // next uses changed: re-key (O(n log n))
  upcoming(room);
}

void prefetcher::set_routed_group(std::uint32_t anchor, std::vector<std::uint32_t> members,
                                  unsigned k) {
  for (std::uint32_t s : future_.groups.set(anchor, std::move(members), k)) tensors_.reindex(s);
}

void prefetcher::expect(const std::vector<std::uint32_t>& slots, room_maker& room) {
  future_.expected = slots;  // what their room may not evict (room_maker::routed_victim)
  struct clear_expected {
    std::vector<std::uint32_t>& v;
    ~clear_expected() { v.clear(); }
  } clear{future_.expected};
  const auto now = std::chrono::steady_clock::now();
  for (std::uint32_t slot : slots) prefetch(slot, room, now);
}

void prefetcher::forget(std::uint32_t slot) {
  for (std::uint32_t s : future_.groups.forget_slot(slot)) {
    if (s != slot) tensors_.reindex(s);
  }
  if (!future_.schedule.contains(slot)) return;
  // The schedule's positions shift: re-key every tensor holding HBM (O(n), rare).
  future_.schedule.forget(slot);
  pace_.reset(future_.schedule.size());  // positions moved
  tensors_.reindex_all();
}

// ---- prefetching -------------------------------------------------------------------------------

bool prefetcher::prefetch(std::uint32_t slot, room_maker& room,
                          std::optional<std::chrono::steady_clock::time_point> need) {
  const tensor_record& t = tensors_[slot];
  if (!t.live || t.pins > 0) return false;      // degraded (pinned without HBM) or in use
  if (t.where != residency::host) return true;  // there or coming
  if (t.dead) return true;  // a dead activation: nothing to load (its acquire is fresh)
  // A hint: a device failure while issuing it drops it (load and evict leave the state as it
  // was); it does not fail the acquire or release that issued it.
  try {
    const auto where = room.for_prefetch(slot);
    if (!where) {
      observe_.prefetch_skipped(t);
      return false;
    }
    room.load(slot, *where, transfer_priority::prefetch);
    if (need) engine_.set_need_time(tensors_[slot].ticket, *need);
  } catch (const out_of_memory&) {
    observe_.prefetch_skipped(t);
    return false;
  } catch (const cuda_error& e) {
    if (e.is_sticky()) throw;
    observe_.prefetch_skipped(t);
    return false;
  }
  return true;
}

void prefetcher::upcoming(room_maker& room) {
  if (config_.prefetch_lookahead == 0 || future_.schedule.empty()) return;
  // The walk relies on min_page_ins's victims (never one needed sooner); the other prefetch
  // rules keep a window of prefetch_lookahead tensors, so they count.
  if (config_.lookahead == lookahead_mode::automatic && future_.belady() &&
      config_.prefetch == prefetch_mode::min_page_ins) {
    ahead(room);
    return;
  }
  for (std::uint32_t slot : future_.schedule.upcoming(config_.prefetch_lookahead)) {
    if (!prefetch(slot, room)) return;
  }
}

void prefetcher::ahead(room_maker& room) {
  // Note [Automatic lookahead] (docs/pager.md): walk the upcoming accesses, loading each tensor
  // not in HBM with its predicted need time as deadline, while the window's loads number fewer
  // than prefetch_lookahead or their link time does not yet cover the compute time until the
  // window's last access. `until_use` is that compute time (ns from now), `window_ns` the link
  // time of the window's bytes loading or prefetched and not yet used.
  pace_.harvest();
  const access_schedule& schedule = future_.schedule;
  const std::uint64_t rate = engine_.effective_rate(copy_direction::host_to_device);
  const double ns_per_byte = rate ? 1e9 / static_cast<double>(rate) : 0.0;
  const std::optional<std::int64_t> mean_gap = pace_.mean_gap_ns();
  const auto now = std::chrono::steady_clock::now();
  const auto at = [&](double ns) {
    return now + std::chrono::nanoseconds(static_cast<std::int64_t>(ns));
  };
  double until_use = 0, window_ns = 0;
  unsigned loads = 0;
  const std::size_t limit =
      std::min<std::size_t>(config_.lookahead_max_tensors, schedule.remaining());
  for (std::size_t i = 0; i < limit; ++i) {
    const std::uint32_t slot = schedule.upcoming_at(i);
    const tensor_record& t = tensors_[slot];
    if (t.where == residency::host && t.pins == 0) {
      if (!prefetch(slot, room, at(until_use))) return;  // no room without evicting what is needed
    }
    if (t.where == residency::loading || (t.hbm && t.notes.prefetched_unused)) {
      window_ns += static_cast<double>(t.bytes) * ns_per_byte;
      ++loads;
    }
    if (loads >= config_.prefetch_lookahead && window_ns > until_use) return;
    const std::optional<std::int64_t> gap = pace_.gap_ns(schedule.position_at(i));
    if (gap || mean_gap) until_use += static_cast<double>(gap ? *gap : *mean_gap);
    if (const auto* g = future_.groups.after(slot)) {  // a router: guess its experts by popularity
      for (std::uint32_t m : future_.groups.top(*g)) {
        if (tensors_[m].where != residency::host || tensors_[m].pins > 0) continue;
        if (future_.groups.score(m) <= 0 || !prefetch(m, room, at(until_use))) break;
        window_ns += static_cast<double>(tensors_[m].bytes) * ns_per_byte;
        ++loads;
      }
    }
  }
}

// ---- an acquire call ---------------------------------------------------------------------------

prefetcher::marks prefetcher::plan(const tensor_handle* hs, std::size_t n, stream_ref compute,
                                   std::uint32_t late) {
  marks m;
  m.probe = probes_.take(late);  // did the stream wait for the late prefetches?
  const access_schedule& schedule = future_.schedule;
  if (config_.lookahead != lookahead_mode::automatic || schedule.empty() ||
      schedule.remaining() == 0 || schedule.upcoming_at(0) != hs[0].index) {
    return m;
  }
  std::size_t count = 1;  // the scheduled accesses this call makes, in order
  while (count < n && count < schedule.remaining() &&
         schedule.upcoming_at(count) == hs[count].index)
    ++count;
  m.pace = pace_.plan(schedule.position_at(0), count, schedule.cycle(), compute);
  return m;
}

void prefetcher::accessed(const tensor_handle* hs, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t slot = hs[i].index;
    // Acquired elsewhere meanwhile (on another stream, or by a call that dropped the lock while
    // this one waited): the same access, not a new one. Exactly one holder of overlapping pins
    // counts it, whichever succeeds first.
    if (!tensors_.count_access(slot)) continue;
    record_access(slot);
    if (future_.groups.on_acquire(slot)) tensors_.reindex_all();  // every score rescaled (rare)
    tensors_.reindex(slot);
  }
}

void prefetcher::record_access(std::uint32_t slot) {
  skipped_.clear();
  future_.schedule.on_access(slot, &skipped_);
  for (std::uint32_t s : skipped_) {
    if (s < tensors_.size()) tensors_.reindex(s);
  }
}

bool prefetcher::record(event_ref e, stream_ref compute) noexcept {
  if (!e) return true;
  try {
    dev_.record(e, compute);
    return true;
  } catch (...) {  // a timing mark only: the acquire goes on (its waits report a broken device)
    return false;
  }
}

void prefetcher::record_before(marks& m, stream_ref compute) noexcept {
  record(m.pace.close, compute);  // the compute before this call ends here
  m.reached = record(m.probe.reach, compute);
}

void prefetcher::record_after(const marks& m, stream_ref compute, bool ok) noexcept {
  if (!ok) {
    pace_.recorded(m.pace, false);
    probes_.recorded(m.probe, false);
    return;
  }
  probes_.recorded(m.probe, m.reached && record(m.probe.met, compute));
  pace_.recorded(m.pace, record(m.pace.open, compute));  // ... and this call's begins
}

void prefetcher::harvest() {
  probes_.harvest(
      [&](std::uint32_t n) { observe_.prefetches_on_time(n); },
      [&](std::uint32_t n, std::chrono::nanoseconds stall) { observe_.prefetches_late(n, stall); });
}

}  // namespace htp::detail
