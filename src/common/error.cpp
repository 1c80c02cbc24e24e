#include <htp/detail/check.hpp>
#include <htp/detail/host_function.hpp>
#include <htp/error.hpp>

#include <cstdint>
#include <utility>

namespace htp {

out_of_memory::out_of_memory(std::string message, std::size_t requested_bytes)
    : message_(std::move(message)), requested_bytes_(requested_bytes) {}

cuda_error::cuda_error(int code, std::string name, std::string call, std::string file, int line,
                       std::string detail)
    : std::runtime_error(detail::concat("CUDA error ", name, " (", code, "): ", detail, " in ",
                                        call, " at ", file, ":", line)),
      code_(code), name_(std::move(name)) {}

io_error::io_error(std::string message, std::string path, int error_number)
    : std::runtime_error(std::move(message)), path_(std::move(path)), error_number_(error_number) {}

bool cuda_error::is_sticky() const noexcept {
  // The errors after which the context is corrupt and every later call fails the same way, by
  // their runtime names (cudaError_t) and by their driver names (CUresult, from the stream memory
  // operations, which the cuda backend calls through the driver).
  static constexpr const char* sticky[] = {
      "cudaErrorIllegalAddress",
      "CUDA_ERROR_ILLEGAL_ADDRESS",
      "cudaErrorLaunchFailure",
      "CUDA_ERROR_LAUNCH_FAILED",
      "cudaErrorHardwareStackError",
      "CUDA_ERROR_HARDWARE_STACK_ERROR",
      "cudaErrorIllegalInstruction",
      "CUDA_ERROR_ILLEGAL_INSTRUCTION",
      "cudaErrorMisalignedAddress",
      "CUDA_ERROR_MISALIGNED_ADDRESS",
      "cudaErrorInvalidAddressSpace",
      "CUDA_ERROR_INVALID_ADDRESS_SPACE",
      "cudaErrorInvalidPc",
      "CUDA_ERROR_INVALID_PC",
      "cudaErrorAssert",
      "CUDA_ERROR_ASSERT",
      "cudaErrorECCUncorrectable",
      "CUDA_ERROR_ECC_UNCORRECTABLE",
      "cudaErrorLaunchTimeout",
      "CUDA_ERROR_LAUNCH_TIMEOUT",
  };
  for (const char* s : sticky) {
    if (name_ == s) return true;
  }
  return false;
}

namespace detail {

void throw_cuda_error(int code, const char* name, const char* description, const char* call,
                      const char* file, int line) {
  constexpr int cuda_error_memory_allocation = 2;  // cudaErrorMemoryAllocation
  if (code == cuda_error_memory_allocation) {
    throw out_of_memory(concat("CUDA could not allocate memory: ", call, " at ", file, ":", line,
                               ". Lower the tier budget or free memory held by other processes."),
                        0);
  }
  throw cuda_error(code, name, call, file, line, description);
}

void check_copy_args(const void* dst, const void* src, std::size_t bytes, const char* direction) {
  HTP_EXPECTS(dst != nullptr && src != nullptr, invalid_argument, "copy_async(", dst, ", ", src,
              ", ", bytes, ", ", direction, "): source and destination must be non-null");
  HTP_EXPECTS(bytes > 0, invalid_argument, "copy_async(", dst, ", ", src,
              ", 0 bytes): a copy must move at least one byte");
  const auto* a = static_cast<const char*>(dst);
  const auto* b = static_cast<const char*>(src);
  HTP_EXPECTS(a + bytes <= b || b + bytes <= a, invalid_argument, "copy_async(", dst, ", ", src,
              ", ", bytes, "): source and destination overlap");
}

void check_stream_handle(const void* native, const char* who) {
  const auto v = reinterpret_cast<std::uintptr_t>(native);
  if (v > 2) return;
  const char* what = v == 0 ? "a null stream_ref"
                     : v == 1
                         ? "cudaStreamLegacy (the legacy default stream)"
                         : "cudaStreamPerThread (a different real stream on every host thread)";
  throw invalid_argument(concat(
      who, ": ", what,
      " cannot be used as an htp stream: htp keys per-stream state by "
      "the handle and orders work on one real stream. Create a stream (device::create_stream, or "
      "cudaStreamCreateWithFlags(..., cudaStreamNonBlocking) and htp::wrap_stream) and pass it"));
}

namespace {
thread_local int host_function_depth = 0;  // host_function_scope()s open on this thread
}  // namespace

host_function_scope::host_function_scope() noexcept { ++host_function_depth; }
host_function_scope::~host_function_scope() { --host_function_depth; }

void check_not_in_host_function(const char* call) {
  if (host_function_depth == 0) return;
  throw logic_error(concat(
      "device::", call,
      " was called from a host function queued with launch_host_func: a host function must not "
      "call into the device (CUDA forbids runtime calls from stream callbacks: "
      "cudaErrorNotPermitted, or a deadlock when the call waits on the callback's own stream). "
      "Signal a host thread from the host function and make the call there"));
}

}  // namespace detail
}  // namespace htp
