// The "htp" spdlog logger behind include/htp/log.hpp. Only .cpp files of htp include this (spdlog
// never reaches a public header). Use: detail::logger().info("... {}", x).
#pragma once

#include <spdlog/logger.h>

namespace htp::detail {

/// htp's logger: created on first use with a sink to stderr (or the caller's, set_log_sink) and the
/// level of HTP_LOG_LEVEL. Thread-safe.
spdlog::logger& logger();

}  // namespace htp::detail
