// htp's exception types. Every error htp reports is one of these; each message says what was wrong
// and what the caller can do about it.
//
// Each public call's comment lists the types it throws ("Never throws." for none). Besides them,
// any call that allocates host memory may throw std::bad_alloc when the process itself runs out.
// The constructors below never throw but std::bad_alloc.
#pragma once

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>

namespace htp {

/// A memory tier (HBM or pinned host) could not satisfy a request. Derives from std::bad_alloc so
/// callers that already catch allocation failures keep working; what() carries the full diagnostic
/// (bytes requested, tier, used/free, fragmentation, largest free extent, remedy).
class out_of_memory : public std::bad_alloc {
 public:
  /// @param message the full diagnostic; @param requested_bytes the request that failed.
  out_of_memory(std::string message, std::size_t requested_bytes);
  const char* what() const noexcept override { return message_.c_str(); }
  /// Bytes of the request that failed.
  std::size_t requested_bytes() const noexcept { return requested_bytes_; }

 private:
  std::string message_;
  std::size_t requested_bytes_;
};

/// A call into the CUDA runtime failed. Carries the CUDA error code and name, the call and where it
/// was made. A sticky error (illegal address, launch failure) leaves the CUDA context unusable; the
/// error says so via is_sticky().
class cuda_error : public std::runtime_error {
 public:
  cuda_error(int code, std::string name, std::string call, std::string file, int line,
             std::string detail);
  /// The cudaError_t value.
  int code() const noexcept { return code_; }
  /// Symbolic name, e.g. "cudaErrorInvalidValue".
  const std::string& name() const noexcept { return name_; }
  /// True for errors after which the CUDA context cannot be used again.
  bool is_sticky() const noexcept;

 private:
  int code_;
  std::string name_;
};

/// A file or operating-system call failed: reading a tensor's file (it ended early, the disk
/// failed), writing a trace or dump. Carries the system's error number (0 when there is none,
/// e.g. a file that ended early) and the path involved (empty when not known); what() says what
/// was being done, on which file, the system's reason and what to do. Nothing about the device is
/// implied: the object the call was made on is as it was before the call.
class io_error : public std::runtime_error {
 public:
  /// @param message the full diagnostic; @param path the file involved ("" if unknown);
  /// @param error_number the errno value (0 if none).
  io_error(std::string message, std::string path, int error_number = 0);
  /// The errno value of the failed call, or 0 when the failure has none (a short read).
  int error_number() const noexcept { return error_number_; }
  /// The file involved, or "" when not known.
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  int error_number_;
};

/// The caller passed a value that breaks a documented rule (zero bytes, unknown pointer, stale
/// handle, ...). The object the call was made on is unchanged.
class invalid_argument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// htp itself broke an invariant or was used in a state where the call makes no sense (e.g. a host
/// function on a sim stream threw). Indicates a bug in htp or in how it is driven.
class logic_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// The bytes are not valid data of their format: an htp-coded weight stream (codec.hpp) that is
/// truncated, has a length or offset out of range, a malformed code table or a block whose bits
/// overrun its bytes; a safetensors header (safetensors.hpp) or companion index (companion.hpp)
/// that breaks its format's rules. what() says which check failed and where (the tensor and the
/// field for a header). Nothing was read outside the bytes given; a decode's destination may hold
/// a partial decode. Re-read, re-export or re-encode the source: the bytes cannot be repaired.
class corrupt_data : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace htp
