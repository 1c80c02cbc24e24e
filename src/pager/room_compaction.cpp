// The room maker's compaction (room_maker.hpp): moves of idle tensors within HBM, so that free
// pages join into extents. Planned by the slab allocator over the tensors the victim index holds
// (not a scan of all); the moves complete in finish_move.
#include "pager/room_maker.hpp"

#include "nvtx_range.hpp"

#include <unordered_map>

namespace htp::detail {

bool room_maker::can_move(std::uint32_t slot) {
  // A weight whose kernels may still run can move: they only read it, as the move's copy does, and
  // the source is fenced by their release events until they are done. A mutable tensor moves only
  // once its kernels have finished writing it.
  const bool settled = tensors_.settle(slot);
  return tensors_.can_evict(slot) && (settled || tensors_[slot].kind == tensor_kind::weight);
}

std::size_t room_maker::compact(std::size_t request_bytes, cause why) {
  const nvtx_range range("htp compaction");
  std::unordered_map<void*, std::uint32_t> owner;
  for (auto g : {victim_group::clean, victim_group::dirty}) {
    tensors_.victims().find_lru(g, [&](std::uint32_t slot) {
      if (can_move(slot)) owner.emplace(tensors_[slot].hbm->ptr, slot);
      return false;  // visit them all
    });
  }
  if (owner.empty()) return 0;
  compaction_plan plan =
      hbm_.plan_compaction([&](const extent& e) { return owner.count(e.ptr) != 0; }, request_bytes);
  for (const auto& m : plan.moves) held_ += m.to.bytes;
  const bool useless = plan.moves.empty() || (request_bytes != 0 && !plan.satisfies_request);
  std::size_t started = 0;
  for (const auto& m : plan.moves) {
    if (useless) {
      hbm_.cancel_move(m);
      held_ -= m.to.bytes;
      continue;
    }
    const std::uint32_t slot = owner.at(m.from.ptr);
    transfer_ticket ticket;
    try {
      ticket = engine_.submit(m.to.ptr, m.from.ptr, m.from.bytes, copy_direction::device_to_device,
                              transfer_priority::compaction, fence_events(m.to));
      add_fence_user(m.to, ticket);
    } catch (...) {
      hbm_.cancel_move(m);
      held_ -= m.to.bytes;
      continue;  // this tensor stays where it is; the others still move
    }
    fence_release_events(slot, m.from.ptr, ticket);  // kernels may still read the source
    tensors_.begin_move(slot, m, ticket);
    ++moves_in_flight_;
    ++started;
  }
  if (started > 0) observe_.compaction_started(started, why);
  return started;
}

void room_maker::finish_move(std::uint32_t slot, bool ok, std::chrono::nanoseconds latency) {
  const slab_move m = tensors_.finish_move(slot, ok, latency);
  if (ok) {
    hbm_.commit_move(m);
    held_ -= m.from.bytes;
  } else {
    hbm_.cancel_move(m);
    held_ -= m.to.bytes;
  }
  --moves_in_flight_;
}

void room_maker::add_move_waits(wait_set& w) const {
  for (std::uint32_t s : tensors_.in_flight()) {
    if (tensors_[s].pending == pending_kind::move) w.tickets.push_back(tensors_[s].ticket);
  }
}

void room_maker::maybe_compact() {
  if (!config_.auto_compact || moves_in_flight_ > 0) return;
  // Planning looks at every tensor in HBM: retry only after enough frees changed the layout
  // (1 + 1/16 of the tensors in HBM), so the cost stays O(1) amortised per call.
  const auto& victims = tensors_.victims();
  const std::size_t in_hbm = victims.size(victim_group::clean) + victims.size(victim_group::dirty) +
                             victims.size(victim_group::pinned);
  if (frees_ - frees_at_compaction_ < 1 + in_hbm / 16) return;
  if (!hbm_.should_compact()) return;
  frees_at_compaction_ = frees_;
  compact(0, cause::request);
}

}  // namespace htp::detail
