#include <htp/detail/file_checks.hpp>

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

namespace htp::detail {

void check_file_source(const tensor_file* file, std::uint64_t offset, std::size_t bytes,
                       bool timing_only, const std::string& call) {
  HTP_EXPECTS(file != nullptr, invalid_argument, call, ": null file");
  HTP_EXPECTS(bytes > 0, invalid_argument, call,
              ": 0 bytes; a transfer must move at least one byte");
  HTP_EXPECTS(offset <= file->size() && bytes <= file->size() - offset, invalid_argument, call,
              ": ", bytes, " bytes at ", offset, " run past the end of '", file->name(), "' (",
              file->size(), " bytes)");
  HTP_EXPECTS(!timing_only || file->is_modelled(), invalid_argument, call,
              ": the device is timing-only, which stores ",
              "no bytes; use tensor_file::modelled for timing-only runs");
  HTP_EXPECTS(timing_only || !file->is_modelled(), invalid_argument, call, ": '", file->name(),
              "' is a modelled file, which holds no bytes; on a device that stores them its "
              "page-ins would load "
              "garbage. Open a real file (tensor_file::open) or use a timing-only device");
}

}  // namespace htp::detail
