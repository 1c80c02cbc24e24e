// Acquire and release, of one tensor or a list (a block table). The locked part decides and
// queues copies; waits on the caller's stream are enqueued after the lock is dropped, so a
// compute stream whose queue is full never blocks a thread that holds the pager's lock.
#include "pager/pager_impl.hpp"

#include <algorithm>
#include <htp/detail/check.hpp>
#include <utility>

#include "log.hpp"

namespace htp {

using detail::acquire_outcome;
using detail::pending_kind;
using detail::tensor_record;

void pager::impl::throw_transfer_failed(const std::string& what, std::exception_ptr cause) {
  try {
    std::rethrow_exception(cause);
  } catch (const io_error& e) {
    throw io_error(detail::concat(what, ": a page-in could not read the tensor's file: ", e.what()),
                   e.path(), e.error_number());
  } catch (const corrupt_data& e) {
    throw corrupt_data(detail::concat(
        what,
        ": a page-in failed its checksum on the device (the tensor is back on its source, "
        "nothing else is affected; restore the bytes and acquire again): ",
        e.what()));
  } catch (const std::exception& e) {
    throw_copy_failed(what, e.what());
  }
}

void pager::impl::check_list(const tensor_handle* hs, std::size_t n, const char* what,
                             const std::function<void(const tensor_record&)>& check) {
  const std::uint64_t epoch = ++list_epoch;
  for (std::size_t i = 0; i < n; ++i) {
    const tensor_record& t = tensors.get(hs[i]);
    if (check) check(t);
    HTP_EXPECTS(t.notes.list_mark != epoch, invalid_argument, what, ": '", t.name,
                "' appears twice in the list (entry ", i, "); name each tensor once");
    tensors.notes(hs[i].index).list_mark = epoch;
  }
}

bool pager::impl::page_in(std::unique_lock<std::mutex>& lock, std::uint32_t slot, bool& compacted,
                          acquire_outcome& outcome) {
  const tensor_record& t = tensors[slot];
  detail::wait_set waits;
  const auto room = make_room(t.bytes, /*demand=*/true, slot, !compacted, waits);
  compacted = compacted || waits.compacted;
  if (room) {
    start_load(slot, *room, transfer_priority::fault);
    tensors.notes(slot).fault_load = true;
    outcome = acquire_outcome::fault;
    return true;
  }
  if (!waits.empty()) {
    // A write-back, move or load the ladder waited for failed: report it rather than retry, so a
    // persistent device fault cannot spin here. Nothing changed for the tensor.
    const std::string name = t.name;
    const auto blocked_from = std::chrono::steady_clock::now();
    const std::exception_ptr failed = wait_for(lock, waits);
    stats.blocked_since(blocked_from);
    if (failed && !waits.only_moves) {
      reap();
      throw_transfer_failed(detail::concat("acquire('", name, "')"), failed);
    }
    return false;  // state may have changed meanwhile: start over
  }
  if (config.on_oom == oom_policy::allow_degraded && !t.file &&
      !t.coded) {  // a file or compressed tensor has no raw host copy to map
    tensors.pin_degraded(slot);
    outcome = acquire_outcome::degraded_oom;
    detail::logger().warn(
        "pager: '{}' ({} bytes) served from mapped host memory (degraded): HBM is full of "
        "pinned tensors",
        t.name, t.bytes);
    return true;
  }
  stats.rung(&oom_ladder_counts::thrown);
  throw detail::ladder_exhausted(oom_message(t.bytes, t.name, "page in to HBM"), t.bytes);
}

device_span pager::impl::acquire_one(std::unique_lock<std::mutex>& lock, tensor_handle h,
                                     stream_ref compute, acquire_outcome& outcome,
                                     transfer_ticket& pending, std::vector<event_ref>& waits) {
  bool compacted = false;
  pending = {};
  for (;;) {
    reap();
    const std::uint32_t slot = slot_of(h);
    const tensor_record& t = tensors[slot];
    if (t.load_failed) {  // earlier acquirers still hold an extent whose page-in failed
      throw_copy_failed(
          detail::concat("acquire('", t.name, "')"),
          "its page-in failed while other acquires hold it; retry after they release");
    }
    if (t.degraded) {  // already served zero-copy: every concurrent acquire shares that mode
      tensors.pin_degraded(slot);
      outcome = acquire_outcome::degraded;
      return {dev.mapped_device_pointer(t.host.ptr), t.bytes, true};
    }
    outcome = acquire_outcome::hit;
    switch (t.where) {
      case residency::resident:
        if (t.notes.prefetched_unused) outcome = acquire_outcome::prefetch_hit;
        if (t.pending == pending_kind::move) pending = t.ticket;
        break;
      case residency::loading:
        if (t.notes.prefetched_unused) {
          outcome = acquire_outcome::late_prefetch;
          // Urgent now: move it ahead of other prefetches, keeping its fence and its word.
          auto& notes = tensors.notes(slot);
          if (notes.ticket_priority != transfer_priority::fault &&
              engine->raise_priority(t.ticket, transfer_priority::fault)) {
            notes.ticket_priority = transfer_priority::fault;
          }
        }
        pending = t.ticket;
        break;
      case residency::writing_back:  // cancel the eviction: the HBM copy is still good
        pending = t.ticket;
        tensors.cancel_write_back(slot);
        break;
      case residency::host:
        if (!page_in(lock, slot, compacted, outcome)) continue;
        if (outcome == acquire_outcome::degraded_oom) {
          return {dev.mapped_device_pointer(tensors[slot].host.ptr), tensors[slot].bytes, true};
        }
        pending = tensors[slot].ticket;
        break;
    }
    tensors.pin(slot);
    const tensor_record& r = tensors[slot];  // (page_in may have dropped the lock)
    // A mutable tensor's kernels on other streams may have written it: this stream waits for their
    // release events on the device, as it would for a copy (its own stream is ordered already).
    if (r.kind == tensor_kind::mutable_state) {
      for (const auto& p : r.release_events) {
        if (p.stream == compute) continue;
        events.retain(p.event);
        waits.push_back(p.event);
      }
    }
    return {r.hbm->ptr, r.bytes, false};
  }
}

void pager::impl::unpin(std::uint32_t slot) { free_hbm(tensors.unpin(slot)); }

void pager::impl::account_acquire(const tensor_handle* hs, std::size_t n,
                                  const std::vector<acquire_outcome>& outcomes,
                                  std::chrono::steady_clock::time_point called) {
  for (std::size_t i = 0; i < n; ++i) {
    stats.outcome(outcomes[i], +1);
    const std::uint32_t slot = hs[i].index;
    const tensor_record& t = tensors[slot];
    auto& notes = tensors.notes(slot);
    if (outcomes[i] == acquire_outcome::fault || outcomes[i] == acquire_outcome::late_prefetch) {
      if (t.pending == pending_kind::load) {
        if (notes.wait_from == std::chrono::steady_clock::time_point{})
          notes.wait_from = called;                              // reap records it
      } else if (!t.load_failed && notes.loaded_at >= called) {  // arrived while this call waited
        stats.fault_wait(called, notes.loaded_at, t.bytes);
      }
    }
    // Acquired elsewhere meanwhile (on another stream, or by a call that dropped the lock while
    // this one waited): the same access, not a new one. Exactly one holder of overlapping pins
    // counts it, whichever succeeds first.
    if (notes.access_counted) continue;
    notes.access_counted = true;
    record_access(slot);
    if (groups.on_acquire(slot)) tensors.reindex_all();  // every score was rescaled (rare)
    tensors.reindex(slot);
  }
}

detail::compute_pace::marks pager::impl::plan_pace(const tensor_handle* hs, std::size_t n,
                                                   stream_ref compute) {
  if (config.lookahead != lookahead_mode::automatic || schedule.empty() ||
      schedule.remaining() == 0 || schedule.upcoming_at(0) != hs[0].index) {
    return {};
  }
  std::size_t count = 1;  // the scheduled accesses this call makes, in order
  while (count < n && count < schedule.remaining() &&
         schedule.upcoming_at(count) == hs[count].index)
    ++count;
  return pace.plan(schedule.position_at(0), count, schedule.cycle(), compute);
}

bool pager::impl::record_pace_mark(event_ref e, stream_ref compute) noexcept {
  if (!e) return true;
  try {
    dev.record(e, compute);
    return true;
  } catch (...) {  // a timing mark only: the acquire goes on (its waits report a broken device)
    return false;
  }
}

void pager::impl::acquire_n(const tensor_handle* hs, std::size_t n, stream_ref compute, bool wait,
                            device_span* out) {
  detail::check_stream_handle(compute.native, "acquire: the compute stream");
  const auto called = std::chrono::steady_clock::now();  // a fault's wait starts here
  std::unique_lock lock(mutex);
  check_list(hs, n, "acquire");  // every handle, before anything changes
  stats.add(&pager_metrics::acquires, n);
  std::vector<acquire_outcome> outcomes(n);
  std::vector<transfer_ticket> pending(n);
  std::vector<event_ref> writes;  // other streams' release events to wait for (held)
  const auto let_go_of_writes = [&] {
    for (event_ref e : writes) events.release(e);
  };
  std::size_t done = 0;
  // Acquires == hits + faults + degraded_acquires + failed_acquires + oom.thrown: an element that
  // did not succeed is counted failed, unless the ladder's own out_of_memory counted it.
  const auto fail_all = [&](bool ladder_counted_one) {
    for (std::size_t i = done; i-- > 0;) unpin(hs[i].index);
    let_go_of_writes();
    stats.add(&pager_metrics::failed_acquires, n - (ladder_counted_one ? 1 : 0));
  };
  try {
    for (; done < n; ++done) {
      out[done] = acquire_one(lock, hs[done], compute, outcomes[done], pending[done], writes);
    }
  } catch (const detail::ladder_exhausted& e) {
    fail_all(true);
    throw out_of_memory(e.what(), e.requested_bytes());
  } catch (...) {
    fail_all(false);
    throw;
  }
  const detail::compute_pace::marks marks = plan_pace(hs, n, compute);
  const auto late = static_cast<std::uint32_t>(
      std::count(outcomes.begin(), outcomes.end(), acquire_outcome::late_prefetch));
  const detail::wait_probes::probe probe = probes.take(late);  // did the stream wait for them?
  account_acquire(hs, n, outcomes, called);  // every element succeeded: now they are accesses
  prefetch_upcoming();
  sample_occupancy();
  lock.unlock();
  // Outside the lock: these may block if the caller's stream queue is full.
  std::chrono::steady_clock::time_point blocked_from{};
  std::size_t at = 0;  // the element whose page-in is being waited for
  try {
    record_pace_mark(marks.close, compute);  // the compute before this call ends here
    const bool reached = record_pace_mark(probe.reach, compute);
    for (event_ref e : writes) dev.wait(e, compute);
    for (; at < n; ++at) {
      if (pending[at]) engine->wait_on(pending[at], compute);
    }
    probes.recorded(probe, reached && record_pace_mark(probe.met, compute));
    pace.recorded(marks, record_pace_mark(marks.open, compute));  // ... and this call's begins
    if (wait) {
      blocked_from = std::chrono::steady_clock::now();
      for (at = 0; at < n; ++at) {
        if (pending[at]) engine->wait(pending[at]);
      }
    }
  } catch (const std::exception&) {
    // The bytes never arrived (or the stream could not be told to wait): undo the pins (nothing
    // was queued on `compute` after the acquire but waits) and report it.
    const std::exception_ptr cause = std::current_exception();
    lock.lock();
    pace.recorded(marks, false);
    probes.recorded(probe, false);
    reap();
    let_go_of_writes();
    for (std::size_t i = 0; i < n; ++i) {
      stats.outcome(outcomes[i], -1);
      unpin(hs[i].index);
    }
    stats.add(&pager_metrics::failed_acquires, n);
    const tensor_record& failed = tensors[hs[std::min(at, n - 1)].index];
    throw_transfer_failed(detail::concat("acquire('", failed.name, "'", n > 1 ? " and others" : "",
                                         wait ? ", wait)" : ")"),
                          cause);
  }
  if (!wait && writes.empty()) return;
  lock.lock();
  if (wait) stats.blocked_since(blocked_from);
  let_go_of_writes();
}

void pager::impl::release_n(const tensor_handle* hs, std::size_t n, stream_ref compute,
                            bool dirty) {
  detail::check_stream_handle(compute.native, "release: the compute stream");
  std::unique_lock lock(mutex);
  const auto check = [&] {  // everything, before anything changes
    check_list(hs, n, "release", [&](const tensor_record& t) {
      HTP_EXPECTS(t.pins > 0, invalid_argument, "release('", t.name,
                  "') without a matching acquire (or released twice)");
      HTP_EXPECTS(
          !(dirty && t.kind == tensor_kind::weight), invalid_argument, "release('", t.name,
          "', dirty = true): weights are read-only; register it as tensor_kind::mutable_state "
          "if kernels write it");
    });
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
  const std::uint64_t seq = ++release_seq;
  std::string failed;  // a page-in that failed after acquire returned
  std::exception_ptr cause;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t slot = hs[i].index;
    auto freed = tensors.release(slot, {e, compute, seq}, dirty, /*supersede=*/ordered);
    if (!freed) continue;
    // The last holder of an extent whose page-in failed: freed after the kernels, and the caller
    // told that what they read was not the tensor.
    free_hbm(std::move(*freed));
    if (failed.empty()) {
      failed = tensors[slot].name;
      cause = std::exchange(tensors.notes(slot).load_error, nullptr);
    }
  }
  if (!failed.empty()) {
    const std::string what = detail::concat(
        "release('", failed,
        "'): its page-in failed after acquire returned; the release took effect, but kernels "
        "ordered after that acquire read undefined bytes");
    if (cause) throw_transfer_failed(what, cause);  // typed: io_error, corrupt_data
    throw_copy_failed(what, "the copy failed on the device");
  }
  tensors.retire_releases(compute.native);
  prefetch_upcoming();  // the memory just released may be what the next layer needs
  maybe_auto_compact();
  sample_occupancy();
}

}  // namespace htp
