// A token bucket in exact integer arithmetic: how the transfer engine caps the bytes per second it
// moves over one host link direction.
//
// Tokens are bytes. The bucket holds at most `burst` tokens and refills at `rate` bytes per second
// from an injectable nanosecond clock. Refill is exact: elapsed_ns * rate is computed in 128 bits
// and the part below one byte (the remainder of the division by 1e9) is carried to the next refill,
// so no byte is lost however often the bucket is read. Over any window of T seconds a consumer can
// take at most rate * T + burst bytes, and a greedy one takes rate * T - (one take) at least.
//
// Invariants: tokens are never negative and never above burst; a take never succeeds without its
// tokens. In unlimited mode every take succeeds immediately and the bucket stays full.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>

namespace htp {

class token_bucket {
 public:
  /// A monotonic clock in nanoseconds. Tests inject a virtual one; the default is steady_clock.
  using clock_fn = std::function<std::int64_t()>;

  /// std::chrono::steady_clock::now() in nanoseconds since its epoch.
  static std::int64_t steady_clock_ns() noexcept;

  /// A full bucket (tokens == burst) refilling at `bytes_per_second`.
  /// @throws htp::invalid_argument if bytes_per_second == 0, burst_bytes == 0 or clock is empty.
  token_bucket(std::uint64_t bytes_per_second, std::uint64_t burst_bytes,
               clock_fn clock = &token_bucket::steady_clock_ns);

  token_bucket(const token_bucket&) = delete;
  token_bucket& operator=(const token_bucket&) = delete;

  /// Takes `bytes` tokens if the bucket holds them now; returns whether it did. Taking 0 bytes
  /// always succeeds. Thread-safe.
  /// @throws htp::invalid_argument if bytes > burst (it could never succeed; unlimited mode
  /// excepted).
  bool try_take(std::uint64_t bytes);

  /// Returns `bytes` taken by a try_take whose chunk could not go after all (a link further up
  /// refused it): the tokens come back (up to the burst) and total_taken no longer counts them.
  /// Thread-safe. Never throws.
  void give_back(std::uint64_t bytes) noexcept;

  /// Nanoseconds from now until `bytes` tokens will be available, 0 if they are now (or unlimited).
  /// Exact: after the clock advances by the returned amount, try_take(bytes) succeeds, provided
  /// nobody else took tokens meanwhile. Thread-safe.
  /// @throws htp::invalid_argument if bytes > burst (unlimited mode excepted).
  std::int64_t time_until_available(std::uint64_t bytes);

  /// Changes the rate from now on; tokens earned at the old rate up to now are kept. Leaves
  /// unlimited mode. Thread-safe. @throws htp::invalid_argument if bytes_per_second == 0.
  void set_rate(std::uint64_t bytes_per_second);
  /// Changes the burst; tokens above the new burst are dropped. Thread-safe.
  /// @throws htp::invalid_argument if burst_bytes == 0.
  void set_burst(std::uint64_t burst_bytes);
  /// Enters (true) or leaves (false) unlimited mode. Leaving it starts with a full bucket.
  /// Never throws.
  void set_unlimited(bool unlimited);

  /// These five never throw.
  std::uint64_t rate() const;         ///< bytes per second (meaningless while unlimited).
  std::uint64_t burst() const;        ///< bytes.
  bool unlimited() const;             ///< true in unlimited mode.
  std::uint64_t available();          ///< tokens now, after refilling. Thread-safe.
  std::uint64_t total_taken() const;  ///< bytes taken since construction, in every mode.

 private:
  void refill_locked(std::int64_t now);

  mutable std::mutex mutex_;
  clock_fn clock_;
  std::uint64_t rate_;
  std::uint64_t burst_;
  std::uint64_t tokens_;
  std::uint64_t remainder_ = 0;  // fraction of a byte earned, in units of 1e-9 byte (< 1e9)
  std::int64_t last_ns_;
  bool unlimited_ = false;
  std::uint64_t taken_ = 0;
};

}  // namespace htp
