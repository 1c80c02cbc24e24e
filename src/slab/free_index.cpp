#include "slab/free_index.hpp"

namespace htp::slab {

unsigned free_index::next_nonempty_above(unsigned b) const noexcept {
  const unsigned f = b >> sl_bits, s = b & 15u;
  const std::uint32_t sl = s == 15 ? 0 : sl_mask_[f] & (~0u << (s + 1)) & 0xffffu;
  if (sl != 0) return (f << sl_bits) | static_cast<unsigned>(__builtin_ctz(sl));
  const std::uint32_t fl = f + 1 >= 32 ? 0 : fl_mask_ & (~0u << (f + 1));
  if (fl == 0) return bucket_count;
  const unsigned g = static_cast<unsigned>(__builtin_ctz(fl));
  return (g << sl_bits) | static_cast<unsigned>(__builtin_ctz(sl_mask_[g]));
}

std::uint32_t free_index::longest() const noexcept {
  if (fl_mask_ == 0) return 0;
  const unsigned f = 31u - static_cast<unsigned>(__builtin_clz(fl_mask_));
  const unsigned s =
      31u - static_cast<unsigned>(__builtin_clz(static_cast<std::uint32_t>(sl_mask_[f])));
  std::uint32_t best = 0;
  for (std::uint32_t r = heads_[(f << sl_bits) | s]; r != none; r = pages_[r].b) {
    if (pages_[r].len > best) best = pages_[r].len;
  }
  return best;
}

}  // namespace htp::slab
