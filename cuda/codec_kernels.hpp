// The cuda backend's weight decode kernel (device::decode_weights_async; the format is
// include/htp/detail/codec_format.hpp, the same steps the CPU reference decoder runs).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace htp::cuda {

struct checksum_slot;  // cuda_kernels.hpp

/// Launches decoding the frame of `wire_bytes` at `wire` (device memory) into `dst_bytes` at `dst`
/// (device memory) on `s`. Every thread block reads the header and directory from device memory
/// and walks tiles of codec blocks (one thread per codec block, the chunk's decode table built in
/// shared memory); a raw chunk is copied. No read or write leaves the two ranges whatever the
/// bytes hold; a corrupt header, chunk or block leaves its output undecoded and, when
/// `status_device` (the device address of a pinned host word) is not null, stores its nonzero
/// codec::status there unless the word holds a nonzero one already (the verify's, which names the
/// cause better); nothing is stored when the decode succeeds. Returns the launch status.
cudaError_t launch_decode_weights(const void* wire, std::size_t wire_bytes, void* dst,
                                  std::size_t dst_bytes, std::uint32_t* status_device,
                                  cudaStream_t s);

/// Launches the checks of a verified decode on `s` (device::decode_weights_async with a status
/// word; codec::check_frame is the host's twin): the header, that it decodes to `dst_bytes`, its
/// check word (block 0's threads sum the directory), every entry, and every chunk's checksum. The
/// checksums reduce in parallel: each block sums the checksum terms of 32 KiB tiles of the chunks,
/// each chunk's sum minus its directory checksum weighted by an odd per-chunk factor (mix64(c) |
/// 1, so errors in two chunks do not cancel as a plain sum's would), into `slot` (device memory,
/// zero, used by no other stream meanwhile, as launch_checksum's); the last block stores 0 at
/// `status_device` when the total is 0 and no check failed, otherwise the first failed check
/// (bad_chunk_checksum for a sum that is not 0). A header that does not parse is stored by
/// block 0 alone (no block touches the slot). One kernel, no host round trip. Returns the launch
/// status.
cudaError_t launch_verify_frame(const void* wire, std::size_t wire_bytes, std::size_t dst_bytes,
                                checksum_slot* slot, std::uint32_t* status_device, cudaStream_t s);

/// Loads the decode and verify kernels now (see preload_kernels in cuda_kernels.hpp).
cudaError_t preload_codec_kernels();

}  // namespace htp::cuda
