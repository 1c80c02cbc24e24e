// The cuda backend's weight decode kernel (device::decode_weights_async; the format is
// src/codec/format.hpp, the same steps the CPU reference decoder runs).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace htp::cuda {

/// Launches decoding the frame of `wire_bytes` at `wire` (device memory) into `dst_bytes` at `dst`
/// (device memory) on `s`. Every thread block reads the header and directory from device memory
/// and walks tiles of codec blocks (one thread per codec block, the chunk's decode table built in
/// shared memory); a raw chunk is copied. No read or write leaves the two ranges whatever the
/// bytes hold; a corrupt header, chunk or block leaves its output undecoded. Returns the launch
/// status.
cudaError_t launch_decode_weights(const void* wire, std::size_t wire_bytes, void* dst,
                                  std::size_t dst_bytes, cudaStream_t s);

/// Loads the decode kernel now (see preload_kernels in cuda_kernels.hpp).
cudaError_t preload_codec_kernels();

}  // namespace htp::cuda
