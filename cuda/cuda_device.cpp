// The cuda backend: htp::device over the CUDA runtime. Every call is checked (HTP_CUDA_TRY) and
// made with this device's ordinal current, so any host thread may use it.
#include <htp/detail/allocation_registry.hpp>
#include <htp/detail/check.hpp>
#include <htp/detail/cuda_backend.hpp>

#include "cuda_kernels.hpp"

#include <cuda.h>  // types of the driver entry points only; nothing links libcuda
#include <cuda_runtime.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

namespace htp {
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

cudaStream_t native(stream_ref s) { return static_cast<cudaStream_t>(s.native); }
cudaEvent_t native(event_ref e) { return static_cast<cudaEvent_t>(e.native); }

class cuda_device final : public device {
 public:
  explicit cuda_device(int ordinal) : ordinal_(ordinal) {
    HTP_CUDA_TRY(cudaSetDevice(ordinal_));
    cudaDeviceProp p{};
    HTP_CUDA_TRY(cudaGetDeviceProperties(&p, ordinal_));
    props_.kind = backend::cuda;
    props_.ordinal = ordinal_;
    props_.name = p.name;
    props_.total_memory = p.totalGlobalMem;
    props_.copy_engines = p.asyncEngineCount;
    props_.compute_capability_major = p.major;
    props_.compute_capability_minor = p.minor;
    props_.can_map_host_memory = p.canMapHostMemory != 0;
    HTP_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&lowest_priority_, &greatest_priority_));
    load_stream_memops();
  }

  ~cuda_device() override {
    // Tolerate the CUDA runtime shutting down first: ignore every status here.
    std::lock_guard lock(memory_mutex_);
    allocations_.for_each([](void* p, const detail::allocation_registry::entry& a) {
      if (a.kind == memory_kind::device) {
        (void)cudaFree(p);
      } else {
        (void)cudaFreeHost(p);
      }
    });
  }

  const device_properties& properties() const noexcept override { return props_; }

  memory_info memory() const override {
    current();
    memory_info m;
    HTP_CUDA_TRY(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
    return m;
  }

  void* allocate(memory_kind kind, std::size_t bytes) override {
    HTP_EXPECTS(bytes > 0, invalid_argument, "allocate(", to_string(kind),
                ", 0 bytes): a request must be at least one byte");
    current();
    void* p = nullptr;
    cudaError_t e = kind == memory_kind::device
                        ? cudaMalloc(&p, bytes)
                        : cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      std::size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      throw out_of_memory(
          detail::concat("cuda device ", ordinal_, ": cannot allocate ", bytes, " bytes of ",
                         to_string(kind), " memory (GPU reports ", free_b, " of ", total_b,
                         " bytes free). Lower the budget or free memory held by other processes."),
          bytes);
    }
    HTP_CUDA_TRY(e);
    std::lock_guard lock(memory_mutex_);
    allocations_.add(p, bytes, kind);
    return p;
  }

  void deallocate(memory_kind kind, void* ptr, std::size_t bytes) override {
    {
      std::lock_guard lock(memory_mutex_);
      allocations_.remove(kind, ptr, bytes);
    }
    current();
    if (kind == memory_kind::device) {
      HTP_CUDA_TRY(cudaFree(ptr));
    } else {
      HTP_CUDA_TRY(cudaFreeHost(ptr));
    }
  }

  void* mapped_device_pointer(void* pinned_host_ptr) const override {
    {
      std::lock_guard lock(memory_mutex_);
      const auto* a = allocations_.find_containing(pinned_host_ptr, 1);
      HTP_EXPECTS(a != nullptr && a->kind == memory_kind::pinned_host, invalid_argument,
                  "mapped_device_pointer(", pinned_host_ptr,
                  "): not inside pinned host memory allocated from this device");
    }
    current();
    void* d = nullptr;
    HTP_CUDA_TRY(cudaHostGetDevicePointer(&d, pinned_host_ptr, 0));
    return d;
  }

  stream_ref create_stream(stream_priority priority) override {
    current();
    cudaStream_t s = nullptr;
    const int prio = priority == stream_priority::high ? greatest_priority_ : lowest_priority_;
    HTP_CUDA_TRY(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, prio));
    return stream_ref{s};
  }

  void destroy_stream(stream_ref s) noexcept override {
    if (!s) return;
    (void)cudaSetDevice(ordinal_);
    (void)cudaStreamSynchronize(native(s));
    (void)cudaStreamDestroy(native(s));
  }

  void synchronize(stream_ref s) override {
    current();
    HTP_CUDA_TRY(cudaStreamSynchronize(native(s)));
  }

  event_ref create_event() override {
    current();
    cudaEvent_t e = nullptr;
    HTP_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return event_ref{e};
  }

  void destroy_event(event_ref e) noexcept override {
    if (e) (void)cudaEventDestroy(native(e));
  }

  void record(event_ref e, stream_ref s) override {
    current();
    HTP_CUDA_TRY(cudaEventRecord(native(e), native(s)));
  }

  void wait(event_ref e, stream_ref s) override {
    current();
    HTP_CUDA_TRY(cudaStreamWaitEvent(native(s), native(e), 0));
  }

  bool query(event_ref e) override {
    const cudaError_t status = cudaEventQuery(native(e));
    if (status == cudaErrorNotReady) return false;
    HTP_CUDA_TRY(status);
    return true;
  }

  void synchronize(event_ref e) override { HTP_CUDA_TRY(cudaEventSynchronize(native(e))); }

  void copy_async(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                  stream_ref s) override {
    HTP_EXPECTS(dst != nullptr && src != nullptr, invalid_argument, "copy_async(", dst, ", ", src,
                ", ", bytes, ", ", to_string(direction),
                "): source and destination must be non-null");
    HTP_EXPECTS(bytes > 0, invalid_argument, "copy_async(", dst, ", ", src,
                ", 0 bytes): a copy must move at least one byte");
    const auto* a = static_cast<const char*>(dst);
    const auto* b = static_cast<const char*>(src);
    HTP_EXPECTS(a + bytes <= b || b + bytes <= a, invalid_argument, "copy_async(", dst, ", ", src,
                ", ", bytes, "): source and destination overlap");
    current();
    HTP_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, to_cuda(direction), native(s)));
  }

  void launch_host_func(std::function<void()> fn, stream_ref s) override {
    HTP_EXPECTS(static_cast<bool>(fn), invalid_argument, "launch_host_func: empty function");
    current();
    auto owned = std::make_unique<std::function<void()>>(std::move(fn));
    HTP_CUDA_TRY(cudaLaunchHostFunc(native(s), &cuda_device::trampoline, owned.get()));
    owned.release();  // the trampoline deletes it after running
  }

  void checksum_async(const void* ptr, std::size_t bytes, std::uint64_t* result,
                      stream_ref s) override {
    HTP_EXPECTS(ptr != nullptr && result != nullptr && bytes > 0, invalid_argument,
                "checksum_async(", ptr, ", ", bytes, ", ", result,
                "): pointers must be non-null and bytes positive");
    current();
    HTP_CUDA_TRY(cuda::launch_checksum(ptr, bytes, result, native(s)));
  }

  void fill_pattern_async(void* ptr, std::size_t bytes, std::uint64_t seed,
                          stream_ref s) override {
    HTP_EXPECTS(ptr != nullptr && bytes > 0, invalid_argument, "fill_pattern_async(", ptr, ", ",
                bytes, "): pointer must be non-null and bytes positive");
    current();
    HTP_CUDA_TRY(cuda::launch_fill_pattern(ptr, bytes, seed, native(s)));
  }

  void write_value_async(std::uint32_t* word, std::uint32_t value, stream_ref s) override {
    current();
    check_driver(write_value32_(native(s), device_address(word), value, 0 /*DEFAULT*/),
                 "cuStreamWriteValue32");
  }

  void wait_value_async(const std::uint32_t* word, std::uint32_t value, stream_ref s) override {
    current();
    check_driver(wait_value32_(native(s), device_address(word), value, 0 /*GEQ, wrap-safe*/),
                 "cuStreamWaitValue32");
  }

  void write_value(std::uint32_t* word, std::uint32_t value) override {
    // A plain store to mapped pinned memory; the fence makes it visible to the GPU's poll.
    __atomic_store_n(word, value, __ATOMIC_SEQ_CST);
  }

  void synchronize_all() override {
    current();
    HTP_CUDA_TRY(cudaDeviceSynchronize());
  }

 private:
  static void CUDART_CB trampoline(void* user) {
    std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(user));
    try {
      (*fn)();
    } catch (...) {
      // A throw cannot cross the CUDA runtime's callback thread; the contract says fn must not.
    }
  }

  void current() const { HTP_CUDA_TRY(cudaSetDevice(ordinal_)); }

  CUdeviceptr device_address(const std::uint32_t* word) const {
    void* d = mapped_device_pointer(const_cast<std::uint32_t*>(word));
    return reinterpret_cast<CUdeviceptr>(d);
  }

  static void check_driver(CUresult r, const char* call) {
    if (r != CUDA_SUCCESS) {
      throw cuda_error(static_cast<int>(r), detail::concat("CUresult ", static_cast<int>(r)), call,
                       __FILE__, __LINE__, "stream memory operation failed");
    }
  }

  /// The driver's stream memory operations, looked up at run time so htp links no libcuda.
  void load_stream_memops() {
    cudaDriverEntryPointQueryResult found{};
    void* fn = nullptr;
    HTP_CUDA_TRY(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000,
                                                  cudaEnableDefault, &found));
    HTP_EXPECTS(found == cudaDriverEntryPointSuccess && fn != nullptr, invalid_argument,
                "the CUDA driver has no cuStreamWaitValue32; update the driver to 12.0 or later");
    wait_value32_ = reinterpret_cast<memop_fn>(fn);
    HTP_CUDA_TRY(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000,
                                                  cudaEnableDefault, &found));
    HTP_EXPECTS(found == cudaDriverEntryPointSuccess && fn != nullptr, invalid_argument,
                "the CUDA driver has no cuStreamWriteValue32; update the driver to 12.0 or later");
    write_value32_ = reinterpret_cast<memop_fn>(fn);
  }

  using memop_fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  memop_fn wait_value32_ = nullptr;
  memop_fn write_value32_ = nullptr;

  int ordinal_;
  device_properties props_;
  int lowest_priority_ = 0;
  int greatest_priority_ = 0;
  mutable std::mutex memory_mutex_;
  detail::allocation_registry allocations_;
};

}  // namespace

namespace detail {

namespace {
/// Streams blocked on a value word (cuStreamWaitValue32) stall whatever shares their hardware
/// queue. The default of 8 queues makes that likely once a runner has a few compute streams beside
/// htp's two; 32 (the maximum) makes false dependencies between streams rare. Read when the CUDA
/// context is created, so it is set before the first runtime call; a user's setting wins.
void widen_hardware_queues() noexcept { setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0); }
}  // namespace

std::unique_ptr<device> make_cuda_device(int ordinal) {
  widen_hardware_queues();
  std::string why;
  const int n = cuda_device_count(&why);
  HTP_EXPECTS(ordinal >= 0 && ordinal < n, invalid_argument, "no CUDA GPU with ordinal ", ordinal,
              ": ", n == 0 ? why : detail::concat(n, " visible"));
  return std::make_unique<cuda_device>(ordinal);
}

int cuda_device_count(std::string* why) noexcept {
  widen_hardware_queues();
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) {
      *why = detail::concat("the CUDA runtime found no usable GPU (", cudaGetErrorName(e), ": ",
                            cudaGetErrorString(e), ")");
    }
    return 0;
  }
  if (n == 0 && why) *why = "the CUDA runtime reports 0 GPUs";
  return n;
}

bool built_with_cuda() noexcept { return true; }

}  // namespace detail
}  // namespace htp
