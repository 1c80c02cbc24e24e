// Prefetch timeliness as the device sees it. A host that runs ahead of its GPU makes every first
// acquire of a prefetched tensor come before the load has finished, so "complete when acquire was
// called" says little. What matters is whether the compute stream had to wait when it got there.
// For an acquire call with a prefetch still in flight, the pager records two timed events on the
// compute stream: `reach` before the call's waits and `met` after them. The device time between
// them is the stall. A stall of at most `on_time_ns` is a prefetch on time; a longer one is late,
// by that much.
//
// Threading: take() and harvest() run under the pager's lock; the events are recorded outside it,
// and recorded() hands the probe over (its own small lock).
#pragma once

#include <htp/device.hpp>

#include "pager/event_pool.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

namespace htp::detail {

class wait_probes {
 public:
  /// A stall up to this is "on time": what a satisfied wait costs the stream, with margin.
  static constexpr std::int64_t on_time_ns = 20'000;
  static constexpr std::size_t max_in_flight = 256;

  explicit wait_probes(device& dev) : dev_(dev), events_(dev, /*timed=*/true) {}
  wait_probes(const wait_probes&) = delete;
  wait_probes& operator=(const wait_probes&) = delete;

  struct probe {
    std::uint64_t id = 0;
    event_ref reach, met;
    std::uint32_t prefetches = 0;  // prefetches in flight the call waits for
  };
  /// A probe for an acquire call that waits for `prefetches` loads started by prefetch; a null
  /// probe (id 0) when none is to be had (too many in flight, no event). Under the pager's lock.
  probe take(std::uint32_t prefetches);
  /// Its events are recorded (`ok`) or could not be (then it is dropped). Thread-safe.
  void recorded(const probe& p, bool ok);
  /// Reads completed probes, oldest first, never blocking: `on_time(n)` for n prefetches the
  /// stream did not wait for, `late(n, stall)` for n it waited for. Under the pager's lock.
  void harvest(const std::function<void(std::uint32_t)>& on_time,
               const std::function<void(std::uint32_t, std::chrono::nanoseconds)>& late);

 private:
  device& dev_;
  event_pool events_;  // timed; destroyed with the probes
  std::uint64_t next_id_ = 1;
  std::mutex mutex_;
  std::deque<std::pair<probe, int>> queue_;  // 0: recording, 1: recorded, -1: dropped
};

}  // namespace htp::detail
