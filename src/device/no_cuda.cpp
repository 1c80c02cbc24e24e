// Stand-ins for the cuda backend in a build without the CUDA toolkit (HTP_WITH_CUDA=OFF).
#include <htp/detail/check.hpp>
#include <htp/detail/cuda_backend.hpp>

#include "nvtx_range.hpp"

namespace htp::detail {

std::unique_ptr<device> make_cuda_device(int) {
  throw invalid_argument(
      "the cuda backend is not in this build of htp (configured with HTP_WITH_CUDA=OFF); "
      "rebuild with the CUDA toolkit, or use backend::sim");
}

cuda_probe probe_cuda() noexcept {
  cuda_probe p;
  p.code = 100;  // cudaErrorNoDevice: as far as this build can tell, there is none
  p.code_name = "cudaErrorNoDevice";
  p.why = "htp was built without CUDA (HTP_WITH_CUDA=OFF)";
  p.remedy = "Rebuild htp with the CUDA toolkit installed (HTP_WITH_CUDA=ON)";
  return p;
}

int cuda_device_count(std::string* why) noexcept {
  const cuda_probe p = probe_cuda();
  if (why) *why = p.why;
  return 0;
}

// Without CUDA there is no current device to keep.
restore_current_device::restore_current_device() noexcept = default;
restore_current_device::~restore_current_device() { (void)device_; }

void make_current_device(int) {
  throw invalid_argument("the cuda backend is not in this build of htp (HTP_WITH_CUDA=OFF)");
}

bool built_with_cuda() noexcept { return false; }

}  // namespace htp::detail

namespace htp::detail {

// No CUDA toolkit, no NVTX: the ranges cost a call.
void nvtx_push(const char*) noexcept {}
void nvtx_pop() noexcept {}

}  // namespace htp::detail
