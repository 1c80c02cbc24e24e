// Code lengths of a length-limited Huffman code, for the codec's encoder.
#pragma once

#include <array>
#include <cstdint>

namespace htp::codec {

/// Huffman code lengths for the 256 symbol counts in `freq`, none over max_code_bits (12): 0 for
/// an unused symbol, 1 for the only used one. Deterministic (ties broken by symbol). When the
/// plain Huffman code is too deep, the counts are halved (rounding up, so no used symbol drops
/// out) and the code rebuilt, until it fits; flat counts give depth 8 at most, so it always ends.
std::array<std::uint8_t, 256> limited_code_lengths(const std::array<std::uint64_t, 256>& freq);

}  // namespace htp::codec
