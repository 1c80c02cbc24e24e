// The cuda backend's device, part two: copies, host functions, the kernels (checksums, pattern
// fill, the weight codec's verify and decode) and value words (the driver's stream memory
// operations). Memory, streams and events are in cuda_device.cpp; capture in cuda_capture.cpp.
#include "cuda_device.hpp"

#include <htp/detail/registration_pieces.hpp>

#include <htp/detail/host_function.hpp>

#include "codec_kernels.hpp"
#include "cuda_kernels.hpp"

#include <memory>

namespace htp::cuda {
namespace {

cudaMemcpyKind to_cuda(copy_direction d) {
  switch (d) {
    case copy_direction::host_to_device: return cudaMemcpyHostToDevice;
    case copy_direction::device_to_host: return cudaMemcpyDeviceToHost;
    case copy_direction::device_to_device: return cudaMemcpyDeviceToDevice;
    case copy_direction::host_to_host: return cudaMemcpyHostToHost;
  }
  return cudaMemcpyDefault;
}

}  // namespace

void cuda_device::copy_async(void* dst, const void* src, std::size_t bytes,
                             copy_direction direction, stream_ref s) {
  detail::check_not_in_host_function("copy_async");
  detail::check_copy_args(dst, src, bytes, to_string(direction));
  device_guard g(ordinal_);
  if (capturing(native(s))) refuse_pageable_in_capture(dst, src, bytes, direction);
  if (multi_piece_ranges_.load(std::memory_order_relaxed) > 0 &&
      direction != copy_direction::device_to_device) {
    copy_across_pieces(dst, src, bytes, direction, native(s));
    return;
  }
  HTP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, to_cuda(direction), native(s)));
}

void cuda_device::copy_across_pieces(void* dst, const void* src, std::size_t bytes,
                                     copy_direction direction, cudaStream_t s) {
  const bool host_is_src = direction == copy_direction::host_to_device;
  const void* host = host_is_src ? src : dst;
  const void* first = nullptr;  // the range's start and pieces, read under the lock
  std::size_t pieces = 1;
  {
    std::lock_guard lock(memory_mutex_);
    const auto in = registered_.containing(host);
    if (in.second != nullptr) {
      first = in.first;
      pieces = in.second->pieces;
    }
  }
  if (pieces == 1) {
    HTP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, to_cuda(direction), s));
    return;
  }
  const auto start =
      static_cast<std::size_t>(static_cast<const char*>(host) - static_cast<const char*>(first));
  detail::for_each_registration_piece(
      start, bytes, detail::max_registration_piece, [&](std::size_t off, std::size_t n) {
        const std::size_t k = off - start;
        HTP_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + k,
                                       static_cast<const char*>(src) + k, n, to_cuda(direction),
                                       s));
      });
}

void cuda_device::launch_host_func(std::function<void()> fn, stream_ref s) {
  detail::check_not_in_host_function("launch_host_func");
  HTP_EXPECTS(static_cast<bool>(fn), invalid_argument, "launch_host_func: empty function");
  device_guard g(ordinal_);
  auto owned = std::make_unique<std::function<void()>>(std::move(fn));
  HTP_CUDA_CHECK(cudaLaunchHostFunc(native(s), &cuda_device::trampoline, owned.get()));
  owned.release();  // the trampoline deletes it after running
}

void cuda_device::checksum_async(const void* ptr, std::size_t bytes, std::uint64_t* result,
                                 stream_ref s) {
  detail::check_not_in_host_function("checksum_async");
  HTP_EXPECTS(ptr != nullptr && result != nullptr && bytes > 0, invalid_argument, "checksum_async(",
              ptr, ", ", bytes, ", ", result, "): pointers must be non-null and bytes positive");
  // The kernel stores the result itself, through the word's device address (so `result` must
  // be pinned host memory of this device, as documented; invalid_argument otherwise).
  auto* result_device = static_cast<std::uint64_t*>(mapped_device_pointer(result));
  device_guard g(ordinal_);
  HTP_CUDA_CHECK(cuda::launch_checksum(ptr, bytes, slot_for(native(s)), result_device, native(s)));
}

void cuda_device::fill_pattern_async(void* ptr, std::size_t bytes, std::uint64_t seed,
                                     stream_ref s) {
  detail::check_not_in_host_function("fill_pattern_async");
  HTP_EXPECTS(ptr != nullptr && bytes > 0, invalid_argument, "fill_pattern_async(", ptr, ", ",
              bytes, "): pointer must be non-null and bytes positive");
  device_guard g(ordinal_);
  HTP_CUDA_CHECK(cuda::launch_fill_pattern(ptr, bytes, seed, native(s)));
}

void cuda_device::decode_weights_async(const void* wire, std::size_t wire_bytes, void* dst,
                                       std::size_t dst_bytes, std::uint32_t* status, stream_ref s) {
  detail::check_not_in_host_function("decode_weights_async");
  HTP_EXPECTS(wire != nullptr && dst != nullptr && wire_bytes > 0 && dst_bytes > 0,
              invalid_argument, "decode_weights_async(", wire, ", ", wire_bytes, ", ", dst, ", ",
              dst_bytes, "): pointers must be non-null and sizes positive");
  // A verified decode: the verify kernel stores the status (0 or the first failed check)
  // through the word's device address, then the decode adds any failure of its own.
  std::uint32_t* status_device =
      status != nullptr ? static_cast<std::uint32_t*>(mapped_device_pointer(status)) : nullptr;
  device_guard g(ordinal_);
  if (status_device != nullptr) {
    HTP_CUDA_CHECK(cuda::launch_verify_frame(wire, wire_bytes, dst_bytes, slot_for(native(s)),
                                             status_device, native(s)));
  }
  HTP_CUDA_CHECK(
      cuda::launch_decode_weights(wire, wire_bytes, dst, dst_bytes, status_device, native(s)));
}

void cuda_device::write_value_async(std::uint32_t* word, std::uint32_t value, stream_ref s) {
  detail::check_not_in_host_function("write_value_async");
  const CUdeviceptr d = device_address(word);
  device_guard g(ordinal_);
  HTP_DRIVER_CHECK(driver_.write_value32(native(s), d, value, 0 /*DEFAULT*/));
}

void cuda_device::wait_value_async(const std::uint32_t* word, std::uint32_t value, stream_ref s) {
  detail::check_not_in_host_function("wait_value_async");
  const CUdeviceptr d = device_address(word);
  device_guard g(ordinal_);
  HTP_DRIVER_CHECK(driver_.wait_value32(native(s), d, value, 0 /*GEQ, wrap-safe*/));
}

void cuda_device::write_value(std::uint32_t* word, std::uint32_t value) {
  // A plain store to mapped pinned memory; the fence makes it visible to the GPU's poll.
  __atomic_store_n(word, value, __ATOMIC_SEQ_CST);
}

void cuda_device::verify_checksum_async(const void* ptr, std::size_t bytes, std::uint64_t expected,
                                        std::uint32_t* counters, stream_ref s) {
  detail::check_not_in_host_function("verify_checksum_async");
  HTP_EXPECTS(ptr != nullptr && counters != nullptr && bytes > 0, invalid_argument,
              "verify_checksum_async(", ptr, ", ", bytes, ", ", counters,
              "): pointers must be non-null and bytes positive");
  // The kernel counts through the words' device address: pinned host memory of this device.
  auto* counters_device = static_cast<std::uint32_t*>(mapped_device_pointer(counters));
  (void)mapped_device_pointer(counters + 1);  // both words
  device_guard g(ordinal_);
  HTP_CUDA_CHECK(cuda::launch_verify_checksum(ptr, bytes, slot_for(native(s)), expected,
                                              counters_device, native(s)));
}

void cuda_device::refuse_pageable_in_capture(void* dst, const void* src, std::size_t bytes,
                                             copy_direction d) const {
  const auto pinned = [](const void* p) {
    cudaPointerAttributes attr{};
    const bool host =
        cudaPointerGetAttributes(&attr, p) == cudaSuccess && attr.type == cudaMemoryTypeHost;
    (void)cudaGetLastError();
    return host;
  };
  const bool dst_host = d == copy_direction::device_to_host || d == copy_direction::host_to_host;
  const bool src_host = d == copy_direction::host_to_device || d == copy_direction::host_to_host;
  HTP_EXPECTS((!dst_host || pinned(dst)) && (!src_host || pinned(src)), invalid_argument,
              "copy_async(", dst, ", ", src, ", ", bytes, ", ", to_string(d),
              "): a pageable host side on a capturing stream; a replay would read it with no "
              "host synchronisation: use pinned or registered host memory");
}

void CUDART_CB cuda_device::trampoline(void* user) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(user));
  const detail::host_function_scope inside;  // device calls from fn are refused, as on sim
  try {
    (*fn)();
  } catch (...) {
    // A throw cannot cross the CUDA runtime's callback thread; the contract says fn must not.
  }
}

CUdeviceptr cuda_device::device_address(const std::uint32_t* word) const {
  void* d = mapped_device_pointer(const_cast<std::uint32_t*>(word));
  return reinterpret_cast<CUdeviceptr>(d);
}

}  // namespace htp::cuda
