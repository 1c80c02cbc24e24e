// A scope in which one CUDA device is current on the calling thread, restoring the caller's device
// on exit, so that htp never changes which device the host program's thread has current.
#pragma once

#include <htp/detail/check.hpp>

#include <cuda_runtime.h>

#include <new>

namespace htp::cuda {

/// Makes `ordinal` the current device of this thread for the guard's lifetime (cudaSetDevice only
/// when it differs), then restores the device that was current before. Not copyable or movable.
class device_guard {
 public:
  /// @throws htp::cuda_error if the current device cannot be read or set.
  explicit device_guard(int ordinal) {
    HTP_CUDA_TRY(cudaGetDevice(&previous_));
    if (previous_ != ordinal) {
      HTP_CUDA_TRY(cudaSetDevice(ordinal));
      switched_ = true;
    }
  }

  /// The non-throwing form for teardown paths: failures are ignored (the calls then run on
  /// whatever device is current, as they would have before the guard existed).
  device_guard(int ordinal, std::nothrow_t) noexcept {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (previous_ != ordinal) {
      switched_ = cudaSetDevice(ordinal) == cudaSuccess;
      if (!switched_) (void)cudaGetLastError();
    }
  }

  ~device_guard() {
    if (switched_ && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
  }

  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace htp::cuda
