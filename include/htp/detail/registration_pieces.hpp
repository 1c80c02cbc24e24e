// Host ranges registered with the driver in pieces. One cudaHostRegister call fails for a range
// of 512 GiB or more, yet a node's weights mapped from their files can pass that. The cuda device
// registers such a range as pieces of at most max_registration_piece bytes and splits a copy that
// would cross from one piece into the next, so the caller sees one registered range of any size.
#pragma once

#include <cstddef>

namespace htp::detail {

/// The largest piece one host registration call is given (256 GiB: half the size at which the
/// driver's call fails).
inline constexpr std::size_t max_registration_piece = std::size_t{256} << 30;

/// Calls fn(offset, bytes) for each part of [offset, offset + bytes) that lies in one piece of a
/// range cut every `piece` bytes from its start (piece > 0), in order. Never throws but what fn
/// throws.
template <typename F>
void for_each_registration_piece(std::size_t offset, std::size_t bytes, std::size_t piece, F&& fn) {
  while (bytes > 0) {
    const std::size_t in_piece = piece - offset % piece;
    const std::size_t n = bytes < in_piece ? bytes : in_piece;
    fn(offset, n);
    offset += n;
    bytes -= n;
  }
}

}  // namespace htp::detail
