// The 64-bit mixer behind htp::checksum and htp::fill_pattern, usable in host and device code.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HTP_HOST_DEVICE __host__ __device__
#else
#define HTP_HOST_DEVICE
#endif

namespace htp::detail {

/// A bijective finalizer (splitmix64's): every input bit affects every output bit.
HTP_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Contribution of word `w` at word index `i` to a checksum.
HTP_HOST_DEVICE inline std::uint64_t checksum_term(std::uint64_t w, std::uint64_t i) {
  return mix64(w ^ mix64(i));
}

}  // namespace htp::detail
