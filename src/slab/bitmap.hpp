// A plain host-side bitmap with word-at-a-time searches. Not thread-safe; the owner locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace htp::slab {

class bitmap {
 public:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  bitmap() = default;
  explicit bitmap(std::size_t bits, bool value = false);

  std::size_t size() const noexcept { return size_; }
  bool test(std::size_t i) const noexcept { return (words_[i >> 6] >> (i & 63)) & 1u; }
  void set(std::size_t i) noexcept { words_[i >> 6] |= std::uint64_t{1} << (i & 63); }
  void reset(std::size_t i) noexcept { words_[i >> 6] &= ~(std::uint64_t{1} << (i & 63)); }
  /// First index in [from, to) whose bit equals `value`, or npos.
  std::size_t find_next(std::size_t from, std::size_t to, bool value) const noexcept;
  /// Number of set bits in [first, last).
  std::size_t count(std::size_t first, std::size_t last) const noexcept;

 private:
  std::vector<std::uint64_t> words_;
  std::size_t size_ = 0;
};

}  // namespace htp::slab
