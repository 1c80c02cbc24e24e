// The room maker (room_maker.hpp): the ladder, the choice of victims, loads and evictions, HBM
// freed behind its fences. Compaction is in room_compaction.cpp. Every function here runs with the
// pager's mutex held, except wait(), which drops it while it waits.
#include "pager/room_maker.hpp"

#include <htp/detail/check.hpp>

#include <algorithm>

#include "log.hpp"
#include "nvtx_range.hpp"

namespace htp::detail {

room_maker::room_maker(device& dev, const pager_config& config, slab_allocator& hbm,
                       transfer_engine& engine, tensor_table& tensors, event_pool& events,
                       const forecast& future, pager_observer& observe)
    : dev_(dev), config_(config), hbm_(hbm), engine_(engine), tensors_(tensors), events_(events),
      future_(future), observe_(observe), private_stream_(dev) {}

// ---- room --------------------------------------------------------------------------------------

std::optional<extent> room_maker::allocate(std::size_t bytes) {
  try {
    extent e = hbm_.allocate(bytes);
    held_ += e.bytes;
    return e;
  } catch (const out_of_memory&) {
    return std::nullopt;
  }
}

std::size_t room_maker::free_bytes() const {
  return hbm_.capacity_bytes() - std::min(hbm_.capacity_bytes(), held_);
}

demand_result room_maker::for_demand(std::size_t bytes, bool allow_compaction, bool may_degrade) {
  demand_result r;
  // Larger than any HBM extent (registered under allow_degraded): no eviction can help, and the
  // allocator would reject the request as invalid: straight to rung 5.
  while (bytes <= hbm_.max_request_bytes()) {
    if ((r.room = allocate(bytes))) return r;
    const bool fragmented = free_bytes() >= hbm_.rounded_size(bytes);
    if (allow_compaction && fragmented) {
      // Enough free bytes in total but no extent for them (fragmentation): compacting moves bytes
      // at HBM speed, far cheaper than evicting and faulting back over the link. (Rung 4, taken
      // early because it is the cause.)
      if (moves_in_flight_ == 0 && compact_for(bytes, r.waits)) return r;
      // A compaction (a background one) is moving tensors now: its result may be the extent this
      // request needs; wait for it rather than evict what the layout change made room for.
      if (moves_in_flight_ > 0) {
        add_move_waits(r.waits);
        r.waits.only_moves = r.waits.events.empty();
        if (!r.waits.empty()) {
          observe_.ladder_waited();
          return r;
        }
      }
    }
    if (evict_for_demand(r.waits)) continue;
    if (!r.waits.empty()) return r;
    // Rung 4: enough free bytes in total but no extent for them: compact.
    if (allow_compaction && compact_for(bytes, r.waits)) return r;
    break;
  }
  if (may_degrade && config_.on_oom == oom_policy::allow_degraded) {
    r.degraded = true;  // rung 5
    return r;
  }
  observe_.ladder_exhausted(bytes);
  return r;
}

std::optional<extent> room_maker::for_prefetch(std::uint32_t slot) {
  const std::size_t bytes = tensors_[slot].bytes;
  if (bytes > hbm_.max_request_bytes()) return std::nullopt;
  for (;;) {
    if (auto e = allocate(bytes)) return e;
    // Where the fault would compact instead (enough free bytes, no extent), leave it to the fault.
    if (free_bytes() >= hbm_.rounded_size(bytes)) return std::nullopt;
    const auto victim = prefetch_victim(slot);
    if (!victim) return std::nullopt;
    if (tensors_.can_evict(*victim)) {
      evict(*victim, cause::prefetch);
    } else {
      evict_loading(*victim, cause::prefetch);
    }
  }
}

bool room_maker::evict_for_demand(wait_set& waits) {
  // Rungs 1-3: the best clean victim, else the best dirty one; wait if it is in flight. The victim
  // is chosen among every unpinned tensor holding HBM, whatever its state, so that a host running
  // ahead of the GPU (whose recent loads are still in flight) does not push the rule onto tensors
  // needed sooner. One whose kernels still run is evicted at once, fenced.
  const auto clean = best_in(victim_group::clean);
  const auto victim = clean ? clean : best_in(victim_group::dirty);
  if (victim && tensors_.can_evict(*victim)) {
    evict(*victim, cause::demand);
    if (clean) return true;
    waits.tickets.push_back(tensors_[*victim].ticket);  // its write-back
    return false;
  }
  // The victim's load is still in flight, but it was acquired and released meanwhile (a host
  // running ahead): its release events order the next copy into its memory after the load, on
  // the device, so it goes now instead of the host waiting for it.
  if (victim && tensors_.can_evict_loading(*victim)) {
    evict_loading(*victim, cause::demand);
    return true;
  }
  // Rung 3: the victim (or, with none, any unpinned tensor) has a copy in flight: wait for it.
  if (victim) {
    waits.tickets.push_back(tensors_[*victim].ticket);
  } else {
    for (std::uint32_t s : tensors_.in_flight()) {
      const tensor_record& t = tensors_[s];
      if (t.hbm && t.pins == 0) waits.tickets.push_back(t.ticket);
    }
  }
  if (!waits.empty()) observe_.ladder_waited();
  return false;
}

bool room_maker::compact_for(std::size_t bytes, wait_set& waits) {
  if (compact(bytes, cause::demand) == 0) return false;
  waits.compacted = true;
  add_move_waits(waits);
  waits.only_moves = waits.events.empty();
  return true;
}

std::string room_maker::oom_message(std::size_t bytes, const std::string& name,
                                    const char* what) const {
  std::size_t pinned = 0, in_flight_bytes = 0;
  std::size_t pinned_count = 0, resident = 0, resident_bytes = 0;
  for (std::uint32_t s = 0; s < tensors_.size(); ++s) {  // a rare error path: a scan is fine
    const tensor_record& t = tensors_[s];
    if (!t.live || !t.hbm) continue;
    if (t.device_resident) {
      ++resident;
      resident_bytes += t.bytes;
    } else if (t.pins > 0) {
      pinned += t.bytes;
      ++pinned_count;
    } else if (t.pending != pending_kind::none || !t.release_events.empty()) {
      in_flight_bytes += t.bytes;
    }
  }
  const auto f = hbm_.fragmentation();
  const std::size_t cap = hbm_.capacity_bytes();
  return concat(
      "htp out of memory: cannot ", what, " '", name, "' (", bytes, " bytes). HBM budget ", cap,
      " bytes; held ", held_, ", free ", cap - std::min(cap, held_), "; pinned by ", pinned_count,
      " acquired tensor(s): ", pinned, " bytes; device-resident: ", resident, " tensor(s), ",
      resident_bytes, " bytes; in flight: ", in_flight_bytes, " bytes; fragmentation ",
      100.0 * f.combined, "%; largest free extent ", f.largest_free_extent_bytes,
      " bytes. The ladder evicted what it could (clean, dirty, in-flight, compaction). Release "
      "tensors sooner, acquire fewer at once, raise hbm_budget_bytes, or set on_oom = "
      "allow_degraded to serve from host memory.");
}

// ---- victims -----------------------------------------------------------------------------------

std::uint64_t room_maker::eviction_rank(std::uint32_t slot) const {
  const auto& victims = tensors_.victims();
  const std::uint64_t joined = victims.recency(slot);
  const std::uint64_t age = joined == 0 ? 0 : victims.clock() - joined;
  const access_schedule& schedule = future_.schedule;
  if (!future_.belady() || schedule.empty()) return age;
  const std::uint64_t d = schedule.distance(slot);
  // Never used again: evict first, the least recently used of those first.
  if (d == access_schedule::never) return (std::uint64_t{1} << 62) + age;
  return d;
}

std::optional<std::uint32_t> room_maker::best_in(victim_group g,
                                                 const std::vector<std::uint32_t>& skip) const {
  const auto skipped_slot = [&](std::uint32_t s) {
    return std::find(skip.begin(), skip.end(), s) != skip.end();
  };
  const auto pick = [&](std::uint32_t s) { return !skipped_slot(s); };
  const auto& victims = tensors_.victims();
  if (!future_.belady()) {
    const std::uint32_t s = victims.find_lru(g, pick);
    return s == victim_index::none ? std::nullopt : std::optional<std::uint32_t>(s);
  }
  // Never used again: first, least recent first; then routed group members, least popular first.
  if (const std::uint32_t s = victims.find_never(g, pick); s != victim_index::none) return s;
  for (const auto& [popularity, s] : victims.routed(g)) {
    if (!skipped_slot(s)) return s;
  }
  const auto& next = victims.next(g);
  for (auto it = next.rbegin(); it != next.rend(); ++it) {  // farthest next use
    if (!skipped_slot(it->second)) return it->second;
  }
  return std::nullopt;
}

bool room_maker::clean_evictable(std::uint32_t s) const {
  return tensors_.victims().key_of(s).group == victim_group::clean &&
         (tensors_.can_evict(s) || tensors_.can_evict_loading(s));
}

std::optional<std::uint32_t> room_maker::routed_victim() const {
  // A routed member the router chose (expect) is needed next: it evicts what its fault would,
  // sparing the other chosen ones. One only guessed (the lookahead's top-k) evicts only a tensor
  // the schedule never names, never a member nor a scheduled one: a guess that evicts a less
  // popular member is a bet the router often loses when room is short (htp-moe-bench at 30%:
  // 31% more bytes than with no guesses), and where room is ample the guess is resident already.
  const auto usable = [&](std::uint32_t s) {
    return !future_.is_expected(s) && (tensors_.can_evict(s) || tensors_.can_evict_loading(s));
  };
  if (!future_.expected.empty()) {
    const auto s = best_in(victim_group::clean, future_.expected);
    if (s && usable(*s)) return s;
    return std::nullopt;
  }
  const std::uint32_t s = tensors_.victims().find_never(victim_group::clean, usable);
  return s == victim_index::none ? std::nullopt : std::optional<std::uint32_t>(s);
}

std::optional<std::uint32_t> room_maker::prefetch_victim(std::uint32_t for_slot) const {
  const bool belady = future_.belady();
  if (belady && future_.groups.anchor_of(for_slot) >= 0) return routed_victim();
  if (!belady) {
    // LRU: the least recently used clean tensor outside the lookahead window.
    const auto window = future_.schedule.upcoming(config_.prefetch_lookahead + 1);
    const std::uint32_t s = tensors_.victims().find_lru(victim_group::clean, [&](std::uint32_t c) {
      return std::find(window.begin(), window.end(), c) == window.end() && tensors_.can_evict(c);
    });
    return s == victim_index::none ? std::nullopt : std::optional<std::uint32_t>(s);
  }
  if (config_.prefetch == prefetch_mode::pipeline) return pipeline_victim(for_slot);
  return min_page_ins_victim(for_slot);
}

std::optional<std::uint32_t> room_maker::pipeline_victim(std::uint32_t for_slot) const {
  // The tensor used farthest in the future outside the lookahead window, among all that hold HBM
  // (pinned and dirty ones included: if it is one of those, no prefetch now), and only if it is
  // needed later than the tensor coming in.
  const auto window = future_.schedule.upcoming(config_.prefetch_lookahead + 1);
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
  if (!best || !clean_evictable(*best) || best_rank <= eviction_rank(for_slot)) return std::nullopt;
  return best;
}

std::optional<std::uint32_t> room_maker::min_page_ins_victim(std::uint32_t for_slot) const {
  // min_page_ins: exactly the victim a demand fault of `for_slot` would evict when it comes (at
  // time T): the clean tensor (pinned ones count: they will be released by then) whose next use
  // after T is farthest. Evicting it now is the same decision made earlier, unless it is needed
  // before T, pinned, or busy: then no prefetch now (it would add a page-in).
  const auto& victims = tensors_.victims();
  const access_schedule& schedule = future_.schedule;
  const std::uint64_t T = schedule.next_use(for_slot);
  if (T == access_schedule::never) return std::nullopt;
  std::optional<std::uint32_t> best;
  std::uint64_t best_rank = 0;  // next use after T, `never` first then LRU among those
  bool best_never = false;
  std::uint64_t best_age_key = 0;
  const auto consider = [&](std::uint32_t s, std::uint64_t after_t) {
    const bool nv = after_t == access_schedule::never;
    const std::uint64_t age_key = victims.recency(s);
    const bool better = !best              ? true
                        : nv != best_never ? nv
                        : nv               ? age_key < best_age_key  // least recent of never-again
                                           : after_t > best_rank;
    if (better) {
      best = s;
      best_rank = after_t;
      best_never = nv;
      best_age_key = age_key;
    }
  };
  for (victim_group g : {victim_group::clean, victim_group::pinned}) {
    const std::uint32_t oldest_never = victims.find_never(g, [](std::uint32_t) { return true; });
    if (oldest_never != victim_index::none) {
      consider(oldest_never, access_schedule::never);
    } else if (!victims.routed(g).empty()) {  // the least popular routed member: next in line
      consider(victims.routed(g).begin()->second, access_schedule::never);
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
  if (next_use_now != access_schedule::never && next_use_now < T) return std::nullopt;
  if (!clean_evictable(*best)) return std::nullopt;
  return best;
}

// ---- copies ------------------------------------------------------------------------------------

void room_maker::load(std::uint32_t slot, extent where, transfer_priority priority) {
  const nvtx_range range(priority == transfer_priority::fault ? "htp fault" : "htp prefetch");
  // The copy waits for whatever may still read the destination (its fences) and for kernels that
  // may still write the source: a tensor last acquired in degraded mode was written in host memory.
  tensors_.settle(slot);
  const tensor_record& t = tensors_[slot];
  std::vector<event_ref> after = fence_events(where);
  for (const auto& r : t.release_events) after.push_back(r.event);
  transfer_ticket ticket;
  try {
    ticket = engine_.submit_load(where.ptr, t.source, priority, std::move(after));
  } catch (...) {
    free_hbm(where);
    throw;
  }
  add_fence_user(where, ticket);
  // Kept until the load has finished: the engine refers to them.
  fence_release_events(slot, where.ptr, ticket);
  tensors_.begin_load(slot, where, ticket, priority);
}

bool room_maker::discard_dead(std::uint32_t slot) {
  if (!tensors_.can_drop_dead(slot)) return false;
  tensors_.settle(slot);
  free_hbm(tensors_.drop_dead(slot));
  return true;
}

void room_maker::evict(std::uint32_t slot, cause why) {
  if (discard_dead(slot)) return;  // nothing to keep: its HBM is free, not an eviction
  tensors_.settle(slot);
  const tensor_record& t = tensors_[slot];
  if (!(is_mutable(t.kind) && t.dirty)) {
    free_hbm(tensors_.drop_to_host(slot, why));
    return;
  }
  const nvtx_range range("htp write-back");
  // The write-back reads what the kernels wrote: it waits for their release events on the device.
  // Those events join a fence over the extent until the write-back has finished.
  std::vector<event_ref> after;
  for (const auto& r : t.release_events) after.push_back(r.event);
  const transfer_ticket ticket =
      engine_.submit(t.source.raw_host(), t.hbm->ptr, t.bytes, copy_direction::device_to_host,
                     transfer_priority::writeback, std::move(after));
  fence_release_events(slot, t.hbm->ptr, ticket);
  tensors_.begin_write_back(slot, ticket, why);
}

void room_maker::evict_loading(std::uint32_t slot, cause why) {
  const tensor_record& t = tensors_[slot];
  detached_.emplace(t.ticket.id, detached_load{t.notes.fault_load, t.times.ticket_start, t.bytes,
                                               slot, t.generation, t.name});
  // Each release event follows the compute stream's wait for the load: a copy into this memory
  // that waits for them (the fence) starts after the load's last byte. That copy's wait never sits
  // on the prefetch stream ahead of the load's own chunks: the engine issues a request whose
  // events are pending only once it is the oldest queued, i.e. once the older load is fully
  // issued (Note [Fenced requests and deadlock]); on another stream it cannot block the load.
  free_hbm(tensors_.detach_load(slot, why));
}

// ---- completions -------------------------------------------------------------------------------

void room_maker::complete(const finished_transfer& done) {
  const auto slot = tensors_.slot_of_ticket(done.ticket.id);
  if (!slot) {
    detached_load_done(done);  // or a copy the pager no longer waits for
    return;
  }
  const bool ok = done.status == transfer_status::complete;
  switch (tensors_[*slot].pending) {
    case pending_kind::load:
      if (ok) {
        tensors_.finish_load(*slot, done.latency);
      } else {
        free_hbm(tensors_.fail_load(*slot, done.error));
      }
      break;
    case pending_kind::write_back:
      if (ok) {
        if (const auto freed = tensors_.finish_write_back(*slot, done.latency)) free_hbm(*freed);
      } else {
        tensors_.fail_write_back(*slot);
      }
      break;
    case pending_kind::move: finish_move(*slot, ok, done.latency); break;
    case pending_kind::none: break;
  }
  // An activation whose last use was released while this copy ran: its HBM goes now.
  discard_dead(*slot);
}

// ---- loads detached by evict_loading -----------------------------------------------------------

bool room_maker::detached_load_done(const finished_transfer& done) {
  const auto it = detached_.find(done.ticket.id);
  if (it == detached_.end()) return false;
  const detached_load& d = it->second;
  tensors_.detached_load_done(d.slot, d.generation);
  const bool ok = done.status == transfer_status::complete;
  observe_.detached_load_finished(done.ticket, ok, d.fault, d.started, done.latency, d.bytes,
                                  d.name);
  if (!ok) {
    // Its tensor was evicted (released, fenced) before the load finished; the host copy is
    // authoritative, but the kernels that read it got undefined bytes.
    logger().error(
        "pager: a page-in of '{}' (transfer {}) failed after the tensor was released and "
        "evicted; kernels ordered after that acquire read undefined bytes",
        d.name, done.ticket.id);
  }
  detached_.erase(it);
  return true;
}

void room_maker::detached_loads_of(std::uint32_t slot, std::vector<transfer_ticket>& out) const {
  if (tensors_[slot].detached_load_count == 0) return;  // the usual case: nothing to look for
  for (const auto& [id, d] : detached_) {
    if (d.slot == slot && d.generation == tensors_[slot].generation)
      out.push_back(transfer_ticket{id});
  }
}

void room_maker::detached_loads(std::vector<transfer_ticket>& out) const {
  for (const auto& [id, d] : detached_) out.push_back(transfer_ticket{id});
}

// ---- HBM and its fences ------------------------------------------------------------------------

void room_maker::poison(const extent& e, std::vector<event_ref>& readers) {
  // Poison after the last reader, so a stale read fails its checksum instead of passing by luck.
  // Stream-ordered, with no host wait under the lock: the poison's event fences the extent, so its
  // next user's copy starts after it (as it would after the readers). Best effort: a (non-sticky)
  // failure to queue the poison leaves the bytes as they are, which loses nothing.
  event_ref poisoned{};
  bool queued = false;
  try {
    poisoned = events_.take();
    for (event_ref r : readers) dev_.wait(r, private_stream_);
    for (event_ref f : fence_events(e)) dev_.wait(f, private_stream_);
    dev_.fill_pattern_async(e.ptr, e.bytes, 0xDBDBDBDBull, private_stream_);
    queued = true;
    dev_.record(poisoned, private_stream_);
    readers.push_back(poisoned);  // fences the extent with its readers (and releases with them)
  } catch (const cuda_error& err) {
    if (poisoned) events_.release(poisoned);  // never recorded: nothing fences on it
    if (err.is_sticky()) throw;
    // A poison queued without its event would be unfenced: wait for it here, on this error path
    // only, so that it cannot overwrite the next tenant's bytes.
    if (queued) {
      try {
        private_stream_.synchronize();
      } catch (...) {  // the stream's own failure is reported by whoever waits on it next
      }
    }
  }
}

void room_maker::free_hbm(const extent& e, std::vector<event_ref> readers) {
  if (config_.checked) poison(e, readers);
  if (!readers.empty()) {
    const auto* b = static_cast<const char*>(e.ptr);
    fences_.add(b, b + hbm_.rounded_size(e.bytes), std::move(readers));
  }
  hbm_.deallocate(e.ptr, e.bytes);
  held_ -= e.bytes;
  ++frees_;
}

std::vector<event_ref> room_maker::fence_events(const extent& e) const {
  std::vector<event_ref> out;
  const auto* b = static_cast<const char*>(e.ptr);
  fences_.events_over(b, b + e.bytes, out);
  return out;
}

void room_maker::fence_release_events(std::uint32_t slot, const void* at, transfer_ticket user) {
  if (tensors_[slot].release_events.empty()) return;
  const auto* b = static_cast<const char*>(at);
  fences_.add(b, b + hbm_.rounded_size(tensors_[slot].bytes), tensors_.take_release_events(slot),
              {user});
}

void room_maker::add_fence_user(const extent& e, transfer_ticket user) {
  const auto* b = static_cast<const char*>(e.ptr);
  fences_.add_user(b, b + e.bytes, user);
}

void room_maker::drop_fences() {
  fences_.drop_finished(
      [&](const fence& f) {
        return std::all_of(f.users.begin(), f.users.end(),
                           [&](transfer_ticket t) { return engine_.is_complete(t); }) &&
               std::all_of(f.events.begin(), f.events.end(),
                           [&](event_ref e) { return dev_.query(e); });
      },
      [&](event_ref e) { events_.release(e); });
}

void room_maker::synchronize_fences() {
  fences_.for_each([&](const fence& f) {  // kernels may still read memory already evicted
    for (auto e : f.events) dev_.synchronize(e);
  });
}

std::exception_ptr room_maker::wait(std::unique_lock<std::mutex>& lock, const wait_set& w) {
  std::exception_ptr error;
  // The events stay held by their owners while the lock is dropped: hold them here too, so none
  // is recycled (and re-recorded) while this thread waits on it.
  for (auto e : w.events) events_.retain(e);
  lock.unlock();
  try {
    for (auto t : w.tickets) {
      try {
        engine_.wait(t);
      } catch (const logic_error&) {
        // a failed copy: completions account it; the caller decides whether to retry or report it
        if (!error) error = std::current_exception();
      } catch (const io_error&) {  // a failed file read, likewise
        if (!error) error = std::current_exception();
      } catch (const corrupt_data&) {  // a page-in that failed its checksum, likewise
        if (!error) error = std::current_exception();
      }
    }
    for (auto e : w.events) dev_.synchronize(e);
  } catch (...) {
    lock.lock();
    for (auto e : w.events) events_.release(e);
    throw;
  }
  lock.lock();
  for (auto e : w.events) events_.release(e);
  return error;
}

}  // namespace htp::detail
