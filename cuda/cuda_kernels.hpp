// Kernels of the cuda backend: device-side htp::checksum and htp::fill_pattern.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace htp::cuda {

/// Launches the checksum of [ptr, ptr + bytes) on `s`; the result lands in `result_host` (pinned
/// host memory) when the stream reaches that point. Returns the first failing status.
cudaError_t launch_checksum(const void* ptr, std::size_t bytes, std::uint64_t* result_host,
                            cudaStream_t s);

/// Launches filling [ptr, ptr + bytes) with fill_pattern(seed) on `s`.
cudaError_t launch_fill_pattern(void* ptr, std::size_t bytes, std::uint64_t seed, cudaStream_t s);

}  // namespace htp::cuda
