// Acquire and release, of one tensor or a list (a block table). The locked part decides and
// queues copies; waits on the caller's stream are enqueued after the lock is dropped, so a
// compute stream whose queue is full never blocks a thread that holds the pager's lock.
#include "pager/pager_impl.hpp"

#include <htp/detail/check.hpp>

#include "log.hpp"

namespace htp {

using detail::acquire_outcome;
using detail::pending_kind;
using detail::tensor_record;

void pager::impl::count_outcome(acquire_outcome o, int sign) {
  // Taking back never wraps: reset_metrics() may have run between the acquire and its failure.
  const auto add = [&](std::uint64_t& c) { c = sign > 0 ? c + 1 : (c > 0 ? c - 1 : 0); };
  switch (o) {
    case acquire_outcome::hit: add(counters.hits); break;
    case acquire_outcome::prefetch_hit: add(counters.hits); add(counters.prefetch_hits); break;
    case acquire_outcome::late_prefetch: add(counters.hits); add(counters.late_prefetches); break;
    case acquire_outcome::fault: add(counters.faults); break;
    case acquire_outcome::degraded: add(counters.degraded_acquires); break;
    case acquire_outcome::degraded_oom:
      add(counters.degraded_acquires);
      add(counters.oom.degraded);
      break;
  }
}

device_span pager::impl::acquire_one(std::unique_lock<std::mutex>& lock, tensor_handle h,
                                     acquire_outcome& outcome, transfer_ticket& pending) {
  bool compacted = false;
  pending = {};
  for (;;) {
    reap();
    tensor_record& t = get(h);
    const std::uint32_t slot = h.index;
    if (t.load_failed) {  // earlier acquirers still hold an extent whose page-in failed
      throw_copy_failed(detail::concat("acquire('", t.name, "')"),
                        "its page-in failed while other acquires hold it; retry after they release");
    }
    if (t.degraded) {  // already served zero-copy: every concurrent acquire shares that mode
      ++t.pins;
      outcome = acquire_outcome::degraded;
      return {dev.mapped_device_pointer(t.host.ptr), t.bytes, true};
    }
    outcome = acquire_outcome::hit;
    switch (t.where) {
      case residency::resident:
        if (t.prefetched_unused) outcome = acquire_outcome::prefetch_hit;
        if (t.pending == pending_kind::move) pending = t.ticket;
        break;
      case residency::loading:
        if (t.prefetched_unused) {
          outcome = acquire_outcome::late_prefetch;
          // Urgent now: move it ahead of other prefetches, keeping its fence and its word.
          if (t.ticket_priority != transfer_priority::fault &&
              engine->raise_priority(t.ticket, transfer_priority::fault)) {
            t.ticket_priority = transfer_priority::fault;
          }
        }
        pending = t.ticket;
        break;
      case residency::writing_back:  // cancel the eviction: the HBM copy is still good
        pending = t.ticket;
        t.where = residency::resident;
        t.dirty = false;
        break;
      case residency::host: {
        detail::wait_set waits;
        auto room = make_room(t.bytes, /*demand=*/true, slot, !compacted, waits);
        compacted = compacted || waits.compacted;
        if (!room) {
          if (!waits.empty()) {
            // A write-back, move or load the ladder waited for failed: report it rather than
            // retry, so a persistent device fault cannot spin here. Nothing changed for `h`.
            const auto blocked_from = std::chrono::steady_clock::now();
            const std::string failed = wait_for(lock, waits);
            counters.host_blocked_ns += ns_between(blocked_from, std::chrono::steady_clock::now());
            if (!failed.empty() && !waits.only_moves) {
              reap();
              throw_copy_failed(detail::concat("acquire('", get(h).name, "')"), failed);
            }
            continue;  // state may have changed meanwhile: start over
          }
          if (config.on_oom == oom_policy::allow_degraded && !t.file) {  // a file tensor has no host copy to map
            t.degraded = true;
            ++t.pins;
            outcome = acquire_outcome::degraded_oom;
            detail::logger().warn("pager: '{}' ({} bytes) served from mapped host memory (degraded): HBM is full of pinned tensors",
                         t.name, t.bytes);
            return {dev.mapped_device_pointer(t.host.ptr), t.bytes, true};
          }
          ++counters.oom.thrown;
          throw detail::ladder_exhausted(oom_message(t.bytes, t.name, "page in to HBM"), t.bytes);
        }
        start_load(slot, *room, transfer_priority::fault);
        t.fault_load = true;
        outcome = acquire_outcome::fault;
        pending = t.ticket;
        break;
      }
    }
    t.prefetched_unused = false;
    if (t.pins++ == 0 && trace) t.acquired_at = std::chrono::steady_clock::now();
    reindex(slot);
    return {t.hbm->ptr, t.bytes, false};
  }
}

void pager::impl::unpin(tensor_handle h) {
  tensor_record& t = get(h);
  if (--t.pins == 0) {
    t.degraded = false;
    t.access_counted = false;
    if (t.load_failed) {
      free_hbm(*t.hbm, take_release_events(t));
      t.hbm.reset();
      t.where = residency::host;
      t.load_failed = false;
    }
  }
  reindex(h.index);
}

void pager::impl::acquire_n(const tensor_handle* hs, std::size_t n, stream_ref compute, bool wait,
                            device_span* out) {
  detail::check_stream_handle(compute.native, "acquire: the compute stream");
  const auto called = std::chrono::steady_clock::now();  // a fault's wait starts here
  std::unique_lock lock(mutex);
  // Check every handle before anything changes.
  const std::uint64_t epoch = ++list_epoch;
  for (std::size_t i = 0; i < n; ++i) {
    tensor_record& t = get(hs[i]);
    HTP_EXPECTS(t.list_mark != epoch, invalid_argument, "acquire: '", t.name,
                "' appears twice in the list (entry ", i, "); name each tensor once");
    t.list_mark = epoch;
  }
  counters.acquires += n;
  std::vector<acquire_outcome> outcomes(n);
  std::vector<transfer_ticket> pending(n);
  std::size_t done = 0;
  // Acquires == hits + faults + degraded_acquires + failed_acquires + oom.thrown: an element that
  // did not succeed is counted failed, unless the ladder's own out_of_memory counted it.
  const auto fail_all = [&](bool ladder_counted_one) {
    for (std::size_t i = done; i-- > 0;) unpin(hs[i]);
    counters.failed_acquires += n - (ladder_counted_one ? 1 : 0);
  };
  try {
    for (; done < n; ++done) {
      out[done] = acquire_one(lock, hs[done], outcomes[done], pending[done]);
    }
  } catch (const detail::ladder_exhausted& e) {
    fail_all(true);
    throw out_of_memory(e.what(), e.requested_bytes());
  } catch (...) {
    fail_all(false);
    throw;
  }
  // Every element succeeded: now they are accesses (a failed call left the schedule alone).
  for (std::size_t i = 0; i < n; ++i) {
    count_outcome(outcomes[i], +1);
    // Acquired elsewhere meanwhile (on another stream, or by a call that dropped the lock while
    // this one waited): the same access, not a new one. Exactly one holder of overlapping pins
    // counts it, whichever succeeds first.
    tensor_record& t = tensors[hs[i].index];
    if (outcomes[i] == acquire_outcome::fault || outcomes[i] == acquire_outcome::late_prefetch) {
      if (t.pending == pending_kind::load) {
        if (t.wait_from == std::chrono::steady_clock::time_point{}) t.wait_from = called;  // reap records it
      } else if (!t.load_failed && t.loaded_at >= called) {  // arrived while this call waited
        record_fault_wait(called, t.loaded_at, t.bytes);
      }
    }
    if (t.access_counted) continue;
    t.access_counted = true;
    record_access(hs[i].index);
    reindex(hs[i].index);
  }
  prefetch_upcoming();
  sample_occupancy();
  lock.unlock();
  // Outside the lock: these may block if the caller's stream queue is full.
  try {
    for (std::size_t i = 0; i < n; ++i) {
      if (pending[i]) engine->wait_on(pending[i], compute);
    }
    if (wait) {
      const auto blocked_from = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < n; ++i) {
        if (pending[i]) engine->wait(pending[i]);
      }
      const std::uint64_t ns = ns_between(blocked_from, std::chrono::steady_clock::now());
      std::lock_guard relock(mutex);
      counters.host_blocked_ns += ns;
    }
  } catch (const std::exception& e) {
    // The bytes never arrived (or the stream could not be told to wait): undo the pins (nothing
    // was queued on `compute` after the acquire but waits) and report it.
    lock.lock();
    reap();
    for (std::size_t i = 0; i < n; ++i) {
      count_outcome(outcomes[i], -1);
      unpin(hs[i]);
    }
    counters.failed_acquires += n;
    throw_copy_failed(detail::concat("acquire('", get(hs[0]).name, "'", n > 1 ? " and others" : "",
                                     wait ? ", wait)" : ")"),
                      e.what());
  }
}

void pager::impl::release_n(const tensor_handle* hs, std::size_t n, stream_ref compute, bool dirty) {
  detail::check_stream_handle(compute.native, "release: the compute stream");
  std::unique_lock lock(mutex);
  const auto check = [&] {  // everything, before anything changes
    const std::uint64_t epoch = ++list_epoch;
    for (std::size_t i = 0; i < n; ++i) {
      tensor_record& t = get(hs[i]);
      HTP_EXPECTS(t.pins > 0, invalid_argument, "release('", t.name,
                  "') without a matching acquire (or released twice)");
      HTP_EXPECTS(!(dirty && t.kind == tensor_kind::weight), invalid_argument, "release('", t.name,
                  "', dirty = true): weights are read-only; register it as tensor_kind::mutable_state "
                  "if kernels write it");
      HTP_EXPECTS(t.list_mark != epoch, invalid_argument, "release: '", t.name,
                  "' appears twice in the list (entry ", i, "); name each tensor once");
      t.list_mark = epoch;
    }
  };
  reap();
  check();
  if (n == 0) return;
  const event_ref e = events.take();  // one event for the whole list, held once per tensor
  // Recording on the caller's stream may block while its queue is full: never under the lock.
  // The tensors stay pinned meanwhile, so nothing about them can change but their pin counts.
  const bool alone_at_start = records_in_progress++ == 0;
  const std::uint64_t my_record = ++records_started;
  lock.unlock();
  try {
    dev.record(e, compute);
  } catch (...) {
    lock.lock();
    --records_in_progress;
    events.release(e);
    throw;
  }
  lock.lock();
  --records_in_progress;
  // Nobody recorded concurrently: this event is the latest on `compute` of every release so far.
  const bool ordered = alone_at_start && records_started == my_record;
  try {
    reap();
    check();  // a concurrent release of the same pins (a caller's double release) shows here
  } catch (...) {
    events.release(e);
    throw;
  }
  for (std::size_t i = 1; i < n; ++i) events.retain(e);
  std::vector<detail::release_point> no_release_points;  // when unordered: supersede nothing
  const std::uint64_t seq = ++release_seq;
  auto& queue = releases[compute.native];
  std::string failed;  // a page-in that failed after acquire returned
  for (std::size_t i = 0; i < n; ++i) {
    tensor_record& t = tensors[hs[i].index];
    // A later release on the same stream supersedes an earlier one: streams run in order.
    bool replaced = false;
    for (auto& r : ordered ? t.release_events : no_release_points) {
      if (r.stream == compute) {
        events.release(r.event);
        r = {e, compute, seq};
        replaced = true;
        break;
      }
    }
    if (!replaced) t.release_events.push_back({e, compute, seq});
    queue.push_back({seq, hs[i].index, t.generation});
    if (--t.pins == 0) t.access_counted = false;
    if (t.load_failed) {
      if (t.pins == 0) {
        // The last holder of an extent whose page-in failed: free it after the kernels (fenced by
        // their release events) and tell the caller that what they read was not the tensor.
        t.load_failed = false;
        free_hbm(*t.hbm, take_release_events(t));
        t.hbm.reset();
        t.where = residency::host;
        if (failed.empty()) failed = t.name;
      }
      reindex(hs[i].index);
      continue;
    }
    if (t.degraded) {
      if (t.pins == 0) t.degraded = false;  // writes went straight to the authoritative host copy
    } else if (dirty && !t.device_resident) {  // no host copy to write back: nothing to mark
      t.dirty = true;
    }
    if (t.pins == 0 && trace) {
      trace->add(detail::trace_track::host_acquired, t.name, "acquired", t.acquired_at,
                 std::chrono::steady_clock::now());
    }
    reindex(hs[i].index);
  }
  if (!failed.empty()) {
    throw_copy_failed(detail::concat("release('", failed, "')"),
                      "its page-in failed after acquire returned; the release took effect, but "
                      "kernels ordered after that acquire read undefined bytes");
  }
  retire_releases(compute.native);
  prefetch_upcoming();  // the memory just released may be what the next layer needs
  maybe_auto_compact();
  sample_occupancy();
}

}  // namespace htp
