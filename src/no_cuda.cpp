// Stand-ins for the cuda backend in a build without the CUDA toolkit (HTP_WITH_CUDA=OFF).
#include <htp/detail/check.hpp>
#include <htp/detail/cuda_backend.hpp>

namespace htp::detail {

std::unique_ptr<device> make_cuda_device(int) {
  throw invalid_argument(
      "the cuda backend is not in this build of htp (configured with HTP_WITH_CUDA=OFF); "
      "rebuild with the CUDA toolkit, or use backend::sim");
}

int cuda_device_count(std::string* why) noexcept {
  if (why) *why = "htp was built without CUDA (HTP_WITH_CUDA=OFF)";
  return 0;
}

bool built_with_cuda() noexcept { return false; }

}  // namespace htp::detail
