// The prefetcher: what the pager loads before it is asked for. It owns what the pager knows of
// the future (forecast.hpp: the schedule, the routed groups, the experts expect() named) and what
// it learns of the device's pace (compute_pace.hpp: the compute time between scheduled acquires;
// wait_probes.hpp: whether the compute stream waited for a prefetch). It asks the room maker for
// room and loads; it never blocks and never evicts by itself.
//
// Invariants (what every method keeps; checked by tests/pager_prefetcher_test.cpp):
//  1. The schedule advances once per access: a run of overlapping pins of a tensor counts once,
//     when its first acquire succeeds (accessed); a failed acquire advances nothing.
//  2. A prefetch is a hint: it never blocks the host, never throws for want of room (it is
//     skipped, and told to the observers), and a device error while issuing it drops it unless
//     the device is lost (a sticky error).
//  3. The walk over the upcoming accesses stops at the first tensor it cannot bring in, so a later
//     one never takes the room an earlier one needs.
//  4. The victim index's keys follow the forecast: whatever changes a tensor's next use or
//     popularity re-keys it in the tensor table before the lock is dropped.
// Not thread-safe: the pager's mutex guards it, except the record_* calls (see each).
#pragma once

#include <htp/device.hpp>
#include <htp/pager.hpp>
#include <htp/transfer_engine.hpp>

#include "pager/compute_pace.hpp"
#include "pager/forecast.hpp"
#include "pager/observer.hpp"
#include "pager/room_maker.hpp"
#include "pager/tensor_table.hpp"
#include "pager/wait_probes.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

namespace htp::detail {

class prefetcher {
 public:
  /// `tensors` may be constructed after the prefetcher (it keys its victim index by the
  /// forecast this owns); it is used only once construction is over.
  prefetcher(device& dev, const pager_config& config, tensor_table& tensors,
             transfer_engine& engine, pager_observer& observe);
  prefetcher(const prefetcher&) = delete;
  prefetcher& operator=(const prefetcher&) = delete;

  const forecast& future() const noexcept { return future_; }

  // ---- hints -----------------------------------------------------------------------------------
  /// The schedule is now `slots` (`cyclic`: repeats): the pace starts afresh and every tensor in
  /// HBM is re-keyed (O(n log n)); then prefetches the first accesses.
  void set_schedule(std::vector<std::uint32_t> slots, bool cyclic, room_maker& room);
  /// Group `members` (checked by the caller) follows router `anchor`, `k` routed per token.
  void set_routed_group(std::uint32_t anchor, std::vector<std::uint32_t> members, unsigned k);
  /// The router chose `slots`: each is prefetched now, and none evicts another.
  void expect(const std::vector<std::uint32_t>& slots, room_maker& room);
  /// The tensor of `slot` is being unregistered: it leaves the schedule and its group.
  void forget(std::uint32_t slot);

  // ---- prefetching -----------------------------------------------------------------------------
  /// Prefetches `slot` if it is in host memory and room can be made without blocking (invariant
  /// 2); `need`: when its acquire is expected (the engine's deadline). True when it is in HBM or
  /// coming.
  bool prefetch(std::uint32_t slot, room_maker& room,
                std::optional<std::chrono::steady_clock::time_point> need = std::nullopt);
  /// Prefetches the upcoming accesses of the schedule (prefetch_lookahead of them, or, with
  /// lookahead_mode::automatic, as far ahead as the link time covers the compute time).
  void upcoming(room_maker& room);

  // ---- an acquire call -------------------------------------------------------------------------
  /// What one acquire call records on its compute stream: pace marks and a timeliness probe.
  struct marks {
    compute_pace::marks pace;
    wait_probes::probe probe;
    bool reached = false;
  };
  /// Plans the marks of an acquire of `hs` on `compute` that waits for `late` late prefetches.
  /// Before accessed().
  marks plan(const tensor_handle* hs, std::size_t n, stream_ref compute, std::uint32_t late);
  /// Every element of the acquire succeeded: each is an access of the schedule (invariant 1).
  void accessed(const tensor_handle* hs, std::size_t n);
  /// Outside the lock, before the call's stream waits: the marks that end the compute before it.
  /// Thread-safe.
  void record_before(marks& m, stream_ref compute) noexcept;
  /// Outside the lock, after the waits were queued (`ok`) or failed: the marks that begin the
  /// compute after it. Thread-safe.
  void record_after(const marks& m, stream_ref compute, bool ok) noexcept;
  /// Reads the probes that completed and tells the observers (never blocks).
  void harvest();

 private:
  void record_access(std::uint32_t slot);
  void ahead(room_maker& room);
  bool record(event_ref e, stream_ref compute) noexcept;

  device& dev_;
  const pager_config& config_;
  tensor_table& tensors_;
  transfer_engine& engine_;
  pager_observer& observe_;
  forecast future_;
  compute_pace pace_;   // device-timed compute between scheduled acquires (automatic lookahead)
  wait_probes probes_;  // device-timed stalls on late prefetches (timeliness)
  std::vector<std::uint32_t> skipped_;  // scratch: slots whose next use an access skipped
};

}  // namespace htp::detail
