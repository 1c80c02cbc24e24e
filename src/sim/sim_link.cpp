#include "sim/sim_link.hpp"

#include <algorithm>

namespace htp::sim {

__extension__ typedef unsigned __int128 u128;  // NOLINT: GCC and Clang both have it

link::link(std::uint64_t bytes_per_second, std::uint64_t latency_ns)
    : bytes_per_second_(bytes_per_second), latency_(static_cast<std::int64_t>(latency_ns)) {}

link::clock::time_point link::reserve(std::size_t bytes, clock::time_point ready) {
  if (!modelled()) return clock::now();
  // 128-bit product: bytes * 1e9 overflows 64 bits past 18 GB.
  const auto ns =
      static_cast<std::int64_t>(static_cast<u128>(bytes) * 1'000'000'000u / bytes_per_second_);
  std::lock_guard lock(mutex_);
  // The copy engine starts a copy when both it and the link are ready, however late the worker
  // thread that models it wakes up.
  const auto start = std::max(ready, next_free_);
  next_free_ = start + latency_ + std::chrono::nanoseconds(ns);
  return next_free_;
}

}  // namespace htp::sim
