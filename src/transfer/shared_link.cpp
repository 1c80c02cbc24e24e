#include <htp/shared_link.hpp>

#include <algorithm>

namespace htp {

namespace {
constexpr std::int64_t min_poll_ns = 10'000;  // while a higher priority waits: look again soon
}

shared_link::shared_link(std::string name, std::uint64_t bytes_per_second, std::uint64_t burst_bytes,
                         token_bucket::clock_fn clock)
    : name_(std::move(name)), bucket_(bytes_per_second, burst_bytes, std::move(clock)) {}

bool shared_link::higher_waiting_locked(int p) const noexcept {
  for (int q = 0; q < p; ++q) {
    if (waiting_[static_cast<std::size_t>(q)] != 0) return true;
  }
  return false;
}

void shared_link::set_waiting_locked(waiter& w, int p) noexcept {
  if (w.priority == p) return;
  if (w.priority >= 0) --waiting_[static_cast<std::size_t>(w.priority)];
  if (p >= 0) ++waiting_[static_cast<std::size_t>(p)];
  w.priority = p;
}

std::int64_t shared_link::take_or_wait(std::uint64_t bytes, transfer_priority p, waiter& w) {
  const int pr = static_cast<int>(p);
  std::lock_guard lock(mutex_);
  if (higher_waiting_locked(pr)) {
    set_waiting_locked(w, pr);
    return std::max(min_poll_ns, bucket_.time_until_available(bytes));
  }
  if (bucket_.try_take(bytes)) {
    set_waiting_locked(w, -1);
    return 0;
  }
  set_waiting_locked(w, pr);
  return std::max<std::int64_t>(1, bucket_.time_until_available(bytes));
}

void shared_link::withdraw(waiter& w) noexcept {
  std::lock_guard lock(mutex_);
  set_waiting_locked(w, -1);
}

std::uint64_t shared_link::waiting(transfer_priority p) const {
  std::lock_guard lock(mutex_);
  return waiting_[static_cast<std::size_t>(p)];
}

void shared_link::set_rate(std::uint64_t bytes_per_second) {
  std::lock_guard lock(mutex_);
  bucket_.set_rate(bytes_per_second);
}

std::uint64_t shared_link::rate() const { return bucket_.rate(); }
std::uint64_t shared_link::burst() const { return bucket_.burst(); }
std::uint64_t shared_link::bytes_taken() const { return bucket_.total_taken(); }

}  // namespace htp
