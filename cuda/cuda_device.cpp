// The cuda backend: htp::device over the CUDA runtime. Every call is checked (HTP_CUDA_CHECK:
// HTP_CUDA_TRY with CUDA's stream-capture errors as htp::logic_error) and made with this device's
// ordinal current through a device_guard, which restores the caller's current device afterwards,
// so any host thread may use it and htp never changes which device the host program has current.
// Part one: construction, memory, streams and events, and the backend's entry points
// (detail::make_cuda_device, probe_cuda). Copies, kernels and value words are in
// cuda_device_work.cpp; stream capture and graphs in cuda_capture.cpp; the class in
// cuda_device.hpp.
#include "cuda_device.hpp"

#include <htp/detail/registration_pieces.hpp>

#include <htp/detail/cuda_backend.hpp>
#include <htp/detail/host_function.hpp>
#include <htp/detail/topology.hpp>

#include "codec_kernels.hpp"
#include "cuda_kernels.hpp"
#include "hardware_queues.hpp"
#include "host_memory_facts.hpp"

namespace htp {
namespace cuda {

[[noreturn]] void throw_status(cudaError_t e, const char* call, const char* file, int line,
                               cudaError_t also_logic) {
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

cuda_device::cuda_device(int ordinal) : ordinal_(ordinal), driver_(cuda::driver_api::get()) {
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

cuda_device::~cuda_device() {
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

memory_info cuda_device::memory() const {
  detail::check_not_in_host_function("memory");
  device_guard g(ordinal_);
  memory_info m;
  HTP_CUDA_CHECK(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
  return m;
}

void* cuda_device::allocate(memory_kind kind, std::size_t bytes) {
  detail::check_not_in_host_function("allocate");
  HTP_EXPECTS(bytes > 0, invalid_argument, "allocate(", to_string(kind),
              ", 0 bytes): a request must be at least one byte");
  device_guard g(ordinal_);
  void* p = nullptr;
  const cudaError_t e = kind == memory_kind::device
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

void cuda_device::deallocate(memory_kind kind, void* ptr, std::size_t bytes) {
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

void* cuda_device::mapped_device_pointer(void* pinned_host_ptr) const {
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

void cuda_device::register_host_memory(void* ptr, std::size_t bytes, bool read_only) {
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
    HTP_EXPECTS(!overlaps_pinned_allocation(ptr, bytes), invalid_argument, "register_host_memory(",
                ptr, ", ", bytes,
                "): the range overlaps pinned host memory allocated from this device (already "
                "page-locked; use it directly)");
    registered_.add(ptr, {bytes, read_only, nullptr});
  }
  const auto give_up = [&] {
    std::lock_guard lock(memory_mutex_);
    registered_.remove(ptr);
  };
  std::size_t pieces = 0;
  void* base = nullptr;
  try {
    device_guard g(ordinal_);
    base = register_pieces(ptr, bytes, read_only, pieces);
  } catch (...) {
    give_up();
    throw;
  }
  std::lock_guard lock(memory_mutex_);
  registered_.set_device_base(ptr, base);
  if (pieces > 1) {
    auto* r = const_cast<cuda::registered_ranges::range*>(registered_.find_start(ptr));
    r->pieces = pieces;
    multi_piece_ranges_.fetch_add(1);
  }
}

void* cuda_device::register_pieces(void* ptr, std::size_t bytes, bool read_only,
                                   std::size_t& pieces) {
  unsigned int flags = cudaHostRegisterPortable | cudaHostRegisterMapped;
  if (read_only) flags |= cudaHostRegisterReadOnly;
  char* const first = static_cast<char*>(ptr);
  void* base = nullptr;
  const auto undo = [&] {
    detail::for_each_registration_piece(0, bytes, detail::max_registration_piece,
                                        [&](std::size_t off, std::size_t) {
                                          if (off / detail::max_registration_piece < pieces)
                                            (void)cudaHostUnregister(first + off);
                                        });
  };
  detail::for_each_registration_piece(
      0, bytes, detail::max_registration_piece, [&](std::size_t off, std::size_t n) {
        const cudaError_t e = cudaHostRegister(first + off, n, flags);
        if (e != cudaSuccess) {
          (void)cudaGetLastError();
          undo();
          throw cuda_error(static_cast<int>(e), cudaGetErrorName(e), "cudaHostRegister", __FILE__,
                           __LINE__, registration_failure(e, first + off, n, read_only));
        }
        ++pieces;
        // Each piece's device address must continue the first's (it does under unified addressing),
        // so a kernel reading across a piece boundary reads the next piece's bytes.
        void* d = nullptr;
        const cudaError_t m = cudaHostGetDevicePointer(&d, first + off, 0);
        if (m == cudaSuccess && off == 0) base = d;
        if (m != cudaSuccess || d == nullptr || d != static_cast<char*>(base) + off) {
          (void)cudaGetLastError();
          undo();
          throw cuda_error(static_cast<int>(m), cudaGetErrorName(m), "cudaHostGetDevicePointer",
                           __FILE__, __LINE__,
                           "registered host memory has no device address, or its pieces' addresses "
                           "are not contiguous (the GPU cannot map host memory as one range); the "
                           "registration was undone");
        }
      });
  return base;
}

void cuda_device::unregister_host_memory(void* ptr) {
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
  if (r.pieces > 1) multi_piece_ranges_.fetch_sub(1);
  cudaError_t e = cudaSuccess;
  detail::for_each_registration_piece(
      0, r.bytes, detail::max_registration_piece, [&](std::size_t off, std::size_t) {
        const cudaError_t one = cudaHostUnregister(static_cast<char*>(ptr) + off);
        if (one != cudaSuccess && e == cudaSuccess) e = one;
      });
  if (e != cudaSuccess) {
    if (r.pieces == 1) {
      std::lock_guard lock(memory_mutex_);
      registered_.add(ptr, r);  // still registered as far as the driver is concerned
    }
    HTP_CUDA_CHECK(e);  // of several pieces, some are gone: the range is forgotten
  }
}

stream_ref cuda_device::create_stream(stream_priority priority) {
  detail::check_not_in_host_function("create_stream");
  device_guard g(ordinal_);
  cudaStream_t s = nullptr;
  const int prio = priority == stream_priority::high ? greatest_priority_ : lowest_priority_;
  HTP_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, prio));
  return stream_ref{s};
}

void cuda_device::destroy_stream(stream_ref s) noexcept {
  if (!s) return;
  device_guard g(ordinal_, std::nothrow);
  (void)cudaStreamSynchronize(static_cast<cudaStream_t>(s.native));
  scratch_.release(static_cast<cudaStream_t>(s.native));
  (void)cudaStreamDestroy(static_cast<cudaStream_t>(s.native));
  (void)cudaGetLastError();
}

void cuda_device::synchronize(stream_ref s) {
  detail::check_not_in_host_function("synchronize");
  device_guard g(ordinal_);
  HTP_CUDA_CHECK(cudaStreamSynchronize(native(s)));
}

event_ref cuda_device::create_event() {
  detail::check_not_in_host_function("create_event");
  device_guard g(ordinal_);
  cudaEvent_t e = nullptr;
  // No timing (cheaper to record); a host thread waiting on it sleeps instead of spinning a core
  // (see docs/transfer_engine.md, "Host waits").
  HTP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync));
  return event_ref{e};
}

event_ref cuda_device::create_timed_event() {
  detail::check_not_in_host_function("create_timed_event");
  device_guard g(ordinal_);
  cudaEvent_t e = nullptr;
  HTP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventBlockingSync));
  std::lock_guard lock(timed_mutex_);
  timed_.insert(e);
  return event_ref{e};
}

std::optional<std::chrono::nanoseconds> cuda_device::elapsed(event_ref from, event_ref to) {
  detail::check_not_in_host_function("elapsed");
  {
    // cudaEventElapsedTime answers cudaErrorInvalidResourceHandle both for an event made with
    // cudaEventDisableTiming and for one never recorded; htp tells them apart by its own books,
    // so the first is refused here and the second is "no time yet", as on sim.
    std::lock_guard lock(timed_mutex_);
    HTP_EXPECTS(timed_.count(native(from)) == 1 && timed_.count(native(to)) == 1, invalid_argument,
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

void cuda_device::destroy_event(event_ref e) noexcept {
  if (!e) return;
  {
    std::lock_guard lock(timed_mutex_);
    timed_.erase(native(e));
  }
  device_guard g(ordinal_, std::nothrow);
  if (cudaEventDestroy(native(e)) != cudaSuccess) (void)cudaGetLastError();
}

void cuda_device::record(event_ref e, stream_ref s) {
  detail::check_not_in_host_function("record");
  device_guard g(ordinal_);
  HTP_CUDA_CHECK(cudaEventRecord(native(e), native(s)));
}

void cuda_device::wait(event_ref e, stream_ref s) {
  detail::check_not_in_host_function("wait");
  device_guard g(ordinal_);
  HTP_CUDA_CHECK(cudaStreamWaitEvent(native(s), native(e), 0));
}

bool cuda_device::query(event_ref e) {
  detail::check_not_in_host_function("query");
  const cudaError_t status = cudaEventQuery(native(e));
  if (status == cudaErrorNotReady) return false;
  HTP_CUDA_CHECK(status);
  return true;
}

void cuda_device::synchronize(event_ref e) {
  detail::check_not_in_host_function("synchronize");
  HTP_CUDA_CHECK(cudaEventSynchronize(native(e)));
}

void cuda_device::synchronize_all() {
  detail::check_not_in_host_function("synchronize_all");
  device_guard g(ordinal_);
  HTP_CUDA_CHECK(cudaDeviceSynchronize());
  scratch_.reclaim_retired();  // no replay of a destroyed graph can be running now
}

bool cuda_device::overlaps_pinned_allocation(const void* ptr, std::size_t bytes) const {
  const auto lo = reinterpret_cast<std::uintptr_t>(ptr);
  bool hit = false;
  allocations_.for_each([&](void* p, const detail::allocation_registry::entry& a) {
    const auto start = reinterpret_cast<std::uintptr_t>(p);
    if (a.kind == memory_kind::pinned_host && start < lo + bytes && lo < start + a.bytes)
      hit = true;
  });
  return hit;
}

std::string cuda_device::allocation_failure(memory_kind kind, std::size_t bytes) const {
  if (kind == memory_kind::pinned_host) {
    return detail::concat("cuda device ", ordinal_, ": cannot allocate ", bytes,
                          " bytes of pinned host memory (", cuda::host_memory_facts(),
                          "). Lower the host budget or free host RAM (and check the locked-memory "
                          "limit).");
  }
  std::size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
  return detail::concat("cuda device ", ordinal_, ": cannot allocate ", bytes,
                        " bytes of device memory (GPU reports ", free_b, " of ", total_b,
                        " bytes free). Lower the budget or free memory held by other processes.");
}

std::string cuda_device::registration_failure(cudaError_t e, const void* ptr, std::size_t bytes,
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

}  // namespace cuda

namespace detail {

std::unique_ptr<device> make_cuda_device(int ordinal) {
  cuda::widen_hardware_queues();
  std::string why;
  const int n = cuda_device_count(&why);
  HTP_EXPECTS(ordinal >= 0 && ordinal < n, invalid_argument, "no CUDA GPU with ordinal ", ordinal,
              ": ", n == 0 ? why : detail::concat(n, " visible"));
  return std::make_unique<cuda::cuda_device>(ordinal);
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

void make_current_device(int ordinal) { HTP_CUDA_TRY(cudaSetDevice(ordinal)); }

bool built_with_cuda() noexcept { return true; }

}  // namespace detail
}  // namespace htp
