// A link several GPUs' transfer engines share upstream of their own token buckets: a PCIe switch's
// upstream port, a NUMA node's memory bandwidth. See docs/multi_gpu.md, "Budgets".
//
// A chunk crosses a shared link only when both the engine's own bucket (the per-GPU cap) and the
// link's bucket hold its bytes. Priorities hold across engines: while a chunk of a higher priority
// (a demand fault on GPU 3) waits for this link, no engine takes its tokens for a lower one (a
// prefetch on GPU 5), so one GPU's fault is never starved by another GPU's prefetch.
//
// Links nest: a link may have a parent further upstream (two GPUs' PCIe switch under their NUMA
// node's memory bandwidth, which the node's other switches and both directions share). A chunk
// then crosses only when every link from the engine's own up to the top holds its bytes, and it
// takes them from all of them at once (the links are locked child first, parent last, so two
// dispatchers never wait on each other). A waiting chunk counts as waiting on every link from its
// own up to the highest one that holds it back, so priorities hold at each level.
//
// A link's budget may also live in a node's shared tier (shared_tier::link): then every process of
// the node that draws from it shares its rate and its priorities (docs/multi_gpu.md).
#pragma once

#include <htp/token_bucket.hpp>
#include <htp/transfer_engine.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace htp {

class shared_link;

namespace detail {
class link_budget;  // src/transfer/link_budget.hpp
struct link_cell;   // detail/link_cell.hpp
using link_cell_clock = std::int64_t (*)() noexcept;
std::shared_ptr<shared_link> make_cell_link(link_cell& cell, std::size_t slot,
                                            std::shared_ptr<const void> owner,
                                            link_cell_clock clock);
}  // namespace detail

class shared_link {
 public:
  /// Links in one chain at most: the engine's own link and up to three above it.
  static constexpr std::size_t max_chain = 4;

  /// One engine lane's registration with its link's chain: the priority it waits at on each link
  /// of the chain, own link first (-1: not waiting there). Owned by the lane; pass the same one on
  /// every call, always to the same link.
  struct waiter {
    std::array<int, max_chain> priority{-1, -1, -1, -1};
  };

  /// A link of `bytes_per_second` with a burst of `burst_bytes` (at least one chunk of every engine
  /// that uses it), on `clock` (tests inject a virtual one), under `parent` (null: the top).
  /// @throws htp::invalid_argument if the rate or burst is 0, the clock is empty, or the chain
  /// from this link up would be longer than max_chain.
  shared_link(std::string name, std::uint64_t bytes_per_second, std::uint64_t burst_bytes,
              token_bucket::clock_fn clock = &token_bucket::steady_clock_ns,
              std::shared_ptr<shared_link> parent = nullptr);
  ~shared_link();
  shared_link(const shared_link&) = delete;
  shared_link& operator=(const shared_link&) = delete;

  /// For a dispatcher holding a chunk of `bytes` at priority `p`: takes the tokens from this link
  /// and every link above it and returns 0, or takes none and returns the nanoseconds to wait
  /// before asking again (at least 10 us while a higher priority waits). While it returns
  /// non-zero, `w` counts as waiting at `p` on the links up to the highest one holding it back.
  /// Never blocks on a transfer (only on the links' own short locks). Thread-safe.
  /// @throws htp::invalid_argument if bytes is more than some link's burst.
  std::int64_t take_or_wait(std::uint64_t bytes, transfer_priority p, waiter& w);
  /// Stops counting `w` as waiting anywhere in the chain (the dispatcher went idle or waits on
  /// something else). Never throws; thread-safe.
  void withdraw(waiter& w) noexcept;

  /// Changes the rate from now on (e.g. once the first GPU's link is calibrated). Thread-safe.
  /// @throws htp::invalid_argument if bytes_per_second == 0.
  void set_rate(std::uint64_t bytes_per_second);
  const std::string& name() const noexcept { return name_; }
  /// The link above this one, or null at the top.
  const std::shared_ptr<shared_link>& parent() const noexcept { return parent_; }
  /// The smallest burst on the chain from this link up: the largest chunk it can ever pass.
  /// Never throws.
  std::uint64_t chain_burst() const;
  /// Dispatchers waiting for this link now at priority p (observability and tests). Thread-safe.
  /// Never throws.
  std::uint64_t waiting(transfer_priority p) const;
  /// The rate, the burst and the bytes taken. Never throw.
  std::uint64_t rate() const;         ///< bytes per second.
  std::uint64_t burst() const;        ///< bytes.
  std::uint64_t bytes_taken() const;  ///< bytes that crossed the link since construction.

 private:
  friend std::shared_ptr<shared_link> detail::make_cell_link(detail::link_cell&, std::size_t,
                                                             std::shared_ptr<const void>,
                                                             detail::link_cell_clock);
  shared_link(std::string name, std::unique_ptr<detail::link_budget> budget,
              std::shared_ptr<const void> owner);
  void set_waiting_locked(int& slot, int p) noexcept;
  /// This link and the ones above it, own first.
  std::size_t chain(std::array<shared_link*, max_chain>& out) noexcept;

  std::string name_;
  std::shared_ptr<shared_link> parent_;
  /// Where the tokens and waiting counts live: this process, or a shared tier's link cell.
  std::unique_ptr<detail::link_budget> budget_;
  std::shared_ptr<const void> owner_;  ///< keeps a cell's memory mapped (null: in process)
  mutable std::mutex mutex_;
};

}  // namespace htp
