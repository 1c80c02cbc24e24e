// Completions: what the transfer engine finished since the last call (loads, write-backs, moves,
// and loads detached by evict_loading), and release events retired as their kernels finish.
// Runs with the pager's mutex held, on every call; costs O(what finished), never a scan of the
// tensors (docs/pager.md, "Costs").
#include "pager/pager_impl.hpp"

#include "log.hpp"

#include <algorithm>

namespace htp {

using detail::pending_kind;
using detail::tensor_record;

void pager::impl::reap() {
  for (const finished_transfer& done : engine->take_finished()) {
    const auto owner = ticket_slot.find(done.ticket.id);
    if (owner == ticket_slot.end()) {  // not a copy the pager is waiting for any more
      const auto d = detached_loads.find(done.ticket.id);
      if (d == detached_loads.end()) continue;
      if (tensors[d->second.slot].generation == d->second.generation) --tensors[d->second.slot].detached_load_count;
      if (done.status == transfer_status::complete) {  // its metrics, as if still attached
        if (d->second.fault_load) fault_latency.record(static_cast<std::uint64_t>(done.latency.count()));
        const auto at = d->second.started + std::chrono::duration_cast<std::chrono::steady_clock::duration>(done.latency);
        if (trace) {
          trace->add(detail::trace_track::prefetch, d->second.traced_name,
                     d->second.fault_load ? "fault" : "late prefetch", d->second.started, at);
        }
        record_fault_wait(d->second.wait_from, at, d->second.bytes);
      } else {
        // Its tensor was evicted (released, fenced) before the load finished; the host copy is
        // authoritative, but the kernels that read it got undefined bytes.
        ++counters.failed_loads;
        detail::logger().error("pager: a page-in (transfer {}) failed after its tensor was released and evicted; "
                      "kernels ordered after that acquire read undefined bytes",
                      done.ticket.id);
      }
      detached_loads.erase(d);
      continue;
    }
    const std::uint32_t slot = owner->second;
    tensor_record& t = tensors[slot];
    const bool ok = done.status == transfer_status::complete;
    const std::optional<std::chrono::nanoseconds> lat =
        ok ? std::optional<std::chrono::nanoseconds>(done.latency) : std::nullopt;
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
          t.loaded_at = t.ticket_start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                             lat.value_or(std::chrono::nanoseconds(0)));
          record_fault_wait(t.wait_from, t.loaded_at, t.bytes);  // if an acquire waits for it
          t.wait_from = {};
        } else if (t.pins > 0) {
          // Acquired already (acquire does not wait unless asked): kernels ordered after the
          // acquire may be reading the extent. Keep it until the last release, which frees it and
          // reports the failure; the host copy stays authoritative.
          t.load_failed = true;
        } else {  // the bytes never arrived: back to host, the host copy is still authoritative
          // Kernels acquired and released it meanwhile may still run: fence the extent.
          free_hbm(*t.hbm, take_release_events(t));
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
    set_pending(slot, pending_kind::none);
    reindex(slot);
  }
  for (auto it = releases.begin(); it != releases.end();) {  // the streams with releases pending
    retire_releases(it->first);
    it = it->second.empty() ? releases.erase(it) : std::next(it);
  }
  drop_fences();
}

void pager::impl::retire_releases(void* s) {
  auto it = releases.find(s);
  if (it == releases.end()) return;
  auto& queue = it->second;
  while (!queue.empty()) {
    const detail::release_entry& r = queue.front();
    tensor_record& t = tensors[r.slot];
    auto point = t.live && t.generation == r.generation
                     ? std::find_if(t.release_events.begin(), t.release_events.end(),
                                    [&](const detail::release_point& p) { return p.seq == r.seq; })
                     : t.release_events.end();
    if (point != t.release_events.end()) {
      if (!dev.query(point->event)) return;  // and so are the younger ones on this stream
      events.release(point->event);
      t.release_events.erase(point);
    }
    queue.pop_front();
  }
}

bool pager::impl::settle(tensor_record& t) {
  auto& ev = t.release_events;
  ev.erase(std::remove_if(ev.begin(), ev.end(),
                          [&](const detail::release_point& r) {
                            if (!dev.query(r.event)) return false;
                            events.release(r.event);
                            return true;
                          }),
           ev.end());
  return ev.empty();
}

std::vector<event_ref> pager::impl::take_release_events(tensor_record& t) {
  std::vector<event_ref> out;
  out.reserve(t.release_events.size());
  for (const auto& r : t.release_events) out.push_back(r.event);
  t.release_events.clear();
  return out;
}

}  // namespace htp
