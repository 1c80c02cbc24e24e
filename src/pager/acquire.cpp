// Acquire and release, of one tensor or a list (a block table). The locked part decides and
// queues copies; waits on the caller's stream are enqueued after the lock is dropped, so a
// compute stream whose queue is full never blocks a thread that holds the pager's lock. An
// acquire is told to the observers once, when it ends: succeeded, or failed.
#include "pager/pager_impl.hpp"

#include <algorithm>
#include <array>
#include <htp/detail/check.hpp>
#include <utility>

#include "log.hpp"

namespace htp {

using detail::acquire_outcome;
using detail::pending_kind;
using detail::tensor_record;

bool pager::impl::page_in(std::unique_lock<std::mutex>& lock, std::uint32_t slot, bool& compacted,
                          acquire_outcome& outcome, std::vector<event_ref>& waits) {
  const tensor_record& t = tensors[slot];
  // A file or compressed tensor has no raw host copy to map: it cannot be served degraded.
  detail::demand_result r = room.for_demand(t.bytes, !compacted, t.source.raw_host() != nullptr);
  compacted = compacted || r.waits.compacted;
  if (r.room && t.dead) {
    // A dead activation: nothing to copy in. The kernels write the extent directly, so the compute
    // stream itself waits for what may still use it (the fences a load would have waited for).
    for (event_ref e : room.fence_events(*r.room)) {
      events.retain(e);
      waits.push_back(e);
    }
    tensors.begin_fresh(slot, *r.room);
    outcome = acquire_outcome::fresh;
    return true;
  }
  if (r.room) {
    room.load(slot, *r.room, transfer_priority::fault);
    outcome = acquire_outcome::fault;
    return true;
  }
  if (!r.waits.empty()) {
    // A write-back, move or load the ladder waited for failed: report it rather than retry, so a
    // persistent device fault cannot spin here. Nothing changed for the tensor.
    const std::string name = t.name;
    const auto blocked_from = std::chrono::steady_clock::now();
    const std::exception_ptr failed = room.wait(lock, r.waits);
    observe.all.blocked(blocked_from);
    if (failed && !r.waits.only_moves) {
      reap();
      throw_transfer_failed(detail::concat("acquire('", name, "')"), failed);
    }
    return false;  // state may have changed meanwhile: start over
  }
  if (r.degraded) {
    tensors.pin_degraded(slot);
    outcome = acquire_outcome::degraded_oom;
    detail::logger().warn(
        "pager: '{}' ({} bytes) served from mapped host memory (degraded): HBM is full of "
        "pinned tensors",
        t.name, t.bytes);
    return true;
  }
  throw detail::ladder_exhausted(room.oom_message(t.bytes, t.name, "page in to HBM"), t.bytes);
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
      return {dev.mapped_device_pointer(t.source.raw_host()), t.bytes, true};
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
          if (t.notes.ticket_priority != transfer_priority::fault &&
              tiers.engine->raise_priority(t.ticket, transfer_priority::fault)) {
            tensors.raise_to_fault(slot);
          }
        }
        pending = t.ticket;
        break;
      case residency::writing_back:  // cancel the eviction: the HBM copy is still good
        pending = t.ticket;
        tensors.cancel_write_back(slot);
        break;
      case residency::host:
        if (!page_in(lock, slot, compacted, outcome, waits)) continue;
        if (outcome == acquire_outcome::degraded_oom) {
          const tensor_record& r = tensors[slot];
          return {dev.mapped_device_pointer(r.source.raw_host()), r.bytes, true};
        }
        pending = tensors[slot].ticket;
        break;
    }
    tensors.pin(slot);
    const tensor_record& r = tensors[slot];  // (page_in may have dropped the lock)
    // A mutable tensor's kernels on other streams may have written it: this stream waits for their
    // release events on the device, as it would for a copy (its own stream is ordered already).
    if (is_mutable(r.kind)) {
      for (const auto& p : r.release_events) {
        if (p.stream == compute) continue;
        events.retain(p.event);
        waits.push_back(p.event);
      }
    }
    return {r.hbm->ptr, r.bytes, false};
  }
}

namespace {

/// What the observers learn of an acquire that succeeded: each element's outcome, and the load
/// it waits for (still in flight) or when its last load's bytes arrived. On the stack for a short
/// list (the common call: one tensor, or a layer's few).
void tell_acquired(detail::pager_observer& observe, const detail::tensor_table& tensors,
                   const tensor_handle* hs, const std::vector<acquire_outcome>& outcomes,
                   std::chrono::steady_clock::time_point called) {
  std::array<detail::acquired_element, 8> few;
  std::vector<detail::acquired_element> many(outcomes.size() > few.size() ? outcomes.size() : 0);
  detail::acquired_element* out = many.empty() ? few.data() : many.data();
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const tensor_record& t = tensors[hs[i].index];
    out[i] = {outcomes[i], t.bytes, t.pending == pending_kind::load ? t.ticket : transfer_ticket{},
              t.times.loaded_at};
  }
  observe.acquire_succeeded(out, outcomes.size(), called);
}

}  // namespace

void pager::impl::check_not_capturing(stream_ref compute, const char* call) const {
  HTP_EXPECTS(!dev.is_capturing(compute), logic_error, call,
              ": the compute stream is capturing a CUDA graph, and the dynamic pager hands out a "
              "new address per acquire and decides on the host what to copy, so a graph could "
              "not replay it. Capture a static plan instead (htp/static_step.hpp; from Python "
              "htp.torch.offload(static=True)), or acquire outside the capture");
}

void pager::impl::acquire_n(const tensor_handle* hs, std::size_t n, stream_ref compute, bool wait,
                            device_span* out) {
  detail::check_stream_handle(compute.native, "acquire: the compute stream");
  check_not_capturing(compute, "acquire");
  const auto called = std::chrono::steady_clock::now();  // a fault's wait starts here
  std::unique_lock lock(mutex);
  tensors.check_list(hs, n, "acquire");  // every handle, before anything changes
  std::vector<acquire_outcome> outcomes(n);
  std::vector<transfer_ticket> pending(n);
  std::vector<event_ref> writes;  // other streams' release events to wait for (held)
  const auto let_go_of_writes = [&] {
    for (event_ref e : writes) events.release(e);
  };
  std::size_t done = 0;
  const auto fail = [&](bool exhausted) {  // under the lock: undo the pins, tell it once
    for (std::size_t i = done; i-- > 0;) unpin(hs[i].index);
    let_go_of_writes();
    observe.all.acquire_failed(n, exhausted);
  };
  try {
    for (; done < n; ++done) {
      out[done] = acquire_one(lock, hs[done], compute, outcomes[done], pending[done], writes);
    }
  } catch (const detail::ladder_exhausted& e) {
    fail(true);
    throw out_of_memory(e.what(), e.requested_bytes());
  } catch (...) {
    fail(false);
    throw;
  }
  const auto late = static_cast<std::uint32_t>(
      std::count(outcomes.begin(), outcomes.end(), acquire_outcome::late_prefetch));
  detail::prefetcher::marks marks = prefetch.plan(hs, n, compute, late);
  prefetch.accessed(hs, n);  // every element succeeded: now they are accesses
  prefetch.upcoming(room);
  sample_occupancy();
  // Outside the lock: these may block if the caller's stream queue is full.
  lock.unlock();
  std::chrono::steady_clock::time_point blocked_from{};
  std::size_t at = 0;  // the element whose page-in is being waited for
  try {
    prefetch.record_before(marks, compute);
    for (event_ref e : writes) dev.wait(e, compute);
    for (; at < n; ++at) {
      if (pending[at]) tiers.engine->wait_on(pending[at], compute);
    }
    prefetch.record_after(marks, compute, true);
    if (wait) {
      blocked_from = std::chrono::steady_clock::now();
      // The host uses the memory next (a sim caller's CPU tensors, a host-side check): what the
      // stream was told to wait for must have passed, not only the page-ins: other streams'
      // writes, and for a fresh activation the kernels still using its new extent.
      for (event_ref e : writes) dev.synchronize(e);
      for (at = 0; at < n; ++at) {
        if (pending[at]) tiers.engine->wait(pending[at]);
      }
    }
  } catch (const std::exception&) {
    // The bytes never arrived (or the stream could not be told to wait): undo the pins (nothing
    // was queued on `compute` after the acquire but waits) and report it.
    const std::exception_ptr cause = std::current_exception();
    prefetch.record_after(marks, compute, false);
    lock.lock();
    reap();
    done = n;
    fail(false);
    const tensor_record& failed = tensors[hs[std::min(at, n - 1)].index];
    throw_transfer_failed(detail::concat("acquire('", failed.name, "'", n > 1 ? " and others" : "",
                                         wait ? ", wait)" : ")"),
                          cause);
  }
  lock.lock();
  if (wait) observe.all.blocked(blocked_from);
  let_go_of_writes();
  tell_acquired(observe.all, tensors, hs, outcomes, called);
}

void pager::impl::check_release(const tensor_handle* hs, std::size_t n, bool dirty, bool last_use) {
  const char* call = last_use ? "release_last_use" : "release";
  tensors.check_list(hs, n, call, [&](const tensor_record& t) {
    HTP_EXPECTS(t.pins > 0, invalid_argument, call, "('", t.name,
                "') without a matching acquire (or released twice)");
    HTP_EXPECTS(
        !(dirty && t.kind == tensor_kind::weight), invalid_argument, "release('", t.name,
        "', dirty = true): weights are read-only; register it as tensor_kind::mutable_state "
        "if kernels write it");
    if (!last_use) return;
    HTP_EXPECTS(t.kind == tensor_kind::activation, invalid_argument, "release_last_use('", t.name,
                "'): only an activation's content dies at a last use; register it as "
                "tensor_kind::activation, or call release()");
    HTP_EXPECTS(t.pins == 1, invalid_argument, "release_last_use('", t.name, "'): ", t.pins,
                " acquires still pin it; release the others first, so that the last use is the "
                "last holder");
  });
}

void pager::impl::release_n(const tensor_handle* hs, std::size_t n, stream_ref compute, bool dirty,
                            bool last_use) {
  const char* call = last_use ? "release_last_use" : "release";
  detail::check_stream_handle(compute.native, last_use ? "release_last_use: the compute stream"
                                                       : "release: the compute stream");
  check_not_capturing(compute, call);
  std::unique_lock lock(mutex);
  reap();
  check_release(hs, n, dirty, last_use);  // everything, before anything changes
  if (n == 0) return;
  const event_ref e = events.take();  // one event for the whole list, held once per tensor
  // Recording on the caller's stream may block while its queue is full: never under the lock.
  // The tensors stay pinned meanwhile, so nothing about them can change but their pin counts.
  const bool alone_at_start = releases.records_in_progress++ == 0;
  const std::uint64_t my_record = ++releases.records_started;
  lock.unlock();
  try {
    dev.record(e, compute);
  } catch (...) {
    lock.lock();
    --releases.records_in_progress;
    events.release(e);
    throw;
  }
  lock.lock();
  --releases.records_in_progress;
  // Nobody recorded concurrently: this event is the latest on `compute` of every release so far.
  const bool ordered = alone_at_start && releases.records_started == my_record;
  try {
    reap();
    // A concurrent release of the same pins (a caller's double release) shows here.
    check_release(hs, n, dirty, last_use);
  } catch (...) {
    events.release(e);
    throw;
  }
  for (std::size_t i = 1; i < n; ++i) events.retain(e);
  unpin_released(hs, n, {e, compute, ++releases.seq}, dirty, last_use, ordered);
  tensors.retire_releases(compute.native);
  prefetch.upcoming(room);  // the memory just released may be what the next layer needs
  room.maybe_compact();
  sample_occupancy();
}

void pager::impl::unpin_released(const tensor_handle* hs, std::size_t n,
                                 detail::release_point point, bool dirty, bool last_use,
                                 bool ordered) {
  std::string failed;  // a page-in that failed after acquire returned
  std::exception_ptr cause;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t slot = hs[i].index;
    auto freed = last_use ? tensors.release_last_use(slot, point, /*supersede=*/ordered)
                          : tensors.release(slot, point, dirty, /*supersede=*/ordered);
    // A dead activation's extent goes back now, fenced by the event just recorded.
    if (last_use) room.discard_dead(slot);
    if (!freed) continue;
    // The last holder of an extent whose page-in failed: freed after the kernels, and the caller
    // told that what they read was not the tensor.
    room.free_hbm(std::move(*freed));
    if (failed.empty()) {
      failed = tensors[slot].name;
      cause = tensors[slot].times.load_error;
    }
  }
  if (failed.empty()) return;
  const std::string what = detail::concat(
      last_use ? "release_last_use('" : "release('", failed,
      "'): its page-in failed after acquire returned; the release took effect, but kernels "
      "ordered after that acquire read undefined bytes");
  if (cause) throw_transfer_failed(what, cause);  // typed: io_error, corrupt_data
  throw_copy_failed(what, "the copy failed on the device");
}

}  // namespace htp
