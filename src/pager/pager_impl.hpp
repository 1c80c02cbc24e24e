// The pager's private state, shared by the files of src/pager/. One mutex guards all of it; calls
// that must block (waiting for a copy or a release event) drop the lock while they wait and
// re-validate afterwards. pager::impl keeps the calls: acquire, release, completions and
// registration. Everything else has a component of its own, each stating its invariants first:
//   tiers.hpp         the HBM and host allocators and the transfer engine over them
//   tensor_table.hpp  every tensor's state machine (the only writer of residency)
//   prefetcher.hpp    the forecast (schedule, routed groups, expected experts), pace, prefetches
//   room_maker.hpp    victims, the out-of-memory ladder, loads, evictions, moves, fenced frees
//   observer.hpp      what the components report; pager_stats.hpp and decision_log.hpp watch it
// An acquire runs down these layers and back: pager -> impl -> tensor table / room maker ->
// transfer engine, and never from a component back into impl. Costs (docs/pager.md, "Costs"):
// copies in flight are a list (reap), victims come from the victim index, fences from the fence
// set; set_schedule and unregistering a scheduled tensor re-key every tensor in HBM.
#pragma once

#include <htp/error.hpp>
#include <htp/pager.hpp>

#include "pager/decision_log.hpp"
#include "pager/event_pool.hpp"
#include "pager/observer.hpp"
#include "pager/pager_stats.hpp"
#include "pager/prefetcher.hpp"
#include "pager/room_maker.hpp"
#include "pager/tensor_table.hpp"
#include "pager/tiers.hpp"

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace htp {

namespace detail {

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

/// The pager's observers: the statistics always, the decision log when HTP_DECISION_LOG is set.
struct observation {
  explicit observation(std::size_t trace_capacity) : stats(trace_capacity) {
    all.add(&stats);
    if (decisions.on()) all.add(&decisions);
  }
  pager_stats stats;
  decision_log decisions;
  observer_list all;  // what the components tell
};

/// Release events are recorded outside the lock; two releases recording at once may land on a
/// stream in either order, so neither may then supersede the other (release_n).
struct release_order {
  std::uint64_t records_started = 0;
  int records_in_progress = 0;
  std::uint64_t seq = 0;
};

}  // namespace detail

struct pager::impl {
  impl(device& d, pager_config c);
  ~impl();

  device& dev;
  pager_config config;
  detail::tiers tiers;  // hbm, host, engine
  mutable std::mutex mutex;
  detail::observation observe;
  detail::event_pool events;
  // The prefetcher owns the forecast the tensor table keys its victim index by: it comes first.
  detail::prefetcher prefetch;
  detail::tensor_table tensors;  // the state machine: every tensor's residency, pins, releases
  detail::room_maker room;
  detail::release_order releases;
  std::map<const char*, detail::host_region> host_regions;  // caller memory, by start address

  // ---- handles and registration (pager.cpp, resident.cpp, compressed.cpp) ----
  /// The slot of a live handle of this pager. @throws htp::invalid_argument otherwise.
  std::uint32_t slot_of(tensor_handle h) const {
    (void)tensors.get(h);
    return h.index;
  }
  /// The caller region holding [p, p + bytes), or null.
  detail::host_region* region_of(const void* p, std::size_t bytes);
  /// Blocks (the lock dropped while waiting) until the ladder gives an extent of `bytes` for the
  /// device-resident tensor of `slot`. @throws ladder_exhausted (counted) when nothing more can
  /// be freed; htp::cuda_error when a copy it waited for failed.
  extent room_for(std::unique_lock<std::mutex>& lock, std::uint32_t slot, std::size_t bytes);
  /// Turns the plain record `h` (whose host extent register_tensor filled with a chunk-frame
  /// sequence) into a compressed weight; returns its new handle. Under the lock. Never throws.
  tensor_handle adopt_coded(tensor_handle h, std::shared_ptr<const coded_layout> layout);
  /// Decodes the wire bytes `wire` of a compressed tensor laid out as `layout` into `dst` on the
  /// CPU, its pieces spread over every core. Needs no lock. @throws htp::corrupt_data.
  static void decode_to_host(const coded_layout& layout, const std::uint8_t* wire, void* dst);

  // ---- acquire and release (acquire.cpp) ----
  /// Refuses (htp::logic_error, naming `call` and the static plan to use) a compute stream that
  /// is capturing a graph: what the pager does per acquire cannot be replayed.
  void check_not_capturing(stream_ref compute, const char* call) const;
  /// acquire() for n handles: all or nothing.
  void acquire_n(const tensor_handle* hs, std::size_t n, stream_ref compute, bool wait,
                 device_span* out);
  /// Pins one tensor for `compute` (may drop the lock while the ladder waits). Sets `pending` to
  /// the copy the compute stream must wait for (null when none) and adds to `waits` the release
  /// events of other streams it must wait for (a mutable tensor's writes).
  device_span acquire_one(std::unique_lock<std::mutex>& lock, tensor_handle h, stream_ref compute,
                          detail::acquire_outcome& outcome, transfer_ticket& pending,
                          std::vector<event_ref>& waits);
  /// The host state of `slot`: a fault, or a fresh acquire of a dead activation (HBM and no copy;
  /// the fences over the extent are added to `waits`, held, for the compute stream). False: the
  /// ladder waited (the caller looks again).
  bool page_in(std::unique_lock<std::mutex>& lock, std::uint32_t slot, bool& compacted,
               detail::acquire_outcome& outcome, std::vector<event_ref>& waits);
  /// Undoes acquire_one's pin (nothing was queued on the stream but waits).
  void unpin(std::uint32_t slot) { room.free_hbm(tensors.unpin(slot)); }
  /// release() for n handles: one event recorded on `compute` for all of them. `last_use`:
  /// release_last_use (activations, each the last holder; their content dies).
  void release_n(const tensor_handle* hs, std::size_t n, stream_ref compute, bool dirty,
                 bool last_use = false);
  /// Checks a release of n handles. @throws htp::invalid_argument naming the first bad one.
  void check_release(const tensor_handle* hs, std::size_t n, bool dirty, bool last_use);
  /// The table's side of release_n, once `point` is recorded; reports a failed page-in.
  void unpin_released(const tensor_handle* hs, std::size_t n, detail::release_point point,
                      bool dirty, bool last_use, bool ordered);

  // ---- completions and waits (completions.cpp) ----
  /// Accounts finished copies: loads become resident, write-backs free HBM, moves commit. Looks
  /// only at the copies the engine reports finished since the last call.
  void reap();
  /// Blocks (the lock dropped while waiting) until `h` has no copy in flight and every release
  /// event has completed; `check` runs on each look and may throw to refuse. Returns the slot.
  std::uint32_t quiesce(std::unique_lock<std::mutex>& lock, tensor_handle h,
                        const std::function<void(const detail::tensor_record&)>& check);
  /// Throws htp::cuda_error for a copy the transfer engine reported failed.
  [[noreturn]] static void throw_copy_failed(const std::string& what, const std::string& why);
  /// Reports the failure `cause` of a transfer `what` waited for: a file read that failed as
  /// htp::io_error with its path and errno, a page-in that failed its verification as
  /// htp::corrupt_data, anything else as throw_copy_failed does.
  [[noreturn]] static void throw_transfer_failed(const std::string& what, std::exception_ptr cause);

  // ---- metrics (pager_metrics.cpp) ----
  void sample_occupancy() {
    observe.stats.sample_occupancy(room.held_bytes(), tiers.hbm->capacity_bytes());
  }
  pager_metrics snapshot() const;
};

}  // namespace htp
