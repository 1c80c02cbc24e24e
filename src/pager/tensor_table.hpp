// The tensor table: the home of the pager's tensor state machine. It owns every registered
// tensor's record, the handle table, the list of copies in flight (by ticket too), the release
// points of each tensor and the victim index that follows their state. Only this component writes
// a tensor's residency: the rest of the pager reads records and asks for transitions by name
// (begin_load, finish_load, fail_load, detach_load, begin_write_back, ..., pin, unpin, release).
// Each transition checks the state machine's invariants in one place (check) in checked mode,
// re-keys the tensor in the victim index, and reports what happened to the observers
// (observer.hpp), once, where it happens. It also keeps the policy's per-tensor notes
// (tensor_notes): only this file writes them.
//
// The states (include/htp/pager.hpp, "Residency"):
//
//   host --begin_load--> loading --finish_load--> resident --begin_write_back--> writing_back
//     ^                    |  |                     |  ^                            |  |
//     +----fail_load-------+  +--detach_load--> host |  +----cancel_write_back------+  |
//     +--------------------------drop_to_host--------+                                |
//     +------------------------------------finish_write_back--------------------------+
//
// An activation (tensor_kind::activation) also carries `dead`: its content is not yet written or
// past its last use. host --begin_fresh--> resident (a dead one: HBM allocated, nothing copied);
// release(dirty) makes it live; release_last_use (or discard, unpinned) makes it dead again, and
// drop_dead takes a dead, idle one back to host with no write-back. A dead tensor is never loaded
// nor written back, and is the first victim (keyed as never used again).
//
// with moves (begin_move / finish_move) inside `resident`, and pins (pin, pin_degraded, unpin,
// release) orthogonal to the states. Not thread-safe: the pager's mutex guards it.
#pragma once

#include <htp/device.hpp>
#include <htp/pager.hpp>
#include <htp/slab_allocator.hpp>
#include <htp/tensor_file.hpp>
#include <htp/tensor_source.hpp>
#include <htp/transfer_engine.hpp>

#include "pager/event_pool.hpp"
#include "pager/observer.hpp"
#include "pager/release_points.hpp"
#include "pager/routed_groups.hpp"
#include "pager/schedule.hpp"
#include "pager/victim_index.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace htp::detail {

/// What a pending copy of a tensor is doing.
enum class pending_kind { none, load, write_back, move };

inline constexpr std::uint32_t not_in_flight = 0xffffffffu;

/// Bookkeeping the pager's policy and metrics keep per tensor. Not part of the state machine's
/// invariants, but written by the table's transitions only (the policies read it).
struct tensor_notes {
  bool prefetched_unused = false;  // loaded by a prefetch, not acquired since
  bool fault_load = false;         // the pending load is a demand fault (for latency metrics)
  bool access_counted = false;     // the current run of overlapping pins was counted as an access
                                   // of the schedule (cleared when pins drop to 0)
  transfer_priority ticket_priority = transfer_priority::prefetch;
  std::uint64_t list_mark = 0;  // the list call that last named it (duplicate check)
};

/// When a tensor's copies ran and how the last load failed: read on loads, failures and traces
/// only, so kept apart from the hot fields (written by the table's transitions only).
struct tensor_times {
  std::chrono::steady_clock::time_point ticket_start;  // the pending copy's start
  std::chrono::steady_clock::time_point loaded_at{};   // when the last load's bytes arrived
  std::chrono::steady_clock::time_point acquired_at;   // first pin, for the trace
  std::exception_ptr load_error;  // the typed cause of the last failed load (io_error,
                                  // corrupt_data; null for a device error): the release that
                                  // reports a load_failed extent rethrows it
};

/// One registered tensor (a slot of the handle table). The fields an acquire or release touches
/// come first and fill the first two cache lines of a line-aligned record, so a call on a cold
/// tensor costs few cache misses at 10^6 tensors. Only tensor_table writes the state fields.
struct alignas(64) tensor_record {
  // ---- state (hot) ----
  bool live = false;
  bool degraded = false;         // acquired in zero-copy mode (pins > 0)
  bool dirty = false;            // HBM copy newer than host copy
  bool load_failed = false;      // its page-in failed while acquired: HBM bytes undefined until the
                                 // last release, which frees the extent and reports the failure
  bool device_resident = false;  // register_resident: HBM for life, no host extent, never a victim
                                 // nor moved (outside the victim index)
  bool dead = false;  // an activation whose content is dead (unwritten or past its last use): its
                      // host copy is stale, its next acquire is fresh (begin_fresh)
  std::uint16_t detached_load_count =
      0;  // loads still reading its host copy after it was evicted
          // (detach_load); unregister and copy_to_host wait for them
  tensor_kind kind = tensor_kind::weight;
  residency where = residency::host;
  pending_kind pending = pending_kind::none;
  std::uint32_t generation = 0;  // bumped on unregister; handles carry it
  int pins = 0;
  std::uint32_t in_flight_pos = not_in_flight;  // index in the in-flight list while pending
  std::size_t bytes = 0;
  std::optional<extent> hbm;      // present while loading, resident, writing back
  transfer_ticket ticket;         // the pending copy
  release_points release_events;  // recorded at release; dropped once complete
  tensor_notes notes;

  tensor_times times;

  // ---- identity (set at registration) ----
  std::optional<slab_move> move;  // while pending == move: the planned move to commit
  std::string name;
  tensor_source source;  // where its authoritative bytes are, and how they are stored
};

/// What a new registration is: a tensor whose authoritative bytes are `source`; a device-resident
/// one (register_resident) has none (source_place::none).
struct tensor_spec {
  std::string name;
  tensor_kind kind = tensor_kind::weight;
  tensor_source source;
  bool device_resident = false;

  static tensor_spec of(std::string name, tensor_kind kind, tensor_source source) {
    tensor_spec s;
    s.name = std::move(name);
    s.kind = kind;
    s.source = std::move(source);
    return s;
  }
  static tensor_spec resident(std::string name, std::size_t bytes, tensor_kind kind) {
    tensor_source none;
    none.bytes = bytes;
    tensor_spec s = of(std::move(name), kind, std::move(none));
    s.device_resident = true;
    return s;
  }
};

/// HBM a transition gave up, with the events of kernels that may still read it: the pager frees
/// it (pager::impl::free_hbm), fenced by them.
struct freed_hbm {
  extent at;
  std::vector<event_ref> readers;
};

class tensor_table {
 public:
  /// `schedule` and `groups` key the victim index (next uses, popularity); `events` holds release
  /// points; `observer` is told each transition; `checked` turns on the invariant checks
  /// (pager_config::checked); `stamp_pins` notes when each run of pins began (for the trace).
  tensor_table(device& dev, event_pool& events, const access_schedule& schedule,
               const routed_groups& groups, pager_observer& observer, bool checked,
               bool stamp_pins);
  tensor_table(const tensor_table&) = delete;
  tensor_table& operator=(const tensor_table&) = delete;

  // ---- lookup ----------------------------------------------------------------------------------
  /// The record of a live handle of this pager. @throws htp::invalid_argument for a null, stale or
  /// unknown handle, or one of another pager.
  const tensor_record& get(tensor_handle h) const;
  const tensor_record& operator[](std::uint32_t slot) const { return slots_[slot]; }
  tensor_handle handle_of(std::uint32_t slot) const;
  /// Slots ever used (live or free).
  std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(slots_.size()); }
  /// Checks a list's handles before anything changes: each live and named once, `check` on each
  /// record. @throws htp::invalid_argument naming the first that is not.
  void check_list(const tensor_handle* hs, std::size_t n, const char* what,
                  const std::function<void(const tensor_record&)>& check = {});
  /// Slots with a copy in flight.
  const std::vector<std::uint32_t>& in_flight() const noexcept { return in_flight_; }
  /// The slot whose pending copy is `ticket`, or none.
  std::optional<std::uint32_t> slot_of_ticket(std::uint64_t ticket_id) const;
  const victim_index& victims() const noexcept { return victims_; }

  // ---- registration ----------------------------------------------------------------------------
  /// A new record in `host` state; returns its handle.
  tensor_handle add(tensor_spec spec);
  /// Forgets a record with no pins, no copy in flight and no release point: handles to it go
  /// stale and the slot is reused. Returns the HBM extent it held, for the caller to free.
  std::optional<extent> remove(std::uint32_t slot);
  /// register_resident: the record (host, no pins) takes `where` for life, resident.
  void place_resident(std::uint32_t slot, extent where);

  // ---- copies ----------------------------------------------------------------------------------
  /// host -> loading into `where`, the copy being `ticket` at `priority` (a fault, or a prefetch
  /// whose tensor is then prefetched_unused until acquired).
  void begin_load(std::uint32_t slot, extent where, transfer_ticket ticket,
                  transfer_priority priority);
  /// A load in flight was moved ahead to fault priority (a late prefetch an acquire waits for).
  void raise_to_fault(std::uint32_t slot);
  /// loading -> resident: the load's bytes arrived, `latency` after it started.
  void finish_load(std::uint32_t slot, std::chrono::nanoseconds latency);
  /// The load failed with `why` (kept for the release that reports it). Pinned: kept
  /// (load_failed) until the last release; else back to host, its HBM returned (whatever kernels
  /// wrote there is lost with it; the host copy is authoritative).
  std::optional<freed_hbm> fail_load(std::uint32_t slot, std::exception_ptr why);
  /// loading -> host without waiting for the load (an unpinned tensor acquired and released while
  /// it loads), for `why`: the load goes on, detached; detached_load_done ends it.
  freed_hbm detach_load(std::uint32_t slot, cause why);
  /// A load detached from a registration of `slot` (at `generation`) has finished.
  void detached_load_done(std::uint32_t slot, std::uint32_t generation);
  /// resident and dirty -> writing_back (its eviction, for `why`).
  void begin_write_back(std::uint32_t slot, transfer_ticket ticket, cause why);
  /// writing_back -> resident (an acquire while it writes back: the HBM copy is still good).
  void cancel_write_back(std::uint32_t slot);
  /// The write-back completed (`latency` after it started): writing_back -> host (its HBM
  /// returned), or stays resident when cancel_write_back ran meanwhile.
  std::optional<extent> finish_write_back(std::uint32_t slot, std::chrono::nanoseconds latency);
  /// The write-back failed: resident and dirty again (the host copy may be half overwritten).
  void fail_write_back(std::uint32_t slot);
  /// A compaction move of a resident tensor: it points at the destination at once.
  void begin_move(std::uint32_t slot, const slab_move& m, transfer_ticket ticket);
  /// The move ended (ok: committed to the destination, `latency` after it started; else back at
  /// the source). Returns it for the allocator to commit or cancel.
  slab_move finish_move(std::uint32_t slot, bool ok, std::chrono::nanoseconds latency);
  /// resident, clean and idle -> host, for `why`; the HBM returned with the release events still
  /// pending.
  freed_hbm drop_to_host(std::uint32_t slot, cause why);
  /// A dead activation's acquire: host -> resident in `where`, nothing copied (its bytes are
  /// undefined until the kernels write them; release(dirty) makes it live).
  void begin_fresh(std::uint32_t slot, extent where);
  /// A dead activation, resident and idle -> host, no write-back (its content is dead); the HBM
  /// returned with the release events still pending.
  freed_hbm drop_dead(std::uint32_t slot);
  /// Whether `slot` is a dead activation holding HBM it may give up now (drop_dead).
  bool can_drop_dead(std::uint32_t slot) const;
  /// pager::discard of an unpinned, live activation: its content dies without a use (clean, the
  /// host copy stale). One writing back goes back to resident with the write-back still pending
  /// (as cancel_write_back leaves it; its completion frees nothing), so that only the room maker's
  /// discard_dead frees the extent: now when no copy is in flight, else when the copy completes.
  void discard(std::uint32_t slot);

  // ---- pins and releases -----------------------------------------------------------------------
  /// One more acquire of a tensor that holds HBM (resident, loading or writing back).
  void pin(std::uint32_t slot);
  /// True once per run of overlapping pins: the first acquire to succeed counts the access (of
  /// the schedule); the flag clears when the pins drop to 0.
  bool count_access(std::uint32_t slot);
  /// One more acquire served from mapped host memory (host, or degraded already).
  void pin_degraded(std::uint32_t slot);
  /// One acquire fewer, nothing recorded on a stream (an acquire undone). Returns the HBM of a
  /// failed load when this was its last pin.
  std::optional<freed_hbm> unpin(std::uint32_t slot);
  /// A release on `point.stream`: the point is kept (superseding the stream's earlier one when
  /// `supersede`), the pin dropped, `dirty` marks the HBM copy newer than the host's. Returns the
  /// HBM of a failed load when this was its last pin.
  std::optional<freed_hbm> release(std::uint32_t slot, release_point point, bool dirty,
                                   bool supersede);
  /// release() of the last pin of an activation at its last use: the content is dead (clean, the
  /// host copy stale). Returns the HBM of a failed load, as release does.
  std::optional<freed_hbm> release_last_use(std::uint32_t slot, release_point point,
                                            bool supersede);
  /// Retires the release points on stream `s` (native handle) whose events completed, oldest
  /// first, in O(what completed).
  void retire_releases(void* s);
  /// Retires the completed release points of every stream.
  void retire_all_releases();
  /// Drops the completed release points of `slot`; true when none is pending.
  bool settle(std::uint32_t slot);
  /// Hands every release event of `slot` to the caller (ownership moves).
  std::vector<event_ref> take_release_events(std::uint32_t slot);

  // ---- the victim index ------------------------------------------------------------------------
  /// Re-keys `slot` after its next use changed (the schedule advanced or was set).
  void reindex(std::uint32_t slot);
  /// Re-keys every tensor holding HBM (O(n log n); after the schedule changed).
  void reindex_all();

  // ---- predicates ------------------------------------------------------------------------------
  /// Resident, unpinned, no copy in flight: may be evicted now (its release events may be pending;
  /// the next user of the memory waits on them on the device).
  bool can_evict(std::uint32_t slot) const;
  /// An unpinned tensor whose load is in flight, acquired and released since: its release events
  /// follow the compute stream's wait for the load, so detach_load orders reuse on the device.
  bool can_evict_loading(std::uint32_t slot) const;

 private:
  tensor_record& at(std::uint32_t slot) { return slots_[slot]; }
  /// A copy of `t` starts now at `priority` (its trace span and latency start here).
  static void stamp(tensor_record& t, transfer_priority priority);
  void set_pending(std::uint32_t slot, pending_kind kind, transfer_ticket ticket = {});
  /// The HBM extent leaves the tensor: host state, release events handed over.
  freed_hbm to_host(std::uint32_t slot);
  /// Keeps `point` among the tensor's release points (superseding the stream's earlier one when
  /// `supersede`) and queues it for retirement.
  void keep_release_point(std::uint32_t slot, release_point point, bool supersede);
  /// After a transition: re-key in the victim index and, in checked mode, check the invariants.
  void done(std::uint32_t slot);
  /// The state machine's invariants for `slot`. @throws htp::logic_error naming the broken one.
  void check(std::uint32_t slot) const;

  struct release_entry {  // a release waiting to be retired, per stream in release order
    std::uint64_t seq;
    std::uint32_t slot;
    std::uint32_t generation;
  };

  device& dev_;
  event_pool& events_;
  const access_schedule& schedule_;
  const routed_groups& groups_;
  pager_observer& observe_;
  const bool checked_;
  const bool stamp_pins_;
  std::uint64_t list_epoch_ = 0;  // marks the handles one check_list call has seen
  const std::uint32_t owner_;     // carried by every handle this table gives out
  std::vector<tensor_record> slots_;
  std::vector<std::uint32_t> free_slots_;
  std::vector<std::uint32_t> in_flight_;
  std::unordered_map<std::uint64_t, std::uint32_t> ticket_slot_;   // pending ticket id -> slot
  std::unordered_map<void*, std::deque<release_entry>> releases_;  // by stream, oldest first
  victim_index victims_;
};

}  // namespace htp::detail
