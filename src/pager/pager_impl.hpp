// The pager's private state, shared by the files of src/pager/. One mutex guards all of it; calls
// that must block (waiting for a copy or a release event) drop the lock while they wait and
// re-validate afterwards. No path scans every registered tensor: copies in flight are a list
// (reap), victims come from victim_index, fences from fence_set (see docs/pager.md, "Costs").
#pragma once

#include <htp/error.hpp>
#include <htp/latency_histogram.hpp>
#include <htp/pager.hpp>
#include <htp/tensor_file.hpp>
#include <htp/slab_allocator.hpp>
#include <htp/transfer_engine.hpp>

#include "pager/event_pool.hpp"
#include "pager/fences.hpp"
#include "pager/schedule.hpp"
#include "pager/trace.hpp"
#include "pager/victim_index.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <unordered_map>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace htp {

namespace detail {

/// What a pending copy of a tensor is doing.
enum class pending_kind { none, load, write_back, move };

/// A release point: an event recorded on the stream that released the tensor. A later release on
/// the same stream supersedes it (streams run in order), so a tensor holds at most one per stream.
struct release_point {
  event_ref event;   // held (event_pool reference) while the point is
  stream_ref stream;
  std::uint64_t seq = 0;  // release number, to match the stream's retirement queue
};

/// A release waiting to be retired: once its event completes, the tensor's point is dropped and
/// the event recycled. One queue per stream, in release order (a stream completes in order), so
/// retiring costs O(1) amortised and never scans the tensors. An entry is stale (popped without a
/// look) when its tensor no longer holds that point: superseded, handed to a fence, unregistered.
struct release_entry {
  std::uint64_t seq;
  std::uint32_t slot;
  std::uint32_t generation;
};

inline constexpr std::uint32_t not_in_flight = 0xffffffffu;

/// One registered tensor (a slot of the handle table). The fields an acquire or release touches
/// come first, so a call on a cold tensor costs few cache misses at 10^6 tensors.
struct tensor_record {
  // ---- hot: every acquire and release ----
  bool live = false;
  bool degraded = false;       // acquired in zero-copy mode (pins > 0)
  bool dirty = false;          // HBM copy newer than host copy
  bool prefetched_unused = false;  // loaded by a prefetch, not acquired since
  bool fault_load = false;     // the pending load is a demand fault (for latency metrics)
  bool load_failed = false;    // its page-in failed while acquired: HBM bytes undefined until the
                               // last release, which frees the extent and reports the failure
  bool external = false;       // host is caller memory (register_tensor_at): never copied nor freed
  bool device_resident = false;  // register_resident: HBM for life, no host extent, never a victim
                                 // nor moved (outside the victim index)
  std::uint16_t detached_load_count = 0;  // loads still reading its host copy after it was evicted
                                     // (evict_loading); unregister and copy_to_host wait for them
  bool access_counted = false; // the current run of overlapping pins was counted as an access of
                               // the schedule (cleared when pins drop to 0)
  tensor_kind kind = tensor_kind::weight;
  residency where = residency::host;
  pending_kind pending = pending_kind::none;
  std::uint32_t generation = 0;  // bumped on unregister; handles carry it
  int pins = 0;
  std::uint32_t in_flight_pos = not_in_flight;  // index in impl::in_flight while pending
  std::size_t bytes = 0;
  std::uint64_t list_mark = 0;            // the list call that last named it (duplicate check)
  std::optional<extent> hbm;   // present while loading, resident, writing back
  transfer_ticket ticket;      // the pending copy
  std::vector<release_point> release_events;  // recorded at release; dropped once complete

  // ---- the rest ----
  extent host;                 // always present while live: the pager's host tier, or caller memory
  transfer_priority ticket_priority = transfer_priority::prefetch;
  std::chrono::steady_clock::time_point ticket_start;
  std::chrono::steady_clock::time_point wait_from{};  // an acquire waits for the pending load
                                                      // since then (fault wait metric); {} = none
  std::chrono::steady_clock::time_point loaded_at{};  // when the last load's bytes arrived
  std::optional<slab_move> move;  // while pending == move: the planned move to commit
  std::chrono::steady_clock::time_point acquired_at;  // first pin, for the trace
  std::string name;
  std::shared_ptr<const tensor_file> file;  // register_file_tensor: page-ins read it; no host extent
  std::uint64_t file_offset = 0;
};

/// One page-fault wait (see fault_wait_summary).
struct fault_wait_sample {
  std::uint64_t ns;
  std::uint64_t bytes;
};

/// Things a blocked request waits for before retrying.
struct wait_set {
  std::vector<transfer_ticket> tickets;
  std::vector<event_ref> events;
  bool compacted = false;  // a compaction for the request was started
  bool only_moves = false; // every ticket is a compaction move: one that fails loses nothing
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

/// How one element of an acquire ended (counted once the whole call succeeds).
enum class acquire_outcome {
  hit,
  prefetch_hit,
  late_prefetch,
  fault,
  degraded,      // shares a degraded (zero-copy) acquire already in place
  degraded_oom,  // the ladder's rung 5 served it zero-copy
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
  std::vector<std::uint32_t> skipped;  // scratch: slots whose next use an access skipped
  detail::victim_index victims;
  std::vector<std::uint32_t> in_flight;  // slots with a pending copy
  std::unordered_map<std::uint64_t, std::uint32_t> ticket_slot;  // pending ticket id -> slot
  detail::event_pool events;
  std::unordered_map<void*, std::deque<detail::release_entry>> releases;  // by stream, oldest first;
                                                                           // empty queues erased
  // Loads of tensors evicted before the load finished (evict_loading), by ticket: their completions
  // feed the metrics and the trace, or count as failed loads; synchronize and quiesce wait for them.
  struct detached_load {
    bool fault_load;  // counts in the fault latency
    std::chrono::steady_clock::time_point wait_from;  // an acquire's fault wait, or {}
    std::chrono::steady_clock::time_point started;
    std::size_t bytes;
    std::uint32_t slot;        // the tensor it was loading, while that registration lives
    std::uint32_t generation;
    std::string traced_name;  // with trace = true only
  };
  std::unordered_map<std::uint64_t, detached_load> detached_loads;
  // Release events are recorded outside the lock; two releases recording at once may land on a
  // stream in either order, so neither may then supersede the other (release_n).
  std::uint64_t records_started = 0;
  int records_in_progress = 0;
  std::uint64_t release_seq = 0;
  detail::fence_set fences;              // freed HBM still read by queued kernels
  std::map<const char*, detail::host_region> host_regions;  // caller memory, by start address
  std::uint64_t hbm_frees = 0;           // HBM extents freed so far
  std::uint64_t hbm_frees_at_compaction = 0;  // ... when auto-compaction last ran
  stream private_stream;               // for copy_to_host of a dirty resident tensor

  // ---- metrics state ----
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_sample = start;
  double hbm_occupancy_integral = 0;  // pct x seconds
  double hbm_peak_pct = 0;
  double host_peak_pct = 0;
  /// An unpinned tensor whose load is still in flight, acquired and released since the load began:
  /// its release events follow the compute stream's wait for the load, so they order the next
  /// copy into its memory after the load too, on the device.
  bool can_evict_loading(const detail::tensor_record& t) const;
  /// Evicts such a tensor without waiting: frees the extent fenced by its release events and
  /// detaches the load (its completion then only feeds the metrics).
  void evict_loading(std::uint32_t slot);
  latency_histogram fault_latency;
  std::vector<detail::fault_wait_sample> fault_waits;  // since the last reset, at most fault_wait_cap
  std::uint64_t fault_waits_dropped = 0;
  static constexpr std::size_t fault_wait_cap = std::size_t{1} << 20;
  /// Nanoseconds from `from` to `to`, 0 if `to` is earlier.
  static std::uint64_t ns_between(std::chrono::steady_clock::time_point from,
                                  std::chrono::steady_clock::time_point to) noexcept;
  /// Records one fault wait of a tensor of `bytes`, from `from` (an acquire call) to `to` (its bytes
  /// usable); nothing when `from` is unset ({}).
  void record_fault_wait(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to,
                         std::size_t bytes);
  /// Exact quantiles of `samples` (any thread, no lock needed); `peak` = H2D link bytes/s.
  static fault_wait_summary summarize_fault_waits(const std::vector<detail::fault_wait_sample>& samples,
                                                  std::uint64_t dropped, double peak);
  void reset_metrics();
  pager_metrics counters;  // the plain counters; occupancy and transfers filled at snapshot

  // ---- handle table (pager.cpp) ----
  detail::tensor_record& get(tensor_handle h);
  const detail::tensor_record& get(tensor_handle h) const;
  tensor_handle handle_of(std::uint32_t slot) const;
  /// The caller region holding [p, p + bytes), or null.
  detail::host_region* region_of(const void* p, std::size_t bytes);
  /// Takes a free handle-table slot and fills it; returns the handle.
  tensor_handle add_record(std::string name, std::size_t bytes, tensor_kind kind, extent host,
                           bool external);
  /// Empties slot `slot` (its memory already freed): handles to it go stale, the slot is reused.
  void drop_record(std::uint32_t slot);

  /// Blocks (the lock dropped while waiting) until make_room gives an extent of `bytes` for the
  /// demand of `slot`, running the ladder's rungs 1-4. @throws ladder_exhausted (counted) when
  /// nothing more can be freed; htp::cuda_error when a copy it waited for failed.
  extent room_for(std::unique_lock<std::mutex>& lock, std::uint32_t slot, std::size_t bytes);

  // ---- acquire and release (acquire.cpp) ----
  /// Pins one tensor for `compute` (the body of acquire; may drop the lock while the ladder
  /// waits). Sets `pending` to the copy the compute stream must wait for (null when none).
  /// Does not advance the schedule: the caller does once every element has succeeded.
  device_span acquire_one(std::unique_lock<std::mutex>& lock, tensor_handle h,
                          detail::acquire_outcome& outcome, transfer_ticket& pending);
  /// Undoes acquire_one's pin (nothing was queued on the stream but waits).
  void unpin(tensor_handle h);
  /// Adds (sign 1) or takes back (sign -1) an acquire outcome in the counters.
  void count_outcome(detail::acquire_outcome o, int sign);
  std::uint64_t list_epoch = 0;  // marks handles seen in one list call (tensor_record::list_mark)
  /// acquire() for n handles: all or nothing.
  void acquire_n(const tensor_handle* hs, std::size_t n, stream_ref compute, bool wait,
                 device_span* out);
  /// release() for n handles: one event recorded on `compute` for all of them.
  void release_n(const tensor_handle* hs, std::size_t n, stream_ref compute, bool dirty);

  // ---- residency (residency.cpp) ----
  /// Accounts finished copies: loads become resident, write-backs free HBM, moves commit. Looks
  /// only at the copies the engine reports finished since the last call.
  void reap();
  /// Marks `slot` as having `ticket` in flight (kind), or clears it (none).
  void set_pending(std::uint32_t slot, detail::pending_kind kind, transfer_ticket ticket = {});
  /// Puts `slot` where its state says in the victim index. Call after any change of hbm, pins,
  /// dirty, load_failed or its next use. Recency (LRU) is the order of joining a group.
  void reindex(std::uint32_t slot);
  /// Advances the schedule for an access of `slot` and re-keys what the access skipped.
  void record_access(std::uint32_t slot);
  /// True when Belady's rule is in force.
  bool belady() const;
  /// Retires the releases on stream `s` (native handle) whose events completed, oldest first.
  void retire_releases(void* s);
  /// Releases completed release events; true when none is pending.
  bool settle(detail::tensor_record& t);
  /// Drops every release event of `t` into `out` (ownership moves).
  static std::vector<event_ref> take_release_events(detail::tensor_record& t);
  /// True when the tensor may be evicted now: resident, unpinned, no copy in flight. Its release
  /// events may still be pending: the next user of the memory waits on them on the device.
  bool can_evict(const detail::tensor_record& t) const;
  /// True when the tensor may be moved now: can_evict and every release event completed.
  bool can_move(detail::tensor_record& t);
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
  /// The prefetch's victim for `for_slot`, or none when a prefetch must not evict now.
  std::optional<std::uint32_t> prefetch_victim(std::uint32_t for_slot) const;
  /// Starts loading `slot` into `where` at `priority`.
  void start_load(std::uint32_t slot, extent where, transfer_priority priority);
  /// Evicts a tensor that can_evict: frees HBM now if clean (fenced by its release events), else
  /// starts its write-back ordered after them.
  void evict_now(std::uint32_t slot);
  /// Issues prefetches for the next lookahead tensors of the schedule, in order, stopping at the
  /// first that cannot be brought in (a later one must not take the room an earlier one needs).
  void prefetch_upcoming();
  /// Prefetches one slot if it is in host and there is room without blocking; false if it could
  /// not (already there or coming counts as done).
  bool prefetch_slot(std::uint32_t slot);
  /// Blocks (lock dropped) until everything in `w` completed. Returns the error of the first
  /// copy in `w` that failed (empty when none did); reap() accounts the failure.
  std::string wait_for(std::unique_lock<std::mutex>& lock, const detail::wait_set& w);
  /// Blocks (the lock dropped while waiting) until `h` has no copy in flight and every release
  /// event has completed; `check` runs on each look and may throw to refuse. Returns the record.
  detail::tensor_record& quiesce(std::unique_lock<std::mutex>& lock, tensor_handle h,
                                 const std::function<void(const detail::tensor_record&)>& check);
  /// Returns HBM memory to the allocator (poisoned in checked mode). `readers`: release events of
  /// kernels that may still read it (held; the fence now holds them); the next user waits on them.
  void free_hbm(const extent& e, std::vector<event_ref> readers = {});
  /// The fence events the next user of `e` must wait on, and registers `user` as waiting on them.
  std::vector<event_ref> fence_events(const extent& e) const;
  /// Hands t's release events to a fence over the extent at `at` (t's bytes, rounded) that `user`
  /// waits on, so they stay alive and keep the range fenced until both are done. No-op without any.
  void fence_release_events(detail::tensor_record& t, const void* at, transfer_ticket user);
  void add_fence_user(const extent& e, transfer_ticket user);
  /// Drops fences whose events completed and whose users finished; releases their events.
  void drop_fences();
  /// Throws htp::cuda_error for a copy the transfer engine reported failed.
  [[noreturn]] static void throw_copy_failed(const std::string& what, const std::string& why);

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
  /// The out-of-memory diagnostic: "cannot <what> '<name>'", then the state of HBM.
  std::string oom_message(std::size_t bytes, const std::string& name, const char* what) const;
};

}  // namespace htp
