// The cuda backend: htp::device over the CUDA runtime. Every call is checked (HTP_CUDA_CHECK:
// HTP_CUDA_TRY with CUDA's stream-capture errors as htp::logic_error) and made with this device's
// ordinal current through a device_guard, which restores the caller's current device afterwards,
// so any host thread may use it and htp never changes which device the host program has current.
#include <htp/detail/allocation_registry.hpp>
#include <htp/detail/check.hpp>
#include <htp/detail/cuda_backend.hpp>
#include <htp/detail/host_function.hpp>
#include <htp/detail/topology.hpp>

#include "checksum_scratch.hpp"
#include "codec_kernels.hpp"
#include "cuda_kernels.hpp"
#include "device_guard.hpp"
#include "driver_api.hpp"
#include "hardware_queues.hpp"
#include "host_memory_facts.hpp"
#include "registered_ranges.hpp"

#include <cuda.h>  // types of the driver entry points only; nothing links libcuda
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

namespace htp {
namespace {

using cuda::device_guard;

cudaMemcpyKind to_cuda(copy_direction d) {
  switch (d) {
    case copy_direction::host_to_device: return cudaMemcpyHostToDevice;
    case copy_direction::device_to_host: return cudaMemcpyDeviceToHost;
    case copy_direction::device_to_device: return cudaMemcpyDeviceToDevice;
    case copy_direction::host_to_host: return cudaMemcpyHostToHost;
  }
  return cudaMemcpyDefault;
}

/// The cudaStream_t of a stream_ref, refusing the special handles (detail::check_stream_handle):
/// the legacy default stream and cudaStreamPerThread stand for several real streams.
cudaStream_t native(stream_ref s) {
  detail::check_stream_handle(s.native, "cuda device");
  return static_cast<cudaStream_t>(s.native);
}
cudaEvent_t native(event_ref e) { return static_cast<cudaEvent_t>(e.native); }
cudaGraphExec_t native(graph_ref g) { return static_cast<cudaGraphExec_t>(g.native); }

/// CUDA's stream-capture errors (cudaErrorStreamCaptureUnsupported ... WrongThread): a breach of
/// the capture rules (device.hpp, "capture and replay"), thrown as htp::logic_error on both
/// backends.
bool is_capture_error(int code) {
  return code >= static_cast<int>(cudaErrorStreamCaptureUnsupported) &&
         code <= static_cast<int>(cudaErrorStreamCaptureWrongThread);
}

/// Throws for a failed call: htp::logic_error for a stream-capture error (or for `also_logic`,
/// e.g. cudaErrorIllegalState from begin/end capture), htp::cuda_error otherwise.
[[noreturn]] void throw_status(cudaError_t e, const char* call, const char* file, int line,
                               cudaError_t also_logic = cudaSuccess) {
  (void)cudaGetLastError();  // clear a non-sticky error so later calls are not poisoned
  if (is_capture_error(static_cast<int>(e)) || (e == also_logic && e != cudaSuccess)) {
    throw logic_error(detail::concat("cuda device: ", call, " failed with ", cudaGetErrorName(e),
                                     " (", cudaGetErrorString(e),
                                     "): a breach of the stream-capture rules (see device.hpp, "
                                     "\"capture and replay\")"));
  }
  detail::throw_cuda_error(static_cast<int>(e), cudaGetErrorName(e), cudaGetErrorString(e), call,
                           file, line);
}

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
  explicit cuda_device(int ordinal) : ordinal_(ordinal), driver_(cuda::driver_api::get()) {
    device_guard g(ordinal_);
    cudaDeviceProp p{};
    HTP_CUDA_CHECK(cudaGetDeviceProperties(&p, ordinal_));
    props_.kind = backend::cuda;
    props_.ordinal = ordinal_;
    props_.name = p.name;
    props_.total_memory = p.totalGlobalMem;
    props_.copy_engines = p.asyncEngineCount;
    props_.compute_capability_major = p.major;
    props_.compute_capability_minor = p.minor;
    props_.can_map_host_memory = p.canMapHostMemory != 0;
    char bus_id[32] = {};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, ordinal_) == cudaSuccess) {
      props_.pci_bus_id = detail::normalize_pci_bus_id(bus_id);
      props_.numa_node = detail::numa_node_of_pci(props_.pci_bus_id);
    }
    HTP_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest_priority_, &greatest_priority_));
    cuda::report_hardware_queues(ordinal_);
    // Load the kernels and the checksum scratch now: a lazy kernel load or an allocation later
    // could wait for a context that a stream parked on a value word keeps busy.
    HTP_CUDA_CHECK(cuda::preload_kernels());
    HTP_CUDA_CHECK(cuda::preload_codec_kernels());
    scratch_.reserve();
  }

  ~cuda_device() override {
    // Tolerate the CUDA runtime shutting down first: ignore every status here.
    device_guard g(ordinal_, std::nothrow);
    std::lock_guard lock(memory_mutex_);
    registered_.for_each([](const void* p, const cuda::registered_ranges::range& r) {
      if (r.device_base != nullptr) (void)cudaHostUnregister(const_cast<void*>(p));
    });
    registered_.clear();
    allocations_.for_each([](void* p, const detail::allocation_registry::entry& a) {
      if (a.kind == memory_kind::device) {
        (void)cudaFree(p);
      } else {
        (void)cudaFreeHost(p);
      }
    });
    for (const auto& [exec, slots] : graph_slots_) (void)cudaGraphExecDestroy(exec);
    scratch_.free_all();
    (void)cudaGetLastError();
  }

  const device_properties& properties() const noexcept override { return props_; }

  memory_info memory() const override {
    detail::check_not_in_host_function("memory");
    device_guard g(ordinal_);
    memory_info m;
    HTP_CUDA_CHECK(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
    return m;
  }

  void* allocate(memory_kind kind, std::size_t bytes) override {
    detail::check_not_in_host_function("allocate");
    HTP_EXPECTS(bytes > 0, invalid_argument, "allocate(", to_string(kind),
                ", 0 bytes): a request must be at least one byte");
    device_guard g(ordinal_);
    void* p = nullptr;
    const cudaError_t e =
        kind == memory_kind::device
            ? cudaMalloc(&p, bytes)
            : cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw out_of_memory(allocation_failure(kind, bytes), bytes);
    }
    HTP_CUDA_CHECK(e);
    std::lock_guard lock(memory_mutex_);
    allocations_.add(p, bytes, kind);
    return p;
  }

  void deallocate(memory_kind kind, void* ptr, std::size_t bytes) override {
    detail::check_not_in_host_function("deallocate");
    {
      std::lock_guard lock(memory_mutex_);
      allocations_.remove(kind, ptr, bytes);
    }
    device_guard g(ordinal_);
    if (kind == memory_kind::device) {
      HTP_CUDA_CHECK(cudaFree(ptr));
    } else {
      HTP_CUDA_CHECK(cudaFreeHost(ptr));
    }
  }

  void* mapped_device_pointer(void* pinned_host_ptr) const override {
    detail::check_not_in_host_function("mapped_device_pointer");
    bool own = false;
    {
      std::lock_guard lock(memory_mutex_);
      if (void* d = registered_.device_address(pinned_host_ptr)) return d;
      const auto* a = allocations_.find_containing(pinned_host_ptr, 1);
      own = a != nullptr && a->kind == memory_kind::pinned_host;
    }
    // Not this device object's: pinned memory of another device object (a node's shared host tier,
    // which GPU 0 allocated) or of the program is mapped for this GPU only when it was allocated or
    // registered portable and mapped. The driver says so; neither call synchronises.
    device_guard g(ordinal_);
    cudaPointerAttributes attr{};
    void* d = nullptr;
    if (!own) {
      const bool host = cudaPointerGetAttributes(&attr, pinned_host_ptr) == cudaSuccess &&
                        attr.type == cudaMemoryTypeHost;
      const bool mapped = host && cudaHostGetDevicePointer(&d, pinned_host_ptr, 0) == cudaSuccess;
      if (!mapped) {
        (void)cudaGetLastError();
        throw invalid_argument(detail::concat(
            "mapped_device_pointer(", pinned_host_ptr, "): not pinned host memory mapped for cuda ",
            "device ", ordinal_, host ? " (page-locked, but not mapped for this GPU)" : "",
            "; use memory from device::allocate(pinned_host) or register_host_memory (both "
            "portable ",
            "and mapped), or cudaHostAlloc/cudaHostRegister with the Portable and Mapped flags"));
      }
      return d;
    }
    HTP_CUDA_CHECK(cudaHostGetDevicePointer(&d, pinned_host_ptr, 0));
    return d;
  }

  void register_host_memory(void* ptr, std::size_t bytes, bool read_only) override {
    detail::check_not_in_host_function("register_host_memory");
    HTP_EXPECTS(ptr != nullptr && bytes > 0, invalid_argument, "register_host_memory(", ptr, ", ",
                bytes, "): the pointer must be non-null and the range at least one byte");
    {
      // Claim the range (pending: no device address yet), so that an overlapping call made while
      // the driver pins this one is refused; pinning runs without the lock, which the hot path
      // (value words, checksums) takes.
      std::lock_guard lock(memory_mutex_);
      HTP_EXPECTS(!registered_.overlaps(ptr, bytes), invalid_argument, "register_host_memory(", ptr,
                  ", ", bytes, "): the range overlaps one already registered with this device");
      HTP_EXPECTS(!overlaps_pinned_allocation(ptr, bytes), invalid_argument,
                  "register_host_memory(", ptr, ", ", bytes,
                  "): the range overlaps pinned host memory allocated from this device (already "
                  "page-locked; use it directly)");
      registered_.add(ptr, {bytes, read_only, nullptr});
    }
    const auto give_up = [&] {
      std::lock_guard lock(memory_mutex_);
      registered_.remove(ptr);
    };
    device_guard g(ordinal_);
    unsigned int flags = cudaHostRegisterPortable | cudaHostRegisterMapped;
    if (read_only) flags |= cudaHostRegisterReadOnly;
    const cudaError_t e = cudaHostRegister(ptr, bytes, flags);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      give_up();
      throw cuda_error(static_cast<int>(e), cudaGetErrorName(e), "cudaHostRegister", __FILE__,
                       __LINE__, registration_failure(e, ptr, bytes, read_only));
    }
    void* d = nullptr;
    const cudaError_t m = cudaHostGetDevicePointer(&d, ptr, 0);
    if (m != cudaSuccess || d == nullptr) {
      (void)cudaGetLastError();
      (void)cudaHostUnregister(ptr);
      give_up();
      throw cuda_error(static_cast<int>(m), cudaGetErrorName(m), "cudaHostGetDevicePointer",
                       __FILE__, __LINE__,
                       "registered host memory has no device address (the GPU cannot map host "
                       "memory); the registration was undone");
    }
    std::lock_guard lock(memory_mutex_);
    registered_.set_device_base(ptr, d);
  }

  void unregister_host_memory(void* ptr) override {
    detail::check_not_in_host_function("unregister_host_memory");
    cuda::registered_ranges::range r;
    {
      std::lock_guard lock(memory_mutex_);
      const auto* found = registered_.find_start(ptr);
      HTP_EXPECTS(found != nullptr && found->device_base != nullptr, invalid_argument,
                  "unregister_host_memory(", ptr,
                  "): not the start of a range registered with this device");
      r = *found;
      registered_.remove(ptr);
    }
    device_guard g(ordinal_);
    const cudaError_t e = cudaHostUnregister(ptr);
    if (e != cudaSuccess) {
      {
        std::lock_guard lock(memory_mutex_);
        registered_.add(ptr, r);  // still registered as far as the driver is concerned
      }
      HTP_CUDA_CHECK(e);
    }
  }

  stream_ref create_stream(stream_priority priority) override {
    detail::check_not_in_host_function("create_stream");
    device_guard g(ordinal_);
    cudaStream_t s = nullptr;
    const int prio = priority == stream_priority::high ? greatest_priority_ : lowest_priority_;
    HTP_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, prio));
    return stream_ref{s};
  }

  void destroy_stream(stream_ref s) noexcept override {
    if (!s) return;
    device_guard g(ordinal_, std::nothrow);
    (void)cudaStreamSynchronize(static_cast<cudaStream_t>(s.native));
    scratch_.release(static_cast<cudaStream_t>(s.native));
    (void)cudaStreamDestroy(static_cast<cudaStream_t>(s.native));
    (void)cudaGetLastError();
  }

  void synchronize(stream_ref s) override {
    detail::check_not_in_host_function("synchronize");
    device_guard g(ordinal_);
    HTP_CUDA_CHECK(cudaStreamSynchronize(native(s)));
  }

  event_ref create_event() override {
    detail::check_not_in_host_function("create_event");
    device_guard g(ordinal_);
    cudaEvent_t e = nullptr;
    // No timing (cheaper to record); a host thread waiting on it sleeps instead of spinning a core
    // (see docs/transfer_engine.md, "Host waits").
    HTP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync));
    return event_ref{e};
  }

  event_ref create_timed_event() override {
    detail::check_not_in_host_function("create_timed_event");
    device_guard g(ordinal_);
    cudaEvent_t e = nullptr;
    HTP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventBlockingSync));
    std::lock_guard lock(timed_mutex_);
    timed_.insert(e);
    return event_ref{e};
  }

  std::optional<std::chrono::nanoseconds> elapsed(event_ref from, event_ref to) override {
    detail::check_not_in_host_function("elapsed");
    {
      // cudaEventElapsedTime answers cudaErrorInvalidResourceHandle both for an event made with
      // cudaEventDisableTiming and for one never recorded; htp tells them apart by its own books,
      // so the first is refused here and the second is "no time yet", as on sim.
      std::lock_guard lock(timed_mutex_);
      HTP_EXPECTS(timed_.count(native(from)) == 1 && timed_.count(native(to)) == 1,
                  invalid_argument,
                  "elapsed: both events must come from create_timed_event of this device (and "
                  "not be destroyed); CUDA refuses events made without timing");
    }
    float ms = 0;
    const cudaError_t status = cudaEventElapsedTime(&ms, native(from), native(to));
    // Documented: cudaErrorNotReady while either has not completed; cudaErrorInvalidResourceHandle
    // when either was never recorded (both are timed events of this device, checked above).
    if (status == cudaErrorNotReady || status == cudaErrorInvalidResourceHandle) {
      (void)cudaGetLastError();  // neither is sticky; leave no last error behind
      return std::nullopt;
    }
    HTP_CUDA_CHECK(status);
    return std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(ms) * 1e6));
  }

  void destroy_event(event_ref e) noexcept override {
    if (!e) return;
    {
      std::lock_guard lock(timed_mutex_);
      timed_.erase(native(e));
    }
    device_guard g(ordinal_, std::nothrow);
    if (cudaEventDestroy(native(e)) != cudaSuccess) (void)cudaGetLastError();
  }

  void record(event_ref e, stream_ref s) override {
    detail::check_not_in_host_function("record");
    device_guard g(ordinal_);
    HTP_CUDA_CHECK(cudaEventRecord(native(e), native(s)));
  }

  void wait(event_ref e, stream_ref s) override {
    detail::check_not_in_host_function("wait");
    device_guard g(ordinal_);
    HTP_CUDA_CHECK(cudaStreamWaitEvent(native(s), native(e), 0));
  }

  bool query(event_ref e) override {
    detail::check_not_in_host_function("query");
    const cudaError_t status = cudaEventQuery(native(e));
    if (status == cudaErrorNotReady) return false;
    HTP_CUDA_CHECK(status);
    return true;
  }

  void synchronize(event_ref e) override {
    detail::check_not_in_host_function("synchronize");
    HTP_CUDA_CHECK(cudaEventSynchronize(native(e)));
  }

  void copy_async(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                  stream_ref s) override {
    detail::check_not_in_host_function("copy_async");
    HTP_EXPECTS(dst != nullptr && src != nullptr, invalid_argument, "copy_async(", dst, ", ", src,
                ", ", bytes, ", ", to_string(direction),
                "): source and destination must be non-null");
    HTP_EXPECTS(bytes > 0, invalid_argument, "copy_async(", dst, ", ", src,
                ", 0 bytes): a copy must move at least one byte");
    const auto* a = static_cast<const char*>(dst);
    const auto* b = static_cast<const char*>(src);
    HTP_EXPECTS(a + bytes <= b || b + bytes <= a, invalid_argument, "copy_async(", dst, ", ", src,
                ", ", bytes, "): source and destination overlap");
    device_guard g(ordinal_);
    if (capturing(native(s))) refuse_pageable_in_capture(dst, src, bytes, direction);
    HTP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, to_cuda(direction), native(s)));
  }

  void launch_host_func(std::function<void()> fn, stream_ref s) override {
    detail::check_not_in_host_function("launch_host_func");
    HTP_EXPECTS(static_cast<bool>(fn), invalid_argument, "launch_host_func: empty function");
    device_guard g(ordinal_);
    auto owned = std::make_unique<std::function<void()>>(std::move(fn));
    HTP_CUDA_CHECK(cudaLaunchHostFunc(native(s), &cuda_device::trampoline, owned.get()));
    owned.release();  // the trampoline deletes it after running
  }

  void checksum_async(const void* ptr, std::size_t bytes, std::uint64_t* result,
                      stream_ref s) override {
    detail::check_not_in_host_function("checksum_async");
    HTP_EXPECTS(ptr != nullptr && result != nullptr && bytes > 0, invalid_argument,
                "checksum_async(", ptr, ", ", bytes, ", ", result,
                "): pointers must be non-null and bytes positive");
    // The kernel stores the result itself, through the word's device address (so `result` must
    // be pinned host memory of this device, as documented; invalid_argument otherwise).
    auto* result_device = static_cast<std::uint64_t*>(mapped_device_pointer(result));
    device_guard g(ordinal_);
    HTP_CUDA_CHECK(
        cuda::launch_checksum(ptr, bytes, slot_for(native(s)), result_device, native(s)));
  }

  void fill_pattern_async(void* ptr, std::size_t bytes, std::uint64_t seed, stream_ref s) override {
    detail::check_not_in_host_function("fill_pattern_async");
    HTP_EXPECTS(ptr != nullptr && bytes > 0, invalid_argument, "fill_pattern_async(", ptr, ", ",
                bytes, "): pointer must be non-null and bytes positive");
    device_guard g(ordinal_);
    HTP_CUDA_CHECK(cuda::launch_fill_pattern(ptr, bytes, seed, native(s)));
  }

  using device::decode_weights_async;
  void decode_weights_async(const void* wire, std::size_t wire_bytes, void* dst,
                            std::size_t dst_bytes, std::uint32_t* status, stream_ref s) override {
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

  void write_value_async(std::uint32_t* word, std::uint32_t value, stream_ref s) override {
    detail::check_not_in_host_function("write_value_async");
    const CUdeviceptr d = device_address(word);
    device_guard g(ordinal_);
    HTP_DRIVER_CHECK(driver_.write_value32(native(s), d, value, 0 /*DEFAULT*/));
  }

  void wait_value_async(const std::uint32_t* word, std::uint32_t value, stream_ref s) override {
    detail::check_not_in_host_function("wait_value_async");
    const CUdeviceptr d = device_address(word);
    device_guard g(ordinal_);
    HTP_DRIVER_CHECK(driver_.wait_value32(native(s), d, value, 0 /*GEQ, wrap-safe*/));
  }

  void write_value(std::uint32_t* word, std::uint32_t value) override {
    // A plain store to mapped pinned memory; the fence makes it visible to the GPU's poll.
    __atomic_store_n(word, value, __ATOMIC_SEQ_CST);
  }

  void verify_checksum_async(const void* ptr, std::size_t bytes, std::uint64_t expected,
                             std::uint32_t* counters, stream_ref s) override {
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

  void synchronize_all() override {
    detail::check_not_in_host_function("synchronize_all");
    device_guard g(ordinal_);
    HTP_CUDA_CHECK(cudaDeviceSynchronize());
    scratch_.reclaim_retired();  // no replay of a destroyed graph can be running now
  }

  // ---- capture and replay ----
  void begin_capture(stream_ref s) override {
    detail::check_not_in_host_function("begin_capture");
    device_guard g(ordinal_);
    const cudaError_t e = cudaStreamBeginCapture(native(s), cudaStreamCaptureModeThreadLocal);
    // Nesting: cudaErrorIllegalState, a breach of the capture rules like the others.
    if (e != cudaSuccess)
      throw_status(e, "cudaStreamBeginCapture", __FILE__, __LINE__, cudaErrorIllegalState);
  }

  graph_ref end_capture(stream_ref s) override;

  void launch_graph(graph_ref graph, stream_ref s) override {
    detail::check_not_in_host_function("launch_graph");
    HTP_EXPECTS(static_cast<bool>(graph), invalid_argument, "launch_graph: a null graph");
    device_guard g(ordinal_);
    HTP_EXPECTS(!capturing(native(s)), logic_error,
                "launch_graph: the stream is capturing; htp does not capture graph launches");
    HTP_CUDA_CHECK(cudaGraphLaunch(native(graph), native(s)));
  }

  void destroy_graph(graph_ref graph) noexcept override {
    if (!graph) return;
    device_guard g(ordinal_, std::nothrow);
    // An in-flight replay completes first (cudaGraphExecDestroy frees it then), so the graph's
    // checksum slots are retired until the device is next idle, not freed.
    (void)cudaGraphExecDestroy(native(graph));
    (void)cudaGetLastError();
    std::lock_guard lock(capture_mutex_);
    if (auto it = graph_slots_.find(native(graph)); it != graph_slots_.end()) {
      scratch_.retire(it->second);
      graph_slots_.erase(it);
    }
  }

  bool is_capturing(stream_ref s) override {
    detail::check_not_in_host_function("is_capturing");
    device_guard g(ordinal_);
    return capturing(native(s));
  }

 private:
  /// Whether `s` is capturing (active or invalidated). Device current.
  static bool capturing(cudaStream_t s) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    HTP_CUDA_CHECK(cudaStreamIsCapturing(s, &status));
    return status != cudaStreamCaptureStatusNone;
  }

  /// The checksum scratch slot for a kernel queued on `s` now: the stream's own outside a capture;
  /// inside one a slot of its own, fixed in the graph (a replay on another stream may run while
  /// `s` runs checksums of its own), kept with the capture's id until end_capture hands it to the
  /// graph. Device current.
  cuda::checksum_slot* slot_for(cudaStream_t s) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    HTP_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, &id));
    if (status == cudaStreamCaptureStatusNone) return scratch_.slot_for(s);
    cuda::checksum_slot* slot = scratch_.take_for_graph();
    std::lock_guard lock(capture_mutex_);
    capture_slots_[id].push_back(slot);
    return slot;
  }

  /// The slots taken during capture `id` (none if unknown), no longer the capture's.
  std::vector<cuda::checksum_slot*> take_capture_slots(unsigned long long id) {
    std::lock_guard lock(capture_mutex_);
    std::vector<cuda::checksum_slot*> slots;
    if (auto it = capture_slots_.find(id); it != capture_slots_.end()) {
      slots = std::move(it->second);
      capture_slots_.erase(it);
    }
    return slots;
  }

  /// htp's rule (device.hpp): no pageable host side on a capturing stream.
  void refuse_pageable_in_capture(void* dst, const void* src, std::size_t bytes,
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

  static void CUDART_CB trampoline(void* user) {
    std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(user));
    const detail::host_function_scope inside;  // device calls from fn are refused, as on sim
    try {
      (*fn)();
    } catch (...) {
      // A throw cannot cross the CUDA runtime's callback thread; the contract says fn must not.
    }
  }

  CUdeviceptr device_address(const std::uint32_t* word) const {
    void* d = mapped_device_pointer(const_cast<std::uint32_t*>(word));
    return reinterpret_cast<CUdeviceptr>(d);
  }

  /// Whether [ptr, ptr + bytes) shares a byte with a pinned allocation. Memory lock held.
  bool overlaps_pinned_allocation(const void* ptr, std::size_t bytes) const {
    const auto lo = reinterpret_cast<std::uintptr_t>(ptr);
    bool hit = false;
    allocations_.for_each([&](void* p, const detail::allocation_registry::entry& a) {
      const auto start = reinterpret_cast<std::uintptr_t>(p);
      if (a.kind == memory_kind::pinned_host && start < lo + bytes && lo < start + a.bytes)
        hit = true;
    });
    return hit;
  }

  /// The diagnostic of a failed allocation: GPU facts for device memory, host facts for pinned.
  std::string allocation_failure(memory_kind kind, std::size_t bytes) const {
    if (kind == memory_kind::pinned_host) {
      return detail::concat(
          "cuda device ", ordinal_, ": cannot allocate ", bytes, " bytes of pinned host memory (",
          cuda::host_memory_facts(),
          "). Lower the host budget or free host RAM (and check the locked-memory "
          "limit).");
    }
    std::size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
    return detail::concat("cuda device ", ordinal_, ": cannot allocate ", bytes,
                          " bytes of device memory (GPU reports ", free_b, " of ", total_b,
                          " bytes free). Lower the budget or free memory held by other processes.");
  }

  /// Why cudaHostRegister refused, in words.
  std::string registration_failure(cudaError_t e, const void* ptr, std::size_t bytes,
                                   bool read_only) const {
    const std::string what = detail::concat("cannot register ", bytes, " bytes of host memory at ",
                                            ptr, read_only ? " read-only" : "", ": ");
    switch (e) {
      case cudaErrorMemoryAllocation:
        return what + "the host could not page-lock it (" + cuda::host_memory_facts() + ")";
      case cudaErrorHostMemoryAlreadyRegistered:
        return what + "part of it is already page-locked by another registration or allocation "
                      "in this process";
      case cudaErrorNotSupported:
        return what + (read_only ? "this GPU or driver cannot map host memory read-only "
                                   "(cudaDevAttrHostRegisterReadOnlySupported is 0); register a "
                                   "writable mapping or copy into pinned memory"
                                 : "this GPU or driver cannot register host memory");
      default: return what + cudaGetErrorString(e);
    }
  }

  int ordinal_;
  const cuda::driver_api& driver_;
  device_properties props_;
  int lowest_priority_ = 0;
  int greatest_priority_ = 0;
  mutable std::mutex memory_mutex_;
  detail::allocation_registry allocations_;
  cuda::registered_ranges registered_;
  cuda::checksum_scratch_pool scratch_;
  std::mutex timed_mutex_;
  std::set<cudaEvent_t> timed_;  // events of create_timed_event not yet destroyed (for elapsed)
  std::mutex capture_mutex_;
  // Checksum slots of kernels captured so far, by capture id; then of each executable graph.
  std::map<unsigned long long, std::vector<cuda::checksum_slot*>> capture_slots_;
  std::map<cudaGraphExec_t, std::vector<cuda::checksum_slot*>> graph_slots_;
};

graph_ref cuda_device::end_capture(stream_ref s) {
  detail::check_not_in_host_function("end_capture");
  device_guard g(ordinal_);
  const cudaStream_t st = native(s);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (cudaStreamGetCaptureInfo(st, &status, &id) != cudaSuccess) (void)cudaGetLastError();
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(st, &graph);
  if (e != cudaSuccess) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    // Unjoined or invalidated: the capture has ended (every stream out of capture mode) and its
    // kernels never ran, so their slots are free again. Wrong thread, or not the origin: it goes
    // on, and keeps them.
    cudaStreamCaptureStatus after = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &after) != cudaSuccess || after == cudaStreamCaptureStatusNone) {
      (void)cudaGetLastError();
      if (status != cudaStreamCaptureStatusNone) scratch_.give_back(take_capture_slots(id));
    }
    throw_status(e, "cudaStreamEndCapture", __FILE__, __LINE__, cudaErrorIllegalState);
  }
  std::vector<cuda::checksum_slot*> slots = take_capture_slots(id);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t i = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);  // the executable graph is all htp keeps
  if (i != cudaSuccess) {
    scratch_.give_back(slots);
    throw_status(i, "cudaGraphInstantiate", __FILE__, __LINE__);
  }
  std::lock_guard lock(capture_mutex_);
  graph_slots_.emplace(exec, std::move(slots));
  return graph_ref{exec};
}

}  // namespace

namespace detail {

std::unique_ptr<device> make_cuda_device(int ordinal) {
  cuda::widen_hardware_queues();
  std::string why;
  const int n = cuda_device_count(&why);
  HTP_EXPECTS(ordinal >= 0 && ordinal < n, invalid_argument, "no CUDA GPU with ordinal ", ordinal,
              ": ", n == 0 ? why : detail::concat(n, " visible"));
  return std::make_unique<cuda_device>(ordinal);
}

cuda_probe probe_cuda() noexcept {
  // Records the environment and context state, and asks for 32 hardware queues, before anything
  // else of htp's touches CUDA (see hardware_queues.hpp).
  cuda::widen_hardware_queues();
  cuda_probe p;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    p.code = static_cast<int>(e);
    p.code_name = cudaGetErrorName(e);
    p.why = detail::concat("the CUDA runtime found no usable GPU (", cudaGetErrorName(e), ": ",
                           cudaGetErrorString(e), ")");
    if (e == cudaErrorInsufficientDriver) {
      p.remedy = "Install NVIDIA driver 580 or later (htp links the CUDA 13 runtime statically, "
                 "which needs the R580 branch), or no driver is loaded at all";
    } else if (e == cudaErrorNoDevice) {
      p.remedy = "Check that the GPU is visible to this process (nvidia-smi, "
                 "CUDA_VISIBLE_DEVICES, the container's device options)";
    } else {
      p.remedy = "Check the driver with nvidia-smi and the GPU's state";
    }
    return p;
  }
  if (n == 0) {
    p.code = static_cast<int>(cudaErrorNoDevice);
    p.code_name = "cudaErrorNoDevice";
    p.why = "the CUDA runtime reports 0 GPUs";
    p.remedy =
        "Check CUDA_VISIBLE_DEVICES and that the GPU is visible to this process (nvidia-smi)";
    return p;
  }
  p.count = n;
  return p;
}

int cuda_device_count(std::string* why) noexcept {
  const cuda_probe p = probe_cuda();
  if (p.count == 0 && why) *why = p.why + "; " + p.remedy;
  return p.count;
}

restore_current_device::restore_current_device() noexcept {
  if (cudaGetDevice(&device_) != cudaSuccess) {
    (void)cudaGetLastError();
    device_ = -1;
  }
}

restore_current_device::~restore_current_device() {
  if (device_ >= 0 && cudaSetDevice(device_) != cudaSuccess) (void)cudaGetLastError();
}

bool built_with_cuda() noexcept { return true; }

}  // namespace detail
}  // namespace htp
