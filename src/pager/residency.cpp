// Residency policy: which tensors to load, evict, write back or wait for (the out-of-memory
// ladder's non-blocking rungs), prefetch, and the fences over freed HBM. The transitions
// themselves are the tensor table's; completions are in completions.cpp. Every function here runs
// with the pager's mutex held. Nothing here scans the tensors: victims come from the victim index,
// fences from the fence set (docs/pager.md, "Costs").
#include "nvtx_range.hpp"
#include "pager/pager_impl.hpp"

#include <htp/detail/check.hpp>

#include <algorithm>

namespace htp {

using detail::pending_kind;
using detail::tensor_record;
using detail::victim_group;

bool pager::impl::belady() const {
  return config.eviction == eviction_rule::belady ||
         (config.eviction == eviction_rule::automatic && !schedule.empty());
}

void pager::impl::record_access(std::uint32_t slot) {
  skipped.clear();
  schedule.on_access(slot, &skipped);
  for (std::uint32_t s : skipped) {
    if (s < tensors.size()) tensors.reindex(s);
  }
}

bool pager::impl::can_move(std::uint32_t slot) {
  // A weight whose kernels may still run can move: they only read it, as the move's copy does, and
  // the source is fenced by their release events until they are done (start_compaction). A mutable
  // tensor moves only once its kernels have finished writing it.
  const bool settled = tensors.settle(slot);
  return tensors.can_evict(slot) && (settled || tensors[slot].kind == tensor_kind::weight);
}

std::uint64_t pager::impl::eviction_rank(std::uint32_t slot) const {
  const auto& victims = tensors.victims();
  const std::uint64_t joined = victims.recency(slot);
  const std::uint64_t age = joined == 0 ? 0 : victims.clock() - joined;
  if (!belady() || schedule.empty()) return age;
  const std::uint64_t d = schedule.distance(slot);
  // Never used again: evict first, the least recently used of those first.
  if (d == detail::access_schedule::never) return (std::uint64_t{1} << 62) + age;
  return d;
}

std::optional<std::uint32_t> pager::impl::best_in(victim_group g,
                                                  const std::vector<std::uint32_t>& skip) const {
  const auto skipped_slot = [&](std::uint32_t s) {
    return std::find(skip.begin(), skip.end(), s) != skip.end();
  };
  const auto pick = [&](std::uint32_t s) { return !skipped_slot(s); };
  const auto& victims = tensors.victims();
  if (!belady()) {
    const std::uint32_t s = victims.find_lru(g, pick);
    return s == detail::victim_index::none ? std::nullopt : std::optional<std::uint32_t>(s);
  }
  // Never used again: first, least recent first; then routed group members, least popular first.
  if (const std::uint32_t s = victims.find_never(g, pick); s != detail::victim_index::none)
    return s;
  for (const auto& [popularity, s] : victims.routed(g)) {
    if (!skipped_slot(s)) return s;
  }
  const auto& next = victims.next(g);
  for (auto it = next.rbegin(); it != next.rend(); ++it) {  // farthest next use
    if (!skipped_slot(it->second)) return it->second;
  }
  return std::nullopt;
}

std::optional<std::uint32_t> pager::impl::routed_victim() const {
  // A routed member the router chose (expect) is needed next: it evicts what its fault would,
  // sparing the other chosen ones. One only guessed (the lookahead's top-k) evicts only a tensor
  // the schedule never names, never a member nor a scheduled one: a guess that evicts a less
  // popular member is a bet the router often loses when room is short (htp-moe-bench at 30%:
  // 31% more bytes than with no guesses), and where room is ample the guess is resident already.
  const auto& victims = tensors.victims();
  const auto usable = [&](std::uint32_t s) {
    return std::find(expected.begin(), expected.end(), s) == expected.end() &&
           (tensors.can_evict(s) || tensors.can_evict_loading(s));
  };
  if (!expected.empty()) {
    const auto s = best_in(victim_group::clean, expected);
    if (s && usable(*s)) return s;
    return std::nullopt;
  }
  const std::uint32_t s = victims.find_never(victim_group::clean, usable);
  return s == detail::victim_index::none ? std::nullopt : std::optional<std::uint32_t>(s);
}

std::optional<std::uint32_t> pager::impl::prefetch_victim(std::uint32_t for_slot) const {
  if (belady() && groups.anchor_of(for_slot) >= 0) return routed_victim();
  // Evictable now without the host waiting: resident and idle, or released while its load is in
  // flight (evict_loading orders the reuse on the device).
  const auto& victims = tensors.victims();
  const auto is_clean_evictable = [&](std::uint32_t s) {
    return victims.key_of(s).group == victim_group::clean &&
           (tensors.can_evict(s) || tensors.can_evict_loading(s));
  };
  if (!belady()) {
    // LRU: the least recently used clean tensor outside the lookahead window.
    const auto window = schedule.upcoming(config.prefetch_lookahead + 1);
    const std::uint32_t s = victims.find_lru(victim_group::clean, [&](std::uint32_t c) {
      return std::find(window.begin(), window.end(), c) == window.end() && tensors.can_evict(c);
    });
    return s == detail::victim_index::none ? std::nullopt : std::optional<std::uint32_t>(s);
  }
  if (config.prefetch == prefetch_mode::pipeline) {
    // The tensor used farthest in the future outside the lookahead window, among all that hold
    // HBM (pinned and dirty ones included: if it is one of those, no prefetch now), and only if
    // it is needed later than the tensor coming in.
    const auto window = schedule.upcoming(config.prefetch_lookahead + 1);
    std::optional<std::uint32_t> best;
    std::uint64_t best_rank = 0;
    for (victim_group g : {victim_group::clean, victim_group::dirty, victim_group::pinned}) {
      const auto s = best_in(g, window);
      if (!s) continue;
      const std::uint64_t r = eviction_rank(*s);
      if (!best || r > best_rank) {
        best = s;
        best_rank = r;
      }
    }
    if (!best || !is_clean_evictable(*best) || best_rank <= eviction_rank(for_slot))
      return std::nullopt;
    return best;
  }
  return min_page_ins_victim(for_slot);
}

std::optional<std::uint32_t> pager::impl::min_page_ins_victim(std::uint32_t for_slot) const {
  // min_page_ins: exactly the victim a demand fault of `for_slot` would evict when it comes (at
  // time T): the clean tensor (pinned ones count: they will be released by then) whose next use
  // after T is farthest. Evicting it now is the same decision made earlier, unless it is needed
  // before T, pinned, or busy: then no prefetch now (it would add a page-in).
  const auto& victims = tensors.victims();
  const std::uint64_t T = schedule.next_use(for_slot);
  if (T == detail::access_schedule::never) return std::nullopt;
  std::optional<std::uint32_t> best;
  std::uint64_t best_rank = 0;  // next use after T, `never` first then LRU among those
  bool best_never = false;
  std::uint64_t best_age_key = 0;
  const auto consider = [&](std::uint32_t s, std::uint64_t after_t) {
    const bool nv = after_t == detail::access_schedule::never;
    const std::uint64_t age_key = victims.recency(s);
    bool better;
    if (!best) {
      better = true;
    } else if (nv != best_never) {
      better = nv;
    } else if (nv) {
      better = age_key < best_age_key;  // least recently used of the never-again ones
    } else {
      better = after_t > best_rank;
    }
    if (better) {
      best = s;
      best_rank = after_t;
      best_never = nv;
      best_age_key = age_key;
    }
  };
  for (victim_group g : {victim_group::clean, victim_group::pinned}) {
    const std::uint32_t oldest_never = victims.find_never(g, [](std::uint32_t) { return true; });
    if (oldest_never != detail::victim_index::none) {
      consider(oldest_never, detail::access_schedule::never);
    } else if (!victims.routed(g).empty()) {  // the least popular routed member: next in line
      consider(victims.routed(g).begin()->second, detail::access_schedule::never);
    }
    const auto& next = victims.next(g);
    if (!next.empty() && next.rbegin()->first > T)
      consider(next.rbegin()->second, next.rbegin()->first);
    // Tensors used before T: at T their next use is a later one. There are at most as many as
    // schedule positions before T (the lookahead), so this loop is short; it is capped all the
    // same.
    int looked = 0;
    for (auto it = next.begin(); it != next.end() && it->first < T; ++it) {
      if (++looked > 64) return std::nullopt;  // a hint far ahead: do not guess
      consider(it->second, schedule.next_use_after(it->second, T));
    }
  }
  if (!best) return std::nullopt;  // only dirty tensors: the fault would write one back
  const std::uint64_t next_use_now = schedule.next_use(*best);
  if (next_use_now != detail::access_schedule::never && next_use_now < T) return std::nullopt;
  const bool clean_evictable = victims.key_of(*best).group == victim_group::clean &&
                               (tensors.can_evict(*best) || tensors.can_evict_loading(*best));
  if (!clean_evictable) return std::nullopt;
  return best;
}

std::optional<extent> pager::impl::make_room(std::size_t bytes, bool demand, std::uint32_t for_slot,
                                             bool allow_compaction, detail::wait_set& waits) {
  // Larger than any HBM extent (registered under allow_degraded): no eviction can help, and the
  // allocator would reject the request as invalid. The caller serves it degraded (or throws).
  if (bytes > hbm->max_request_bytes()) return std::nullopt;
  const auto free_bytes = [&] {
    return hbm->capacity_bytes() - std::min(hbm->capacity_bytes(), hbm_bytes_held);
  };
  for (;;) {
    try {
      extent e = hbm->allocate(bytes);
      hbm_bytes_held += e.bytes;
      return e;
    } catch (const out_of_memory&) {
    }
    const bool fragmented = free_bytes() >= hbm->rounded_size(bytes);
    if (!demand) {
      // A prefetch makes only the evictions the demand fault would make, earlier; where the fault
      // would compact instead (enough free bytes, no extent), it leaves that to the fault.
      if (fragmented) return std::nullopt;
      const auto victim = prefetch_victim(for_slot);
      if (!victim) return std::nullopt;
      if (tensors.can_evict(*victim)) {
        evict_now(*victim);
      } else {
        evict_loading(*victim);
      }
      continue;
    }
    if (allow_compaction && fragmented) {
      // Enough free bytes in total but no extent for them (fragmentation): compacting moves bytes
      // at HBM speed, far cheaper than evicting and faulting back over the link. (Rung 4, taken
      // early because it is the cause.)
      if (moves_in_flight == 0 && compact_for(bytes, waits)) return std::nullopt;
      // A compaction (a background one) is moving tensors now: its result may be the extent this
      // request needs; wait for it rather than evict what the layout change would have made room
      // for.
      if (moves_in_flight > 0) {
        add_move_waits(waits);
        waits.only_moves = waits.events.empty();
        if (!waits.empty()) {
          stats.rung(&oom_ladder_counts::wait_in_flight);
          return std::nullopt;
        }
      }
    }
    if (evict_for_demand(waits)) continue;
    if (!waits.empty()) return std::nullopt;
    // Rung 4: enough free bytes in total but no extent for them: compact.
    if (allow_compaction) compact_for(bytes, waits);
    return std::nullopt;
  }
}

bool pager::impl::evict_for_demand(detail::wait_set& waits) {
  // Rungs 1-3: the best clean victim, else the best dirty one; wait if it is in flight. The victim
  // is chosen among every unpinned tensor holding HBM, whatever its state, so that a host running
  // ahead of the GPU (whose recent loads are still in flight) does not push the rule onto tensors
  // needed sooner. One whose kernels still run is evicted at once, fenced.
  const auto clean = best_in(victim_group::clean);
  const auto victim = clean ? clean : best_in(victim_group::dirty);
  if (victim && tensors.can_evict(*victim)) {
    evict_now(*victim);
    if (clean) {
      stats.rung(&oom_ladder_counts::evict_clean);
      return true;
    }
    stats.rung(&oom_ladder_counts::write_back_dirty);
    waits.tickets.push_back(tensors[*victim].ticket);
    return false;
  }
  // The victim's load is still in flight, but it was acquired and released meanwhile (a host
  // running ahead): its release events order the next copy into its memory after the load, on
  // the device, so it goes now instead of the host waiting for it.
  if (victim && tensors.can_evict_loading(*victim)) {
    evict_loading(*victim);
    stats.rung(&oom_ladder_counts::evict_clean);
    return true;
  }
  // Rung 3: the victim (or, with none, any unpinned tensor) has a copy in flight: wait for it.
  if (victim) {
    waits.tickets.push_back(tensors[*victim].ticket);
  } else {
    for (std::uint32_t s : tensors.in_flight()) {
      const tensor_record& t = tensors[s];
      if (t.hbm && t.pins == 0) waits.tickets.push_back(t.ticket);
    }
  }
  if (!waits.empty()) stats.rung(&oom_ladder_counts::wait_in_flight);
  return false;
}

bool pager::impl::compact_for(std::size_t bytes, detail::wait_set& waits) {
  if (start_compaction(bytes) == 0) return false;
  stats.rung(&oom_ladder_counts::compact);
  waits.compacted = true;
  add_move_waits(waits);
  waits.only_moves = waits.events.empty();
  return true;
}

void pager::impl::start_load(std::uint32_t slot, extent where, transfer_priority priority) {
  const detail::nvtx_range range(priority == transfer_priority::fault ? "htp fault"
                                                                      : "htp prefetch");
  // The copy waits for whatever may still read the destination (its fences) and for kernels that
  // may still write the source: a tensor last acquired in degraded mode was written in host memory.
  tensors.settle(slot);
  const tensor_record& t = tensors[slot];
  std::vector<event_ref> after = fence_events(where);
  for (const auto& r : t.release_events) after.push_back(r.event);
  transfer_ticket ticket;
  try {
    if (t.coded) {  // copied piece by piece into staging and decoded into `where`
      ticket = t.file ? engine->submit_decode_from_file(where.ptr, t.file, t.file_offset, t.coded,
                                                        priority, std::move(after))
                      : engine->submit_decode(where.ptr, t.host.ptr, t.coded, priority,
                                              std::move(after));
    } else {
      ticket = t.file ? engine->submit_from_file(where.ptr, t.file, t.file_offset, t.bytes,
                                                 priority, std::move(after), t.chunk_checksums)
                      : engine->submit(where.ptr, t.host.ptr, t.bytes,
                                       copy_direction::host_to_device, priority, std::move(after));
    }
  } catch (...) {
    free_hbm(where);
    throw;
  }
  add_fence_user(where, ticket);
  fence_release_events(slot, where.ptr,
                       ticket);  // kept until the load has finished: the engine refers to them
  auto& notes = tensors.notes(slot);
  notes.ticket_priority = priority;
  notes.ticket_start = std::chrono::steady_clock::now();
  tensors.begin_load(slot, where, ticket);
  notes.wait_from = {};
}

void pager::impl::evict_now(std::uint32_t slot) {
  tensors.settle(slot);
  const tensor_record& t = tensors[slot];
  if (!(t.kind == tensor_kind::mutable_state && t.dirty)) {
    free_hbm(tensors.drop_to_host(slot));
    return;
  }
  const detail::nvtx_range range("htp write-back");
  // The write-back reads what the kernels wrote: it waits for their release events on the device.
  // Those events join a fence over the extent until the write-back has finished.
  std::vector<event_ref> after;
  for (const auto& r : t.release_events) after.push_back(r.event);
  const transfer_ticket ticket =
      engine->submit(t.host.ptr, t.hbm->ptr, t.bytes, copy_direction::device_to_host,
                     transfer_priority::writeback, std::move(after));
  fence_release_events(slot, t.hbm->ptr, ticket);
  tensors.begin_write_back(slot, ticket);
  auto& notes = tensors.notes(slot);
  notes.ticket_priority = transfer_priority::writeback;
  notes.ticket_start = std::chrono::steady_clock::now();
}

void pager::impl::evict_loading(std::uint32_t slot) {
  const tensor_record& t = tensors[slot];
  detached_loads.emplace(
      t.ticket.id,
      detached_load{t.notes.fault_load, t.notes.wait_from, t.notes.ticket_start, t.bytes, slot,
                    t.generation, stats.tracing() ? t.name : std::string()});
  // Each release event follows the compute stream's wait for the load: a copy into this memory
  // that waits for them (the fence) starts after the load's last byte. That copy's wait never sits
  // on the prefetch stream ahead of the load's own chunks: the engine issues a request whose
  // events are pending only once it is the oldest queued, i.e. once the older load is fully
  // issued (Note [Fenced requests and deadlock]); on another stream it cannot block the load.
  free_hbm(tensors.detach_load(slot));
}

bool pager::impl::prefetch_slot(std::uint32_t slot,
                                std::optional<std::chrono::steady_clock::time_point> need) {
  const tensor_record& t = tensors[slot];
  if (!t.live || t.pins > 0) return false;      // degraded (pinned without HBM) or in use
  if (t.where != residency::host) return true;  // there or coming
  // A prefetch is a hint: a device failure while issuing it drops the hint (start_load and
  // evict_now leave the state as it was), it does not fail the acquire or release that issued it.
  try {
    detail::wait_set unused;
    auto room = make_room(t.bytes, /*demand=*/false, slot, /*allow_compaction=*/false, unused);
    if (!room) {
      stats.add(&pager_metrics::prefetch_skipped);
      return false;
    }
    start_load(slot, *room, transfer_priority::prefetch);
    if (need) engine->set_need_time(tensors[slot].ticket, *need);
  } catch (const out_of_memory&) {
    stats.add(&pager_metrics::prefetch_skipped);
    return false;
  } catch (const cuda_error& e) {
    if (e.is_sticky()) throw;
    stats.add(&pager_metrics::prefetch_skipped);
    return false;
  }
  tensors.notes(slot).prefetched_unused = true;
  // Fresh in LRU order: it joined the index when its load started.
  stats.add(&pager_metrics::prefetches);
  return true;
}

void pager::impl::prefetch_upcoming() {
  if (config.prefetch_lookahead == 0 || schedule.empty()) return;
  // The walk relies on min_page_ins's victims (never one needed sooner); the other prefetch
  // rules keep a window of prefetch_lookahead tensors, so they count.
  if (config.lookahead == lookahead_mode::automatic && belady() &&
      config.prefetch == prefetch_mode::min_page_ins) {
    prefetch_ahead();
    return;
  }
  for (std::uint32_t slot : schedule.upcoming(config.prefetch_lookahead)) {
    if (!prefetch_slot(slot)) return;
  }
}

void pager::impl::prefetch_ahead() {
  // Note [Automatic lookahead] (docs/pager.md): walk the upcoming accesses, loading each tensor
  // not in HBM with its predicted need time as deadline, while the window's loads number fewer
  // than prefetch_lookahead or their link time does not yet cover the compute time until the
  // window's last access. `until_use` is that compute time (ns from now), `window_ns` the link
  // time of the window's bytes loading or prefetched and not yet used.
  pace.harvest();
  const std::uint64_t rate = engine->effective_rate(copy_direction::host_to_device);
  const double ns_per_byte = rate ? 1e9 / static_cast<double>(rate) : 0.0;
  const std::optional<std::int64_t> mean_gap = pace.mean_gap_ns();
  const auto now = std::chrono::steady_clock::now();
  double until_use = 0, window_ns = 0;
  unsigned loads = 0;
  const std::size_t limit =
      std::min<std::size_t>(config.lookahead_max_tensors, schedule.remaining());
  for (std::size_t i = 0; i < limit; ++i) {
    const std::uint32_t slot = schedule.upcoming_at(i);
    const tensor_record& t = tensors[slot];
    if (t.where == residency::host && t.pins == 0) {
      const auto need = now + std::chrono::nanoseconds(static_cast<std::int64_t>(until_use));
      if (!prefetch_slot(slot, need)) return;  // no room without evicting what is needed sooner
    }
    if (t.where == residency::loading || (t.hbm && t.notes.prefetched_unused)) {
      window_ns += static_cast<double>(t.bytes) * ns_per_byte;
      ++loads;
    }
    if (loads >= config.prefetch_lookahead && window_ns > until_use) return;
    const std::optional<std::int64_t> gap = pace.gap_ns(schedule.position_at(i));
    if (gap || mean_gap) until_use += static_cast<double>(gap ? *gap : *mean_gap);
    if (const auto* g = groups.after(slot)) {  // a router: guess its experts by popularity
      const auto need = now + std::chrono::nanoseconds(static_cast<std::int64_t>(until_use));
      for (std::uint32_t m : groups.top(*g)) {
        if (tensors[m].where != residency::host || tensors[m].pins > 0) continue;
        if (groups.score(m) <= 0 || !prefetch_slot(m, need)) break;  // no guess, or no room
        window_ns += static_cast<double>(tensors[m].bytes) * ns_per_byte;
        ++loads;
      }
    }
  }
}

std::uint32_t pager::impl::quiesce(std::unique_lock<std::mutex>& lock, tensor_handle h,
                                   const std::function<void(const tensor_record&)>& check) {
  for (;;) {
    reap();
    const std::uint32_t slot = slot_of(h);
    check(tensors[slot]);
    detail::wait_set w;
    const tensor_record& t = tensors[slot];
    if (t.pending != pending_kind::none) w.tickets.push_back(t.ticket);
    if (t.detached_load_count > 0) {  // rare: loads of it detached by evict_loading still run
      for (const auto& [id, d] : detached_loads) {
        if (d.slot == slot && d.generation == t.generation)
          w.tickets.push_back(transfer_ticket{id});
      }
    }
    if (!tensors.settle(slot)) {
      for (const auto& r : tensors[slot].release_events) w.events.push_back(r.event);
    }
    if (w.empty()) return slot;
    wait_for(lock, w);  // a failed copy is accounted by reap() on the next look
  }
}

std::exception_ptr pager::impl::wait_for(std::unique_lock<std::mutex>& lock,
                                         const detail::wait_set& w) {
  std::exception_ptr error;
  // The events stay held by their owners while the lock is dropped: hold them here too, so none
  // is recycled (and re-recorded) while this thread waits on it.
  for (auto e : w.events) events.retain(e);
  lock.unlock();
  try {
    for (auto t : w.tickets) {
      try {
        engine->wait(t);
      } catch (const logic_error&) {
        // a failed copy: reap() accounts it; the caller decides whether to retry or report it
        if (!error) error = std::current_exception();
      } catch (const io_error&) {  // a failed file read, likewise
        if (!error) error = std::current_exception();
      } catch (const corrupt_data&) {  // a page-in that failed its checksum, likewise
        if (!error) error = std::current_exception();
      }
    }
    for (auto e : w.events) dev.synchronize(e);
  } catch (...) {
    lock.lock();
    for (auto e : w.events) events.release(e);
    throw;
  }
  lock.lock();
  for (auto e : w.events) events.release(e);
  return error;
}

void pager::impl::throw_copy_failed(const std::string& what, const std::string& why) {
  throw cuda_error(-1, "htp_copy_failed", what, __FILE__, __LINE__,
                   "a copy the pager waited for failed on the device: " + why);
}

void pager::impl::free_hbm(const extent& e, std::vector<event_ref> readers) {
  if (config.checked) {
    // Poison after the last reader, so a stale read fails its checksum instead of passing by luck.
    // Stream-ordered, with no host wait under the lock: the poison's event fences the extent, so
    // its next user's copy starts after it (as it would after the readers). Best effort: a
    // (non-sticky) failure to queue the poison leaves the bytes as they are, which loses nothing;
    // the memory is freed either way.
    event_ref poisoned{};
    bool queued = false;
    try {
      poisoned = events.take();
      for (event_ref r : readers) dev.wait(r, private_stream);
      for (event_ref f : fence_events(e)) dev.wait(f, private_stream);
      dev.fill_pattern_async(e.ptr, e.bytes, 0xDBDBDBDBull, private_stream);
      queued = true;
      dev.record(poisoned, private_stream);
      readers.push_back(poisoned);  // fences the extent with its readers (and releases with them)
    } catch (const cuda_error& err) {
      if (poisoned) events.release(poisoned);  // never recorded: nothing fences on it
      if (err.is_sticky()) throw;
      // A poison queued without its event would be unfenced: wait for it here, on this error path
      // only, so that it cannot overwrite the next tenant's bytes.
      if (queued) {
        try {
          private_stream.synchronize();
        } catch (...) {  // the stream's own failure is reported by whoever waits on it next
        }
      }
    }
  }
  if (!readers.empty()) {
    const auto* b = static_cast<const char*>(e.ptr);
    fences.add(b, b + hbm->rounded_size(e.bytes), std::move(readers));
  }
  hbm->deallocate(e.ptr, e.bytes);
  hbm_bytes_held -= e.bytes;
  ++hbm_frees;
}

std::vector<event_ref> pager::impl::fence_events(const extent& e) const {
  std::vector<event_ref> out;
  const auto* b = static_cast<const char*>(e.ptr);
  fences.events_over(b, b + e.bytes, out);
  return out;
}

void pager::impl::fence_release_events(std::uint32_t slot, const void* at, transfer_ticket user) {
  if (tensors[slot].release_events.empty()) return;
  const auto* b = static_cast<const char*>(at);
  fences.add(b, b + hbm->rounded_size(tensors[slot].bytes), tensors.take_release_events(slot),
             {user});
}

void pager::impl::add_fence_user(const extent& e, transfer_ticket user) {
  const auto* b = static_cast<const char*>(e.ptr);
  fences.add_user(b, b + e.bytes, user);
}

void pager::impl::drop_fences() {
  fences.drop_finished(
      [&](const detail::fence& f) {
        return std::all_of(f.users.begin(), f.users.end(),
                           [&](transfer_ticket t) { return engine->is_complete(t); }) &&
               std::all_of(f.events.begin(), f.events.end(),
                           [&](event_ref e) { return dev.query(e); });
      },
      [&](event_ref e) { events.release(e); });
}

}  // namespace htp
