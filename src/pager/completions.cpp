// Completions: what the transfer engine finished since the last call (loads, write-backs, moves,
// and loads detached by evict_loading), and release points retired as their kernels finish.
// Runs with the pager's mutex held, on every call; costs O(what finished), never a scan of the
// tensors (docs/pager.md, "Costs").
#include "pager/pager_impl.hpp"

#include "log.hpp"

namespace htp {

using detail::pending_kind;
using detail::tensor_record;

void pager::impl::reap() {
  for (const finished_transfer& done : engine->take_finished()) {
    if (const auto slot = tensors.slot_of_ticket(done.ticket.id)) {
      copy_done(*slot, done);
      continue;
    }
    const auto d = detached_loads.find(done.ticket.id);
    if (d == detached_loads.end()) continue;  // not a copy the pager is waiting for any more
    detached_load_done(done, d->second);
    detached_loads.erase(d);
  }
  tensors.retire_all_releases();
  probes.harvest(
      [&](std::uint32_t n) { stats.add(&pager_metrics::prefetches_on_time, n); },
      [&](std::uint32_t n, std::chrono::nanoseconds stall) { stats.prefetch_stall(n, stall); });
  drop_fences();
}

namespace {

bool is_corrupt(const std::exception_ptr& e) {
  if (!e) return false;
  try {
    std::rethrow_exception(e);
  } catch (const corrupt_data&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

void pager::impl::copy_done(std::uint32_t slot, const finished_transfer& done) {
  const tensor_record& t = tensors[slot];
  const bool ok = done.status == transfer_status::complete;
  stats.copy_finished(t, ok ? std::optional<std::chrono::nanoseconds>(done.latency) : std::nullopt);
  switch (t.pending) {
    case pending_kind::load:
      if (ok) {
        auto& notes = tensors.notes(slot);
        notes.loaded_at =
            notes.ticket_start +
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(done.latency);
        stats.fault_wait(notes.wait_from, notes.loaded_at, t.bytes);  // if an acquire waits for it
        notes.wait_from = {};
        tensors.finish_load(slot);
      } else {
        if (is_corrupt(done.error)) stats.add(&pager_metrics::corrupt_page_ins, 1);
        tensors.notes(slot).load_error = done.error;
        free_hbm(tensors.fail_load(slot));
      }
      break;
    case pending_kind::write_back:
      if (ok) {
        if (const auto freed = tensors.finish_write_back(slot)) free_hbm(*freed);
      } else {
        tensors.fail_write_back(slot);
      }
      break;
    case pending_kind::move: {
      const slab_move m = tensors.finish_move(slot, ok);
      if (ok) {
        hbm->commit_move(m);
        hbm_bytes_held -= m.from.bytes;
      } else {
        hbm->cancel_move(m);
        hbm_bytes_held -= m.to.bytes;
      }
      --moves_in_flight;
      break;
    }
    case pending_kind::none: break;
  }
}

void pager::impl::detached_load_done(const finished_transfer& done, const detached_load& d) {
  tensors.detached_load_done(d.slot, d.generation);
  const bool ok = done.status == transfer_status::complete;
  stats.detached_load_finished(ok, d.fault_load, d.wait_from, d.started, done.latency, d.bytes,
                               d.traced_name);
  if (!ok) {
    // Its tensor was evicted (released, fenced) before the load finished; the host copy is
    // authoritative, but the kernels that read it got undefined bytes.
    detail::logger().error(
        "pager: a page-in (transfer {}) failed after its tensor was released and evicted; "
        "kernels ordered after that acquire read undefined bytes",
        done.ticket.id);
  }
}

}  // namespace htp
