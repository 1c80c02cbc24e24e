// The non-inline part of include/htp/cuda_interop.hpp.
#include <htp/cuda_interop.hpp>
#include <htp/detail/check.hpp>
#include <htp/detail/cuda_backend.hpp>

namespace htp {

std::unique_ptr<device> make_cuda_device(int ordinal) {
  const detail::cuda_probe p = detail::probe_cuda();
  if (p.count == 0) {
    throw cuda_error(p.code, p.code_name, "htp::make_cuda_device", __FILE__, __LINE__,
                     detail::concat("the cuda backend cannot run: ", p.why, ". ", p.remedy));
  }
  HTP_EXPECTS(ordinal >= 0 && ordinal < p.count, invalid_argument, "make_cuda_device: GPU ordinal ",
              ordinal, " does not exist: ", p.count, " visible (0..", p.count - 1, ")");
  return detail::make_cuda_device(ordinal);
}

}  // namespace htp
