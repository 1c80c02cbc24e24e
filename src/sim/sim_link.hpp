// The sim backend's modelled host link: one per direction, shared by all streams, serving copies
// in the order they reach it, as the copy engines of a real GPU do.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace htp::sim {

class link {
 public:
  using clock = std::chrono::steady_clock;

  /// bytes_per_second == 0 means unmodelled: reserve() returns "now" and copies run at memcpy
  /// speed.
  link(std::uint64_t bytes_per_second, std::uint64_t latency_ns);

  bool modelled() const noexcept { return bytes_per_second_ != 0; }
  /// Books the link for a copy of `bytes` that became ready at `ready` (see
  /// current_task_ready_time): it starts at the later of `ready` and the end of every copy booked
  /// before. Returns when it finishes on the modelled link. Thread-safe.
  clock::time_point reserve(std::size_t bytes, clock::time_point ready);

 private:
  std::uint64_t bytes_per_second_;
  std::chrono::nanoseconds latency_;
  std::mutex mutex_;
  clock::time_point next_free_{};
};

}  // namespace htp::sim
