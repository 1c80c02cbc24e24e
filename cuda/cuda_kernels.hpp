// Kernels of the cuda backend: device-side htp::checksum (plain and verifying) and
// htp::fill_pattern.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace htp::cuda {

/// Device scratch of one checksum (or frame verify, codec_kernels.hpp) in flight on one stream:
/// the blocks' running sum, how many blocks have added theirs, and a verify's first failed check
/// (a codec::status; a plain checksum leaves it 0). Zero between uses (the last block resets it).
struct checksum_slot {
  unsigned long long sum;
  unsigned int blocks_done;
  unsigned int status;
};

/// Launches the checksum of [ptr, ptr + bytes) on `s`, reducing in `slot` (device memory, zero,
/// used by no other stream meanwhile). The last block stores the result at `result_device`, the
/// device address of a pinned host word: it is there once the stream reaches that point. One
/// kernel, no copy. Returns the launch status.
cudaError_t launch_checksum(const void* ptr, std::size_t bytes, checksum_slot* slot,
                            std::uint64_t* result_device, cudaStream_t s);

/// Launches the checksum of [ptr, ptr + bytes) on `s` as launch_checksum does; the last block
/// compares it with `expected` and adds 1 to counters_device[0] and, on a mismatch, 1 to
/// counters_device[1] (the device address of two pinned host words; plain read-modify-writes, so
/// verifies of one pair must be stream-ordered). No host work: capturable.
cudaError_t launch_verify_checksum(const void* ptr, std::size_t bytes, checksum_slot* slot,
                                   std::uint64_t expected, std::uint32_t* counters_device,
                                   cudaStream_t s);

/// Launches filling [ptr, ptr + bytes) with fill_pattern(seed) on `s`: 8-byte stores on the
/// 8-aligned body, single bytes only for the unaligned head and the tail.
cudaError_t launch_fill_pattern(void* ptr, std::size_t bytes, std::uint64_t seed, cudaStream_t s);

/// Loads htp's kernels into the current device's context now (cudaFuncGetAttributes on each), so
/// that no kernel is loaded lazily later, while a stream may be parked on a value word: a lazy load
/// may need the context idle, which a parked stream prevents. Returns the first failing status.
cudaError_t preload_kernels();

}  // namespace htp::cuda
