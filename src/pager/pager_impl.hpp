// The pager's private state, shared by the files of src/pager/. One mutex guards all of it; calls
// that must block (waiting for a copy or a release event) drop the lock while they wait and
// re-validate afterwards. The tensors' state machine lives in the tensor table (tensor_table.hpp)
// and the counters in the stats component (pager_stats.hpp); pager::impl keeps the policy: the
// out-of-memory ladder, prefetch, compaction and the choice of victims. Costs (docs/pager.md,
// "Costs"): copies in flight are a list (reap), victims come from the victim index, fences from the
// fence set; set_schedule and unregistering a scheduled tensor re-key every tensor in HBM.
#pragma once

#include <htp/error.hpp>
#include <htp/pager.hpp>
#include <htp/slab_allocator.hpp>
#include <htp/tensor_file.hpp>
#include <htp/transfer_engine.hpp>

#include "pager/compute_pace.hpp"
#include "pager/event_pool.hpp"
#include "pager/fences.hpp"
#include "pager/pager_stats.hpp"
#include "pager/schedule.hpp"
#include "pager/tensor_table.hpp"
#include "pager/wait_probes.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace htp {

namespace detail {

/// Things a blocked request waits for before retrying.
struct wait_set {
  std::vector<transfer_ticket> tickets;
  std::vector<event_ref> events;
  bool compacted = false;   // a compaction for the request was started
  bool only_moves = false;  // every ticket is a compaction move: one that fails loses nothing
                            // (the tensor stays where it was), so the request just retries
  bool empty() const { return tickets.empty() && events.empty(); }
};

/// The ladder's last rung (already counted in oom.thrown), told apart from other failures.
class ladder_exhausted : public out_of_memory {
 public:
  using out_of_memory::out_of_memory;
};

/// Caller memory lent with pager::add_host_region.
struct host_region {
  std::size_t bytes = 0;
  host_region_kind kind = host_region_kind::pinned;
  std::size_t tensors = 0;  // live tensors inside it
};

}  // namespace detail

struct pager::impl {
  impl(device& d, pager_config c);
  ~impl();

  device& dev;
  pager_config config;
  std::unique_ptr<slab_allocator> hbm;
  std::unique_ptr<slab_allocator> host;
  std::unique_ptr<transfer_engine> engine;

  mutable std::mutex mutex;
  detail::pager_stats stats;
  detail::event_pool events;
  detail::access_schedule schedule;
  detail::compute_pace pace{dev};   // device-timed compute between scheduled acquires (automatic)
  detail::wait_probes probes{dev};  // device-timed stalls on late prefetches (timeliness)
  detail::routed_groups groups{config.popularity_half_life};  // experts after their routers
  std::vector<std::uint32_t> expected;  // the slots of the expect() call running (not victims)
  detail::tensor_table tensors;  // the state machine: every tensor's residency, pins, releases
  std::vector<std::uint32_t> skipped;  // scratch: slots whose next use an access skipped
  // Loads of tensors evicted before the load finished (detach_load), by ticket: their completions
  // feed the metrics and the trace, or count as failed loads; synchronize and quiesce wait for
  // them.
  struct detached_load {
    bool fault_load;                                  // counts in the fault latency
    std::chrono::steady_clock::time_point wait_from;  // an acquire's fault wait, or {}
    std::chrono::steady_clock::time_point started;
    std::size_t bytes;
    std::uint32_t slot;  // the tensor it was loading, while that registration lives
    std::uint32_t generation;
    std::string traced_name;  // with trace = true only
  };
  std::unordered_map<std::uint64_t, detached_load> detached_loads;
  // Release events are recorded outside the lock; two releases recording at once may land on a
  // stream in either order, so neither may then supersede the other (release_n).
  std::uint64_t records_started = 0;
  int records_in_progress = 0;
  std::uint64_t release_seq = 0;
  std::uint64_t list_epoch = 0;  // marks handles seen in one list call (tensor_notes::list_mark)
  detail::fence_set fences;      // freed HBM still read by queued kernels
  std::map<const char*, detail::host_region> host_regions;  // caller memory, by start address
  std::uint64_t hbm_frees = 0;                              // HBM extents freed so far
  std::uint64_t hbm_frees_at_compaction = 0;                // ... when auto-compaction last ran
  std::size_t moves_in_flight = 0;
  std::size_t hbm_bytes_held =
      0;                  // bytes of HBM extents the pager holds, move destinations included
  stream private_stream;  // for copy_to_host of a dirty resident tensor

  // ---- handles (pager.cpp) ----
  /// The slot of a live handle of this pager. @throws htp::invalid_argument otherwise.
  std::uint32_t slot_of(tensor_handle h) const {
    (void)tensors.get(h);
    return h.index;
  }
  /// The caller region holding [p, p + bytes), or null.
  detail::host_region* region_of(const void* p, std::size_t bytes);
  /// Blocks (the lock dropped while waiting) until make_room gives an extent of `bytes` for the
  /// demand of `slot`, running the ladder's rungs 1-4. @throws ladder_exhausted (counted) when
  /// nothing more can be freed; htp::cuda_error when a copy it waited for failed.
  extent room_for(std::unique_lock<std::mutex>& lock, std::uint32_t slot, std::size_t bytes);

  // ---- acquire and release (acquire.cpp) ----
  /// Pins one tensor for `compute` (the body of acquire; may drop the lock while the ladder
  /// waits). Sets `pending` to the copy the compute stream must wait for (null when none) and adds
  /// to `waits` the release events of other streams it must wait for (a mutable tensor's writes).
  /// Does not advance the schedule: the caller does once every element has succeeded.
  device_span acquire_one(std::unique_lock<std::mutex>& lock, tensor_handle h, stream_ref compute,
                          detail::acquire_outcome& outcome, transfer_ticket& pending,
                          std::vector<event_ref>& waits);
  /// The host state of `slot` when HBM has no room: waits for what the ladder asked (false: the
  /// caller looks again), serves it degraded, or throws ladder_exhausted.
  bool page_in(std::unique_lock<std::mutex>& lock, std::uint32_t slot, bool& compacted,
               detail::acquire_outcome& outcome);
  /// Undoes acquire_one's pin (nothing was queued on the stream but waits).
  void unpin(std::uint32_t slot);
  /// acquire() for n handles: all or nothing.
  void acquire_n(const tensor_handle* hs, std::size_t n, stream_ref compute, bool wait,
                 device_span* out);
  /// After every element of an acquire succeeded: counts the outcomes, the fault waits and the
  /// schedule's accesses (`called`: when the call began).
  void account_acquire(const tensor_handle* hs, std::size_t n,
                       const std::vector<detail::acquire_outcome>& outcomes,
                       std::chrono::steady_clock::time_point called);
  /// Checks a list's handles before anything changes (each named once, `check` on each record).
  void check_list(const tensor_handle* hs, std::size_t n, const char* what,
                  const std::function<void(const detail::tensor_record&)>& check = {});
  /// release() for n handles: one event recorded on `compute` for all of them.
  void release_n(const tensor_handle* hs, std::size_t n, stream_ref compute, bool dirty);

  // ---- residency (residency.cpp) ----
  /// True when Belady's rule is in force.
  bool belady() const;
  /// Advances the schedule for an access of `slot` and re-keys what the access skipped.
  void record_access(std::uint32_t slot);
  /// True when the tensor may be moved now: can_evict and every release event completed.
  bool can_move(std::uint32_t slot);
  /// How strongly `slot` should be evicted (larger first) under the eviction rule.
  std::uint64_t eviction_rank(std::uint32_t slot) const;
  /// The best victim of group `g` under the rule in force, skipping slots in `skip`.
  std::optional<std::uint32_t> best_in(detail::victim_group g,
                                       const std::vector<std::uint32_t>& skip = {}) const;
  /// Tries to get an HBM extent for `bytes`. demand: the ladder's rungs 1-4 may run (rungs that
  /// must block return a wait set instead; compaction at most once per request, when allowed).
  /// Otherwise (prefetch for `for_slot`): only the evictions a demand fault would make then.
  std::optional<extent> make_room(std::size_t bytes, bool demand, std::uint32_t for_slot,
                                  bool allow_compaction, detail::wait_set& waits);
  /// One step of the ladder's rungs 1-3 for a demand: evicts (true: look again) or fills `waits`.
  bool evict_for_demand(detail::wait_set& waits);
  /// Starts a compaction for a request of `bytes` (rung 4); true when one started (`waits` filled).
  bool compact_for(std::size_t bytes, detail::wait_set& waits);
  /// The prefetch's victim for `for_slot`, or none when a prefetch must not evict now.
  std::optional<std::uint32_t> prefetch_victim(std::uint32_t for_slot) const;
  /// min_page_ins' victim: the one a demand fault of `for_slot` would evict when it comes.
  std::optional<std::uint32_t> min_page_ins_victim(std::uint32_t for_slot) const;
  /// Starts loading `slot` into `where` at `priority`.
  void start_load(std::uint32_t slot, extent where, transfer_priority priority);
  /// Evicts a tensor that can_evict: frees HBM now if clean (fenced by its release events), else
  /// starts its write-back ordered after them.
  void evict_now(std::uint32_t slot);
  /// Evicts an unpinned tensor whose load is in flight without waiting: frees the extent fenced by
  /// its release events and detaches the load (its completion then only feeds the metrics).
  void evict_loading(std::uint32_t slot);
  /// Issues prefetches for the next lookahead tensors of the schedule, in order, stopping at the
  /// first that cannot be brought in (a later one must not take the room an earlier one needs).
  void prefetch_upcoming();
  /// The victim a prefetch of a routed group member may evict (see residency.cpp).
  std::optional<std::uint32_t> routed_victim() const;
  /// prefetch_upcoming in lookahead_mode::automatic: ahead in bytes and time (pager.hpp).
  void prefetch_ahead();
  /// The marks this acquire call of `hs` records for the compute pace (automatic lookahead).
  detail::compute_pace::marks plan_pace(const tensor_handle* hs, std::size_t n, stream_ref compute);
  /// Records a compute-pace mark on `compute` (outside the lock); false if the device refused.
  bool record_pace_mark(event_ref e, stream_ref compute) noexcept;
  /// Prefetches one slot if it is in host and there is room without blocking; false if it could
  /// not (already there or coming counts as done).
  bool prefetch_slot(std::uint32_t slot,
                     std::optional<std::chrono::steady_clock::time_point> need = std::nullopt);
  /// Blocks (lock dropped) until everything in `w` completed. Returns the error of the first
  /// copy in `w` that failed (io_error for a file read, corrupt_data for a page-in that failed
  /// its verification, logic_error otherwise; null when none did); reap() accounts the failure.
  std::exception_ptr wait_for(std::unique_lock<std::mutex>& lock, const detail::wait_set& w);
  /// Blocks (the lock dropped while waiting) until `h` has no copy in flight and every release
  /// event has completed; `check` runs on each look and may throw to refuse. Returns the slot.
  std::uint32_t quiesce(std::unique_lock<std::mutex>& lock, tensor_handle h,
                        const std::function<void(const detail::tensor_record&)>& check);
  /// Returns HBM memory to the allocator (poisoned in checked mode). `readers`: release events of
  /// kernels that may still read it (held; the fence now holds them); the next user waits on them.
  void free_hbm(const extent& e, std::vector<event_ref> readers = {});
  void free_hbm(detail::freed_hbm f) { free_hbm(f.at, std::move(f.readers)); }
  void free_hbm(std::optional<detail::freed_hbm> f) {
    if (f) free_hbm(std::move(*f));
  }
  /// The fence events the next user of `e` must wait on.
  std::vector<event_ref> fence_events(const extent& e) const;
  /// Hands the release events of `slot` to a fence over the extent at `at` (its bytes, rounded)
  /// that `user` waits on, so they stay alive and keep the range fenced until both are done.
  void fence_release_events(std::uint32_t slot, const void* at, transfer_ticket user);
  void add_fence_user(const extent& e, transfer_ticket user);
  /// Drops fences whose events completed and whose users finished; releases their events.
  void drop_fences();
  /// Throws htp::cuda_error for a copy the transfer engine reported failed.
  [[noreturn]] static void throw_copy_failed(const std::string& what, const std::string& why);
  /// Reports the failure `cause` of a transfer `what` waited for: a file read that failed (the
  /// engine's io_error) as htp::io_error with its path and errno, the type copy_to_host throws
  /// for the same fault; a page-in that failed its verification (the engine's corrupt_data) as
  /// htp::corrupt_data with the engine's message (file or host copy, offset, chunk); anything
  /// else as throw_copy_failed does.
  [[noreturn]] static void throw_transfer_failed(const std::string& what, std::exception_ptr cause);

  // ---- completions (completions.cpp) ----
  /// Accounts finished copies: loads become resident, write-backs free HBM, moves commit. Looks
  /// only at the copies the engine reports finished since the last call.
  void reap();
  /// One finished copy of a registered tensor.
  void copy_done(std::uint32_t slot, const finished_transfer& done);
  /// One finished load detached from its tensor (`d`).
  void detached_load_done(const finished_transfer& done, const detached_load& d);

  // ---- compaction (compaction.cpp) ----
  /// Turns the plain record `h` (whose host extent register_tensor filled with a chunk-frame
  /// sequence) into a compressed weight of `bytes` logical bytes; returns its new handle. Under
  /// the lock. Never throws.
  tensor_handle adopt_coded(tensor_handle h, std::size_t bytes,
                            std::shared_ptr<const coded_layout> layout);
  /// Decodes the wire bytes `wire` of a compressed tensor laid out as `layout` into `dst` on the
  /// CPU, its pieces spread over every core (each piece decodes alone). Needs no lock: the caller
  /// hands it a copy of the wire bytes. @throws htp::corrupt_data for a corrupt piece.
  static void decode_to_host(const coded_layout& layout, const std::uint8_t* wire, void* dst);
  /// Plans and submits compaction moves (for `request_bytes`, or a full pass when 0). Returns the
  /// number of moves started. Moves complete in reap().
  std::size_t start_compaction(std::size_t request_bytes);
  /// Starts a background compaction when fragmentation passed the threshold.
  void maybe_auto_compact();
  /// Waits for the moves in flight into `w`.
  void add_move_waits(detail::wait_set& w) const;

  // ---- metrics (pager_metrics.cpp) ----
  void sample_occupancy() { stats.sample_occupancy(hbm_bytes_held, hbm->capacity_bytes()); }
  pager_metrics snapshot() const;
  /// The out-of-memory diagnostic: "cannot <what> '<name>'", then the state of HBM.
  std::string oom_message(std::size_t bytes, const std::string& name, const char* what) const;
};

}  // namespace htp
