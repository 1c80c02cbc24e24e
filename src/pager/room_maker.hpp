// The room maker: the pager's HBM side. It finds room for a tensor (the out-of-memory ladder and
// the choice of victims), starts the copies that fill and empty it (loads, write-backs,
// compaction moves), and returns HBM to the allocator fenced by whatever may still read it.
//
// Invariants (what every method keeps; checked by tests/pager_room_maker_test.cpp):
//  1. held_bytes() is the bytes of every HBM extent the pager holds: tensors' extents and the
//     destinations of moves in flight. Nothing else allocates or frees pager HBM.
//  2. Freed HBM is fenced: the release events of kernels that may still read it, and the copies
//     into or out of it, are waited for (on the device) by the next copy into any part of it.
//  3. A victim is never pinned, never device-resident, never a tensor the running expect() named,
//     and never needs the host to wait: it is idle, or its load is in flight behind release
//     events that order the reuse of its memory on the device (evict_loading).
//  4. A prefetch evicts only what the demand fault it anticipates would evict when it comes
//     (min_page_ins), or what is needed later than the tensor coming in (pipeline); under LRU,
//     only what the lookahead window does not name.
//  5. moves_in_flight() is the number of tensors whose pending copy is a move.
// The ladder's rungs (docs/pager.md, "Out of memory"): 1 evict a clean victim, 2 write back a
// dirty one, 3 wait for copies in flight, 4 compact, 5 serve degraded (or throw). Nothing here
// blocks but wait(); nothing scans the tensors: victims come from the tensor table's victim
// index, fences from the fence set. Not thread-safe: the pager's mutex guards it.
#pragma once

#include <htp/device.hpp>
#include <htp/pager.hpp>
#include <htp/slab_allocator.hpp>
#include <htp/transfer_engine.hpp>

#include "pager/event_pool.hpp"
#include "pager/fences.hpp"
#include "pager/forecast.hpp"
#include "pager/observer.hpp"
#include "pager/tensor_table.hpp"

#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace htp::detail {

/// Things a blocked request waits for before retrying.
struct wait_set {
  std::vector<transfer_ticket> tickets;
  std::vector<event_ref> events;
  bool compacted = false;   // a compaction for the request was started
  bool only_moves = false;  // every ticket is a compaction move: one that fails loses nothing
                            // (the tensor stays where it was), so the request just retries
  bool empty() const { return tickets.empty() && events.empty(); }
};

/// One look of the ladder for a demand: room, something to wait for, serve it degraded, or
/// nothing more to free (told to the observers as ladder_exhausted).
struct demand_result {
  std::optional<extent> room;
  wait_set waits;
  bool degraded = false;
  bool exhausted() const { return !room && waits.empty() && !degraded; }
};

class room_maker {
 public:
  room_maker(device& dev, const pager_config& config, slab_allocator& hbm, transfer_engine& engine,
             tensor_table& tensors, event_pool& events, const forecast& future,
             pager_observer& observe);
  room_maker(const room_maker&) = delete;
  room_maker& operator=(const room_maker&) = delete;

  // ---- room ------------------------------------------------------------------------------------
  /// One look of the ladder for `bytes` a tensor needs now: an extent (rungs 1-2 run as
  /// needed), copies to wait for (rung 3, or the moves of a compaction: rung 4, at most once per
  /// request, when `allow_compaction`), serve it degraded (rung 5, when on_oom allows it and
  /// `may_degrade`), or exhausted.
  demand_result for_demand(std::size_t bytes, bool allow_compaction, bool may_degrade);
  /// Room for a prefetch of `slot` without blocking: only the evictions the later fault would
  /// make (invariant 4). Never compacts.
  std::optional<extent> for_prefetch(std::uint32_t slot);

  // ---- copies ----------------------------------------------------------------------------------
  /// Starts loading `slot` from its source into `where` at `priority` (ordered after the fences
  /// over `where` and the release events of the tensor). On a throw, `where` is freed.
  void load(std::uint32_t slot, extent where, transfer_priority priority);
  /// Evicts a tensor that can_evict, for `why`: frees HBM now if clean (fenced by its release
  /// events), else starts its write-back ordered after them.
  void evict(std::uint32_t slot, cause why);
  /// Frees the HBM of a dead activation that holds it idle (tensor_table::can_drop_dead), fenced by
  /// its release events, with no write-back; does nothing otherwise (one with a copy in flight is
  /// dropped when the copy completes). Returns whether it freed.
  bool discard_dead(std::uint32_t slot);
  /// Evicts an unpinned tensor whose load is in flight without waiting (invariant 3): frees the
  /// extent fenced by its release events and detaches the load.
  void evict_loading(std::uint32_t slot, cause why);
  /// Plans and starts compaction moves for `request_bytes` (a full pass when 0), for `why`.
  /// Returns the moves started; they complete in finish_move.
  std::size_t compact(std::size_t request_bytes, cause why);
  /// Starts a compaction when fragmentation passed the threshold (amortised O(1) per call).
  void maybe_compact();
  /// A copy the room maker started finished (`done`, from the engine's queue): its tensor's
  /// transition (a load resident or failed, a write-back ended, a move committed or cancelled),
  /// the HBM it gave up freed; or the end of a detached load.
  void complete(const finished_transfer& done);
  /// The moves in flight, into `w`.
  void add_move_waits(wait_set& w) const;

  // ---- loads detached by evict_loading ---------------------------------------------------------
  /// The tickets of the detached loads still reading `slot`'s source, into `out`.
  void detached_loads_of(std::uint32_t slot, std::vector<transfer_ticket>& out) const;
  /// Every detached load in flight, into `out`.
  void detached_loads(std::vector<transfer_ticket>& out) const;

  // ---- HBM and its fences ----------------------------------------------------------------------
  /// Returns HBM to the allocator (poisoned after its readers in checked mode). `readers`: release
  /// events of kernels that may still read it (held; the fence now holds them).
  void free_hbm(const extent& e, std::vector<event_ref> readers = {});
  void free_hbm(freed_hbm f) { free_hbm(f.at, std::move(f.readers)); }
  void free_hbm(std::optional<freed_hbm> f) {
    if (f) free_hbm(std::move(*f));
  }
  /// The fence events the next user of `e` must wait on (held by the fences while they live).
  std::vector<event_ref> fence_events(const extent& e) const;
  /// Drops fences whose events completed and whose users finished.
  void drop_fences();
  /// Waits (host) for every fence's events: teardown.
  void synchronize_fences();
  /// Blocks, the lock dropped, until everything in `w` completed. Returns the error of the first
  /// copy that failed (null when none did); completions account the failure.
  std::exception_ptr wait(std::unique_lock<std::mutex>& lock, const wait_set& w);

  /// Bytes of HBM held (invariant 1), and the allocator's capacity.
  std::size_t held_bytes() const noexcept { return held_; }
  std::size_t moves_in_flight() const noexcept { return moves_in_flight_; }
  /// The stream of the room maker's own copies (checked-mode poison), also copy_to_host's.
  stream& private_stream() noexcept { return private_stream_; }
  /// The out-of-memory diagnostic: "cannot <what> '<name>'", then the state of HBM.
  std::string oom_message(std::size_t bytes, const std::string& name, const char* what) const;

  // ---- victims (const: choosing changes nothing) -----------------------------------------------
  /// How strongly `slot` should be evicted (larger first) under the rule in force.
  std::uint64_t eviction_rank(std::uint32_t slot) const;
  /// The best victim of group `g` under the rule in force, skipping slots in `skip`.
  std::optional<std::uint32_t> best_in(victim_group g,
                                       const std::vector<std::uint32_t>& skip = {}) const;
  /// The victim a prefetch of `for_slot` may evict now (invariant 4), or none.
  std::optional<std::uint32_t> prefetch_victim(std::uint32_t for_slot) const;

 private:
  bool evict_for_demand(wait_set& waits);
  void finish_move(std::uint32_t slot, bool ok, std::chrono::nanoseconds latency);
  /// True when `done` is a detached load; then it is forgotten and its end told to the observers
  /// (and, if it failed, logged: kernels after that acquire read undefined bytes).
  bool detached_load_done(const finished_transfer& done);
  bool compact_for(std::size_t bytes, wait_set& waits);
  std::optional<extent> allocate(std::size_t bytes);
  std::size_t free_bytes() const;
  std::optional<std::uint32_t> min_page_ins_victim(std::uint32_t for_slot) const;
  std::optional<std::uint32_t> routed_victim() const;
  std::optional<std::uint32_t> pipeline_victim(std::uint32_t for_slot) const;
  bool can_move(std::uint32_t slot);
  bool clean_evictable(std::uint32_t slot) const;
  void fence_release_events(std::uint32_t slot, const void* at, transfer_ticket user);
  void add_fence_user(const extent& e, transfer_ticket user);
  void poison(const extent& e, std::vector<event_ref>& readers);

  /// A load of a tensor evicted before it finished (evict_loading).
  struct detached_load {
    bool fault;  // a demand fault's load (not a prefetch's, raised or not)
    std::chrono::steady_clock::time_point started;
    std::size_t bytes;
    std::uint32_t slot;  // the tensor it was loading, while that registration lives
    std::uint32_t generation;
    std::string name;
  };

  device& dev_;
  const pager_config& config_;
  slab_allocator& hbm_;
  transfer_engine& engine_;
  tensor_table& tensors_;
  event_pool& events_;
  const forecast& future_;
  pager_observer& observe_;
  fence_set fences_;  // freed HBM still read by queued kernels
  std::unordered_map<std::uint64_t, detached_load> detached_;  // by ticket
  std::size_t held_ = 0;
  std::size_t moves_in_flight_ = 0;
  std::uint64_t frees_ = 0;                // HBM extents freed so far
  std::uint64_t frees_at_compaction_ = 0;  // ... when automatic compaction last ran
  stream private_stream_;
};

}  // namespace htp::detail
