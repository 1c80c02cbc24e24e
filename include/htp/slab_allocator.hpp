// The slab allocator: one instance per memory tier (HBM, pinned host), the memory foundation of
// the pager. See docs/slab_allocator.md for the design note (geometry, size classes and their waste
// bound, fragmentation figures, compaction planning, stream-ordered release, pinning).
//
// Contract summary:
//  - At construction the tier's whole budget is reserved from the device in a few large
//    allocations ("reservations") and divided into slabs of `slab_bytes`. No device allocation
//    call happens afterwards; allocate/deallocate only touch host-side bookkeeping.
//  - Requests of half a slab or more get a contiguous run of whole slabs inside one reservation.
//    Smaller requests are served from size-class bins (one class per slab, four classes per power
//    of two). Every returned pointer is aligned to at least 256 bytes.
//  - Bookkeeping lives on the host only, never inside the managed memory.
//  - Thread safety: every public member may be called from any host thread concurrently.
//  - Errors: bad input throws htp::invalid_argument naming the value and the rule; a request that
//    does not fit now throws htp::out_of_memory with the full diagnostic. In both cases the
//    allocator's state is exactly as before the call (only the failed-request counter moves).
#pragma once

#include <htp/device.hpp>
#include <htp/error.hpp>
#include <htp/tier.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace htp {

/// Configuration of one tier's slab allocator.
struct slab_allocator_config {
  tier t = tier::hbm;
  /// Bytes the tier reserves from the device at construction; rounded down to whole slabs and must
  /// hold at least one slab.
  std::size_t budget_bytes = 0;
  /// Slab size: a power of two from 64 KiB to 1 GiB. Small values are for tests.
  std::size_t slab_bytes = std::size_t{64} << 20;
  /// Combined fragmentation at or above which should_compact() says yes (0..1).
  double compaction_threshold = 0.15;
  /// Slabs per device allocation. 0 = automatic: the whole budget in one allocation for HBM; for
  /// the host tier, chunks of at most 1 GiB so pinning runs in parallel. A run of whole slabs
  /// never crosses a reservation, so this also bounds the largest single request.
  std::size_t slabs_per_reservation = 0;
  /// Threads pinning (allocating) reservations in parallel at construction. 0 = automatic (up to 4).
  unsigned pin_threads = 0;
  /// Reserve on a background thread, so construction returns at once; allocate() waits only when
  /// the slabs it needs are not reserved yet.
  bool pin_in_background = false;
};

/// A non-owning view of an allocation: its address and the size the caller asked for.
struct extent {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  friend bool operator==(const extent& a, const extent& b) noexcept {
    return a.ptr == b.ptr && a.bytes == b.bytes;
  }
};

/// One planned relocation: copy `from.bytes` bytes from `from.ptr` to `to.ptr`, then commit.
struct slab_move {
  extent from;
  extent to;  ///< to.bytes == from.bytes
};

/// The result of slab_allocator::plan_compaction. Every destination is reserved in the allocator
/// (no allocate can return it) until its move is committed or cancelled, so the caller must
/// commit_move or cancel_move each one.
struct compaction_plan {
  std::vector<slab_move> moves;
  std::size_t bytes_to_copy = 0;      ///< sum of from.bytes over moves.
  std::size_t slabs_freed = 0;        ///< whole slabs that become free once all moves commit.
  bool satisfies_request = false;     ///< the request passed to plan_compaction will fit afterwards.
};

/// Fragmentation figures, all in [0, 1]. Definitions (see docs/slab_allocator.md):
///  external = 1 - largest free run of slabs / free slabs            (0 when no slab is free)
///  internal = unused bytes inside bin slabs that are not full (free blocks and the slab tail)
///             / bytes of all bin slabs                               (0 when there is no bin slab)
///  combined = (free slabs outside the largest free run * slab_bytes
///              + the internal numerator) / tier capacity
///  i.e. the share of the tier that holds no allocation yet cannot serve a request of the largest
///  free extent's size.
struct fragmentation_report {
  double external = 0;
  double internal = 0;
  double combined = 0;
  std::size_t largest_free_extent_bytes = 0;  ///< largest free run of whole slabs, in bytes.
  std::size_t free_slabs = 0;
};

/// Per size-class statistics.
struct slab_class_stats {
  std::size_t block_bytes = 0;
  std::size_t slabs = 0;            ///< slabs dedicated to this class.
  std::size_t blocks_in_use = 0;    ///< including blocks reserved as move destinations.
  std::size_t blocks_capacity = 0;  ///< blocks in the class's slabs.
};

/// A snapshot of one allocator's statistics.
struct slab_allocator_stats {
  tier t = tier::hbm;
  std::size_t slab_bytes = 0;
  std::size_t total_slabs = 0;        ///< slabs in the budget.
  std::size_t ready_slabs = 0;        ///< slabs already reserved (pinned) from the device.
  std::size_t free_slabs = 0;
  std::size_t run_slabs = 0;          ///< slabs held by whole-slab runs.
  std::size_t bin_slabs = 0;          ///< slabs dedicated to a size class.
  std::size_t slabs_in_use = 0;       ///< run_slabs + bin_slabs.
  std::size_t slabs_in_use_peak = 0;
  std::size_t bytes_in_use = 0;       ///< sum of requested bytes of live allocations (incl. pending).
  std::size_t bytes_in_use_peak = 0;
  std::size_t live_allocations = 0;
  std::size_t pending_releases = 0;   ///< stream-ordered releases whose event has not completed.
  std::size_t pending_release_bytes = 0;
  std::size_t move_destinations = 0;  ///< planned move destinations not yet committed/cancelled.
  std::size_t move_destination_bytes = 0;
  std::uint64_t allocations = 0;
  std::uint64_t deallocations = 0;    ///< including reaped stream-ordered releases.
  std::uint64_t failed_requests = 0;  ///< allocate calls that threw out_of_memory.
  std::uint64_t moves_committed = 0;
  std::vector<slab_class_stats> classes;
  fragmentation_report fragmentation;
  double pin_seconds = 0;             ///< wall-clock seconds spent reserving/pinning so far.
  double pin_seconds_per_gib = 0;     ///< pin_seconds per GiB reserved (0 until something is).
  bool reservation_complete = false;  ///< every reservation is done (background pinning finished).
};

/// A slab allocator for one tier. Non-copyable, non-movable (threads and the device refer to it).
class slab_allocator {
 public:
  /// Reserves the budget from `dev` (which must outlive this object), in the foreground or in the
  /// background per config. @throws htp::invalid_argument for a bad config (naming the field and
  /// rule); htp::out_of_memory (from the device) if a foreground reservation fails, after
  /// returning what was already reserved.
  slab_allocator(device& dev, const slab_allocator_config& config);
  /// Stops background pinning, waits for pending stream-ordered releases, returns the memory to the
  /// device. Live allocations become invalid. Never throws.
  ~slab_allocator();
  slab_allocator(const slab_allocator&) = delete;
  slab_allocator& operator=(const slab_allocator&) = delete;

  /// Allocates `bytes` (aligned to >= 256). Reaps completed stream-ordered releases first. Waits
  /// only if the slabs it needs are still being reserved in the background.
  /// @throws htp::invalid_argument if bytes == 0 or bytes exceeds the largest extent the tier can
  /// ever hold (one reservation); htp::out_of_memory if it does not fit now.
  extent allocate(std::size_t bytes);
  /// Releases an allocation now. The caller guarantees no queued work still uses it.
  /// @throws htp::invalid_argument for a misaligned or unknown pointer, a double release (also of
  /// a pending stream-ordered one), a move destination not yet committed, or `bytes` differing
  /// from the size it was allocated with. Nothing changes then.
  void deallocate(void* ptr, std::size_t bytes);
  /// Releases an allocation once the work queued on `s` so far completes: records a pooled event on
  /// `s`; the block returns to the free lists only when a later call (allocate, deallocate, reap,
  /// statistics) finds the event complete. Never blocks. Same errors as deallocate.
  void deallocate_after(void* ptr, std::size_t bytes, stream_ref s);
  /// Frees every pending release whose event has completed; returns how many. Never blocks.
  std::size_t reap();
  /// Blocks until every pending release's event has completed, then frees them all.
  void synchronize_pending();

  /// Plans moves that free whole slabs (for_request_bytes == 0: evacuate sparse bin slabs and pack
  /// whole-slab runs towards the start of each reservation) or make room for one request of
  /// `for_request_bytes` (a contiguous run for a large request, a free slab for a small one). Only
  /// allocations for which `movable(extent)` returns true are moved; pending releases and move
  /// destinations never are. Destinations overlap no live extent, no source and no other
  /// destination, and are reserved until committed or cancelled. `movable` runs under the
  /// allocator's lock and must not call back into it.
  compaction_plan plan_compaction(const std::function<bool(const extent&)>& movable,
                                  std::size_t for_request_bytes = 0);
  /// After the caller has copied m.from to m.to: re-points the allocation to m.to and frees m.from.
  /// @throws htp::invalid_argument if `m` is not a planned, uncommitted move of this allocator.
  void commit_move(const slab_move& m);
  /// Drops a planned move without moving: m.to becomes free again, m.from stays live.
  /// @throws htp::invalid_argument if `m` is not a planned, uncommitted move.
  void cancel_move(const slab_move& m);
  /// True when the combined fragmentation is at or above the configured threshold.
  bool should_compact() const;

  /// A snapshot of the statistics. Reaps completed releases first (never blocks).
  slab_allocator_stats statistics() const;
  /// The live fragmentation figures (cheap: counters plus a cached largest-run scan).
  fragmentation_report fragmentation() const;
  /// Recomputes every counter and the fragmentation figures from the bitmaps alone and compares
  /// them with the incremental ones. Returns the recomputed figures. For tests and checked mode.
  /// @throws htp::logic_error naming the first disagreement.
  fragmentation_report audit() const;
  /// Blocks until the background reservation (if any) has finished. Rethrows its failure.
  void wait_reserved();

  /// The device allocations the tier manages (waits for background reservation first), so a
  /// transfer engine can be told which memory it may write. @throws what wait_reserved throws.
  std::vector<extent> reservations();

  tier tier_of() const noexcept;
  std::size_t slab_bytes() const noexcept;
  /// Bytes the tier manages (whole slabs).
  std::size_t capacity_bytes() const noexcept;
  /// The largest request allocate can ever satisfy (one reservation's bytes).
  std::size_t max_request_bytes() const noexcept;
  /// Block size a request of `bytes` occupies: its size class, or whole slabs from half a slab.
  std::size_t rounded_size(std::size_t bytes) const;

  struct state;  // defined in src/slab/state.hpp

 private:
  std::unique_ptr<state> s_;
};

/// The slab size (a power of two from `min_slab` to `max_slab`) that wastes the fewest bytes
/// rounding these tensor sizes: from half a slab a tensor takes whole slabs, below it a size
/// class. Among sizes within 0.5% of the least waste, the largest (fewer slabs, smaller bitmaps).
/// E.g. Llama-3.1-8B in bf16 (32, 8 and 112 MiB matrices, 8 KiB norms) gets 8 MiB: 16 MiB slabs
/// would round each 8 MiB k/v projection up to 16 MiB. Pure function; thread-safe.
/// @throws htp::invalid_argument if `tensor_bytes` is empty or the bounds are not powers of two
/// with 64 KiB <= min_slab <= max_slab <= 1 GiB.
std::size_t suggest_slab_bytes(const std::vector<std::size_t>& tensor_bytes,
                               std::size_t min_slab = std::size_t{1} << 21,
                               std::size_t max_slab = std::size_t{64} << 20);

}  // namespace htp
