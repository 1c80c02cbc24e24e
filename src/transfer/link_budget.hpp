// Where a shared link's tokens and waiting counts live (internal to shared_link): in this process
// (a token_bucket and counts under the link's mutex), or in a link cell in a node's shared tier,
// which every process of the node draws from (link_cell.cpp). shared_link's chain logic asks these
// questions and nothing else, so a chain may mix both kinds.
#pragma once

#include <htp/token_bucket.hpp>

#include <array>
#include <cstdint>

namespace htp::detail {

class link_budget {
 public:
  virtual ~link_budget() = default;
  /// Nanoseconds until `bytes` tokens are available (0: now). Called under the link's mutex.
  /// @throws htp::invalid_argument if bytes is more than the burst.
  virtual std::int64_t time_until(std::uint64_t bytes) = 0;
  /// Takes `bytes` tokens; false when another process took them since time_until said yes (an
  /// in-process budget, checked under the same lock, always succeeds).
  virtual bool take(std::uint64_t bytes) = 0;
  /// Returns tokens a chain could not use after all (a link above refused). Never throws.
  virtual void give_back(std::uint64_t bytes) noexcept = 0;
  /// Whether a waiter of a priority higher (numerically lower) than `p` waits here. Never throws.
  virtual bool higher_waiting(int p) const noexcept = 0;
  /// Counts one more (+1) or one fewer (-1) of this process's waiters at `p`. Never throws.
  virtual void add_waiting(int p, int delta) noexcept = 0;
  /// Waiters at `p`, every process's. Never throws.
  virtual std::uint64_t waiting(int p) const noexcept = 0;
  /// @throws htp::invalid_argument if bytes_per_second == 0.
  virtual void set_rate(std::uint64_t bytes_per_second) = 0;
  virtual std::uint64_t rate() const noexcept = 0;
  virtual std::uint64_t burst() const noexcept = 0;
  virtual std::uint64_t taken() const noexcept = 0;
};

/// This process's budget: a token bucket and waiting counts, read and changed under the link's
/// mutex.
class process_budget final : public link_budget {
 public:
  process_budget(std::uint64_t bytes_per_second, std::uint64_t burst_bytes,
                 token_bucket::clock_fn clock)
      : bucket_(bytes_per_second, burst_bytes, std::move(clock)) {}
  std::int64_t time_until(std::uint64_t bytes) override {
    return bucket_.time_until_available(bytes);
  }
  bool take(std::uint64_t bytes) override { return bucket_.try_take(bytes); }
  void give_back(std::uint64_t bytes) noexcept override { bucket_.give_back(bytes); }
  bool higher_waiting(int p) const noexcept override {
    for (int q = 0; q < p; ++q) {
      if (waiting_[static_cast<std::size_t>(q)] != 0) return true;
    }
    return false;
  }
  void add_waiting(int p, int delta) noexcept override {
    waiting_[static_cast<std::size_t>(p)] += static_cast<std::uint64_t>(delta);
  }
  std::uint64_t waiting(int p) const noexcept override {
    return waiting_[static_cast<std::size_t>(p)];
  }
  void set_rate(std::uint64_t bytes_per_second) override { bucket_.set_rate(bytes_per_second); }
  std::uint64_t rate() const noexcept override { return bucket_.rate(); }
  std::uint64_t burst() const noexcept override { return bucket_.burst(); }
  std::uint64_t taken() const noexcept override { return bucket_.total_taken(); }

 private:
  token_bucket bucket_;
  std::array<std::uint64_t, 4> waiting_{};
};

}  // namespace htp::detail
