#include <htp/checksum.hpp>
#include <htp/detail/mix.hpp>

#include <cstring>

namespace htp {

std::uint64_t checksum(const void* data, std::size_t bytes) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  const std::size_t words = bytes / 8;
  std::uint64_t sum = detail::mix64(bytes);
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t w;
    std::memcpy(&w, p + i * 8, 8);
    sum += detail::checksum_term(w, i);
  }
  if (const std::size_t tail = bytes % 8; tail != 0) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + words * 8, tail);
    sum += detail::checksum_term(w, words);
  }
  return sum;
}

void fill_pattern(void* data, std::size_t bytes, std::uint64_t seed) noexcept {
  auto* p = static_cast<unsigned char*>(data);
  const std::size_t words = bytes / 8;
  for (std::size_t i = 0; i < words; ++i) {
    const std::uint64_t w = detail::mix64(seed + i);
    std::memcpy(p + i * 8, &w, 8);
  }
  if (const std::size_t tail = bytes % 8; tail != 0) {
    const std::uint64_t w = detail::mix64(seed + words);
    std::memcpy(p + words * 8, &w, tail);
  }
}

}  // namespace htp
