// A link several GPUs' transfer engines share upstream of their own token buckets: a PCIe switch's
// upstream port, a NUMA node's memory bandwidth. See docs/multi_gpu.md, "Budgets".
//
// A chunk crosses a shared link only when both the engine's own bucket (the per-GPU cap) and the
// link's bucket hold its bytes. Priorities hold across engines: while a chunk of a higher priority
// (a demand fault on GPU 3) waits for this link, no engine takes its tokens for a lower one (a
// prefetch on GPU 5), so one GPU's fault is never starved by another GPU's prefetch.
#pragma once

#include <htp/token_bucket.hpp>
#include <htp/transfer_engine.hpp>

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

namespace htp {

class shared_link {
 public:
  /// One engine lane's registration with the link: the priority it waits at (-1: not waiting).
  /// Owned by the lane; pass the same one on every call.
  struct waiter {
    int priority = -1;
  };

  /// A link of `bytes_per_second` with a burst of `burst_bytes` (at least one chunk of every engine
  /// that uses it), on `clock` (tests inject a virtual one).
  /// @throws htp::invalid_argument if the rate or burst is 0 or the clock is empty.
  shared_link(std::string name, std::uint64_t bytes_per_second, std::uint64_t burst_bytes,
              token_bucket::clock_fn clock = &token_bucket::steady_clock_ns);
  shared_link(const shared_link&) = delete;
  shared_link& operator=(const shared_link&) = delete;

  /// For a dispatcher holding a chunk of `bytes` at priority `p`: takes the tokens and returns 0,
  /// or returns the nanoseconds to wait before asking again (at least 10 us while a higher
  /// priority waits). While it returns non-zero, `w` counts as waiting at `p`. Never blocks.
  /// Thread-safe. @throws htp::invalid_argument if bytes > burst.
  std::int64_t take_or_wait(std::uint64_t bytes, transfer_priority p, waiter& w);
  /// Stops counting `w` as waiting (the dispatcher went idle or waits on something else).
  /// Never throws; thread-safe.
  void withdraw(waiter& w) noexcept;

  /// Changes the rate from now on (e.g. once the first GPU's link is calibrated). Thread-safe.
  /// @throws htp::invalid_argument if bytes_per_second == 0.
  void set_rate(std::uint64_t bytes_per_second);
  const std::string& name() const noexcept { return name_; }
  /// Dispatchers waiting for this link now at priority p (observability and tests). Thread-safe.
  std::uint64_t waiting(transfer_priority p) const;
  std::uint64_t rate() const;          ///< bytes per second.
  std::uint64_t burst() const;         ///< bytes.
  std::uint64_t bytes_taken() const;   ///< bytes that crossed the link since construction.

 private:
  bool higher_waiting_locked(int p) const noexcept;
  void set_waiting_locked(waiter& w, int p) noexcept;

  std::string name_;
  token_bucket bucket_;
  mutable std::mutex mutex_;
  std::array<std::uint64_t, transfer_priority_count> waiting_{};
};

}  // namespace htp
