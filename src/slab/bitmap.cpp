#include "slab/bitmap.hpp"

namespace htp::slab {

bitmap::bitmap(std::size_t bits, bool value)
    : words_((bits + 63) / 64, value ? ~std::uint64_t{0} : 0), size_(bits) {
  // Bits past size_ stay clear, so whole-word counts never see them.
  if (value && (bits & 63) != 0) words_.back() = (std::uint64_t{1} << (bits & 63)) - 1;
}

std::size_t bitmap::find_next(std::size_t from, std::size_t to, bool value) const noexcept {
  if (from >= to) return npos;
  std::size_t w = from >> 6;
  // Invert so the search is always for a set bit; mask off bits below `from`.
  std::uint64_t word = (value ? words_[w] : ~words_[w]) & (~std::uint64_t{0} << (from & 63));
  const std::size_t last_word = (to - 1) >> 6;
  while (true) {
    if (word != 0) {
      const std::size_t i = (w << 6) + static_cast<std::size_t>(__builtin_ctzll(word));
      return i < to ? i : npos;
    }
    if (++w > last_word) return npos;
    word = value ? words_[w] : ~words_[w];
  }
}

std::size_t bitmap::count(std::size_t first, std::size_t last) const noexcept {
  std::size_t n = 0;
  for (std::size_t i = first; i < last;) {
    const std::size_t w = i >> 6;
    const std::size_t lo = i & 63;
    const std::size_t hi = (last - (i - lo)) >= 64 ? 64 : last - (i - lo);
    const std::uint64_t mask = (hi == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << hi) - 1) &
                               ~((std::uint64_t{1} << lo) - 1);
    n += static_cast<std::size_t>(__builtin_popcountll(words_[w] & mask));
    i = (w + 1) << 6;
  }
  return n;
}

}  // namespace htp::slab
