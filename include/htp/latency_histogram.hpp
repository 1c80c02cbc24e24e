// A small log-linear histogram of latencies in nanoseconds: 16 linear sub-buckets per power of two,
// so any percentile it reports is within 6.25% above the true value (and never above the maximum
// recorded). Fixed size (~8 KiB), no allocation after construction. Not thread-safe: the owner
// guards it (the transfer engine and the pager keep one per priority class under their lock).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

namespace htp {

/// Percentiles of a latency histogram, in nanoseconds. All zero when count == 0.
struct latency_summary {
  std::uint64_t count = 0;
  std::uint64_t p50_ns = 0;
  std::uint64_t p95_ns = 0;
  std::uint64_t p99_ns = 0;
  std::uint64_t max_ns = 0;
  std::uint64_t mean_ns = 0;
};

class latency_histogram {
 public:
  static constexpr int sub_bits = 4;
  static constexpr std::uint64_t sub_count = std::uint64_t{1} << sub_bits;
  static constexpr std::size_t bucket_count = (64 - sub_bits + 1) * sub_count;

  /// Adds one sample.
  void record(std::uint64_t ns) noexcept {
    ++buckets_[index(ns)];
    ++count_;
    sum_ += ns;
    max_ = std::max(max_, ns);
  }

  std::uint64_t count() const noexcept { return count_; }
  std::uint64_t max() const noexcept { return max_; }

  /// The smallest bucket bound below which at least fraction q (0..1] of samples lie, clamped to
  /// the maximum recorded. 0 when empty.
  std::uint64_t percentile(double q) const noexcept {
    if (count_ == 0) return 0;
    auto rank = static_cast<std::uint64_t>(q * static_cast<double>(count_) + 0.999999);
    rank = std::clamp<std::uint64_t>(rank, 1, count_);
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < bucket_count; ++i) {
      seen += buckets_[i];
      if (seen >= rank) return std::min(upper_bound(i), max_);
    }
    return max_;
  }

  latency_summary summary() const noexcept {
    latency_summary s;
    s.count = count_;
    s.p50_ns = percentile(0.50);
    s.p95_ns = percentile(0.95);
    s.p99_ns = percentile(0.99);
    s.max_ns = max_;
    s.mean_ns = count_ ? sum_ / count_ : 0;
    return s;
  }

  void reset() noexcept { *this = latency_histogram{}; }

 private:
  static std::size_t index(std::uint64_t v) noexcept {
    if (v < sub_count) return static_cast<std::size_t>(v);
    const int msb = 63 - __builtin_clzll(v);
    const std::uint64_t sub = (v >> (msb - sub_bits)) & (sub_count - 1);
    return static_cast<std::size_t>(static_cast<std::uint64_t>(msb - sub_bits + 1) * sub_count +
                                    sub);
  }
  /// Largest value that maps to bucket i.
  static std::uint64_t upper_bound(std::size_t i) noexcept {
    if (i < sub_count) return i;
    const int msb = static_cast<int>(i / sub_count) + sub_bits - 1;
    const std::uint64_t sub = i % sub_count;
    const std::uint64_t low = (sub_count + sub) << (msb - sub_bits);
    return low + ((std::uint64_t{1} << (msb - sub_bits)) - 1);
  }

  std::array<std::uint64_t, bucket_count> buckets_{};
  std::uint64_t count_ = 0;
  std::uint64_t sum_ = 0;
  std::uint64_t max_ = 0;
};

}  // namespace htp
