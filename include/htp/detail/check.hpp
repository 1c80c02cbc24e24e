// The check macros: one place that turns a failed condition or a failed CUDA call into a typed
// htp exception with file and line. HTP_CUDA_TRY expands to CUDA runtime calls, so it may only be
// used in files under cuda/; this header itself includes no CUDA header. Messages are built by
// concat, whose formatting lives in src/common/check.cpp: this header includes no fmt, so the many
// files that use the macros do not compile it. For htp's own sources (and its benchmarks and
// tests); it is not installed.
#pragma once

#include <htp/error.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

namespace htp::detail {

// Appends one part of a message to out as fmt's "{}" formats it (src/common/check.cpp): integers in
// decimal, floating point in the shortest form that reads back the same value (fixed notation for
// decimal exponents -4 to 15, else d.ddde+XX), bools as true/false, chars as themselves, strings
// as they are (a null const char* as "(null)"), pointers as 0x and their lowercase hex address.
void append(std::string& out, std::string_view text);
void append(std::string& out, const char* text);
void append(std::string& out, char c);
void append(std::string& out, bool b);
void append(std::string& out, long long v);
void append(std::string& out, unsigned long long v);
void append(std::string& out, float v);
void append(std::string& out, double v);
void append(std::string& out, const void* p);

/// Appends one part of concat's message: picks the append overload fmt's "{}" corresponds to.
/// Pointers other than strings print as addresses, enumerations as their numbers, signed and
/// unsigned char as numbers (as fmt does), char as a character.
template <typename T>
void append_part(std::string& out, const T& part) {
  if constexpr (std::is_same_v<T, bool>) {
    append(out, part);
  } else if constexpr (std::is_same_v<T, char>) {
    append(out, part);
  } else if constexpr (std::is_enum_v<T>) {
    append_part(out, static_cast<std::underlying_type_t<T>>(part));
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    append(out, static_cast<long long>(part));
  } else if constexpr (std::is_integral_v<T>) {
    append(out, static_cast<unsigned long long>(part));
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    append(out, part);
  } else if constexpr (std::is_array_v<T> &&
                       std::is_same_v<std::remove_cv_t<std::remove_extent_t<T>>, char>) {
    append(out, static_cast<const char*>(part));
  } else if constexpr (std::is_pointer_v<T> &&
                       std::is_same_v<std::remove_cv_t<std::remove_pointer_t<T>>, char>) {
    append(out, static_cast<const char*>(part));
  } else if constexpr (std::is_pointer_v<T> && std::is_object_v<std::remove_pointer_t<T>>) {
    append(out, static_cast<const void*>(part));
  } else if constexpr (std::is_pointer_v<T> && std::is_void_v<std::remove_pointer_t<T>>) {
    append(out, static_cast<const void*>(part));
  } else if constexpr (std::is_null_pointer_v<T>) {
    append(out, static_cast<const void*>(nullptr));
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    append(out, std::string_view(part));
  } else {
    static_assert(sizeof(T) == 0, "concat: no message format for this type (add one to check.hpp)");
  }
}

/// Builds a message from parts, each formatted as fmt's "{}" formats it, written one after the
/// other: concat("bytes=", n, " exceeds ", cap) == fmt::format("bytes={} exceeds {}", n, cap).
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::string out;
  (append_part(out, parts), ...);
  return out;
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

/// The checks both backends make of copy_async's arguments before anything is queued: non-null
/// pointers, at least one byte, no overlap. `direction` names the copy (to_string of it).
/// @throws htp::invalid_argument saying which.
void check_copy_args(const void* dst, const void* src, std::size_t bytes, const char* direction);

}  // namespace htp::detail

/// Throws exception_type (an htp error) with the concatenated message when cond is false.
#define HTP_EXPECTS(cond, exception_type, ...)                             \
  do {                                                                     \
    if (!(cond)) throw exception_type(::htp::detail::concat(__VA_ARGS__)); \
  } while (0)

/// Throws htp::logic_error naming the broken invariant. Always on: checks are cheap and a silent
/// corruption of someone's weights is not.
#define HTP_ASSERT(cond, ...)                                                                   \
  do {                                                                                          \
    if (!(cond))                                                                                \
      throw ::htp::logic_error(::htp::detail::concat("htp invariant broken at ", __FILE__, ":", \
                                                     __LINE__, ": " #cond " ", __VA_ARGS__));   \
  } while (0)

/// Calls a CUDA runtime function and throws htp::cuda_error (or htp::out_of_memory for
/// cudaErrorMemoryAllocation) when it does not return cudaSuccess. Only for files under cuda/.
#define HTP_CUDA_TRY(call)                                                                         \
  do {                                                                                             \
    const cudaError_t htp_status_ = (call);                                                        \
    if (htp_status_ != cudaSuccess) {                                                              \
      (void)cudaGetLastError(); /* clear a non-sticky error so later calls are not poisoned */     \
      ::htp::detail::throw_cuda_error(static_cast<int>(htp_status_),                               \
                                      cudaGetErrorName(htp_status_),                               \
                                      cudaGetErrorString(htp_status_), #call, __FILE__, __LINE__); \
    }                                                                                              \
  } while (0)
