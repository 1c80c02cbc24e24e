// The check macros: one place that turns a failed condition or a failed CUDA call into a typed
// htp exception with file and line. HTP_CUDA_TRY expands to CUDA runtime calls, so it may only be
// used in files under cuda/; this header itself includes no CUDA header. Messages are formatted
// by fmt, so this header is for htp's own sources (and its benchmarks), never a public header.
#pragma once

#include <htp/error.hpp>

#include <fmt/format.h>

#include <iterator>
#include <string>
#include <type_traits>

namespace htp::detail {

/// What fmt formats for one part of a message: pointers (other than strings) as addresses and
/// enumerations as their numbers, everything else as it is.
template <typename T>
decltype(auto) message_part(const T& part) {
  if constexpr (std::is_pointer_v<T> &&
                !std::is_same_v<std::remove_cv_t<std::remove_pointer_t<T>>, char>) {
    return static_cast<const void*>(part);
  } else if constexpr (std::is_enum_v<T>) {
    return static_cast<std::underlying_type_t<T>>(part);
  } else {
    return (part);
  }
}

/// Builds a message from parts, each formatted by fmt as "{}" formats it, written one after the
/// other: concat("bytes=", n, " exceeds ", cap) == fmt::format("bytes={} exceeds {}", n, cap).
template <typename... Parts>
std::string concat(const Parts&... parts) {
  fmt::memory_buffer out;
  (fmt::format_to(std::back_inserter(out), "{}", message_part(parts)), ...);
  return fmt::to_string(out);
}

[[noreturn]] void throw_cuda_error(int code, const char* name, const char* description,
                                   const char* call, const char* file, int line);

/// Refuses the stream handles that name no single stream: null, the legacy default stream (1) and
/// cudaStreamPerThread (2), which is a different real stream on every host thread, so htp's
/// per-stream state (checksum slots, "a later release on the same stream supersedes") would mix up
/// threads. Both backends and the pager's acquire and release call it, so sim refuses what cuda
/// refuses, before anything changes. `who` names the caller in the message.
/// @throws htp::invalid_argument naming the handle and what to pass instead.
void check_stream_handle(const void* native, const char* who);

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
