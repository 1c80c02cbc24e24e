#include <htp/token_bucket.hpp>

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <algorithm>
#include <chrono>

namespace htp {
namespace {
__extension__ typedef unsigned __int128 u128;  // NOLINT: GCC and Clang both have it
constexpr std::uint64_t ns_per_s = 1'000'000'000;
}  // namespace

std::int64_t token_bucket::steady_clock_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

token_bucket::token_bucket(std::uint64_t bytes_per_second, std::uint64_t burst_bytes,
                           clock_fn clock)
    : clock_(std::move(clock)), rate_(bytes_per_second), burst_(burst_bytes), tokens_(burst_bytes) {
  HTP_EXPECTS(bytes_per_second > 0, invalid_argument,
              "token_bucket: a rate of 0 bytes/s would never release a byte; use unlimited mode "
              "for no cap");
  HTP_EXPECTS(burst_bytes > 0, invalid_argument, "token_bucket: burst must be at least one byte");
  HTP_EXPECTS(static_cast<bool>(clock_), invalid_argument, "token_bucket: empty clock");
  last_ns_ = clock_();
}

void token_bucket::refill_locked(std::int64_t now) {
  if (now <= last_ns_) return;  // a clock that stood still (or stepped back) earns nothing
  const auto elapsed = static_cast<std::uint64_t>(now - last_ns_);
  last_ns_ = now;
  if (unlimited_) {
    tokens_ = burst_;
    remainder_ = 0;
    return;
  }
  const u128 earned = static_cast<u128>(elapsed) * rate_ + remainder_;  // in 1e-9 bytes
  const u128 whole = earned / ns_per_s;
  if (whole >= burst_ - tokens_) {  // full: a full bucket earns nothing more, fractions included
    tokens_ = burst_;
    remainder_ = 0;
  } else {
    tokens_ += static_cast<std::uint64_t>(whole);
    remainder_ = static_cast<std::uint64_t>(earned % ns_per_s);
  }
}

bool token_bucket::try_take(std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  if (unlimited_) {
    taken_ += bytes;
    return true;
  }
  HTP_EXPECTS(bytes <= burst_, invalid_argument, "token_bucket::try_take(", bytes,
              "): more than the burst of ", burst_, " bytes can never be available");
  refill_locked(clock_());
  if (tokens_ < bytes) return false;
  tokens_ -= bytes;
  taken_ += bytes;
  return true;
}

std::int64_t token_bucket::time_until_available(std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  if (unlimited_) return 0;
  HTP_EXPECTS(bytes <= burst_, invalid_argument, "token_bucket::time_until_available(", bytes,
              "): more than the burst of ", burst_, " bytes can never be available");
  refill_locked(clock_());
  if (tokens_ >= bytes) return 0;
  // Need (bytes - tokens) whole bytes, of which remainder_ * 1e-9 is already earned.
  const u128 missing = static_cast<u128>(bytes - tokens_) * ns_per_s - remainder_;
  return static_cast<std::int64_t>((missing + rate_ - 1) / rate_);  // ceil: then it is enough
}

void token_bucket::set_rate(std::uint64_t bytes_per_second) {
  HTP_EXPECTS(bytes_per_second > 0, invalid_argument,
              "token_bucket::set_rate(0): a rate of 0 would never release a byte; use "
              "set_unlimited(true) for no cap");
  std::lock_guard lock(mutex_);
  refill_locked(clock_());  // what was earned at the old rate stays earned
  rate_ = bytes_per_second;
  unlimited_ = false;
}

void token_bucket::set_burst(std::uint64_t burst_bytes) {
  HTP_EXPECTS(burst_bytes > 0, invalid_argument, "token_bucket::set_burst(0): burst must be >= 1");
  std::lock_guard lock(mutex_);
  refill_locked(clock_());
  burst_ = burst_bytes;
  if (tokens_ >= burst_) {
    tokens_ = burst_;
    remainder_ = 0;
  }
}

void token_bucket::set_unlimited(bool unlimited) {
  std::lock_guard lock(mutex_);
  refill_locked(clock_());
  if (unlimited_ && !unlimited) {
    tokens_ = burst_;
    remainder_ = 0;
  }
  unlimited_ = unlimited;
}

void token_bucket::give_back(std::uint64_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  taken_ -= std::min(taken_, bytes);
  if (!unlimited_) tokens_ = std::min(burst_, tokens_ + bytes);
}

std::uint64_t token_bucket::rate() const {
  std::lock_guard lock(mutex_);
  return rate_;
}
std::uint64_t token_bucket::burst() const {
  std::lock_guard lock(mutex_);
  return burst_;
}
bool token_bucket::unlimited() const {
  std::lock_guard lock(mutex_);
  return unlimited_;
}
std::uint64_t token_bucket::available() {
  std::lock_guard lock(mutex_);
  refill_locked(clock_());
  return tokens_;
}
std::uint64_t token_bucket::total_taken() const {
  std::lock_guard lock(mutex_);
  return taken_;
}

}  // namespace htp
