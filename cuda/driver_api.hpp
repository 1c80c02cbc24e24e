// The few CUDA driver functions the cuda backend calls, looked up at run time through the runtime's
// entry-point query so that htp links no libcuda: the stream memory operations, error names, and
// the primary-context state. Included only by cuda_device.hpp.
#pragma once

#include <htp/detail/check.hpp>

#include <cuda.h>  // types of the driver entry points only; nothing links libcuda
#include <cuda_runtime.h>

#include <string>

namespace htp::cuda {

/// Driver entry points, loaded once per process (driver_api::get()).
struct driver_api {
  using memop_fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  using error_text_fn = CUresult (*)(CUresult, const char**);
  using device_get_fn = CUresult (*)(CUdevice*, int);
  using primary_state_fn = CUresult (*)(CUdevice, unsigned int*, int*);

  memop_fn wait_value32 = nullptr;               ///< cuStreamWaitValue32 (required)
  memop_fn write_value32 = nullptr;              ///< cuStreamWriteValue32 (required)
  error_text_fn get_error_name = nullptr;        ///< cuGetErrorName (optional)
  error_text_fn get_error_string = nullptr;      ///< cuGetErrorString (optional)
  device_get_fn device_get = nullptr;            ///< cuDeviceGet (optional)
  primary_state_fn primary_ctx_state = nullptr;  ///< cuDevicePrimaryCtxGetState (optional)

  /// The process's table, looked up on first use. Initialises the CUDA runtime (no context).
  /// @throws htp::invalid_argument naming the driver update needed if a required entry is missing;
  /// htp::cuda_error if the runtime cannot query entry points at all.
  static const driver_api& get() {
    static const driver_api table = load();
    return table;
  }

  /// "CUDA_ERROR_ILLEGAL_ADDRESS" for 700 and so on; "CUresult N" if the driver has no name for it.
  std::string error_name(CUresult r) const {
    const char* s = nullptr;
    if (get_error_name != nullptr && get_error_name(r, &s) == CUDA_SUCCESS && s != nullptr)
      return s;
    return detail::concat("CUresult ", static_cast<int>(r));
  }

  /// The driver's sentence for `r`, or "" when it has none.
  std::string error_string(CUresult r) const {
    const char* s = nullptr;
    if (get_error_string != nullptr && get_error_string(r, &s) == CUDA_SUCCESS && s != nullptr)
      return s;
    return "";
  }

  /// Whether the primary context of runtime ordinal `ordinal` is active: 1 yes, 0 no, -1 unknown
  /// (the entry points are missing or the driver refused). Creates nothing.
  int primary_context_active(int ordinal) const noexcept {
    if (device_get == nullptr || primary_ctx_state == nullptr) return -1;
    CUdevice d{};
    unsigned int flags = 0;
    int active = 0;
    if (device_get(&d, ordinal) != CUDA_SUCCESS) return -1;
    if (primary_ctx_state(d, &flags, &active) != CUDA_SUCCESS) return -1;
    return active != 0 ? 1 : 0;
  }

 private:
  static void* lookup(const char* symbol, bool required) {
    cudaDriverEntryPointQueryResult found{};
    void* fn = nullptr;
    const cudaError_t e =
        cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &found);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      if (!required) return nullptr;
      detail::throw_cuda_error(static_cast<int>(e), cudaGetErrorName(e), cudaGetErrorString(e),
                               "cudaGetDriverEntryPointByVersion", __FILE__, __LINE__);
    }
    if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
      HTP_EXPECTS(
          !required, invalid_argument, "the CUDA driver has no ", symbol,
          "; update the NVIDIA driver (htp's static CUDA 13 runtime needs driver 580 or later)");
      return nullptr;
    }
    return fn;
  }

  static driver_api load() {
    driver_api d;
    d.wait_value32 = reinterpret_cast<memop_fn>(lookup("cuStreamWaitValue32", true));
    d.write_value32 = reinterpret_cast<memop_fn>(lookup("cuStreamWriteValue32", true));
    d.get_error_name = reinterpret_cast<error_text_fn>(lookup("cuGetErrorName", false));
    d.get_error_string = reinterpret_cast<error_text_fn>(lookup("cuGetErrorString", false));
    d.device_get = reinterpret_cast<device_get_fn>(lookup("cuDeviceGet", false));
    d.primary_ctx_state =
        reinterpret_cast<primary_state_fn>(lookup("cuDevicePrimaryCtxGetState", false));
    return d;
  }
};

/// Throws the typed htp error for a failed driver call: htp::cuda_error named by the driver
/// ("CUDA_ERROR_ILLEGAL_ADDRESS", which cuda_error::is_sticky() recognises), or
/// htp::out_of_memory for CUDA_ERROR_OUT_OF_MEMORY. Clears a non-sticky runtime error first.
[[noreturn]] inline void throw_driver_error(CUresult r, const char* call, const char* file,
                                            int line) {
  (void)cudaGetLastError();
  const driver_api& d = driver_api::get();
  const std::string name = d.error_name(r);
  std::string what = d.error_string(r);
  if (what.empty()) what = "stream memory operation failed";
  detail::throw_cuda_error(static_cast<int>(r), name.c_str(), what.c_str(), call, file, line);
}

}  // namespace htp::cuda

/// Calls a CUDA driver function (through a driver_api pointer) and throws the typed htp error on
/// failure. Only for files under cuda/.
#define HTP_DRIVER_TRY(call)                                                          \
  do {                                                                                \
    const CUresult htp_driver_status_ = (call);                                       \
    if (htp_driver_status_ != CUDA_SUCCESS)                                           \
      ::htp::cuda::throw_driver_error(htp_driver_status_, #call, __FILE__, __LINE__); \
  } while (0)
