// The pager's private state, shared by the files of src/pager/. One mutex guards all of it; calls
// that must block (waiting for a copy or a release event) drop the lock while they wait and
// re-validate afterwards.
#pragma once

#include <htp/latency_histogram.hpp>
#include <htp/pager.hpp>
#include <htp/slab_allocator.hpp>
#include <htp/transfer_engine.hpp>

#include "pager/schedule.hpp"
#include "pager/trace.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace htp {

namespace detail {

/// What a pending copy of a tensor is doing.
enum class pending_kind { none, load, write_back, move };

/// One registered tensor (a slot of the handle table).
struct tensor_record {
  bool live = false;
  std::uint32_t generation = 0;  // bumped on unregister; handles carry it
  std::string name;
  std::size_t bytes = 0;
  tensor_kind kind = tensor_kind::weight;

  extent host;                 // always allocated while live
  std::optional<extent> hbm;   // present while loading, resident, writing back
  residency where = residency::host;

  pending_kind pending = pending_kind::none;
  transfer_ticket ticket;      // the pending copy
  transfer_priority ticket_priority = transfer_priority::prefetch;
  std::chrono::steady_clock::time_point ticket_start;
  std::optional<slab_move> move;  // while pending == move: the planned move to commit

  int pins = 0;
  bool degraded = false;       // acquired in zero-copy mode (pins > 0)
  bool dirty = false;          // HBM copy newer than host copy
  bool prefetched_unused = false;  // loaded by a prefetch, not acquired since
  bool fault_load = false;     // the pending load is a demand fault (for latency metrics)
  bool load_failed = false;    // its page-in failed while acquired: HBM bytes undefined until the
                               // last release, which frees the extent and reports the failure
  std::vector<event_ref> release_events;  // recorded at release; cleared once complete
  std::uint64_t last_access = 0;          // LRU tick
  std::chrono::steady_clock::time_point acquired_at;  // first pin, for the trace
};

/// HBM that was freed while kernels may still read it: whoever is handed memory overlapping
/// [begin, end) next must order its copy after `events` on the device. Dropped once the events
/// have completed and every request that was told to wait on them has finished (until then the
/// events must not be recycled: a re-recorded event would make the wait mean something else).
struct fence {
  const char* begin = nullptr;
  const char* end = nullptr;
  std::vector<event_ref> events;
  std::vector<transfer_ticket> users;
};

/// Things a blocked request waits for before retrying.
struct wait_set {
  std::vector<transfer_ticket> tickets;
  std::vector<event_ref> events;
  bool compacted = false;  // a compaction for the request was started
  bool empty() const { return tickets.empty() && events.empty(); }
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
  std::unique_ptr<detail::trace_log> trace;

  mutable std::mutex mutex;
  std::vector<detail::tensor_record> tensors;
  std::vector<std::uint32_t> free_slots;
  detail::access_schedule schedule;
  std::uint64_t tick = 0;
  std::vector<event_ref> event_pool;  // idle events for release points
  std::vector<detail::fence> fences;  // freed HBM still read by queued kernels
  std::vector<event_ref> all_events;  // every event created, destroyed at the end
  stream private_stream;               // for copy_to_host of a dirty resident tensor

  // ---- metrics state ----
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_sample = start;
  double hbm_occupancy_integral = 0;  // pct x seconds
  double hbm_peak_pct = 0;
  double host_peak_pct = 0;
  latency_histogram fault_latency;
  pager_metrics counters;  // the plain counters; occupancy and transfers filled at snapshot

  // ---- handle table (pager.cpp) ----
  detail::tensor_record& get(tensor_handle h);
  const detail::tensor_record& get(tensor_handle h) const;
  tensor_handle handle_of(std::uint32_t slot) const;

  // ---- residency (residency.cpp) ----
  /// Accounts finished copies: loads become resident, write-backs free HBM, moves commit.
  void reap();
  /// Frees release events that have completed; true when none is pending.
  bool settle(detail::tensor_record& t);
  /// True when the tensor may be evicted now: resident, unpinned, no copy in flight. Its release
  /// events may still be pending: the next user of the memory waits on them on the device.
  bool can_evict(const detail::tensor_record& t) const;
  /// True when the tensor may be moved now: can_evict and every release event completed.
  bool can_move(detail::tensor_record& t);
  /// How strongly `slot` should be evicted (larger first) under the eviction rule.
  std::uint64_t eviction_rank(std::uint32_t slot) const;
  /// Tries to get an HBM extent for `bytes`. demand: the ladder's rungs 1-4 may run (rungs that
  /// must block return a wait set instead; compaction at most once per request, when allowed). Otherwise (prefetch): only clean, settled victims whose
  /// next use is farther than `for_slot`'s.
  std::optional<extent> make_room(std::size_t bytes, bool demand, std::uint32_t for_slot,
                                  bool allow_compaction, detail::wait_set& waits);
  /// Starts loading `slot` into `where` at `priority`.
  void start_load(std::uint32_t slot, extent where, transfer_priority priority);
  /// Evicts a tensor that can_evict: frees HBM now if clean (fenced by its release events), else
  /// starts its write-back ordered after them.
  void evict_now(std::uint32_t slot);
  /// Issues prefetches for the next lookahead tensors of the schedule.
  void prefetch_upcoming();
  /// Prefetches one slot if it is in host and there is room without blocking.
  void prefetch_slot(std::uint32_t slot);
  /// Blocks (lock dropped) until everything in `w` completed. Returns the error of the first
  /// copy in `w` that failed (empty when none did); reap() accounts the failure.
  std::string wait_for(std::unique_lock<std::mutex>& lock, const detail::wait_set& w);
  /// Blocks (the lock dropped while waiting) until `h` has no copy in flight and every release
  /// event has completed; `check` runs on each look and may throw to refuse. Returns the record.
  detail::tensor_record& quiesce(std::unique_lock<std::mutex>& lock, tensor_handle h,
                                 const std::function<void(const detail::tensor_record&)>& check);
  /// Returns HBM memory to the allocator (poisoned in checked mode). `readers`: release events of
  /// kernels that may still read it; they become a fence the next user waits on.
  void free_hbm(const extent& e, std::vector<event_ref> readers = {});
  /// The fence events the next user of `e` must wait on, and registers `user` as waiting on them.
  std::vector<event_ref> fence_events(const extent& e) const;
  void add_fence_user(const extent& e, transfer_ticket user);
  /// Drops fences whose events completed and whose users finished; recycles their events.
  void drop_fences();
  event_ref take_event();
  /// Throws htp::cuda_error for a copy the transfer engine reported failed.
  [[noreturn]] static void throw_copy_failed(const std::string& what, const std::string& why);
  void recycle_event(event_ref e);

  // ---- compaction (compaction.cpp) ----
  /// Plans and submits compaction moves (for `request_bytes`, or a full pass when 0). Returns the
  /// number of moves started. Moves complete in reap().
  std::size_t start_compaction(std::size_t request_bytes);
  /// Starts a background compaction when fragmentation passed the threshold.
  void maybe_auto_compact();
  std::size_t moves_in_flight = 0;
  std::size_t hbm_bytes_held = 0;  // bytes of HBM extents the pager holds, move destinations included

  // ---- metrics (pager_metrics.cpp) ----
  void sample_occupancy();
  pager_metrics snapshot() const;
  std::string oom_message(std::size_t bytes, const std::string& name) const;
};

}  // namespace htp
