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
  explicit trace_log(clock::time_point origin) : origin_(origin) {}

  void add(trace_track track, std::string name, std::string category, clock::time_point begin,
           clock::time_point end);
  std::size_t size() const;
  /// Drops every span so far (pager::reset_metrics: the trace covers what the metrics cover).
  void clear() {
    std::lock_guard lock(mutex_);
    spans_.clear();
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
  mutable std::mutex mutex_;
  std::vector<span> spans_;
};

}  // namespace htp::detail
