#include "slab/size_classes.hpp"

namespace htp::slab {

size_classes::size_classes(std::size_t page_bytes) : page_bytes_(page_bytes) {
  for (std::size_t c = 256; c <= 1024; c += 256) block_.push_back(c);
  for (std::size_t p = 1024; p < page_bytes / 2; p <<= 1) {
    for (std::size_t q = 5; q <= 8; ++q) block_.push_back(p / 4 * q);
  }
}

std::size_t size_classes::index_for(std::size_t bytes) const noexcept {
  if (bytes <= 1024) return (bytes + 255) / 256 - 1;
  // k = floor(log2(bytes - 1)), so 2^k < bytes <= 2^(k+1); the class step in that octave is 2^k/4.
  const unsigned k = 63u - static_cast<unsigned>(__builtin_clzll(bytes - 1));
  const std::size_t step = (std::size_t{1} << k) >> 2;
  const std::size_t q = (bytes + step - 1) / step;  // in [5, 8]
  return 3 + (k - 10) * 4 + (q - 4);
}

}  // namespace htp::slab
