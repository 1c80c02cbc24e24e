// An event trace in the Chrome / Perfetto JSON format ("traceEvents", complete events "X"), one
// track (thread id) per stream: compute (spans the caller timed on the device, pager::
// trace_compute_span), prefetch, reduction, and the pager's own host view of each tensor's use
// (first acquire to last release). Timestamps are host steady-clock microseconds since the trace
// began; transfers span submission to completion as the pager saw them. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace htp::detail {

enum class trace_track : int { compute = 1, prefetch = 2, reduction = 3, host_acquired = 4 };

class trace_log {
 public:
  using clock = std::chrono::steady_clock;
  /// Keeps the last `capacity` spans (a ring: older ones are overwritten and counted in dropped()).
  trace_log(clock::time_point origin, std::size_t capacity)
      : origin_(origin), capacity_(capacity == 0 ? 1 : capacity) {}

  void add(trace_track track, std::string name, std::string category, clock::time_point begin,
           clock::time_point end);
  /// Spans held now (at most the capacity).
  std::size_t size() const;
  /// Spans overwritten because the ring was full, since construction or clear().
  std::uint64_t dropped() const {
    std::lock_guard lock(mutex_);
    return dropped_;
  }
  /// Drops every span so far (pager::reset_metrics: the trace covers what the metrics cover).
  void clear() {
    std::lock_guard lock(mutex_);
    spans_.clear();
    next_ = 0;
    dropped_ = 0;
  }
  /// The trace as Chrome JSON.
  std::string to_json() const;

 private:
  struct span {
    trace_track track;
    std::string name;
    std::string category;
    double begin_us;
    double dur_us;
  };
  clock::time_point origin_;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::vector<span> spans_;  ///< grows to capacity_, then next_ is the oldest (overwritten next)
  std::size_t next_ = 0;
  std::uint64_t dropped_ = 0;
};

}  // namespace htp::detail
