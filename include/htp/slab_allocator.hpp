// The slab allocator: one instance per memory tier (HBM, pinned host), the memory foundation of
// the pager. See docs/slab_allocator.md for the design note (geometry, size classes and their waste
// bound, fragmentation figures, compaction planning, stream-ordered release, pinning).
//
// Contract summary:
//  - At construction the tier's whole budget is reserved from the device in a few large
//    allocations ("reservations") of whole slabs (`slab_bytes`, 64 MiB by default; the last one
//    may end within a slab: the budget is kept to the page). No device
//    allocation call happens afterwards; allocate/deallocate only touch host-side bookkeeping.
//  - Space is handed out in pages (`page_bytes`, 64 KiB by default, larger for tiers over 128 GiB).
//    Requests of half a page or more get a contiguous run of whole pages inside one reservation,
//    so a tensor wastes less than one page to rounding. Smaller requests are served from size-class
//    bins (one class per page, four classes per power of two). Small tensors take pages from the
//    top end of the shortest free run, so they fill holes and never split a free run in two.
//    Every returned pointer is aligned to at least 256 bytes.
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
  /// Bytes the tier reserves from the device at construction; rounded down to whole pages and must
  /// hold at least one slab.
  std::size_t budget_bytes = 0;
  /// Slab size: the unit the budget is reserved in; a power of two from 64 KiB to 1 GiB.
  std::size_t slab_bytes = std::size_t{64} << 20;
  /// Page size: the unit space is handed out in; a power of two from 4 KiB to slab_bytes, or 0 for
  /// automatic (64 KiB, doubled until the tier has at most 2^21 pages: 32 MiB of bookkeeping).
  std::size_t page_bytes = 0;
  /// Combined fragmentation at or above which should_compact() says yes (0..1).
  double compaction_threshold = 0.15;
  /// Slabs per device allocation. 0 = automatic: the whole budget in one allocation for HBM; for
  /// the host tier, chunks of at most 1 GiB so pinning runs in parallel. A run of pages never
  /// crosses a reservation, so this also bounds the largest single request.
  std::size_t slabs_per_reservation = 0;
  /// Threads pinning (allocating) reservations in parallel at construction. 0 = automatic (up to
  /// 4).
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
  std::size_t bytes_to_copy = 0;   ///< sum of from.bytes over moves.
  std::size_t pages_freed = 0;     ///< bin pages that become free once all moves commit.
  bool satisfies_request = false;  ///< the request passed to plan_compaction will fit afterwards.
};

/// Fragmentation figures, all in [0, 1]. Definitions (see docs/slab_allocator.md):
///  external = 1 - largest free run of pages / free pages            (0 when no page is free)
///  internal = unused bytes inside bin pages that are not full (free blocks and the page tail)
///             / bytes of all bin pages                               (0 when there is no bin page)
///  combined = (free pages outside the largest free run * page_bytes
///              + the internal numerator) / tier capacity
///             i.e. the share of the tier that holds no allocation yet cannot serve a request of
///             the largest free extent's size; what should_compact() compares with the threshold.
///  waste    = 1 - (requested bytes of live allocations and move destinations
///                  + the largest free extent) / reserved capacity
///             i.e. all waste: rounding to pages and size classes, bin page tails and free blocks,
///             and free space outside the largest free extent.
struct fragmentation_report {
  double external = 0;
  double internal = 0;
  double combined = 0;
  double waste = 0;
  std::size_t largest_free_extent_bytes = 0;  ///< largest free run of pages, in bytes.
  std::size_t free_pages = 0;
};

/// Per size-class statistics.
struct slab_class_stats {
  std::size_t block_bytes = 0;
  std::size_t pages = 0;            ///< pages dedicated to this class.
  std::size_t blocks_in_use = 0;    ///< including blocks reserved as move destinations.
  std::size_t blocks_capacity = 0;  ///< blocks in the class's pages.
};

/// A snapshot of one allocator's statistics.
struct slab_allocator_stats {
  tier t = tier::hbm;
  std::size_t slab_bytes = 0;
  std::size_t page_bytes = 0;
  std::size_t total_pages = 0;  ///< pages in the budget.
  std::size_t ready_pages = 0;  ///< pages already reserved (pinned) from the device.
  std::size_t free_pages = 0;
  std::size_t run_pages = 0;     ///< pages held by runs.
  std::size_t bin_pages = 0;     ///< pages dedicated to a size class.
  std::size_t pages_in_use = 0;  ///< run_pages + bin_pages.
  std::size_t pages_in_use_peak = 0;
  std::size_t bytes_in_use = 0;  ///< sum of requested bytes of live allocations (incl. pending).
  std::size_t bytes_in_use_peak = 0;
  std::size_t live_allocations = 0;
  std::size_t pending_releases = 0;  ///< stream-ordered releases whose event has not completed.
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
  /// @throws as deallocate; htp::cuda_error if the event cannot be recorded.
  void deallocate_after(void* ptr, std::size_t bytes, stream_ref s);
  /// Frees every pending release whose event has completed; returns how many. Never blocks.
  /// @throws htp::cuda_error (htp::logic_error on sim) if querying an event fails.
  std::size_t reap();
  /// Blocks until every pending release's event has completed, then frees them all.
  /// @throws htp::cuda_error (htp::logic_error on sim) if the work an event captured failed.
  void synchronize_pending();

  /// Plans moves that gather free space (for_request_bytes == 0: evacuate sparse bin pages and fill
  /// the lowest free gaps with the largest runs above them that fit) or make room for one request
  /// of `for_request_bytes` (a contiguous run for a large request, a free page for a small one).
  /// Only allocations for which `movable(extent)` returns true are moved; pending releases and move
  /// destinations never are. Destinations overlap no live extent, no source and no other
  /// destination, and are reserved until committed or cancelled. `movable` runs under the
  /// allocator's lock and must not call back into it.
  /// Never throws (besides what `movable` throws).
  compaction_plan plan_compaction(const std::function<bool(const extent&)>& movable,
                                  std::size_t for_request_bytes = 0);
  /// After the caller has copied m.from to m.to: re-points the allocation to m.to and frees m.from.
  /// @throws htp::invalid_argument if `m` is not a planned, uncommitted move of this allocator.
  void commit_move(const slab_move& m);
  /// Drops a planned move without moving: m.to becomes free again, m.from stays live.
  /// @throws htp::invalid_argument if `m` is not a planned, uncommitted move.
  void cancel_move(const slab_move& m);
  /// True when the combined fragmentation is at or above the configured threshold.
  /// Never throws.
  bool should_compact() const;

  /// A snapshot of the statistics. Reaps completed releases first (never blocks).
  /// @throws as reap.
  slab_allocator_stats statistics() const;
  /// The live fragmentation figures (cheap: counters plus a cached largest-run scan).
  /// Never throws.
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
  /// The page size in use (the configured one, or the automatic choice).
  std::size_t page_bytes() const noexcept;
  /// Bytes the tier manages (the budget in whole pages).
  std::size_t capacity_bytes() const noexcept;
  /// The largest request allocate can ever satisfy (one reservation's bytes).
  std::size_t max_request_bytes() const noexcept;
  /// Bytes a request of `bytes` occupies: its size class, or whole pages from half a page.
  /// Never throws.
  std::size_t rounded_size(std::size_t bytes) const;

  struct state;  // defined in src/slab/state.hpp

 private:
  std::unique_ptr<state> s_;
};

}  // namespace htp
