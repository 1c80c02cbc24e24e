#include <htp/shared_link.hpp>

#include <htp/detail/check.hpp>

#include "link_budget.hpp"

#include <algorithm>

namespace htp {

namespace {
constexpr std::int64_t min_poll_ns = 10'000;  // while a higher priority waits: look again soon

std::size_t chain_length(const shared_link* l) noexcept {
  std::size_t n = 0;
  for (; l != nullptr; l = l->parent().get()) ++n;
  return n;
}
}  // namespace

shared_link::shared_link(std::string name, std::uint64_t bytes_per_second,
                         std::uint64_t burst_bytes, token_bucket::clock_fn clock,
                         std::shared_ptr<shared_link> parent)
    : name_(std::move(name)), parent_(std::move(parent)),
      budget_(std::make_unique<detail::process_budget>(bytes_per_second, burst_bytes,
                                                       std::move(clock))) {
  HTP_EXPECTS(1 + chain_length(parent_.get()) <= max_chain, invalid_argument, "shared link '",
              name_, "' would head a chain of ", 1 + chain_length(parent_.get()),
              " links; at most ", max_chain, " nest (e.g. PCIe switch, NUMA node, socket)");
}

shared_link::shared_link(std::string name, std::unique_ptr<detail::link_budget> budget,
                         std::shared_ptr<const void> owner)
    : name_(std::move(name)), budget_(std::move(budget)), owner_(std::move(owner)) {}

shared_link::~shared_link() = default;

std::size_t shared_link::chain(std::array<shared_link*, max_chain>& out) noexcept {
  std::size_t n = 0;
  for (shared_link* l = this; l != nullptr; l = l->parent_.get()) out[n++] = l;
  return n;
}

void shared_link::set_waiting_locked(int& slot, int p) noexcept {
  if (slot == p) return;
  if (slot >= 0) budget_->add_waiting(slot, -1);
  if (p >= 0) budget_->add_waiting(p, +1);
  slot = p;
}

std::int64_t shared_link::take_or_wait(std::uint64_t bytes, transfer_priority p, waiter& w) {
  const int pr = static_cast<int>(p);
  std::array<shared_link*, max_chain> links{};
  const std::size_t n = chain(links);
  // Child first, parent last: every dispatcher locks upward along its own chain, so none ever
  // holds a parent while waiting for a child (the chains form a tree), and no two deadlock.
  std::array<std::unique_lock<std::mutex>, max_chain> locks;
  for (std::size_t i = 0; i < n; ++i) locks[i] = std::unique_lock(links[i]->mutex_);

  std::int64_t wait = 0;
  int blocker = -1;  // the highest link holding the chunk back
  for (std::size_t i = 0; i < n; ++i) {
    detail::link_budget& b = *links[i]->budget_;
    std::int64_t t = b.time_until(bytes);
    if (b.higher_waiting(pr)) t = std::max(min_poll_ns, t);
    if (t > 0) {
      wait = std::max(wait, t);
      blocker = static_cast<int>(i);
    }
  }
  if (blocker < 0) {
    // A budget in a shared tier can lose its tokens to another process between the look and the
    // take; the chain then gives back what it took and looks again soon.
    for (std::size_t i = 0; i < n; ++i) {
      if (links[i]->budget_->take(bytes)) continue;
      for (std::size_t j = 0; j < i; ++j) links[j]->budget_->give_back(bytes);
      wait = min_poll_ns;
      blocker = static_cast<int>(i);
      break;
    }
  }
  if (blocker < 0) {
    for (std::size_t i = 0; i < n; ++i) links[i]->set_waiting_locked(w.priority[i], -1);
    return 0;
  }
  for (std::size_t i = 0; i < n; ++i) {
    links[i]->set_waiting_locked(w.priority[i], static_cast<int>(i) <= blocker ? pr : -1);
  }
  return wait;
}

void shared_link::withdraw(waiter& w) noexcept {
  std::array<shared_link*, max_chain> links{};
  const std::size_t n = chain(links);
  for (std::size_t i = 0; i < n; ++i) {
    std::lock_guard lock(links[i]->mutex_);
    links[i]->set_waiting_locked(w.priority[i], -1);
  }
}

std::uint64_t shared_link::waiting(transfer_priority p) const {
  std::lock_guard lock(mutex_);
  return budget_->waiting(static_cast<int>(p));
}

void shared_link::set_rate(std::uint64_t bytes_per_second) {
  std::lock_guard lock(mutex_);
  budget_->set_rate(bytes_per_second);
}

std::uint64_t shared_link::rate() const { return budget_->rate(); }
std::uint64_t shared_link::burst() const { return budget_->burst(); }
std::uint64_t shared_link::bytes_taken() const { return budget_->taken(); }

std::uint64_t shared_link::chain_burst() const {
  std::uint64_t b = burst();
  for (const shared_link* l = parent_.get(); l != nullptr; l = l->parent().get())
    b = std::min(b, l->burst());
  return b;
}

}  // namespace htp
