// The cuda backend's device class (private to cuda/): htp::device over the CUDA runtime.
// Construction, memory, streams and events (cuda_device.cpp); copies, host functions, kernels and
// value words (cuda_device_work.cpp); stream capture and graphs (cuda_capture.cpp). Also the
// checked-call macros HTP_CUDA_CHECK and HTP_DRIVER_CHECK those files share.
#pragma once

#include <htp/detail/allocation_registry.hpp>
#include <htp/detail/check.hpp>
#include <htp/device.hpp>

#include "checksum_scratch.hpp"
#include "device_guard.hpp"
#include "driver_api.hpp"
#include "registered_ranges.hpp"

#include <cuda.h>  // types of the driver entry points only; nothing links libcuda
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace htp::cuda {

/// The cudaStream_t of a stream_ref, refusing the special handles (detail::check_stream_handle):
/// the legacy default stream and cudaStreamPerThread stand for several real streams.
inline cudaStream_t native(stream_ref s) {
  detail::check_stream_handle(s.native, "cuda device");
  return static_cast<cudaStream_t>(s.native);
}
inline cudaEvent_t native(event_ref e) { return static_cast<cudaEvent_t>(e.native); }
inline cudaGraphExec_t native(graph_ref g) { return static_cast<cudaGraphExec_t>(g.native); }

/// CUDA's stream-capture errors (cudaErrorStreamCaptureUnsupported ... WrongThread): a breach of
/// the capture rules (device.hpp, "capture and replay"), thrown as htp::logic_error on both
/// backends.
inline bool is_capture_error(int code) {
  return code >= static_cast<int>(cudaErrorStreamCaptureUnsupported) &&
         code <= static_cast<int>(cudaErrorStreamCaptureWrongThread);
}

/// Throws for a failed call: htp::logic_error for a stream-capture error (or for `also_logic`,
/// e.g. cudaErrorIllegalState from begin/end capture), htp::cuda_error otherwise.
[[noreturn]] void throw_status(cudaError_t e, const char* call, const char* file, int line,
                               cudaError_t also_logic = cudaSuccess);

// HTP_CUDA_TRY, but CUDA's stream-capture errors are htp::logic_error (see throw_status).
#define HTP_CUDA_CHECK(call)                                      \
  do {                                                            \
    const cudaError_t htp_check_status_ = (call);                 \
    if (htp_check_status_ != cudaSuccess)                         \
      throw_status(htp_check_status_, #call, __FILE__, __LINE__); \
  } while (0)

// HTP_DRIVER_TRY, with the stream-capture errors (the same numbers) as htp::logic_error.
#define HTP_DRIVER_CHECK(call)                                                              \
  do {                                                                                      \
    const CUresult htp_driver_check_ = (call);                                              \
    if (is_capture_error(static_cast<int>(htp_driver_check_)))                              \
      throw_status(static_cast<cudaError_t>(htp_driver_check_), #call, __FILE__, __LINE__); \
    HTP_DRIVER_TRY(htp_driver_check_);                                                      \
  } while (0)

class cuda_device final : public device {
 public:
  explicit cuda_device(int ordinal);
  ~cuda_device() override;

  // ---- memory, streams, events (cuda_device.cpp) ----
  const device_properties& properties() const noexcept override { return props_; }
  memory_info memory() const override;
  void* allocate(memory_kind kind, std::size_t bytes) override;
  void deallocate(memory_kind kind, void* ptr, std::size_t bytes) override;
  void* mapped_device_pointer(void* pinned_host_ptr) const override;
  void register_host_memory(void* ptr, std::size_t bytes, bool read_only) override;
  void unregister_host_memory(void* ptr) override;
  stream_ref create_stream(stream_priority priority) override;
  void destroy_stream(stream_ref s) noexcept override;
  void synchronize(stream_ref s) override;
  event_ref create_event() override;
  event_ref create_timed_event() override;
  std::optional<std::chrono::nanoseconds> elapsed(event_ref from, event_ref to) override;
  void destroy_event(event_ref e) noexcept override;
  void record(event_ref e, stream_ref s) override;
  void wait(event_ref e, stream_ref s) override;
  bool query(event_ref e) override;
  void synchronize(event_ref e) override;
  void synchronize_all() override;

  // ---- copies, kernels, value words (cuda_device_work.cpp) ----
  void copy_async(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                  stream_ref s) override;
  void launch_host_func(std::function<void()> fn, stream_ref s) override;
  void checksum_async(const void* ptr, std::size_t bytes, std::uint64_t* result,
                      stream_ref s) override;
  void fill_pattern_async(void* ptr, std::size_t bytes, std::uint64_t seed, stream_ref s) override;
  using device::decode_weights_async;
  void decode_weights_async(const void* wire, std::size_t wire_bytes, void* dst,
                            std::size_t dst_bytes, std::uint32_t* status, stream_ref s) override;
  void write_value_async(std::uint32_t* word, std::uint32_t value, stream_ref s) override;
  void wait_value_async(const std::uint32_t* word, std::uint32_t value, stream_ref s) override;
  void write_value(std::uint32_t* word, std::uint32_t value) override;
  void verify_checksum_async(const void* ptr, std::size_t bytes, std::uint64_t expected,
                             std::uint32_t* counters, stream_ref s) override;

  // ---- capture and replay (cuda_capture.cpp) ----
  void begin_capture(stream_ref s) override;
  graph_ref end_capture(stream_ref s) override;
  void launch_graph(graph_ref graph, stream_ref s) override;
  void destroy_graph(graph_ref graph) noexcept override;
  bool is_capturing(stream_ref s) override;

 private:
  // capture helpers (cuda_capture.cpp)
  /// Whether `s` is capturing (active or invalidated). Device current.
  static bool capturing(cudaStream_t s);
  /// The checksum scratch slot for a kernel queued on `s` now: the stream's own outside a capture;
  /// inside one a slot of its own, fixed in the graph (a replay on another stream may run while
  /// `s` runs checksums of its own), kept with the capture's id until end_capture hands it to the
  /// graph. Device current.
  cuda::checksum_slot* slot_for(cudaStream_t s);
  /// The slots taken during capture `id` (none if unknown), no longer the capture's.
  std::vector<cuda::checksum_slot*> take_capture_slots(unsigned long long id);

  // work helpers (cuda_device_work.cpp)
  /// htp's rule (device.hpp): no pageable host side on a capturing stream.
  void refuse_pageable_in_capture(void* dst, const void* src, std::size_t bytes,
                                  copy_direction d) const;
  static void CUDART_CB trampoline(void* user);
  CUdeviceptr device_address(const std::uint32_t* word) const;

  // memory helpers (cuda_device.cpp)
  /// Whether [ptr, ptr + bytes) shares a byte with a pinned allocation. Memory lock held.
  bool overlaps_pinned_allocation(const void* ptr, std::size_t bytes) const;
  /// The diagnostic of a failed allocation: GPU facts for device memory, host facts for pinned.
  std::string allocation_failure(memory_kind kind, std::size_t bytes) const;
  /// Why cudaHostRegister refused, in words.
  /// cudaHostRegister of [ptr, ptr + bytes) in pieces (registration_pieces.hpp), all or none;
  /// returns the device address of ptr and counts the pieces made in `pieces`.
  void* register_pieces(void* ptr, std::size_t bytes, bool read_only, std::size_t& pieces);
  /// Issues a copy whose host side may cross pieces of a range registered in pieces.
  void copy_across_pieces(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                          cudaStream_t s);
  std::string registration_failure(cudaError_t e, const void* ptr, std::size_t bytes,
                                   bool read_only) const;

  int ordinal_;
  const cuda::driver_api& driver_;
  device_properties props_;
  int lowest_priority_ = 0;
  int greatest_priority_ = 0;
  mutable std::mutex memory_mutex_;
  detail::allocation_registry allocations_;
  cuda::registered_ranges registered_;
  /// Registered ranges made of more than one piece: copies are split only while there are some.
  std::atomic<int> multi_piece_ranges_{0};
  cuda::checksum_scratch_pool scratch_;
  std::mutex timed_mutex_;
  std::set<cudaEvent_t> timed_;  // events of create_timed_event not yet destroyed (for elapsed)
  std::mutex capture_mutex_;
  // Checksum slots of kernels captured so far, by capture id; then of each executable graph.
  std::map<unsigned long long, std::vector<cuda::checksum_slot*>> capture_slots_;
  std::map<cudaGraphExec_t, std::vector<cuda::checksum_slot*>> graph_slots_;
};

}  // namespace htp::cuda
