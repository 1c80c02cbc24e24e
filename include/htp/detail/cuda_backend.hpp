// Entry points of the cuda backend (cuda/), declared without CUDA headers so that src/ can reach
// them. When htp is built without CUDA, src/device/no_cuda.cpp defines them to report that.
#pragma once

#include <htp/device.hpp>

#include <memory>
#include <string>

namespace htp::detail {

/// Creates the cuda device for `ordinal`. @throws htp::invalid_argument if there is no such GPU.
std::unique_ptr<device> make_cuda_device(int ordinal);

/// Whether the cuda backend can run here, and if not, why and what to do.
struct cuda_probe {
  int count = 0;          ///< visible GPUs; 0 when the backend cannot run.
  int code = 0;           ///< the cudaError_t that said so (100, cudaErrorNoDevice, for 0 GPUs).
  std::string code_name;  ///< its name ("cudaErrorInsufficientDriver", ...).
  std::string why;        ///< a sentence: what failed.
  std::string remedy;     ///< a sentence: what the caller can do about it.
};

/// Probes the CUDA runtime once per call. Never throws.
cuda_probe probe_cuda() noexcept;

/// Number of visible CUDA devices; 0 with a reason in `why` when none.
int cuda_device_count(std::string* why) noexcept;

/// Saves the calling thread's current CUDA device and makes it current again on destruction, for
/// code outside cuda/ that calls a CUDA library (NCCL) which may switch devices. Does nothing
/// without CUDA. Never throws.
class restore_current_device {
 public:
  restore_current_device() noexcept;
  ~restore_current_device();
  restore_current_device(const restore_current_device&) = delete;
  restore_current_device& operator=(const restore_current_device&) = delete;

 private:
  int device_ = -1;  ///< -1: nothing to restore
};

/// Makes GPU `ordinal` the calling thread's current CUDA device (cudaSetDevice), for code outside
/// cuda/ that calls a CUDA library (NCCL) which works on the current device; pair it with a
/// restore_current_device. @throws htp::cuda_error if CUDA refuses; htp::invalid_argument in a
/// build without CUDA.
void make_current_device(int ordinal);

/// True when this build of htp contains the cuda backend.
bool built_with_cuda() noexcept;

}  // namespace htp::detail
