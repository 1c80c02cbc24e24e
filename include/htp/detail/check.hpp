// The check macros: one place that turns a failed condition or a failed CUDA call into a typed
// htp exception with file and line. HTP_CUDA_TRY expands to CUDA runtime calls, so it may only be
// used in files under cuda/; this header itself includes no CUDA header.
#pragma once

#include <htp/error.hpp>

#include <sstream>
#include <string>

namespace htp::detail {

/// Builds a message from stream-insertable parts: concat("bytes=", n, " exceeds ", cap).
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

[[noreturn]] void throw_cuda_error(int code, const char* name, const char* description,
                                   const char* call, const char* file, int line);

}  // namespace htp::detail

/// Throws exception_type (an htp error) with the concatenated message when cond is false.
#define HTP_EXPECTS(cond, exception_type, ...)                        \
  do {                                                                \
    if (!(cond)) throw exception_type(::htp::detail::concat(__VA_ARGS__)); \
  } while (0)

/// Throws htp::logic_error naming the broken invariant. Always on: checks are cheap and a silent
/// corruption of someone's weights is not.
#define HTP_ASSERT(cond, ...)                                                                 \
  do {                                                                                        \
    if (!(cond))                                                                              \
      throw ::htp::logic_error(::htp::detail::concat("htp invariant broken at ", __FILE__, ":", \
                                                     __LINE__, ": " #cond " ", __VA_ARGS__)); \
  } while (0)

/// Calls a CUDA runtime function and throws htp::cuda_error (or htp::out_of_memory for
/// cudaErrorMemoryAllocation) when it does not return cudaSuccess. Only for files under cuda/.
#define HTP_CUDA_TRY(call)                                                                    \
  do {                                                                                        \
    const cudaError_t htp_status_ = (call);                                                   \
    if (htp_status_ != cudaSuccess) {                                                         \
      (void)cudaGetLastError(); /* clear a non-sticky error so later calls are not poisoned */ \
      ::htp::detail::throw_cuda_error(static_cast<int>(htp_status_),                          \
                                      cudaGetErrorName(htp_status_),                          \
                                      cudaGetErrorString(htp_status_), #call, __FILE__,       \
                                      __LINE__);                                              \
    }                                                                                         \
  } while (0)
