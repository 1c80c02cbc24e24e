// Checksums and seeded payloads over tensor bytes: how htp (and its tests) prove that nothing was
// lost through an eviction, write-back or compaction. The same functions run on the host here and
// as CUDA kernels through device::checksum_async / device::fill_pattern_async, with equal results.
#pragma once

#include <cstddef>
#include <cstdint>

namespace htp {

/// Position-sensitive 64-bit checksum of `bytes` bytes at `data` (host memory). Defined as the
/// wrapping sum over 8-byte little-endian words w_i (the tail zero-padded) of mix(w_i ^ mix(i)),
/// plus mix(bytes): order-independent to compute, so a GPU reduces it in parallel, yet moving a
/// word changes it. Thread-safe, pure.
std::uint64_t checksum(const void* data, std::size_t bytes) noexcept;

/// Fills `bytes` bytes at `data` (host memory) with the pattern of `seed`: word i is
/// mix(seed + i). A payload made this way can be checked in place by recomputing it. Pure.
void fill_pattern(void* data, std::size_t bytes, std::uint64_t seed) noexcept;

}  // namespace htp
