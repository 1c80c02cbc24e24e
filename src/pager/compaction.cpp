// Compaction: the allocator plans moves of unpinned tensors (mutable ones settled); the pager
// copies them device-to-device at compaction priority on the reduction stream and commits each move
// once its copy completes (reap). Handles point at the destination at once: an acquire in between
// makes the compute stream wait for the copy, so nobody reads the destination early and nobody sees
// the source again. Runs with the pager's mutex held; never blocks the compute stream.
#include "nvtx_range.hpp"
#include "pager/pager_impl.hpp"

#include <unordered_map>

namespace htp {

std::size_t pager::impl::start_compaction(std::size_t request_bytes) {
  const detail::nvtx_range range("htp compaction");
  // Candidates: the unpinned tensors holding HBM (from the victim index, not a scan of all).
  std::unordered_map<void*, std::uint32_t> owner;
  for (auto g : {detail::victim_group::clean, detail::victim_group::dirty}) {
    tensors.victims().find_lru(g, [&](std::uint32_t slot) {
      if (can_move(slot)) owner.emplace(tensors[slot].hbm->ptr, slot);
      return false;  // visit them all
    });
  }
  if (owner.empty()) return 0;
  compaction_plan plan =
      hbm->plan_compaction([&](const extent& e) { return owner.count(e.ptr) != 0; }, request_bytes);
  for (const auto& m : plan.moves) hbm_bytes_held += m.to.bytes;
  const bool useless = plan.moves.empty() || (request_bytes != 0 && !plan.satisfies_request);
  std::size_t started = 0;
  for (const auto& m : plan.moves) {
    if (useless) {
      hbm->cancel_move(m);
      hbm_bytes_held -= m.to.bytes;
      continue;
    }
    const std::uint32_t slot = owner.at(m.from.ptr);
    transfer_ticket ticket;
    try {
      ticket = engine->submit(m.to.ptr, m.from.ptr, m.from.bytes, copy_direction::device_to_device,
                              transfer_priority::compaction, fence_events(m.to));
      add_fence_user(m.to, ticket);
    } catch (...) {
      hbm->cancel_move(m);
      hbm_bytes_held -= m.to.bytes;
      continue;  // this tensor stays where it is; the others still move
    }
    fence_release_events(slot, m.from.ptr, ticket);  // kernels may still read the source
    tensors.begin_move(slot, m, ticket);
    auto& notes = tensors.notes(slot);
    notes.ticket_priority = transfer_priority::compaction;
    notes.ticket_start = std::chrono::steady_clock::now();
    ++moves_in_flight;
    ++started;
  }
  if (started > 0) {
    stats.add(&pager_metrics::compactions);
    stats.add(&pager_metrics::compaction_moves, started);
  }
  return started;
}

void pager::impl::add_move_waits(detail::wait_set& w) const {
  for (std::uint32_t s : tensors.in_flight()) {
    if (tensors[s].pending == detail::pending_kind::move) w.tickets.push_back(tensors[s].ticket);
  }
}

void pager::impl::maybe_auto_compact() {
  if (!config.auto_compact || moves_in_flight > 0) return;
  // Planning looks at every tensor in HBM: retry only after enough frees changed the layout
  // (1 + 1/16 of the tensors in HBM), so the cost stays O(1) amortised per call.
  const auto& victims = tensors.victims();
  const std::size_t in_hbm = victims.size(detail::victim_group::clean) +
                             victims.size(detail::victim_group::dirty) +
                             victims.size(detail::victim_group::pinned);
  if (hbm_frees - hbm_frees_at_compaction < 1 + in_hbm / 16) return;
  if (!hbm->should_compact()) return;
  hbm_frees_at_compaction = hbm_frees;
  start_compaction(0);
}

}  // namespace htp
