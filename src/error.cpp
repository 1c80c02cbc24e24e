#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <utility>

namespace htp {

out_of_memory::out_of_memory(std::string message, std::size_t requested_bytes)
    : message_(std::move(message)), requested_bytes_(requested_bytes) {}

cuda_error::cuda_error(int code, std::string name, std::string call, std::string file, int line,
                       std::string detail)
    : std::runtime_error(detail::concat("CUDA error ", name, " (", code, "): ", detail, " in ",
                                        call, " at ", file, ":", line)),
      code_(code),
      name_(std::move(name)) {}

bool cuda_error::is_sticky() const noexcept {
  // The errors after which the context is corrupt and every later call fails the same way.
  return name_ == "cudaErrorIllegalAddress" || name_ == "cudaErrorLaunchFailure" ||
         name_ == "cudaErrorHardwareStackError" || name_ == "cudaErrorIllegalInstruction" ||
         name_ == "cudaErrorMisalignedAddress" || name_ == "cudaErrorInvalidAddressSpace" ||
         name_ == "cudaErrorInvalidPc" || name_ == "cudaErrorAssert" ||
         name_ == "cudaErrorECCUncorrectable";
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

}  // namespace detail
}  // namespace htp
