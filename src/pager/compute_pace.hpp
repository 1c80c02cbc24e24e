// The compute pace behind automatic lookahead (pager_config::lookahead): how long the device
// computes between one scheduled acquire and the next, per schedule position, measured on the
// device with timed events.
//
// An acquire call of scheduled tensors may open a measurement: after the call's waits are queued
// on the compute stream (so a stall on a load is not counted as compute), it records an `open`
// mark. The next scheduled acquire call on that stream, if it is the next position of the
// schedule, records a `close` mark before its own waits. Once the close mark has completed, the
// device time between the two is the compute of the opening call's position: folded into that
// position's estimate (an exponential mean, weight 1/2). Positions are measured when unknown and
// then every `resample_cycles` cycles, so a settled schedule records two marks in about one call of
// four. At most `max_open` measurements are in flight; their events are recycled.
//
// The host may run far ahead of the device (acquires only queue waits), so times taken on the host
// between calls say nothing of compute; these are device times.
//
// Threading: plan() and harvest() run under the pager's lock; the marks are recorded outside it
// (recording may block on a full stream queue), and recorded() hands a closed measurement over.
#pragma once

#include <htp/device.hpp>

#include "pager/event_pool.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

namespace htp::detail {

class compute_pace {
 public:
  static constexpr std::uint64_t resample_cycles = 4;
  static constexpr std::size_t max_open = 32;

  explicit compute_pace(device& dev) : dev_(dev), events_(dev, /*timed=*/true) {}
  compute_pace(const compute_pace&) = delete;
  compute_pace& operator=(const compute_pace&) = delete;

  /// The schedule changed: `positions` positions, nothing known.
  void reset(std::size_t positions);

  /// What one acquire call records on its stream, outside the lock: `close` before its waits,
  /// `open` after them (either may be null). Pass the plan to recorded() afterwards.
  struct marks {
    event_ref close;
    event_ref open;
    std::uint64_t close_id = 0;  // the measurement `close` ends (0: none)
  };
  /// An acquire call whose scheduled accesses are `count` positions from `position` (of a
  /// schedule of reset()'s size) in cycle `cycle`, on stream `s`. Under the pager's lock.
  marks plan(std::size_t position, std::size_t count, std::uint64_t cycle, stream_ref s);
  /// The marks of `m` are recorded (or failed to be: `ok` = false): the measurement `close`
  /// ended can be read once complete. Thread-safe (its own small lock).
  void recorded(const marks& m, bool ok);
  /// Folds completed measurements into the estimates, oldest first; never blocks. Under the
  /// pager's lock.
  void harvest();

  /// Predicted device time from the acquire at `position` to the next scheduled acquire, in ns;
  /// nullopt when never measured.
  std::optional<std::int64_t> gap_ns(std::size_t position) const;
  /// The mean of the known gaps; nullopt when none is known.
  std::optional<std::int64_t> mean_gap_ns() const;

 private:
  struct measurement {
    std::uint64_t id = 0;
    std::size_t position = 0;
    event_ref open, close;
  };
  void give_back(event_ref e) {
    if (e) events_.release(e);
  }
  void fold(std::size_t position, std::int64_t ns);

  device& dev_;
  event_pool events_;                       // timed; destroyed with the pace
  std::vector<std::int64_t> gap_;           // per position; -1 = unknown
  std::vector<std::uint64_t> measured_in_;  // the cycle each position was last opened in
  std::int64_t known_sum_ = 0;
  std::size_t known_ = 0;
  // The open measurement awaiting its close (at most one: the schedule has one cursor).
  std::optional<measurement> open_;
  std::size_t open_next_ = 0;  // the position that closes it
  stream_ref open_stream_{};
  std::uint64_t next_id_ = 1;
  std::size_t in_flight_ = 0;  // measurements opened and not yet harvested or dropped
  // Closed measurements, in order: `ready` once their close mark is recorded.
  std::mutex mutex_;
  std::deque<std::pair<measurement, bool>> closed_;
};

}  // namespace htp::detail
