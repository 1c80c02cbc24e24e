// Residency: loads, evictions, write-backs, the out-of-memory ladder's non-blocking rungs, and
// prefetch. Every function here runs with the pager's mutex held.
#include "pager/pager_impl.hpp"

#include <htp/detail/check.hpp>

#include <algorithm>

namespace htp {

using detail::pending_kind;
using detail::tensor_record;

void pager::impl::reap() {
  for (std::uint32_t slot = 0; slot < tensors.size(); ++slot) {
    tensor_record& t = tensors[slot];
    if (!t.live || t.pending == pending_kind::none) continue;
    if (!engine->is_complete(t.ticket)) continue;
    const transfer_status status = engine->status(t.ticket);
    const bool ok = status == transfer_status::complete || status == transfer_status::expired;
    const auto lat = engine->latency(t.ticket);
    if (trace && lat) {
      const auto end = t.ticket_start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(*lat);
      const bool h2d = t.pending == pending_kind::load;
      // Category: why the copy ran. A prefetch requeued at fault priority stays a prefetch
      // ("late prefetch"), so "fault" spans count exactly the faults in the metrics.
      const char* why = t.pending == pending_kind::load && t.fault_load ? "fault"
                        : t.pending == pending_kind::load && t.ticket_priority == transfer_priority::fault
                            ? "late prefetch"
                            : to_string(t.ticket_priority);
      trace->add(h2d ? detail::trace_track::prefetch : detail::trace_track::reduction, t.name, why,
                 t.ticket_start, end);
    }
    switch (t.pending) {
      case pending_kind::load:
        if (ok) {
          t.where = residency::resident;
          if (t.fault_load && lat) fault_latency.record(static_cast<std::uint64_t>(lat->count()));
        } else if (t.pins > 0) {
          // Acquired already (acquire does not wait unless asked): kernels ordered after the
          // acquire may be reading the extent. Keep it until the last release, which frees it and
          // reports the failure; the host copy stays authoritative.
          t.load_failed = true;
        } else {  // the bytes never arrived: back to host, the host copy is still authoritative
          // Kernels acquired and released it meanwhile may still run: fence the extent.
          free_hbm(*t.hbm, std::move(t.release_events));
          t.release_events.clear();
          t.hbm.reset();
          t.where = residency::host;
          t.dirty = false;  // whatever they wrote landed in undefined HBM, never in the host copy
          ++counters.failed_loads;
        }
        t.fault_load = false;
        break;
      case pending_kind::write_back:
        if (!ok) {  // the host copy is stale (maybe half overwritten): resident and dirty
          t.where = residency::resident;
          t.dirty = true;  // also when re-acquired meanwhile (acquire marked it clean)
        } else if (t.where == residency::writing_back) {
          free_hbm(*t.hbm);
          t.hbm.reset();
          t.where = residency::host;
          t.dirty = false;
        }  // else: re-acquired during the write-back; it stays resident
        break;
      case pending_kind::move:
        if (ok) {
          hbm->commit_move(*t.move);
          hbm_bytes_held -= t.move->from.bytes;
        } else {
          hbm->cancel_move(*t.move);
          hbm_bytes_held -= t.move->to.bytes;
          t.hbm = t.move->from;
        }
        t.move.reset();
        --moves_in_flight;
        break;
      case pending_kind::none:
        break;
    }
    t.pending = pending_kind::none;
    t.ticket = {};
  }
  drop_fences();
}

bool pager::impl::settle(tensor_record& t) {
  auto& ev = t.release_events;
  ev.erase(std::remove_if(ev.begin(), ev.end(),
                          [&](event_ref e) {
                            if (!dev.query(e)) return false;
                            recycle_event(e);
                            return true;
                          }),
           ev.end());
  return ev.empty();
}

bool pager::impl::can_evict(const tensor_record& t) const {
  return t.live && t.hbm && t.pins == 0 && t.pending == pending_kind::none &&
         t.where == residency::resident;
}

bool pager::impl::can_move(tensor_record& t) { return can_evict(t) && settle(t); }

std::uint64_t pager::impl::eviction_rank(std::uint32_t slot) const {
  const auto& t = tensors[slot];
  const std::uint64_t age = tick - std::min(tick, t.last_access);
  const bool belady = config.eviction == eviction_rule::belady ||
                      (config.eviction == eviction_rule::automatic && !schedule.empty());
  if (!belady || schedule.empty()) return age;
  const std::uint64_t d = schedule.distance(slot);
  // Never used again: evict first, the least recently used of those first.
  if (d == detail::access_schedule::never) return (std::uint64_t{1} << 62) + age;
  return d;
}

std::optional<extent> pager::impl::make_room(std::size_t bytes, bool demand, std::uint32_t for_slot,
                                             bool allow_compaction, detail::wait_set& waits) {
  const bool belady = config.eviction == eviction_rule::belady ||
                      (config.eviction == eviction_rule::automatic && !schedule.empty());
  std::vector<std::uint32_t> window;
  if (!demand && !schedule.empty()) window = schedule.upcoming(config.prefetch_lookahead + 1);
  const std::uint64_t target_rank = eviction_rank(for_slot);
  // Larger than any HBM extent (registered under allow_degraded): no eviction can help, and the
  // allocator would reject the request as invalid. The caller serves it degraded (or throws).
  if (bytes > hbm->max_request_bytes()) return std::nullopt;
  for (;;) {
    try {
      extent e = hbm->allocate(bytes);
      hbm_bytes_held += e.bytes;
      return e;
    } catch (const out_of_memory&) {
    }
    // Enough free bytes in total but no extent for them (fragmentation): compacting moves bytes
    // at HBM speed, far cheaper than evicting and faulting back over the link. (Rung 4, taken
    // early because it is the cause.)
    if (demand && allow_compaction && moves_in_flight == 0 &&
        hbm->capacity_bytes() - std::min(hbm->capacity_bytes(), hbm_bytes_held) >= hbm->rounded_size(bytes) &&
        start_compaction(bytes) > 0) {
      ++counters.oom.compact;
      waits.compacted = true;
      for (auto& t : tensors) {
        if (t.live && t.pending == pending_kind::move) waits.tickets.push_back(t.ticket);
      }
      return std::nullopt;
    }
    // The victim is chosen among every unpinned tensor holding HBM, whatever its state, so that a
    // host running ahead of the GPU (whose recent loads are still in flight) does not push the
    // rule onto tensors needed sooner. A victim with a copy in flight is waited for (demand) or
    // skipped (prefetch); one whose kernels still run is evicted at once, fenced.
    const auto is_dirty = [](const tensor_record& t) {
      return t.kind == tensor_kind::mutable_state && t.dirty;
    };
    if (!demand) {
      // prefetch_mode::min_page_ins (Belady active): make exactly the eviction MIN would make when
      // the tensor is first used (the resident whose next use lies farthest beyond that point),
      // only earlier, and only if that victim is not needed before then; otherwise wait. So
      // prefetching never adds a page-in. prefetch_mode::pipeline: the tensor used farthest in
      // the future (Belady) outside the lookahead window, so lookahead + 1 slots rotate and loads
      // overlap compute; under LRU, the least recently used evictable clean tensor outside the
      // window. Never a dirty victim (a prefetch does not pay for a write-back), never a pinned
      // one, never one needed sooner, and never a wait: no victim now means no prefetch now.
      const bool min_mode = belady && config.prefetch == prefetch_mode::min_page_ins;
      std::optional<std::uint32_t> best;
      std::uint64_t best_rank = 0;
      for (std::uint32_t slot = 0; slot < tensors.size(); ++slot) {
        const tensor_record& t = tensors[slot];
        if (slot == for_slot || !t.live || !t.hbm) continue;
        if (!min_mode && std::find(window.begin(), window.end(), slot) != window.end()) continue;
        if (!belady && (!can_evict(t) || is_dirty(t))) continue;
        const std::uint64_t rank = min_mode ? schedule.distance_after(slot, for_slot) : eviction_rank(slot);
        if (!best || rank > best_rank) {
          best = slot;
          best_rank = rank;
        }
      }
      if (!best) return std::nullopt;
      const tensor_record& v = tensors[*best];
      if (!can_evict(v) || is_dirty(v)) return std::nullopt;
      if (belady && eviction_rank(*best) <= target_rank) return std::nullopt;  // needed sooner
      evict_now(*best);
      continue;
    }
    // Rungs 1-3: the best clean victim, else the best dirty one; wait if it is in flight.
    std::optional<std::uint32_t> clean, dirty;
    std::uint64_t clean_rank = 0, dirty_rank = 0;
    for (std::uint32_t slot = 0; slot < tensors.size(); ++slot) {
      if (slot == for_slot) continue;
      const tensor_record& t = tensors[slot];
      if (!t.live || !t.hbm || t.pins != 0 || t.load_failed) continue;
      const std::uint64_t rank = eviction_rank(slot);
      auto& best = is_dirty(t) ? dirty : clean;
      auto& best_rank = is_dirty(t) ? dirty_rank : clean_rank;
      if (!best || rank > best_rank) {
        best = slot;
        best_rank = rank;
      }
    }
    const std::optional<std::uint32_t> victim = clean ? clean : dirty;
    if (victim && can_evict(tensors[*victim])) {
      evict_now(*victim);
      if (clean) {
        ++counters.oom.evict_clean;
        continue;
      }
      ++counters.oom.write_back_dirty;
      waits.tickets.push_back(tensors[*victim].ticket);
      return std::nullopt;
    }
    // Rung 3: the victim (or, with none, any unpinned tensor) has a copy in flight: wait for it.
    if (victim) {
      waits.tickets.push_back(tensors[*victim].ticket);
    } else {
      for (auto& t : tensors) {
        if (t.live && t.hbm && t.pins == 0 && t.pending != pending_kind::none) {
          waits.tickets.push_back(t.ticket);
        }
      }
    }
    if (!waits.empty()) {
      ++counters.oom.wait_in_flight;
      return std::nullopt;
    }
    // Rung 4: enough free bytes in total but no extent for them: compact.
    if (allow_compaction && start_compaction(bytes) > 0) {
      ++counters.oom.compact;
      waits.compacted = true;
      for (auto& t : tensors) {
        if (t.live && t.pending == pending_kind::move) waits.tickets.push_back(t.ticket);
      }
      return std::nullopt;
    }
    return std::nullopt;
  }
}

void pager::impl::start_load(std::uint32_t slot, extent where, transfer_priority priority) {
  tensor_record& t = tensors[slot];
  // The copy waits for whatever may still read the destination (its fences) and for kernels that
  // may still write the source: a tensor last acquired in degraded mode was written in host memory.
  settle(t);
  std::vector<event_ref> after = fence_events(where);
  after.insert(after.end(), t.release_events.begin(), t.release_events.end());
  transfer_ticket ticket;
  try {
    ticket = engine->submit(where.ptr, t.host.ptr, t.bytes, copy_direction::host_to_device,
                            priority, std::move(after));
  } catch (...) {
    free_hbm(where);
    throw;
  }
  add_fence_user(where, ticket);
  if (!t.release_events.empty()) {  // kept until the load has finished: the engine refers to them
    const auto* b = static_cast<const char*>(where.ptr);
    fences.push_back({b, b + hbm->rounded_size(t.bytes), std::move(t.release_events), {ticket}});
    t.release_events.clear();
  }
  t.hbm = where;
  t.where = residency::loading;
  t.pending = pending_kind::load;
  t.ticket = ticket;
  t.ticket_priority = priority;
  t.ticket_start = std::chrono::steady_clock::now();
  ++counters.page_ins;
  counters.page_in_bytes += t.bytes;
}

void pager::impl::evict_now(std::uint32_t slot) {
  tensor_record& t = tensors[slot];
  settle(t);
  if (t.kind == tensor_kind::mutable_state && t.dirty) {
    // The write-back reads what the kernels wrote: it waits for their release events on the
    // device. Those events join a fence over the extent until the write-back has finished.
    t.ticket = engine->submit(t.host.ptr, t.hbm->ptr, t.bytes, copy_direction::device_to_host,
                              transfer_priority::writeback, t.release_events);
    if (!t.release_events.empty()) {
      const auto* b = static_cast<const char*>(t.hbm->ptr);
      fences.push_back({b, b + hbm->rounded_size(t.bytes), std::move(t.release_events), {t.ticket}});
      t.release_events.clear();
    }
    t.ticket_priority = transfer_priority::writeback;
    t.ticket_start = std::chrono::steady_clock::now();
    t.pending = pending_kind::write_back;
    t.where = residency::writing_back;
    ++counters.write_backs;
    counters.write_back_bytes += t.bytes;
  } else {
    free_hbm(*t.hbm, std::move(t.release_events));
    t.release_events.clear();
    t.hbm.reset();
    t.where = residency::host;
  }
  if (t.prefetched_unused) {
    ++counters.wasted_prefetches;
    t.prefetched_unused = false;
  }
  ++counters.evictions;
}

void pager::impl::prefetch_slot(std::uint32_t slot) {
  tensor_record& t = tensors[slot];
  if (!t.live || t.where != residency::host || t.pins > 0) return;  // there, coming, or degraded
  // A prefetch is a hint: a device failure while issuing it drops the hint (start_load and
  // evict_now leave the state as it was), it does not fail the acquire or release that issued it.
  try {
    detail::wait_set unused;
    auto room = make_room(t.bytes, /*demand=*/false, slot, /*allow_compaction=*/false, unused);
    if (!room) {
      ++counters.prefetch_skipped;
      return;
    }
    start_load(slot, *room, transfer_priority::prefetch);
  } catch (const out_of_memory&) {
    ++counters.prefetch_skipped;
    return;
  } catch (const cuda_error& e) {
    if (e.is_sticky()) throw;
    ++counters.prefetch_skipped;
    return;
  }
  t.prefetched_unused = true;
  t.last_access = tick;  // fresh: LRU must not pick what was just brought in
  ++counters.prefetches;
}

void pager::impl::prefetch_upcoming() {
  if (config.prefetch_lookahead == 0 || schedule.empty()) return;
  for (std::uint32_t slot : schedule.upcoming(config.prefetch_lookahead)) prefetch_slot(slot);
}

tensor_record& pager::impl::quiesce(std::unique_lock<std::mutex>& lock, tensor_handle h,
                                   const std::function<void(const tensor_record&)>& check) {
  for (;;) {
    reap();
    tensor_record& t = get(h);
    check(t);
    detail::wait_set w;
    if (t.pending != pending_kind::none) w.tickets.push_back(t.ticket);
    if (!settle(t)) w.events = t.release_events;
    if (w.empty()) return t;
    wait_for(lock, w);  // a failed copy is accounted by reap() on the next look
  }
}

std::string pager::impl::wait_for(std::unique_lock<std::mutex>& lock, const detail::wait_set& w) {
  std::string error;
  lock.unlock();
  try {
    for (auto t : w.tickets) {
      try {
        engine->wait(t);
      } catch (const logic_error& e) {
        // a failed copy: reap() accounts it; the caller decides whether to retry or report it
        if (error.empty()) error = e.what();
      }
    }
    for (auto e : w.events) dev.synchronize(e);
  } catch (...) {
    lock.lock();
    throw;
  }
  lock.lock();
  return error;
}

void pager::impl::throw_copy_failed(const std::string& what, const std::string& why) {
  throw cuda_error(-1, "htp_copy_failed", what, __FILE__, __LINE__,
                   "a copy the pager waited for failed on the device: " + why);
}

void pager::impl::free_hbm(const extent& e, std::vector<event_ref> readers) {
  if (config.checked) {
    // Poison after the last reader, so a stale read fails its checksum instead of passing by luck.
    // Best effort: a (non-sticky) failure to queue the poison leaves the bytes as they are, which
    // loses nothing; the memory is freed either way.
    try {
      for (event_ref r : readers) dev.wait(r, private_stream);
      for (event_ref f : fence_events(e)) dev.wait(f, private_stream);
      dev.fill_pattern_async(e.ptr, e.bytes, 0xDBDBDBDBull, private_stream);
    } catch (const cuda_error& err) {
      if (err.is_sticky()) throw;
    }
    private_stream.synchronize();
  }
  if (!readers.empty()) {
    const auto* b = static_cast<const char*>(e.ptr);
    fences.push_back({b, b + hbm->rounded_size(e.bytes), std::move(readers), {}});
  }
  hbm->deallocate(e.ptr, e.bytes);
  hbm_bytes_held -= e.bytes;
}

std::vector<event_ref> pager::impl::fence_events(const extent& e) const {
  std::vector<event_ref> out;
  const auto* b = static_cast<const char*>(e.ptr);
  const auto* end = b + e.bytes;
  for (const auto& f : fences) {
    if (f.begin < end && b < f.end) out.insert(out.end(), f.events.begin(), f.events.end());
  }
  return out;
}

void pager::impl::add_fence_user(const extent& e, transfer_ticket user) {
  const auto* b = static_cast<const char*>(e.ptr);
  const auto* end = b + e.bytes;
  for (auto& f : fences) {
    if (f.begin < end && b < f.end) f.users.push_back(user);
  }
}

void pager::impl::drop_fences() {
  for (std::size_t i = 0; i < fences.size();) {
    auto& f = fences[i];
    const bool users_done = std::all_of(f.users.begin(), f.users.end(),
                                        [&](transfer_ticket t) { return engine->is_complete(t); });
    const bool events_done =
        users_done && std::all_of(f.events.begin(), f.events.end(), [&](event_ref e) { return dev.query(e); });
    if (!events_done) {
      ++i;
      continue;
    }
    for (event_ref e : f.events) recycle_event(e);
    f = std::move(fences.back());
    fences.pop_back();
  }
}

event_ref pager::impl::take_event() {
  if (!event_pool.empty()) {
    event_ref e = event_pool.back();
    event_pool.pop_back();
    return e;
  }
  event_ref e = dev.create_event();
  all_events.push_back(e);
  return e;
}

void pager::impl::recycle_event(event_ref e) { event_pool.push_back(e); }

}  // namespace htp
