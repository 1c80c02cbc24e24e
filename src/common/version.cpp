#include <htp/version.hpp>

namespace htp {

const char* version() noexcept { return HTP_VERSION_STRING; }

}  // namespace htp
